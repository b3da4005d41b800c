//! The handlers of `outboxctl`'s commands: each calls into the library and
//! prints the result, as text or (`--json`) as JSON.

use anyhow::{anyhow, bail};
use deadpool_postgres::{Client, Pool};
use serde::Serialize;
use shared::notify::evidence::resend::{self, Confirmation};
use shared::notify::evidence::suppression;
use shared::notify::sends::{self, SendStatus};
use shared::outbox::events;
use shared::outbox::events::transitions::{self, ReplaySelection};
use shared::outbox::EventStatus;
use shared::relay::{status, sweeper, SweeperConfig};
use uuid::Uuid;

/// Where a command's output goes: stdout (the CLI) or a buffer (the
/// operator function, which returns it).
#[derive(Default)]
pub struct Sink {
    buffer: Option<std::sync::Mutex<String>>,
    notes: std::sync::Mutex<Vec<String>>,
}

impl Sink {
    pub fn stdout() -> Self {
        Self::default()
    }

    pub fn buffer() -> Self {
        Self { buffer: Some(Default::default()), ..Self::default() }
    }

    /// The notes beside the output (stderr on a shell), of a buffer.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().expect("not poisoned"))
    }

    /// What was written to a buffer.
    pub fn take(&self) -> String {
        self.buffer.as_ref().map(|b| std::mem::take(&mut *b.lock().expect("not poisoned"))).unwrap_or_default()
    }
}

/// One line to the command's output.
macro_rules! outln {
    ($out:expr) => { $out.line(String::new()) };
    ($out:expr, $($arg:tt)*) => { $out.line(format!($($arg)*)) };
}

#[derive(Clone, Copy)]
pub struct Output<'a> {
    pub json: bool,
    pub sink: &'a Sink,
}

impl Output<'_> {
    fn line(self, line: String) {
        match &self.sink.buffer {
            Some(b) => {
                let mut b = b.lock().expect("not poisoned");
                b.push_str(&line);
                b.push('\n');
            }
            None => println!("{line}"),
        }
    }

    /// A note beside the output, never in it (so `--json` stays JSON).
    fn note(self, line: String) {
        match &self.sink.buffer {
            Some(_) => self.sink.notes.lock().expect("not poisoned").push(line),
            None => eprintln!("{line}"),
        }
    }

    fn print<T: Serialize>(self, value: &T, human: impl FnOnce(&T)) {
        if self.json {
            outln!(self, "{}", serde_json::to_string_pretty(value).expect("serialisable"));
        } else {
            human(value);
        }
    }
}

const TIME: &str = "%Y-%m-%dT%H:%M:%SZ";

pub async fn migrate(out: Output<'_>, pool: &Pool) -> anyhow::Result<()> {
    let limits = shared::db::role_limits::RoleLimits::from_env()?;
    let applied = shared::db::migrate_with(pool, shared::db::MigrationTarget::Latest, &limits).await?;
    out.print(&applied, |a| {
        if a.is_empty() {
            outln!(out, "schema is up to date");
        }
        for m in a {
            outln!(out, "applied {m}");
        }
    });
    Ok(())
}

