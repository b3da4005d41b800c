//! Sends whose outcome is unknown: claimed, but the worker died or the
//! provider's answer was ambiguous before the outcome was recorded. These
//! are the emails that may have been lost in the claim-then-crash window.
//!
//! Nothing re-sends them automatically. [`resend`] is an explicit human
//! decision, recorded in `notification_resends` (every statement on that
//! table lives here): the claim is removed and the event reopened, and the
//! poller then sends that one recipient and nobody else
//! ([`pending_recipients`]), however the event's other sends stand.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::sends::{self, SendStatus};
use crate::db::{DbError, DbResult};
use crate::outbox::events::{self, transitions, EventStatus};
use crate::outbox::processed;

pub use sends::{list_unknown as list, UnknownSend};

#[derive(Debug, thiserror::Error)]
pub enum ResendError {
    #[error("no send with id {0}")]
    NotFound(Uuid),
    #[error("send {id} is {status}; only UNKNOWN (or orphaned CLAIMED) sends can be resent")]
    NotUnknown { id: Uuid, status: SendStatus },
    #[error("event {event_id} of send {id} is {status} (in flight); try again once it settles")]
    EventInFlight { id: Uuid, event_id: Uuid, status: String },
    #[error(
        "event {event_id} of send {id} is DEAD: replay it first (outboxctl dead replay {event_id}), so its other \
         recipients are not left unsent, then resend"
    )]
    EventDead { id: Uuid, event_id: Uuid },
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<tokio_postgres::Error> for ResendError {
    fn from(e: tokio_postgres::Error) -> Self {
        ResendError::Db(e.into())
    }
}

/// Records the decision and reopens the event so the poller re-sends this
/// one recipient. One transaction; returns the event's id.
pub async fn resend(client: &mut deadpool_postgres::Client, send_id: Uuid, decided_by: &str) -> Result<Uuid, ResendError> {
    let tx = client.transaction().await?;
    let (event_id, status) = sends::lock(&tx, send_id).await?.ok_or(ResendError::NotFound(send_id))?;
    if !matches!(status, SendStatus::Unknown | SendStatus::Claimed) {
        return Err(ResendError::NotUnknown { id: send_id, status });
    }
    match events::get(&tx, event_id).await?.map(|e| e.status) {
        Some(EventStatus::Done) => {}
        Some(EventStatus::Dead) => return Err(ResendError::EventDead { id: send_id, event_id }),
        other => {
            let status = other.map_or("deleted".to_string(), |s| s.to_string());
            return Err(ResendError::EventInFlight { id: send_id, event_id, status });
        }
    }
    tx.execute(
        "INSERT INTO notification_resends (id, send_id, outbox_event_id, recipient_email, event_type, \
                 previous_status, previous_error, claimed_at, decided_by) \
         SELECT gen_random_uuid(), id, outbox_event_id, recipient_email, event_type, status, last_error, \
                claimed_at, $2 FROM booking_notification_sends WHERE id = $1",
        &[&send_id, &decided_by],
    )
    .await?;
    sends::delete(&tx, send_id).await?;
    // The event runs again: processed_events must let it through.
    processed::forget(&tx, event_id).await?;
    let reason = format!("resend of one recipient approved by {decided_by}");
    if !transitions::reopen(&tx, event_id, &reason).await? {
        return Err(ResendError::EventInFlight { id: send_id, event_id, status: "changing".into() });
    }
    tx.commit().await?;
    Ok(event_id)
}

/// The recipients an operator asked to resend for this event, not yet
/// resent. When there are any, the event runs for them alone.
pub async fn pending_recipients(client: &impl GenericClient, event_id: Uuid) -> DbResult<Vec<String>> {
    let rows = client
        .query(
            &client
                .prepare_cached(
                    "SELECT recipient_email FROM notification_resends \
                      WHERE outbox_event_id = $1 AND resent_at IS NULL",
                )
                .await?,
            &[&event_id],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Marks the event's pending resends done; commits with the event's DONE.
pub async fn mark_resent(tx: &impl GenericClient, event_id: Uuid) -> DbResult<()> {
    tx.execute(
        "UPDATE notification_resends SET resent_at = now() WHERE outbox_event_id = $1 AND resent_at IS NULL",
        &[&event_id],
    )
    .await?;
    Ok(())
}
