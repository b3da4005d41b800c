//! What each of a run's batch loops claims, and how much at once: with
//! more than one loop, the first takes turns between organizers quickly and
//! the others keep the rate fed.

use std::time::Duration;

use crate::outbox::events::claim;

/// A paced batch holds at most this many seconds of the fleet's rate in
/// events.
pub const BATCH_SECS: f64 = 1.0;

/// The loop that takes turns ([`Loop::Turns`]) claims at most this many
/// seconds of the fleet's rate at once, so it claims again every few
/// tenths of a second, whatever the others hold: an organizer whose turn
/// has come (the claim takes a share of each due turn) waits for that
/// loop's next claim, not for the end of batches a second of the rate long
/// each.
pub const TURN_BATCH_SECS: f64 = 1.0 / 32.0;

/// The loop that takes turns looks again this soon after a claim that
/// found at most one organizer with due work.
pub const TURN_IDLE: Duration = Duration::from_millis(100);

/// One of a run's batch loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loop {
    /// The only loop (one batch in flight, a drain, one batch): fair turns
    /// ([`claim::Turns::Shared`]) in batches of [`BATCH_SECS`].
    Only,
    /// Fair turns in batches of [`TURN_BATCH_SECS`], only while more than
    /// one organizer has due work ([`claim::Turns::Contended`]; otherwise it
    /// looks again after [`TURN_IDLE`]): it claims again every few tenths
    /// of a second, so an organizer whose turn has come waits for that, not
    /// for the end of the other loops' batches, and it costs nothing while
    /// there is nobody to be fair to.
    Turns,
    /// Oldest-due first ([`claim::Turns::Skipped`]), in batches of
    /// [`BATCH_SECS`]: the cheaper claim for the bulk of the rate.
    Bulk,
}

impl Loop {
    /// The `k`th of `loops` batch loops.
    pub fn of(loops: usize, k: usize) -> Loop {
        match (loops, k) {
            (1, _) => Loop::Only,
            (_, 0) => Loop::Turns,
            _ => Loop::Bulk,
        }
    }

    /// The claim this loop makes.
    pub fn turns(self) -> claim::Turns {
        match self {
            Loop::Only => claim::Turns::Shared,
            Loop::Turns => claim::Turns::Contended,
            Loop::Bulk => claim::Turns::Skipped,
        }
    }

    /// Events claimed at once: `max` (`POLLER_BATCH_SIZE`), and when paced
    /// at `rate` no more than [`BATCH_SECS`] of it ([`TURN_BATCH_SECS`] in
    /// the loop that takes turns), so at a low rate a batch does not hold
    /// events (PROCESSING) that it will not send soon.
    pub fn batch_size(self, rate: Option<f64>, max: i64) -> i64 {
        match rate {
            Some(rate) if rate > 0.0 => {
                let secs = if self == Loop::Turns { TURN_BATCH_SECS } else { BATCH_SECS };
                ((rate * secs).ceil() as i64).clamp(1, max)
            }
            _ => max,
        }
    }

    /// How long to wait after a claim that found nothing (`idle_wait`, the
    /// setting, but [`TURN_IDLE`] in the loop that takes turns).
    pub fn idle(self, idle_wait: Duration) -> Duration {
        if self == Loop::Turns {
            TURN_IDLE
        } else {
            idle_wait
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_of_several_loops_takes_turns_and_one_alone_shares() {
        assert_eq!(Loop::of(1, 0), Loop::Only);
        assert_eq!((Loop::of(4, 0), Loop::of(4, 1), Loop::of(4, 3)), (Loop::Turns, Loop::Bulk, Loop::Bulk));
    }

    #[test]
    fn a_paced_batch_holds_a_second_of_the_rate_and_the_turns_loop_a_32nd() {
        assert_eq!(Loop::Bulk.batch_size(Some(200.0), 500), 200);
        assert_eq!(Loop::Turns.batch_size(Some(200.0), 500), 7);
        assert_eq!(Loop::Only.batch_size(Some(0.5), 500), 1);
        assert_eq!(Loop::Bulk.batch_size(Some(10_000.0), 500), 500, "never past the setting");
        assert_eq!(Loop::Turns.batch_size(None, 500), 500, "unpaced: the setting");
    }
}
