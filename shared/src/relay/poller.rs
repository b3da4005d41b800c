//! The poller: claims due events and hands each to [`super::event`], until
//! its deadline.
//!
//! One invocation keeps polling until the remaining time drops under a
//! safety margin. Between empty polls it waits for a committed event's
//! notification ([`Wake`]), or the idle wait without one, so commit-to-send
//! latency is a round trip, not the schedule period. `POLLER_BATCHES_IN_FLIGHT`
//! batches are processed at once, each with bounded concurrent sends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::task::JoinSet;

use super::config::PollerConfig;
use super::summary::{Health, RunSummary};
use super::wake::Wake;
use super::RelayError;
use crate::booking::events::BookingEvent;
use crate::fault::Faults;
use crate::notify::mailer::Mailer;
use crate::outbox::events::{self, claim, transitions};
use crate::telemetry::emf::{self, Unit};

/// Claimed rows are PROCESSING, nothing dispatched yet.
pub const FAULT_AFTER_CLAIM: &str = "poller.after_claim";

/// Converts a Lambda deadline (wall clock) into an `Instant`.
pub fn deadline_from(deadline: std::time::SystemTime) -> Instant {
    let left = deadline.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    Instant::now() + left
}

pub struct Poller<M: Mailer + 'static> {
    pub(super) pool: Pool,
    pub(super) mailer: Arc<M>,
    pub(super) faults: Faults,
    pub(super) config: PollerConfig,
    /// Set once the provider pauses sending: no further send this run.
    pub(super) paused: Arc<AtomicBool>,
    /// The current run's deadline (none when draining): no send starts
    /// unless its worst case fits before it, with the safety margin.
    pub(super) deadline: Arc<Mutex<Option<Instant>>>,
    /// Wakes an idle run when an event commits (none: timed polls only).
    pub(super) wake: Option<Arc<Wake>>,
}

