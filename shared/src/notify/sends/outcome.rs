//! What became of each claimed send: the outcomes a poller records, the
//! orphans a retry finds, and the confirmations SES's own events bring.

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::send_sql::{CLAIMED, FAILED, SENT, UNKNOWN};
use super::status::{ConfirmedBy, SendStatus};
use crate::db::DbResult;

/// What became of one claimed send, to record with [`record`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted: SENT with the provider's message id.
    Sent(String),
    /// FAILED, UNKNOWN or CAPPED with the reason (kept SENT if SES's event
    /// came first).
    Settled(Settled, String),
    /// Certainly not sent: the claim is deleted, so a retry may send it.
    Released,
}

/// Records the outcomes of claims in one statement: SENT with the message
/// id; FAILED or UNKNOWN with the reason (a send SES's own event already
/// confirmed while the mailer waited stays SENT); or the claim deleted, so
/// a retry may send it. Fenced: only sends whose event is still held under
/// `lease` change; the others stay as they are (a claim left CLAIMED
/// becomes UNKNOWN at its event's new holder): the statement changes
/// nothing once `lease` has ended
/// ([`crate::outbox::events::lease::LIVE`], checked once).
pub async fn record(client: &impl GenericClient, outcomes: &[(Uuid, Outcome)], lease: Uuid) -> DbResult<()> {
    if outcomes.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = outcomes.iter().map(|(id, _)| *id).collect();
    let statuses: Vec<Option<&str>> = outcomes
        .iter()
        .map(|(_, o)| match o {
            Outcome::Sent(_) => Some(SendStatus::Sent.as_str()),
            Outcome::Settled(Settled::Failed, _) => Some(SendStatus::Failed.as_str()),
            Outcome::Settled(Settled::Unknown, _) => Some(SendStatus::Unknown.as_str()),
            Outcome::Settled(Settled::Capped, _) => Some(SendStatus::Capped.as_str()),
            Outcome::Released => None,
        })
        .collect();
    let message_ids: Vec<Option<&str>> =
        outcomes.iter().map(|(_, o)| if let Outcome::Sent(m) = o { Some(m.as_str()) } else { None }).collect();
    let errors: Vec<Option<&str>> =
        outcomes.iter().map(|(_, o)| if let Outcome::Settled(_, e) = o { Some(e.as_str()) } else { None }).collect();
    let sql = formatcp!(
        "WITH o AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) \
                      AS o(id, status, message_id, error)), \
              released AS (DELETE FROM booking_notification_sends s USING o \
                            WHERE s.id = o.id AND o.status IS NULL AND s.status = {CLAIMED} \
                              AND EXISTS (SELECT 1 FROM outbox_lease_live($5)) \
                            RETURNING s.id) \
         UPDATE booking_notification_sends s \
            SET status = o.status, provider_message_id = coalesce(o.message_id, s.provider_message_id), \
                last_error = coalesce(o.error, s.last_error), completed_at = now(), updated_at = now() \
           FROM o WHERE s.id = o.id AND o.status IS NOT NULL AND (s.status = {CLAIMED} OR o.status = {SENT}) \
            AND EXISTS (SELECT 1 FROM outbox_lease_live($5))"
    );
    client.execute(&client.prepare_cached(sql).await?, &[&ids, &statuses, &message_ids, &errors, &lease]).await?;
    Ok(())
}

/// The `last_error` of an orphan marked UNKNOWN ([`mark_orphans_unknown`]).
pub const ORPHANED: &str = "claimed by an attempt that died or lost its event before recording the outcome";

/// Claims left CLAIMED by an earlier attempt that died, or lost its event,
/// between claim and outcome: the email may or may not have gone out, so
/// each becomes UNKNOWN and is never re-sent on a guess (SES's evidence
/// settles it; `outboxctl unknown` lists them). Fenced: only while their
/// event is held under `lease`. Returns how many moved.
pub async fn mark_orphans_unknown(client: &impl GenericClient, ids: &[Uuid], lease: Uuid) -> DbResult<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let sql = formatcp!(
        "UPDATE booking_notification_sends s SET status = {UNKNOWN}, last_error = $3, \
             completed_at = now(), updated_at = now() \
         WHERE id = ANY($1) AND status = {CLAIMED} \
           AND EXISTS (SELECT 1 FROM outbox_events_held(ARRAY[s.outbox_event_id], $2))"
    );
    Ok(client.execute(&client.prepare_cached(sql).await?, &[&ids, &lease, &ORPHANED]).await?)
}

/// SES's own event says it refused the message after the call (`Reject`,
/// `RenderingFailure`): a claim still CLAIMED or UNKNOWN becomes FAILED
/// with `reason`. Returns whether it moved.
pub async fn refuse(tx: &impl GenericClient, id: Uuid, reason: &str) -> DbResult<bool> {
    let sql = formatcp!(
        "UPDATE booking_notification_sends SET status = {FAILED}, last_error = $2, \
             completed_at = coalesce(completed_at, now()), updated_at = now() \
         WHERE id = $1 AND status IN ({CLAIMED}, {UNKNOWN})"
    );
    Ok(tx.execute(sql, &[&id, &reason]).await? == 1)
}

/// How a send settled without being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Permanently refused for this recipient.
    Failed,
    /// The provider may or may not have accepted it.
    Unknown,
    /// Not sent: the recipient's daily limit was reached.
    Capped,
}

/// What feedback about a send is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackTarget {
    /// The one address the send mailed.
    pub recipient: String,
    /// The provider's id for the message, once it answered (or an earlier
    /// event confirmed it); None for a send that never answered.
    pub message_id: Option<String>,
}

/// Locks one send for recording feedback about it; None when retention has
/// deleted it.
pub async fn lock_for_feedback(tx: &impl GenericClient, id: Uuid) -> DbResult<Option<FeedbackTarget>> {
    let sql = "SELECT recipient_email, provider_message_id FROM booking_notification_sends WHERE id = $1 FOR UPDATE";
    let row = tx.query_opt(sql, &[&id]).await?;
    Ok(row.map(|r| FeedbackTarget { recipient: r.get(0), message_id: r.get(1) }))
}

/// SES's own event proved it accepted the message: a claim still CLAIMED
/// or UNKNOWN becomes SENT, confirmed by `by`, with SES's message id.
/// Returns whether it moved (a confirmation only ever moves a claim
/// forward, so a repeat or a later event changes nothing).
pub async fn confirm(tx: &impl GenericClient, id: Uuid, message_id: &str, by: ConfirmedBy) -> DbResult<bool> {
    let sql = formatcp!(
        "UPDATE booking_notification_sends SET status = {SENT}, \
             provider_message_id = coalesce(provider_message_id, $2), confirmed_by = $3, \
             completed_at = coalesce(completed_at, now()), updated_at = now() \
         WHERE id = $1 AND status IN ({CLAIMED}, {UNKNOWN})"
    );
    Ok(tx.execute(sql, &[&id, &message_id, &by.as_str()]).await? == 1)
}
