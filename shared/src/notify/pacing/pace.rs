//! How fast one poller sends, and how many sends it claims at once.
//!
//! - **Places in flight.** Every send holds a place from its claim to its
//!   end. A paced poller keeps `rate × (p95 send latency + HORIZON)`
//!   places (plus a quarter, so jitter does not starve the rate), at least
//!   one and at most its ceiling (`POLLER_CONCURRENCY`); an unpaced one
//!   keeps its ceiling. The latency is observed over the last
//!   [`LATENCY_SAMPLES`] sends.
//! - **Start times.** A paced send also gets its own start time from the
//!   fleet's schedule ([`send_rate::reserve`]): times exactly `1 / rate`
//!   apart, whichever poller holds them, so no one-second window holds more
//!   than the rate. A poller reserves at most [`HORIZON`] of the schedule
//!   ahead, the first time at least the claim's own duration ahead (the
//!   lead), and reserves again only once less than half a horizon of its
//!   sends is still ahead, so a reservation serves a chunk of sends, not
//!   one. A send that wakes more than [`LATE`] after its time gives the
//!   time up and takes a new one: a late send would crowd the next ones.
//! - **Just in time.** [`Pacer::admit`] hands out only sends that can start
//!   now: a place each and, when paced, a time within the horizon. The
//!   deliverer claims exactly those, so every committed claim is at most
//!   one horizon from its send, and a crash leaves UNKNOWN at most the
//!   sends this poller had in flight, never a group waiting for the rate.
//! - **Throttled.** A throttling answer lowers the fleet's throttle factor
//!   ([`THROTTLE`]: × 0.9, at most once a second), which grows back by 0.01
//!   a second: most of the rate is kept while the limit is found again.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::Notify;

use crate::db::{DbError, DbResult};
use crate::notify::pacing::send_rate::{self, Configured, Shape};

/// How far ahead of now a poller reserves the fleet's schedule at most.
pub const HORIZON: Duration = Duration::from_millis(50);
/// A send that wakes this long after its time takes a new one.
pub const LATE: Duration = Duration::from_millis(10);
/// The lead (how far ahead the first reserved time is) is twice the
/// claim's average duration, within these bounds.
pub const LEAD_BOUNDS: (Duration, Duration) = (Duration::from_millis(1), Duration::from_millis(50));
/// The send latency assumed before any send was observed.
pub const ASSUMED_LATENCY: Duration = Duration::from_millis(100);
/// The sends whose latency the p95 is taken over.
pub const LATENCY_SAMPLES: usize = 200;
/// How the fleet answers a throttling answer (the headroom is the
/// setting's, see [`Pacer::new`]).
pub const THROTTLE: Shape =
    Shape { headroom: 1.0, decrease: 0.9, floor: 0.1, recovery_per_sec: 0.01, once_per: Duration::from_secs(1) };

struct Flight {
    active: usize,
    target: usize,
    /// The fleet's rate kept (0 until configured; unpaced: 0).
    rate: f64,
    latencies: VecDeque<Duration>,
    since_target: usize,
    /// The claim statement's average duration.
    claim: Duration,
    /// The latest start time this poller holds.
    ahead: Option<Instant>,
}

/// One poller's pace; shared by its batches in flight.
pub struct Pacer {
    pool: Pool,
    /// The fleet's schedule this poller keeps (None: unpaced, places only).
    provider: Option<&'static str>,
    shape: Shape,
    ceiling: usize,
    flight: Mutex<Flight>,
    freed: Notify,
    /// One reservation at a time per poller.
    reserving: tokio::sync::Mutex<()>,
}

/// A place among the sends in flight; dropping it frees the place.
pub struct Place<'a>(&'a Pacer);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.flight.lock().expect("flight lock").active -= 1;
        self.0.freed.notify_one();
    }
}

/// A send that may be claimed now: its place, and its start time when paced.
pub struct Admitted<'a> {
    pub place: Place<'a>,
    pub at: Option<Instant>,
}

impl Pacer {
    /// A pacer on `provider`'s schedule, keeping `headroom` of its rate
    /// (`SEND_RATE_HEADROOM`), with at most `ceiling` sends in flight. It
    /// sends nothing until [`Pacer::configure`] has set the rate.
    pub fn new(pool: Pool, provider: &'static str, ceiling: usize, headroom: f64) -> Self {
        Self::build(pool, Some(provider), ceiling, Shape { headroom, ..THROTTLE })
    }

