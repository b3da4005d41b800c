//! The poller: claims due events and dispatches them, until its deadline.
//!
//! One invocation keeps polling (with a short idle wait) until the remaining
//! time drops under a safety margin, so commit-to-send latency is the idle
//! wait, not the schedule period. Events are processed with bounded
//! concurrency; each holds its `processed_events` transaction open while its
//! recipients are dispatched, and commits it together with DONE.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use serde::Serialize;
use tokio::task::JoinSet;

use super::claim::{self, ClaimedEvent};
use super::complete::{self, Failed};
use crate::config::{self, ConfigError};
use crate::telemetry::emf::{self, Unit};
use crate::fault::Faults;
use crate::notify::dispatch;
use crate::notify::mailer::Mailer;

pub const DEFAULT_MAX_ATTEMPTS: i32 = 8;

/// Claimed rows are PROCESSING, nothing dispatched yet.
pub const FAULT_AFTER_CLAIM: &str = "poller.after_claim";
/// Every recipient handled; `processed_events` + DONE not yet committed.
pub const FAULT_BEFORE_DONE_COMMIT: &str = "poller.before_done_commit";

#[derive(Debug, Clone)]
pub struct PollerConfig {
    pub batch_size: i64,
    /// Events dispatched at once within one invocation.
    pub concurrency: usize,
    /// Wait between empty polls.
    pub idle_wait: Duration,
    /// Stop claiming when less than this remains before the deadline.
    pub safety_margin: Duration,
    pub max_attempts: i32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// How long to wait after the provider paused sending.
    pub pause_delay: Duration,
    /// `locked_by` of claimed rows.
    pub worker_id: String,
    /// Optional cap on one invocation's polling time (and the run time used
    /// when the runtime reports no usable deadline, as local emulators do).
    pub max_run: Option<Duration>,
}

impl PollerConfig {
    /// The concurrency configured in the environment, so the pool can be
    /// sized for it before the rest is read.
    pub fn concurrency_from_env() -> Result<usize, ConfigError> {
        config::parsed_or("POLLER_CONCURRENCY", 4usize)
    }

