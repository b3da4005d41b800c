//! The poller's canary: a message to SES's mailbox simulator when
//! ambiguous sends wait for SES's evidence and traffic alone does not move
//! it ([`evidence`]).

use super::poller::Poller;
use super::RelayError;
use crate::notify::mailer::{Mailer, SendOutcome};
use crate::notify::{evidence, sends};

impl<M: Mailer + 'static> Poller<M> {
    /// Sends a canary when ambiguous sends wait for SES's evidence and no
    /// event has come for a minute ([`evidence::canary_due`]): its events
    /// move the watermark, and show the stream alive, like any other
    /// message's. It takes a time from the
    /// fleet's schedule like any send. Returns what the provider answered
    /// (None: none was due, or this mailer sends none).
    pub async fn canary(&self) -> Result<Option<SendOutcome>, RelayError> {
        let client = self.pool.get().await?;
        let awaiting = sends::unknown::awaiting_evidence_any(&client).await?;
        if !evidence::canary_due(&client, awaiting, self.config().canary_every).await? {
            return Ok(None);
        }
        let fits = || self.send_fits();
        let Some(admitted) = self.pace.admit(1, &fits).await?.pop() else { return Ok(None) };
        if let Some(at) = admitted.at {
            tokio::time::sleep_until(at.into()).await;
        }
        let id = uuid::Uuid::now_v7();
        let Some(outcome) = self.mailer.canary(id).await.map(SendOutcome::masked) else { return Ok(None) };
        drop(admitted);
        let message_id = match &outcome {
            SendOutcome::Sent { message_id } => Some(message_id.as_str()),
            _ => None,
        };
        evidence::record_canary(&client, id, outcome.kind(), message_id).await?;
        tracing::info!(canary = %id, outcome = outcome.kind(), "canary sent to move SES's evidence watermark");
        Ok(Some(outcome))
    }
}
