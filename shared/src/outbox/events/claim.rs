//! Claiming due events: `FOR UPDATE SKIP LOCKED`, then PROCESSING.
//!
//! SKIP LOCKED keeps two pollers from taking the same row at the same time;
//! it is a concurrency optimisation, not the correctness guarantee (that is
//! `processed_events` and the consumer's own claims).

use std::time::Instant;

use const_format::{concatcp, formatcp};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

pub use super::position::{ClaimPosition, FULL_PASS_MAX_INTERVAL, FULL_PASS_SPACING};
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
/// - **a share of each due turn** (`FAIR`, V45): the turns whose
///   `next_turn` has come, least recently served first, each its share of
///   seven eighths of the claim, its own oldest due first, through
///   `outbox_events_turns`; so one turn's backlog never delays
///   another's next event by more than a claim. A turn served moves to
///   now, or to its next event's time if later; one the claim looked at
///   but did not serve (its events waiting behind an earlier one of their
///   aggregate, or taken already) to its next event's time, whenever that
///   is: it keeps its place;
/// - **due PENDING events** for the rest, oldest-due first, through the
///   partial index over due rows (`outbox_events_due`), so millions of
///   DONE rows do not slow it down. This part alone takes every due event
///   in time, whatever `outbox_turns` says: at least an eighth of every
///   claim is its.
///
/// Each candidate's aggregate is probed through `outbox_events_one_per_version`
/// (an aggregate has a handful of events). `OFFSET 0` keeps the ordering
/// check a per-row probe by `aggregate_id`: without it, a planner with
/// stale statistics turns it into an anti-join that scans every unfinished
/// row per candidate. The update finds each locked row by its `ctid` (the
/// version this statement locked, which nobody else can change before it
/// commits), not by a second descent of the primary key.
pub const CLAIM_DUE: &str = concatcp!(OVER, FAIR, DUE_HEAD, DUE_TAIL, TURNED, UPDATE);

/// [`CLAIM_DUE`] from after a position ($5 = next_attempt_at, $6 = id):
/// the due index's scan starts there instead of at the index's start.
pub const CLAIM_DUE_AFTER: &str = concatcp!(OVER, FAIR, DUE_HEAD, AFTER, DUE_TAIL, TURNED, UPDATE);

/// [`CLAIM_DUE`] without the turns' share: oldest-due first alone
/// ([`Turns::Skipped`]).
pub const CLAIM_OLDEST: &str = concatcp!(OVER, NO_TURNS, DUE_HEAD, DUE_TAIL, UPDATE);

/// [`CLAIM_OLDEST`] from after a position, as [`CLAIM_DUE_AFTER`].
pub const CLAIM_OLDEST_AFTER: &str = concatcp!(OVER, NO_TURNS, DUE_HEAD, AFTER, DUE_TAIL, UPDATE);

/// [`CLAIM_DUE`] that takes no PENDING event unless more than one turn is
/// due ([`Turns::Contended`]).
pub const CLAIM_CONTENDED: &str = concatcp!(OVER, FAIR, DUE_HEAD, DUE_TAIL_CONTENDED, TURNED, UPDATE);

/// [`CLAIM_CONTENDED`] from after a position, as [`CLAIM_DUE_AFTER`].
pub const CLAIM_CONTENDED_AFTER: &str = concatcp!(OVER, FAIR, DUE_HEAD, AFTER, DUE_TAIL_CONTENDED, TURNED, UPDATE);

const AFTER: &str = " AND (e.next_attempt_at, e.id) > ($5, $6)";

/// Whether a claim takes a share of each due turn (`FAIR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turns {
    /// A share of each due turn first, then oldest-due first.
    Shared,
    /// Oldest-due first alone: the cheaper claim, for a poller's loops
    /// that keep the rate fed while another takes the turns.
    Skipped,
    /// As [`Turns::Shared`] while more than one turn is due; otherwise no
    /// PENDING event (taken-over ones still): nobody to be fair to, and the
    /// oldest-due loops take them.
    Contended,
}

