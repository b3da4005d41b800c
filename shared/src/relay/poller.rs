//! The poller: claims due events and hands each batch to [`Batch`], until
//! its deadline.
//!
//! One invocation keeps polling until the remaining time drops under a
//! safety margin. Between empty polls it waits for a committed event's
//! notification ([`Wake`]), or the idle wait without one, so commit-to-send
//! latency is a round trip, not the schedule period. `POLLER_BATCHES_IN_FLIGHT`
//! batches are processed at once, each with bounded concurrent sends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use deadpool_postgres::Pool;
use tokio::task::JoinSet;

use super::batch::Batch;
use super::canary;
use super::config::PollerConfig;
use super::lease::Lease;
use super::rate::RateSource;
use super::role::Loop;
use super::summary::{Health, RunSummary};
use super::wake::Wake;
use crate::fault::{Faults, RunError};
use crate::notify::mailer::{Mailer, SendOutcome};
use crate::notify::pacing::pace::Pacer;
use crate::outbox::events;
use crate::outbox::events::claim::{self, ClaimPosition};
use crate::telemetry::emf;

/// Claimed rows are PROCESSING, nothing dispatched yet.
pub const FAULT_AFTER_CLAIM: &str = "poller.after_claim";

/// Converts a Lambda deadline (wall clock) into an `Instant`.
pub fn deadline_from(deadline: std::time::SystemTime) -> Instant {
    let left = deadline.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    Instant::now() + left
}

/// What a poller's batch loops share: one per container, kept across runs.
struct Shared {
    pool: Pool,
    mailer: Arc<dyn Mailer>,
    faults: Faults,
    config: PollerConfig,
    /// Set once the provider pauses sending: no further send this run.
    paused: AtomicBool,
    /// The current run's deadline (none when draining): no send starts
    /// unless its worst case fits before it, with the safety margin.
    deadline: Mutex<Option<Instant>>,
    /// Wakes an idle run when an event commits (none: timed polls only).
    wake: Option<Wake>,
    /// The sends in flight and, when paced, the fleet's shared rate
    /// (unpaced: as fast as the mailer answers, as in tests with the
    /// recording mailer).
    pace: Pacer,
    rate: RateSource,
    /// Where this poller's claims start in the due index (shared by its
    /// batches in flight and kept across runs).
    position: ClaimPosition,
    /// When this poller last tried to claim (the end of its claiming, once
    /// a run is over).
    last_poll: Mutex<Option<Instant>>,
}

/// A poller: what its batch loops share, and what this loop claims
/// ([`Loop`]). A clone is another loop of the same poller.
#[derive(Clone)]
pub struct Poller {
    shared: Arc<Shared>,
    role: Loop,
}

