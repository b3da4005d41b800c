//! The sweeper's scheduled run, as four named steps: sweep rows stuck in
//! PROCESSING (reset, or dead-letter when out of attempts), settle sends
//! whose outcome stayed unknown on SES's evidence, apply retention, then
//! report metrics.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Pool};

use super::config::SweeperConfig;
use super::retention;
use super::summary::{FeedbackReport, SweepRun};
use crate::db::{horizon, DbResult};
use crate::notify::evidence::{feedback, resend, watermark};
use crate::outbox::events;
use crate::outbox::events::transitions::{self, Reset};
use crate::telemetry::emf;

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

/// Step 2: every UNKNOWN send SES's events can settle is resent once SES's
/// event stream has moved past it at least the grace ago and no event
/// names it (each a recorded decision, with its evidence), up to
/// `UNKNOWN_RESENDS_MAX` times; what no evidence can settle is left for an
/// operator, loudly. Sends whose evidence stalls (the stream has not moved
/// past them for a whole grace) are named too: nothing is resent until
/// SES's events arrive.
async fn reconcile(client: &mut deadpool_postgres::Client, config: &SweeperConfig) -> DbResult<FeedbackReport> {
    let f = &config.feedback;
    // Messages SES accepted whose events have not come within the grace:
    // the stream is behind or stopped, so nothing is resent on it now.
    let behind = feedback::behind(&*client, f.grace, BEHIND_WINDOW, BEHIND_SAMPLE).await?;
    let settled = if behind > 0 {
        tracing::error!(
            behind,
            "messages SES accepted more than FEEDBACK_GRACE_SECS ({}s) ago still have no SES event: its event \
             stream is behind or stopped, so no ambiguous send is resent until they arrive (check the SES \
             events rule, SesEventsDeadLetterQueue and the ses-events function)",
            f.grace.as_secs()
        );
        resend::EvidenceReport::default()
    } else {
        resend::settle_on_evidence(client, f.grace, f.max_resends, config.batch_size).await?
    };
    for (send_id, event_id) in &settled.resent {
        tracing::warn!(%send_id, %event_id, "ambiguous send resent on SES's evidence: its stream moved past it \
            and no event named it");
    }
    for (send_id, why) in &settled.left {
        tracing::error!(%send_id, %why, "ambiguous send left for an operator (outboxctl unknown list)");
    }
    let counts = resend::counts(&*client, f.grace).await?;
    if counts.evidence_stalled > 0 {
        tracing::error!(
            stalled = counts.evidence_stalled,
            "ambiguous sends wait for SES's events, which have not moved past them within FEEDBACK_GRACE_SECS \
             ({}s): check the configuration set's event destination, the SES events rule and the ses-events \
             function; nothing is resent until the events arrive",
            f.grace.as_secs()
        );
    }
    let watermark_age_secs = watermark::watermark(&*client)
        .await?
        .map(|w| (chrono::Utc::now() - w.mail_second).num_milliseconds() as f64 / 1000.0);
    Ok(FeedbackReport {
        events_behind: behind,
        resent_on_evidence: settled.resent.len() as u32,
        left_for_operator: settled.left.len() as u32,
        counts,
        watermark_age_secs,
    })
}

/// How far back the sweeper checks that SES's events came for what it
/// accepted (beyond the grace), and for how many of those messages at
/// most: one lost event holds resends back for this long at most.
pub const BEHIND_WINDOW: Duration = Duration::from_secs(3600);
pub const BEHIND_SAMPLE: i64 = 200;

/// A snapshot held this long is named in the log at each run (the
/// template's alarm on `OldestXminAgeSeconds` has its own threshold).
const HELD_SNAPSHOT_WARN_SECS: f64 = 600.0;

/// Step 4: how far behind the outbox is, and what holds back vacuum, as
/// EMF metrics.
async fn report(client: &impl GenericClient, out: &mut SweepRun) -> DbResult<()> {
    out.oldest_due_pending_age_secs = events::standing::oldest_due_age(client).await?.unwrap_or(0.0);
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
