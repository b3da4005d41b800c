//! The message tags every send carries, and SES echoes back on each event
//! it publishes about the message: how an event finds its claim
//! (`evidence::ses_event` reads them). SES allows `[A-Za-z0-9_-]` in names
//! and values; a hyphenated UUID passes.

/// The send's claim (`booking_notification_sends.id`).
pub const CLAIM: &str = "claim";
/// The outbox event the send belongs to.
pub const EVENT: &str = "event_id";
/// The event's type (`BOOKING_CONFIRMED`, …).
pub const TYPE: &str = "event_type";
/// The trace id of the request that wrote the event (32 hex digits).
pub const TRACE: &str = "trace";
/// A canary's id, instead of a claim (`evidence::watermark`).
pub const CANARY: &str = "canary";
/// The tag SES itself puts on every event it publishes: the configuration
/// set the message was sent through.
pub const CONFIGURATION_SET: &str = "ses:configuration-set";

#[cfg(test)]
mod tests {
    use super::*;

    /// SES accepts `[A-Za-z0-9_-]` in tag names and values.
    fn ses_safe(s: &str) -> bool {
        !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn claim_ids_and_tag_names_pass_the_ses_tag_charset() {
        for name in [CLAIM, EVENT, TYPE, TRACE, CANARY] {
            assert!(ses_safe(name), "{name}");
        }
        for _ in 0..100 {
            assert!(ses_safe(&uuid::Uuid::now_v7().to_string()));
        }
        assert!(ses_safe("BOOKING_CONFIRMED"));
    }
}
