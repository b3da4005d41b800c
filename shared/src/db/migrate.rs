//! Schema migrations from `migrations/`, applied under an advisory lock.
//!
//! Migrations only ever expand the schema in a way the code of the release
//! before still runs on (a column added, a grant narrowed to what that code
//! writes, an index replaced), and contract it only a release after the
//! code stopped using what goes. So a database one release ahead of the
//! code is a database this code runs on: a rollback of the stack, or a
//! redeploy of an older commit, finds every migration it knows applied and
//! newer ones besides, applies nothing, and succeeds ([`ahead_of_this_code`]);
//! it never wedges the stack. A database that lacks one of this code's
//! migrations while holding newer ones, or whose copy of one differs, is
//! still refused.

use deadpool_postgres::Pool;

use super::error::DbError;
use super::role_limits::{self, RoleLimits};

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
    /// The database holds migrations newer than this code, but not every
    /// migration this code knows: not a schema this code can run on.
    #[error("the database has migrations newer than this code ({newer}) but lacks V{missing}, which this code needs")]
    Gap { newer: String, missing: i32 },
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
    let ran = run_locked(&mut client, target, limits).await;
    // Unlock even when the migration failed; the session lock would otherwise
    // live as long as the pooled connection.
    client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY]).await.map_err(DbError::from)?;
    ran
}

/// The migrations run under the lock: the pending ones applied, or, on a
/// database ahead of this code, none (each of this code's still checked
/// against what was applied).
async fn run_locked(
    client: &mut deadpool_postgres::Object,
    target: refinery::Target,
    limits: &RoleLimits,
) -> Result<Vec<String>, MigrateError> {
    let newer = ahead_of_this_code(client).await?;
    let runner = embedded::migrations::runner().set_abort_divergent(true).set_target(target);
    let runner = if newer.is_empty() {
        runner
    } else {
        let applied = applied_versions(client).await?;
        if let Some(missing) = runner.get_migrations().iter().map(|m| m.version()).find(|v| !applied.contains(v)) {
            return Err(MigrateError::Gap { newer: newer.join(", "), missing });
        }
        tracing::warn!(newer = %newer.join(", "), "the database is ahead of this code (a rollback, or an older deploy): nothing to apply");
        // The newer ones are not this code's to know; its own are all
        // applied, and still checked against their checksums.
        runner.set_abort_missing(false)
    };
    let report = runner.run_async(&mut ***client).await?;
    role_limits::apply(&*client, limits).await.map_err(MigrateError::RoleLimits)?;
    Ok(report.applied_migrations().iter().map(|m| m.to_string()).collect())
}

/// The versions applied to the database (none before the first migration).
async fn applied_versions(client: &tokio_postgres::Client) -> Result<Vec<i32>, MigrateError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('refinery_schema_history') IS NOT NULL", &[])
        .await
        .map_err(DbError::from)?
        .get(0);
    if !exists {
        return Ok(Vec::new());
    }
    let rows = client.query("SELECT version FROM refinery_schema_history", &[]).await.map_err(DbError::from)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The migrations applied to the database that this code does not know,
/// newer than all it does (`V31__name`): the database is ahead of this
/// code, as after a rollback of the stack. Empty when it is not.
pub async fn ahead_of_this_code(client: &tokio_postgres::Client) -> Result<Vec<String>, MigrateError> {
    let newest = embedded::migrations::runner().get_migrations().iter().map(|m| m.version()).max().unwrap_or(0);
    if !applied_versions(client).await?.iter().any(|v| *v > newest) {
        return Ok(Vec::new());
    }
    let rows = client
        .query("SELECT version, name FROM refinery_schema_history WHERE version > $1 ORDER BY version", &[&newest])
        .await
        .map_err(DbError::from)?;
    Ok(rows.iter().map(|r| format!("V{}__{}", r.get::<_, i32>(0), r.get::<_, String>(1))).collect())
}