    pub fn from_env(pool_size: usize) -> Result<Self, ConfigError> {
        let cfg = Self {
            batch_size: config::parsed_or("POLLER_BATCH_SIZE", 32i64)?,
            concurrency: Self::concurrency_from_env()?,
            idle_wait: Duration::from_millis(config::parsed_or("POLLER_IDLE_WAIT_MS", 200u64)?),
            safety_margin: Duration::from_secs(config::parsed_or("POLLER_SAFETY_MARGIN_SECS", 10u64)?),
            max_attempts: config::parsed_or("OUTBOX_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)?,
            backoff_base: Duration::from_secs_f64(config::parsed_or("OUTBOX_BACKOFF_BASE_SECS", 2.0f64)?),
            backoff_cap: Duration::from_secs_f64(config::parsed_or("OUTBOX_BACKOFF_CAP_SECS", 900.0f64)?),
            pause_delay: Duration::from_secs(config::parsed_or("OUTBOX_PAUSE_DELAY_SECS", 300u64)?),
            worker_id: default_worker_id(),
            max_run: match config::parsed_or("POLLER_MAX_RUN_SECS", 0u64)? {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
        };
        cfg.validate(pool_size)?;
        Ok(cfg)
    }

    /// Defaults suitable for tests and benchmarks.
    pub fn for_tests(worker_id: &str) -> Self {
        Self {
            batch_size: 32,
            concurrency: 4,
            idle_wait: Duration::from_millis(20),
            safety_margin: Duration::from_millis(0),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            backoff_base: Duration::from_millis(0),
            backoff_cap: Duration::from_millis(0),
            pause_delay: Duration::from_secs(300),
            worker_id: worker_id.to_string(),
            max_run: None,
        }
    }

    pub fn validate(&self, pool_size: usize) -> Result<(), ConfigError> {
        if self.batch_size < 1 || self.concurrency < 1 || self.max_attempts < 1 {
            return Err(ConfigError(
                "POLLER_BATCH_SIZE, POLLER_CONCURRENCY and OUTBOX_MAX_ATTEMPTS must be at least 1".into(),
            ));
        }
        if self.backoff_cap < self.backoff_base {
            return Err(ConfigError("OUTBOX_BACKOFF_CAP_SECS must be at least OUTBOX_BACKOFF_BASE_SECS".into()));
        }
        // Each in-flight event holds its processed_events transaction plus one
        // connection for its claims; one more claims the next batch. Fewer
        // would let every connection wait for another: a deadlock.
        let needed = 2 * self.concurrency + 1;
        if pool_size < needed {
            return Err(ConfigError(format!(
                "DATABASE_POOL_SIZE ({pool_size}) is too small for POLLER_CONCURRENCY ({}): it needs at least {needed}",
                self.concurrency
            )));
        }
        Ok(())
    }

    /// Exponential backoff with jitter for the attempt that just failed
    /// (1-based): `base * 2^(n-1)`, capped, plus up to 100% jitter, capped again.
    pub fn backoff(&self, attempt: i32) -> Duration {
        let n = attempt.max(1) as usize;
        use backon::BackoffBuilder;
        backon::ExponentialBuilder::default()
            .with_min_delay(self.backoff_base)
            .with_max_delay(self.backoff_cap)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build()
            .nth(n - 1)
            .unwrap_or(self.backoff_cap)
            .min(self.backoff_cap)
    }
}

/// Converts a Lambda deadline (wall clock) into an `Instant`.
pub fn deadline_from(deadline: std::time::SystemTime) -> Instant {
    let left = deadline.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    Instant::now() + left
}

fn default_worker_id() -> String {
    let host = std::env::var("AWS_LAMBDA_LOG_STREAM_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "local".into());
    format!("{host}:{}:{}", std::process::id(), &uuid::Uuid::now_v7().simple().to_string()[24..])
}

/// What one run did; the poller Lambda returns it.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    pub batches: u32,
    pub claimed: u32,
    pub done: u32,
    pub already_processed: u32,
    pub sent: u32,
    pub skipped: u32,
    pub released: u32,
    pub failed: u32,
    pub unknown: u32,
    pub retried: u32,
    pub dead_lettered: u32,
    pub paused: bool,
    pub errors: u32,
    /// The slowest batch (claim + dispatch) of the run.
    pub batch_duration_ms_max: u64,
}

impl RunSummary {
    fn add(&mut self, o: &RunSummary) {
        self.batches += o.batches;
        self.claimed += o.claimed;
        self.done += o.done;
        self.already_processed += o.already_processed;
        self.sent += o.sent;
        self.skipped += o.skipped;
        self.released += o.released;
        self.failed += o.failed;
        self.unknown += o.unknown;
        self.retried += o.retried;
        self.dead_lettered += o.dead_lettered;
        self.paused |= o.paused;
        self.errors += o.errors;
        self.batch_duration_ms_max = self.batch_duration_ms_max.max(o.batch_duration_ms_max);
    }

    /// The run as EMF metrics (names used by the template's alarms).
    pub fn metrics(&self) -> Vec<(&'static str, f64, Unit)> {
        vec![
            ("Claimed", self.claimed as f64, Unit::Count),
            ("Sent", self.sent as f64, Unit::Count),
            ("Released", self.released as f64, Unit::Count),
            ("Unknown", self.unknown as f64, Unit::Count),
            ("PermanentlyFailed", self.failed as f64, Unit::Count),
            ("DeadLettered", self.dead_lettered as f64, Unit::Count),
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
}

/// Why a poller run stopped: the database, or an injected fault. (Mailer
/// failures are outcomes, not errors.)
pub use crate::notify::dispatch::DispatchError as PollerError;

pub struct Poller<M: Mailer + 'static> {
    pool: Pool,
    mailer: Arc<M>,
    faults: Faults,
    config: PollerConfig,
    paused: Arc<AtomicBool>,
}

impl<M: Mailer + 'static> Clone for Poller<M> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            mailer: self.mailer.clone(),
            faults: self.faults.clone(),
            config: self.config.clone(),
            paused: self.paused.clone(),
        }
    }
}

