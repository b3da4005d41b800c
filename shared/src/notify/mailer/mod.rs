//! The mailer port. The poller only needs to know *what kind* of outcome a
//! send had, because each kind is handled differently (see
//! [`SendOutcome`]); adapters classify their own errors.

pub mod recording;
#[cfg(feature = "ses")]
pub mod ses;
#[cfg(feature = "smtp")]
pub mod smtp;
pub mod tags;

use crate::config::settings as S;
use crate::config::ConfigError;
use crate::notify::notification::Notification;
use crate::notify::sends::SentVia;

/// Which provider the poller sends through (`MAILER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// SES v2 (`SES_*`), with its feedback loop (ses-events).
    Ses,
    /// Any SMTP server (`SMTP_*`); no delivery feedback.
    Smtp,
}

impl Provider {
    pub fn from_env() -> Result<Self, ConfigError> {
        let raw: String = S::MAILER.parsed()?;
        match raw.to_ascii_lowercase().as_str() {
            "ses" => Ok(Provider::Ses),
            "smtp" => Ok(Provider::Smtp),
            _ => Err(ConfigError::new(
                S::MAILER.name,
                format!("({raw:?}) names no mail provider"),
                "set it to ses (SES_* settings) or smtp (SMTP_URL, SMTP_FROM_ADDRESS, ...)",
            )),
        }
    }
}

/// What a send attempt tells the poller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Accepted by the provider.
    Sent { message_id: String },
    /// Definitely not sent (refused before acceptance): release the claim
    /// and retry the event later.
    NotSent { reason: String },
    /// Refused for the account's send rate (SES's Throttling /
    /// TooManyRequests): nothing was sent. Release the claim, slow the
    /// fleet down, and retry soon without using up an attempt.
    Throttled { reason: String },
    /// The provider paused sending for the account: release the claim, stop
    /// sending in this run, and retry without using up an attempt.
    Paused { reason: String },
    /// Permanently refused for this recipient (e.g. invalid address): mark
    /// the send FAILED; it is never retried.
    Rejected { reason: String },
    /// Our configuration is wrong (e.g. unverified sender): dead-letter the
    /// event with this reason; it can be replayed once fixed.
    Misconfigured { reason: String },
    /// The provider may or may not have accepted it (timeout, connection
    /// lost after the request was written, unexpected response): keep the
    /// claim and never re-send automatically (at-most-once per recipient).
    Unknown { reason: String },
}

/// SES's words when the account's 24-hour quota is spent, through the API
/// (a throttling error) and the SMTP interface (454)
/// (<https://docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas-errors.html>).
pub const DAILY_QUOTA_SPENT: &str = "Daily message quota exceeded";

impl SendOutcome {
    /// A refusal for the account's spent daily quota: no send can go until
    /// the 24-hour window moves, so sending pauses (each run tries one send,
    /// after `OUTBOX_PAUSE_DELAY_SECS`; SES advises waiting up to 10 minutes)
    /// instead of a throttle's quick retry, which would hammer SES all day.
    pub fn daily_quota_spent(reason: String) -> Self {
        SendOutcome::Paused { reason: format!("{reason} (the account's 24-hour sending quota is spent)") }
    }

    /// The same outcome with every address in its reason masked: provider
    /// errors can quote the recipient, and reasons are logged and stored.
    pub fn masked(self) -> Self {
        use crate::telemetry::mask_emails_in as m;
        match self {
            SendOutcome::Sent { message_id } => SendOutcome::Sent { message_id },
            SendOutcome::NotSent { reason } => SendOutcome::NotSent { reason: m(&reason) },
            SendOutcome::Throttled { reason } => SendOutcome::Throttled { reason: m(&reason) },
            SendOutcome::Paused { reason } => SendOutcome::Paused { reason: m(&reason) },
            SendOutcome::Rejected { reason } => SendOutcome::Rejected { reason: m(&reason) },
            SendOutcome::Misconfigured { reason } => SendOutcome::Misconfigured { reason: m(&reason) },
            SendOutcome::Unknown { reason } => SendOutcome::Unknown { reason: m(&reason) },
        }
    }
}

impl SendOutcome {
    /// The outcome's class, in a word (what the adapters' unit tests
    /// compare, and a canary's record says).
    pub fn kind(&self) -> &'static str {
        match self {
            SendOutcome::Sent { .. } => "sent",
            SendOutcome::NotSent { .. } => "retryable",
            SendOutcome::Throttled { .. } => "throttled",
            SendOutcome::Paused { .. } => "paused",
            SendOutcome::Rejected { .. } => "permanent",
            SendOutcome::Misconfigured { .. } => "configuration",
            SendOutcome::Unknown { .. } => "unknown",
        }
    }
}

#[async_trait::async_trait]
pub trait Mailer: Send + Sync {
    async fn send(&self, notification: &Notification) -> SendOutcome;

    /// The way its sends go out, which a claim records
    /// (`booking_notification_sends.provider`): only SES's sends can later
    /// be confirmed by its events.
    fn provider(&self) -> SentVia;

    /// The longest one send can take before it gives up (connect plus read
    /// timeout): the poller starts a send only when this much time, plus
    /// its safety margin, is left before the invocation's deadline.
    fn worst_case(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// The settings that make up [`Mailer::worst_case`], as a cold-start
    /// error names them.
    fn timeouts(&self) -> &'static str {
        "the mailer's timeouts"
    }

    /// The provider's send rate for the account, in messages a second
    /// (SES: `GetAccount`'s `MaxSendRate`); None: the provider sets none.
    async fn account_rate(&self) -> Result<Option<f64>, String> {
        Ok(None)
    }

    /// Sends a canary tagged `id` (`notify::evidence::watermark`): a message whose
    /// SES events move the watermark when traffic does not. None: this
    /// mailer sends none (its provider publishes no events it could move,
    /// or no canary address is set).
    async fn canary(&self, _id: uuid::Uuid) -> Option<SendOutcome> {
        None
    }
}

#[async_trait::async_trait]
impl<M: Mailer + ?Sized> Mailer for std::sync::Arc<M> {
    async fn send(&self, notification: &Notification) -> SendOutcome {
        (**self).send(notification).await
    }

    fn provider(&self) -> SentVia {
        (**self).provider()
    }

    async fn canary(&self, id: uuid::Uuid) -> Option<SendOutcome> {
        (**self).canary(id).await
    }

    fn worst_case(&self) -> std::time::Duration {
        (**self).worst_case()
    }

    fn timeouts(&self) -> &'static str {
        (**self).timeouts()
    }

    async fn account_rate(&self) -> Result<Option<f64>, String> {
        (**self).account_rate().await
    }
}
