//! What a SendEmail error means for the claim: SES's own word decides
//! (an error it answered sent nothing), and only a call whose answer never
//! came is unknown.

use aws_sdk_sesv2::config::http::HttpResponse;
use aws_sdk_sesv2::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sesv2::operation::send_email::SendEmailError;

use crate::notify::mailer::{SendOutcome, DAILY_QUOTA_SPENT};

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
///
/// `from` is the address the stack sends from: a `MessageRejected` that
/// names it (or its domain) as not verified is the whole stack's
/// configuration (an identity never verified, or verified in another
/// region), not the recipient's.
pub fn classify(err: &SdkError<SendEmailError, HttpResponse>, from: &str) -> SendOutcome {
    let reason = format!("{}", aws_sdk_sesv2::error::DisplayErrorContext(err));
    match err {
        // SES's own words, whichever error carries them.
        SdkError::ServiceError(ctx) if ctx.err().message().is_some_and(|said| said.contains(DAILY_QUOTA_SPENT)) => {
            SendOutcome::daily_quota_spent(reason)
        }
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            match ctx.err() {
                SendEmailError::TooManyRequestsException(_) => SendOutcome::Throttled { reason },
                SendEmailError::LimitExceededException(_) => SendOutcome::NotSent { reason },
                SendEmailError::SendingPausedException(_) | SendEmailError::AccountSuspendedException(_) => {
                    SendOutcome::Paused { reason }
                }
                SendEmailError::MessageRejected(e) if sender_not_verified(e.message().unwrap_or_default(), from) => {
                    SendOutcome::Misconfigured { reason }
                }
                SendEmailError::MessageRejected(e) if not_verified(e.message().unwrap_or_default()) => {
                    // Only the recipient failed the check: the account is in
                    // the SES sandbox, which sends only to verified
                    // addresses and the mailbox simulator.
                    let reason = format!("{reason} (the SES sandbox sends only to verified addresses)");
                    SendOutcome::Rejected { reason }
                }
                SendEmailError::MessageRejected(_) | SendEmailError::BadRequestException(_) => {
                    SendOutcome::Rejected { reason }
                }
                // SendEmail's resources are the stack's: its configuration
                // set (or a template, a contact list). None is a recipient's.
                SendEmailError::NotFoundException(_) => SendOutcome::Misconfigured { reason },
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

/// Whether SES refused an identity as not verified. SES answers
/// `MessageRejected`: "Email address is not verified. The following
/// identities failed the check in region EU-WEST-1: a@example.com,
/// b@example.com" (moto: "Email address not verified a@example.com", and
/// for a raw message "Did not have authority to send from email
/// a@example.com").
fn not_verified(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["not verified", "failed the check", "authority to send from"].iter().any(|w| message.contains(w))
}

/// Whether the identities SES refused as not verified include the stack's
/// own From address or its domain. Only the sender's identity is the
/// stack's to fix: in the sandbox the recipient's is checked too, and an
/// unverified recipient fails that recipient alone.
pub fn sender_not_verified(message: &str, from: &str) -> bool {
    if !not_verified(message) {
        return false;
    }
    let from = from.to_ascii_lowercase();
    let domain = from.rsplit_once('@').map_or("", |(_, d)| d);
    let message = message.to_ascii_lowercase();
    // The list after the last ':' when SES gives one, else every word.
    let listed = message.rsplit_once(':').map_or(message.as_str(), |(_, list)| list);
    listed
        .split(|c: char| c == ',' || c.is_whitespace())
        .map(|w| w.trim_matches(|c: char| matches!(c, '<' | '>' | '.' | '"' | '\'')))
        .any(|identity| !identity.is_empty() && (identity == from || identity == domain))
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

    const FROM: &str = "bookings@example.com";

    fn classify_from(e: &SdkError<SendEmailError, HttpResponse>) -> SendOutcome {
        classify(e, FROM)
    }

    fn rejected(message: &str) -> &'static str {
        let e = SendEmailError::MessageRejected(MessageRejected::builder().message(message).build());
        kind(classify_from(&service(e, 400)))
    }

    #[test]
    fn an_unverified_sender_is_the_stacks_configuration_and_an_unverified_recipient_that_recipients_failure() {
        let ses = "Email address is not verified. The following identities failed the check in region EU-WEST-1: ";
        assert_eq!(rejected(&format!("{ses}bookings@example.com")), "configuration", "the From address");
        assert_eq!(rejected(&format!("{ses}example.com")), "configuration", "its domain");
        assert_eq!(rejected(&format!("{ses}alice@example.org, Bookings@Example.com")), "configuration", "among others");
        assert_eq!(rejected("Email address not verified bookings@example.com"), "configuration", "moto's words");
        let raw = "Did not have authority to send from email bookings@example.com";
        assert_eq!(rejected(raw), "configuration", "moto's words for a raw message");
        assert_eq!(rejected(&format!("{ses}alice@example.org")), "permanent", "the recipient alone (the sandbox)");
        assert_eq!(rejected(&format!("{ses}alice@example.com")), "permanent", "a recipient at the sender's domain");
        assert_eq!(rejected(&format!("{ses}bookings@example.com.evil.org")), "permanent", "not a prefix match");
        assert_eq!(rejected("Message rejected: address invalid"), "permanent");
    }

    #[test]
    fn too_many_requests_is_throttled() {
        let e = SendEmailError::TooManyRequestsException(TooManyRequestsException::builder().build());
        assert_eq!(kind(classify_from(&service(e, 429))), "throttled");
    }

    #[test]
    fn limit_exceeded_is_retryable() {
        let e = SendEmailError::LimitExceededException(LimitExceededException::builder().build());
        assert_eq!(kind(classify_from(&service(e, 400))), "retryable");
    }

    #[test]
    fn unmodelled_throttling_is_throttled() {
        let e = SendEmailError::generic(ErrorMetadata::builder().code("Throttling").build());
        assert_eq!(kind(classify_from(&service(e, 400))), "throttled");
    }

    #[test]
    fn sending_paused_pauses() {
        let e = SendEmailError::SendingPausedException(SendingPausedException::builder().build());
        assert_eq!(kind(classify_from(&service(e, 400))), "paused");
    }

    #[test]
    fn account_suspended_pauses() {
        let e = SendEmailError::AccountSuspendedException(AccountSuspendedException::builder().build());
        assert_eq!(kind(classify_from(&service(e, 400))), "paused");
    }

    #[test]
    fn message_rejected_is_permanent_for_the_recipient() {
        let e = SendEmailError::MessageRejected(MessageRejected::builder().build());
        assert_eq!(kind(classify_from(&service(e, 400))), "permanent");
    }

    #[test]
    fn bad_request_is_permanent_for_the_recipient() {
        let e = SendEmailError::BadRequestException(BadRequestException::builder().build());
        assert_eq!(kind(classify_from(&service(e, 400))), "permanent");
    }

    #[test]
    fn not_found_is_the_stacks_configuration() {
        let e = SendEmailError::NotFoundException(NotFoundException::builder().build());
        assert_eq!(kind(classify_from(&service(e, 404))), "configuration");
    }

    #[test]
    fn mail_from_domain_not_verified_is_a_configuration_error() {
        let e =
            SendEmailError::MailFromDomainNotVerifiedException(MailFromDomainNotVerifiedException::builder().build());
        assert_eq!(kind(classify_from(&service(e, 400))), "configuration");
    }

    #[test]
    fn access_denied_is_a_configuration_error() {
        let e = SendEmailError::generic(ErrorMetadata::builder().code("AccessDeniedException").build());
        assert_eq!(kind(classify_from(&service(e, 403))), "configuration");
    }

    /// SES: "the call to Amazon SES fails, Amazon SES returns an error
    /// message to your application and does not send the email".
    #[test]
    fn server_error_answered_by_ses_sent_nothing_and_is_retried() {
        for (code, status) in [("InternalFailure", 500), ("ServiceUnavailable", 503)] {
            let e = SendEmailError::generic(ErrorMetadata::builder().code(code).build());
            assert_eq!(kind(classify_from(&service(e, status))), "retryable", "{code}");
        }
    }

    #[test]
    fn unhandled_error_answered_by_ses_sent_nothing_and_is_retried() {
        let e = SendEmailError::unhandled("something new");
        assert_eq!(kind(classify_from(&service(e, 400))), "retryable");
    }

    #[test]
    fn timeout_is_unknown() {
        let e: SdkError<SendEmailError, HttpResponse> = SdkError::timeout_error("read timed out");
        assert_eq!(kind(classify_from(&e)), "unknown");
    }

    #[test]
    fn dispatch_failure_is_unknown() {
        let e: SdkError<SendEmailError, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io("connection reset".into()));
        assert_eq!(kind(classify_from(&e)), "unknown");
    }

    /// A connection that was never made sent nothing: retried, not UNKNOWN.
    #[test]
    fn a_connection_never_made_sent_nothing_and_is_retried() {
        for text in ["client error (Connect)", "HTTP connect timeout occurred after 3s", "dns error: no record"] {
            let cause: Box<dyn std::error::Error + Send + Sync> = Box::new(std::io::Error::other(text));
            let e: SdkError<SendEmailError, HttpResponse> = SdkError::dispatch_failure(ConnectorError::io(cause));
            assert_eq!(kind(classify_from(&e)), "retryable", "{text}");
        }
    }

    #[test]
    fn unreadable_response_is_unknown() {
        let raw = HttpResponse::new(200u16.try_into().unwrap(), SdkBody::from("not json"));
        let e: SdkError<SendEmailError, HttpResponse> = SdkError::response_error("bad body", raw);
        assert_eq!(kind(classify_from(&e)), "unknown");
    }

    #[test]
    fn construction_failure_is_a_configuration_error() {
        let e: SdkError<SendEmailError, HttpResponse> = SdkError::construction_failure("no region");
        assert_eq!(kind(classify_from(&e)), "configuration");
    }
}