/// No turn taken: the `fair` part is empty, and `outbox_turns` untouched.
const NO_TURNS: &str = "fair AS (SELECT NULL::tid AS ctid, NULL::uuid AS id, NULL::text AS turn WHERE false), ";

/// Per-aggregate order: no earlier event of the candidate's aggregate is
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
/// PROCESSING row, and probe its aggregate, at each claim.)
const OVER: &str = formatcp!(
    "WITH over AS ( \
         SELECT e.ctid, e.id FROM outbox_events e \
         WHERE e.status = {PROCESSING} \
           AND e.lease_id = ANY (ARRAY(SELECT id FROM outbox_leases WHERE expires_at < now())) \
           AND {IN_ORDER} \
         LIMIT $1 \
         FOR UPDATE SKIP LOCKED), "
);

/// The claim's share of due turns: seven eighths of it (at least one
/// event), split evenly between the due turns, when it found more than
/// one (one turn alone is served oldest-due first, as it would be: a
/// burst of one turn costs the claim one read of it). The turns are locked (SKIP
/// LOCKED: two pollers serve different turns at once); each turn's own
/// oldest due events are read through `outbox_events_turns` and ranked,
/// so the first event of every turn comes before the second of any; the
/// events are locked one level up, by `ctid` (a window function and
/// FOR UPDATE cannot share a level).
const FAIR: &str = formatcp!(
    "turns AS ( \
         SELECT t.turn, t.from_at, t.from_id FROM outbox_turns t WHERE t.next_turn <= now() \
         ORDER BY t.next_turn LIMIT $1 FOR UPDATE SKIP LOCKED), \
     room AS (SELECT CASE WHEN count(*) > 1 THEN greatest(1, $1 - greatest(1, $1 / 8)) ELSE 0 END AS n FROM turns), \
     share AS (SELECT ceil((SELECT n FROM room)::numeric / greatest(count(*), 1))::bigint AS n FROM turns), \
     turn_due AS ( \
         SELECT c.* FROM turns k CROSS JOIN LATERAL ( \
             SELECT e.ctid, e.id, e.next_attempt_at, row_number() OVER (ORDER BY e.next_attempt_at, e.id) AS rank \
               FROM outbox_events e \
              WHERE e.status = {PENDING} AND e.turn = k.turn AND (e.next_attempt_at, e.id) >= (k.from_at, k.from_id) \
                AND e.next_attempt_at <= now() AND {IN_ORDER} \
              ORDER BY e.turn, e.next_attempt_at, e.id \
              LIMIT (SELECT n FROM share)) c), \
     fair AS ( \
         SELECT e.ctid, e.id, e.turn FROM ( \
             SELECT ctid, id FROM turn_due ORDER BY rank, next_attempt_at, id LIMIT (SELECT n FROM room)) c \
           JOIN outbox_events e ON e.ctid = c.ctid AND e.id = c.id \
          WHERE e.status = {PENDING} AND e.next_attempt_at <= now() \
          FOR UPDATE OF e SKIP LOCKED), "
);

const DUE_HEAD: &str = formatcp!(
    "due AS ( \
         SELECT e.ctid, e.id FROM outbox_events e \
         WHERE e.status = {PENDING} AND e.next_attempt_at <= now() \
           AND NOT (e.id = ANY (ARRAY(SELECT id FROM fair)))"
);

const DUE_TAIL: &str = concatcp!(DUE_ORDER, "$1", DUE_END);

/// [`DUE_TAIL`] that takes nothing unless the claim found more than one
/// turn due ([`Turns::Contended`]).
const DUE_TAIL_CONTENDED: &str = concatcp!(DUE_ORDER, "(SELECT CASE WHEN n > 0 THEN $1 ELSE 0 END FROM room)", DUE_END);

const DUE_ORDER: &str = formatcp!(
    " AND {IN_ORDER} \
         ORDER BY e.next_attempt_at, e.id \
         LIMIT "
);

const DUE_END: &str = formatcp!(
    " FOR UPDATE SKIP LOCKED), \
     taken AS (SELECT ctid, id, 'over' AS part FROM over \
               UNION ALL SELECT ctid, id, 'fair' FROM fair \
               UNION ALL SELECT ctid, id, 'due' FROM due LIMIT $1) "
);

