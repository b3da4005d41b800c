//! `outboxctl`: operate the booking outbox from a shell, without writing SQL.
//! It reads the same configuration as the functions (`DATABASE_URL`,
//! `SWEEP_STUCK_AFTER_SECS`, ...) and calls the same code.
//!
//! Errors are one line on stderr and a non-zero exit status: 1 for a
//! failure, 2 for wrong arguments.

use std::process::ExitCode;

mod commands;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use shared::booking::events::EventType;
use shared::db::DbConfig;
use shared::outbox::events::transitions::ReplaySelection;
use uuid::Uuid;

#[derive(Parser)]
#[command(name = "outboxctl", version, about = "Operate the booking outbox", disable_help_subcommand = true)]
struct Cli {
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    json: bool,
    /// Who is acting, recorded with replays and resends (default: $USER).
    #[arg(long, global = true, env = "OUTBOXCTL_OPERATOR")]
    operator: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations (advisory lock; safe to run concurrently).
    Migrate,
    /// Outbox lag, stuck rows, dead letters and send outcomes.
    Status,
    /// Dead-lettered events.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Sends whose outcome is unknown (possibly lost emails).
    #[command(subcommand)]
    Unknown(UnknownCommand),
    /// Addresses never mailed again after a permanent bounce or a complaint.
    #[command(subcommand)]
    Suppression(SuppressionCommand),
    /// Reset rows stuck in PROCESSING (what the sweeper does), or show what it would do.
    Sweep {
        /// Only show what would be reset or failed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
enum DeadCommand {
    /// List DEAD events, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Show one DEAD event with its payload and send claims.
    Show { id: Uuid },
    /// Put DEAD events back to PENDING with fresh attempts (recorded).
    Replay(ReplayArgs),
}

#[derive(Args)]
struct ReplayArgs {
    /// Event ids to replay.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    ids: Vec<Uuid>,
    /// Replay every DEAD event (narrow with --type and --since).
    #[arg(long)]
    all: bool,
    /// Only events of this type (with --all).
    #[arg(long = "type", requires = "all", value_parser = parse_event_type)]
    event_type: Option<EventType>,
    /// Only events that died at or after this RFC 3339 time (with --all).
    #[arg(long, requires = "all", value_parser = parse_time)]
    since: Option<DateTime<Utc>>,
    /// Show what would be replayed, and what is skipped, without changing anything.
    #[arg(long)]
    dry_run: bool,
    /// Confirm a replay of --all (see it first with --dry-run).
    #[arg(long, requires = "all")]
    yes: bool,
    /// Refuse to replay more than this many events at once.
    #[arg(long, default_value_t = 100)]
    max: usize,
}

#[derive(Subcommand)]
enum UnknownCommand {
    /// List sends whose outcome is unknown: awaiting SES's evidence (settled
    /// without you), resent on that evidence, or left for an operator, and
    /// why (only those need a decision).
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Also list the ambiguous sends SES's own events confirmed (SENT).
        #[arg(long)]
        confirmed: bool,
    },
    /// Re-send one recipient's email, or every SES send left for an operator
    /// that SES's events have moved past. This may deliver a duplicate; each
    /// decision is recorded.
    Resend(ResendArgs),
}

#[derive(Args)]
struct ResendArgs {
    /// The send id (from `unknown list`).
    #[arg(required_unless_present = "unconfirmed", conflicts_with = "unconfirmed")]
    id: Option<Uuid>,
    /// Every SES send left for an operator that SES's events moved past at
    /// least FEEDBACK_GRACE_SECS ago with none naming it (as the sweeper
    /// resends, without its UNKNOWN_RESENDS_MAX).
    #[arg(long)]
    unconfirmed: bool,
    /// Show what would be resent (with --unconfirmed), changing nothing.
    #[arg(long, requires = "unconfirmed")]
    dry_run: bool,
    /// Resend at most this many (with --unconfirmed).
    #[arg(long, default_value_t = 100, requires = "unconfirmed")]
    max: usize,
    /// Required: you accept that a recipient may get the email twice.
    #[arg(long = "yes-i-accept-a-possible-duplicate", required_unless_present = "dry_run")]
    accept_duplicate: bool,
}

#[derive(Subcommand)]
enum SuppressionCommand {
    /// List suppressed addresses, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Mail this address again (the mailbox was fixed, or the complaint was a mistake).
    Remove { email: String },
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let pool = DbConfig::from_env().await?.build_pool()?;
    let mut client = pool.get().await.context("cannot connect to the database")?;
    let out = commands::Output { json: cli.json };
    match &cli.command {
        Command::Migrate => {
            drop(client);
            commands::migrate(out, &pool).await
        }
        Command::Status => commands::status(out, &client).await,
        Command::Dead(DeadCommand::List { limit }) => commands::dead_list(out, &client, *limit).await,
        Command::Dead(DeadCommand::Show { id }) => commands::dead_show(out, &client, *id).await,
        Command::Dead(DeadCommand::Replay(args)) => {
            let selection = if args.all {
                ReplaySelection::All { event_type: args.event_type.map(|t| t.as_str()), since: args.since }
            } else {
                ReplaySelection::Ids(&args.ids)
            };
            let limits = commands::ReplayLimits { max: args.max, dry_run: args.dry_run };
            commands::dead_replay(out, &mut client, selection, &operator(&cli), limits).await
        }
        Command::Unknown(UnknownCommand::List { limit, confirmed }) => {
            commands::unknown_list(out, &client, *limit, *confirmed).await
        }
        Command::Unknown(UnknownCommand::Resend(args)) => match args.id {
            Some(id) => commands::unknown_resend(out, &mut client, id, &operator(&cli)).await,
            None => {
                let limits = commands::ReplayLimits { max: args.max, dry_run: args.dry_run };
                commands::unknown_resend_unconfirmed(out, &mut client, &operator(&cli), limits).await
            }
        },
        Command::Suppression(SuppressionCommand::List { limit }) => {
            commands::suppression_list(out, &client, *limit).await
        }
        Command::Suppression(SuppressionCommand::Remove { email }) => {
            commands::suppression_remove(out, &client, email, &operator(&cli)).await
        }
        Command::Sweep { dry_run } => commands::sweep(out, &client, *dry_run).await,
    }
}

fn parse_event_type(s: &str) -> Result<EventType, String> {
    s.parse()
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("expected an RFC 3339 time like 2026-11-30T00:00:00Z ({e})"))
}

fn operator(cli: &Cli) -> String {
    cli.operator.clone().or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "unknown-operator".into())
}

/// One line: the error and, when different, its root cause.
fn one_line(e: &anyhow::Error) -> String {
    let top = e.to_string();
    let root = e.root_cause().to_string();
    let line = if root == top || top.contains(&root) { top } else { format!("{top}: {root}") };
    line.replace('\n', " ")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's message without its usage block, on one line.
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let message = message.join(" ");
            let message = message.trim_start_matches("error: ");
            eprintln!("outboxctl: error: {message} (see outboxctl --help)");
            return ExitCode::from(2);
        }
    };
    if let Command::Dead(DeadCommand::Replay(args)) = &cli.command {
        if args.all && !args.dry_run && !args.yes {
            eprintln!(
                "outboxctl: error: dead replay --all needs --yes (look first with --dry-run) (see outboxctl --help)"
            );
            return ExitCode::from(2);
        }
    }
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outboxctl: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}
