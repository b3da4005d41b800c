//! Deliver one notification: claim the send, commit the claim, call the
//! mailer, record the outcome.
//!
//! The order is the whole point (the story's "claim before send"): once a
//! claim is committed, no later attempt will send that email again, whatever
//! happens to this process. A crash after the claim can lose an email (it
//! shows up as UNKNOWN); nothing can duplicate one.

use deadpool_postgres::Pool;
use uuid::Uuid;

use super::mailer::{Mailer, SendOutcome};
use super::feedback;
use super::sends::{self, Claim, SendStatus, Settled};
use super::Notification;
use crate::db::DbError;
use crate::fault::{FaultError, Faults};
use crate::telemetry::mask_email;

/// Claim committed, mailer not yet called.
pub const FAULT_AFTER_SEND_CLAIM: &str = "deliver.after_send_claim";
/// Mailer accepted the message, outcome not yet recorded.
pub const FAULT_AFTER_SEND: &str = "deliver.after_send";

/// What happened to one recipient. The caller decides what it means for
/// the event (retry, dead letter, pause); every send is already recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Accepted by the provider; the send is SENT.
    Sent { message_id: String },
    /// An earlier attempt claimed it and recorded an outcome: not sent again.
    AlreadyClaimed,
    /// An earlier attempt claimed it and died before recording an outcome:
    /// now UNKNOWN, never re-sent automatically.
    Orphaned,
    /// Certainly not sent: the claim is released; retry the event later.
    Released { reason: String },
    /// The provider paused sending: the claim is released; stop sending.
    Paused { reason: String },
    /// Permanently refused for this recipient: FAILED.
    Rejected { reason: String },
    /// Our mailer configuration is wrong: the claim is released; the event
    /// should be dead-lettered until an operator fixes it.
    Misconfigured { reason: String },
    /// The provider may or may not have accepted it: UNKNOWN, kept.
    Unknown { reason: String },
    /// Not sent: a later event made it moot (recorded SUPERSEDED).
    Superseded { by: Uuid },
}

#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Fault(#[from] FaultError),
}

impl From<deadpool_postgres::PoolError> for DeliverError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        DeliverError::Db(e.into())
    }
}

/// Records that `n` is not sent because event `by` made it moot. Like a
/// send, the decision is a claim: if an earlier attempt already claimed
/// this send, that claim stands instead.
#[tracing::instrument(skip_all, fields(recipient = %mask_email(n.recipient.email.as_str())))]
pub async fn supersede(pool: &Pool, worker: &str, n: &Notification, by: Uuid, reason: &str) -> Result<Delivery, DeliverError> {
    let client = pool.get().await?;
    match sends::claim_superseded(&client, n, worker, by, reason).await? {
        Claim::Won(_) => {
            tracing::info!(superseded_by = %by, %reason, "not sent: superseded");
            Ok(Delivery::Superseded { by })
        }
        Claim::Exists { id, status: SendStatus::Claimed } => {
            sends::mark_orphan_unknown(&client, id).await?;
            tracing::warn!("orphaned claim marked UNKNOWN; not re-sent");
            Ok(Delivery::Orphaned)
        }
        Claim::Exists { .. } => Ok(Delivery::AlreadyClaimed),
    }
}

/// Sends `n` at most once. The caller must hold the event's
/// `processed_events` row lock, so no other attempt on the event is live and
/// a claim still CLAIMED belongs to an attempt that died.
#[tracing::instrument(skip_all, fields(recipient = %mask_email(n.recipient.email.as_str())))]
pub async fn deliver(
    pool: &Pool,
    mailer: &dyn Mailer,
    faults: &Faults,
    worker: &str,
    n: &Notification,
) -> Result<Delivery, DeliverError> {
    let client = pool.get().await?;
    let send_id = match sends::claim(&client, n, worker).await? {
        Claim::Won(id) => id,
        Claim::Exists { id, status: SendStatus::Claimed } => {
            sends::mark_orphan_unknown(&client, id).await?;
            tracing::warn!("orphaned claim marked UNKNOWN; not re-sent");
            return Ok(Delivery::Orphaned);
        }
        Claim::Exists { .. } => return Ok(Delivery::AlreadyClaimed),
    };
    // An address that bounced permanently or complained is never mailed.
    if let Some(why) = feedback::suppression(&client, n.recipient.email.as_str()).await? {
        let reason = format!("suppressed: the address {why} earlier");
        sends::mark_settled(&client, send_id, Settled::Failed, &reason).await?;
        tracing::warn!(%reason, "not sent to a suppressed address");
        return Ok(Delivery::Rejected { reason });
    }
    drop(client); // don't hold a connection across the network call
    faults.hit(FAULT_AFTER_SEND_CLAIM)?;
    let n = Notification { claim: Some(send_id), ..n.clone() };
    // Reasons are logged and stored from here on: no address in them.
    let outcome = mailer.send(&n).await.masked();
    faults.hit(FAULT_AFTER_SEND)?;
    let client = pool.get().await?;
    Ok(match outcome {
        SendOutcome::Sent { message_id } => {
            sends::mark_sent(&client, send_id, &message_id).await?;
            tracing::debug!(%message_id, "sent");
            Delivery::Sent { message_id }
        }
        SendOutcome::NotSent { reason } => {
            sends::release(&client, send_id).await?;
            tracing::warn!(%reason, "not sent; claim released for retry");
            Delivery::Released { reason }
        }
        SendOutcome::Paused { reason } => {
            sends::release(&client, send_id).await?;
            tracing::error!(%reason, "provider paused sending; stopping this run");
            Delivery::Paused { reason }
        }
        SendOutcome::Rejected { reason } => {
            sends::mark_settled(&client, send_id, Settled::Failed, &reason).await?;
            tracing::warn!(%reason, "permanently rejected for this recipient");
            Delivery::Rejected { reason }
        }
        SendOutcome::Misconfigured { reason } => {
            sends::release(&client, send_id).await?;
            tracing::error!(%reason, "mailer misconfigured; the event goes to the dead letter");
            Delivery::Misconfigured { reason }
        }
        SendOutcome::Unknown { reason } => {
            sends::mark_settled(&client, send_id, Settled::Unknown, &reason).await?;
            tracing::warn!(%reason, "outcome unknown; claim kept, never re-sent automatically");
            Delivery::Unknown { reason }
        }
    })
}
