//! Delivery feedback from SES's own event stream: every send carries its
//! claim's id as a message tag, SES publishes an event per message (`Send`,
//! `Delivery`, `Bounce`, `Complaint`, `Reject`, `DeliveryDelay`,
//! `RenderingFailure`) with those tags, and this module records each one
//! against its claim. Every statement on `send_feedback` lives
//! here; the claim itself changes only through `sends`, a suppression
//! through [`suppression`].
//!
//! - Any event but `Reject` and `RenderingFailure` proves SES accepted the
//!   message, so a claim still CLAIMED or UNKNOWN becomes SENT, confirmed
//!   by [`ConfirmedBy::SesEvent`] (`sends::outcome::confirm`): an ambiguous
//!   send is settled without an operator and without any risk of a
//!   duplicate.
//! - Events arrive at least once and in any order: each is recorded once
//!   (keyed by claim, type and SES timestamp), and a confirmation only ever
//!   moves a claim forward, so a Delivery before its Send, or the same
//!   Bounce twice, changes nothing the second time.
//! - A permanent bounce or a complaint suppresses the address: later sends
//!   to it are settled FAILED without calling SES.
//! - An event for mail this service did not tag, or for a claim retention
//!   has already deleted, is acknowledged and logged, never retried.
//! - Nothing is trusted before it is checked: the envelope must come from
//!   SES in the stack's own account and region ([`Origin`](super::ses_event::Origin)), and the
//!   event must be about the claim's own message (the message id SES gave
//!   the send, when it answered; the claim's recipient as the only
//!   destination). A complaint or bounce suppresses the claim's recipient
//!   alone, whatever else it lists.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use super::ses_event::{shown, Kind, SesEvent};
use super::suppression::{self, Covers};
use super::{resend, watermark};
use crate::db::DbResult;
use crate::notify::sends::{self, ConfirmedBy};
use crate::telemetry::mask_email;

/// Retention: deletes up to `limit` feedback rows received more than
/// `max_age` ago whose send no longer exists (retention deleted it, after
/// its event). While the send exists, what SES said about it stays: the
/// API shows it (`notify::tracking`).
pub async fn purge(client: &impl GenericClient, max_age: std::time::Duration, limit: i64) -> DbResult<u64> {
    // `booking_notification_send` (V47): the ledger's answer.
    const SQL: &str = "DELETE FROM send_feedback WHERE ctid IN ( \
             SELECT f.ctid FROM send_feedback f \
              WHERE f.received_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS (SELECT 1 FROM booking_notification_send(f.send_id)) LIMIT $2)";
    Ok(client.execute(SQL, &[&max_age.as_secs_f64(), &limit]).await?)
}

/// Why an event about a claim is not about that claim's message: the
/// message id SES gave the send differs, or the message did not go to the
/// claim's recipient alone. None: it matches.
fn mismatch(target: &sends::outcome::FeedbackTarget, event: &SesEvent) -> Option<&'static str> {
    if target.message_id.as_deref().is_some_and(|id| id != event.message_id) {
        return Some("its message id is not the one SES gave the send");
    }
    let recipient = target.recipient.to_lowercase();
    if event.destination.is_empty() || event.destination.iter().any(|d| *d != recipient) {
        return Some("its message was not sent to the claim's recipient alone");
    }
    None
}

/// What recording an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Recorded {
    /// New feedback for a known claim.
    Recorded { confirmed: bool, suppressed: u32 },
    /// An event of a canary (a message to SES's mailbox simulator): it
    /// moved the watermark, and nothing else.
    Canary,
    /// About a claim that was resent on SES's evidence: it came after the
    /// resend, so the recipient very likely got two (the residual risk of
    /// resending on evidence, reported loudly).
    AfterResend,
    /// Already recorded (an at-least-once repeat).
    Duplicate,
    /// Not our mail, or its claim is gone: acknowledged, nothing to do.
    Unmatched,
    /// It names a claim but not that claim's message (another message id,
    /// another recipient): dropped with a warning, nothing changed.
    Mismatched,
}

