//! A poller run's lease, kept alive while the run works
//! ([`outbox::events::lease`](crate::outbox::events::lease) holds its SQL).
//!
//! [`Lease::take`] takes one and starts its keeper: a task with a
//! connection of its own (a pool busy with batches never delays a
//! renewal) that renews it every quarter of its length, never past the
//! run's deadline. The run asks [`Lease::holds`] before it claims and
//! before each send starts: it holds its lease until the end of the last
//! renewal that succeeded, counted from when that renewal was *sent*, so
//! the run never believes in its lease longer than the database does. A
//! renewal the database refuses (the lease ended: its events may belong to
//! another claim now), or none that succeeds before the end, and the run
//! stops on its own (self-fencing): no claim, no send starts, and whatever
//! it still writes about its events is fenced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use uuid::Uuid;

use crate::db::DbResult;
use crate::outbox::events::lease;

/// Renewals per lease length: a lease of 4 s is renewed every second, so
/// one renewal that fails or stalls for under 3 s costs nothing.
pub const RENEWALS_PER_LEASE: u32 = 4;

/// One run's lease, as this process sees it.
#[derive(Debug)]
pub struct Lease {
    pub id: Uuid,
    ttl: Duration,
    /// Held until then at most (the monotonic clock).
    until: Mutex<Instant>,
    /// The database refused a renewal, or the end came first: lost for good.
    lost: AtomicBool,
    /// The run ended: the keeper stops.
    done: AtomicBool,
}

impl Lease {
    /// Takes a lease of `ttl` (shortened to end by `deadline`, when given)
    /// and starts its keeper.
    pub async fn take(pool: &Pool, holder: &str, ttl: Duration, deadline: Option<Instant>) -> DbResult<Arc<Lease>> {
        let client = pool.get().await?;
        let sent = Instant::now();
        let first = bounded(ttl, deadline, sent);
        let id = lease::take(&client, holder, first).await?;
        let held = Arc::new(Lease {
            id,
            ttl,
            until: Mutex::new(sent + first),
            lost: AtomicBool::new(false),
            done: AtomicBool::new(false),
        });
        tokio::spawn(keep(held.clone(), pool.clone(), client, deadline));
        Ok(held)
    }

    /// Whether the run still holds its lease now.
    pub fn holds(&self) -> bool {
        !self.lost.load(Ordering::SeqCst) && Instant::now() < *self.until.lock().expect("lease lock")
    }

    /// Whether the lease was lost (refused, or ended before a renewal).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || !self.holds()
    }

    /// How often the keeper renews.
    pub fn renew_every(&self) -> Duration {
        self.ttl / RENEWALS_PER_LEASE
    }

    /// Ends the lease (the run is over): the keeper stops, and the lease is
    /// deleted, or ended at once if something is still held under it.
    pub async fn end(&self, pool: &Pool) {
        self.done.store(true, Ordering::SeqCst);
        let ended = async { lease::end(&pool.get().await?, self.id).await }.await;
        if let Err(e) = ended {
            tracing::warn!(lease = %self.id, error = %e, "could not end the lease; it ends by itself within its length");
        }
    }

    fn lose(&self, why: &str) {
        if !self.lost.swap(true, Ordering::SeqCst) {
            tracing::error!(lease = %self.id, why, "lease lost: this run claims and sends nothing more, and \
                whatever it still writes about its events is fenced");
        }
    }
}

/// `ttl`, or less so that it ends by `deadline`.
fn bounded(ttl: Duration, deadline: Option<Instant>, now: Instant) -> Duration {
    match deadline {
        Some(d) => ttl.min(d.saturating_duration_since(now)),
        None => ttl,
    }
}

/// Renews `held` every [`Lease::renew_every`] until the run ends or the
/// lease is lost. A renewal that fails on the database is tried again on a
/// fresh connection at the next tick, for as long as the lease still holds.
async fn keep(held: Arc<Lease>, pool: Pool, client: deadpool_postgres::Client, deadline: Option<Instant>) {
    let mut client = Some(client);
    let mut tick = tokio::time::interval(held.renew_every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if held.done.load(Ordering::SeqCst) {
            return;
        }
        if !held.holds() {
            held.lose("no renewal succeeded before the lease's end");
            return;
        }
        let sent = Instant::now();
        let ttl = bounded(held.ttl, deadline, sent);
        if ttl.is_zero() {
            // The run's deadline: the lease ends with it, never later.
            return;
        }
        let renewed = async {
            let c = match client.take() {
                Some(c) => c,
                None => pool.get().await?,
            };
            let r = lease::renew(&c, held.id, ttl).await;
            match r {
                Ok(_) => client = Some(c),
                // Never back to the pool: a connection the server cut may
                // not look closed yet, and the next user would fail on it.
                Err(_) => drop(deadpool_postgres::Object::take(c)),
            }
            r
        }
        .await;
        match renewed {
            Ok(true) => {
                let mut until = held.until.lock().expect("lease lock");
                *until = (*until).max(sent + ttl);
            }
            Ok(false) => {
                held.lose("the database refused the renewal: the lease had ended");
                return;
            }
            Err(e) => {
                tracing::warn!(lease = %held.id, error = %e, "renewing the lease failed; trying again");
            }
        }
    }
}
