//! Every status change of an `outbox_events` row after its claim, each
//! written once (see [`super::status`] for the picture).
//!
//! A worker's transitions (`complete`, `retry`, `requeue`, `dead_letter`)
//! only touch a row still PROCESSING under the worker's own lease (the
//! fence, [`super::lease`]), so a row taken over by another claim, or
//! swept, is left to its new owner, and the old holder learns from the 0
//! rows that it lost it.

use std::time::Duration;

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use super::status::sql::{DEAD, DONE, PENDING, PROCESSING};
use super::status::EventStatus;
use crate::db::DbResult;

/// The worker's own row: still PROCESSING under its lease ($1 id, $2
/// lease). An event names a lease only while PROCESSING (the table's check
/// `outbox_events_lease_only_processing`, V37), so the lease alone says
/// both; and without the status, the planner cannot take the partial index
/// over PROCESSING rows (every event the run holds) for the primary key.
const HELD: &str = "id = $1 AND lease_id = $2";

/// Leaves the lock columns clear, as every status but PROCESSING has them.
const UNLOCK: &str = "locked_at = NULL, locked_by = NULL, lease_id = NULL, updated_at = now()";

/// PROCESSING → DONE for those of `event_ids` still held under `lease`, in
/// one statement; returns them (the others were taken over: the caller
/// must not commit their `processed_events` rows). Commits with the
/// events' `processed_events` rows (the caller's transaction).
pub async fn complete_many(tx: &impl GenericClient, event_ids: &[Uuid], lease: Uuid) -> DbResult<Vec<Uuid>> {
    if event_ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = formatcp!(
        "UPDATE outbox_events SET status = {DONE}, completed_at = now(), last_error = NULL, {UNLOCK} \
          WHERE id = ANY($1) AND lease_id = $2 RETURNING id"
    );
    Ok(tx.query(&tx.prepare_cached(sql).await?, &[&event_ids, &lease]).await?.iter().map(|r| r.get(0)).collect())
}

/// Where a retried event went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retried {
    /// PENDING again after the delay.
    Pending,
    /// Its attempts were used up: DEAD.
    Dead,
    /// No longer ours (taken over, or swept); left alone.
    NotOwned,
}

/// A known failure: PROCESSING → PENDING after `delay`, or → DEAD once
/// `max_attempts` are used up.
pub async fn retry(
    client: &impl GenericClient,
    event_id: Uuid,
    lease: Uuid,
    delay: Duration,
    error: &str,
    max_attempts: i32,
) -> DbResult<Retried> {
    let sql = formatcp!(
        "UPDATE outbox_events \
            SET status = CASE WHEN attempts >= $4 THEN {DEAD} ELSE {PENDING} END, \
                next_attempt_at = now() + make_interval(secs => $3), \
                last_error = CASE WHEN attempts >= $4 \
                                  THEN format('attempts exhausted (%s): %s', attempts, $5::text) \
                                  ELSE $5::text END, \
                stopped = false, {UNLOCK} \
          WHERE {HELD} RETURNING status"
    );
    let row = client
        .query_opt(
            &client.prepare_cached(sql).await?,
            &[&event_id, &lease, &delay.as_secs_f64(), &max_attempts, &error],
        )
        .await?;
    Ok(match row.map(|r| EventStatus::from_row(&r, "status")).transpose()? {
        Some(EventStatus::Dead) => Retried::Dead,
        Some(_) => Retried::Pending,
        None => Retried::NotOwned,
    })
}

/// Why an event is handed back without using up an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// It waits its turn again (the run's deadline, a throttled consumer, a
    /// wait the consumer asked for).
    Later,
    /// Its consumer stopped (the provider it calls paused it, or refused
    /// the stack's configuration): it waits for that to end. Recorded in
    /// `stopped` (V46), which [`super::standing::stopped`] reads.
    Stopped,
}

/// PROCESSING → PENDING after `delay` without using up an attempt (the
/// event itself did nothing wrong), for `why`. Returns false, changing
/// nothing, when it is no longer held under `lease`.
pub async fn requeue(
    client: &impl GenericClient,
    event_id: Uuid,
    lease: Uuid,
    delay: Duration,
    reason: &str,
    why: Requeue,
) -> DbResult<bool> {
    let sql = formatcp!(
        "UPDATE outbox_events SET status = {PENDING}, attempts = greatest(attempts - 1, 0), \
             next_attempt_at = now() + make_interval(secs => $3), last_error = $4, stopped = $5, {UNLOCK} \
         WHERE {HELD}"
    );
    let statement = client.prepare_cached(sql).await?;
    let stopped = why == Requeue::Stopped;
    Ok(client.execute(&statement, &[&event_id, &lease, &delay.as_secs_f64(), &reason, &stopped]).await? == 1)
}

