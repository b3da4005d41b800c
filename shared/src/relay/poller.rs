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
use super::lease::Lease;
use super::role::Loop;
use super::summary::{Health, RunSummary};
use super::wake::Wake;
use super::RelayError;
use crate::booking::events::BookingEvent;
use crate::fault::Faults;
use crate::notify::mailer::Mailer;
use crate::notify::pace::Pacer;
use crate::outbox::events::{self, claim, transitions};
use crate::telemetry::emf;

/// Claimed rows are PROCESSING, nothing dispatched yet.
pub const FAULT_AFTER_CLAIM: &str = "poller.after_claim";

/// A batch whose processing failed on the database is processed again
/// after each of these pauses, before it is left to the sweeper.
pub const BATCH_RETRIES: [Duration; 3] =
    [Duration::from_millis(100), Duration::from_millis(500), Duration::from_millis(2000)];

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
    /// The sends in flight and, when paced, the fleet's shared rate
    /// (unpaced: as fast as the mailer answers, as in tests with the
    /// recording mailer).
    pub(super) pace: Arc<Pacer>,
    pub(super) rate: Arc<Mutex<RateSource>>,
    /// Where this poller's claims start in the due index (shared by its
    /// batches in flight and kept across runs).
    position: Arc<claim::ClaimPosition>,
    /// When this poller last tried to claim (the end of its claiming, once
    /// a run is over).
    last_poll: Arc<Mutex<Option<Instant>>>,
    /// What this batch loop claims ([`Loop`]).
    pub(super) role: Loop,
}

/// Where the fleet's rate comes from, and when it was last read.
#[derive(Debug, Default)]
pub(super) struct RateSource {
    /// The operator's cap (`SES_MAX_SEND_RATE`).
    pub(super) cap: Option<f64>,
    pub(super) read_at: Option<Instant>,
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
            pace: self.pace.clone(),
            rate: self.rate.clone(),
            position: self.position.clone(),
            last_poll: self.last_poll.clone(),
            role: self.role,
        }
    }
}