/// A turn looked at moves on (see [`FAIR`]).
const TURNED: &str = formatcp!(
    ", turned AS ( \
         UPDATE outbox_turns t \
            SET next_turn = CASE WHEN t.turn = ANY (ARRAY(SELECT turn FROM fair)) \
                                 THEN greatest(now(), coalesce(n.at, 'infinity')) \
                                 ELSE coalesce(n.at, 'infinity') END, \
                from_at = coalesce(n.at, now()), \
                from_id = coalesce(n.id, '00000000-0000-0000-0000-000000000000') \
           FROM (SELECT k.turn, f.at, f.id FROM turns k LEFT JOIN LATERAL ( \
                     SELECT e.next_attempt_at AS at, e.id FROM outbox_events e \
                      WHERE e.status = {PENDING} AND e.turn = k.turn \
                        AND (e.next_attempt_at, e.id) >= (k.from_at, k.from_id) \
                        AND NOT (e.id = ANY (ARRAY(SELECT id FROM taken))) \
                      ORDER BY e.turn, e.next_attempt_at, e.id LIMIT 1) f ON true) n \
          WHERE t.turn = ANY (ARRAY(SELECT turn FROM turns)) AND t.turn = n.turn)"
);

const UPDATE: &str = formatcp!(
    " UPDATE outbox_events o \
        SET status = CASE WHEN {EXHAUSTED} THEN {DEAD} ELSE {PROCESSING} END, \
            last_error = CASE WHEN taken.part = 'over' THEN format('%sits lease ended while %s held it', \
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
               o.traceparent, o.status, taken.part"
);

/// A taken-over event with no attempt left (the old row's values).
const EXHAUSTED: &str = "(taken.part = 'over' AND o.attempts >= $4)";

/// Claims up to `limit` events under `lease`, in one short transaction,
/// from where `position` says (see [`ClaimPosition`]): first those whose
/// lease ended (taken over; DEAD when `max_attempts` are used up), then
/// (with [`Turns::Shared`]) a share of each due turn, then due PENDING
/// ones, all PROCESSING under `lease` afterwards.
///
/// Per-aggregate ordering: an event is only due when no earlier event of the
/// same aggregate is still PENDING or PROCESSING, so a deletion never
/// overtakes the creation it ends. The filter runs before `LIMIT`, so a blocked
/// aggregate does not hold back anyone else's events.
pub async fn claim_due(
    client: &impl GenericClient,
    limit: i64,
    turns: Turns,
    (worker, lease): (&str, Uuid),
    max_attempts: i32,
    position: &ClaimPosition,
) -> DbResult<Claimed> {
    let from = match turns {
        Turns::Contended => position.peek(),
        Turns::Shared | Turns::Skipped => position.next(),
    };
    let started = Instant::now();
    let (first, after) = match turns {
        Turns::Shared => (CLAIM_DUE, CLAIM_DUE_AFTER),
        Turns::Skipped => (CLAIM_OLDEST, CLAIM_OLDEST_AFTER),
        Turns::Contended => (CLAIM_CONTENDED, CLAIM_CONTENDED_AFTER),
    };
    let rows = match &from {
        None => client.query(&client.prepare_cached(first).await?, &[&limit, &worker, &lease, &max_attempts]).await?,
        Some((at, id)) => {
            client
                .query(&client.prepare_cached(after).await?, &[&limit, &worker, &lease, &max_attempts, at, id])
                .await?
        }
    };
    // The position follows the oldest-due part alone: a turn's share may
    // lie far ahead of it in the due index.
    let part = |r: &tokio_postgres::Row| r.get::<_, &str>("part") == "due";
    let last = rows.iter().filter(|r| part(r)).map(|r| (r.get("next_attempt_at"), r.get("id"))).max();
    let due = rows.iter().filter(|r| r.get::<_, &str>("part") != "over").count() as i64;
    if turns != Turns::Contended {
        position.claimed(from.is_none(), started.elapsed(), due >= limit, last);
    }
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
            taken_over: row.get::<_, &str>("part") == "over",
        });
    }
    Ok(claimed)
}
