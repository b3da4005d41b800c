//! The sweeper's scheduled run, as three named steps: sweep rows stuck in
//! PROCESSING (reset, or dead-letter when out of attempts), apply retention,
//! then report metrics.

use deadpool_postgres::{GenericClient, Pool};

use super::config::SweeperConfig;
use super::retention;
use super::summary::SweepRun;
use crate::db::DbResult;
use crate::outbox::events::transitions::{self, Reset};
use crate::outbox::events;
use crate::telemetry::emf;

/// One scheduled run.
pub async fn run(pool: &Pool, config: &SweeperConfig) -> DbResult<SweepRun> {
    let client = pool.get().await?;
    let mut out = SweepRun::default();
    sweep_stuck(&client, config, &mut out).await?;
    out.retention = retention::run(&client, &config.retention).await?;
    report(&client, &mut out).await?;
    Ok(out)
}

/// Step 1: batch after batch of stuck rows, bounded by the retention batch
/// count so one run stays short.
async fn sweep_stuck(client: &impl GenericClient, config: &SweeperConfig, out: &mut SweepRun) -> DbResult<()> {
    for _ in 0..config.retention.max_batches.max(1) {
        let batch = sweep_once(client, config, false).await?;
        batch.iter().for_each(|r| out.count(r));
        let full = batch.len() as i64 >= config.batch_size;
        out.swept.extend(batch);
        if !full {
            break;
        }
    }
    Ok(())
}

/// Step 3: how far behind the outbox is, as EMF metrics.
async fn report(client: &impl GenericClient, out: &mut SweepRun) -> DbResult<()> {
    out.oldest_due_pending_age_secs = events::oldest_due_age(client).await?.unwrap_or(0.0);
    emf::emit("outbox-sweeper", &out.metrics());
    Ok(())
}

/// One batch of the sweep (`outboxctl sweep`), or what it would do now
/// (`--dry-run`).
pub async fn sweep_once(client: &impl GenericClient, config: &SweeperConfig, dry_run: bool) -> DbResult<Vec<Reset>> {
    transitions::reset_stuck(client, &config.stuck(), dry_run).await
}
