//! `outboxctl`: operate the booking outbox from a shell. It uses the same
//! configuration (`DATABASE_URL`, ...) and code paths as the functions.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shared::db::DbConfig;

#[derive(Parser)]
#[command(name = "outboxctl", version, about = "Operate the booking outbox")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations (under an advisory lock; safe to run concurrently).
    Migrate,
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let pool = DbConfig::from_env()?.build_pool()?;
    match cli.command {
        Command::Migrate => {
            let applied = shared::db::migrate(&pool).await?;
            if applied.is_empty() {
                println!("schema is up to date");
            } else {
                for m in applied {
                    println!("applied {m}");
                }
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outboxctl: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
