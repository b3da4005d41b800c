//! Delivery feedback from SES's own event stream: every send carries its
//! claim's id as a message tag, SES publishes an event per message (`Send`,
//! `Delivery`, `Bounce`, `Complaint`, `Reject`, `DeliveryDelay`,
//! `RenderingFailure`) with those tags, and this module records each one
//! against its claim. Every statement on `send_feedback` and
//! `suppressed_addresses` lives here; the claim itself changes only
//! through `sends`.
//!
//! - Any event but `Reject` and `RenderingFailure` proves SES accepted the
//!   message, so a claim still CLAIMED or UNKNOWN becomes SENT, confirmed
//!   by [`ConfirmedBy::SesEvent`] (`sends::outcome::confirm`): an ambiguous
//!   send is settled without an operator and without any risk of a
//!   duplicate.
//! - Events arrive at least once and in any order: each is recorded once
//!   (keyed by claim, type and SES timestamp), and a confirmation only ever
//!   moves a claim forward, so a Delivery before its Send, or the same
//!   Bounce twice, changes nothing the second time.
//! - A permanent bounce or a complaint suppresses the address: later sends
//!   to it are settled FAILED without calling SES.
//! - An event for mail this service did not tag, or for a claim retention
//!   has already deleted, is acknowledged and logged, never retried.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::sends::{self, ConfirmedBy};
use crate::db::DbResult;
use crate::telemetry::emf::{self, Unit};
use crate::telemetry::mask_email;

/// Message tags every send carries (SES allows `[A-Za-z0-9_-]` in names and
/// values; a hyphenated UUID passes).
pub const TAG_CLAIM: &str = "claim";
pub const TAG_EVENT: &str = "event_id";
pub const TAG_TYPE: &str = "event_type";

/// What SES reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Kind {
    Send,
    Delivery,
    Bounce { permanent: bool, subtype: String },
    Complaint,
    Reject,
    DeliveryDelay,
    RenderingFailure,
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Send => "Send",
            Kind::Delivery => "Delivery",
            Kind::Bounce { .. } => "Bounce",
            Kind::Complaint => "Complaint",
            Kind::Reject => "Reject",
            Kind::DeliveryDelay => "DeliveryDelay",
            Kind::RenderingFailure => "RenderingFailure",
        }
    }

    /// SES accepted the message for delivery.
    fn proves_acceptance(&self) -> bool {
        !matches!(self, Kind::Reject | Kind::RenderingFailure)
    }

    /// The recipient's address should never be mailed again.
    fn suppresses(&self) -> bool {
        matches!(self, Kind::Bounce { permanent: true, .. } | Kind::Complaint)
    }
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
    /// The recipients the event is about (bounced, complained, delivered).
    pub recipients: Vec<String>,
}

/// Reads an SES event: the EventBridge envelope (`detail` holds the
/// event), or the event itself (an SNS message or a test). The error says
/// what is missing; such an event is logged and dropped, never retried.
pub fn parse(value: &Value) -> Result<SesEvent, String> {
    let event = value.get("detail").filter(|d| d.is_object()).unwrap_or(value);
    let type_name = event
        .get("eventType")
        .or_else(|| event.get("notificationType"))
        .and_then(Value::as_str)
        .ok_or("no eventType")?;
    let mail = event.get("mail").ok_or("no mail object")?;
    let message_id = mail.get("messageId").and_then(Value::as_str).ok_or("no mail.messageId")?.to_string();
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
        "Complaint" => (Kind::Complaint, section("complaint")),
        "Reject" => (Kind::Reject, section("reject")),
        "DeliveryDelay" => (Kind::DeliveryDelay, section("deliveryDelay")),
        "Rendering Failure" | "RenderingFailure" => (Kind::RenderingFailure, section("failure")),
        other => return Err(format!("unhandled eventType {other:?}")),
    };
    let stamp =
        body.get("timestamp").or_else(|| mail.get("timestamp")).and_then(Value::as_str).ok_or("no timestamp")?;
    let occurred_at =
        DateTime::parse_from_rfc3339(stamp).map_err(|e| format!("timestamp {stamp:?}: {e}"))?.with_timezone(&Utc);
    let claim = match mail.get("tags").and_then(|t| t.get(TAG_CLAIM)) {
        None => None,
        Some(v) => {
            let raw = v.get(0).or(Some(v)).and_then(Value::as_str).ok_or("the claim tag is not a string")?;
            Some(Uuid::parse_str(raw).map_err(|e| format!("the claim tag {raw:?}: {e}"))?)
        }
    };
    let addresses = |list: &str, field: &str| -> Vec<String> {
        body.get(list)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|r| r.get(field).or(Some(r)).and_then(Value::as_str))
                    .map(str::to_lowercase)
                    .collect()
            })
            .unwrap_or_default()
    };
    let recipients = match kind {
        Kind::Bounce { .. } => addresses("bouncedRecipients", "emailAddress"),
        Kind::Complaint => addresses("complainedRecipients", "emailAddress"),
        Kind::Delivery => addresses("recipients", "emailAddress"),
        Kind::DeliveryDelay => addresses("delayedRecipients", "emailAddress"),
        _ => Vec::new(),
    };
    Ok(SesEvent { kind, message_id, claim, occurred_at, recipients })
}