/// PROCESSING → DEAD at once (an unreadable payload, a poison event):
/// retrying cannot help; an operator replays it once the cause is fixed.
/// Returns false, changing nothing, when it is no longer held under `lease`.
pub async fn dead_letter(client: &impl GenericClient, event_id: Uuid, lease: Uuid, reason: &str) -> DbResult<bool> {
    let sql = formatcp!("UPDATE outbox_events SET status = {DEAD}, last_error = $3, {UNLOCK} WHERE {HELD}");
    Ok(client.execute(&client.prepare_cached(sql).await?, &[&event_id, &lease, &reason]).await? == 1)
}

/// One stuck row and what the sweep does (or did) with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reset {
    pub id: Uuid,
    pub attempts: i32,
    /// The worker that held it.
    pub locked_by: Option<String>,
    /// PENDING (reset) or DEAD (attempts exhausted).
    pub to: EventStatus,
}

fn reset_row(r: &tokio_postgres::Row) -> DbResult<Reset> {
    let to = EventStatus::from_row(r, "status")?;
    Ok(Reset { id: r.get("id"), attempts: r.get("attempts"), locked_by: r.get("locked_by"), to })
}

/// Which rows the sweep takes: PROCESSING rows locked longer than
/// `stuck_after` (their worker died), at most `limit` of them.
#[derive(Debug, Clone, Copy)]
pub struct Stuck {
    pub stuck_after: Duration,
    /// A row with this many attempts goes to DEAD instead of PENDING.
    pub max_attempts: i32,
    pub limit: i64,
}

/// PROCESSING rows claimed more than $1 seconds ago and held under no
/// live lease: their lease ended and no claim took them over (no poller
/// runs), or an older build claimed them without one. A live lease is
/// never swept, however old its claim.
pub(super) const STUCK: &str = formatcp!(
    "status = {PROCESSING} AND locked_at < now() - make_interval(secs => $1) \
     AND NOT EXISTS (SELECT 1 FROM outbox_leases l WHERE l.id = lease_id AND l.expires_at >= now())"
);

const RESET_STUCK: &str = formatcp!(
    "WITH stuck AS ( \
         SELECT id, locked_by AS previous_worker, locked_at AS previous_lock FROM outbox_events \
         WHERE {STUCK} \
         ORDER BY locked_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
     UPDATE outbox_events o \
        SET status = CASE WHEN o.attempts >= $2 THEN {DEAD} ELSE {PENDING} END, \
            last_error = CASE WHEN o.attempts >= $2 \
                THEN format('attempts exhausted (%s): stuck in PROCESSING since %s (worker %s)', \
                            o.attempts, stuck.previous_lock, stuck.previous_worker) \
                ELSE format('swept: stuck in PROCESSING since %s (worker %s)', \
                            stuck.previous_lock, stuck.previous_worker) END, \
            next_attempt_at = now(), stopped = false, {UNLOCK} \
       FROM stuck WHERE o.id = stuck.id \
     RETURNING o.id, o.attempts, stuck.previous_worker AS locked_by, o.status"
);

const PREVIEW_RESET_STUCK: &str = formatcp!(
    "SELECT id, attempts, locked_by, CASE WHEN attempts >= $2 THEN {DEAD} ELSE {PENDING} END AS status \
       FROM outbox_events WHERE {STUCK} \
      ORDER BY locked_at LIMIT $3"
);

/// The sweep: stuck rows → PENDING, or → DEAD when their attempts are used
/// up, so the sweep and the poller never hand a doomed event back and forth.
/// Rows a live transaction is touching are skipped, not waited for. With
/// `dry_run`, reports what it would do and changes nothing.
pub async fn reset_stuck(client: &impl GenericClient, stuck: &Stuck, dry_run: bool) -> DbResult<Vec<Reset>> {
    let sql = if dry_run { PREVIEW_RESET_STUCK } else { RESET_STUCK };
    let rows = client.query(sql, &[&stuck.stuck_after.as_secs_f64(), &stuck.max_attempts, &stuck.limit]).await?;
    rows.iter().map(reset_row).collect()
}

