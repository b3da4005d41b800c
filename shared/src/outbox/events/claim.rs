//! Claiming due events: `FOR UPDATE SKIP LOCKED`, then PROCESSING.
//!
//! SKIP LOCKED keeps two pollers from taking the same row at the same time;
//! it is a concurrency optimisation, not the correctness guarantee (that is
//! `processed_events` and the per-recipient claims).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use const_format::{concatcp, formatcp};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::sql::{DEAD, PENDING, PROCESSING};
use super::status::EventStatus;
use crate::db::DbResult;

/// An event this worker now holds in PROCESSING. The payload is the JSON
/// as written; the layer above decides what it means.
#[derive(Debug, Clone)]
pub struct ClaimedEvent {
    pub id: Uuid,
    pub aggregate_id: Uuid,
    pub aggregate_version: i32,
    pub event_type: String,
    pub payload: serde_json::Value,
    /// Attempts including this one.
    pub attempts: i32,
    /// The W3C trace context of the request that wrote it.
    pub traceparent: Option<String>,
    /// Taken over from a holder whose lease ended (it died, froze or lost
    /// the database), rather than claimed PENDING.
    pub taken_over: bool,
}

/// What one claim took.
#[derive(Debug, Default)]
pub struct Claimed {
    /// Now PROCESSING under the claimant's lease.
    pub events: Vec<ClaimedEvent>,
    /// Taken over with no attempt left: DEAD (their holders kept dying).
    pub exhausted: Vec<Uuid>,
}

/// The claim statement ($1 = limit, $2 = worker id, $3 = the claimant's
/// lease, $4 = the attempts after which an event is dead), from the start
/// of the due index. It takes, in one statement:
///
/// - **events whose lease ended** (their holder stopped renewing it: dead,
///   frozen or cut off), first: found through the ended leases
///   (`outbox_leases`, a handful of rows) and `outbox_events_processing`
///   (read once, an InitPlan), so a claim with no ended lease reads nothing more. Each is taken over
///   under the claimant's lease, the take-over's new token (see
///   [`super::lease`]); one out of attempts goes to DEAD instead, so a
///   poison event that kills its pollers ends in the dead letter;
/// - **due PENDING events**, through the partial index over due rows
///   (`outbox_events_due`), so millions of DONE rows do not slow it down.
///
/// Each candidate's booking is probed through `outbox_events_one_per_version`
/// (a booking has a handful of events). `OFFSET 0` keeps the ordering
/// check a per-row probe by `aggregate_id`: without it, a planner with
/// stale statistics turns it into an anti-join that scans every unfinished
/// row per candidate. The update finds each locked row by its `ctid` (the
/// version this statement locked, which nobody else can change before it
/// commits), not by a second descent of the primary key.
pub const CLAIM_DUE: &str = concatcp!(OVER, DUE_HEAD, DUE_TAIL);

/// [`CLAIM_DUE`] from after a position ($5 = next_attempt_at, $6 = id):
/// the due index's scan starts there instead of at the index's start.
pub const CLAIM_DUE_AFTER: &str = concatcp!(OVER, DUE_HEAD, " AND (e.next_attempt_at, e.id) > ($5, $6)", DUE_TAIL);

/// Per-booking order: no earlier event of the candidate's booking is
/// still PENDING or PROCESSING.
const IN_ORDER: &str = formatcp!(
    "NOT EXISTS ( \
        SELECT 1 FROM outbox_events earlier \
        WHERE earlier.aggregate_id = e.aggregate_id \
          AND earlier.aggregate_version < e.aggregate_version \
          AND earlier.status IN ({PENDING}, {PROCESSING}) \
        OFFSET 0)"
);

/// The ended leases are read once (an InitPlan: `outbox_leases` is a row
/// per poller run), and their events found by `outbox_events_processing`
/// (lease_id): with none ended, an index scan of an empty array, so the
/// ordering probe runs for no row. (A join let the planner scan every
/// PROCESSING row, and probe its booking, at each claim.)
const OVER: &str = formatcp!(
    "WITH over AS ( \
         SELECT e.ctid, e.id FROM outbox_events e \
         WHERE e.status = {PROCESSING} \
           AND e.lease_id = ANY (ARRAY(SELECT id FROM outbox_leases WHERE expires_at < now())) \
           AND {IN_ORDER} \
         LIMIT $1 \
         FOR UPDATE SKIP LOCKED), "
);

const DUE_HEAD: &str = formatcp!(
    "due AS ( \
         SELECT e.ctid, e.id FROM outbox_events e \
         WHERE e.status = {PENDING} AND e.next_attempt_at <= now()"
);