    /// A pacer without a rate: at most `ceiling` sends in flight.
    pub fn unpaced(pool: Pool, ceiling: usize) -> Self {
        Self::build(pool, None, ceiling, THROTTLE)
    }

    fn build(pool: Pool, provider: Option<&'static str>, ceiling: usize, shape: Shape) -> Self {
        let ceiling = ceiling.max(1);
        Self {
            pool,
            provider,
            shape,
            ceiling,
            flight: Mutex::new(Flight {
                active: 0,
                target: if provider.is_some() { 1 } else { ceiling },
                rate: 0.0,
                latencies: VecDeque::with_capacity(LATENCY_SAMPLES),
                since_target: 0,
                claim: LEAD_BOUNDS.0,
                ahead: None,
            }),
            freed: Notify::new(),
            reserving: tokio::sync::Mutex::new(()),
        }
    }

    /// The schedule this poller keeps (None: unpaced).
    pub fn provider(&self) -> Option<&'static str> {
        self.provider
    }

    /// Sets the fleet's rate from the account's (`account_rate`) and the
    /// operator's cap, in the shared row.
    pub async fn configure(&self, account_rate: f64, cap: Option<f64>) -> DbResult<Configured> {
        let provider = self.provider.ok_or_else(|| DbError::Corrupt("an unpaced poller has no rate".into()))?;
        let configured = send_rate::configure(&self.pool.get().await?, provider, account_rate, cap).await?;
        self.set_rate(configured.rate * self.shape.headroom);
        Ok(configured)
    }

    /// The sends in flight this poller aims for now.
    pub fn target(&self) -> usize {
        self.flight.lock().expect("flight lock").target
    }

    /// The most sends in flight this poller allows.
    pub fn ceiling(&self) -> usize {
        self.ceiling
    }

    /// Places needed to reach `rate` when a send takes `p95` and waits up to
    /// a horizon for its time.
    pub fn needed(rate: f64, p95: Duration) -> usize {
        let held = p95 + HORIZON;
        (rate * held.as_secs_f64() * 1.25).ceil().max(1.0) as usize
    }

    /// The rate this poller paces at (sends a second, as the fleet's
    /// schedule keeps it: headroom and throttle factor included; 0 when
    /// unpaced or not yet configured).
    pub fn rate(&self) -> f64 {
        self.flight.lock().expect("flight lock").rate
    }

    fn set_rate(&self, rate: f64) {
        let mut f = self.flight.lock().expect("flight lock");
        f.rate = rate;
        self.retarget(&mut f);
    }

    fn retarget(&self, f: &mut Flight) {
        if self.provider.is_none() {
            return;
        }
        let p95 = match f.latencies.len() {
            0 => ASSUMED_LATENCY,
            n => {
                let mut sorted: Vec<Duration> = f.latencies.iter().copied().collect();
                sorted.sort_unstable();
                sorted[(n * 95 / 100).min(n - 1)]
            }
        };
        let needed = Self::needed(f.rate, p95);
        if needed > self.ceiling && f.target < self.ceiling {
            tracing::warn!(
                needed,
                ceiling = self.ceiling,
                p95_ms = p95.as_millis() as u64,
                rate = f.rate,
                "this poller cannot keep enough sends in flight to reach the fleet's rate alone; \
                 raise POLLER_CONCURRENCY (or run more pollers)"
            );
        }
        let grew = needed.min(self.ceiling) > f.target;
        f.target = needed.min(self.ceiling);
        f.since_target = 0;
        if grew {
            self.freed.notify_waiters();
        }
    }

    /// Records how long one send took.
    pub fn observe(&self, latency: Duration) {
        let mut f = self.flight.lock().expect("flight lock");
        if f.latencies.len() == LATENCY_SAMPLES {
            f.latencies.pop_front();
        }
        f.latencies.push_back(latency);
        f.since_target += 1;
        // Often at first, then every few dozen sends.
        if f.since_target >= (f.latencies.len() / 4).clamp(1, 32) {
            self.retarget(&mut f);
        }
    }

    /// Records how long one claim statement took: the lead follows it.
    pub fn observe_claim(&self, took: Duration) {
        let mut f = self.flight.lock().expect("flight lock");
        f.claim = (f.claim * 4 + took) / 5;
    }

    fn lead(&self) -> Duration {
        let claim = self.flight.lock().expect("flight lock").claim;
        (claim * 2).clamp(LEAD_BOUNDS.0, LEAD_BOUNDS.1)
    }

    fn try_place(&self) -> Option<Place<'_>> {
        let mut f = self.flight.lock().expect("flight lock");
        (f.active < f.target).then(|| {
            f.active += 1;
            Place(self)
        })
    }

    /// Waits for a place among the sends in flight.
    async fn place(&self) -> Place<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(place) = self.try_place() {
                return place;
            }
            freed.await;
        }
    }

    /// Waits until at least one send may start now, and hands out up to
    /// `max` of them: a place each and, when paced, a start time each, in
    /// order. Empty as soon as `fits` says a send would no longer end in
    /// time (the run's deadline): a run never waits past it.
    pub async fn admit(&self, max: usize, fits: &(dyn Fn() -> bool + Sync)) -> Result<Vec<Admitted<'_>>, DbError> {
        if !fits() {
            return Ok(Vec::new());
        }
        let mut places = vec![self.place().await];
        while places.len() < max.max(1) {
            match self.try_place() {
                Some(place) => places.push(place),
                None => break,
            }
        }
        if self.provider.is_none() {
            return Ok(places.into_iter().map(|place| Admitted { place, at: None }).collect());
        }
        let times = self.reserve(places.len(), fits).await?;
        Ok(places.into_iter().zip(times).map(|(place, at)| Admitted { place, at: Some(at) }).collect())
    }

    /// A new start time for a send that woke too late for its own; None
    /// when it would no longer end in time.
    pub async fn retime(&self, fits: &(dyn Fn() -> bool + Sync)) -> Result<Option<Instant>, DbError> {
        Ok(self.reserve(1, fits).await?.into_iter().next())
    }

    /// Up to `want` (at least one) start times from the fleet's schedule,
    /// once less than half a horizon of this poller's sends is still
    /// ahead; empty when `fits` says no.
    async fn reserve(&self, want: usize, fits: &(dyn Fn() -> bool + Sync)) -> Result<Vec<Instant>, DbError> {
        let provider = self.provider.expect("only a paced poller reserves times");
        let _one = self.reserving.lock().await;
        let ahead = self.flight.lock().expect("flight lock").ahead;
        if let Some(until) = ahead.and_then(|a| a.checked_sub(self.lead() + HORIZON / 2)) {
            tokio::time::sleep_until(until.into()).await;
        }
        loop {
            if !fits() {
                return Ok(Vec::new());
            }
            let lead = self.lead();
            let asked = Instant::now();
            let client = self.pool.get().await?;
            let reserved = send_rate::reserve(&client, provider, want as u32, lead, HORIZON, &self.shape).await?;
            drop(client);
            // The database's now, on this clock: half-way through the call.
            let now = asked + asked.elapsed() / 2;
            let Some(r) = reserved else {
                return Err(DbError::Corrupt(format!(
                    "send_rate has no row for {provider}: no poller configured the fleet's rate"
                )));
            };
            if r.granted > 0 {
                let times: Vec<Instant> = (0..r.granted).map(|i| now + r.first_in + r.gap * i).collect();
                let mut f = self.flight.lock().expect("flight lock");
                f.ahead = times.last().copied().max(f.ahead);
                if (r.rate - f.rate).abs() > f64::EPSILON {
                    f.rate = r.rate;
                    self.retarget(&mut f);
                }
                return Ok(times);
            }
            tokio::time::sleep(r.wait.max(Duration::from_millis(1))).await;
        }
    }

    /// A throttling answer: the fleet's throttle factor is lowered (at most
    /// once per [`THROTTLE`]`.once_per`). Returns the factor now.
    pub async fn throttled(&self) -> DbResult<f64> {
        match self.provider {
            Some(provider) => send_rate::throttled(&self.pool.get().await?, provider, &self.shape).await,
            None => Ok(1.0),
        }
    }
}
