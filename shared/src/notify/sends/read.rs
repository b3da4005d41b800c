//! What others read of the ledger: who may have been told of each booking,
//! one event's sends, the counts by status, and retention.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::send_sql::{CAPPED, CLAIMED, FAILED, SENT, SUPERSEDED, UNKNOWN};
use super::status::{ConfirmedBy, NotSentBecause, SendStatus, SentVia};
use crate::db::DbResult;

/// For each booking, the recipients that may have been told something
/// about it: a send SENT, UNKNOWN, or still CLAIMED (an attempt may be
/// sending it). One statement for all of them. The sends are found through
/// the bookings' events (every send names its event): the planner asks
/// only for a booking whose every earlier event still exists.
pub async fn possibly_told_many(
    client: &impl GenericClient,
    booking_ids: &[Uuid],
) -> DbResult<HashMap<Uuid, Vec<String>>> {
    let mut told: HashMap<Uuid, Vec<String>> = booking_ids.iter().map(|b| (*b, Vec::new())).collect();
    if booking_ids.is_empty() {
        return Ok(told);
    }
    let sql = formatcp!(
        "SELECT DISTINCT e.aggregate_id, s.recipient_email FROM outbox_events_of_aggregates($1) e \
           JOIN booking_notification_sends s ON s.outbox_event_id = e.id \
          WHERE s.status IN ({SENT}, {UNKNOWN}, {CLAIMED})"
    );
    for row in client.query(&client.prepare_cached(sql).await?, &[&booking_ids]).await? {
        told.entry(row.get(0)).or_default().push(row.get(1));
    }
    Ok(told)
}

/// `(recipient, status)` of every send of an event, by recipient.
pub async fn of_event(client: &impl GenericClient, event_id: Uuid) -> DbResult<Vec<(String, SendStatus)>> {
    let rows = client
        .query(
            "SELECT recipient_email, status FROM booking_notification_sends WHERE outbox_event_id = $1 \
             ORDER BY recipient_email",
            &[&event_id],
        )
        .await?;
    rows.iter().map(|r| Ok((r.get("recipient_email"), SendStatus::from_row(r, "status")?))).collect()
}

/// Sends by status, zeros included.
pub async fn counts(client: &impl GenericClient) -> DbResult<BTreeMap<SendStatus, i64>> {
    let mut counts: BTreeMap<SendStatus, i64> = SendStatus::ALL.iter().map(|s| (*s, 0)).collect();
    for row in client.query("SELECT status, count(*) AS n FROM booking_notification_sends GROUP BY status", &[]).await?
    {
        counts.insert(SendStatus::from_row(&row, "status")?, row.get("n"));
    }
    Ok(counts)
}

/// The smallest send id claimed at or after `now() - $1 seconds`: a send's
/// id is a UUIDv7 made at its claim ([`new_ids`](super::claim::new_ids)), whose first 48
/// bits are the claim's Unix time in milliseconds, so the primary key
/// orders the sends by claim time and no index on `claimed_at` is needed
/// (each claim wrote one). Clocks of different pollers may differ by
/// seconds; what reads this bound also checks `claimed_at` itself.
const FIRST_ID_CLAIMED_SINCE: &str = "(lpad(to_hex(floor(extract(epoch FROM now() - make_interval(secs => $1)) \
     * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid";

/// Retention: deletes up to `limit` SENT/FAILED/SUPERSEDED/CAPPED sends completed more than
/// `max_age` ago whose event no longer exists (found by their ids, which
/// order them by claim time: a send is claimed before it completes). A
/// claim of an event that exists is kept, even a DONE one: the event may be
/// reopened (a retry, a replay or an operator's resend), and without its
/// claim it would send that email twice.
pub async fn purge(client: &impl GenericClient, max_age: Duration, limit: i64) -> DbResult<u64> {
    const SQL: &str = formatcp!(
        "DELETE FROM booking_notification_sends WHERE id IN ( \
             SELECT s.id FROM booking_notification_sends s \
              WHERE s.id < {FIRST_ID_CLAIMED_SINCE} \
                AND s.claimed_at < now() - make_interval(secs => $1) \
                AND s.status IN ({SENT}, {FAILED}, {SUPERSEDED}, {CAPPED}) \
                AND s.completed_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS (SELECT 1 FROM outbox_event(s.outbox_event_id)) LIMIT $2)"
    );
    Ok(client.execute(SQL, &[&max_age.as_secs_f64(), &limit]).await?)
}

/// One send as the operator console shows it: its claim, its call and its
/// outcome.
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct Send {
    pub id: Uuid,
    pub event_id: Uuid,
    pub recipient: String,
    pub event_type: String,
    pub status: SendStatus,
    /// The worker (and its run) that claimed it.
    pub claimed_by: Option<String>,
    pub claimed_at: chrono::DateTime<chrono::Utc>,
    /// When the provider's answer (or the decision not to call) was recorded.
    pub completed_at: Option<chrono::DateTime<chrono::Utc>>,
    pub provider: SentVia,
    pub provider_message_id: Option<String>,
    pub last_error: Option<String>,
    pub confirmed_by: Option<ConfirmedBy>,
    pub left_for_operator: Option<String>,
    pub not_sent_because: Option<NotSentBecause>,
    /// The later event that made it moot (SUPERSEDED).
    pub superseded_by: Option<Uuid>,
}

/// The columns of a [`Send`].
const SEND: &str = "id, outbox_event_id, recipient_email, event_type, status, claimed_by, claimed_at, completed_at, \
                    provider, provider_message_id, last_error, confirmed_by, left_for_operator, not_sent_because, \
                    superseded_by";

