//! `outboxctl`'s commands, parsed from arguments and run against a pool:
//! the CLI (`main.rs`) prints what they write, and the stack's operator
//! function (`functions/outbox-operator`) returns it. Both log in as a
//! member of `outbox_operator` (V31), whose grants are what these commands
//! run and nothing else; only `migrate` needs the schema owner.

pub mod commands;

use anyhow::Context;
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use deadpool_postgres::Pool;
use shared::booking::events::EventType;
use shared::outbox::events::transitions::ReplaySelection;
use uuid::Uuid;

pub use commands::Sink;

/// Arguments that run no command: help (or the version) to show, or a
/// usage error on one line.
#[derive(Debug)]
pub enum Refused {
    Help(String),
    Usage(String),
}

/// Parses `outboxctl`'s arguments (the first is the program's name).
pub fn parse<I, T>(args: I) -> Result<Cli, Refused>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(|e| {
        if !e.use_stderr() {
            return Refused::Help(e.to_string());
        }
        // clap's message without its usage block, on one line.
        let rendered = e.render().to_string();
        let message: Vec<&str> = rendered
            .lines()
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        Refused::Usage(message.join(" ").trim_start_matches("error: ").to_string())
    })?;
    if let Command::Dead(DeadCommand::Replay(args)) = &cli.command {
        if args.all && !args.dry_run && !args.yes {
            return Err(Refused::Usage("dead replay --all needs --yes (look first with --dry-run)".into()));
        }
    }
    Ok(cli)
}