/// Records one event: that SES's stream got this far (the watermark,
/// `evidence`), then in one transaction the feedback row, the confirmation
/// of its claim (or its refusal), and any suppression.
pub async fn record(client: &mut deadpool_postgres::Client, event: &SesEvent) -> DbResult<Recorded> {
    // Every event of the stack's configuration set is evidence of how far
    // the stream has got, whoever's mail it is about.
    if let Some(mail_at) = event.mail_at {
        watermark::observe(&*client, mail_at).await?;
    }
    if let Some(canary) = event.canary {
        let ours = watermark::canary_seen(&*client, canary).await?;
        tracing::info!(%canary, ours, kind = event.kind.name(), "canary event: the watermark moved");
        return Ok(Recorded::Canary);
    }
    let Some(claim) = event.claim else {
        tracing::info!(message_id = %event.message_id, kind = event.kind.name(), "SES event for untagged mail ignored");
        return Ok(Recorded::Unmatched);
    };
    let tx = client.transaction().await?;
    let Some(target) = sends::outcome::lock_for_feedback(&tx, claim).await? else {
        if resend::resent_on_evidence(&tx, claim).await? {
            tracing::error!(%claim, kind = event.kind.name(), message_id = %event.message_id,
                "SES event for a send resent on SES's evidence: it came after the resend, so the recipient very \
                 likely got two (raise FEEDBACK_GRACE_SECS if this repeats)");
            return Ok(Recorded::AfterResend);
        }
        tracing::info!(%claim, kind = event.kind.name(), "SES event for a claim that no longer exists ignored");
        return Ok(Recorded::Unmatched);
    };
    if let Some(reason) = mismatch(&target, event) {
        tracing::warn!(%claim, kind = event.kind.name(), message_id = %shown(Some(&event.message_id)), reason,
            "SES event that does not match its claim dropped");
        return Ok(Recorded::Mismatched);
    }
    let subtype = event.kind.recorded_subtype();
    let inserted = tx
        .execute(
            "INSERT INTO send_feedback (send_id, kind, subtype, occurred_at, provider_message_id) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (send_id, kind, occurred_at) DO NOTHING",
            &[&claim, &event.kind.name(), &subtype, &event.occurred_at, &event.message_id],
        )
        .await?;
    if inserted == 0 {
        return Ok(Recorded::Duplicate);
    }
    let confirmed = event.kind.proves_acceptance()
        && sends::outcome::confirm(&tx, claim, &event.message_id, ConfirmedBy::SesEvent).await?;
    // A rejection settles an ambiguous send too: SES had it and refused it.
    if !event.kind.proves_acceptance() {
        let reason = format!("SES reported {} after the call", event.kind.name());
        sends::outcome::refuse(&tx, claim, &reason).await?;
    }
    let mut suppressed = 0;
    if event.kind.suppresses() {
        // A bounce stops the address that bounced, exactly: anyone can make
        // `v+x@` bounce at a domain that refuses sub-addresses, and that
        // says nothing of `v@`. A complaint, which only the person can
        // make, stops their mailbox: every spelling of it.
        let (reason, covers) = match (&event.kind, &subtype) {
            (Kind::Bounce { .. }, Some(subtype)) => (format!("bounced ({subtype})"), Covers::Address),
            _ => ("complained".to_string(), Covers::Mailbox),
        };
        // Only the claim's own recipient, and only when the event names it:
        // whatever other addresses an event lists are never suppressed.
        let recipient = target.recipient.to_lowercase();
        if event.recipients.contains(&recipient) {
            suppressed += suppression::suppress(&tx, &recipient, covers, &reason, claim).await? as u32;
            tracing::warn!(recipient = %mask_email(&recipient), kind = event.kind.name(), covers = covers.as_str(), "address suppressed");
        } else {
            tracing::warn!(%claim, kind = event.kind.name(), "the event does not name the claim's recipient; nothing suppressed");
        }
    }
    tx.commit().await?;
    if confirmed {
        tracing::info!(%claim, kind = event.kind.name(), "send confirmed by its SES event");
    }
    Ok(Recorded::Recorded { confirmed, suppressed })
}

/// How many of the latest `sample` messages SES accepted by its own
/// answer, claimed between `window` and `grace` ago, still have no event
/// of SES's about them: its stream is behind, stopped, or losing events,
/// and until they come nothing may be resent on its evidence (an event
/// held back that long could be an ambiguous send's too).
pub async fn behind(client: &impl GenericClient, grace: Duration, window: Duration, sample: i64) -> DbResult<i64> {
    // `booking_notification_sends_answered_by_ses` (V47): the ledger's answer.
    const SQL: &str = "SELECT count(*) FROM booking_notification_sends_answered_by_ses($1, $2, $3) AS s(id) \
                        WHERE NOT EXISTS (SELECT 1 FROM send_feedback f WHERE f.send_id = s.id)";
    let (grace, window) = (grace.as_secs_f64(), (grace + window).as_secs_f64());
    Ok(client.query_one(SQL, &[&grace, &window, &sample]).await?.get(0))
}

/// Feedback of one send, oldest first: `(kind, subtype, occurred_at)`.
pub async fn of_send(
    client: &impl GenericClient,
    send_id: Uuid,
) -> DbResult<Vec<(String, Option<String>, DateTime<Utc>)>> {
    let rows = client
        .query(
            "SELECT kind, subtype, occurred_at FROM send_feedback WHERE send_id = $1 ORDER BY occurred_at, kind",
            &[&send_id],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
}

/// One of SES's events about a send, as the operator console shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Heard {
    pub send_id: Uuid,
    /// Send, Delivery, Bounce, Complaint, Reject, DeliveryDelay, RenderingFailure.
    pub kind: String,
    pub subtype: Option<String>,
    /// When SES says it happened.
    pub occurred_at: DateTime<Utc>,
    /// When it reached this service.
    pub received_at: DateTime<Utc>,
}

/// SES's events about `send_ids`, each send's oldest first.
pub async fn of_sends(client: &impl GenericClient, send_ids: &[Uuid]) -> DbResult<Vec<Heard>> {
    let rows = client
        .query(
            "SELECT send_id, kind, subtype, occurred_at, received_at FROM send_feedback \
              WHERE send_id = ANY($1) ORDER BY send_id, occurred_at, kind",
            &[&send_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Heard {
            send_id: r.get(0),
            kind: r.get(1),
            subtype: r.get(2),
            occurred_at: r.get(3),
            received_at: r.get(4),
        })
        .collect())
}