/// What recording an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Recorded {
    /// New feedback for a known claim.
    Recorded { confirmed: bool, suppressed: u32 },
    /// Already recorded (an at-least-once repeat).
    Duplicate,
    /// Not our mail, or its claim is gone: acknowledged, nothing to do.
    Unmatched,
}

/// Records one event in one transaction: the feedback row, the
/// confirmation of its claim, and any suppression.
pub async fn record(client: &mut deadpool_postgres::Client, event: &SesEvent) -> DbResult<Recorded> {
    let Some(claim) = event.claim else {
        tracing::info!(message_id = %event.message_id, kind = event.kind.name(), "SES event for untagged mail ignored");
        return Ok(Recorded::Unmatched);
    };
    let tx = client.transaction().await?;
    if sends::outcome::lock_for_feedback(&tx, claim).await?.is_none() {
        tracing::info!(%claim, kind = event.kind.name(), "SES event for a claim that no longer exists ignored");
        return Ok(Recorded::Unmatched);
    }
    let subtype = match &event.kind {
        Kind::Bounce { permanent, subtype } => {
            Some(format!("{}/{subtype}", if *permanent { "Permanent" } else { "Transient" }))
        }
        _ => None,
    };
    let inserted = tx
        .execute(
            "INSERT INTO send_feedback (send_id, kind, subtype, occurred_at, provider_message_id) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (send_id, kind, occurred_at) DO NOTHING",
            &[&claim, &event.kind.name(), &subtype, &event.occurred_at, &event.message_id],
        )
        .await?;
    if inserted == 0 {
        return Ok(Recorded::Duplicate);
    }
    let confirmed = event.kind.proves_acceptance()
        && sends::outcome::confirm(&tx, claim, &event.message_id, ConfirmedBy::SesEvent).await?;
    let mut suppressed = 0;
    if event.kind.suppresses() {
        let reason = match &subtype {
            Some(subtype) => format!("bounced ({subtype})"),
            None => "complained".to_string(),
        };
        for address in &event.recipients {
            suppressed += tx
                .execute(
                    "INSERT INTO suppressed_addresses (email, reason, send_id) VALUES ($1, $2, $3) \
                     ON CONFLICT (email) DO NOTHING",
                    &[address, &reason, &claim],
                )
                .await? as u32;
            tracing::warn!(recipient = %mask_email(address), kind = event.kind.name(), "address suppressed");
        }
    }
    tx.commit().await?;
    if confirmed {
        tracing::info!(%claim, kind = event.kind.name(), "send confirmed by its SES event");
    }
    Ok(Recorded::Recorded { confirmed, suppressed })
}

/// Why an address is suppressed, if it is.
pub async fn suppression(client: &impl GenericClient, email: &str) -> DbResult<Option<String>> {
    Ok(suppressions_of(client, &[email]).await?.remove(email))
}

