//! The SES v2 mailer: `SendEmail` with Raw content, one message per
//! recipient, and a classification of every error for the poller.
//!
//! The SDK's own retries are **disabled**: a retried SendEmail whose first
//! attempt was accepted (but whose answer was lost) would send the invite
//! twice behind the poller's back. The poller retries known failures itself,
//! after releasing the claim. Connect, read and per-attempt timeouts are
//! explicit so a hung endpoint cannot eat the Lambda's deadline.
//!
//! The send rate is not this adapter's: the poller paces every send against
//! the fleet's shared bucket ([`crate::notify::pacing::pace`]), whose rate comes from
//! [`Mailer::account_rate`] (`GetAccount`), capped by `SES_MAX_SEND_RATE`.

use std::time::Duration;

use aws_sdk_sesv2::primitives::Blob;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message, MessageTag, RawMessage};

mod classify;
pub mod identity;

pub use classify::classify;

use super::tags;
use super::{Mailer, SendOutcome};
use crate::config::settings as S;
use crate::config::ConfigError;
use crate::notify::notification::Notification;
use crate::notify::render::invite::{self, Sender};
use crate::notify::sends::SentVia;

#[derive(Debug, Clone)]
pub struct SesConfig {
    /// `SES_FROM_ADDRESS`: the verified identity, `Name <address>` or bare.
    pub from: Sender,
    /// `SES_REGION`, else `AWS_REGION`.
    pub region: String,
    /// `SES_ENDPOINT_URL`: moto, LocalStack Pro; unset for real SES.
    pub endpoint_url: Option<String>,
    /// `SES_CONFIGURATION_SET`: optional configuration set name.
    pub configuration_set: Option<String>,
    /// `SES_CANARY_ADDRESS`: where a canary goes (None: no canary).
    pub canary_to: Option<String>,
    /// `SES_MAX_SEND_RATE`: the fleet's cap in messages a second, below the
    /// account's own `MaxSendRate`; None: the account's rate.
    pub max_send_rate: Option<f64>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
}

impl SesConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let from: String = S::SES_FROM_ADDRESS.parsed()?;
        let from = Sender::parse(&from).map_err(|e| {
            ConfigError::new(
                "SES_FROM_ADDRESS",
                format!("is invalid: {e}"),
                "use the verified sender, e.g. \"Bookings <bookings@example.com>\"",
            )
        })?;
        let region = match S::SES_REGION.value().or_else(crate::config::lambda_region) {
            Some(r) => r,
            None => {
                return Err(ConfigError::new("SES_REGION", "is not set, and neither is AWS_REGION", "set SES_REGION"))
            }
        };
        let max_send_rate: Option<f64> = S::SES_MAX_SEND_RATE.optional::<f64>()?.filter(|r| *r != 0.0);
        if max_send_rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err(ConfigError::new(
                "SES_MAX_SEND_RATE",
                "must be a positive number of messages a second",
                "set it above 0 (e.g. 50), or to 0 or unset to send at the account's own rate",
            ));
        }
        let endpoint_url = S::SES_ENDPOINT_URL.value();
        if let Some(url) = &endpoint_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(
                    "SES_ENDPOINT_URL",
                    format!("({url:?}) is not an http:// or https:// URL"),
                    "use an http:// or https:// URL, or unset it for real SES",
                ));
            }
        }
        Ok(Self {
            from,
            region,
            endpoint_url,
            configuration_set: S::SES_CONFIGURATION_SET.value(),
            canary_to: S::SES_CANARY_ADDRESS.value().filter(|a| !a.trim().is_empty()),
            max_send_rate,
            connect_timeout: Duration::from_millis(S::SES_CONNECT_TIMEOUT_MS.parsed()?),
            read_timeout: Duration::from_millis(S::SES_READ_TIMEOUT_MS.parsed()?),
        })
    }
}

pub struct SesMailer {
    client: aws_sdk_sesv2::Client,
    config: SesConfig,
    /// Set while SES says the From address cannot send ([`identity`]).
    stop: identity::Stop,
}

