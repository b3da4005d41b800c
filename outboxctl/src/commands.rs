//! The handlers of `outboxctl`'s commands: each calls into the library and
//! prints the result, as text or (`--json`) as JSON.

use anyhow::{anyhow, bail};
use deadpool_postgres::{Client, Pool};
use serde::Serialize;
use shared::notify::feedback;
use shared::notify::sends::{self, SendStatus};
use shared::notify::unknown::{self, Confirmation};
use shared::outbox::events;
use shared::outbox::events::transitions::{self, ReplaySelection};
use shared::outbox::EventStatus;
use shared::relay::{status, sweeper, SweeperConfig};
use uuid::Uuid;

#[derive(Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    fn print<T: Serialize>(self, value: &T, human: impl FnOnce(&T)) {
        if self.json {
            println!("{}", serde_json::to_string_pretty(value).expect("serialisable"));
        } else {
            human(value);
        }
    }
}

const TIME: &str = "%Y-%m-%dT%H:%M:%SZ";

pub async fn migrate(out: Output, pool: &Pool) -> anyhow::Result<()> {
    let limits = shared::db::role_limits::RoleLimits::from_env()?;
    let applied = shared::db::migrate_with(pool, shared::db::MigrationTarget::Latest, &limits).await?;
    out.print(&applied, |a| {
        if a.is_empty() {
            println!("schema is up to date");
        }
        for m in a {
            println!("applied {m}");
        }
    });
    Ok(())
}

pub async fn status(out: Output, client: &Client) -> anyhow::Result<()> {
    let config = SweeperConfig::from_env()?;
    let s = status::fetch(client, &config).await?;
    out.print(&s, |s| {
        let line = |counts: Vec<String>| counts.join("  ");
        println!("events:  {}", line(s.events.iter().map(|(k, v)| format!("{k} {v}")).collect()));
        match s.oldest_due_pending_age_secs {
            Some(age) => println!("oldest due PENDING event: {age:.1}s old"),
            None => println!("oldest due PENDING event: none"),
        }
        println!(
            "PROCESSING past the sweep timeout ({}s): {}",
            config.stuck_after.as_secs(),
            s.processing_past_sweep_timeout
        );
        let sends = [
            SendStatus::Sent,
            SendStatus::Failed,
            SendStatus::Unknown,
            SendStatus::Claimed,
            SendStatus::Superseded,
            SendStatus::Capped,
        ];
        println!("sends:   {}", line(sends.iter().map(|k| format!("{k} {}", s.sends[k])).collect()));
        let u = &s.unknown;
        println!(
            "unknown: awaiting SES's evidence {} (stalled {})  left for an operator {}  \
             (confirmed by SES events: {}, resent on SES's evidence: {})",
            u.awaiting_evidence, u.evidence_stalled, u.left_for_operator, u.confirmed_by_ses, u.resent_on_evidence
        );
        match &s.vacuum_horizon.holder {
            Some(h) => println!(
                "oldest snapshot (vacuum keeps what it can see): {} {}{}{}, {} transactions old{}",
                h.kind.replace('_', " "),
                h.name.as_deref().map(|n| format!("{n:?}")).unwrap_or_else(|| "(unnamed)".into()),
                h.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
                h.state.as_deref().map(|st| format!(" ({st})")).unwrap_or_default(),
                h.xmin_age,
                h.age_secs.map(|a| format!(", for {a:.0}s")).unwrap_or_default(),
            ),
            None => println!("oldest snapshot (vacuum keeps what it can see): none"),
        }
    });
    Ok(())
}

/// A DEAD event as operators see it.
#[derive(Serialize)]
struct DeadEvent {
    id: Uuid,
    booking_id: Uuid,
    event_type: String,
    attempts: i32,
    last_error: Option<String>,
    created_at: chrono::DateTime<chrono::Utc>,
    died_at: chrono::DateTime<chrono::Utc>,
}

