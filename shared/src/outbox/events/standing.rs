//! How the outbox stands, for operators and metrics: statuses, counts, the
//! oldest due event, events waiting because their consumer stopped, stuck rows.

use std::collections::BTreeMap;
use std::time::Duration;

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::sql::PENDING;
use super::status::EventStatus;
use super::transitions;
use crate::db::DbResult;

/// The status of each id (None when it does not exist).
pub async fn statuses(client: &impl GenericClient, ids: &[Uuid]) -> DbResult<Vec<(Uuid, Option<EventStatus>)>> {
    let rows = client.query("SELECT id, status FROM outbox_events WHERE id = ANY($1)", &[&ids]).await?;
    ids.iter()
        .map(|id| {
            let row = rows.iter().find(|r| r.get::<_, Uuid>("id") == *id);
            Ok((*id, row.map(|r| EventStatus::from_row(r, "status")).transpose()?))
        })
        .collect()
}

/// Events by status, zeros included.
pub async fn counts(client: &impl GenericClient) -> DbResult<BTreeMap<EventStatus, i64>> {
    let mut counts: BTreeMap<EventStatus, i64> = EventStatus::ALL.iter().map(|s| (*s, 0)).collect();
    for row in client.query("SELECT status, count(*) AS n FROM outbox_events GROUP BY status", &[]).await? {
        counts.insert(EventStatus::from_row(&row, "status")?, row.get("n"));
    }
    Ok(counts)
}

/// Age in seconds of the oldest PENDING event that is due now (None when
/// nothing is due): since it was written, or for an event written to fall
/// due later (`due_at`) since it fell due.
pub async fn oldest_due_age(client: &impl GenericClient) -> DbResult<Option<f64>> {
    let sql = formatcp!(
        "SELECT extract(epoch FROM now() - min(greatest(created_at, due_at)))::float8 \
           FROM outbox_events WHERE status = {PENDING} AND next_attempt_at <= now()"
    );
    Ok(client.query_one(sql, &[]).await?.get(0))
}

/// Events waiting because their consumer stopped (requeued as
/// [`Requeue::Stopped`](super::transitions::Requeue::Stopped)).
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct Stopped {
    pub events: i64,
    /// The latest reason, as the relay stored it.
    pub reason: String,
    /// When the latest was handed back.
    pub at: chrono::DateTime<chrono::Utc>,
}

/// The PENDING events handed back because their consumer stopped, if any.
pub async fn stopped(client: &impl GenericClient) -> DbResult<Option<Stopped>> {
    let sql = formatcp!(
        "SELECT count(*), max(updated_at), (array_agg(last_error ORDER BY updated_at DESC))[1] \
           FROM outbox_events WHERE status = {PENDING} AND stopped"
    );
    let row = client.query_one(sql, &[]).await?;
    let events: i64 = row.get(0);
    Ok((events > 0).then(|| Stopped { events, at: row.get(1), reason: row.get(2) }))
}

/// PROCESSING rows the sweep would reset ([`transitions::reset_stuck`]):
/// claimed longer than `stuck_after` ago, under no live lease.
pub async fn count_stuck(client: &impl GenericClient, stuck_after: Duration) -> DbResult<i64> {
    let sql = formatcp!("SELECT count(*) FROM outbox_events WHERE {}", transitions::STUCK);
    Ok(client.query_one(sql, &[&stuck_after.as_secs_f64()]).await?.get(0))
}
