//! Where a poller's claims start in the due index ([`ClaimPosition`]),
//! shared by its batches in flight; read and moved by [`super::claim`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A place in the due index: an event's `(next_attempt_at, id)`.
type Position = (DateTime<Utc>, Uuid);

/// A full pass costs at most this share of the time spent claiming: it
/// comes again once this many times its own duration has passed.
pub const FULL_PASS_SPACING: u32 = 20;

/// A full pass comes at least this often, however long it takes.
pub const FULL_PASS_MAX_INTERVAL: Duration = Duration::from_secs(10);

/// Where one poller's claims start in the due index, shared by its batches
/// in flight.
///
/// A claimed event leaves its entry in the due index behind: the entry
/// points at a row version that is no longer PENDING, and vacuum removes it
/// only once no snapshot can still see that version. While something holds
/// an old snapshot (a long report, a session idle in transaction,
/// `pg_dump`, a lagging replication slot), those entries pile up at the
/// front of the index, and a claim from the start reads every one of them,
/// with a visit to its row version, before it finds a due event. So most
/// claims start after the last event this poller claimed: the index's
/// order is the order events fall due, and whatever falls due later (a new
/// event, a retry, a swept or replayed one) sorts after it.
///
/// What can sit before that position and still be due: an event whose
/// earlier version was still running when the claim passed it, one a
/// concurrent claim had locked and then gave up, and one whose transaction
/// began before, but committed after, the claimed events'. A full pass,
/// from the start, finds them: it runs whenever [`FULL_PASS_SPACING`]
/// times its last duration has passed (so on a clean index, every few
/// milliseconds), and at least every [`FULL_PASS_MAX_INTERVAL`].
#[derive(Debug, Default)]
pub struct ClaimPosition(Mutex<PositionState>);

#[derive(Debug, Default)]
struct PositionState {
    after: Option<Position>,
    full_pass_at: Option<Instant>,
    full_pass_took: Duration,
}

impl ClaimPosition {
    /// The position the next claim starts after; None for a full pass
    /// (which one batch in flight makes while the others go on after the
    /// position).
    pub(super) fn next(&self) -> Option<Position> {
        let mut state = self.0.lock().expect("claim position lock");
        let spacing = (state.full_pass_took * FULL_PASS_SPACING).min(FULL_PASS_MAX_INTERVAL);
        match state.full_pass_at {
            Some(at) if at.elapsed() < spacing && state.after.is_some() => state.after,
            _ => {
                state.full_pass_at = Some(Instant::now());
                None
            }
        }
    }

    /// The position, for a claim that neither makes a full pass nor moves
    /// it ([`super::claim::Turns::Contended`]: most of its claims take no PENDING event).
    pub(super) fn peek(&self) -> Option<Position> {
        self.0.lock().expect("claim position lock").after
    }

    /// Makes the next claim a full pass: a drain that found nothing after
    /// the position looks once more from the start before it ends.
    pub fn start_over(&self) {
        self.0.lock().expect("claim position lock").full_pass_at = None;
    }

    /// After a claim that ended at `last` (None: it claimed nothing). A
    /// full pass that took a whole batch may have stopped before the old
    /// position, so the position goes back to where it stopped (what it
    /// left there comes next); otherwise the position only moves on.
    pub(super) fn claimed(&self, full: bool, took: Duration, saturated: bool, last: Option<Position>) {
        let mut state = self.0.lock().expect("claim position lock");
        if full {
            state.full_pass_took = took;
        }
        let Some(last) = last else { return };
        state.after = Some(match state.after {
            Some(after) if !(full && saturated) => after.max(last),
            _ => last,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Position {
        (DateTime::from_timestamp(secs, 0).unwrap(), Uuid::nil())
    }

    #[test]
    fn the_first_claim_is_a_full_pass_and_the_next_start_after_its_last_event() {
        let p = ClaimPosition::default();
        assert_eq!(p.next(), None, "nothing claimed yet: from the start");
        p.claimed(true, Duration::from_secs(1), false, Some(at(10)));
        assert_eq!(p.next(), Some(at(10)));
        p.claimed(false, Duration::from_millis(1), true, Some(at(20)));
        assert_eq!(p.next(), Some(at(20)), "the position moves on");
        p.claimed(false, Duration::from_millis(1), false, Some(at(15)));
        assert_eq!(p.next(), Some(at(20)), "a claim in flight that ended earlier does not move it back");
        p.claimed(false, Duration::from_millis(1), false, None);
        assert_eq!(p.next(), Some(at(20)), "an empty claim leaves it");
    }

    #[test]
    fn a_full_pass_comes_again_after_twenty_times_its_duration_or_on_demand() {
        let p = ClaimPosition::default();
        assert_eq!(p.next(), None);
        // A full pass that took no time is due again at once.
        p.claimed(true, Duration::ZERO, false, Some(at(10)));
        assert_eq!(p.next(), None);
        p.claimed(true, Duration::from_secs(1), false, Some(at(10)));
        assert_eq!(p.next(), Some(at(10)), "within 20 s of a 1 s full pass");
        p.start_over();
        assert_eq!(p.next(), None, "a drain's last look is from the start");
    }

    #[test]
    fn a_full_pass_is_never_further_apart_than_the_max_interval() {
        let p = ClaimPosition::default();
        assert_eq!(p.next(), None);
        p.claimed(true, Duration::from_secs(3600), false, Some(at(10)));
        let mut state = p.0.lock().unwrap();
        state.full_pass_at = Some(Instant::now() - FULL_PASS_MAX_INTERVAL);
        drop(state);
        assert_eq!(p.next(), None, "a full pass of an hour still comes every {FULL_PASS_MAX_INTERVAL:?}");
    }

    #[test]
    fn a_full_pass_that_took_a_whole_batch_moves_the_position_back_to_where_it_stopped() {
        let p = ClaimPosition::default();
        p.next();
        p.claimed(true, Duration::from_secs(1), false, Some(at(50)));
        p.start_over();
        assert_eq!(p.next(), None);
        // Events left behind the position: the full pass took a batch of them.
        p.claimed(true, Duration::from_secs(1), true, Some(at(30)));
        assert_eq!(p.next(), Some(at(30)), "the rest behind the old position comes next");
        p.start_over();
        p.next();
        // One that found less than a batch saw all that was due.
        p.claimed(true, Duration::from_secs(1), false, Some(at(20)));
        assert_eq!(p.next(), Some(at(30)));
    }
}
