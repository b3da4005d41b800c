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
//! the fleet's shared bucket ([`crate::notify::pace`]), whose rate comes from
//! [`Mailer::account_rate`] (`GetAccount`), capped by `SES_MAX_SEND_RATE`.

use std::time::Duration;

use aws_sdk_sesv2::config::http::HttpResponse;
use aws_sdk_sesv2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sesv2::operation::send_email::SendEmailError;
use aws_sdk_sesv2::primitives::Blob;
use aws_sdk_sesv2::types::{Body, Content, Destination, EmailContent, Message, MessageTag, RawMessage};

use super::{Mailer, SendOutcome};
use crate::config::settings as S;
use crate::config::ConfigError;
use crate::notify::invite::{self, Sender};
use crate::notify::{feedback, Notification};

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
        Self { client: aws_sdk_sesv2::Client::from_conf(builder.build()), config }
    }

    fn tag(name: &str, value: &str) -> MessageTag {
        MessageTag::builder().name(name).value(value).build().expect("name and value are set")
    }
}

/// The message tags of a send: its claim, its outbox event and its type, so
/// SES's events about it map back to exactly one claim; and the trace of
/// the request that wrote the event, which the feedback handler logs.
pub fn tags(n: &Notification) -> Vec<MessageTag> {
    let mut tags = vec![
        SesMailer::tag(feedback::TAG_EVENT, &n.event_id.to_string()),
        SesMailer::tag(feedback::TAG_TYPE, n.event_type.as_str()),
    ];
    if let Some(claim) = n.claim {
        tags.push(SesMailer::tag(feedback::TAG_CLAIM, &claim.to_string()));
    }
    if let Some(trace_id) = &n.trace_id {
        tags.push(SesMailer::tag(feedback::TAG_TRACE, trace_id));
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

    fn provider(&self) -> &'static str {
        crate::notify::send_rate::SES
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
            .email_tags(Self::tag(crate::notify::evidence::TAG_CANARY, &id.to_string()))
            .configuration_set_name(set)
            .send()
            .await;
        Some(match result {
            Ok(out) => SendOutcome::Sent { message_id: out.message_id.unwrap_or_default() },
            Err(e) => classify(&e),
        })
    }

    async fn send(&self, n: &Notification) -> SendOutcome {
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
            Err(e) => classify(&e),
        }
    }
}

/// Error codes of throttling that SES may return outside the modelled
/// variants: the request was refused for the send rate, so nothing was sent.
const THROTTLING_CODES: &[&str] =
    &["Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded"];

/// Credential and permission errors: the request was refused before
/// acceptance and retrying cannot help until someone fixes the setup.
const AUTH_CODES: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "MissingAuthenticationToken",
];

/// What a SendEmail error means for the claim. SES documents that a call
/// it answers with an error sent nothing: "If you try to send an email
/// through Amazon SES and the call to Amazon SES fails, Amazon SES returns
/// an error message to your application and does not send the email"
/// (<https://docs.aws.amazon.com/ses/latest/dg/troubleshoot-error-messages.html>).
/// So an error SES answered (a service error, 5xx included) is a known
/// failure: released and retried. Only a call whose answer never came (a
/// timeout, a connection lost after the request went out) or cannot be
/// read is unknown: only "unknown" can never produce a duplicate there.
pub fn classify(err: &SdkError<SendEmailError, HttpResponse>) -> SendOutcome {
    let reason = format!("{}", aws_sdk_sesv2::error::DisplayErrorContext(err));
    match err {
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            match ctx.err() {
                SendEmailError::TooManyRequestsException(_) => SendOutcome::Throttled { reason },
                SendEmailError::LimitExceededException(_) => SendOutcome::NotSent { reason },
                SendEmailError::SendingPausedException(_) | SendEmailError::AccountSuspendedException(_) => {
                    SendOutcome::Paused { reason }
                }
                SendEmailError::MessageRejected(_)
                | SendEmailError::BadRequestException(_)
                | SendEmailError::NotFoundException(_) => SendOutcome::Rejected { reason },
                SendEmailError::MailFromDomainNotVerifiedException(_) => SendOutcome::Misconfigured { reason },
                other => {
                    let code = other.code().unwrap_or_default();
                    if THROTTLING_CODES.contains(&code) || status == 429 {
                        SendOutcome::Throttled { reason }
                    } else if code == "LimitExceededException" {
                        SendOutcome::NotSent { reason }
                    } else if AUTH_CODES.contains(&code) {
                        SendOutcome::Misconfigured { reason }
                    } else {
                        // 5xx or anything unmodelled, answered by SES as an
                        // error: per SES, nothing was sent.
                        SendOutcome::NotSent { reason }
                    }
                }
            }
        }
        // The request could not even be built: nothing left this process,
        // and retrying the same input cannot help.
        SdkError::ConstructionFailure(_) => SendOutcome::Misconfigured { reason },
        // No connection was made: the request never left this process.
        SdkError::DispatchFailure(e) if e.as_connector_error().is_some_and(|c| never_connected(c)) => {
            SendOutcome::NotSent { reason }
        }
        // Timeouts, connections lost after the request may have gone out,
        // and unreadable responses: the request may have reached SES. Keep
        // the claim.
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            SendOutcome::Unknown { reason }
        }
        _ => SendOutcome::Unknown { reason },
    }
}

