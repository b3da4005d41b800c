//! Claiming due events: `FOR UPDATE SKIP LOCKED`, then PROCESSING.
//!
//! SKIP LOCKED keeps two pollers from taking the same row at the same time;
//! it is a concurrency optimisation, not the correctness guarantee (that is
//! `processed_events` and the per-recipient claims).

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::sql::{PENDING, PROCESSING};
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
}

/// The claim statement ($1 = limit, $2 = worker id). It reads the partial
/// index over due rows (`outbox_events_due`), so millions of DONE rows do
/// not slow it down, and probes each candidate's booking through
/// `outbox_events_one_per_version` (a booking has a handful of events).
/// `OFFSET 0` keeps the ordering check a per-row probe by `aggregate_id`:
/// without it, a planner with stale statistics turns it into an anti-join
/// that scans every unfinished row per candidate. The update finds each
/// locked row by its `ctid` (the version this statement locked, which
/// nobody else can change before it commits), not by a second descent of
/// the primary key.
pub const CLAIM_DUE: &str = formatcp!(
    "WITH due AS ( \
         SELECT e.ctid, e.id FROM outbox_events e \
         WHERE e.status = {PENDING} AND e.next_attempt_at <= now() \
           AND NOT EXISTS ( \
               SELECT 1 FROM outbox_events earlier \
               WHERE earlier.aggregate_id = e.aggregate_id \
                 AND earlier.aggregate_version < e.aggregate_version \
                 AND earlier.status IN ({PENDING}, {PROCESSING}) \
               OFFSET 0) \
         ORDER BY e.next_attempt_at \
         LIMIT $1 \
         FOR UPDATE SKIP LOCKED) \
     UPDATE outbox_events o \
        SET status = {PROCESSING}, locked_at = now(), locked_by = $2, \
            attempts = o.attempts + 1, updated_at = now() \
       FROM due WHERE o.ctid = due.ctid AND o.id = due.id \
     RETURNING o.id, o.aggregate_id, o.aggregate_version, o.event_type, o.payload, o.attempts"
);

/// Claims up to `limit` due PENDING events and marks them PROCESSING, in one
/// short transaction.
///
/// Per-aggregate ordering: an event is only due when no earlier event of the
/// same aggregate is still PENDING or PROCESSING, so a cancellation never
/// overtakes its invitation. The filter runs before `LIMIT`, so a blocked
/// aggregate does not hold back anyone else's events.
pub async fn claim_due(client: &impl GenericClient, limit: i64, worker: &str) -> DbResult<Vec<ClaimedEvent>> {
    let rows = client.query(&client.prepare_cached(CLAIM_DUE).await?, &[&limit, &worker]).await?;
    Ok(rows
        .iter()
        .map(|row| ClaimedEvent {
            id: row.get("id"),
            aggregate_id: row.get("aggregate_id"),
            aggregate_version: row.get("aggregate_version"),
            event_type: row.get("event_type"),
            payload: row.get("payload"),
            attempts: row.get("attempts"),
        })
        .collect())
}
