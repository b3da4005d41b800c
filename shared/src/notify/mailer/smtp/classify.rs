//! Where an SMTP failure happened, and what it means for the claim: the
//! table in the module's doc ([`super`]).

use lettre::transport::smtp::Error as SmtpError;

use crate::notify::mailer::{SendOutcome, DAILY_QUOTA_SPENT};

/// Where in the SMTP exchange a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// TCP, implicit TLS, the greeting and EHLO.
    Connect,
    StartTls,
    Auth,
    Mail,
    Rcpt,
    /// The DATA command (before any of the message is written).
    Data,
    /// Writing the message, before the final `.`.
    Body,
    /// The whole message and its final `.` written: the server may have it.
    AfterDot,
}

/// What went wrong at a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A negative reply, with its code.
    Reply(u16, String),
    /// The TLS handshake failed (certificate, protocol), or STARTTLS is not offered.
    Tls(String),
    /// Connection refused, reset or closed, an unreadable reply, a client error.
    Lost(String),
    /// No reply within the timeout.
    TimedOut(String),
}

/// The outcome of a failure at a stage: the table in this module's doc.
/// When in doubt after the final `.`: unknown, the only answer that can
/// never send twice.
pub fn classify(stage: Stage, failure: Failure) -> SendOutcome {
    let at = match stage {
        Stage::Connect => "connecting",
        Stage::StartTls => "STARTTLS",
        Stage::Auth => "AUTH",
        Stage::Mail => "MAIL",
        Stage::Rcpt => "RCPT",
        Stage::Data => "DATA",
        Stage::Body => "writing the message",
        Stage::AfterDot => "the final .",
    };
    match failure {
        Failure::Reply(421, text) => SendOutcome::Paused { reason: format!("SMTP 421 at {at}: {text}") },
        Failure::Reply(code, text) if text.contains(DAILY_QUOTA_SPENT) => {
            SendOutcome::daily_quota_spent(format!("SMTP {code} at {at}: {text}"))
        }
        // Only the handshake is configuration: a TLS error later (an alert,
        // a bad record) is a connection lost, placed like one below.
        Failure::Tls(text) if matches!(stage, Stage::Connect | Stage::StartTls) => {
            SendOutcome::Misconfigured { reason: format!("SMTP TLS failed at {at}: {text}") }
        }
        Failure::Reply(code, text) => {
            let reason = format!("SMTP {code} at {at}: {text}");
            let permanent = (500..600).contains(&code);
            let throttling = ["throttl", "rate limit", "too many"].iter().any(|w| text.to_lowercase().contains(w));
            match stage {
                // The sender, the credentials or the server's policy for us.
                Stage::Connect | Stage::StartTls | Stage::Auth | Stage::Mail if permanent => {
                    SendOutcome::Misconfigured { reason }
                }
                // STARTTLS refused at all: TLS is required.
                Stage::StartTls => SendOutcome::Misconfigured { reason },
                // "Authentication required" is ours to fix, not the recipient's.
                Stage::Rcpt if code == 530 => SendOutcome::Misconfigured { reason },
                Stage::Rcpt | Stage::Data | Stage::Body | Stage::AfterDot if permanent => {
                    SendOutcome::Rejected { reason }
                }
                // A rate refusal (SES's SMTP interface: "454 Throttling
                // failure"): nothing was taken; back soon, no attempt used.
                _ if throttling => SendOutcome::Throttled { reason },
                _ => SendOutcome::NotSent { reason },
            }
        }
        Failure::Tls(text) | Failure::Lost(text) | Failure::TimedOut(text) => {
            let reason = format!("SMTP connection {at}: {text}");
            match stage {
                Stage::AfterDot => SendOutcome::Unknown { reason },
                _ => SendOutcome::NotSent { reason },
            }
        }
    }
}

/// What a lettre error at a stage was.
pub(super) fn failure_of(e: &SmtpError) -> Failure {
    if let Some(code) = e.status() {
        let text = e.to_string();
        return Failure::Reply(u16::from(code), text);
    }
    if e.is_tls() || caused_by_tls(e) {
        return Failure::Tls(e.to_string());
    }
    Failure::Lost(e.to_string())
}

