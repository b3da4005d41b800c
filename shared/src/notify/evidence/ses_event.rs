//! An SES event as EventBridge delivers it, read and checked: from SES in
//! the stack's own account and region ([`Origin`]), in a shape this
//! service reads, or refused ([`Refusal`]) before anything trusts it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::config::settings::{SES_CONFIGURATION_SET, SES_EVENTS_ACCOUNT};
use crate::config::ConfigError;
use crate::notify::mailer::tags;

/// What SES reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Kind {
    Send,
    Delivery,
    Bounce {
        permanent: bool,
        subtype: String,
    },
    /// `complaintFeedbackType` (`abuse`, `not-spam`, ...) and
    /// `complaintSubType` (`OnAccountSuppressionList`: SES sent nothing,
    /// the address was on the account's list), when SES gives them
    /// (<https://docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-firehose-contents.html>).
    Complaint {
        feedback: Option<String>,
        subtype: Option<String>,
    },
    Reject,
    DeliveryDelay,
    RenderingFailure,
}

impl Kind {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Kind::Send => "Send",
            Kind::Delivery => "Delivery",
            Kind::Bounce { .. } => "Bounce",
            Kind::Complaint { .. } => "Complaint",
            Kind::Reject => "Reject",
            Kind::DeliveryDelay => "DeliveryDelay",
            Kind::RenderingFailure => "RenderingFailure",
        }
    }

    /// SES accepted the message for delivery.
    pub(super) fn proves_acceptance(&self) -> bool {
        !matches!(self, Kind::Reject | Kind::RenderingFailure)
    }

    /// The recipient's address should never be mailed again. A `not-spam`
    /// report is the person saying the opposite of a complaint.
    pub(super) fn suppresses(&self) -> bool {
        match self {
            Kind::Bounce { permanent, .. } => *permanent,
            Kind::Complaint { feedback, .. } => feedback.as_deref() != Some(NOT_SPAM),
            _ => false,
        }
    }

    /// A person complained of this message: counted toward its organizer's
    /// pause. Not a `not-spam` report, nor a "complaint" about a message
    /// SES never sent (the address was on the account's suppression list).
    pub fn complained(&self) -> bool {
        matches!(self, Kind::Complaint { feedback, subtype }
            if feedback.as_deref() != Some(NOT_SPAM) && subtype.as_deref() != Some(ON_ACCOUNT_SUPPRESSION_LIST))
    }

    /// What `send_feedback.subtype` records: a bounce's type and subtype; a
    /// complaint's subtype when SES sent nothing, else its feedback type
    /// (V50's trigger counts none of `not-spam` or `OnAccountSuppressionList`).
    pub fn recorded_subtype(&self) -> Option<String> {
        match self {
            Kind::Bounce { permanent, subtype } => {
                Some(format!("{}/{subtype}", if *permanent { "Permanent" } else { "Transient" }))
            }
            Kind::Complaint { subtype: Some(s), .. } if s == ON_ACCOUNT_SUPPRESSION_LIST => Some(s.clone()),
            Kind::Complaint { feedback, .. } => feedback.clone(),
            _ => None,
        }
    }
}

/// A recipient's report that a message is not spam.
pub const NOT_SPAM: &str = "not-spam";
/// A complaint SES records for a message it did not send: the address was
/// on the account's suppression list.
pub const ON_ACCOUNT_SUPPRESSION_LIST: &str = "OnAccountSuppressionList";

/// The account and region whose SES events are accepted: the stack's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub account: String,
    pub region: String,
    /// The stack's configuration set: SES tags every event it publishes
    /// with the set the message was sent through (`ses:configuration-set`).
    pub configuration_set: String,
}

impl Origin {
    /// `SES_EVENTS_ACCOUNT` and the function's `AWS_REGION` (the Lambda
    /// runtime's), checked at cold start.
    pub fn from_env() -> Result<Origin, ConfigError> {
        let name = SES_EVENTS_ACCOUNT.name;
        let account = SES_EVENTS_ACCOUNT.value().ok_or_else(|| {
            ConfigError::new(name, "is not set", "set it to the AWS account whose SES publishes the events (12 digits)")
        })?;
        if !(account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit())) {
            return Err(ConfigError::new(name, format!("{account:?} is not an AWS account id"), "use the 12 digits"));
        }
        let region = crate::config::lambda_region()
            .ok_or_else(|| ConfigError::new("AWS_REGION", "is not set", "set it to the region SES publishes in"))?;
        let configuration_set = SES_CONFIGURATION_SET.value().ok_or_else(|| {
            ConfigError::new(
                SES_CONFIGURATION_SET.name,
                "is not set",
                "set it to the configuration set the poller sends with: only its events are read",
            )
        })?;
        Ok(Origin { account, region, configuration_set })
    }
}