impl SesMailer {
    /// Builds the client from the default credential chain (the Lambda
    /// role in AWS).
    pub async fn from_env(config: SesConfig) -> Self {
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_sdk_sesv2::config::Region::new(config.region.clone()))
            .load()
            .await;
        Self::new(&sdk, config)
    }

    /// Builds the client from an SDK config (tests pass static credentials).
    pub fn new(sdk: &aws_config::SdkConfig, config: SesConfig) -> Self {
        let timeouts = aws_sdk_sesv2::config::timeout::TimeoutConfig::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            .operation_attempt_timeout(config.connect_timeout + config.read_timeout)
            .build();
        let mut builder = aws_sdk_sesv2::config::Builder::from(sdk)
            .region(aws_sdk_sesv2::config::Region::new(config.region.clone()))
            // Never let the SDK re-send a message that may have been accepted.
            .retry_config(aws_sdk_sesv2::config::retry::RetryConfig::disabled())
            .timeout_config(timeouts);
        if let Some(url) = &config.endpoint_url {
            builder = builder.endpoint_url(url);
        }
        Self { client: aws_sdk_sesv2::Client::from_conf(builder.build()), config, stop: Default::default() }
    }

    /// Asks SES whether it will send from the From address (the poller's
    /// cold start, then every [`identity::RECHECK`] while it will not), and
    /// stops or resumes sending by the answer.
    pub async fn check_identity(&self) -> identity::Verdict {
        let verdict = identity::check(&self.client, self.config.from.email.as_str(), &self.config.region).await;
        match &verdict {
            // A domain's DKIM (an address identity signs by its domain's).
            identity::Verdict::Sends { identity, dkim }
                if !identity.contains('@') && dkim.as_deref().is_some_and(|d| d != "SUCCESS") =>
            {
                tracing::warn!(%identity, dkim = dkim.as_deref().unwrap_or_default(),
                    "SES sends from this identity, but its DKIM is not SUCCESS: receivers may refuse unsigned mail")
            }
            identity::Verdict::Sends { identity, .. } => tracing::info!(%identity, "SES sends from the From address"),
            identity::Verdict::Refuses(reason) => tracing::error!(%reason, "sending stopped"),
            identity::Verdict::Unknown(reason) => {
                tracing::warn!(%reason, "could not ask SES about the From identity; sending goes on")
            }
        }
        self.stop.record(&verdict);
        verdict
    }

    /// A send's answer while SES will not send from the From address:
    /// nothing is called, the configuration stop holds the event.
    async fn stopped(&self) -> Option<SendOutcome> {
        let (reason, due) = self.stop.refused()?;
        let reason = if due {
            match self.check_identity().await {
                identity::Verdict::Refuses(reason) => reason,
                _ => return None,
            }
        } else {
            reason
        };
        Some(SendOutcome::Misconfigured { reason })
    }

    fn tag(name: &str, value: &str) -> MessageTag {
        MessageTag::builder().name(name).value(value).build().expect("name and value are set")
    }
}

/// The message tags of a send: its claim, its outbox event and its type, so
/// SES's events about it map back to exactly one claim; and the trace of
/// the request that wrote the event, which the feedback handler logs.
pub fn tags(n: &Notification) -> Vec<MessageTag> {
    let mut tags =
        vec![SesMailer::tag(tags::EVENT, &n.event_id.to_string()), SesMailer::tag(tags::TYPE, n.event_type.as_str())];
    if let Some(claim) = n.claim {
        tags.push(SesMailer::tag(tags::CLAIM, &claim.to_string()));
    }
    if let Some(trace_id) = &n.trace_id {
        tags.push(SesMailer::tag(tags::TRACE, trace_id));
    }
    tags
}

#[async_trait::async_trait]
impl Mailer for SesMailer {
    fn worst_case(&self) -> Duration {
        self.config.connect_timeout + self.config.read_timeout
    }

    fn timeouts(&self) -> &'static str {
        "SES_CONNECT_TIMEOUT_MS + SES_READ_TIMEOUT_MS"
    }

    fn provider(&self) -> SentVia {
        SentVia::Ses
    }

    async fn account_rate(&self) -> Result<Option<f64>, String> {
        let account = self
            .client
            .get_account()
            .send()
            .await
            .map_err(|e| format!("SES GetAccount failed: {}", aws_sdk_sesv2::error::DisplayErrorContext(&e)))?;
        Ok(account.send_quota().map(|q| q.max_send_rate()).filter(|r| r.is_finite() && *r > 0.0))
    }

    /// A short message to the canary address (SES's mailbox simulator by
    /// default: billed like any message and paced like one, but never
    /// counted against the daily quota or the reputation), through the
    /// configuration set, tagged with the canary's id. Without a
    /// configuration set no event would come back: no canary.
    async fn canary(&self, id: uuid::Uuid) -> Option<SendOutcome> {
        let (to, set) = (self.config.canary_to.as_deref()?, self.config.configuration_set.as_deref()?);
        if let Some(stopped) = self.stopped().await {
            return Some(stopped);
        }
        let text = |t: &str| Content::builder().data(t).charset("UTF-8").build().expect("data is set");
        let message = Message::builder()
            .subject(text("Booking outbox canary"))
            .body(
                Body::builder().text(text(&format!("canary {id}: its SES events move the feedback watermark"))).build(),
            )
            .build();
        let result = self
            .client
            .send_email()
            .from_email_address(self.config.from.email.as_str())
            .destination(Destination::builder().to_addresses(to).build())
            .content(EmailContent::builder().simple(message).build())
            .email_tags(Self::tag(tags::CANARY, &id.to_string()))
            .configuration_set_name(set)
            .send()
            .await;
        Some(match result {
            Ok(out) => SendOutcome::Sent { message_id: out.message_id.unwrap_or_default() },
            Err(e) => classify(&e, self.config.from.email.as_str()),
        })
    }

    async fn send(&self, n: &Notification) -> SendOutcome {
        if let Some(stopped) = self.stopped().await {
            return stopped;
        }
        let raw = invite::build(n, &self.config.from);
        let content = match RawMessage::builder().data(Blob::new(raw)).build() {
            Ok(raw) => EmailContent::builder().raw(raw).build(),
            Err(e) => return SendOutcome::Rejected { reason: format!("cannot build the message: {e}") },
        };
        let result = self
            .client
            .send_email()
            .from_email_address(self.config.from.email.as_str())
            .destination(Destination::builder().to_addresses(n.recipient.email.as_str()).build())
            .content(content)
            .set_email_tags(Some(tags(n)))
            .set_configuration_set_name(self.config.configuration_set.clone())
            .send()
            .await;
        match result {
            Ok(out) => SendOutcome::Sent { message_id: out.message_id.unwrap_or_default() },
            Err(e) => classify(&e, self.config.from.email.as_str()),
        }
    }
}
