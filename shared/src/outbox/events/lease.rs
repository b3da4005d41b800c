//! `outbox_leases`: the lease a poller's run holds its events under, and
//! the fence every later write about those events goes through.
//!
//! A lease is a row with an end (`expires_at`), a few seconds ahead, that
//! its holder renews while it works ([`renew`]) and ends when its run ends
//! ([`end`]). Each event the run claims names the lease
//! (`outbox_events.lease_id`). Once a lease has ended unrenewed, the next
//! claim takes its events over ([`super::claim`]), each under the new
//! claimant's lease: that is the take-over's new token.
//!
//! The fence: a write of a holder about an event (its consumer's claims
//! and outcomes, DONE, a retry, a requeue, a dead letter)
//! changes a row only while the holder's lease holds it, checked in the
//! same statement: the event transitions check the event itself (its
//! `lease_id`, [`HELD`]), the consumer's hot writes (its claims and
//! outcomes, on its own tables) check once that the lease has
//! not ended ([`LIVE`]), which keeps every event it holds its own. A holder
//! that lost an event writes nothing about it and learns so from the 0
//! rows.
//!
//! Time: the database's clock alone decides when a lease has ended
//! (`expires_at < now()`). The holder keeps its own view on its monotonic
//! clock, from the moment it *sent* each renewal, so it believes in its
//! lease no longer than the database does, whatever the two clocks say.

use std::time::Duration;

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::sql::PROCESSING;
use crate::db::DbResult;

/// The fence of one event at a time (migration V36): of an array of event
/// ids and a lease, the events PROCESSING under that lease, as a
/// set-returning SQL function to call in the statement that writes:
/// `… AND EXISTS (SELECT 1 FROM outbox_events_held(ARRAY[s.outbox_event_id], $2))`.
pub const HELD: &str = "outbox_events_held";

/// The fence of the hot writes, once per statement (migration V36): the
/// lease if it has not ended, `… AND EXISTS (SELECT 1 FROM
/// outbox_lease_live($1))`. While a lease lives, every event its holder has
/// not settled itself is still its own: only an ended lease's events are
/// taken over or swept, and a renewal never revives an ended lease.
pub const LIVE: &str = "outbox_lease_live";

/// Takes a new lease for `holder`, ending `ttl` from now.
pub async fn take(client: &impl GenericClient, holder: &str, ttl: Duration) -> DbResult<Uuid> {
    let id = Uuid::now_v7();
    client
        .execute(
            &client
                .prepare_cached(
                    "INSERT INTO outbox_leases (id, holder, expires_at) \
                     VALUES ($1, $2, now() + make_interval(secs => $3))",
                )
                .await?,
            &[&id, &holder, &ttl.as_secs_f64()],
        )
        .await?;
    Ok(id)
}

/// Moves the lease's end to `ttl` from now, if it has not ended: false
/// when it has (its events may have been taken over already; the holder is
/// fenced and must stop) or is gone.
pub async fn renew(client: &impl GenericClient, lease: Uuid, ttl: Duration) -> DbResult<bool> {
    let sql = "UPDATE outbox_leases SET expires_at = now() + make_interval(secs => $2) \
               WHERE id = $1 AND expires_at >= now()";
    Ok(client.execute(&client.prepare_cached(sql).await?, &[&lease, &ttl.as_secs_f64()]).await? == 1)
}

/// Ends the lease now: deleted when nothing is held under it any more,
/// otherwise ended, so the next claim takes what it still holds over at
/// once (a batch left PROCESSING by a database that kept failing).
pub async fn end(client: &impl GenericClient, lease: Uuid) -> DbResult<()> {
    let sql = const_format::formatcp!(
        "WITH held AS (SELECT 1 FROM outbox_events WHERE lease_id = $1 AND status = {PROCESSING} LIMIT 1), \
              gone AS (DELETE FROM outbox_leases WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM held) RETURNING 1) \
         UPDATE outbox_leases SET expires_at = least(expires_at, now()) \
          WHERE id = $1 AND EXISTS (SELECT 1 FROM held)"
    );
    client.execute(&client.prepare_cached(sql).await?, &[&lease]).await?;
    Ok(())
}

/// Retention: deletes up to `limit` leases that ended more than `after`
/// ago and hold nothing (their runs died, or their events were taken over
/// or swept). Returns how many.
pub async fn purge_ended(client: &impl GenericClient, after: Duration, limit: i64) -> DbResult<u64> {
    let sql = const_format::formatcp!(
        "DELETE FROM outbox_leases WHERE id IN ( \
             SELECT l.id FROM outbox_leases l \
              WHERE l.expires_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS (SELECT 1 FROM outbox_events e \
                                 WHERE e.lease_id = l.id AND e.status = {PROCESSING}) \
              LIMIT $2)"
    );
    Ok(client.execute(sql, &[&after.as_secs_f64(), &limit]).await?)
}

/// A lease as the operator console shows it: who holds it, until when,
/// and how many events it holds now.
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct Held {
    pub id: Uuid,
    pub holder: String,
    pub taken_at: chrono::DateTime<chrono::Utc>,
    pub expires_at: chrono::DateTime<chrono::Utc>,
    /// It has ended: the next claim takes its events over.
    pub ended: bool,
    pub events: i64,
}

/// The leases that hold events now, or have not ended: newest first.
pub async fn held(client: &impl GenericClient) -> DbResult<Vec<Held>> {
    const SQL: &str = const_format::formatcp!(
        "SELECT l.id, l.holder, l.created_at, l.expires_at, l.expires_at < now() AS ended, \
                (SELECT count(*) FROM outbox_events e WHERE e.lease_id = l.id AND e.status = {PROCESSING}) AS events \
           FROM outbox_leases l \
          WHERE l.expires_at >= now() \
             OR l.id IN (SELECT lease_id FROM outbox_events WHERE status = {PROCESSING}) \
          ORDER BY l.created_at DESC LIMIT 50"
    );
    let rows = client.query(&client.prepare_cached(SQL).await?, &[]).await?;
    Ok(rows
        .iter()
        .map(|r| Held {
            id: r.get("id"),
            holder: r.get("holder"),
            taken_at: r.get("created_at"),
            expires_at: r.get("expires_at"),
            ended: r.get("ended"),
            events: r.get("events"),
        })
        .collect())
}
