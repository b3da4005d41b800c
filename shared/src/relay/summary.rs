//! What a worker run did: returned by the Lambdas, logged, and emitted as
//! EMF metrics (names the template's alarms use).

use serde::Serialize;

use crate::db::horizon::Horizon;
use crate::notify::deliver::Delivery;
use crate::notify::evidence::resend::UnknownCounts;
use crate::outbox::events::transitions::Reset;
use crate::outbox::EventStatus;
use crate::telemetry::emf::Unit;

/// What one poller run did.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    pub batches: u32,
    pub claimed: u32,
    pub done: u32,
    pub already_processed: u32,
    pub sent: u32,
    pub skipped: u32,
    /// Not sent: a later event of the booking made them moot.
    pub superseded: u32,
    /// Not sent: the recipient's mailbox had its daily limit.
    pub capped: u32,
    pub released: u32,
    pub failed: u32,
    pub unknown: u32,
    pub retried: u32,
    pub dead_lettered: u32,
    /// Sending stopped this run: the provider paused the account, or
    /// refused the stack's configuration.
    pub paused: bool,
    /// Sends the provider refused for the stack's configuration (the
    /// sender's identity, its rights, TLS): nothing goes until it is fixed.
    pub misconfigured: u32,
    /// Events handed back unfinished because the deadline came first.
    pub deadline_requeued: u32,
    /// Events handed back because a send was throttled (no attempt used).
    pub throttled: u32,
    /// Reminders handed back to wait for their booking's earlier events.
    pub waiting: u32,
    /// Batches processed again in place after a database failure.
    pub recovered: u32,
    /// Events taken over from a holder whose lease ended.
    pub taken_over: u32,
    /// Events this run lost: taken over by another claim (or swept) while
    /// it worked on them; it wrote nothing more about them.
    pub fenced: u32,
    /// The run's lease was lost (refused, or no renewal in time): it stopped
    /// claiming and sending.
    pub lease_lost: bool,
    pub errors: u32,
    /// The slowest batch (claim + dispatch) of the run.
    pub batch_duration_ms_max: u64,
}

impl RunSummary {
    pub(super) fn add(&mut self, o: &RunSummary) {
        self.batches += o.batches;
        self.claimed += o.claimed;
        self.done += o.done;
        self.already_processed += o.already_processed;
        self.sent += o.sent;
        self.skipped += o.skipped;
        self.superseded += o.superseded;
        self.capped += o.capped;
        self.released += o.released;
        self.failed += o.failed;
        self.unknown += o.unknown;
        self.retried += o.retried;
        self.dead_lettered += o.dead_lettered;
        self.paused |= o.paused;
        self.misconfigured += o.misconfigured;
        self.deadline_requeued += o.deadline_requeued;
        self.throttled += o.throttled;
        self.waiting += o.waiting;
        self.recovered += o.recovered;
        self.taken_over += o.taken_over;
        self.fenced += o.fenced;
        self.lease_lost |= o.lease_lost;
        self.errors += o.errors;
        self.batch_duration_ms_max = self.batch_duration_ms_max.max(o.batch_duration_ms_max);
    }

    /// Counts one recipient's delivery.
    pub(super) fn count(&mut self, d: &Delivery) {
        match d {
            Delivery::Sent { .. } => self.sent += 1,
            Delivery::AlreadyClaimed => self.skipped += 1,
            Delivery::Superseded { .. } => self.superseded += 1,
            Delivery::Capped { .. } => self.capped += 1,
            Delivery::Orphaned | Delivery::Unknown { .. } => self.unknown += 1,
            Delivery::Misconfigured { .. } => {
                self.released += 1;
                self.misconfigured += 1;
            }
            Delivery::Released { .. }
            | Delivery::Throttled { .. }
            | Delivery::Paused { .. }
            | Delivery::Deferred { .. } => self.released += 1,
            Delivery::Rejected { .. } => self.failed += 1,
            // Not claimed: its event waits and is planned again (`waiting`),
            // or is another holder's now (`fenced`, counted per event).
            Delivery::Replan { .. } | Delivery::Fenced => {}
        }
    }

    /// The run as EMF metrics.
    pub fn metrics(&self) -> Vec<(&'static str, f64, Unit)> {
        vec![
            ("Claimed", self.claimed as f64, Unit::Count),
            ("Sent", self.sent as f64, Unit::Count),
            ("Superseded", self.superseded as f64, Unit::Count),
            ("Capped", self.capped as f64, Unit::Count),
            ("Released", self.released as f64, Unit::Count),
            ("Unknown", self.unknown as f64, Unit::Count),
            ("PermanentlyFailed", self.failed as f64, Unit::Count),
            ("DeadLettered", self.dead_lettered as f64, Unit::Count),
            ("Misconfigured", self.misconfigured as f64, Unit::Count),
            ("SendingStopped", if self.paused { 1.0 } else { 0.0 }, Unit::Count),
            ("Throttled", self.throttled as f64, Unit::Count),
            ("TakenOver", self.taken_over as f64, Unit::Count),
            ("Fenced", self.fenced as f64, Unit::Count),
            ("Errors", self.errors as f64, Unit::Count),
            ("BatchDurationMs", self.batch_duration_ms_max as f64, Unit::Milliseconds),
        ]
    }
}