/// An I/O error of the TLS handshake: a rustls error inside is TLS (the
/// certificate, the protocol), anything else the connection.
pub(super) fn io_failure(e: std::io::Error) -> Failure {
    if e.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
        Failure::Tls(format!("the TLS handshake failed: {e}"))
    } else {
        Failure::Lost(e.to_string())
    }
}

/// A handshake error reaches lettre as an I/O error around a rustls one.
fn caused_by_tls(e: &SmtpError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
                return true;
            }
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(o: SendOutcome) -> &'static str {
        o.kind()
    }

    fn reply(code: u16) -> Failure {
        Failure::Reply(code, "x".into())
    }

    #[test]
    fn every_stage_before_the_final_dot_retries_a_transient_reply_or_a_lost_connection() {
        for stage in [Stage::Connect, Stage::Auth, Stage::Mail, Stage::Rcpt, Stage::Data, Stage::Body] {
            assert_eq!(kind(classify(stage, reply(451))), "retryable", "{stage:?}");
            assert_eq!(kind(classify(stage, Failure::Lost("reset".into()))), "retryable", "{stage:?}");
            assert_eq!(kind(classify(stage, Failure::TimedOut("t".into()))), "retryable", "{stage:?}");
        }
    }

    #[test]
    fn after_the_final_dot_only_a_reply_is_known() {
        assert_eq!(kind(classify(Stage::AfterDot, Failure::Lost("eof".into()))), "unknown");
        assert_eq!(kind(classify(Stage::AfterDot, Failure::TimedOut("t".into()))), "unknown");
        assert_eq!(kind(classify(Stage::AfterDot, reply(451))), "retryable");
        assert_eq!(kind(classify(Stage::AfterDot, reply(554))), "permanent");
    }

    #[test]
    fn a_tls_error_after_the_handshake_is_a_lost_connection_and_after_the_dot_unknown() {
        let tls = || Failure::Tls("received fatal alert".into());
        assert_eq!(kind(classify(Stage::AfterDot, tls())), "unknown");
        for stage in [Stage::Auth, Stage::Mail, Stage::Rcpt, Stage::Data, Stage::Body] {
            assert_eq!(kind(classify(stage, tls())), "retryable", "{stage:?}");
        }
    }

    #[test]
    fn a_rate_refusal_is_throttled_and_530_at_rcpt_is_configuration() {
        let throttled = Failure::Reply(454, "454 Throttling failure: Maximum sending rate exceeded".into());
        assert_eq!(kind(classify(Stage::Mail, throttled.clone())), "throttled");
        assert_eq!(kind(classify(Stage::AfterDot, throttled)), "throttled");
        // SES's SMTP interface when the 24-hour quota is spent: no send can
        // go for a while, so sending pauses rather than retrying at once.
        let spent = Failure::Reply(454, "454 Throttling failure: Daily message quota exceeded".into());
        assert_eq!(kind(classify(Stage::Mail, spent.clone())), "paused");
        assert_eq!(kind(classify(Stage::AfterDot, spent)), "paused");
        assert_eq!(kind(classify(Stage::Rcpt, reply(530))), "configuration");
    }

    #[test]
    fn a_421_pauses_wherever_it_comes() {
        for stage in [Stage::Connect, Stage::Mail, Stage::Rcpt, Stage::Data, Stage::AfterDot] {
            assert_eq!(kind(classify(stage, reply(421))), "paused", "{stage:?}");
        }
    }

    #[test]
    fn permanent_replies_fail_the_recipient_at_rcpt_and_after_and_the_setup_before() {
        assert_eq!(kind(classify(Stage::Rcpt, reply(550))), "permanent");
        assert_eq!(kind(classify(Stage::Data, reply(554))), "permanent");
        assert_eq!(kind(classify(Stage::Mail, reply(550))), "configuration");
        assert_eq!(kind(classify(Stage::Auth, reply(535))), "configuration");
        assert_eq!(kind(classify(Stage::Connect, reply(554))), "configuration");
        assert_eq!(kind(classify(Stage::StartTls, reply(454))), "configuration");
        assert_eq!(kind(classify(Stage::Connect, Failure::Tls("bad certificate".into()))), "configuration");
    }
}
