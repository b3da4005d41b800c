//! What others read of the ledger: who may have been told of each booking,
//! one event's sends, the counts by status, and retention.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::send_sql::{CAPPED, CLAIMED, FAILED, SENT, SUPERSEDED, UNKNOWN};
use super::status::SendStatus;
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
