//! SQL owned by `idempotency_keys`: the `Idempotency-Key` header of
//! `POST /bookings`.
//!
//! The key row is inserted as the first statement of the booking's own
//! transaction. A concurrent request with the same key blocks on the primary
//! key until the first transaction ends: if it committed, the second sees the
//! stored response; if it rolled back, the second proceeds as if first.

use std::time::Duration;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::BookingError;
use crate::db::{DbError, DbResult};

/// An `Idempotency-Key` and the hash of the request it came with.
#[derive(Debug, Clone)]
pub struct IdempotencyRequest {
    pub key: String,
    pub request_hash: Vec<u8>,
    /// A stored key older than this is forgotten: the request runs afresh.
    pub ttl: std::time::Duration,
}

/// The stored outcome of an earlier request with the same key.
#[derive(Debug, Clone)]
pub struct StoredResponse {
    pub request_hash: Vec<u8>,
    pub status: u16,
    pub body: serde_json::Value,
    pub booking_id: Option<Uuid>,
}

pub enum Begin {
    /// This transaction owns the key; complete it before commit.
    Fresh,
    /// An earlier request with this key committed.
    Replay(StoredResponse),
}

/// Takes the key for this transaction, or finds the earlier request's
/// stored response. Keys belong to the caller's [`Caller::key`](super::domain::Caller::key): a new holder of
/// an address shares none of the old holder's. A key older than its TTL counts as never used: it is
/// taken over (reset) as if fresh, so the TTL holds on read, not only once
/// retention has deleted the row.
pub async fn begin(tx: &impl GenericClient, caller: &str, idem: &IdempotencyRequest) -> Result<Begin, BookingError> {
    let (key, request_hash) = (&idem.key, &idem.request_hash);
    let inserted = tx
        .execute(
            &tx.prepare_cached(
                "INSERT INTO idempotency_keys (caller_key, idempotency_key, request_hash) VALUES ($1, $2, $3) \
                 ON CONFLICT (caller_key, idempotency_key) DO UPDATE \
                    SET request_hash = EXCLUDED.request_hash, response_status = NULL, response_body = NULL, \
                        booking_id = NULL, created_at = now() \
                  WHERE idempotency_keys.created_at < now() - make_interval(secs => $4)",
            )
            .await?,
            &[&caller, &key, &request_hash, &idem.ttl.as_secs_f64()],
        )
        .await?;
    if inserted == 1 {
        return Ok(Begin::Fresh);
    }
    let row = tx
        .query_one(
            &tx.prepare_cached(
                "SELECT request_hash, response_status, response_body, booking_id FROM idempotency_keys \
             WHERE caller_key = $1 AND idempotency_key = $2",
            )
            .await?,
            &[&caller, &key],
        )
        .await?;
    let status: Option<i16> = row.get("response_status");
    let body: Option<serde_json::Value> = row.get("response_body");
    match (status, body) {
        (Some(status), Some(body)) => Ok(Begin::Replay(StoredResponse {
            request_hash: row.get("request_hash"),
            status: status as u16,
            body,
            booking_id: row.get("booking_id"),
        })),
        // Unreachable while `complete` runs in the same transaction as
        // `begin`; refuse rather than guess if someone breaks that.
        _ => Err(DbError::Corrupt(format!("idempotency key {key:?} has no stored response")).into()),
    }
}

pub async fn complete(
    tx: &impl GenericClient,
    caller: &str,
    key: &str,
    status: u16,
    body: &(impl serde::Serialize + std::fmt::Debug + Sync),
    booking_id: Uuid,
) -> Result<(), BookingError> {
    tx.execute(
        &tx.prepare_cached(
            "UPDATE idempotency_keys SET response_status = $3, response_body = $4, booking_id = $5 \
         WHERE caller_key = $1 AND idempotency_key = $2",
        )
        .await?,
        &[&caller, &key, &(status as i16), &Json(body), &booking_id],
    )
    .await?;
    Ok(())
}

/// Retention: deletes up to `limit` keys older than `ttl`; returns how many.
pub async fn purge_expired(client: &impl GenericClient, ttl: Duration, limit: i64) -> DbResult<u64> {
    Ok(client
        .execute(
            "DELETE FROM idempotency_keys WHERE (caller_key, idempotency_key) IN ( \
                 SELECT caller_key, idempotency_key FROM idempotency_keys \
                  WHERE created_at < now() - make_interval(secs => $1) LIMIT $2)",
            &[&ttl.as_secs_f64(), &limit],
        )
        .await?)
}
