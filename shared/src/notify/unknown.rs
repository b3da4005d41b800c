//! Sends whose outcome is unknown: claimed, but the worker died or the
//! provider's answer was ambiguous before the outcome was recorded. These
//! are the emails that may have been lost in the claim-then-crash window.
//!
//! Nothing re-sends them automatically. [`resend`] is an explicit human
//! decision: it archives the claim in `notification_resends`, removes it,
//! and reopens the event, so the poller sends that recipient again (and
//! skips everyone already claimed).

use uuid::Uuid;

use super::sends::{self, SendStatus};
use crate::db::DbError;
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
    let event_status = events::get(&tx, event_id).await?.map(|e| e.status);
    if !matches!(event_status, Some(EventStatus::Done | EventStatus::Dead)) {
        let status = event_status.map_or("deleted".to_string(), |s| s.to_string());
        return Err(ResendError::EventInFlight { id: send_id, event_id, status });
    }
    sends::archive_for_resend(&tx, send_id, decided_by).await?;
    // The event runs again: processed_events must let it through.
    processed::forget(&tx, event_id).await?;
    let reason = format!("resend of one recipient approved by {decided_by}");
    if !transitions::reopen(&tx, event_id, &reason).await? {
        return Err(ResendError::EventInFlight { id: send_id, event_id, status: "changing".into() });
    }
    tx.commit().await?;
    Ok(event_id)
}
