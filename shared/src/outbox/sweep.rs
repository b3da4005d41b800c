//! The stuck-row sweep: PROCESSING rows whose worker died go back to
//! PENDING, or to DEAD when their attempts are used up, so the sweep and the
//! poller never hand a doomed event back and forth.

use std::time::Duration;

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use crate::config::{self, ConfigError};

#[derive(Debug, Clone)]
pub struct SweeperConfig {
    /// A PROCESSING row older than this is presumed abandoned.
    pub stuck_after: Duration,
    /// The poller's maximum run time (its Lambda timeout).
    pub poller_timeout: Duration,
    pub max_attempts: i32,
    /// Rows per sweep statement.
    pub batch_size: i64,
    pub retention: super::retention::RetentionConfig,
}

impl SweeperConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(
            Duration::from_secs(config::parsed_or("SWEEP_STUCK_AFTER_SECS", 300u64)?),
            Duration::from_secs(config::parsed_or("POLLER_TIMEOUT_SECS", 60u64)?),
            config::parsed_or("OUTBOX_MAX_ATTEMPTS", super::poller::DEFAULT_MAX_ATTEMPTS)?,
            config::parsed_or("SWEEP_BATCH_SIZE", 500i64)?,
            super::retention::RetentionConfig::from_env()?,
        )
    }

    pub fn new(
        stuck_after: Duration,
        poller_timeout: Duration,
        max_attempts: i32,
        batch_size: i64,
        retention: super::retention::RetentionConfig,
    ) -> Result<Self, ConfigError> {
        // A live poller must never be swept: its row would be handed to a
        // second worker while the first is still sending.
        if stuck_after <= poller_timeout {
            return Err(ConfigError(format!(
                "the sweeper timeout ({}s) must exceed the poller timeout ({}s); raise SWEEP_STUCK_AFTER_SECS \
                 or lower POLLER_TIMEOUT_SECS",
                stuck_after.as_secs(),
                poller_timeout.as_secs()
            )));
        }
        if max_attempts < 1 {
            return Err(ConfigError("OUTBOX_MAX_ATTEMPTS must be at least 1".into()));
        }
        if batch_size < 1 {
            return Err(ConfigError("SWEEP_BATCH_SIZE must be at least 1".into()));
        }
        Ok(Self { stuck_after, poller_timeout, max_attempts, batch_size, retention })
    }
}

/// One stuck row and what the sweep does (or did) with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Swept {
    pub id: Uuid,
    pub attempts: i32,
    pub locked_by: Option<String>,
    /// `PENDING` (reset) or `DEAD` (attempts exhausted).
    pub to: String,
}

fn swept(r: &tokio_postgres::Row) -> Swept {
    Swept { id: r.get(0), attempts: r.get(1), locked_by: r.get(2), to: r.get(3) }
}

/// Resets (or fails) up to `batch_size` stuck rows. Rows a live transaction
/// is touching are skipped, not waited for.
pub async fn sweep(client: &impl GenericClient, config: &SweeperConfig) -> Result<Vec<Swept>, tokio_postgres::Error> {
    let rows = client
        .query(
            "WITH stuck AS ( \
                 SELECT id, locked_by AS previous_worker, locked_at AS previous_lock FROM outbox_events \
                 WHERE status = 'PROCESSING' AND locked_at < now() - make_interval(secs => $1) \
                 ORDER BY locked_at LIMIT $3 FOR UPDATE SKIP LOCKED) \
             UPDATE outbox_events o \
                SET status = CASE WHEN o.attempts >= $2 THEN 'DEAD' ELSE 'PENDING' END, \
                    last_error = CASE WHEN o.attempts >= $2 \
                        THEN format('attempts exhausted (%s): stuck in PROCESSING since %s (worker %s)', \
                                    o.attempts, stuck.previous_lock, stuck.previous_worker) \
                        ELSE format('swept: stuck in PROCESSING since %s (worker %s)', \
                                    stuck.previous_lock, stuck.previous_worker) END, \
                    next_attempt_at = now(), locked_at = NULL, locked_by = NULL, updated_at = now() \
               FROM stuck WHERE o.id = stuck.id \
             RETURNING o.id, o.attempts, stuck.previous_worker, o.status",
            &[&config.stuck_after.as_secs_f64(), &config.max_attempts, &config.batch_size],
        )
        .await?;
    Ok(rows.iter().map(swept).collect())
}

/// What [`sweep`] would do now, without doing it.
pub async fn sweep_dry_run(
    client: &impl GenericClient,
    config: &SweeperConfig,
) -> Result<Vec<Swept>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT id, attempts, locked_by, CASE WHEN attempts >= $2 THEN 'DEAD' ELSE 'PENDING' END \
               FROM outbox_events \
              WHERE status = 'PROCESSING' AND locked_at < now() - make_interval(secs => $1) \
              ORDER BY locked_at LIMIT $3",
            &[&config.stuck_after.as_secs_f64(), &config.max_attempts, &config.batch_size],
        )
        .await?;
    Ok(rows.iter().map(swept).collect())
}

/// What one sweeper run did; the sweeper Lambda returns it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct SweepRun {
    pub reset: u32,
    pub dead_lettered: u32,
    pub swept: Vec<Swept>,
    pub retention: super::retention::RetentionReport,
    pub oldest_due_pending_age_secs: f64,
}

/// One scheduled run: sweep stuck rows (batch after batch, bounded), then
/// apply retention.
pub async fn run(pool: &deadpool_postgres::Pool, config: &SweeperConfig) -> Result<SweepRun, SweepError> {
    let client = pool.get().await?;
    let mut out = SweepRun::default();
    for _ in 0..config.retention.max_batches.max(1) {
        let batch = sweep(&client, config).await?;
        let n = batch.len() as i64;
        for s in &batch {
            if s.to == "DEAD" {
                out.dead_lettered += 1;
                tracing::error!(event_id = %s.id, attempts = s.attempts, "stuck event out of attempts; dead-lettered");
            } else {
                out.reset += 1;
                tracing::warn!(event_id = %s.id, attempts = s.attempts, "stuck event reset to PENDING");
            }
        }
        out.swept.extend(batch);
        if n < config.batch_size {
            break;
        }
    }
    out.retention = super::retention::run(&client, &config.retention).await?;
    out.oldest_due_pending_age_secs = super::status::oldest_due_pending_age(&client).await?;
    crate::telemetry::emf::emit(
        "outbox-sweeper",
        &[
            ("Swept", out.reset as f64, crate::telemetry::emf::Unit::Count),
            ("DeadLettered", out.dead_lettered as f64, crate::telemetry::emf::Unit::Count),
            ("OldestPendingAgeSeconds", out.oldest_due_pending_age_secs, crate::telemetry::emf::Unit::Seconds),
        ],
    );
    Ok(out)
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("database unavailable: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("database error: {0}")]
    Db(#[from] tokio_postgres::Error),
}
