//! Dispatch one outbox event: for every recipient, claim the send, commit
//! the claim, call the mailer, record the outcome.
//!
//! The order is the whole point (the story's "claim before send"): once a
//! claim is committed, no later attempt will send that email again, whatever
//! happens to this process. A crash after the claim can lose an email (it
//! shows up as UNKNOWN); nothing can duplicate one.

use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Pool;

use super::claims::{self, Claim, SendStatus};
use super::mailer::{Mailer, SendOutcome};
use super::{recipients, Notification};
use crate::fault::{FaultError, Faults};
use crate::outbox::claim::ClaimedEvent;
use crate::telemetry::mask_email;

/// Claim committed, mailer not yet called.
pub const FAULT_AFTER_SEND_CLAIM: &str = "dispatch.after_send_claim";
/// Mailer accepted the message, outcome not yet recorded.
pub const FAULT_AFTER_SEND: &str = "dispatch.after_send";

/// What happened to each recipient of one event.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DispatchReport {
    pub sent: u32,
    /// Already claimed by an earlier attempt: not sent again.
    pub skipped: u32,
    /// Known failure: claim released, the event will be retried.
    pub released: u32,
    /// Permanently refused for the recipient (FAILED).
    pub failed: u32,
    /// Outcome unknown (UNKNOWN), including orphaned claims found now.
    pub unknown: u32,
    /// First retryable failure, if any.
    pub retry_reason: Option<String>,
    /// The provider paused sending.
    pub paused: Option<String>,
    /// Our configuration is wrong; the event must be dead-lettered.
    pub misconfigured: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("database unavailable: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Fault(#[from] FaultError),
}

/// Sends every recipient's notification for `event`, at most once each.
/// `paused` is shared by the whole run: once the provider pauses sending, no
/// further send is attempted.
#[tracing::instrument(skip_all, fields(event_id = %event.id, booking_id = %event.aggregate_id))]
pub async fn dispatch(
    pool: &Pool,
    mailer: &dyn Mailer,
    faults: &Faults,
    worker: &str,
    event: &ClaimedEvent,
    paused: &AtomicBool,
) -> Result<DispatchReport, DispatchError> {
    let mut report = DispatchReport::default();
    for recipient in recipients(event.event_type, &event.payload) {
        if paused.load(Ordering::SeqCst) {
            report.paused.get_or_insert_with(|| "sending paused earlier in this run".into());
            break;
        }
        let email = recipient.email.as_str().to_string();
        let client = pool.get().await?;
        let claim = claims::claim(
            &client,
            event.id,
            event.aggregate_id,
            &email,
            event.event_type.as_str(),
            worker,
        )
        .await?;
        let send_id = match claim {
            Claim::Won(id) => id,
            Claim::Exists { id, status } => {
                if status == SendStatus::Claimed {
                    // We hold this event's processed_events row lock, so any
                    // other attempt on it has ended: its claim is an orphan.
                    claims::mark_orphan_unknown(&client, id).await?;
                    report.unknown += 1;
                    tracing::warn!(recipient = %mask_email(&email), "orphaned claim marked UNKNOWN; not re-sent");
                } else {
                    report.skipped += 1;
                }
                continue;
            }
        };
        drop(client); // don't hold a connection across the network call
        faults.hit(FAULT_AFTER_SEND_CLAIM)?;
        let notification = Notification {
            event_id: event.id,
            event_type: event.event_type,
            payload: event.payload.clone(),
            recipient,
        };
        let outcome = mailer.send(&notification).await;
        faults.hit(FAULT_AFTER_SEND)?;
        let client = pool.get().await?;
        let masked = mask_email(&email);
        match outcome {
            SendOutcome::Sent { message_id } => {
                claims::mark_sent(&client, send_id, &message_id).await?;
                report.sent += 1;
                tracing::debug!(recipient = %masked, %message_id, "sent");
            }
            SendOutcome::NotSent { reason } => {
                claims::release(&client, send_id).await?;
                report.released += 1;
                tracing::warn!(recipient = %masked, %reason, "not sent; claim released for retry");
                report.retry_reason.get_or_insert(reason);
            }
            SendOutcome::Paused { reason } => {
                claims::release(&client, send_id).await?;
                report.released += 1;
                paused.store(true, Ordering::SeqCst);
                tracing::error!(%reason, "provider paused sending; stopping this run");
                report.paused.get_or_insert(reason);
                break;
            }
            SendOutcome::Rejected { reason } => {
                claims::mark_settled(&client, send_id, SendStatus::Failed, &reason).await?;
                report.failed += 1;
                tracing::warn!(recipient = %masked, %reason, "permanently rejected for this recipient");
            }
            SendOutcome::Misconfigured { reason } => {
                claims::release(&client, send_id).await?;
                report.released += 1;
                tracing::error!(%reason, "mailer misconfigured; dead-lettering the event");
                report.misconfigured.get_or_insert(reason);
                break;
            }
            SendOutcome::Unknown { reason } => {
                claims::mark_settled(&client, send_id, SendStatus::Unknown, &reason).await?;
                report.unknown += 1;
                tracing::warn!(recipient = %masked, %reason, "outcome unknown; claim kept, never re-sent automatically");
            }
        }
    }
    Ok(report)
}