/// What a replay selects.
pub enum ReplaySelection<'a> {
    Ids(&'a [Uuid]),
    All { event_type: Option<&'a str>, since: Option<chrono::DateTime<chrono::Utc>> },
}

/// What a replay did, or (dry run) would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// DEAD → PENDING (or, in a dry run, would be).
    pub replayed: Vec<Uuid>,
    /// Left DEAD: a later event of the same aggregate is already DONE, so
    /// this one is old news (a creation after the deletion that ended it).
    pub superseded: Vec<Uuid>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{matched} DEAD events match, more than the cap of {max}; narrow the selection or raise the cap")]
    TooMany { matched: usize, max: usize },
    #[error(transparent)]
    Db(#[from] crate::db::DbError),
}

/// DEAD → PENDING with fresh attempts, for the selected events, in one
/// transaction that also records each replay in `outbox_replays`. Events
/// that are not DEAD are never touched; superseded ones are left DEAD and
/// reported. More than `max` to replay is refused whole. With `dry_run`,
/// reports and changes nothing.
pub async fn replay(
    client: &mut deadpool_postgres::Client,
    selection: ReplaySelection<'_>,
    replayed_by: &str,
    max: usize,
    dry_run: bool,
) -> Result<ReplayReport, ReplayError> {
    let (ids, event_type, since) = match selection {
        ReplaySelection::Ids(ids) => (Some(ids.to_vec()), None, None),
        ReplaySelection::All { event_type, since } => (None, event_type, since),
    };
    const SELECT: &str = formatcp!(
        "SELECT d.id, EXISTS ( \
                 SELECT 1 FROM outbox_events later \
                  WHERE later.aggregate_id = d.aggregate_id AND later.aggregate_version > d.aggregate_version \
                    AND later.status = {DONE}) AS superseded \
           FROM outbox_events d \
          WHERE d.status = {DEAD} \
            AND ($1::uuid[] IS NULL OR d.id = ANY($1)) \
            AND ($2::text IS NULL OR d.event_type = $2) \
            AND ($3::timestamptz IS NULL OR d.updated_at >= $3) \
          ORDER BY d.updated_at \
          FOR UPDATE OF d"
    );
    const REPLAY: &str = formatcp!(
        "WITH target AS (SELECT id, attempts, last_error FROM outbox_events WHERE id = ANY($1) AND status = {DEAD}), \
         rec AS ( \
             INSERT INTO outbox_replays (id, outbox_event_id, previous_attempts, previous_error, replayed_by) \
             SELECT gen_random_uuid(), id, attempts, last_error, $2 FROM target) \
         UPDATE outbox_events o SET status = {PENDING}, attempts = 0, next_attempt_at = now(), \
                last_error = 'replayed by ' || $2 || ' after: ' || coalesce(o.last_error, ''), stopped = false, \
                {UNLOCK} \
           FROM target WHERE o.id = target.id RETURNING o.id"
    );
    let tx = client.transaction().await?;
    let mut report = ReplayReport::default();
    for row in tx.query(SELECT, &[&ids, &event_type, &since]).await? {
        let id: Uuid = row.get("id");
        if row.get("superseded") {
            report.superseded.push(id);
        } else {
            report.replayed.push(id);
        }
    }
    if report.replayed.len() > max {
        return Err(ReplayError::TooMany { matched: report.replayed.len(), max });
    }
    if dry_run || report.replayed.is_empty() {
        return Ok(report); // the transaction rolls back
    }
    let done = tx.query(REPLAY, &[&report.replayed, &replayed_by]).await?;
    debug_assert_eq!(done.len(), report.replayed.len(), "the rows were locked");
    tx.commit().await?;
    Ok(report)
}

/// One recorded replay: who put the event back, when, and what it had
/// died of.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Replayed {
    pub event_id: Uuid,
    pub replayed_by: String,
    pub replayed_at: chrono::DateTime<chrono::Utc>,
    pub previous_attempts: i32,
    pub previous_error: Option<String>,
}

/// The recorded replays of `event_ids`, oldest first.
pub async fn replays_of(client: &impl GenericClient, event_ids: &[Uuid]) -> DbResult<Vec<Replayed>> {
    let rows = client
        .query(
            "SELECT outbox_event_id, replayed_by, replayed_at, previous_attempts, previous_error \
               FROM outbox_replays WHERE outbox_event_id = ANY($1) ORDER BY replayed_at",
            &[&event_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Replayed {
            event_id: r.get(0),
            replayed_by: r.get(1),
            replayed_at: r.get(2),
            previous_attempts: r.get(3),
            previous_error: r.get(4),
        })
        .collect())
}

/// How many times an event was replayed.
pub async fn replay_count(client: &impl GenericClient, event_id: Uuid) -> DbResult<i64> {
    Ok(client.query_one("SELECT count(*) FROM outbox_replays WHERE outbox_event_id = $1", &[&event_id]).await?.get(0))
}

/// DONE or DEAD → PENDING with fresh attempts, in the caller's transaction:
/// an operator decided the event must run again (e.g. for one of its
/// consumer's side effects). The caller also forgets its `processed_events` row. Returns
/// false, changing nothing, when the event is not DONE or DEAD.
pub async fn reopen(tx: &impl GenericClient, event_id: Uuid, reason: &str) -> DbResult<bool> {
    let sql = formatcp!(
        "UPDATE outbox_events SET status = {PENDING}, attempts = 0, next_attempt_at = now(), \
                last_error = $2, completed_at = NULL, stopped = false, {UNLOCK} \
          WHERE id = $1 AND status IN ({DONE}, {DEAD})"
    );
    Ok(tx.execute(sql, &[&event_id, &reason]).await? == 1)
}

crate::from_driver_errors!(ReplayError);
