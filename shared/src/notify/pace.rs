//! How fast one poller sends: the fleet's rate, taken from the shared
//! bucket ([`send_rate`]), and enough sends in flight to reach it.
//!
//! - **Rate.** Before each send the poller takes a token. Tokens come from
//!   the database a few at a time (as many as its sends waiting for one, up
//!   to [`TAKE_SECS`] of the rate) and are used at once or dropped
//!   ([`TOKEN_LIFE`]), so a poller never hoards sends it could start later
//!   on top of the others'.
//! - **Sends in flight.** A poller keeps `rate × p95 send latency` sends in
//!   flight (plus a quarter, so jitter does not starve the rate), at least
//!   one and at most its ceiling (`POLLER_CONCURRENCY`). Fewer cannot reach
//!   the rate; more would only wait on tokens while holding their claims.
//!   The latency is observed over the last [`LATENCY_SAMPLES`] sends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::Notify;

use super::send_rate::{self, Configured};
use crate::db::{DbError, DbResult};

/// Each take from the bucket asks for about this much of the rate's sends.
pub const TAKE_SECS: f64 = 0.05;
/// A token not used within this long is dropped.
pub const TOKEN_LIFE: Duration = Duration::from_millis(100);
/// The send latency assumed before any send was observed.
pub const ASSUMED_LATENCY: Duration = Duration::from_millis(100);
/// The sends whose latency the p95 is taken over.
pub const LATENCY_SAMPLES: usize = 200;
/// How long the fleet sends at half its rate after a throttling answer.
pub const SLOW_FOR: Duration = Duration::from_secs(10);

struct Tokens {
    left: u32,
    taken_at: Instant,
}

struct Flight {
    active: usize,
    target: usize,
    rate: f64,
    latencies: VecDeque<Duration>,
    since_target: usize,
}

/// One poller's pace; shared by its batches in flight.
pub struct Pacer {
    pool: Pool,
    provider: &'static str,
    ceiling: usize,
    tokens: tokio::sync::Mutex<Tokens>,
    /// Sends waiting for a token now: a take asks for no more than these.
    waiting: AtomicUsize,
    flight: Mutex<Flight>,
    freed: Notify,
}

/// A send in flight; dropping it frees the place.
pub struct Slot<'a>(&'a Pacer);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.flight.lock().expect("flight lock").active -= 1;
        self.0.freed.notify_one();
    }
}

impl Pacer {
    /// A pacer for `provider`'s bucket, with at most `ceiling` sends in
    /// flight. It sends nothing until [`Pacer::configure`] has set the rate.
    pub fn new(pool: Pool, provider: &'static str, ceiling: usize) -> Self {
        let ceiling = ceiling.max(1);
        Self {
            pool,
            provider,
            ceiling,
            tokens: tokio::sync::Mutex::new(Tokens { left: 0, taken_at: Instant::now() }),
            waiting: AtomicUsize::new(0),
            flight: Mutex::new(Flight {
                active: 0,
                target: 1,
                rate: 0.0,
                latencies: VecDeque::with_capacity(LATENCY_SAMPLES),
                since_target: 0,
            }),
            freed: Notify::new(),
        }
    }

    /// Sets the fleet's rate from the account's (`account_rate`) and the
    /// operator's cap, in the shared row.
    pub async fn configure(&self, account_rate: f64, cap: Option<f64>) -> DbResult<Configured> {
        let configured = send_rate::configure(&self.pool.get().await?, self.provider, account_rate, cap).await?;
        self.set_rate(configured.rate);
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

    /// The claim group to use: sends claimed together should go out soon
    /// after their claims commit, so at a low rate the group shrinks to a
    /// few times the sends in flight (a crash then leaves fewer UNKNOWN,
    /// and a run's deadline defers fewer), never above `configured`.
    pub fn claim_group(&self, configured: usize) -> usize {
        (self.target() * 4).clamp(1, configured.max(1))
    }

    /// Sends in flight needed to reach `rate` at a p95 latency of `p95`.
    pub fn needed(rate: f64, p95: Duration) -> usize {
        (rate * p95.as_secs_f64() * 1.25).ceil().max(1.0) as usize
    }

    /// The fleet's rate this poller paces at (sends a second; 0 until
    /// [`Pacer::configure`]).
    pub fn rate(&self) -> f64 {
        self.flight.lock().expect("flight lock").rate
    }

    fn set_rate(&self, rate: f64) {
        let mut f = self.flight.lock().expect("flight lock");
        f.rate = rate;
        self.retarget(&mut f);
    }

    fn retarget(&self, f: &mut Flight) {
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

    /// Waits for a place among the sends in flight.
    pub async fn slot(&self) -> Slot<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut f = self.flight.lock().expect("flight lock");
                if f.active < f.target {
                    f.active += 1;
                    return Slot(self);
                }
            }
            freed.await;
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

    /// Waits until the fleet's rate lets one more send start: true. False
    /// as soon as `fits` says the send would no longer end in time (the
    /// run's deadline), so a run never waits on tokens past its deadline.
    pub async fn token(&self, fits: &(dyn Fn() -> bool + Sync)) -> Result<bool, DbError> {
        // Counted while this future lives, however it ends (a dropped send
        // stops waiting too).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        self.take_token(fits).await
    }

    async fn take_token(&self, fits: &(dyn Fn() -> bool + Sync)) -> Result<bool, DbError> {
        let mut tokens = self.tokens.lock().await;
        loop {
            if !fits() {
                return Ok(false);
            }
            if tokens.left > 0 && tokens.taken_at.elapsed() < TOKEN_LIFE {
                tokens.left -= 1;
                return Ok(true);
            }
            // As many as wait for one (a token this poller cannot use soon
            // is one the fleet loses), up to TAKE_SECS of the rate.
            let rate = self.flight.lock().expect("flight lock").rate;
            let most = (rate * TAKE_SECS).ceil().max(1.0) as usize;
            let want = self.waiting.load(Ordering::SeqCst).clamp(1, most) as u32;
            let client = self.pool.get().await?;
            let grant = send_rate::take(&client, self.provider, want).await?;
            drop(client);
            match grant {
                None => {
                    return Err(DbError::Corrupt(format!(
                        "send_rate has no row for {}: no poller configured the fleet's rate",
                        self.provider
                    )))
                }
                Some(g) if g.granted > 0 => {
                    *tokens = Tokens { left: g.granted - 1, taken_at: Instant::now() };
                    return Ok(true);
                }
                Some(g) => tokio::time::sleep(g.wait.max(Duration::from_millis(1))).await,
            }
        }
    }

    /// A throttling answer: the fleet slows down for [`SLOW_FOR`], and this
    /// poller drops the tokens it holds.
    pub async fn throttled(&self) -> DbResult<()> {
        self.tokens.lock().await.left = 0;
        send_rate::slow_down(&self.pool.get().await?, self.provider, SLOW_FOR).await
    }
}