/// [`suppression`] for many addresses, in one statement: the suppressed
/// ones, with why.
pub async fn suppressions_of(
    client: &impl GenericClient,
    emails: &[&str],
) -> DbResult<std::collections::HashMap<String, String>> {
    if emails.is_empty() {
        return Ok(Default::default());
    }
    let sql = "SELECT email, reason FROM suppressed_addresses WHERE email = ANY($1)";
    let rows = client.query(&client.prepare_cached(sql).await?, &[&emails]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// A suppressed address, for operators.
#[derive(Debug, Clone, Serialize)]
pub struct Suppression {
    pub email: String,
    pub reason: String,
    /// The send whose bounce or complaint suppressed it.
    pub send_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// Suppressed addresses, newest first.
pub async fn suppressions(client: &impl GenericClient, limit: i64) -> DbResult<Vec<Suppression>> {
    let rows = client
        .query(
            "SELECT email, reason, send_id, created_at FROM suppressed_addresses ORDER BY created_at DESC LIMIT $1",
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Suppression { email: r.get(0), reason: r.get(1), send_id: r.get(2), created_at: r.get(3) })
        .collect())
}

/// Lifts a suppression (the address was fixed, or the complaint was a
/// mistake); returns what was removed, if the address was suppressed.
pub async fn unsuppress(client: &impl GenericClient, email: &str, by: &str) -> DbResult<Option<Suppression>> {
    let row = client
        .query_opt(
            "DELETE FROM suppressed_addresses WHERE email = lower($1) RETURNING email, reason, send_id, created_at",
            &[&email],
        )
        .await?;
    let removed =
        row.map(|r| Suppression { email: r.get(0), reason: r.get(1), send_id: r.get(2), created_at: r.get(3) });
    if let Some(s) = &removed {
        tracing::warn!(recipient = %mask_email(&s.email), reason = %s.reason, %by, "suppression removed");
    }
    Ok(removed)
}

/// Feedback of one send, oldest first: `(kind, subtype, occurred_at)`.
pub async fn of_send(
    client: &impl GenericClient,
    send_id: Uuid,
) -> DbResult<Vec<(String, Option<String>, DateTime<Utc>)>> {
    let rows = client
        .query(
            "SELECT kind, subtype, occurred_at FROM send_feedback WHERE send_id = $1 ORDER BY occurred_at, kind",
            &[&send_id],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
}

/// What the feedback function did with one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Handled {
    Recorded(Recorded),
    /// Not an SES event this service can read: logged and acknowledged, so
    /// it never poisons a batch or loops through retries.
    Malformed(String),
}

/// Reads and records one delivered event. Only a database error is an
/// error (the invocation fails and EventBridge retries it).
pub async fn handle(pool: &deadpool_postgres::Pool, value: &Value) -> DbResult<Handled> {
    let event = match parse(value) {
        Ok(event) => event,
        Err(reason) => {
            tracing::error!(%reason, "malformed SES event acknowledged and dropped");
            emf::emit("ses-events", &[("MalformedSesEvents", 1.0, Unit::Count)]);
            return Ok(Handled::Malformed(reason));
        }
    };
    let mut client = pool.get().await?;
    let recorded = record(&mut client, &event).await?;
    emf::emit("ses-events", &metrics(&event.kind, &recorded));
    Ok(Handled::Recorded(recorded))
}

/// One event as EMF metrics (namespace `BookingOutbox`, function
/// `ses-events`): what SES reported, counted once (a repeat counts
/// nothing), for the template's bounce-rate and complaint-rate alarms.
pub fn metrics(kind: &Kind, recorded: &Recorded) -> Vec<(&'static str, f64, Unit)> {
    let (confirmed, suppressed) = match *recorded {
        Recorded::Recorded { confirmed, suppressed } => (confirmed, suppressed),
        Recorded::Duplicate => return vec![("RepeatedSesEvents", 1.0, Unit::Count)],
        Recorded::Unmatched => return vec![("UnmatchedSesEvents", 1.0, Unit::Count)],
    };
    let one = |yes: bool| if yes { 1.0 } else { 0.0 };
    vec![
        ("SesSendEvents", one(*kind == Kind::Send), Unit::Count),
        ("Delivered", one(*kind == Kind::Delivery), Unit::Count),
        ("Bounced", one(matches!(kind, Kind::Bounce { permanent: true, .. })), Unit::Count),
        ("TransientBounced", one(matches!(kind, Kind::Bounce { permanent: false, .. })), Unit::Count),
        ("Complained", one(*kind == Kind::Complaint), Unit::Count),
        ("Rejected", one(*kind == Kind::Reject), Unit::Count),
        ("ConfirmedBySesEvent", one(confirmed), Unit::Count),
        ("Suppressed", suppressed as f64, Unit::Count),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SES accepts `[A-Za-z0-9_-]` in tag names and values.
    fn ses_safe(s: &str) -> bool {
        !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn claim_ids_and_tag_names_pass_the_ses_tag_charset() {
        for name in [TAG_CLAIM, TAG_EVENT, TAG_TYPE] {
            assert!(ses_safe(name), "{name}");
        }
        for _ in 0..100 {
            assert!(ses_safe(&Uuid::now_v7().to_string()));
        }
        assert!(ses_safe("BOOKING_CONFIRMED"));
    }

    #[test]
    fn each_event_is_counted_once_under_its_metric() {
        let value = |m: &[(&str, f64, Unit)], name: &str| m.iter().find(|(n, ..)| *n == name).map(|(_, v, _)| *v);
        let new = Recorded::Recorded { confirmed: true, suppressed: 1 };
        let hard = Kind::Bounce { permanent: true, subtype: "General".into() };
        let m = metrics(&hard, &new);
        assert_eq!((value(&m, "Bounced"), value(&m, "TransientBounced")), (Some(1.0), Some(0.0)));
        assert_eq!((value(&m, "ConfirmedBySesEvent"), value(&m, "Suppressed")), (Some(1.0), Some(1.0)));
        assert_eq!(value(&metrics(&Kind::Delivery, &new), "Delivered"), Some(1.0));
        assert_eq!(value(&metrics(&Kind::Complaint, &new), "Complained"), Some(1.0));
        let repeat = metrics(&Kind::Delivery, &Recorded::Duplicate);
        assert_eq!((value(&repeat, "Delivered"), value(&repeat, "RepeatedSesEvents")), (None, Some(1.0)));
    }
}