impl From<&events::StoredEvent> for DeadEvent {
    fn from(e: &events::StoredEvent) -> Self {
        Self {
            id: e.id,
            booking_id: e.aggregate_id,
            event_type: e.event_type.clone(),
            attempts: e.attempts,
            last_error: e.last_error.clone(),
            created_at: e.created_at,
            died_at: e.updated_at,
        }
    }
}

pub async fn dead_list(out: Output, client: &Client, limit: i64) -> anyhow::Result<()> {
    let dead: Vec<DeadEvent> = events::list_dead(client, limit).await?.iter().map(DeadEvent::from).collect();
    out.print(&dead, |dead| {
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
                d.died_at.format(TIME),
                d.last_error.as_deref().unwrap_or("")
            );
        }
    });
    Ok(())
}

#[derive(Serialize)]
struct DeadEventDetail {
    #[serde(flatten)]
    event: DeadEvent,
    payload: serde_json::Value,
    /// `(recipient, status)` of every send claim of the event.
    sends: Vec<(String, sends::SendStatus)>,
    replays: i64,
}

pub async fn dead_show(out: Output, client: &Client, id: Uuid) -> anyhow::Result<()> {
    let event = events::get(client, id)
        .await?
        .filter(|e| e.status == EventStatus::Dead)
        .ok_or_else(|| anyhow!("no DEAD event with id {id}"))?;
    let detail = DeadEventDetail {
        event: DeadEvent::from(&event),
        sends: sends::of_event(client, id).await?,
        replays: transitions::replay_count(client, id).await?,
        payload: event.payload,
    };
    out.print(&detail, |d| {
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
    Ok(())
}

/// How far a replay may go.
pub struct ReplayLimits {
    pub max: usize,
    pub dry_run: bool,
}

pub async fn dead_replay(
    out: Output,
    client: &mut Client,
    selection: ReplaySelection<'_>,
    who: &str,
    limits: ReplayLimits,
) -> anyhow::Result<()> {
    let asked = match &selection {
        ReplaySelection::Ids(ids) => Some(ids.to_vec()),
        ReplaySelection::All { .. } => None,
    };
    let report = transitions::replay(client, selection, who, limits.max, limits.dry_run).await?;
    let superseded = |ids: &[Uuid]| ids.iter().map(Uuid::to_string).collect::<Vec<_>>().join(", ");
    if limits.dry_run {
        out.print(&report, |r| {
            println!("would replay {} event(s)", r.replayed.len());
            for id in &r.replayed {
                println!("{id}");
            }
            if !r.superseded.is_empty() {
                println!(
                    "would skip {} superseded by a later delivered event of their booking: {}",
                    r.superseded.len(),
                    superseded(&r.superseded)
                );
            }
        });
        return Ok(());
    }
    if let Some(asked) = asked {
        let refused: Vec<String> = events::statuses(client, &asked)
            .await?
            .into_iter()
            .filter(|(id, _)| !report.replayed.contains(id))
            .map(|(id, s)| match s {
                None => format!("{id} does not exist"),
                Some(_) if report.superseded.contains(&id) => {
                    format!("{id} is superseded by a later delivered event of its booking")
                }
                Some(s) => format!("{id} is {s}, not DEAD"),
            })
            .collect();
        if !refused.is_empty() {
            bail!("replayed {} event(s); not replayed: {}", report.replayed.len(), refused.join("; "));
        }
    }
    if !report.superseded.is_empty() {
        // On stderr, so --json output stays the list of replayed ids.
        eprintln!(
            "skipped {} superseded by a later delivered event of their booking: {}",
            report.superseded.len(),
            superseded(&report.superseded)
        );
    }
    out.print(&report.replayed, |r| {
        println!("replayed {} event(s)", r.len());
        for id in r {
            println!("{id}");
        }
    });
    Ok(())
}

pub async fn unknown_list(out: Output, client: &Client, limit: i64, confirmed: bool) -> anyhow::Result<()> {
    let grace = SweeperConfig::from_env()?.feedback.grace;
    let list = unknown::list(client, grace, confirmed, limit).await?;
    out.print(&list, |list| {
        if list.is_empty() {
            println!("no sends with an unknown outcome");
        }
        for s in list {
            let why = match (&s.left_for_operator, &s.resent) {
                (Some(left), _) => left.clone(),
                (None, Some((at, _))) => format!("resent {}", at.format(TIME)),
                _ => s.last_error.clone().unwrap_or_else(|| s.status.to_string()),
            };
            println!(
                "{}  {}  {}  event {}  claimed {}  {}  ({why})",
                s.id,
                s.recipient,
                s.event_type,
                s.event_id,
                s.claimed_at.format(TIME),
                s.confirmation.describe(),
            );
        }
        let left = list.iter().filter(|s| s.confirmation == Confirmation::LeftForOperator).count();
        if left > 0 {
            println!(
                "{left} left for an operator: `outboxctl unknown resend ID` resends one (those SES's events \
                 moved past: `outboxctl unknown resend --unconfirmed`)"
            );
        }
    });
    Ok(())
}

pub async fn unknown_resend(out: Output, client: &mut Client, id: Uuid, who: &str) -> anyhow::Result<()> {
    let event = unknown::resend(client, id, unknown::Decision::Operator(who)).await?;
    out.print(&serde_json::json!({"send_id": id, "event_id": event, "decided_by": who}), |_| {
        println!("send {id} will be re-sent: event {event} is PENDING again (decision recorded for {who})");
    });
    Ok(())
}

pub async fn unknown_resend_unconfirmed(
    out: Output,
    client: &mut Client,
    who: &str,
    limits: ReplayLimits,
) -> anyhow::Result<()> {
    let grace = SweeperConfig::from_env()?.feedback.grace;
    let report = unknown::resend_left(client, grace, who, limits.max, limits.dry_run).await?;
    let verb = if limits.dry_run { "would resend" } else { "resending" };
    out.print(&report, |r| {
        println!(
            "{verb} {} send(s) left for an operator that SES's events moved past at least {}s ago",
            r.resent.len(),
            grace.as_secs()
        );
        for (send, event) in &r.resent {
            println!("{send}  event {event}");
        }
        for (send, why) in &r.skipped {
            println!("skipped {send}: {why}");
        }
    });
    Ok(())
}

pub async fn suppression_list(out: Output, client: &Client, limit: i64) -> anyhow::Result<()> {
    let list = feedback::suppressions(client, limit).await?;
    out.print(&list, |list| {
        if list.is_empty() {
            println!("no suppressed addresses");
        }
        for s in list {
            println!("{}  {}  since {}", s.email, s.reason, s.created_at.format(TIME));
        }
    });
    Ok(())
}

pub async fn suppression_remove(out: Output, client: &Client, email: &str, who: &str) -> anyhow::Result<()> {
    let removed =
        feedback::unsuppress(client, email, who).await?.ok_or_else(|| anyhow!("{email} is not suppressed"))?;
    out.print(&removed, |s| println!("{} may be mailed again (was: {})", s.email, s.reason));
    Ok(())
}

pub async fn sweep(out: Output, client: &Client, dry_run: bool) -> anyhow::Result<()> {
    let config = SweeperConfig::from_env()?;
    let rows = sweeper::sweep_once(client, &config, dry_run).await?;
    out.print(&rows, |rows| {
        let verb = if dry_run { "would move" } else { "moved" };
        if rows.is_empty() {
            println!("nothing is stuck in PROCESSING past {}s", config.stuck_after.as_secs());
        }
        for r in rows {
            let worker = r.locked_by.as_deref().unwrap_or("?");
            println!("{verb} {} to {} (attempts {}, worker {worker})", r.id, r.to, r.attempts);
        }
    });
    Ok(())
}