/// Whether a dispatch failed before any connection to SES was made (the
/// name did not resolve, the connection was refused, or connecting timed
/// out): then the request was never written, and nothing was sent. The
/// HTTP client says so only in its errors' text: "client error (Connect)"
/// (hyper-util's connector), "HTTP connect timeout" (the SDK's connect
/// timeout), a failed DNS lookup. Anything else may have gone out.
fn never_connected(connector_error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(connector_error);
    while let Some(err) = next {
        let text = err.to_string();
        if text.starts_with("client error (Connect)")
            || text.starts_with("HTTP connect timeout")
            || text.contains("dns error")
            || text.contains("failed to lookup address")
        {
            return true;
        }
        next = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sesv2::error::ErrorMetadata;
    use aws_sdk_sesv2::types::error::*;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_types::body::SdkBody;

    fn service(err: SendEmailError, status: u16) -> SdkError<SendEmailError, HttpResponse> {
        let raw = HttpResponse::new(status.try_into().unwrap(), SdkBody::empty());
        SdkError::service_error(err, raw)
    }

    fn kind(o: SendOutcome) -> &'static str {
        o.kind()
    }

    #[test]
    fn too_many_requests_is_throttled() {
        let e = SendEmailError::TooManyRequestsException(TooManyRequestsException::builder().build());
        assert_eq!(kind(classify(&service(e, 429))), "throttled");
    }

    #[test]
    fn limit_exceeded_is_retryable() {
        let e = SendEmailError::LimitExceededException(LimitExceededException::builder().build());
        assert_eq!(kind(classify(&service(e, 400))), "retryable");
    }

    #[test]
    fn unmodelled_throttling_is_throttled() {
        let e = SendEmailError::generic(ErrorMetadata::builder().code("Throttling").build());
        assert_eq!(kind(classify(&service(e, 400))), "throttled");
    }

    #[test]
    fn sending_paused_pauses() {
        let e = SendEmailError::SendingPausedException(SendingPausedException::builder().build());
        assert_eq!(kind(classify(&service(e, 400))), "paused");
    }

    #[test]
    fn account_suspended_pauses() {
        let e = SendEmailError::AccountSuspendedException(AccountSuspendedException::builder().build());
        assert_eq!(kind(classify(&service(e, 400))), "paused");
    }

    #[test]
    fn message_rejected_is_permanent_for_the_recipient() {
        let e = SendEmailError::MessageRejected(MessageRejected::builder().build());
        assert_eq!(kind(classify(&service(e, 400))), "permanent");
    }

    #[test]
    fn bad_request_is_permanent_for_the_recipient() {
        let e = SendEmailError::BadRequestException(BadRequestException::builder().build());
        assert_eq!(kind(classify(&service(e, 400))), "permanent");
    }

    #[test]
    fn not_found_is_permanent_for_the_recipient() {
        let e = SendEmailError::NotFoundException(NotFoundException::builder().build());
        assert_eq!(kind(classify(&service(e, 404))), "permanent");
    }

    #[test]
    fn mail_from_domain_not_verified_is_a_configuration_error() {
        let e =
            SendEmailError::MailFromDomainNotVerifiedException(MailFromDomainNotVerifiedException::builder().build());
        assert_eq!(kind(classify(&service(e, 400))), "configuration");
    }

    #[test]
    fn access_denied_is_a_configuration_error() {
        let e = SendEmailError::generic(ErrorMetadata::builder().code("AccessDeniedException").build());
        assert_eq!(kind(classify(&service(e, 403))), "configuration");
    }

    /// SES: "the call to Amazon SES fails, Amazon SES returns an error
    /// message to your application and does not send the email".
    #[test]
    fn server_error_answered_by_ses_sent_nothing_and_is_retried() {
        for (code, status) in [("InternalFailure", 500), ("ServiceUnavailable", 503)] {
            let e = SendEmailError::generic(ErrorMetadata::builder().code(code).build());
            assert_eq!(kind(classify(&service(e, status))), "retryable", "{code}");
        }
    }

    #[test]
    fn unhandled_error_answered_by_ses_sent_nothing_and_is_retried() {
        let e = SendEmailError::unhandled("something new");
        assert_eq!(kind(classify(&service(e, 400))), "retryable");
    }

    #[test]
    fn timeout_is_unknown() {
        let e: SdkError<SendEmailError, HttpResponse> = SdkError::timeout_error("read timed out");
        assert_eq!(kind(classify(&e)), "unknown");
    }

    #[test]
    fn dispatch_failure_is_unknown() {
        let e: SdkError<SendEmailError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io("connection reset".into()));
        assert_eq!(kind(classify(&e)), "unknown");
    }

    /// A connection that was never made sent nothing: retried, not UNKNOWN.
    #[test]
    fn a_connection_never_made_sent_nothing_and_is_retried() {
        for text in ["client error (Connect)", "HTTP connect timeout occurred after 3s", "dns error: no record"] {
            let cause: Box<dyn std::error::Error + Send + Sync> = Box::new(std::io::Error::other(text));
            let e: SdkError<SendEmailError, HttpResponse> = SdkError::dispatch_failure(ConnectorError::io(cause));
            assert_eq!(kind(classify(&e)), "retryable", "{text}");
        }
    }

    #[test]
    fn unreadable_response_is_unknown() {
        let raw = HttpResponse::new(200u16.try_into().unwrap(), SdkBody::from("not json"));
        let e: SdkError<SendEmailError, HttpResponse> = SdkError::response_error("bad body", raw);
        assert_eq!(kind(classify(&e)), "unknown");
    }

    #[test]
    fn construction_failure_is_a_configuration_error() {
        let e: SdkError<SendEmailError, HttpResponse> = SdkError::construction_failure("no region");
        assert_eq!(kind(classify(&e)), "configuration");
    }
}