/// Why an event was not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum Refusal {
    /// Not published by SES in this function's account and region: never
    /// trusted, whatever it says (it could be forged).
    #[error("not from this account's SES: {0}")]
    Foreign(String),
    /// From this account's SES, in a shape this service does not read.
    #[error("malformed SES event: {0}")]
    Malformed(String),
}

/// One SES event, read from its JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct SesEvent {
    pub kind: Kind,
    pub message_id: String,
    /// The claim it belongs to, from the `claim` tag (None: not our mail).
    pub claim: Option<Uuid>,
    /// When SES says it happened.
    pub occurred_at: DateTime<Utc>,
    /// The addresses the message was sent to (`mail.destination`).
    pub destination: Vec<String>,
    /// The recipients the event is about (bounced, complained, delivered).
    pub recipients: Vec<String>,
    /// The trace of the request that wrote the message's event (the
    /// `trace` tag), when it is a trace id; only ever logged.
    pub trace_id: Option<String>,
    /// When SES accepted the message (`mail.timestamp`): the second of
    /// SES's clock the event is evidence about.
    pub mail_at: Option<DateTime<Utc>>,
    /// The canary it belongs to, from the `canary` tag.
    pub canary: Option<Uuid>,
}

/// A value from an event, for a log line or a refusal: quoted, and cut
/// short (the event is untrusted until it is read).
pub(super) fn shown(value: Option<&str>) -> String {
    match value {
        None => "(none)".to_string(),
        Some(v) if v.chars().count() > 64 => format!("{:?}...", v.chars().take(64).collect::<String>()),
        Some(v) => format!("{v:?}"),
    }
}

/// The event type an EventBridge `detail-type` names (the template's rule
/// lists the same ones).
fn type_of_detail_type(detail_type: &str) -> Option<&'static str> {
    Some(match detail_type {
        "Email Sent" => "Send",
        "Email Delivered" => "Delivery",
        "Email Bounced" => "Bounce",
        "Email Complaint Received" => "Complaint",
        "Email Rejected" => "Reject",
        "Email Delivery Delayed" => "DeliveryDelay",
        "Email Rendering Failed" => "RenderingFailure",
        _ => return None,
    })
}

/// The address in `Name <address>` or a bare address, lower-cased.
fn address_of(entry: &str) -> String {
    let inner = match (entry.rfind('<'), entry.rfind('>')) {
        (Some(open), Some(close)) if open < close => &entry[open + 1..close],
        _ => entry,
    };
    inner.trim().to_lowercase()
}

