//! Schema migrations from `migrations/`, applied under an advisory lock.

use deadpool_postgres::Pool;

use super::role_limits::{self, RoleLimits};
use super::DbError;

/// `pg_advisory_lock` key held while migrations run ("outbox" in ASCII), so two
/// deploys or two cold starts cannot apply the same migration at once.
const MIGRATION_LOCK_KEY: i64 = 0x6f7574626f78;

mod embedded {
    refinery::embed_migrations!("../migrations");
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// Connecting, or taking or releasing the migration lock.
    #[error("cannot take the migration lock: {0}")]
    Db(#[from] DbError),
    #[error("migration failed: {0}")]
    Migration(#[from] refinery::Error),
    /// Setting the functions' role's timeouts after the migrations.
    #[error("cannot set the timeouts of booking_app's roles (the migration role needs CREATEROLE): {0}")]
    RoleLimits(DbError),
}

/// Applies pending migrations from `migrations/` under an advisory lock and
/// returns the names of those applied now. History is kept by refinery in
/// `refinery_schema_history`. The functions' role gets the default
/// [`RoleLimits`].
pub async fn migrate(pool: &Pool) -> Result<Vec<String>, MigrateError> {
    migrate_with(pool, refinery::Target::Latest, &RoleLimits::default()).await
}

/// [`migrate`], up to `target` only (upgrade tests start from an older
/// schema).
pub async fn migrate_to(pool: &Pool, target: refinery::Target) -> Result<Vec<String>, MigrateError> {
    migrate_with(pool, target, &RoleLimits::default()).await
}

/// [`migrate_to`], then the functions' role's `limits` set (every run: a
/// login role added since gets them too).
pub async fn migrate_with(
    pool: &Pool,
    target: refinery::Target,
    limits: &RoleLimits,
) -> Result<Vec<String>, MigrateError> {
    let mut client = pool.get().await.map_err(DbError::from)?;
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY]).await.map_err(DbError::from)?;
    let report =
        embedded::migrations::runner().set_abort_divergent(true).set_target(target).run_async(&mut **client).await;
    let limited = match &report {
        Ok(_) => role_limits::apply(&client, limits).await.map(|_| ()),
        Err(_) => Ok(()),
    };
    // Unlock even when the migration failed; the session lock would otherwise
    // live as long as the pooled connection.
    client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY]).await.map_err(DbError::from)?;
    let report = report?;
    limited.map_err(MigrateError::RoleLimits)?;
    Ok(report.applied_migrations().iter().map(|m| m.to_string()).collect())
}