fn send_of(r: &tokio_postgres::Row) -> DbResult<Send> {
    let optional = |column: &str| -> Option<()> { r.get::<_, Option<&str>>(column).map(|_| ()) };
    Ok(Send {
        id: r.get("id"),
        event_id: r.get("outbox_event_id"),
        recipient: r.get("recipient_email"),
        event_type: r.get("event_type"),
        status: SendStatus::from_row(r, "status")?,
        claimed_by: r.get("claimed_by"),
        claimed_at: r.get("claimed_at"),
        completed_at: r.get("completed_at"),
        provider: SentVia::from_row(r, "provider")?,
        provider_message_id: r.get("provider_message_id"),
        last_error: r.get("last_error"),
        confirmed_by: optional("confirmed_by").map(|_| ConfirmedBy::from_row(r, "confirmed_by")).transpose()?,
        left_for_operator: r.get("left_for_operator"),
        not_sent_because: optional("not_sent_because")
            .map(|_| NotSentBecause::from_row(r, "not_sent_because"))
            .transpose()?,
        superseded_by: r.get("superseded_by"),
    })
}

/// The sends of `event_ids`, each event's by recipient
/// (`booking_notification_sends_one_per_recipient`).
pub async fn of_events(client: &impl GenericClient, event_ids: &[Uuid]) -> DbResult<Vec<Send>> {
    let sql = formatcp!(
        "SELECT {SEND} FROM booking_notification_sends WHERE outbox_event_id = ANY($1) \
          ORDER BY outbox_event_id, recipient_email, id"
    );
    client.query(sql, &[&event_ids]).await?.iter().map(send_of).collect()
}

/// One send, by its id.
pub async fn get(client: &impl GenericClient, id: Uuid) -> DbResult<Option<Send>> {
    let sql = formatcp!("SELECT {SEND} FROM booking_notification_sends WHERE id = $1");
    client.query_opt(sql, &[&id]).await?.as_ref().map(send_of).transpose()
}

/// One minute of sending, as the operator console charts it.
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct Minute {
    pub at: chrono::DateTime<chrono::Utc>,
    /// Accepted by the provider in that minute.
    pub sent: i64,
    /// Settled otherwise: refused (or suppressed), answer lost, made moot
    /// by a later change (or too late), over a recipient's daily limit.
    pub failed: i64,
    pub unknown: i64,
    pub superseded: i64,
    pub capped: i64,
    /// From the event's commit (or a reminder's due time) to the
    /// provider's acceptance, seconds: the median and the 99th percentile.
    pub latency_p50: Option<f64>,
    pub latency_p99: Option<f64>,
}

/// The sends settled in each minute from `from` on, oldest first (minutes
/// with none are absent). One range read of the primary key: a send's id
/// orders the sends by claim time (see [`purge`]), and a send settles
/// within its claim's run (minutes, at worst the poller's timeout). The latency runs from the event's
/// commit to the provider's answer as the database recorded it: the
/// commit's time is its id's (a UUIDv7 made at the insert, milliseconds
/// before the commit), read without a visit to the event; only a reminder,
/// written to fall due later, asks its event when it fell due
/// (`outbox_event_committed`, V49).
pub async fn minutes(client: &impl GenericClient, from: chrono::DateTime<chrono::Utc>) -> DbResult<Vec<Minute>> {
    const COMMITTED: &str = formatcp!(
        "CASE WHEN s.event_type = '{}' \
              THEN (SELECT c FROM outbox_event_committed(s.outbox_event_id) c) \
              ELSE to_timestamp(('x' || replace(left(s.outbox_event_id::text, 13), '-', ''))::bit(48)::bigint / 1000.0) \
         END",
        crate::booking::events::EventType::BookingReminder.as_str()
    );
    const SQL: &str = formatcp!(
        "SELECT date_trunc('minute', s.completed_at) AS at, \
                count(*) FILTER (WHERE s.status = {SENT}) AS sent, \
                count(*) FILTER (WHERE s.status = {FAILED}) AS failed, \
                count(*) FILTER (WHERE s.status = {UNKNOWN}) AS unknown, \
                count(*) FILTER (WHERE s.status = {SUPERSEDED}) AS superseded, \
                count(*) FILTER (WHERE s.status = {CAPPED}) AS capped, \
                percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM s.completed_at - {COMMITTED})) \
                    FILTER (WHERE s.status = {SENT}) AS p50, \
                percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM s.completed_at - {COMMITTED})) \
                    FILTER (WHERE s.status = {SENT}) AS p99 \
           FROM booking_notification_sends s \
          WHERE s.id >= $2 AND s.completed_at >= $1 \
            AND s.status IN ({SENT}, {FAILED}, {UNKNOWN}, {SUPERSEDED}, {CAPPED}) \
          GROUP BY 1 ORDER BY 1"
    );
    // The first id claimed in time to settle from `from` on (a send settles
    // within its poller's timeout; the pollers' clocks may differ by
    // seconds), as a value the planner sees: an unnamed statement is
    // planned with it, so it reads the key's range, never the history.
    let claimed_since = from - Duration::from_secs(600);
    let ms = claimed_since.timestamp_millis().max(0) as u64;
    let mut first = [0u8; 16];
    first[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    let rows = client.query(SQL, &[&from, &Uuid::from_bytes(first)]).await?;
    Ok(rows
        .iter()
        .map(|r| Minute {
            at: r.get("at"),
            sent: r.get("sent"),
            failed: r.get("failed"),
            unknown: r.get("unknown"),
            superseded: r.get("superseded"),
            capped: r.get("capped"),
            latency_p50: r.get("p50"),
            latency_p99: r.get("p99"),
        })
        .collect())
}