impl<M: Mailer + 'static> Poller<M> {
    pub fn new(pool: Pool, mailer: Arc<M>, faults: Faults, config: PollerConfig) -> Self {
        Self {
            pace: Arc::new(Pacer::unpaced(pool.clone(), config.concurrency)),
            pool,
            mailer,
            faults,
            config,
            paused: Arc::new(AtomicBool::new(false)),
            deadline: Default::default(),
            wake: None,
            rate: Default::default(),
            position: Default::default(),
            last_poll: Default::default(),
            role: Loop::Only,
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
        self.refresh_rate().await?;
        if let Err(e) = self.canary().await {
            tracing::warn!(error = %e, "could not send a canary for SES's evidence; the next run tries again");
        }
        let summary = self.run_until(deadline).await?;
        let client = self.pool.get().await?;
        let oldest = events::oldest_due_age(&client).await?.unwrap_or(0.0);
        let last_poll = self.last_poll.lock().expect("last poll lock").unwrap_or(started);
        let health = Health {
            summary,
            oldest_due_pending_age_secs: oldest,
            duration_ms: started.elapsed().as_millis() as u64,
            claiming_until_ms: last_poll.saturating_duration_since(started).as_millis() as u64,
            fleet_send_rate: self.pace.provider().map(|_| self.pace.rate()),
        };
        emf::emit("outbox-poller", &health.metrics());
        Ok(health)
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
        let summary =
            self.leased(Some(deadline), move |p, lease| async move { p.poll_loop(deadline, &lease).await }).await;
        *self.deadline.lock().expect("deadline lock") = None;
        summary
    }

    /// Runs `run` once per batch kept in flight (`POLLER_BATCHES_IN_FLIGHT`),
    /// under one lease ([`Lease`]) taken for them and ended after them, and
    /// adds up their runs.
    async fn leased<F, Fut>(&self, deadline: Option<Instant>, run: F) -> Result<RunSummary, RelayError>
    where
        F: Fn(Self, Arc<Lease>) -> Fut,
        Fut: std::future::Future<Output = Result<RunSummary, RelayError>> + Send + 'static,
    {
        let lease = Lease::take(&self.pool, &self.config.worker_id, self.config.lease, deadline).await?;
        let mut summary = self.in_flight(&lease, run).await;
        if let Ok(s) = &mut summary {
            s.lease_lost = lease.lost();
        }
        lease.end(&self.pool).await;
        summary
    }

    async fn in_flight<F, Fut>(&self, lease: &Arc<Lease>, run: F) -> Result<RunSummary, RelayError>
    where
        F: Fn(Self, Arc<Lease>) -> Fut,
        Fut: std::future::Future<Output = Result<RunSummary, RelayError>> + Send + 'static,
    {
        let mut tasks = JoinSet::new();
        let loops = self.config.batches_in_flight;
        for k in 0..loops {
            tasks.spawn(run(Self { role: Loop::of(loops, k), ..self.clone() }, lease.clone()));
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

    async fn poll_loop(&self, deadline: Instant, lease: &Lease) -> Result<RunSummary, RelayError> {
        let mut summary = RunSummary::default();
        loop {
            if !self.send_fits() || self.paused.load(Ordering::SeqCst) || !lease.holds() {
                break;
            }
            let batch = self.poll_batch(lease).await?;
            let idle = batch.claimed == 0;
            summary.add(&batch);
            if idle {
                let left = deadline.saturating_duration_since(Instant::now() + self.config.safety_margin);
                let wait = self.role.idle(self.config.idle_wait).min(left);
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
        self.leased(None, |p, lease| async move { p.drain_loop(&lease).await }).await
    }

    async fn drain_loop(&self, lease: &Lease) -> Result<RunSummary, RelayError> {
        let mut summary = RunSummary::default();
        // Nothing due after the claim position: one full pass decides.
        let mut looked_from_start = false;
        loop {
            let batch = self.poll_batch(lease).await?;
            summary.add(&batch);
            if self.paused.load(Ordering::SeqCst) || !lease.holds() {
                return Ok(summary);
            }
            match (batch.claimed, looked_from_start) {
                (0, true) => return Ok(summary),
                (0, false) => {
                    self.position.start_over();
                    looked_from_start = true;
                }
                _ => looked_from_start = false,
            }
        }
    }

    /// Claims one batch and processes it, under a lease of its own (tests; a
    /// run's batches share the run's).
    pub async fn poll_once(&self) -> Result<RunSummary, RelayError> {
        let lease = Lease::take(&self.pool, &self.config.worker_id, self.config.lease, None).await?;
        let summary = self.poll_batch(&lease).await;
        lease.end(&self.pool).await;
        summary
    }

    /// Claims one batch under `lease` and processes it.
    async fn poll_batch(&self, lease: &Lease) -> Result<RunSummary, RelayError> {
        let started = Instant::now();
        let mut summary = self.claim_and_process(lease).await?;
        summary.batch_duration_ms_max = started.elapsed().as_millis() as u64;
        Ok(summary)
    }

    async fn claim_and_process(&self, lease: &Lease) -> Result<RunSummary, RelayError> {
        let mut summary = RunSummary { batches: 1, ..RunSummary::default() };
        if !lease.holds() {
            return Ok(summary);
        }
        let claimed = {
            let client = self.pool.get().await?;
            *self.last_poll.lock().expect("last poll lock") = Some(Instant::now());
            let claimant = (self.config.worker_id.as_str(), lease.id);
            let paced = self.pace.provider().map(|_| self.pace.rate());
            let limit = self.role.batch_size(paced, self.config.batch_size);
            let turns = self.role.turns();
            claim::claim_due(&client, limit, turns, claimant, self.config.max_attempts, &self.position).await?
        };
        for id in &claimed.exhausted {
            tracing::error!(event_id = %id, "event taken over with its attempts used up (its pollers kept dying); \
                dead-lettered");
        }
        summary.dead_lettered += claimed.exhausted.len() as u32;
        let claimed = claimed.events;
        summary.claimed = claimed.len() as u32;
        summary.taken_over = claimed.iter().filter(|e| e.taken_over).count() as u32;
        if summary.taken_over > 0 {
            tracing::warn!(
                count = summary.taken_over,
                "took over events whose lease ended (their poller died or froze)"
            );
        }
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
                    if transitions::dead_letter(&client, event.id, lease.id, &reason).await? {
                        summary.dead_lettered += 1;
                    } else {
                        summary.fenced += 1;
                    }
                }
            }
        }
        if readable.is_empty() {
            return Ok(summary);
        }
        // A lost connection, or a restarted server, fails the batch midway.
        // The events are still this worker's (PROCESSING under its lease),
        // so it processes them again itself on fresh connections while its
        // lease holds: what was recorded stands (a claim with an outcome is
        // never sent again, one left CLAIMED becomes UNKNOWN), the rest goes
        // out now. Once the lease is lost, they are the next claim's.
        let mut pauses = BATCH_RETRIES.iter();
        loop {
            match self.process(readable.clone(), lease).await {
                Ok(one) => {
                    summary.add(&one);
                    break;
                }
                // An injected crash stops the run, as a real one would.
                Err(e @ RelayError::Fault(_)) => return Err(e),
                Err(e) if !lease.holds() => {
                    tracing::warn!(error = %e, "batch processing failed and the lease is lost; the events are \
                        the next claim's");
                    summary.errors += 1;
                    break;
                }
                Err(e) => match pauses.next() {
                    Some(pause) => {
                        tracing::warn!(error = %e, "batch processing failed; processing it again on fresh connections");
                        summary.recovered += 1;
                        tokio::time::sleep(*pause).await;
                    }
                    None => {
                        // The events stay PROCESSING; once the run ends its
                        // lease, the next claim takes them over.
                        tracing::error!(error = %e, "batch processing failed again; left for the next claim");
                        summary.errors += 1;
                        break;
                    }
                },
            }
        }
        summary.paused = self.paused.load(Ordering::SeqCst);
        Ok(summary)
    }

    pub(super) fn backoff(&self, attempt: i32) -> Duration {
        self.config.backoff(attempt)
    }
}
