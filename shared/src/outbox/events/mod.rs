//! `outbox_events`: every statement on the table lives in this module and
//! its children.
//!
//! - here: writing an event inside the caller's transaction, and reading
//!   events back (operators, metrics, tests);
//! - [`claim`]: claiming due events, and taking over those whose lease
//!   ended (`FOR UPDATE SKIP LOCKED`, PROCESSING);
//! - [`lease`]: the leases events are held under, and the fence;
//! - [`transitions`]: every other status change, each written once;
//! - [`status`]: [`EventStatus`] and its SQL text.
//!
//! An event is generic: an aggregate id, the aggregate's version, a type
//! name and a JSON payload. What they mean belongs to the layer above.

pub mod claim;
pub mod lease;
mod position;
pub mod standing;
pub mod status;
pub mod transitions;

use std::time::Duration;

use chrono::{DateTime, Utc};
use const_format::formatcp;
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::value::RawValue;
use tokio_postgres::types::Json;
use uuid::Uuid;

pub use claim::ClaimedEvent;
use status::sql::{DEAD, DONE};
pub use status::EventStatus;

use crate::db::DbResult;
use crate::telemetry::trace;

/// An event to write with a business change.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub aggregate_id: Uuid,
    /// Events of one aggregate are dispatched in version order.
    pub aggregate_version: i32,
    pub event_type: String,
    /// The payload as JSON text, serialised once from the caller's type
    /// (no `serde_json::Value` tree on the write path).
    pub payload: Box<RawValue>,
    /// When it falls due; None: at once.
    pub due_at: Option<DateTime<Utc>>,
    /// The aggregate whose *lane* it is in, if any (`lane_of`, V46): its
    /// own `aggregate_id` names the lane, so it is ordered apart from that
    /// aggregate's events (which it never waits behind), yet retention
    /// keeps the aggregate's events while it is unfinished ([`purge_done`]),
    /// and a reader of the aggregate finds it. None: the aggregate's own.
    pub lane_of: Option<Uuid>,
    /// Whose turn it takes in the claim (V45): the events of one turn
    /// share the fleet's rate with every other turn's when it is busy, so
    /// no turn's backlog buries another's next event. None: it takes no
    /// turn (claimed oldest-due first, as all were before).
    pub turn: Option<String>,
}

/// The channel notified when an event commits: an idle poller that
/// `LISTEN`s on it claims at once instead of at its next timed poll.
pub const CHANNEL: &str = "outbox_events";

/// Inserts a PENDING event and, when it is due at once, notifies
/// [`CHANNEL`], in one statement. Runs in the caller's transaction, so the
/// event and its notification commit with the business change or not at
/// all. The event keeps the current
/// trace context ([`trace::current`]: the API request's), so every later
/// step of its delivery names the same trace.
pub async fn insert(tx: &impl GenericClient, event: &NewEvent) -> DbResult<Uuid> {
    let id = Uuid::now_v7();
    tx.execute(
        &tx.prepare_cached(formatcp!(
            "WITH event AS (\
               INSERT INTO outbox_events \
                      (id, aggregate_id, aggregate_version, event_type, payload, traceparent, next_attempt_at, turn, \
                       due_at, lane_of) \
               VALUES ($1, $2, $3, $4, $5, $6, coalesce($7, now()), $8, $7, $9) RETURNING next_attempt_at) \
             SELECT pg_notify('{CHANNEL}', '') FROM event WHERE next_attempt_at <= now()"
        ))
        .await?,
        &[
            &id,
            &event.aggregate_id,
            &event.aggregate_version,
            &event.event_type,
            &Json(&*event.payload),
            &trace::current(),
            &event.due_at,
            &event.turn,
            &event.lane_of,
        ],
    )
    .await?;
    Ok(id)
}

