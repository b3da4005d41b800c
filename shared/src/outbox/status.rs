//! How far behind is the outbox? Read-only queries for `outboxctl status`
//! and the oldest-pending-age metric.

use std::collections::BTreeMap;
use std::time::Duration;

use deadpool_postgres::GenericClient;
use serde::Serialize;

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct OutboxStatus {
    /// Events by status (PENDING, PROCESSING, DONE, DEAD), zeros included.
    pub events: BTreeMap<String, i64>,
    /// Age of the oldest PENDING event that is due now, in seconds.
    pub oldest_due_pending_age_secs: Option<f64>,
    /// PROCESSING rows older than the sweep timeout (their worker died).
    pub processing_past_sweep_timeout: i64,
    pub dead: i64,
    /// Sends by status (CLAIMED, SENT, FAILED, UNKNOWN), zeros included.
    pub sends: BTreeMap<String, i64>,
}

/// Age in seconds of the oldest due PENDING event (0 when none).
pub async fn oldest_due_pending_age(client: &impl GenericClient) -> Result<f64, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 \
               FROM outbox_events WHERE status = 'PENDING' AND next_attempt_at <= now()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

pub async fn fetch(client: &impl GenericClient, sweep_timeout: Duration) -> Result<OutboxStatus, tokio_postgres::Error> {
    let mut status = OutboxStatus::default();
    for s in ["PENDING", "PROCESSING", "DONE", "DEAD"] {
        status.events.insert(s.into(), 0);
    }
    for row in client.query("SELECT status, count(*) FROM outbox_events GROUP BY status", &[]).await? {
        status.events.insert(row.get(0), row.get(1));
    }
    status.dead = status.events["DEAD"];
    let row = client
        .query_one(
            "SELECT extract(epoch FROM now() - min(created_at))::float8 \
               FROM outbox_events WHERE status = 'PENDING' AND next_attempt_at <= now()",
            &[],
        )
        .await?;
    status.oldest_due_pending_age_secs = row.get(0);
    status.processing_past_sweep_timeout = client
        .query_one(
            "SELECT count(*) FROM outbox_events \
              WHERE status = 'PROCESSING' AND locked_at < now() - make_interval(secs => $1)",
            &[&sweep_timeout.as_secs_f64()],
        )
        .await?
        .get(0);
    for s in ["CLAIMED", "SENT", "FAILED", "UNKNOWN"] {
        status.sends.insert(s.into(), 0);
    }
    for row in client.query("SELECT status, count(*) FROM booking_notification_sends GROUP BY status", &[]).await? {
        status.sends.insert(row.get(0), row.get(1));
    }
    Ok(status)
}