/// Reads an SES event as EventBridge delivers it. The envelope must say
/// it comes from SES (`source: aws.ses`) in `origin`'s account and region,
/// and the mail's sending account must be the same: anything else is
/// [`Refusal::Foreign`]. The type is the record's `eventType`, or, where
/// that is absent, the envelope's `detail-type` (the two must agree when
/// both are there). A refused event is logged and dropped, never retried.
pub fn parse(value: &Value, origin: &Origin) -> Result<SesEvent, Refusal> {
    let malformed = |what: String| Refusal::Malformed(what);
    let envelope = |name: &str| value.get(name).and_then(Value::as_str);
    for (name, expected) in [("source", "aws.ses"), ("account", &origin.account), ("region", &origin.region)] {
        if envelope(name) != Some(expected) {
            return Err(Refusal::Foreign(format!("{name} {} (expected {expected:?})", shown(envelope(name)))));
        }
    }
    let event = value.get("detail").filter(|d| d.is_object()).ok_or_else(|| malformed("no detail object".into()))?;
    let mail = event.get("mail").ok_or_else(|| malformed("no mail object".into()))?;
    if let Some(sender) = mail.get("sendingAccountId") {
        if sender.as_str() != Some(&origin.account) {
            let sender = shown(sender.as_str());
            return Err(Refusal::Foreign(format!("mail.sendingAccountId {sender} (expected {:?})", origin.account)));
        }
    }
    // The stack's own configuration set: SES tags each event with the set
    // its message went through. Another set's mail (another application of
    // the account, or one that reuses the claim tag) is not this stack's.
    let set = mail.get("tags").and_then(|t| t.get(tags::CONFIGURATION_SET)).and_then(|v| v.get(0).or(Some(v)));
    if set.and_then(Value::as_str) != Some(origin.configuration_set.as_str()) {
        let set = shown(set.and_then(Value::as_str));
        return Err(Refusal::Foreign(format!("configuration set {set} (expected {:?})", origin.configuration_set)));
    }
    let by_envelope = match envelope("detail-type") {
        None => None,
        Some(t) => {
            Some(type_of_detail_type(t).ok_or_else(|| malformed(format!("unhandled detail-type {}", shown(Some(t)))))?)
        }
    };
    let by_record = event.get("eventType").or_else(|| event.get("notificationType")).and_then(Value::as_str);
    let type_name =
        match (by_record.map(|t| if t == "Rendering Failure" { "RenderingFailure" } else { t }), by_envelope) {
            (Some(record), Some(envelope)) if record != envelope => {
                return Err(malformed(format!("eventType {} under detail-type of {envelope}", shown(Some(record)))));
            }
            (Some(record), _) => record,
            (None, Some(envelope)) => envelope,
            (None, None) => return Err(malformed("no eventType and no detail-type".into())),
        };
    let message_id =
        mail.get("messageId").and_then(Value::as_str).ok_or_else(|| malformed("no mail.messageId".into()))?.to_string();
    let section = |name: &str| event.get(name).cloned().unwrap_or(Value::Null);
    let (kind, body) = match type_name {
        "Send" => (Kind::Send, section("send")),
        "Delivery" => (Kind::Delivery, section("delivery")),
        "Bounce" => {
            let b = section("bounce");
            let permanent = b.get("bounceType").and_then(Value::as_str) == Some("Permanent");
            let subtype = b.get("bounceSubType").and_then(Value::as_str).unwrap_or("Undetermined").to_string();
            (Kind::Bounce { permanent, subtype }, b)
        }
        "Complaint" => {
            let c = section("complaint");
            let text = |key: &str| c.get(key).and_then(Value::as_str).map(str::to_string);
            (Kind::Complaint { feedback: text("complaintFeedbackType"), subtype: text("complaintSubType") }, c)
        }
        "Reject" => (Kind::Reject, section("reject")),
        "DeliveryDelay" => (Kind::DeliveryDelay, section("deliveryDelay")),
        "RenderingFailure" => (Kind::RenderingFailure, section("failure")),
        other => return Err(malformed(format!("unhandled eventType {}", shown(Some(other))))),
    };
    let stamp = body
        .get("timestamp")
        .or_else(|| mail.get("timestamp"))
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no timestamp".into()))?;
    let occurred_at = DateTime::parse_from_rfc3339(stamp)
        .map_err(|e| malformed(format!("timestamp {}: {e}", shown(Some(stamp)))))?
        .with_timezone(&Utc);
    let tag_uuid = |name: &str| -> Result<Option<Uuid>, Refusal> {
        match mail.get("tags").and_then(|t| t.get(name)) {
            None => Ok(None),
            Some(v) => {
                let raw = v
                    .get(0)
                    .or(Some(v))
                    .and_then(Value::as_str)
                    .ok_or_else(|| malformed(format!("the {name} tag is not a string")))?;
                Ok(Some(
                    Uuid::parse_str(raw).map_err(|e| malformed(format!("the {name} tag {}: {e}", shown(Some(raw)))))?,
                ))
            }
        }
    };
    let claim = tag_uuid(tags::CLAIM)?;
    let canary = tag_uuid(tags::CANARY)?;
    let mail_at = match mail.get("timestamp").and_then(Value::as_str) {
        None => None,
        Some(stamp) => Some(
            DateTime::parse_from_rfc3339(stamp)
                .map_err(|e| malformed(format!("mail.timestamp {}: {e}", shown(Some(stamp)))))?
                .with_timezone(&Utc),
        ),
    };
    let trace_id = mail
        .get("tags")
        .and_then(|t| t.get(tags::TRACE))
        .and_then(|v| v.get(0).or(Some(v)))
        .and_then(Value::as_str)
        .filter(|t| t.len() == 32 && t.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .map(str::to_string);
    let destination = mail
        .get("destination")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(address_of).collect())
        .unwrap_or_default();
    let addresses = |list: &str, field: &str| -> Vec<String> {
        body.get(list)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter().filter_map(|r| r.get(field).or(Some(r)).and_then(Value::as_str)).map(address_of).collect()
            })
            .unwrap_or_default()
    };
    let recipients = match kind {
        Kind::Bounce { .. } => addresses("bouncedRecipients", "emailAddress"),
        Kind::Complaint { .. } => addresses("complainedRecipients", "emailAddress"),
        Kind::Delivery => addresses("recipients", "emailAddress"),
        Kind::DeliveryDelay => addresses("delayedRecipients", "emailAddress"),
        _ => Vec::new(),
    };
    Ok(SesEvent { kind, message_id, claim, occurred_at, destination, recipients, trace_id, mail_at, canary })
}
