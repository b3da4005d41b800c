//! `outboxctl`: operate the booking outbox from a shell, without writing SQL.
//! It reads the same configuration as the functions (`DATABASE_URL`,
//! `SWEEP_STUCK_AFTER_SECS`, ...) and calls the same code.
//!
//! Errors are one line on stderr and a non-zero exit status: 1 for a
//! failure, 2 for wrong arguments.

use std::process::ExitCode;

use outboxctl::{one_line, Cli, Sink};
use shared::db::DbConfig;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match outboxctl::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(outboxctl::Refused::Help(text)) => {
            print!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(outboxctl::Refused::Usage(message)) => {
            eprintln!("outboxctl: error: {message} (see outboxctl --help)");
            return ExitCode::from(2);
        }
    };
    match run(&cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outboxctl: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: &Cli) -> anyhow::Result<()> {
    let pool = DbConfig::from_env().await?.build_pool()?;
    outboxctl::run(cli, &pool, &Sink::stdout()).await
}
