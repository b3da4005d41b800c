//! SQL owned by `booking_notification_sends`: one row per
//! `(outbox_event_id, recipient_email, event_type)`.
//!
//! Each statement runs in its own (autocommit) transaction on purpose: the
//! claim must be durable *before* the mailer is called, so that a crash after
//! an accepted send can never lead to a second send.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

/// The state of an existing claim found when trying to claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    Claimed,
    Sent,
    Failed,
    Unknown,
}

impl SendStatus {
    pub fn from_db(s: &str) -> Self {
        match s {
            "SENT" => SendStatus::Sent,
            "FAILED" => SendStatus::Failed,
            "UNKNOWN" => SendStatus::Unknown,
            _ => SendStatus::Claimed,
        }
    }
}

pub enum Claim {
    /// This worker owns the send; the claim is committed.
    Won(Uuid),
    /// A claim already exists: never send again.
    Exists { id: Uuid, status: SendStatus },
}

/// Claims one send. Commits before returning (autocommit statement).
pub async fn claim(
    client: &impl GenericClient,
    event_id: Uuid,
    booking_id: Uuid,
    recipient: &str,
    event_type: &str,
    worker: &str,
) -> Result<Claim, tokio_postgres::Error> {
    let id = Uuid::now_v7();
    let won = client
        .query_opt(
            &client.prepare_cached("INSERT INTO booking_notification_sends \
                 (id, outbox_event_id, booking_id, recipient_email, event_type, claimed_by) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (outbox_event_id, recipient_email, event_type) DO NOTHING RETURNING id").await?,
            &[&id, &event_id, &booking_id, &recipient, &event_type, &worker],
        )
        .await?;
    if won.is_some() {
        return Ok(Claim::Won(id));
    }
    let row = client
        .query_one(
            &client.prepare_cached("SELECT id, status FROM booking_notification_sends \
             WHERE outbox_event_id = $1 AND recipient_email = $2 AND event_type = $3").await?,
            &[&event_id, &recipient, &event_type],
        )
        .await?;
    Ok(Claim::Exists { id: row.get(0), status: SendStatus::from_db(row.get(1)) })
}

pub async fn mark_sent(client: &impl GenericClient, id: Uuid, message_id: &str) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            &client.prepare_cached("UPDATE booking_notification_sends SET status = 'SENT', provider_message_id = $2, \
                 completed_at = now(), updated_at = now() WHERE id = $1").await?,
            &[&id, &message_id],
        )
        .await
        .map(drop)
}

/// FAILED (permanent for this recipient) or UNKNOWN (outcome unknown).
pub async fn mark_settled(
    client: &impl GenericClient,
    id: Uuid,
    status: SendStatus,
    error: &str,
) -> Result<(), tokio_postgres::Error> {
    let status = match status {
        SendStatus::Failed => "FAILED",
        SendStatus::Unknown => "UNKNOWN",
        other => unreachable!("mark_settled({other:?})"),
    };
    client
        .execute(
            &client.prepare_cached("UPDATE booking_notification_sends SET status = $2, last_error = $3, completed_at = now(), \
                 updated_at = now() WHERE id = $1").await?,
            &[&id, &status, &error],
        )
        .await
        .map(drop)
}

/// A claim left CLAIMED by an attempt that died between claim and outcome:
/// the email may or may not have gone out, so it becomes UNKNOWN and is never
/// re-sent automatically (`outboxctl unknown` lists it).
pub async fn mark_orphan_unknown(client: &impl GenericClient, id: Uuid) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            &client.prepare_cached("UPDATE booking_notification_sends SET status = 'UNKNOWN', \
                 last_error = 'claimed by an attempt that died before recording the outcome', \
                 completed_at = now(), updated_at = now() \
             WHERE id = $1 AND status = 'CLAIMED'").await?,
            &[&id],
        )
        .await
        .map(drop)
}

/// Releases a claim after a send that certainly did not happen, so the retry
/// may send it.
pub async fn release(client: &impl GenericClient, id: Uuid) -> Result<(), tokio_postgres::Error> {
    client
        .execute(&client.prepare_cached("DELETE FROM booking_notification_sends WHERE id = $1 AND status = 'CLAIMED'").await?, &[&id])
        .await
        .map(drop)
}