/// What the poller Lambda returns: what it did this invocation, and how far
/// behind the outbox is now.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    pub summary: RunSummary,
    pub oldest_due_pending_age_secs: f64,
    pub duration_ms: u64,
    /// When, from the invocation's start, the run last tried to claim: it
    /// claims from its start to here (the schedule's coverage).
    pub claiming_until_ms: u64,
    /// The fleet's send rate this run paced at (sends a second), when it
    /// paces.
    pub fleet_send_rate: Option<f64>,
}

impl Health {
    /// The run's EMF metrics: the summary's, the outbox's lag, how long it
    /// claimed (`ClaimingSeconds`: summed over a minute, at least 60 when a
    /// poller was always claiming) and the fleet's rate (`FleetSendRate`,
    /// sends a second: the ceiling of `Sent` per second).
    pub fn metrics(&self) -> Vec<(&'static str, f64, Unit)> {
        let mut metrics = self.summary.metrics();
        metrics.push(("OldestPendingAgeSeconds", self.oldest_due_pending_age_secs, Unit::Seconds));
        metrics.push(("ClaimingSeconds", self.claiming_until_ms as f64 / 1000.0, Unit::Seconds));
        if let Some(rate) = self.fleet_send_rate {
            metrics.push(("FleetSendRate", rate, Unit::Count));
        }
        metrics
    }
}

/// What one sweeper run did; the sweeper Lambda returns it.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SweepRun {
    pub reset: u32,
    pub dead_lettered: u32,
    pub swept: Vec<Reset>,
    pub feedback: FeedbackReport,
    pub retention: RetentionReport,
    pub oldest_due_pending_age_secs: f64,
    /// What holds back vacuum in the database, and for how long.
    pub vacuum_horizon: Horizon,
}

impl SweepRun {
    pub(super) fn count(&mut self, r: &Reset) {
        if r.to == EventStatus::Dead {
            self.dead_lettered += 1;
            tracing::error!(event_id = %r.id, attempts = r.attempts, "stuck event out of attempts; dead-lettered");
        } else {
            self.reset += 1;
            tracing::warn!(event_id = %r.id, attempts = r.attempts, "stuck event reset to PENDING");
        }
    }

    pub fn metrics(&self) -> Vec<(&'static str, f64, Unit)> {
        let mut metrics = vec![
            ("Swept", self.reset as f64, Unit::Count),
            ("DeadLettered", self.dead_lettered as f64, Unit::Count),
            ("OldestPendingAgeSeconds", self.oldest_due_pending_age_secs, Unit::Seconds),
            ("OldestXminAgeSeconds", self.vacuum_horizon.oldest_age_secs, Unit::Seconds),
            ("OldestXminAgeTransactions", self.vacuum_horizon.oldest_xmin_age as f64, Unit::Count),
            ("ResentOnEvidence", self.feedback.resent_on_evidence as f64, Unit::Count),
            ("UnknownLeftForOperator", self.feedback.counts.left_for_operator as f64, Unit::Count),
            ("AwaitingEvidence", self.feedback.counts.awaiting_evidence as f64, Unit::Count),
            ("EvidenceStalled", self.feedback.counts.evidence_stalled as f64, Unit::Count),
            ("SesEventsBehind", self.feedback.events_behind as f64, Unit::Count),
        ];
        if let Some(age) = self.feedback.watermark_age_secs {
            metrics.push(("SesWatermarkAgeSeconds", age, Unit::Seconds));
        }
        metrics
    }
}

/// The sweeper's settling of unknown sends on SES's evidence.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct FeedbackReport {
    /// Messages SES accepted more than the grace ago (of the last hour's
    /// latest 200) whose events have not come: while any, nothing is
    /// resent on SES's evidence.
    pub events_behind: i64,
    /// Resent this run: SES's stream moved past them, no event named them.
    pub resent_on_evidence: u32,
    /// Left for an operator this run.
    pub left_for_operator: u32,
    /// How the ambiguous sends stand after the run.
    pub counts: UnknownCounts,
    /// How old the newest second of SES's clock an event was about is
    /// (None: no event has arrived yet).
    pub watermark_age_secs: Option<f64>,
}

/// Rows deleted by one retention run, per table.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    pub events: u64,
    pub processed_events: u64,
    pub sends: u64,
    /// SES's events about sends retention already deleted.
    pub feedback: u64,
    /// Old seconds of SES's evidence watermark, and old canaries.
    pub evidence: u64,
    pub idempotency_keys: u64,
    /// Abuse-limit counters of past days.
    pub usage_counters: u64,
    /// Leases that ended and hold nothing (runs that died, or whose events
    /// were taken over).
    pub leases: u64,
}