impl<M: Mailer + 'static> Poller<M> {
    pub fn new(pool: Pool, mailer: Arc<M>, faults: Faults, config: PollerConfig) -> Self {
        Self { pool, mailer, faults, config, paused: Arc::new(AtomicBool::new(false)) }
    }

    pub fn config(&self) -> &PollerConfig {
        &self.config
    }

    /// One scheduled invocation: poll until the deadline, then report the
    /// run and the outbox's lag as EMF metrics and as the returned health.
    pub async fn invoke(&self, deadline: Instant) -> Result<Health, PollerError> {
        let started = Instant::now();
        let deadline = self.effective_deadline(deadline, started);
        tracing::info!(remaining_ms = deadline.saturating_duration_since(started).as_millis() as u64, "poller run starting");
        let summary = self.run_until(deadline).await?;
        let client = self.pool.get().await?;
        let oldest = super::status::oldest_due_pending_age(&client).await?;
        let mut metrics = summary.metrics();
        metrics.push(("OldestPendingAgeSeconds", oldest, Unit::Seconds));
        emf::emit("outbox-poller", &metrics);
        Ok(Health { summary, oldest_due_pending_age_secs: oldest, duration_ms: started.elapsed().as_millis() as u64 })
    }

    /// The runtime's deadline, capped by `POLLER_MAX_RUN_SECS`. A local
    /// runtime emulator that reports a deadline already past (cargo lambda
    /// watch does) gets `now + POLLER_MAX_RUN_SECS` instead of a busy loop.
    fn effective_deadline(&self, deadline: Instant, now: Instant) -> Instant {
        match self.config.max_run {
            Some(max) if deadline <= now + self.config.safety_margin => {
                tracing::warn!("the runtime reported no usable deadline; polling for POLLER_MAX_RUN_SECS");
                now + max
            }
            Some(max) => deadline.min(now + max),
            None => deadline,
        }
    }

    /// Polls until `deadline - safety_margin`, or until the provider pauses
    /// sending.
    pub async fn run_until(&self, deadline: Instant) -> Result<RunSummary, PollerError> {
        self.paused.store(false, Ordering::SeqCst);
        let mut summary = RunSummary::default();
        loop {
            let now = Instant::now();
            if now + self.config.safety_margin >= deadline || self.paused.load(Ordering::SeqCst) {
                break;
            }
            let batch = self.poll_once().await?;
            let idle = batch.claimed == 0;
            summary.add(&batch);
            if idle {
                let left = deadline.saturating_duration_since(Instant::now() + self.config.safety_margin);
                tokio::time::sleep(self.config.idle_wait.min(left)).await;
            }
        }
        Ok(summary)
    }

    /// Polls until nothing is due (tests, `outboxctl`).
    pub async fn drain(&self) -> Result<RunSummary, PollerError> {
        self.paused.store(false, Ordering::SeqCst);
        let mut summary = RunSummary::default();
        loop {
            let batch = self.poll_once().await?;
            summary.add(&batch);
            if batch.claimed == 0 || self.paused.load(Ordering::SeqCst) {
                return Ok(summary);
            }
        }
    }

    /// Claims one batch and processes it with bounded concurrency.
    pub async fn poll_once(&self) -> Result<RunSummary, PollerError> {
        let started = Instant::now();
        let mut summary = self.poll_batch().await?;
        summary.batch_duration_ms_max = started.elapsed().as_millis() as u64;
        Ok(summary)
    }

    async fn poll_batch(&self) -> Result<RunSummary, PollerError> {
        let mut summary = RunSummary { batches: 1, ..RunSummary::default() };
        let (events, unreadable) = {
            let client = self.pool.get().await?;
            claim::claim_due(&client, self.config.batch_size, &self.config.worker_id).await?
        };
        summary.claimed = (events.len() + unreadable.len()) as u32;
        if summary.claimed == 0 {
            return Ok(summary);
        }
        self.faults.hit(FAULT_AFTER_CLAIM)?;
        for bad in unreadable {
            tracing::error!(event_id = %bad.id, reason = %bad.reason, "unreadable event dead-lettered");
            let client = self.pool.get().await?;
            complete::dead_letter(&client, bad.id, &self.config.worker_id, &bad.reason).await?;
            summary.dead_lettered += 1;
        }
        let mut tasks = JoinSet::new();
        let mut queue = events.into_iter();
        loop {
            while tasks.len() < self.config.concurrency {
                let Some(event) = queue.next() else { break };
                let this = self.clone();
                tasks.spawn(async move { this.process(event).await });
            }
            let Some(joined) = tasks.join_next().await else { break };
            match joined {
                Ok(Ok(one)) => summary.add(&one),
                Ok(Err(e)) => {
                    // The event stays PROCESSING; the sweeper will hand it
                    // back. Other events go on.
                    if let PollerError::Fault(_) = e {
                        return Err(e);
                    }
                    tracing::error!(error = %e, "event processing failed; left for the sweeper");
                    summary.errors += 1;
                }
                Err(join) => {
                    tracing::error!(error = %join, "event task panicked; left for the sweeper");
                    summary.errors += 1;
                }
            }
        }
        summary.paused = self.paused.load(Ordering::SeqCst);
        Ok(summary)
    }

    /// One event, from `processed_events` to DONE (or retry, or dead letter).
    #[tracing::instrument(skip_all, fields(event_id = %event.id, booking_id = %event.aggregate_id, event_type = %event.event_type, attempt = event.attempts))]
    async fn process(&self, event: ClaimedEvent) -> Result<RunSummary, PollerError> {
        let mut summary = RunSummary::default();
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        if !complete::try_insert_processed(&tx, event.id).await? {
            // A previous attempt committed: the event is processed already.
            complete::mark_done(&tx, event.id).await?;
            tx.commit().await?;
            summary.already_processed += 1;
            summary.done += 1;
            return Ok(summary);
        }
        let report =
            dispatch::dispatch(&self.pool, &*self.mailer, &self.faults, &self.config.worker_id, &event, &self.paused)
                .await?;
        summary.sent += report.sent;
        summary.skipped += report.skipped;
        summary.released += report.released;
        summary.failed += report.failed;
        summary.unknown += report.unknown;
        let worker = &self.config.worker_id;
        if let Some(reason) = report.misconfigured {
            tx.rollback().await?;
            let client = self.pool.get().await?;
            complete::dead_letter(&client, event.id, worker, &format!("mailer misconfigured: {reason}")).await?;
            summary.dead_lettered += 1;
        } else if let Some(reason) = report.retry_reason {
            tx.rollback().await?;
            let client = self.pool.get().await?;
            let delay = self.config.backoff(event.attempts);
            match complete::fail(&client, event.id, worker, delay, &reason, self.config.max_attempts).await? {
                Failed::Dead => {
                    tracing::error!(%reason, attempts = event.attempts, "attempts exhausted; dead-lettered");
                    summary.dead_lettered += 1;
                }
                Failed::Retrying => {
                    tracing::info!(%reason, delay_ms = delay.as_millis() as u64, "will retry");
                    summary.retried += 1;
                }
                Failed::NotOwned => tracing::warn!("event was swept from under this worker; left to its new owner"),
            }
        } else if let Some(reason) = report.paused {
            tx.rollback().await?;
            let client = self.pool.get().await?;
            complete::requeue(&client, event.id, worker, self.config.pause_delay, &format!("sending paused: {reason}"))
                .await?;
        } else {
            self.faults.hit(FAULT_BEFORE_DONE_COMMIT)?;
            complete::mark_done(&tx, event.id).await?;
            tx.commit().await?;
            summary.done += 1;
        }
        Ok(summary)
    }
}
