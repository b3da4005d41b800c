//! `processed_events`, layer 2 of the design story: "have we already
//! processed this event?" Every statement on the table lives here.

use std::time::Duration;

use deadpool_postgres::{GenericClient, Transaction};
use uuid::Uuid;

use crate::db::DbResult;

/// The story's `tryInsert(eventId)`, inside the transaction that will also
/// mark the event DONE. Returns false when the event was already processed.
///
/// While this transaction is open, a second attempt on the same event blocks
/// here until it ends, so two live workers can never dispatch one event at
/// the same time, even if the sweeper handed it out twice.
pub async fn try_insert(tx: &Transaction<'_>, event_id: Uuid) -> DbResult<bool> {
    Ok(!try_insert_many(tx, &[event_id]).await?.is_empty())
}

/// [`try_insert`] for many events, in one statement (in id order, so two
/// attempts lock them in the same order). Returns the ids inserted now;
/// the others were processed already.
pub async fn try_insert_many(tx: &Transaction<'_>, event_ids: &[Uuid]) -> DbResult<Vec<Uuid>> {
    let rows = tx
        .query(
            &tx.prepare_cached(
                "INSERT INTO processed_events (event_id, processed_at) \
                 SELECT id, now() FROM unnest($1::uuid[]) AS t(id) ORDER BY id \
                 ON CONFLICT DO NOTHING RETURNING event_id",
            )
            .await?,
            &[&event_ids],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Undoes [`try_insert_many`] for the events that will run again, inside
/// the same transaction (nothing of theirs is ever visible to others).
pub async fn undo_many(tx: &Transaction<'_>, event_ids: &[Uuid]) -> DbResult<()> {
    if !event_ids.is_empty() {
        tx.execute("DELETE FROM processed_events WHERE event_id = ANY($1)", &[&event_ids]).await?;
    }
    Ok(())
}

/// Lets a reopened event through again (an operator's decision to run it again).
pub async fn forget(tx: &impl GenericClient, event_id: Uuid) -> DbResult<()> {
    tx.execute("DELETE FROM processed_events WHERE event_id = $1", &[&event_id]).await?;
    Ok(())
}

pub async fn count(client: &impl GenericClient) -> DbResult<i64> {
    Ok(client.query_one("SELECT count(*) FROM processed_events", &[]).await?.get(0))
}

/// Retention: deletes up to `limit` rows older than `max_age` whose event is
/// DONE or gone (a row of an event that may still run is kept).
pub async fn purge(client: &impl GenericClient, max_age: Duration, limit: i64) -> DbResult<u64> {
    // `outbox_event_unfinished` (V47): the events module's answer.
    const SQL: &str = "DELETE FROM processed_events WHERE event_id IN ( \
             SELECT p.event_id FROM processed_events p \
              WHERE p.processed_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS (SELECT 1 FROM outbox_event_unfinished(p.event_id)) LIMIT $2)";
    Ok(client.execute(SQL, &[&max_age.as_secs_f64(), &limit]).await?)
}
