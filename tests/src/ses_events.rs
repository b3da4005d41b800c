//! SES events in the shapes AWS documents for SES event publishing to
//! EventBridge (the envelope around the SES event record), for feeding the
//! feedback handler. Every event is about Alice's message.

use serde_json::{json, Value};
use shared::notify::evidence::ses_event::Origin;
use uuid::Uuid;

pub const ALICE: &str = "alice@example.com";

/// The stack's configuration set: every event here was published through
/// it, and every poller of the tests that SES events reach sends with it.
pub const CONFIGURATION_SET: &str = "bookings";

/// The account, region and configuration set of every event here: the
/// ses-events function must be configured with them to accept the events.
pub fn origin() -> Origin {
    Origin { account: "123456789012".into(), region: "us-east-1".into(), configuration_set: CONFIGURATION_SET.into() }
}

/// The same event, about the message SES gave `message_id` (the events
/// here carry a fixed one, which matches only a send that never answered).
pub fn with_message_id(mut event: Value, message_id: &str) -> Value {
    event["detail"]["mail"]["messageId"] = json!(message_id);
    event
}

/// An SES event as EventBridge delivers it.
pub fn ses_event(event_type: &str, detail_type: &str, claim: Option<Uuid>, section: Option<(&str, Value)>) -> Value {
    let mut tags = json!({"ses:configuration-set": [CONFIGURATION_SET], "event_type": ["BOOKING_CONFIRMED"]});
    if let Some(claim) = claim {
        tags["claim"] = json!([claim.to_string()]);
    }
    let mut detail = json!({
        "eventType": event_type,
        "mail": {
            "timestamp": "2026-11-30T12:00:00.012Z",
            "source": "Bookings <bookings@example.com>",
            "sourceArn": "arn:aws:ses:us-east-1:123456789012:identity/example.com",
            "sendingAccountId": "123456789012",
            "messageId": "0100018c1d2e3f40-example-000000",
            "destination": [ALICE],
            "headersTruncated": false,
            "tags": tags
        }
    });
    if let Some((name, body)) = section {
        detail[name] = body;
    }
    json!({
        "version": "0",
        "id": Uuid::new_v4().to_string(),
        "detail-type": detail_type,
        "source": "aws.ses",
        "account": "123456789012",
        "time": "2026-11-30T12:00:01Z",
        "region": "us-east-1",
        "resources": [format!("arn:aws:ses:us-east-1:123456789012:configuration-set/{CONFIGURATION_SET}")],
        "detail": detail
    })
}

pub fn send_event(claim: Uuid) -> Value {
    ses_event("Send", "Email Sent", Some(claim), Some(("send", json!({}))))
}

pub fn delivery_event(claim: Uuid) -> Value {
    ses_event(
        "Delivery",
        "Email Delivered",
        Some(claim),
        Some((
            "delivery",
            json!({"timestamp": "2026-11-30T12:00:02.345Z", "processingTimeMillis": 2333, "recipients": [ALICE],
                   "smtpResponse": "250 2.6.0 Message received", "reportingMTA": "a8-70.smtp-out.amazonses.com"}),
        )),
    )
}

pub fn bounce_event(claim: Uuid, bounce_type: &str, sub_type: &str) -> Value {
    ses_event(
        "Bounce",
        "Email Bounced",
        Some(claim),
        Some((
            "bounce",
            json!({"bounceType": bounce_type, "bounceSubType": sub_type,
                   "bouncedRecipients": [{"emailAddress": ALICE, "action": "failed", "status": "5.1.1",
                                          "diagnosticCode": "smtp; 550 5.1.1 user unknown"}],
                   "timestamp": "2026-11-30T12:00:03.669Z",
                   "feedbackId": "01000157c44f053b-61b59c11-9236-11e6-8f96-7be8aexample-000000",
                   "reportingMTA": "dsn; mta.example.com"}),
        )),
    )
}

/// A complaint about the claim's message that lists `complained`.
pub fn complaint_event(claim: Uuid, complained: &[&str]) -> Value {
    let complained: Vec<Value> = complained.iter().map(|a| json!({"emailAddress": a})).collect();
    ses_event(
        "Complaint",
        "Email Complaint Received",
        Some(claim),
        Some((
            "complaint",
            json!({"complainedRecipients": complained, "timestamp": "2026-11-30T12:05:00.000Z",
                   "feedbackId": "0100015e3a9c3d1e-example", "complaintFeedbackType": "abuse"}),
        )),
    )
}

/// The same event, about a message to `recipient` instead of Alice.
pub fn to_recipient(event: Value, recipient: &str) -> Value {
    serde_json::from_str(&event.to_string().replace(ALICE, recipient)).expect("still JSON")
}
