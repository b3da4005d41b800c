//! Sends whose outcome is unknown: claimed, but the worker died or the
//! provider's answer was ambiguous before the outcome was recorded. These
//! are the emails that may have been lost in the claim-then-crash window.
//!
//! Nothing re-sends them automatically. `outboxctl unknown resend` is an
//! explicit human decision: it archives the claim in `notification_resends`,
//! removes it, and puts the event back to PENDING, so the poller sends that
//! recipient again (and skips everyone already claimed).

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

#[derive(Debug, Clone, Serialize)]
pub struct UnknownSend {
    pub id: Uuid,
    pub event_id: Uuid,
    pub booking_id: Uuid,
    pub recipient: String,
    pub event_type: String,
    pub status: String,
    pub last_error: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub claimed_by: Option<String>,
}

/// UNKNOWN sends, and CLAIMED sends whose event is no longer in flight
/// (their worker died and no retry has looked at them yet).
pub async fn list(client: &impl GenericClient, limit: i64) -> Result<Vec<UnknownSend>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT s.id, s.outbox_event_id, s.booking_id, s.recipient_email, s.event_type, s.status, \
                    s.last_error, s.claimed_at, s.claimed_by \
               FROM booking_notification_sends s \
              WHERE s.status = 'UNKNOWN' \
                 OR (s.status = 'CLAIMED' AND NOT EXISTS ( \
                        SELECT 1 FROM outbox_events e WHERE e.id = s.outbox_event_id AND e.status = 'PROCESSING')) \
              ORDER BY s.claimed_at DESC LIMIT $1",
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| UnknownSend {
            id: r.get(0),
            event_id: r.get(1),
            booking_id: r.get(2),
            recipient: r.get(3),
            event_type: r.get(4),
            status: r.get(5),
            last_error: r.get(6),
            claimed_at: r.get(7),
            claimed_by: r.get(8),
        })
        .collect())
}

#[derive(Debug, thiserror::Error)]
pub enum ResendError {
    #[error("no send with id {0}")]
    NotFound(Uuid),
    #[error("send {id} is {status}; only UNKNOWN (or orphaned CLAIMED) sends can be resent")]
    NotUnknown { id: Uuid, status: String },
    #[error("event {event_id} of send {id} is {status} (in flight); try again once it settles")]
    EventInFlight { id: Uuid, event_id: Uuid, status: String },
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
}

/// Records the decision and requeues the event so the poller re-sends this
/// one recipient. One transaction.
pub async fn resend(
    client: &mut deadpool_postgres::Client,
    send_id: Uuid,
    decided_by: &str,
) -> Result<Uuid, ResendError> {
    let tx = client.transaction().await?;
    let send = tx
        .query_opt(
            "SELECT s.outbox_event_id, s.status, e.status FROM booking_notification_sends s \
               LEFT JOIN outbox_events e ON e.id = s.outbox_event_id \
              WHERE s.id = $1 FOR UPDATE OF s",
            &[&send_id],
        )
        .await?
        .ok_or(ResendError::NotFound(send_id))?;
    let (event_id, status, event_status): (Uuid, String, Option<String>) = (send.get(0), send.get(1), send.get(2));
    if status != "UNKNOWN" && status != "CLAIMED" {
        return Err(ResendError::NotUnknown { id: send_id, status });
    }
    let event_status = event_status.unwrap_or_else(|| "deleted".into());
    if event_status != "DONE" && event_status != "DEAD" {
        return Err(ResendError::EventInFlight { id: send_id, event_id, status: event_status });
    }
    tx.execute(
        "INSERT INTO notification_resends (id, send_id, outbox_event_id, recipient_email, event_type, \
                 previous_status, previous_error, claimed_at, decided_by) \
         SELECT gen_random_uuid(), id, outbox_event_id, recipient_email, event_type, status, last_error, \
                claimed_at, $2 FROM booking_notification_sends WHERE id = $1",
        &[&send_id, &decided_by],
    )
    .await?;
    tx.execute("DELETE FROM booking_notification_sends WHERE id = $1", &[&send_id]).await?;
    // The event runs again: processed_events must let it through.
    tx.execute("DELETE FROM processed_events WHERE event_id = $1", &[&event_id]).await?;
    tx.execute(
        "UPDATE outbox_events SET status = 'PENDING', attempts = 0, next_attempt_at = now(), \
                last_error = 'resend of one recipient approved by ' || $2, completed_at = NULL, \
                locked_at = NULL, locked_by = NULL, updated_at = now() \
          WHERE id = $1",
        &[&event_id, &decided_by],
    )
    .await?;
    tx.commit().await?;
    Ok(event_id)
}
