//! Retention: deletes finished rows past a configurable age, table by table,
//! in bounded batches so one run never holds long locks or bloats a
//! transaction. Each table's own module says which of its rows may go; the
//! order matters: finished events first, then the sends and
//! `processed_events` rows that only go once their event is gone or done,
//! then SES's feedback about sends that are gone, old seconds of SES's
//! evidence watermark and canaries, and leases that ended holding nothing.

use std::future::Future;

use deadpool_postgres::GenericClient;

use super::config::RetentionConfig;
use super::summary::RetentionReport;
use crate::booking::{idempotency, limits};
use crate::db::DbResult;
use crate::notify::evidence::{feedback, watermark};
use crate::notify::pacing::recipient_limit;
use crate::notify::sends;
use crate::outbox::events::lease;
use crate::outbox::{events, processed};

/// An ended lease that holds nothing is kept this long (operators see
/// which runs died), then deleted.
pub const ENDED_LEASES_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `purge(batch_size)` until it deletes less than a batch, at most
/// `max_batches` times; returns the total.
async fn in_batches<F, Fut>(cfg: &RetentionConfig, mut purge: F) -> DbResult<u64>
where
    F: FnMut(i64) -> Fut,
    Fut: Future<Output = DbResult<u64>>,
{
    let mut total = 0;
    for _ in 0..cfg.max_batches {
        let n = purge(cfg.batch_size).await?;
        total += n;
        if n < cfg.batch_size as u64 {
            break;
        }
    }
    Ok(total)
}

pub async fn run(client: &impl GenericClient, cfg: &RetentionConfig) -> DbResult<RetentionReport> {
    let age = cfg.max_age;
    let events = in_batches(cfg, |n| events::purge_done(client, age, n)).await?;
    let sends = in_batches(cfg, |n| sends::purge(client, age, n)).await?;
    let feedback = in_batches(cfg, |n| feedback::purge(client, age, n)).await?;
    let evidence = in_batches(cfg, |n| watermark::purge(client, age, n)).await?;
    let processed_events = in_batches(cfg, |n| processed::purge(client, age, n)).await?;
    let ttl = cfg.idempotency_key_ttl;
    let idempotency_keys = in_batches(cfg, |n| idempotency::purge_expired(client, ttl, n)).await?;
    let usage_counters = in_batches(cfg, |n| limits::purge_old(client, n)).await?
        + in_batches(cfg, |n| recipient_limit::purge_old(client, n)).await?;
    let leases = in_batches(cfg, |n| lease::purge_ended(client, ENDED_LEASES_KEPT, n)).await?;
    Ok(RetentionReport {
        events,
        processed_events,
        sends,
        feedback,
        evidence,
        idempotency_keys,
        usage_counters,
        leases,
    })
}
