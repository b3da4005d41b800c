//! What an operator's resend would do, checked before it is done: the
//! rules of [`resend`](super::resend) for an operator's decision, read
//! without its lock (the console shows it before asking to confirm).

use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::db::{DbError, DbResult};
use crate::notify::sends::{self, SendStatus};
use crate::outbox::events::{self, EventStatus};

/// What an operator's resend of `send_id` would do, checked as
/// [`resend`](super::resend) checks it (without its lock): the recipient and the event
/// that would run again for them alone, or why it is refused.
pub async fn preview(client: &impl GenericClient, send_id: Uuid) -> Result<Preview, ResendError> {
    let send = sends::unknown::lock_free(client, send_id).await?.ok_or(ResendError::NotFound(send_id))?;
    if !matches!(send.status, SendStatus::Unknown | SendStatus::Claimed) {
        return Err(ResendError::NotUnknown { id: send_id, status: send.status });
    }
    event_settled(client, send_id, send.event_id).await?;
    if let Some(why) = moot(client, send.event_id).await? {
        return Err(ResendError::Moot { id: send_id, why });
    }
    Ok(Preview { send_id, event_id: send.event_id, recipient: send.recipient, event_type: send.event_type })
}

/// What a resend would do ([`preview`]).
#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    pub send_id: Uuid,
    pub event_id: Uuid,
    pub recipient: String,
    pub event_type: String,
}

/// Why resending a notification of `event_id` would tell its recipient
/// what is no longer so: a later event of the same booking exists (an
/// update sends the meeting as it now stands; a cancellation cancels it).
pub(super) async fn moot(client: &impl GenericClient, event_id: Uuid) -> DbResult<Option<String>> {
    let Some(event) = events::get(client, event_id).await? else { return Ok(None) };
    let later = events::later_many(client, &[(event.aggregate_id, event.aggregate_version)]).await?;
    Ok(later.get(&event.aggregate_id).and_then(|l| l.last()).map(|l| {
        format!("a later event of its booking ({} v{}, {}) supersedes it", l.event_type, l.aggregate_version, l.status)
    }))
}

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
    /// A later event of the booking told the recipient since (an update,
    /// or its cancellation): resending the old message would tell them
    /// what is no longer so.
    #[error("send {id} is moot: {why}; nothing is resent")]
    Moot { id: Uuid, why: String },
    #[error(transparent)]
    Db(#[from] DbError),
}

crate::from_driver_errors!(ResendError);

/// A send may be resent only once its event is DONE: in flight, the
/// poller is still deciding; DEAD, its other recipients must be replayed
/// first.
pub(super) async fn event_settled(client: &impl GenericClient, id: Uuid, event_id: Uuid) -> Result<(), ResendError> {
    match events::get(client, event_id).await?.map(|e| e.status) {
        Some(EventStatus::Done) => Ok(()),
        Some(EventStatus::Dead) => Err(ResendError::EventDead { id, event_id }),
        other => {
            let status = other.map_or("deleted".to_string(), |s| s.to_string());
            Err(ResendError::EventInFlight { id, event_id, status })
        }
    }
}
