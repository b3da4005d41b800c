//! The poller's canary: a message to SES's mailbox simulator when
//! ambiguous sends wait for SES's evidence and traffic alone does not move
//! it ([`watermark`]).

use std::time::Duration;

use deadpool_postgres::Pool;

use crate::fault::RunError;
use crate::notify::evidence::watermark;
use crate::notify::mailer::{Mailer, SendOutcome};
use crate::notify::pacing::pace::Pacer;
use crate::notify::sends;

/// Sends a canary when ambiguous sends wait for SES's evidence and no
/// event has come for `every` ([`watermark::canary_due`]): its events move
/// the watermark, and show the stream alive, like any other message's. It
/// takes a time from the fleet's schedule like any send, and starts only
/// if it `fits` before the run's deadline. Returns what the provider
/// answered (None: none was due, or this mailer sends none).
pub async fn send(
    pool: &Pool,
    mailer: &dyn Mailer,
    pace: &Pacer,
    every: Duration,
    fits: &(dyn Fn() -> bool + Sync),
) -> Result<Option<SendOutcome>, RunError> {
    let client = pool.get().await?;
    let awaiting = sends::unknown::awaiting_evidence_any(&client).await?;
    if !watermark::canary_due(&client, awaiting, every).await? {
        return Ok(None);
    }
    let Some(admitted) = pace.admit(1, fits).await?.pop() else { return Ok(None) };
    if let Some(at) = admitted.at {
        tokio::time::sleep_until(at.into()).await;
    }
    let id = uuid::Uuid::now_v7();
    let Some(outcome) = mailer.canary(id).await.map(SendOutcome::masked) else { return Ok(None) };
    drop(admitted);
    let message_id = match &outcome {
        SendOutcome::Sent { message_id } => Some(message_id.as_str()),
        _ => None,
    };
    watermark::record_canary(&client, id, outcome.kind(), message_id).await?;
    tracing::info!(canary = %id, outcome = outcome.kind(), "canary sent to move SES's evidence watermark");
    Ok(Some(outcome))
}