/// What the operator function answers: the command's output (as JSON with
/// `--json`, as text lines otherwise).
#[derive(Debug, serde::Serialize)]
pub struct Answer {
    pub output: serde_json::Value,
    /// What the CLI writes to stderr beside its output.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Runs one command for the operator function: `args` as after `outboxctl`
/// on a shell. `migrate` is refused (a deploy migrates, as the schema
/// owner); a command that records who decided records `invoked_by`, after
/// `--operator` when given. The function cannot know who invoked it (Lambda
/// gives a handler no caller identity: its context carries a Cognito
/// identity only for mobile-SDK calls), so `--operator` is the caller's own
/// account of it; `invoked_by` names the invocation's request id, which
/// CloudTrail's record of the `Invoke` (Lambda data events) ties to the
/// principal that made it. An error is one line.
pub async fn invoke(args: &[String], pool: &Pool, invoked_by: &str) -> Result<Answer, String> {
    let mut cli = match parse(std::iter::once("outboxctl".to_string()).chain(args.iter().cloned())) {
        Ok(cli) => cli,
        Err(Refused::Help(text)) => {
            return Ok(Answer { output: text.lines().collect::<Vec<_>>().into(), notes: Vec::new() })
        }
        Err(Refused::Usage(message)) => return Err(format!("{message} (see --help)")),
    };
    if matches!(cli.command, Command::Migrate) {
        return Err("migrate is not run here: every deploy migrates, as the schema owner (SchemaMigration)".into());
    }
    cli.operator = Some(match cli.operator.take() {
        Some(said) => format!("{said} ({invoked_by})"),
        None => invoked_by.to_string(),
    });
    let sink = Sink::buffer();
    run(&cli, pool, &sink).await.map_err(|e| one_line(&e))?;
    let text = sink.take();
    let output = if cli.json {
        serde_json::from_str(&text).map_err(|e| format!("the command's JSON is not JSON: {e}"))?
    } else {
        text.lines().collect::<Vec<_>>().into()
    };
    Ok(Answer { output, notes: sink.take_notes() })
}

#[derive(Parser)]
#[command(name = "outboxctl", version, about = "Operate the booking outbox", disable_help_subcommand = true)]
pub struct Cli {
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Who is acting, recorded with replays and resends (default: $USER).
    #[arg(long, global = true, env = "OUTBOXCTL_OPERATOR")]
    pub operator: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// Organizers whose sending complaints paused.
    #[command(subcommand)]
    Organizers(OrganizersCommand),
    /// Reset rows stuck in PROCESSING (what the sweeper does), or show what it would do.
    Sweep {
        /// Only show what would be reset or failed.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
pub enum DeadCommand {
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
pub struct ReplayArgs {
    /// Event ids to replay.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub ids: Vec<Uuid>,
    /// Replay every DEAD event (narrow with --type and --since).
    #[arg(long)]
    pub all: bool,
    /// Only events of this type (with --all).
    #[arg(long = "type", requires = "all", value_parser = parse_event_type)]
    pub event_type: Option<EventType>,
    /// Only events that died at or after this RFC 3339 time (with --all).
    #[arg(long, requires = "all", value_parser = parse_time)]
    pub since: Option<DateTime<Utc>>,
    /// Show what would be replayed, and what is skipped, without changing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Confirm a replay of --all (see it first with --dry-run).
    #[arg(long, requires = "all")]
    pub yes: bool,
    /// Refuse to replay more than this many events at once.
    #[arg(long, default_value_t = 100)]
    pub max: usize,
}

#[derive(Subcommand)]
pub enum UnknownCommand {
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
pub struct ResendArgs {
    /// The send id (from `unknown list`).
    #[arg(required_unless_present = "unconfirmed", conflicts_with = "unconfirmed")]
    pub id: Option<Uuid>,
    /// Every SES send left for an operator that SES's events moved past at
    /// least FEEDBACK_GRACE_SECS ago with none naming it (as the sweeper
    /// resends, without its UNKNOWN_RESENDS_MAX).
    #[arg(long)]
    pub unconfirmed: bool,
    /// Show what would be resent (with --unconfirmed), changing nothing.
    #[arg(long, requires = "unconfirmed")]
    pub dry_run: bool,
    /// Resend at most this many (with --unconfirmed).
    #[arg(long, default_value_t = 100, requires = "unconfirmed")]
    pub max: usize,
    /// Required: you accept that a recipient may get the email twice.
    #[arg(long = "yes-i-accept-a-possible-duplicate", required_unless_present = "dry_run")]
    pub accept_duplicate: bool,
}

#[derive(Subcommand)]
pub enum SuppressionCommand {
    /// List suppressed addresses, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Mail this address again (the mailbox was fixed, or the complaint was a mistake).
    Remove { email: String },
}

#[derive(Subcommand)]
pub enum OrganizersCommand {
    /// Organizers whose sending is paused, with why, the latest first.
    Paused,
    /// Let this organizer send again (their address, as `paused` shows
    /// it); their complaints count from zero.
    Lift { organizer_email: String },
}

/// Runs one command as `cli` says, writing to `sink`.
pub async fn run(cli: &Cli, pool: &Pool, sink: &Sink) -> anyhow::Result<()> {
    let mut client = pool.get().await.context("cannot connect to the database")?;
    let out = commands::Output { json: cli.json, sink };
    match &cli.command {
        Command::Migrate => {
            drop(client);
            commands::migrate(out, pool).await
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
            commands::dead_replay(out, &mut client, selection, &operator(cli), limits).await
        }
        Command::Unknown(UnknownCommand::List { limit, confirmed }) => {
            commands::unknown_list(out, &client, *limit, *confirmed).await
        }
        Command::Unknown(UnknownCommand::Resend(args)) => match args.id {
            Some(id) => commands::unknown_resend(out, &mut client, id, &operator(cli)).await,
            None => {
                let limits = commands::ReplayLimits { max: args.max, dry_run: args.dry_run };
                commands::unknown_resend_unconfirmed(out, &mut client, &operator(cli), limits).await
            }
        },
        Command::Suppression(SuppressionCommand::List { limit }) => {
            commands::suppression_list(out, &client, *limit).await
        }
        Command::Suppression(SuppressionCommand::Remove { email }) => {
            commands::suppression_remove(out, &client, email, &operator(cli)).await
        }
        Command::Organizers(OrganizersCommand::Paused) => commands::organizers_paused(out, &client).await,
        Command::Organizers(OrganizersCommand::Lift { organizer_email }) => {
            commands::organizers_lift(out, &client, organizer_email, &operator(cli)).await
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
pub fn one_line(e: &anyhow::Error) -> String {
    let top = e.to_string();
    let root = e.root_cause().to_string();
    let line = if root == top || top.contains(&root) { top } else { format!("{top}: {root}") };
    line.replace('\n', " ")
}
