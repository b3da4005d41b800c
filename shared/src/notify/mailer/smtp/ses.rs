//! SES's own SMTP interface (`email-smtp.<region>.amazonaws.com`) with a
//! configuration set: the headers it reads (and strips before delivery),
//! so SES publishes each message's events with the claim's tags, and the
//! message id its reply carries, which those events name.

use uuid::Uuid;

use crate::notify::mailer::tags;
use crate::notify::notification::Notification;

/// The headers SES's SMTP interface reads, and strips before delivery: the
/// configuration set (so SES publishes the message's events), and the
/// same tags SES v2's sends carry (`claim`, `event_id`, `event_type`,
/// `trace`), so an event maps back to its claim.
pub fn headers(set: &str, n: &Notification) -> String {
    let mut tags = vec![format!("{}={}", tags::EVENT, n.event_id), format!("{}={}", tags::TYPE, n.event_type.as_str())];
    if let Some(claim) = n.claim {
        tags.push(format!("{}={claim}", tags::CLAIM));
    }
    if let Some(trace) = &n.trace_id {
        tags.push(format!("{}={trace}", tags::TRACE));
    }
    format!("X-SES-CONFIGURATION-SET: {set}\r\nX-SES-MESSAGE-TAGS: {}\r\n", tags.join(", "))
}

/// A canary's headers: the configuration set and its own tag.
pub fn canary_headers(set: &str, id: Uuid) -> String {
    format!("X-SES-CONFIGURATION-SET: {set}\r\nX-SES-MESSAGE-TAGS: {}={id}\r\n", tags::CANARY)
}

/// SES's message id from its reply to the final `.` ("Ok <id>").
pub fn message_id(first_line: &str) -> Option<String> {
    first_line.strip_prefix("Ok ").map(|id| id.trim().to_string()).filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_message_id_is_what_ses_puts_after_ok() {
        assert_eq!(super::message_id("Ok 0100018c-abc-000000").as_deref(), Some("0100018c-abc-000000"));
        assert_eq!(super::message_id("2.0.0 OK: queued"), None);
        assert_eq!(super::message_id("Ok "), None);
    }
}