impl Poller {
    pub fn new<M: Mailer + 'static>(pool: Pool, mailer: Arc<M>, faults: Faults, config: PollerConfig) -> Self {
        let shared = Shared {
            pace: Pacer::unpaced(pool.clone(), config.concurrency),
            pool,
            mailer,
            faults,
            config,
            paused: AtomicBool::new(false),
            deadline: Default::default(),
            wake: None,
            rate: Default::default(),
            position: Default::default(),
            last_poll: Default::default(),
        };
        Self { shared: Arc::new(shared), role: Loop::Only }
    }

    /// The poller being configured: before its first run, it is the only
    /// holder of what its loops will share.
    fn configuring(&mut self) -> &mut Shared {
        Arc::get_mut(&mut self.shared).expect("a poller is configured before it runs or is cloned")
    }

    /// Paces every send by the fleet's shared rate: the account's
    /// ([`Mailer::account_rate`]), or `cap` when lower. The rate is read at
    /// the first run and again every [`RATE_REFRESH`](super::rate::RATE_REFRESH).
    pub fn with_pace(mut self, pacer: Pacer, cap: Option<f64>) -> Self {
        let shared = self.configuring();
        shared.pace = pacer;
        shared.rate = RateSource::capped(cap);
        self
    }

    /// Waits for committed events' notifications between empty polls,
    /// instead of only the idle wait.
    pub fn with_wake(mut self, wake: Wake) -> Self {
        self.configuring().wake = Some(wake);
        self
    }

    pub fn config(&self) -> &PollerConfig {
        &self.shared.config
    }

    /// Reads the account's rate and writes the fleet's to the shared row,
    /// if it is due ([`RateSource::refresh`]). Returns the fleet's rate
    /// when it was read.
    pub async fn refresh_rate(&self) -> Result<Option<f64>, RunError> {
        let s = &self.shared;
        s.rate.refresh(&*s.mailer, &s.pace).await
    }

    /// Sends a canary when SES's evidence needs one ([`canary::send`]).
    pub async fn canary(&self) -> Result<Option<SendOutcome>, RunError> {
        let s = &self.shared;
        let fits = || self.send_fits();
        canary::send(&s.pool, &*s.mailer, &s.pace, s.config.canary_every, &fits).await
    }

    /// One scheduled invocation: poll until the deadline, then report the
    /// run and the outbox's lag as EMF metrics and as the returned health.
    pub async fn invoke(&self, deadline: Instant) -> Result<Health, RunError> {
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
        let client = self.shared.pool.get().await?;
        let oldest = events::standing::oldest_due_age(&client).await?.unwrap_or(0.0);
        let last_poll = self.shared.last_poll.lock().expect("last poll lock").unwrap_or(started);
        let health = Health {
            summary,
            oldest_due_pending_age_secs: oldest,
            duration_ms: started.elapsed().as_millis() as u64,
            claiming_until_ms: last_poll.saturating_duration_since(started).as_millis() as u64,
            fleet_send_rate: self.shared.pace.provider().map(|_| self.shared.pace.rate()),
        };
        emf::emit("outbox-poller", &health.metrics());
        Ok(health)
    }

    /// The runtime's deadline, capped by `POLLER_MAX_RUN_SECS`. A local
    /// runtime emulator that reports a deadline already past (cargo lambda
    /// watch does) gets `now + POLLER_MAX_RUN_SECS` instead of a busy loop.
    fn effective_deadline(&self, deadline: Instant, now: Instant) -> Instant {
        match self.shared.config.max_run {
            Some(max) if deadline <= now + self.shared.config.safety_margin => {
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
    pub async fn run_until(&self, deadline: Instant) -> Result<RunSummary, RunError> {
        self.shared.paused.store(false, Ordering::SeqCst);
        *self.shared.deadline.lock().expect("deadline lock") = Some(deadline);
        let summary =
            self.leased(Some(deadline), move |p, lease| async move { p.poll_loop(deadline, &lease).await }).await;
        *self.shared.deadline.lock().expect("deadline lock") = None;
        summary
    }

    /// Runs `run` once per batch kept in flight (`POLLER_BATCHES_IN_FLIGHT`),
    /// under one lease ([`Lease`]) taken for them and ended after them, and
    /// adds up their runs.
    async fn leased<F, Fut>(&self, deadline: Option<Instant>, run: F) -> Result<RunSummary, RunError>
    where
        F: Fn(Self, Arc<Lease>) -> Fut,
        Fut: std::future::Future<Output = Result<RunSummary, RunError>> + Send + 'static,
    {
        let lease =
            Lease::take(&self.shared.pool, &self.shared.config.worker_id, self.shared.config.lease, deadline).await?;
        let mut summary = self.in_flight(&lease, run).await;
        if let Ok(s) = &mut summary {
            s.lease_lost = lease.lost();
        }
        lease.end(&self.shared.pool).await;
        summary
    }

    async fn in_flight<F, Fut>(&self, lease: &Arc<Lease>, run: F) -> Result<RunSummary, RunError>
    where
        F: Fn(Self, Arc<Lease>) -> Fut,
        Fut: std::future::Future<Output = Result<RunSummary, RunError>> + Send + 'static,
    {
        let mut tasks = JoinSet::new();
        let loops = self.shared.config.batches_in_flight;
        for k in 0..loops {
            tasks.spawn(run(Self { role: Loop::of(loops, k), shared: self.shared.clone() }, lease.clone()));
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

    async fn poll_loop(&self, deadline: Instant, lease: &Lease) -> Result<RunSummary, RunError> {
        let mut summary = RunSummary::default();
        loop {
            if !self.send_fits() || self.shared.paused.load(Ordering::SeqCst) || !lease.holds() {
                break;
            }
            let batch = self.poll_batch(lease).await?;
            let idle = batch.claimed == 0;
            summary.add(&batch);
            if idle {
                let left = deadline.saturating_duration_since(Instant::now() + self.shared.config.safety_margin);
                let wait = self.role.idle(self.shared.config.idle_wait).min(left);
                match &self.shared.wake {
                    Some(wake) => wake.wait(wait).await,
                    None => tokio::time::sleep(wait).await,
                }
            }
        }
        Ok(summary)
    }

    /// Whether a send started now would end, at worst, before the run's
    /// deadline minus the safety margin (always, without a deadline).
    pub fn send_fits(&self) -> bool {
        match *self.shared.deadline.lock().expect("deadline lock") {
            Some(deadline) => {
                Instant::now() + self.shared.mailer.worst_case() + self.shared.config.safety_margin < deadline
            }
            None => true,
        }
    }

    /// Polls until nothing is due (tests, `outboxctl`).
    pub async fn drain(&self) -> Result<RunSummary, RunError> {
        self.shared.paused.store(false, Ordering::SeqCst);
        self.leased(None, |p, lease| async move { p.drain_loop(&lease).await }).await
    }

    async fn drain_loop(&self, lease: &Lease) -> Result<RunSummary, RunError> {
        let mut summary = RunSummary::default();
        // Nothing due after the claim position: one full pass decides.
        let mut looked_from_start = false;
        loop {
            let batch = self.poll_batch(lease).await?;
            summary.add(&batch);
            if self.shared.paused.load(Ordering::SeqCst) || !lease.holds() {
                return Ok(summary);
            }
            match (batch.claimed, looked_from_start) {
                (0, true) => return Ok(summary),
                (0, false) => {
                    self.shared.position.start_over();
                    looked_from_start = true;
                }
                _ => looked_from_start = false,
            }
        }
    }

    /// Claims one batch and processes it, under a lease of its own (tests; a
    /// run's batches share the run's).
    pub async fn poll_once(&self) -> Result<RunSummary, RunError> {
        let lease =
            Lease::take(&self.shared.pool, &self.shared.config.worker_id, self.shared.config.lease, None).await?;
        let summary = self.poll_batch(&lease).await;
        lease.end(&self.shared.pool).await;
        summary
    }

    /// Claims one batch under `lease` and processes it.
    async fn poll_batch(&self, lease: &Lease) -> Result<RunSummary, RunError> {
        let started = Instant::now();
        let mut summary = self.claim_and_process(lease).await?;
        summary.batch_duration_ms_max = started.elapsed().as_millis() as u64;
        Ok(summary)
    }

    async fn claim_and_process(&self, lease: &Lease) -> Result<RunSummary, RunError> {
        let mut summary = RunSummary { batches: 1, ..RunSummary::default() };
        if !lease.holds() {
            return Ok(summary);
        }
        let claimed = {
            let client = self.shared.pool.get().await?;
            *self.shared.last_poll.lock().expect("last poll lock") = Some(Instant::now());
            let claimant = (self.shared.config.worker_id.as_str(), lease.id);
            let paced = self.shared.pace.provider().map(|_| self.shared.pace.rate());
            let limit = self.role.batch_size(paced, self.shared.config.batch_size);
            let turns = self.role.turns();
            claim::claim_due(&client, limit, turns, claimant, self.shared.config.max_attempts, &self.shared.position)
                .await?
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
        self.shared.faults.hit(FAULT_AFTER_CLAIM)?;
        let fits = || self.send_fits();
        summary.add(&self.batch(&fits).process_claimed(claimed, lease).await?);
        summary.paused = self.shared.paused.load(Ordering::SeqCst);
        Ok(summary)
    }

    /// What processing a claimed batch needs of this poller.
    fn batch<'a>(&'a self, send_fits: &'a (dyn Fn() -> bool + Sync)) -> Batch<'a> {
        let s = &self.shared;
        Batch {
            pool: &s.pool,
            mailer: &*s.mailer,
            faults: &s.faults,
            config: &s.config,
            paused: &s.paused,
            send_fits,
            pace: &s.pace,
        }
    }
}
