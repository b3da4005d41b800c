//! Retention: deletes finished rows past a configurable age, in bounded
//! batches so one run never holds long locks or bloats a transaction.
//!
//! Only rows that can no longer matter are deleted: DONE events,
//! `processed_events` of events that are DONE or gone, and SENT/FAILED sends
//! of such events. A send claim of an event that may still run (PENDING,
//! PROCESSING, or DEAD and replayable) is kept, because deleting it would
//! let a retry send that email a second time.

use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::config::{self, ConfigError};

#[derive(Debug, Clone)]
pub struct RetentionConfig {
    pub max_age: Duration,
    pub batch_size: i64,
    /// Batches per table per run (bounds one run's work).
    pub max_batches: u32,
    pub idempotency_key_ttl: Duration,
}

impl RetentionConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let days = config::parsed_or("RETENTION_DAYS", 7u64)?;
        let cfg = Self {
            max_age: Duration::from_secs(days * 86_400),
            batch_size: config::parsed_or("RETENTION_BATCH_SIZE", 1000i64)?,
            max_batches: config::parsed_or("RETENTION_MAX_BATCHES", 20u32)?,
            idempotency_key_ttl: Duration::from_secs(config::parsed_or("IDEMPOTENCY_KEY_TTL_HOURS", 24u64)? * 3600),
        };
        if cfg.batch_size < 1 {
            return Err(ConfigError("RETENTION_BATCH_SIZE must be at least 1".into()));
        }
        Ok(cfg)
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(7 * 86_400),
            batch_size: 1000,
            max_batches: 20,
            idempotency_key_ttl: Duration::from_secs(86_400),
        }
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RetentionReport {
    pub events: u64,
    pub processed_events: u64,
    pub sends: u64,
    pub idempotency_keys: u64,
}

const DELETE_DONE_EVENTS: &str = "DELETE FROM outbox_events WHERE id IN ( \
     SELECT id FROM outbox_events WHERE status = 'DONE' \
        AND completed_at < now() - make_interval(secs => $1) LIMIT $2)";

const DELETE_PROCESSED: &str = "DELETE FROM processed_events WHERE event_id IN ( \
     SELECT p.event_id FROM processed_events p \
      WHERE p.processed_at < now() - make_interval(secs => $1) \
        AND NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.id = p.event_id AND e.status <> 'DONE') \
      LIMIT $2)";

const DELETE_SENDS: &str = "DELETE FROM booking_notification_sends WHERE id IN ( \
     SELECT s.id FROM booking_notification_sends s \
      WHERE s.status IN ('SENT', 'FAILED') AND s.completed_at < now() - make_interval(secs => $1) \
        AND NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.id = s.outbox_event_id AND e.status <> 'DONE') \
      LIMIT $2)";

async fn delete_in_batches(
    client: &impl GenericClient,
    sql: &str,
    age: Duration,
    cfg: &RetentionConfig,
) -> Result<u64, tokio_postgres::Error> {
    let mut total = 0;
    for _ in 0..cfg.max_batches {
        let n = client.execute(sql, &[&age.as_secs_f64(), &cfg.batch_size]).await?;
        total += n;
        if n < cfg.batch_size as u64 {
            break;
        }
    }
    Ok(total)
}

pub async fn run(client: &impl GenericClient, cfg: &RetentionConfig) -> Result<RetentionReport, tokio_postgres::Error> {
    // Sends and processed rows first: their guard looks at the event row.
    let sends = delete_in_batches(client, DELETE_SENDS, cfg.max_age, cfg).await?;
    let processed_events = delete_in_batches(client, DELETE_PROCESSED, cfg.max_age, cfg).await?;
    let events = delete_in_batches(client, DELETE_DONE_EVENTS, cfg.max_age, cfg).await?;
    let idempotency_keys = delete_in_batches(
        client,
        crate::booking::idempotency::DELETE_EXPIRED,
        cfg.idempotency_key_ttl,
        cfg,
    )
    .await?;
    Ok(RetentionReport { events, processed_events, sends, idempotency_keys })
}