/// Inserts many PENDING events in one statement (imports, soak tests,
/// benchmarks); returns their ids in order.
pub async fn insert_many(client: &impl GenericClient, events: &[NewEvent]) -> DbResult<Vec<Uuid>> {
    let ids: Vec<Uuid> = events.iter().map(|_| Uuid::now_v7()).collect();
    let aggregates: Vec<Uuid> = events.iter().map(|e| e.aggregate_id).collect();
    let versions: Vec<i32> = events.iter().map(|e| e.aggregate_version).collect();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let payloads: Vec<Json<&RawValue>> = events.iter().map(|e| Json(&*e.payload)).collect();
    let due: Vec<Option<DateTime<Utc>>> = events.iter().map(|e| e.due_at).collect();
    let turns: Vec<Option<&str>> = events.iter().map(|e| e.turn.as_deref()).collect();
    let lanes: Vec<Option<Uuid>> = events.iter().map(|e| e.lane_of).collect();
    client
        .execute(
            formatcp!(
                "WITH events AS (\
                   INSERT INTO outbox_events \
                          (id, aggregate_id, aggregate_version, event_type, payload, next_attempt_at, turn, due_at, \
                           lane_of) \
                   SELECT i, a, v, t, p, coalesce(d, now()), u, d, l \
                     FROM unnest($1::uuid[], $2::uuid[], $3::int4[], $4::text[], $5::jsonb[], $6::timestamptz[], \
                                 $7::text[], $8::uuid[]) AS n(i, a, v, t, p, d, u, l) RETURNING id) \
                 SELECT pg_notify('{CHANNEL}', '') FROM events LIMIT 1"
            ),
            &[&ids, &aggregates, &versions, &types, &payloads, &due, &turns, &lanes],
        )
        .await?;
    Ok(ids)
}

/// An event as stored, for operators and tests.
#[derive(Debug, Clone, Serialize)]
pub struct StoredEvent {
    pub id: Uuid,
    pub aggregate_id: Uuid,
    pub aggregate_version: i32,
    pub event_type: String,
    pub status: EventStatus,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: DateTime<Utc>,
    pub locked_by: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When the status last changed (for DEAD: when it died).
    pub updated_at: DateTime<Utc>,
    pub payload: serde_json::Value,
    /// The W3C trace context of the request that wrote it.
    pub traceparent: Option<String>,
    /// For an event written to fall due later: when.
    pub due_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    /// The lease of the run that holds it (PROCESSING).
    pub lease_id: Option<Uuid>,
}

const COLUMNS: &str = "id, aggregate_id, aggregate_version, event_type, status, attempts, last_error, \
                       next_attempt_at, locked_by, created_at, updated_at, payload, traceparent, due_at, \
                       completed_at, lease_id";

fn stored(r: &tokio_postgres::Row) -> DbResult<StoredEvent> {
    Ok(StoredEvent {
        id: r.get("id"),
        aggregate_id: r.get("aggregate_id"),
        aggregate_version: r.get("aggregate_version"),
        event_type: r.get("event_type"),
        status: EventStatus::from_row(r, "status")?,
        attempts: r.get("attempts"),
        last_error: r.get("last_error"),
        next_attempt_at: r.get("next_attempt_at"),
        locked_by: r.get("locked_by"),
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
        payload: r.get("payload"),
        traceparent: r.get("traceparent"),
        due_at: r.get("due_at"),
        completed_at: r.get("completed_at"),
        lease_id: r.get("lease_id"),
    })
}

pub async fn get(client: &impl GenericClient, id: Uuid) -> DbResult<Option<StoredEvent>> {
    let sql = formatcp!("SELECT {COLUMNS} FROM outbox_events WHERE id = $1");
    client.query_opt(sql, &[&id]).await?.as_ref().map(stored).transpose()
}

/// Every event of one aggregate, oldest version first.
pub async fn of_aggregate(client: &impl GenericClient, aggregate_id: Uuid) -> DbResult<Vec<StoredEvent>> {
    let sql = formatcp!("SELECT {COLUMNS} FROM outbox_events WHERE aggregate_id = $1 ORDER BY aggregate_version");
    client.query(sql, &[&aggregate_id]).await?.iter().map(stored).collect()
}

/// Every event of one aggregate and of its lanes, in the
/// order they were written (`outbox_events_one_per_version`,
/// `outbox_events_lanes`).
pub async fn history(client: &impl GenericClient, aggregate_id: Uuid) -> DbResult<Vec<StoredEvent>> {
    let sql = formatcp!(
        "SELECT {COLUMNS} FROM outbox_events WHERE aggregate_id = $1 \
          UNION ALL SELECT {COLUMNS} FROM outbox_events WHERE lane_of = $1 ORDER BY created_at, aggregate_version"
    );
    client.query(sql, &[&aggregate_id]).await?.iter().map(stored).collect()
}

/// For each `(aggregate, version)`, the aggregate's stored events after
/// that version, whatever their status, oldest first: still to be told
/// (PENDING, PROCESSING), told (DONE) or to be replayed (DEAD). One
/// statement; aggregates with none are absent.
pub async fn later_many(
    client: &impl GenericClient,
    of: &[(Uuid, i32)],
) -> DbResult<std::collections::HashMap<Uuid, Vec<StoredEvent>>> {
    let aggregates: Vec<Uuid> = of.iter().map(|a| a.0).collect();
    let versions: Vec<i32> = of.iter().map(|a| a.1).collect();
    let sql = formatcp!(
        "SELECT {COLUMNS} FROM outbox_events \
           JOIN unnest($1::uuid[], $2::int4[]) AS a(agg, ver) ON aggregate_id = a.agg \
          WHERE aggregate_version > a.ver \
          ORDER BY aggregate_version"
    );
    let mut later: std::collections::HashMap<Uuid, Vec<StoredEvent>> = Default::default();
    for row in client.query(&client.prepare_cached(sql).await?, &[&aggregates, &versions]).await? {
        let e = stored(&row)?;
        later.entry(e.aggregate_id).or_default().push(e);
    }
    Ok(later)
}

