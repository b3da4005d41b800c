//! The Postgres connection pool and the schema migrations.
//!
//! A Lambda container builds its pool once, at cold start, and reuses it for
//! every invocation: connections survive between invocations while the
//! container is warm.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::config::{self, ConfigError};

pub use deadpool_postgres::{Object as Client, Pool as DbPool, PoolError};

/// `pg_advisory_lock` key held while migrations run ("outbox" in ASCII), so two
/// deploys or two cold starts cannot apply the same migration at once.
const MIGRATION_LOCK_KEY: i64 = 0x6f7574626f78;

mod embedded {
    refinery::embed_migrations!("../migrations");
}

#[derive(Debug, Clone)]
pub struct DbConfig {
    pub pg: tokio_postgres::Config,
    pub pool_size: usize,
}

impl DbConfig {
    /// `DATABASE_URL` (a libpq URL or key=value string), `DATABASE_POOL_SIZE`
    /// (default 4) and `DATABASE_CONNECT_TIMEOUT_SECS` (default 5).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with_pool_default(4)
    }

    /// As [`DbConfig::from_env`], with another default pool size (the
    /// poller needs more connections than the API).
    pub fn from_env_with_pool_default(default_pool_size: usize) -> Result<Self, ConfigError> {
        let url = config::required(
            "DATABASE_URL",
            "set it to postgres://user:password@host:5432/dbname",
        )?;
        let pool_size = config::parsed_or("DATABASE_POOL_SIZE", default_pool_size)?;
        let connect_timeout = config::parsed_or("DATABASE_CONNECT_TIMEOUT_SECS", 5u64)?;
        Self::from_url(&url, pool_size, Duration::from_secs(connect_timeout))
    }

    pub fn from_url(url: &str, pool_size: usize, connect_timeout: Duration) -> Result<Self, ConfigError> {
        let mut pg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| ConfigError(format!("DATABASE_URL cannot be parsed: {e}")))?;
        if pg.get_hosts().is_empty() {
            return Err(ConfigError("DATABASE_URL names no host".into()));
        }
        if pool_size == 0 {
            return Err(ConfigError("DATABASE_POOL_SIZE must be at least 1".into()));
        }
        pg.connect_timeout(connect_timeout);
        if pg.get_application_name().is_none() {
            pg.application_name("booking-outbox");
        }
        Ok(Self { pg, pool_size })
    }

    /// Builds the pool. No connection is opened until the first use.
    pub fn build_pool(&self) -> Result<Pool, ConfigError> {
        let manager = Manager::from_config(
            self.pg.clone(),
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(self.pg.get_connect_timeout().copied())
            .build()
            .map_err(|e| ConfigError(format!("cannot build the database pool: {e}")))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("cannot connect to the database: {0}")]
    Connect(#[from] PoolError),
    #[error("cannot take the migration lock: {0}")]
    Lock(#[from] tokio_postgres::Error),
    #[error("migration failed: {0}")]
    Migration(#[from] refinery::Error),
}

/// Applies pending migrations from `migrations/` under an advisory lock and
/// returns the names of those applied now. History is kept by refinery in
/// `refinery_schema_history`.
pub async fn migrate(pool: &Pool) -> Result<Vec<String>, MigrateError> {
    let mut client = pool.get().await?;
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY]).await?;
    let report = embedded::migrations::runner()
        .set_abort_divergent(true)
        .run_async(&mut **client)
        .await;
    // Unlock even when the migration failed; the session lock would otherwise
    // live as long as the pooled connection.
    client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY]).await?;
    let report = report?;
    Ok(report.applied_migrations().iter().map(|m| m.to_string()).collect())
}
