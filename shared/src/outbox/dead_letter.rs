//! The dead letter: listing DEAD events and replaying them.
//!
//! A replay puts a DEAD event back to PENDING with fresh attempts and keeps
//! a record in `outbox_replays`. It never touches an event that is not DEAD.
//! Recipients whose send was already SENT (or FAILED, or UNKNOWN) keep their
//! claim, so a replay delivers only to those who had not been delivered.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, Clone, Serialize)]
pub struct DeadEvent {
    pub id: Uuid,
    pub booking_id: Uuid,
    pub event_type: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub died_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeadEventDetail {
    #[serde(flatten)]
    pub event: DeadEvent,
    pub payload: serde_json::Value,
    /// `(recipient, status)` of every send claim of the event.
    pub sends: Vec<(String, String)>,
    pub replays: i64,
}

const COLUMNS: &str = "id, aggregate_id, event_type, attempts, last_error, created_at, updated_at";

fn from_row(r: &tokio_postgres::Row) -> DeadEvent {
    DeadEvent {
        id: r.get(0),
        booking_id: r.get(1),
        event_type: r.get(2),
        attempts: r.get(3),
        last_error: r.get(4),
        created_at: r.get(5),
        died_at: r.get(6),
    }
}

pub async fn list(client: &impl GenericClient, limit: i64) -> Result<Vec<DeadEvent>, tokio_postgres::Error> {
    let sql = format!("SELECT {COLUMNS} FROM outbox_events WHERE status = 'DEAD' ORDER BY updated_at DESC LIMIT $1");
    Ok(client.query(&sql, &[&limit]).await?.iter().map(from_row).collect())
}

pub async fn show(client: &impl GenericClient, id: Uuid) -> Result<Option<DeadEventDetail>, tokio_postgres::Error> {
    let sql = format!("SELECT {COLUMNS}, payload FROM outbox_events WHERE id = $1 AND status = 'DEAD'");
    let Some(row) = client.query_opt(&sql, &[&id]).await? else { return Ok(None) };
    let sends = client
        .query(
            "SELECT recipient_email, status FROM booking_notification_sends WHERE outbox_event_id = $1 \
             ORDER BY recipient_email",
            &[&id],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let replays: i64 =
        client.query_one("SELECT count(*) FROM outbox_replays WHERE outbox_event_id = $1", &[&id]).await?.get(0);
    Ok(Some(DeadEventDetail { event: from_row(&row), payload: row.get(7), sends, replays }))
}

/// What a replay selects.
pub enum ReplaySelection<'a> {
    Ids(&'a [Uuid]),
    All { event_type: Option<&'a str>, since: Option<DateTime<Utc>> },
}

/// Replays the selected DEAD events in one transaction; returns their ids.
/// Ids that are not DEAD are not touched (the caller reports them).
pub async fn replay(
    client: &mut deadpool_postgres::Client,
    selection: ReplaySelection<'_>,
    replayed_by: &str,
) -> Result<Vec<Uuid>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let (ids, event_type, since): (Option<Vec<Uuid>>, Option<&str>, Option<DateTime<Utc>>) = match selection {
        ReplaySelection::Ids(ids) => (Some(ids.to_vec()), None, None),
        ReplaySelection::All { event_type, since } => (None, event_type, since),
    };
    let rows = tx
        .query(
            "WITH target AS ( \
                 SELECT id, attempts, last_error FROM outbox_events \
                  WHERE status = 'DEAD' \
                    AND ($1::uuid[] IS NULL OR id = ANY($1)) \
                    AND ($2::text IS NULL OR event_type = $2) \
                    AND ($3::timestamptz IS NULL OR updated_at >= $3) \
                  FOR UPDATE), \
             rec AS ( \
                 INSERT INTO outbox_replays (id, outbox_event_id, previous_attempts, previous_error, replayed_by) \
                 SELECT gen_random_uuid(), id, attempts, last_error, $4 FROM target) \
             UPDATE outbox_events o SET status = 'PENDING', attempts = 0, next_attempt_at = now(), \
                    last_error = 'replayed by ' || $4 || ' after: ' || coalesce(o.last_error, ''), \
                    locked_at = NULL, locked_by = NULL, updated_at = now() \
               FROM target WHERE o.id = target.id RETURNING o.id",
            &[&ids, &event_type, &since, &replayed_by],
        )
        .await?;
    tx.commit().await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The status of each id (None when it does not exist), to explain refusals.
pub async fn statuses(
    client: &impl GenericClient,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, Option<String>)>, tokio_postgres::Error> {
    let rows = client.query("SELECT id, status FROM outbox_events WHERE id = ANY($1)", &[&ids]).await?;
    Ok(ids
        .iter()
        .map(|id| (*id, rows.iter().find(|r| r.get::<_, Uuid>(0) == *id).map(|r| r.get(1))))
        .collect())
}