impl<M: Mailer + 'static> Clone for Poller<M> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            mailer: self.mailer.clone(),
            faults: self.faults.clone(),
            config: self.config.clone(),
            paused: self.paused.clone(),
            deadline: self.deadline.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<M: Mailer + 'static> Poller<M> {
    pub fn new(pool: Pool, mailer: Arc<M>, faults: Faults, config: PollerConfig) -> Self {
        Self {
            pool,
            mailer,
            faults,
            config,
            paused: Arc::new(AtomicBool::new(false)),
            deadline: Default::default(),
            wake: None,
        }
    }

    /// Waits for committed events' notifications between empty polls,
    /// instead of only the idle wait.
    pub fn with_wake(mut self, wake: Wake) -> Self {
        self.wake = Some(Arc::new(wake));
        self
    }

    pub fn config(&self) -> &PollerConfig {
        &self.config
    }

    /// One scheduled invocation: poll until the deadline, then report the
    /// run and the outbox's lag as EMF metrics and as the returned health.
    pub async fn invoke(&self, deadline: Instant) -> Result<Health, RelayError> {
        let started = Instant::now();
        let deadline = self.effective_deadline(deadline, started);
        tracing::info!(
            remaining_ms = deadline.saturating_duration_since(started).as_millis() as u64,
            "poller run starting"
        );
        let summary = self.run_until(deadline).await?;
        let client = self.pool.get().await?;
        let oldest = events::oldest_due_age(&client).await?.unwrap_or(0.0);
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
    /// sending. No claim is made, and no send started, unless one send's
    /// worst case still fits before that.
    pub async fn run_until(&self, deadline: Instant) -> Result<RunSummary, RelayError> {
        self.paused.store(false, Ordering::SeqCst);
        *self.deadline.lock().expect("deadline lock") = Some(deadline);
        let summary = self.poll_until(deadline).await;
        *self.deadline.lock().expect("deadline lock") = None;
        summary
    }

    async fn poll_until(&self, deadline: Instant) -> Result<RunSummary, RelayError> {
        self.in_flight(move |p| async move { p.poll_loop(deadline).await }).await
    }

    /// Runs `run` once per batch kept in flight (`POLLER_BATCHES_IN_FLIGHT`),
    /// and adds up their runs.
    async fn in_flight<F, Fut>(&self, run: F) -> Result<RunSummary, RelayError>
    where
        F: Fn(Self) -> Fut,
        Fut: std::future::Future<Output = Result<RunSummary, RelayError>> + Send + 'static,
    {
        let mut tasks = JoinSet::new();
        for _ in 0..self.config.batches_in_flight {
            tasks.spawn(run(self.clone()));
        }
        let (mut summary, mut failed) = (RunSummary::default(), None);
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(one)) => summary.add(&one),
                Ok(Err(e)) => {
                    failed.get_or_insert(e);
                }
                Err(join) => {
                    tracing::error!(error = %join, "poll loop panicked");
                    summary.errors += 1;
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }

    async fn poll_loop(&self, deadline: Instant) -> Result<RunSummary, RelayError> {
        let mut summary = RunSummary::default();
        loop {
            if !self.send_fits() || self.paused.load(Ordering::SeqCst) {
                break;
            }
            let batch = self.poll_once().await?;
            let idle = batch.claimed == 0;
            summary.add(&batch);
            if idle {
                let left = deadline.saturating_duration_since(Instant::now() + self.config.safety_margin);
                let wait = self.config.idle_wait.min(left);
                match &self.wake {
                    Some(wake) => wake.wait(wait).await,
                    None => tokio::time::sleep(wait).await,
                }
            }
        }
        Ok(summary)
    }

    /// Whether a send started now would end, at worst, before the run's
    /// deadline minus the safety margin (always, without a deadline).
    pub(super) fn send_fits(&self) -> bool {
        match *self.deadline.lock().expect("deadline lock") {
            Some(deadline) => Instant::now() + self.mailer.worst_case() + self.config.safety_margin < deadline,
            None => true,
        }
    }

    /// Polls until nothing is due (tests, `outboxctl`).
    pub async fn drain(&self) -> Result<RunSummary, RelayError> {
        self.paused.store(false, Ordering::SeqCst);
        self.in_flight(|p| async move { p.drain_loop().await }).await
    }

    async fn drain_loop(&self) -> Result<RunSummary, RelayError> {
        let mut summary = RunSummary::default();
        loop {
            let batch = self.poll_once().await?;
            summary.add(&batch);
            if batch.claimed == 0 || self.paused.load(Ordering::SeqCst) {
                return Ok(summary);
            }
        }
    }

    /// Claims one batch and processes it.
    pub async fn poll_once(&self) -> Result<RunSummary, RelayError> {
        let started = Instant::now();
        let mut summary = self.poll_batch().await?;
        summary.batch_duration_ms_max = started.elapsed().as_millis() as u64;
        Ok(summary)
    }

    async fn poll_batch(&self) -> Result<RunSummary, RelayError> {
        let mut summary = RunSummary { batches: 1, ..RunSummary::default() };
        let claimed = {
            let client = self.pool.get().await?;
            claim::claim_due(&client, self.config.batch_size, &self.config.worker_id).await?
        };
        summary.claimed = claimed.len() as u32;
        if claimed.is_empty() {
            return Ok(summary);
        }
        self.faults.hit(FAULT_AFTER_CLAIM)?;
        let mut readable = Vec::with_capacity(claimed.len());
        for event in claimed {
            match BookingEvent::decode(&event) {
                Ok(decoded) => readable.push((decoded, event.attempts)),
                Err(reason) => {
                    // A poison message: retrying cannot help.
                    tracing::error!(event_id = %event.id, %reason, "unreadable event dead-lettered");
                    let client = self.pool.get().await?;
                    transitions::dead_letter(&client, event.id, &self.config.worker_id, &reason).await?;
                    summary.dead_lettered += 1;
                }
            }
        }
        if readable.is_empty() {
            return Ok(summary);
        }
        match self.process(readable).await {
            Ok(one) => summary.add(&one),
            // An injected crash stops the run, as a real one would.
            Err(e @ RelayError::Fault(_)) => return Err(e),
            Err(e) => {
                // The events stay PROCESSING; the sweeper will hand them back.
                tracing::error!(error = %e, "batch processing failed; left for the sweeper");
                summary.errors += 1;
            }
        }
        summary.paused = self.paused.load(Ordering::SeqCst);
        Ok(summary)
    }

    pub(super) fn backoff(&self, attempt: i32) -> Duration {
        self.config.backoff(attempt)
    }
}
