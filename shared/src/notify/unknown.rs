//! Sends whose outcome is unknown: claimed, but the worker died or the
//! provider's answer was ambiguous before the outcome was recorded. These
//! are the emails that may have been lost in the claim-then-crash window.
//!
//! SES's own events settle most of them (`feedback`): a Send event proves
//! acceptance and the claim becomes SENT. What no event confirms within the
//! feedback grace period is "not confirmed by SES", very likely never
//! accepted, and only those need a decision.
//!
//! By default nothing re-sends them. [`resend`] is an explicit decision,
//! recorded in `notification_resends` (every statement on that table lives
//! here): the claim is removed and the event reopened, and the poller then
//! sends that one recipient and nobody else ([`pending_recipients`]),
//! however the event's other sends stand. [`resend_unconfirmed`] makes it
//! for every send not confirmed past a given age (`outboxctl unknown resend
//! --unconfirmed`, or the sweeper when `UNKNOWN_AUTO_RESEND_AFTER_SECS` is
//! set).

use std::time::Duration;

use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use super::sends::{self, SendStatus};
use crate::db::{DbError, DbResult};
use crate::outbox::events::{self, transitions, EventStatus};
use crate::outbox::processed;

pub use sends::unknown::{list_unknown as list, unknown_counts as counts, Confirmation, UnknownCounts, UnknownSend};

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

/// Records the decision and reopens the event so the poller re-sends this
/// one recipient. One transaction; returns the event's id.
pub async fn resend(
    client: &mut deadpool_postgres::Client,
    send_id: Uuid,
    decided_by: &str,
) -> Result<Uuid, ResendError> {
    let tx = client.transaction().await?;
    let (event_id, status) = sends::unknown::lock(&tx, send_id).await?.ok_or(ResendError::NotFound(send_id))?;
    if !matches!(status, SendStatus::Unknown | SendStatus::Claimed) {
        return Err(ResendError::NotUnknown { id: send_id, status });
    }
    event_settled(&tx, send_id, event_id).await?;
    tx.execute(
        "INSERT INTO notification_resends (id, send_id, outbox_event_id, recipient_email, event_type, \
                 previous_status, previous_error, claimed_at, decided_by) \
         SELECT gen_random_uuid(), id, outbox_event_id, recipient_email, event_type, status, last_error, \
                claimed_at, $2 FROM booking_notification_sends WHERE id = $1",
        &[&send_id, &decided_by],
    )
    .await?;
    sends::unknown::delete(&tx, send_id).await?;
    // The event runs again: processed_events must let it through.
    processed::forget(&tx, event_id).await?;
    let reason = format!("resend of one recipient approved by {decided_by}");
    if !transitions::reopen(&tx, event_id, &reason).await? {
        return Err(ResendError::EventInFlight { id: send_id, event_id, status: "changing".into() });
    }
    tx.commit().await?;
    Ok(event_id)
}

/// What a resend of the unconfirmed sends did, or would do.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ResendReport {
    /// `(send, event)` reopened for one recipient each.
    pub resent: Vec<(Uuid, Uuid)>,
    /// `(send, why not)`: its event is in flight or DEAD, or the send
    /// settled meanwhile.
    pub skipped: Vec<(Uuid, String)>,
}

/// Resends every UNKNOWN send claimed more than `older_than` ago that SES
/// has still not confirmed, oldest first, at most `max`: each is its own
/// recorded decision ([`resend`]). With `dry_run`, only says what it would
/// do. The only error is the database's.
pub async fn resend_unconfirmed(
    client: &mut deadpool_postgres::Client,
    older_than: Duration,
    decided_by: &str,
    max: usize,
    dry_run: bool,
) -> Result<ResendReport, DbError> {
    let mut report = ResendReport::default();
    for id in sends::unknown::unconfirmed_ids(&*client, older_than, max as i64).await? {
        let outcome = if dry_run {
            would_resend(&*client, id).await?
        } else {
            match resend(client, id, decided_by).await {
                Ok(event_id) => Ok(event_id),
                Err(ResendError::Db(e)) => return Err(e),
                Err(refused) => Err(refused.to_string()),
            }
        };
        match outcome {
            Ok(event_id) => report.resent.push((id, event_id)),
            Err(why) => report.skipped.push((id, why)),
        }
    }
    Ok(report)
}

/// What [`resend`] would answer, without changing anything.
async fn would_resend(client: &impl GenericClient, id: Uuid) -> DbResult<Result<Uuid, String>> {
    let Some((event_id, _)) = sends::unknown::lock(client, id).await? else {
        return Ok(Err(ResendError::NotFound(id).to_string()));
    };
    match event_settled(client, id, event_id).await {
        Ok(()) => Ok(Ok(event_id)),
        Err(ResendError::Db(e)) => Err(e),
        Err(refused) => Ok(Err(refused.to_string())),
    }
}

/// A send may be resent only once its event is DONE: in flight, the
/// poller is still deciding; DEAD, its other recipients must be replayed
/// first.
async fn event_settled(client: &impl GenericClient, id: Uuid, event_id: Uuid) -> Result<(), ResendError> {
    match events::get(client, event_id).await?.map(|e| e.status) {
        Some(EventStatus::Done) => Ok(()),
        Some(EventStatus::Dead) => Err(ResendError::EventDead { id, event_id }),
        other => {
            let status = other.map_or("deleted".to_string(), |s| s.to_string());
            Err(ResendError::EventInFlight { id, event_id, status })
        }
    }
}

/// The recipients an operator asked to resend for this event, not yet
/// resent. When there are any, the event runs for them alone.
pub async fn pending_recipients(client: &impl GenericClient, event_id: Uuid) -> DbResult<Vec<String>> {
    Ok(pending_recipients_many(client, &[event_id]).await?.remove(&event_id).unwrap_or_default())
}

/// [`pending_recipients`] for many events, in one statement (events with
/// none are absent).
pub async fn pending_recipients_many(
    client: &impl GenericClient,
    event_ids: &[Uuid],
) -> DbResult<std::collections::HashMap<Uuid, Vec<String>>> {
    let sql = "SELECT outbox_event_id, recipient_email FROM notification_resends \
                WHERE outbox_event_id = ANY($1) AND resent_at IS NULL";
    let mut pending: std::collections::HashMap<Uuid, Vec<String>> = Default::default();
    for row in client.query(&client.prepare_cached(sql).await?, &[&event_ids]).await? {
        pending.entry(row.get(0)).or_default().push(row.get(1));
    }
    Ok(pending)
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

crate::from_driver_errors!(ResendError);