const DUE_TAIL: &str = formatcp!(
    " AND {IN_ORDER} \
         ORDER BY e.next_attempt_at, e.id \
         LIMIT $1 \
         FOR UPDATE SKIP LOCKED), \
     taken AS (SELECT ctid, id, true AS over FROM over \
               UNION ALL SELECT ctid, id, false FROM due LIMIT $1) \
     UPDATE outbox_events o \
        SET status = CASE WHEN {EXHAUSTED} THEN {DEAD} ELSE {PROCESSING} END, \
            last_error = CASE WHEN taken.over THEN format('%sits lease ended while %s held it', \
                                  CASE WHEN {EXHAUSTED} THEN format('attempts exhausted (%s): ', o.attempts) \
                                       ELSE '' END, o.locked_by) \
                              ELSE o.last_error END, \
            locked_at = CASE WHEN {EXHAUSTED} THEN NULL ELSE now() END, \
            locked_by = CASE WHEN {EXHAUSTED} THEN NULL ELSE $2 END, \
            lease_id = CASE WHEN {EXHAUSTED} THEN NULL ELSE $3::uuid END, \
            attempts = CASE WHEN {EXHAUSTED} THEN o.attempts ELSE o.attempts + 1 END, \
            updated_at = now() \
       FROM taken WHERE o.ctid = taken.ctid AND o.id = taken.id \
     RETURNING o.id, o.aggregate_id, o.aggregate_version, o.event_type, o.payload, o.attempts, o.next_attempt_at, \
               o.traceparent, o.status, taken.over"
);

/// A taken-over event with no attempt left (the old row's values).
const EXHAUSTED: &str = "(taken.over AND o.attempts >= $4)";

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
    fn next(&self) -> Option<Position> {
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

    /// Makes the next claim a full pass: a drain that found nothing after
    /// the position looks once more from the start before it ends.
    pub fn start_over(&self) {
        self.0.lock().expect("claim position lock").full_pass_at = None;
    }

    /// After a claim that ended at `last` (None: it claimed nothing). A
    /// full pass that took a whole batch may have stopped before the old
    /// position, so the position goes back to where it stopped (what it
    /// left there comes next); otherwise the position only moves on.
    fn claimed(&self, full: bool, took: Duration, saturated: bool, last: Option<Position>) {
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

/// Claims up to `limit` events under `lease`, in one short transaction,
/// from where `position` says (see [`ClaimPosition`]): first those whose
/// lease ended (taken over; DEAD when `max_attempts` are used up), then
/// due PENDING ones, all PROCESSING under `lease` afterwards.
///
/// Per-aggregate ordering: an event is only due when no earlier event of the
/// same aggregate is still PENDING or PROCESSING, so a cancellation never
/// overtakes its invitation. The filter runs before `LIMIT`, so a blocked
/// aggregate does not hold back anyone else's events.
pub async fn claim_due(
    client: &impl GenericClient,
    limit: i64,
    (worker, lease): (&str, Uuid),
    max_attempts: i32,
    position: &ClaimPosition,
) -> DbResult<Claimed> {
    let from = position.next();
    let started = Instant::now();
    let rows = match &from {
        None => {
            client.query(&client.prepare_cached(CLAIM_DUE).await?, &[&limit, &worker, &lease, &max_attempts]).await?
        }
        Some((at, id)) => {
            client
                .query(
                    &client.prepare_cached(CLAIM_DUE_AFTER).await?,
                    &[&limit, &worker, &lease, &max_attempts, at, id],
                )
                .await?
        }
    };
    let last = rows.iter().filter(|r| !r.get::<_, bool>("over")).map(|r| (r.get("next_attempt_at"), r.get("id"))).max();
    let due = rows.iter().filter(|r| !r.get::<_, bool>("over")).count() as i64;
    position.claimed(from.is_none(), started.elapsed(), due >= limit, last);
    let mut claimed = Claimed::default();
    for row in &rows {
        if EventStatus::from_row(row, "status")? == EventStatus::Dead {
            claimed.exhausted.push(row.get("id"));
            continue;
        }
        claimed.events.push(ClaimedEvent {
            id: row.get("id"),
            aggregate_id: row.get("aggregate_id"),
            aggregate_version: row.get("aggregate_version"),
            event_type: row.get("event_type"),
            payload: row.get("payload"),
            attempts: row.get("attempts"),
            traceparent: row.get("traceparent"),
            taken_over: row.get("over"),
        });
    }
    Ok(claimed)
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