pub async fn status(out: Output<'_>, client: &Client) -> anyhow::Result<()> {
    let config = SweeperConfig::from_env()?;
    let s = status::fetch(client, &config).await?;
    out.print(&s, |s| {
        let line = |counts: Vec<String>| counts.join("  ");
        outln!(out, "events:  {}", line(s.events.iter().map(|(k, v)| format!("{k} {v}")).collect()));
        if let Some(stopped) = &s.sending_stopped {
            // The provider's answer, cut to what a terminal shows.
            let reason: String = stopped.reason.chars().take(300).collect();
            outln!(
                out,
                "SENDING STOPPED: {} events wait (no attempt used; they go once it is fixed); last at {}: {reason}",
                stopped.events,
                stopped.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            );
        }
        match s.oldest_due_pending_age_secs {
            Some(age) => outln!(out, "oldest due PENDING event: {age:.1}s old"),
            None => outln!(out, "oldest due PENDING event: none"),
        }
        outln!(
            out,
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
        outln!(out, "sends:   {}", line(sends.iter().map(|k| format!("{k} {}", s.sends[k])).collect()));
        let u = &s.unknown;
        outln!(
            out,
            "unknown: awaiting SES's evidence {} (stalled {})  left for an operator {}  \
             (confirmed by SES events: {}, resent on SES's evidence: {})",
            u.awaiting_evidence,
            u.evidence_stalled,
            u.left_for_operator,
            u.confirmed_by_ses,
            u.resent_on_evidence
        );
        match &s.vacuum_horizon.holder {
            Some(h) => outln!(
                out,
                "oldest snapshot (vacuum keeps what it can see): {} {}{}{}, {} transactions old{}",
                h.kind.replace('_', " "),
                h.name.as_deref().map(|n| format!("{n:?}")).unwrap_or_else(|| "(unnamed)".into()),
                h.pid.map(|p| format!(" pid {p}")).unwrap_or_default(),
                h.state.as_deref().map(|st| format!(" ({st})")).unwrap_or_default(),
                h.xmin_age,
                h.age_secs.map(|a| format!(", for {a:.0}s")).unwrap_or_default(),
            ),
            None => outln!(out, "oldest snapshot (vacuum keeps what it can see): none"),
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

pub async fn dead_list(out: Output<'_>, client: &Client, limit: i64) -> anyhow::Result<()> {
    let dead: Vec<DeadEvent> = events::list_dead(client, limit).await?.iter().map(DeadEvent::from).collect();
    out.print(&dead, |dead| {
        if dead.is_empty() {
            outln!(out, "no DEAD events");
        }
        for d in dead {
            outln!(
                out,
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

pub async fn dead_show(out: Output<'_>, client: &Client, id: Uuid) -> anyhow::Result<()> {
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
        outln!(out, "event      {}", d.event.id);
        outln!(out, "type       {}", d.event.event_type);
        outln!(out, "booking    {}", d.event.booking_id);
        outln!(out, "attempts   {}", d.event.attempts);
        outln!(out, "created    {}", d.event.created_at.to_rfc3339());
        outln!(out, "died       {}", d.event.died_at.to_rfc3339());
        outln!(out, "reason     {}", d.event.last_error.as_deref().unwrap_or("-"));
        outln!(out, "replays    {}", d.replays);
        for (to, status) in &d.sends {
            outln!(out, "send       {to}: {status}");
        }
        outln!(out, "payload    {}", d.payload);
    });
    Ok(())
}

/// How far a replay may go.
pub struct ReplayLimits {
    pub max: usize,
    pub dry_run: bool,
}

pub async fn dead_replay(
    out: Output<'_>,
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
            outln!(out, "would replay {} event(s)", r.replayed.len());
            for id in &r.replayed {
                outln!(out, "{id}");
            }
            if !r.superseded.is_empty() {
                outln!(
                    out,
                    "would skip {} superseded by a later delivered event of their booking: {}",
                    r.superseded.len(),
                    superseded(&r.superseded)
                );
            }
        });
        return Ok(());
    }
    if let Some(asked) = asked {
        let refused = events::standing::not_replayed(&*client, &asked, &report).await?;
        if !refused.is_empty() {
            bail!("replayed {} event(s); not replayed: {}", report.replayed.len(), refused.join("; "));
        }
    }
    if !report.superseded.is_empty() {
        // On stderr, so --json output stays the list of replayed ids.
        out.note(format!(
            "skipped {} superseded by a later delivered event of their booking: {}",
            report.superseded.len(),
            superseded(&report.superseded)
        ));
    }
    out.print(&report.replayed, |r| {
        outln!(out, "replayed {} event(s)", r.len());
        for id in r {
            outln!(out, "{id}");
        }
    });
    Ok(())
}

pub async fn unknown_list(out: Output<'_>, client: &Client, limit: i64, confirmed: bool) -> anyhow::Result<()> {
    let grace = SweeperConfig::from_env()?.feedback.grace;
    let list = resend::list(client, grace, confirmed, limit).await?;
    out.print(&list, |list| {
        if list.is_empty() {
            outln!(out, "no sends with an unknown outcome");
        }
        for s in list {
            let why = match (&s.left_for_operator, &s.resent) {
                (Some(left), _) => left.clone(),
                (None, Some((at, _))) => format!("resent {}", at.format(TIME)),
                _ => s.last_error.clone().unwrap_or_else(|| s.status.to_string()),
            };
            outln!(
                out,
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
            outln!(
                out,
                "{left} left for an operator: `outboxctl unknown resend ID` resends one (those SES's events \
                 moved past: `outboxctl unknown resend --unconfirmed`)"
            );
        }
    });
    Ok(())
}

pub async fn unknown_resend(out: Output<'_>, client: &mut Client, id: Uuid, who: &str) -> anyhow::Result<()> {
    let event = resend::resend(client, id, resend::Decision::Operator(who)).await?;
    out.print(&serde_json::json!({"send_id": id, "event_id": event, "decided_by": who}), |_| {
        outln!(out, "send {id} will be re-sent: event {event} is PENDING again (decision recorded for {who})");
    });
    Ok(())
}

pub async fn unknown_resend_unconfirmed(
    out: Output<'_>,
    client: &mut Client,
    who: &str,
    limits: ReplayLimits,
) -> anyhow::Result<()> {
    let grace = SweeperConfig::from_env()?.feedback.grace;
    let report = resend::resend_left(client, grace, who, limits.max, limits.dry_run).await?;
    let verb = if limits.dry_run { "would resend" } else { "resending" };
    out.print(&report, |r| {
        outln!(
            out,
            "{verb} {} send(s) left for an operator that SES's events moved past at least {}s ago",
            r.resent.len(),
            grace.as_secs()
        );
        for (send, event) in &r.resent {
            outln!(out, "{send}  event {event}");
        }
        for (send, why) in &r.skipped {
            outln!(out, "skipped {send}: {why}");
        }
    });
    Ok(())
}

pub async fn suppression_list(out: Output<'_>, client: &Client, limit: i64) -> anyhow::Result<()> {
    let list = suppression::suppressions(client, limit).await?;
    out.print(&list, |list| {
        if list.is_empty() {
            outln!(out, "no suppressed addresses");
        }
        for s in list {
            outln!(out, "{}  {}  since {}", s.email, s.reason, s.created_at.format(TIME));
        }
    });
    Ok(())
}

pub async fn suppression_remove(out: Output<'_>, client: &Client, email: &str, who: &str) -> anyhow::Result<()> {
    let removed =
        suppression::unsuppress(client, email, who).await?.ok_or_else(|| anyhow!("{email} is not suppressed"))?;
    out.print(&removed, |s| outln!(out, "{} may be mailed again (was: {})", s.email, s.reason));
    Ok(())
}

pub async fn organizers_paused(out: Output<'_>, client: &Client) -> anyhow::Result<()> {
    let list = shared::notify::pacing::pauses::paused(client).await?;
    out.print(&list, |list| {
        if list.is_empty() {
            outln!(out, "no organizer is paused");
        }
        for p in list {
            outln!(out, "{}  paused since {}: {}", p.organizer_email, p.paused_at.format(TIME), p.reason);
        }
    });
    Ok(())
}

pub async fn organizers_lift(out: Output<'_>, client: &Client, key: &str, who: &str) -> anyhow::Result<()> {
    if !shared::notify::pacing::pauses::lift(client, key, who).await? {
        anyhow::bail!("{key} is not paused");
    }
    out.print(&serde_json::json!({"lifted": key, "by": who}), |_| outln!(out, "{key} may send again"));
    Ok(())
}

pub async fn sweep(out: Output<'_>, client: &Client, dry_run: bool) -> anyhow::Result<()> {
    let config = SweeperConfig::from_env()?;
    let rows = sweeper::sweep_once(client, &config, dry_run).await?;
    out.print(&rows, |rows| {
        let verb = if dry_run { "would move" } else { "moved" };
        if rows.is_empty() {
            outln!(out, "nothing is stuck in PROCESSING past {}s", config.stuck_after.as_secs());
        }
        for r in rows {
            let worker = r.locked_by.as_deref().unwrap_or("?");
            outln!(out, "{verb} {} to {} (attempts {}, worker {worker})", r.id, r.to, r.attempts);
        }
    });
    Ok(())
}
