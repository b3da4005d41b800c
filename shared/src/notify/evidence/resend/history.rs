//! The record of resends (`notification_resends`, owned by
//! [`resend`](super)): who decided each, when, on what evidence, and
//! which are still to run.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::db::DbResult;
use crate::notify::sends::unknown::Evidence;

/// Every recorded resend of the notifications of `event_ids`, oldest
/// first: who decided it, when, on what evidence.
pub async fn of_events(client: &impl GenericClient, event_ids: &[Uuid]) -> DbResult<Vec<Resent>> {
    let rows = client
        .query(
            "SELECT send_id, outbox_event_id, recipient_email, previous_status, previous_error, decided_by, \
                    decided_at, resent_at, evidence_mail_second, evidence_received_at, evidence_grace_secs \
               FROM notification_resends WHERE outbox_event_id = ANY($1) ORDER BY decided_at",
            &[&event_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Resent {
            send_id: r.get("send_id"),
            event_id: r.get("outbox_event_id"),
            recipient: r.get("recipient_email"),
            previous_status: r.get("previous_status"),
            previous_error: r.get("previous_error"),
            decided_by: r.get("decided_by"),
            decided_at: r.get("decided_at"),
            resent_at: r.get("resent_at"),
            evidence: r
                .get::<_, Option<DateTime<Utc>>>("evidence_mail_second")
                .map(|mail_second| Evidence { mail_second, received_at: r.get("evidence_received_at") }),
            grace_secs: r.get("evidence_grace_secs"),
        })
        .collect())
}

/// One recorded resend ([`of_events`]).
#[derive(Debug, Clone, Serialize)]
pub struct Resent {
    /// The claim it replaced (deleted by the resend).
    pub send_id: Uuid,
    pub event_id: Uuid,
    pub recipient: String,
    pub previous_status: String,
    pub previous_error: Option<String>,
    pub decided_by: String,
    pub decided_at: DateTime<Utc>,
    /// When the event ran again for the recipient.
    pub resent_at: Option<DateTime<Utc>>,
    /// SES's evidence it was decided on (None: an operator's decision).
    pub evidence: Option<Evidence>,
    pub grace_secs: Option<f64>,
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
