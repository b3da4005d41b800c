//! The sweeper's scheduled run, as four named steps: sweep rows stuck in
//! PROCESSING (reset, or dead-letter when out of attempts), reconcile sends
//! whose outcome stayed unknown with SES's feedback, apply retention, then
//! report metrics.

use deadpool_postgres::{GenericClient, Pool};

use super::config::SweeperConfig;
use super::retention;
use super::summary::{FeedbackReport, SweepRun};
use crate::db::{horizon, DbResult};
use crate::notify::{sends, unknown};
use crate::outbox::events;
use crate::outbox::events::transitions::{self, Reset};
use crate::telemetry::emf;
use crate::telemetry::mask_email;

/// One scheduled run.
pub async fn run(pool: &Pool, config: &SweeperConfig) -> DbResult<SweepRun> {
    let mut client = pool.get().await?;
    let mut out = SweepRun::default();
    sweep_stuck(&client, config, &mut out).await?;
    out.feedback = reconcile(&mut client, config).await?;
    out.retention = retention::run(&client, &config.retention).await?;
    report(&client, &mut out).await?;
    Ok(out)
}

/// Step 1: batch after batch of stuck rows, bounded by the retention batch
/// count so one run stays short.
async fn sweep_stuck(client: &impl GenericClient, config: &SweeperConfig, out: &mut SweepRun) -> DbResult<()> {
    for _ in 0..config.retention.max_batches.max(1) {
        let batch = sweep_once(client, config, false).await?;
        batch.iter().for_each(|r| out.count(r));
        let full = batch.len() as i64 >= config.batch_size;
        out.swept.extend(batch);
        if !full {
            break;
        }
    }
    Ok(())
}

/// Who the sweeper records as deciding an automatic resend.
pub const AUTO_RESEND_DECIDER: &str = "sweeper (UNKNOWN_AUTO_RESEND_AFTER_SECS)";

/// Step 2: every UNKNOWN send that no SES event has confirmed within the
/// grace period is reported once as "not confirmed by SES"; with the
/// opt-in auto resend, those older than it are resent (each a recorded
/// decision). The residual risk of that option: a Send event delayed past
/// it means a duplicate.
async fn reconcile(client: &mut deadpool_postgres::Client, config: &SweeperConfig) -> DbResult<FeedbackReport> {
    let grace = config.feedback.grace;
    let mut report = FeedbackReport::default();
    for s in sends::unknown::mark_unconfirmed(&*client, grace, config.batch_size).await? {
        report.newly_unconfirmed += 1;
        tracing::warn!(
            send_id = %s.id, event_id = %s.event_id, recipient = %mask_email(&s.recipient),
            event_type = %s.event_type, claimed_at = %s.claimed_at,
            "send not confirmed by SES within {}s: very likely never accepted (outboxctl unknown list)",
            grace.as_secs()
        );
    }
    if let Some(after) = config.feedback.auto_resend_after {
        let max = config.batch_size.max(0) as usize;
        let resent = unknown::resend_unconfirmed(client, after, AUTO_RESEND_DECIDER, max, false).await?;
        for (send_id, event_id) in &resent.resent {
            tracing::warn!(%send_id, %event_id, "unconfirmed send resent automatically (UNKNOWN_AUTO_RESEND_AFTER_SECS)");
        }
        for (send_id, why) in &resent.skipped {
            tracing::info!(%send_id, %why, "unconfirmed send not resent yet");
        }
        report.auto_resent = resent.resent.len() as u32;
    }
    report.counts = unknown::counts(&*client, grace).await?;
    Ok(report)
}

/// A snapshot held this long is named in the log at each run (the
/// template's alarm on `OldestXminAgeSeconds` has its own threshold).
const HELD_SNAPSHOT_WARN_SECS: f64 = 600.0;

/// Step 4: how far behind the outbox is, and what holds back vacuum, as
/// EMF metrics.
async fn report(client: &impl GenericClient, out: &mut SweepRun) -> DbResult<()> {
    out.oldest_due_pending_age_secs = events::oldest_due_age(client).await?.unwrap_or(0.0);
    out.vacuum_horizon = horizon::fetch(client).await?;
    if let Some(h) =
        out.vacuum_horizon.holder.as_ref().filter(|_| out.vacuum_horizon.oldest_age_secs > HELD_SNAPSHOT_WARN_SECS)
    {
        tracing::warn!(
            kind = %h.kind, pid = ?h.pid, name = ?h.name, state = ?h.state, age_secs = ?h.age_secs,
            xmin_age = h.xmin_age,
            "an old snapshot holds back vacuum: the outbox slows down until it ends (outboxctl status)"
        );
    }
    emf::emit("outbox-sweeper", &out.metrics());
    Ok(())
}

/// One batch of the sweep (`outboxctl sweep`), or what it would do now
/// (`--dry-run`).
pub async fn sweep_once(client: &impl GenericClient, config: &SweeperConfig, dry_run: bool) -> DbResult<Vec<Reset>> {
    transitions::reset_stuck(client, &config.stuck(), dry_run).await
}
