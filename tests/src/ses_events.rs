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

/// The shape of an SES event as SES publishes it to EventBridge, written
/// once for these helpers and `scripts/ses-publisher.py`: its blanks
/// (null) are filled in here.
fn shape() -> &'static Value {
    static SHAPE: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    SHAPE.get_or_init(|| {
        serde_json::from_str(include_str!("../../scripts/lib/ses-event.json")).expect("scripts/lib/ses-event.json")
    })
}

/// An SES event of `event_type` (SES's name in the record: `Send`,
/// `Rendering Failure`, ...) as EventBridge delivers it, with its own
/// `section` (None: the record has none).
pub fn ses_event(event_type: &str, claim: Option<Uuid>, section: Option<Value>) -> Value {
    let shape = shape();
    let mut tags = json!({"ses:configuration-set": [CONFIGURATION_SET], "event_type": ["BOOKING_CONFIRMED"]});
    if let Some(claim) = claim {
        tags["claim"] = json!([claim.to_string()]);
    }
    let mut mail = shape["mail"].clone();
    for (key, value) in [
        ("timestamp", json!("2026-11-30T12:00:00.012Z")),
        ("source", json!("Bookings <bookings@example.com>")),
        ("sourceArn", json!("arn:aws:ses:us-east-1:123456789012:identity/example.com")),
        ("sendingAccountId", json!("123456789012")),
        ("messageId", json!("0100018c1d2e3f40-example-000000")),
        ("destination", json!([ALICE])),
        ("tags", tags),
    ] {
        mail[key] = value;
    }
    let mut detail = json!({"eventType": event_type, "mail": mail});
    if let Some(body) = section {
        let name = shape["sections"][event_type].as_str().expect("a section SES names");
        detail[name] = body;
    }
    let mut envelope = shape["envelope"].clone();
    for (key, value) in [
        ("id", json!(Uuid::new_v4().to_string())),
        ("detail-type", shape["detail_types"][event_type].clone()),
        ("account", json!("123456789012")),
        ("time", json!("2026-11-30T12:00:01Z")),
        ("region", json!("us-east-1")),
        ("resources", json!([format!("arn:aws:ses:us-east-1:123456789012:configuration-set/{CONFIGURATION_SET}")])),
        ("detail", detail),
    ] {
        envelope[key] = value;
    }
    envelope
}

pub fn send_event(claim: Uuid) -> Value {
    ses_event("Send", Some(claim), Some(json!({})))
}

pub fn delivery_event(claim: Uuid) -> Value {
    let mut delivery = shape()["delivery"].clone();
    delivery["timestamp"] = json!("2026-11-30T12:00:02.345Z");
    delivery["processingTimeMillis"] = json!(2333);
    delivery["recipients"] = json!([ALICE]);
    ses_event("Delivery", Some(claim), Some(delivery))
}

pub fn bounce_event(claim: Uuid, bounce_type: &str, sub_type: &str) -> Value {
    let mut recipient = shape()["bounced_recipient"].clone();
    recipient["emailAddress"] = json!(ALICE);
    let mut bounce = shape()["bounce"].clone();
    for (key, value) in [
        ("bounceType", json!(bounce_type)),
        ("bounceSubType", json!(sub_type)),
        ("bouncedRecipients", json!([recipient])),
        ("timestamp", json!("2026-11-30T12:00:03.669Z")),
        ("feedbackId", json!("01000157c44f053b-61b59c11-9236-11e6-8f96-7be8aexample-000000")),
    ] {
        bounce[key] = value;
    }
    ses_event("Bounce", Some(claim), Some(bounce))
}

/// A complaint about the claim's message that lists `complained`.
pub fn complaint_event(claim: Uuid, complained: &[&str]) -> Value {
    let complained: Vec<Value> = complained.iter().map(|a| json!({"emailAddress": a})).collect();
    let mut complaint = shape()["complaint"].clone();
    for (key, value) in [
        ("complainedRecipients", json!(complained)),
        ("timestamp", json!("2026-11-30T12:05:00.000Z")),
        ("arrivalDate", json!("2026-11-30T12:04:58.000Z")),
        ("feedbackId", json!("0100015e3a9c3d1e-example")),
        ("complaintFeedbackType", json!("abuse")),
    ] {
        complaint[key] = value;
    }
    ses_event("Complaint", Some(claim), Some(complaint))
}

/// The same event, about a message to `recipient` instead of Alice.
pub fn to_recipient(event: Value, recipient: &str) -> Value {
    serde_json::from_str(&event.to_string().replace(ALICE, recipient)).expect("still JSON")
}
