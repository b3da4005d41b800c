//! `outboxctl`: operate the booking outbox from a shell, without writing SQL.
//! It reads the same configuration as the functions (`DATABASE_URL`,
//! `SWEEP_STUCK_AFTER_SECS`, ...) and calls the same code.
//!
//! Errors are one line on stderr and a non-zero exit status: 1 for a
//! failure, 2 for wrong arguments.

use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use shared::db::DbConfig;
use shared::notify::unknown;
use shared::outbox::dead_letter::{self, ReplaySelection};
use shared::outbox::events::EventType;
use shared::outbox::sweep::{self, SweeperConfig};
use shared::outbox::status;
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
}

#[derive(Subcommand)]
enum UnknownCommand {
    /// List sends claimed but never confirmed.
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Re-send one recipient's email. This may deliver a duplicate; the
    /// decision is recorded.
    Resend {
        /// The send id (from `unknown list`).
        id: Uuid,
        /// Required: you accept that the recipient may get the email twice.
        #[arg(long = "yes-i-accept-a-possible-duplicate", required = true)]
        accept_duplicate: bool,
    },
}

fn parse_event_type(s: &str) -> Result<EventType, String> {
    s.parse()
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("expected an RFC 3339 time like 2026-11-30T00:00:00Z ({e})"))
}

fn print<T: Serialize>(json: bool, value: &T, human: impl FnOnce(&T)) {
    if json {
        println!("{}", serde_json::to_string_pretty(value).expect("serialisable"));
    } else {
        human(value);
    }
}

fn operator(cli: &Cli) -> String {
    cli.operator.clone().or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "unknown-operator".into())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let pool = DbConfig::from_env().await?.build_pool()?;
    let mut client = pool.get().await.context("cannot connect to the database")?;
    let json = cli.json;
    match &cli.command {
        Command::Migrate => {
            drop(client);
            let applied = shared::db::migrate(&pool).await?;
            print(json, &applied, |a| {
                if a.is_empty() {
                    println!("schema is up to date");
                }
                for m in a {
                    println!("applied {m}");
                }
            });
        }
        Command::Status => {
            let config = SweeperConfig::from_env()?;
            let s = status::fetch(&client, config.stuck_after).await?;
            print(json, &s, |s| {
                let ev = |k: &str| s.events.get(k).copied().unwrap_or(0);
                let sd = |k: &str| s.sends.get(k).copied().unwrap_or(0);
                println!(
                    "events:  PENDING {}  PROCESSING {}  DONE {}  DEAD {}",
                    ev("PENDING"),
                    ev("PROCESSING"),
                    ev("DONE"),
                    ev("DEAD")
                );
                match s.oldest_due_pending_age_secs {
                    Some(age) => println!("oldest due PENDING event: {age:.1}s old"),
                    None => println!("oldest due PENDING event: none"),
                }
                println!(
                    "PROCESSING past the sweep timeout ({}s): {}",
                    config.stuck_after.as_secs(),
                    s.processing_past_sweep_timeout
                );
                println!(
                    "sends:   SENT {}  FAILED {}  UNKNOWN {}  CLAIMED {}",
                    sd("SENT"),
                    sd("FAILED"),
                    sd("UNKNOWN"),
                    sd("CLAIMED")
                );
            });
        }
        Command::Dead(DeadCommand::List { limit }) => {
            let dead = dead_letter::list(&client, *limit).await?;
            print(json, &dead, |dead| {
                if dead.is_empty() {
                    println!("no DEAD events");
                }
                for d in dead {
                    println!(
                        "{}  {}  booking {}  attempts {}  died {}  {}",
                        d.id,
                        d.event_type,
                        d.booking_id,
                        d.attempts,
                        d.died_at.format("%Y-%m-%dT%H:%M:%SZ"),
                        d.last_error.as_deref().unwrap_or("")
                    );
                }
            });
        }
        Command::Dead(DeadCommand::Show { id }) => {
            let detail = dead_letter::show(&client, *id)
                .await?
                .ok_or_else(|| anyhow!("no DEAD event with id {id}"))?;
            print(json, &detail, |d| {
                println!("event      {}", d.event.id);
                println!("type       {}", d.event.event_type);
                println!("booking    {}", d.event.booking_id);
                println!("attempts   {}", d.event.attempts);
                println!("created    {}", d.event.created_at.to_rfc3339());
                println!("died       {}", d.event.died_at.to_rfc3339());
                println!("reason     {}", d.event.last_error.as_deref().unwrap_or("-"));
                println!("replays    {}", d.replays);
                for (to, status) in &d.sends {
                    println!("send       {to}: {status}");
                }
                println!("payload    {}", d.payload);
            });
        }
        Command::Dead(DeadCommand::Replay(args)) => {
            let who = operator(&cli);
            let replayed = if args.all {
                let t = args.event_type.map(|t| t.as_str());
                dead_letter::replay(&mut client, ReplaySelection::All { event_type: t, since: args.since }, &who).await?
            } else {
                let replayed = dead_letter::replay(&mut client, ReplaySelection::Ids(&args.ids), &who).await?;
                let refused: Vec<String> = dead_letter::statuses(&client, &args.ids)
                    .await?
                    .into_iter()
                    .filter(|(id, _)| !replayed.contains(id))
                    .map(|(id, s)| match s {
                        None => format!("{id} does not exist"),
                        Some(s) => format!("{id} is {s}, not DEAD"),
                    })
                    .collect();
                if !refused.is_empty() {
                    bail!("replayed {} event(s); not replayed: {}", replayed.len(), refused.join("; "));
                }
                replayed
            };
            print(json, &replayed, |r| {
                println!("replayed {} event(s)", r.len());
                for id in r {
                    println!("{id}");
                }
            });
        }
        Command::Unknown(UnknownCommand::List { limit }) => {
            let sends = unknown::list(&client, *limit).await?;
            print(json, &sends, |sends| {
                if sends.is_empty() {
                    println!("no sends with an unknown outcome");
                }
                for s in sends {
                    println!(
                        "{}  {}  {}  event {}  claimed {}  {}",
                        s.id,
                        s.recipient,
                        s.event_type,
                        s.event_id,
                        s.claimed_at.format("%Y-%m-%dT%H:%M:%SZ"),
                        s.last_error.as_deref().unwrap_or(&s.status)
                    );
                }
            });
        }
        Command::Unknown(UnknownCommand::Resend { id, accept_duplicate }) => {
            debug_assert!(*accept_duplicate, "clap requires the flag");
            let who = operator(&cli);
            let event = unknown::resend(&mut client, *id, &who).await?;
            print(json, &serde_json::json!({"send_id": id, "event_id": event, "decided_by": who}), |_| {
                println!("send {id} will be re-sent: event {event} is PENDING again (decision recorded for {who})");
            });
        }
        Command::Sweep { dry_run } => {
            let config = SweeperConfig::from_env()?;
            let rows = if *dry_run {
                sweep::sweep_dry_run(&client, &config).await?
            } else {
                sweep::sweep(&client, &config).await?
            };
            print(json, &rows, |rows| {
                let verb = if *dry_run { "would move" } else { "moved" };
                if rows.is_empty() {
                    println!("nothing is stuck in PROCESSING past {}s", config.stuck_after.as_secs());
                }
                for r in rows {
                    println!(
                        "{verb} {} to {} (attempts {}, worker {})",
                        r.id,
                        r.to,
                        r.attempts,
                        r.locked_by.as_deref().unwrap_or("?")
                    );
                }
            });
        }
    }
    Ok(())
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
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outboxctl: error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}