/// How an aggregate's unfinished events stand ([`unfinished_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// Some event is PENDING or PROCESSING: it will end soon.
    Running,
    /// Every unfinished event is DEAD: it ends when an operator replays it.
    Dead,
}

/// The `aggregates` with an event not DONE, and how. One statement,
/// through `outbox_events_one_per_version`; those with none are absent.
pub async fn unfinished_of(
    client: &impl GenericClient,
    aggregates: &[Uuid],
) -> DbResult<std::collections::HashMap<Uuid, Unfinished>> {
    if aggregates.is_empty() {
        return Ok(Default::default());
    }
    const SQL: &str = formatcp!(
        "SELECT aggregate_id, bool_and(status = {DEAD}) FROM outbox_events \
          WHERE aggregate_id = ANY($1) AND status <> {DONE} GROUP BY aggregate_id"
    );
    let rows = client.query(&client.prepare_cached(SQL).await?, &[&aggregates]).await?;
    Ok(rows.iter().map(|r| (r.get(0), if r.get(1) { Unfinished::Dead } else { Unfinished::Running })).collect())
}

/// The aggregates of `(aggregate, version)` whose every event before that
/// version is still stored (versions count up from 1, one event each;
/// retention deletes old ones). One statement for all of them.
pub async fn history_complete_many(
    client: &impl GenericClient,
    of: &[(Uuid, i32)],
) -> DbResult<std::collections::HashSet<Uuid>> {
    const SQL: &str = "SELECT a.id FROM unnest($1::uuid[], $2::int4[]) AS a(id, version) \
                WHERE (SELECT count(*) FROM outbox_events e \
                        WHERE e.aggregate_id = a.id AND e.aggregate_version < a.version) = a.version - 1";
    aggregates_where(client, of, SQL).await
}

/// The aggregates `sql` returns, given `of` as two arrays ($1 the ids, $2
/// the versions).
async fn aggregates_where(
    client: &impl GenericClient,
    of: &[(Uuid, i32)],
    sql: &str,
) -> DbResult<std::collections::HashSet<Uuid>> {
    if of.is_empty() {
        return Ok(Default::default());
    }
    let aggregates: Vec<Uuid> = of.iter().map(|a| a.0).collect();
    let versions: Vec<i32> = of.iter().map(|a| a.1).collect();
    let rows = client.query(&client.prepare_cached(sql).await?, &[&aggregates, &versions]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// DEAD events, the most recently dead first.
pub async fn list_dead(client: &impl GenericClient, limit: i64) -> DbResult<Vec<StoredEvent>> {
    let sql = formatcp!("SELECT {COLUMNS} FROM outbox_events WHERE status = {DEAD} ORDER BY updated_at DESC LIMIT $1");
    client.query(sql, &[&limit]).await?.iter().map(stored).collect()
}

/// Retention: deletes up to `limit` DONE events completed more than
/// `max_age` ago; returns how many. Never one while an earlier event of its
/// aggregate is not DONE: a DEAD one may be replayed, and its consumer must
/// still find every later event (a deletion kept, the creation it ended is
/// never acted on). Nor while an event in the aggregate's lanes
/// (`lane_of`) is unfinished: one due in a month still reads the
/// aggregate's events.
pub async fn purge_done(client: &impl GenericClient, max_age: Duration, limit: i64) -> DbResult<u64> {
    let sql = formatcp!(
        "DELETE FROM outbox_events WHERE id IN ( \
             SELECT e.id FROM outbox_events e WHERE e.status = {DONE} \
                AND e.completed_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS (SELECT 1 FROM outbox_events earlier \
                                 WHERE earlier.aggregate_id = e.aggregate_id \
                                   AND earlier.aggregate_version < e.aggregate_version \
                                   AND earlier.status <> {DONE}) \
                AND NOT EXISTS (SELECT 1 FROM outbox_events side \
                                 WHERE side.lane_of = e.aggregate_id AND side.status <> {DONE}) \
              LIMIT $2)"
    );
    Ok(client.execute(sql, &[&max_age.as_secs_f64(), &limit]).await?)
}
