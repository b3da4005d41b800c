//! Finishing an event: DONE together with its `processed_events` row, or
//! back to PENDING with backoff, or to DEAD (the dead letter).

use std::time::Duration;

use deadpool_postgres::{GenericClient, Transaction};
use uuid::Uuid;

/// The story's `tryInsert(eventId)`, inside the transaction that will also
/// mark the event DONE. Returns false when the event was already processed.
///
/// While this transaction is open, a second attempt on the same event blocks
/// here until it ends, so two live workers can never dispatch one event at
/// the same time, even if the sweeper handed it out twice.
pub async fn try_insert_processed(tx: &Transaction<'_>, event_id: Uuid) -> Result<bool, tokio_postgres::Error> {
    let n = tx
        .execute(
            &tx.prepare_cached("INSERT INTO processed_events (event_id, processed_at) VALUES ($1, now()) ON CONFLICT DO NOTHING").await?,
            &[&event_id],
        )
        .await?;
    Ok(n == 1)
}

/// Marks the event DONE; commits with the `processed_events` row.
pub async fn mark_done(tx: &Transaction<'_>, event_id: Uuid) -> Result<(), tokio_postgres::Error> {
    tx.execute(
        &tx.prepare_cached("UPDATE outbox_events SET status = 'DONE', completed_at = now(), locked_at = NULL, \
             locked_by = NULL, last_error = NULL, updated_at = now() WHERE id = $1").await?,
        &[&event_id],
    )
    .await
    .map(drop)
}

/// Where a failed event went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    Retrying,
    Dead,
    /// The event was no longer ours (swept and re-claimed); left alone.
    NotOwned,
}

/// A known failure: back to PENDING after `delay`, or DEAD once
/// `max_attempts` are used up. Only touches the row while this worker still
/// holds it.
pub async fn fail(
    client: &impl GenericClient,
    event_id: Uuid,
    worker: &str,
    delay: Duration,
    error: &str,
    max_attempts: i32,
) -> Result<Failed, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &client.prepare_cached("UPDATE outbox_events \
                SET status = CASE WHEN attempts >= $4 THEN 'DEAD' ELSE 'PENDING' END, \
                    next_attempt_at = now() + make_interval(secs => $3), \
                    last_error = CASE WHEN attempts >= $4 \
                                      THEN format('attempts exhausted (%s): %s', attempts, $5::text) \
                                      ELSE $5::text END, \
                    locked_at = NULL, locked_by = NULL, updated_at = now() \
              WHERE id = $1 AND status = 'PROCESSING' AND locked_by = $2 \
             RETURNING status").await?,
            &[&event_id, &worker, &delay.as_secs_f64(), &max_attempts, &error],
        )
        .await?;
    Ok(match row.as_ref().map(|r| r.get::<_, &str>(0)) {
        Some("DEAD") => Failed::Dead,
        Some(_) => Failed::Retrying,
        None => Failed::NotOwned,
    })
}

/// Back to PENDING without using up an attempt (the provider paused sending;
/// the event itself did nothing wrong).
pub async fn requeue(
    client: &impl GenericClient,
    event_id: Uuid,
    worker: &str,
    delay: Duration,
    reason: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            &client.prepare_cached("UPDATE outbox_events SET status = 'PENDING', attempts = greatest(attempts - 1, 0), \
                 next_attempt_at = now() + make_interval(secs => $3), last_error = $4, \
                 locked_at = NULL, locked_by = NULL, updated_at = now() \
             WHERE id = $1 AND status = 'PROCESSING' AND locked_by = $2").await?,
            &[&event_id, &worker, &delay.as_secs_f64(), &reason],
        )
        .await
        .map(drop)
}

/// Straight to DEAD (unreadable payload, misconfigured mailer): retrying
/// cannot help; an operator replays it once the cause is fixed.
pub async fn dead_letter(
    client: &impl GenericClient,
    event_id: Uuid,
    worker: &str,
    reason: &str,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            &client.prepare_cached("UPDATE outbox_events SET status = 'DEAD', last_error = $3, locked_at = NULL, \
                 locked_by = NULL, updated_at = now() \
             WHERE id = $1 AND status = 'PROCESSING' AND locked_by = $2").await?,
            &[&event_id, &worker, &reason],
        )
        .await
        .map(drop)
}
