//! Outcomes written durably: again on a fresh connection when a write
//! fails, and a failed chunk's claims released unsent.

use deadpool_postgres::Pool;
use uuid::Uuid;

use super::delivery::RECORD_RETRIES;
use crate::db::DbError;
use crate::notify::sends::{self, Outcome};

/// Nothing of a chunk whose claim failed was sent: the claims the statement
/// may have committed before its answer was lost (the connection cut, the
/// server restarted), or that a later statement of step 2 left CLAIMED, are
/// released on a fresh connection ([`RECORD_RETRIES`]), so the batch's retry
/// sends them instead of finding them CLAIMED and marking them UNKNOWN. A
/// release deletes only CLAIMED rows with this call's own new ids.
pub async fn release_unsent(pool: &Pool, ids: &[Uuid], lease: Uuid, cause: &DbError) {
    let released: Vec<(Uuid, Outcome)> = ids.iter().map(|id| (*id, Outcome::Released)).collect();
    match record_durably(pool, None, &released, lease).await {
        Ok(()) => {
            tracing::warn!(error = %cause, count = ids.len(), "claiming a group failed; its claims were released unsent")
        }
        Err(e) => tracing::error!(error = %cause, release_error = %e, count = ids.len(),
            "claiming a group failed and its claims could not be released; a retry will mark them UNKNOWN"),
    }
}

/// Records outcomes, first on `first` when given; when that fails, again on
/// a fresh connection after each pause of [`RECORD_RETRIES`]. Recording is
/// idempotent: an outcome written twice is written once.
pub async fn record_durably(
    pool: &Pool,
    mut first: Option<&deadpool_postgres::Client>,
    outcomes: &[(Uuid, Outcome)],
    lease: Uuid,
) -> Result<(), DbError> {
    let mut pauses = RECORD_RETRIES.iter();
    loop {
        let attempt = match first.take() {
            Some(client) => sends::outcome::record(client, outcomes, lease).await,
            None => async { sends::outcome::record(&pool.get().await?, outcomes, lease).await }.await,
        };
        match (attempt, pauses.next()) {
            (Ok(()), _) => return Ok(()),
            (Err(e), Some(pause)) => {
                tracing::warn!(error = %e, count = outcomes.len(), "recording outcomes failed; again on a fresh connection");
                tokio::time::sleep(*pause).await;
            }
            (Err(e), None) => return Err(e),
        }
    }
}
