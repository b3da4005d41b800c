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
//! - Nothing is trusted before it is checked: the envelope must come from
//!   SES in the stack's own account and region ([`Origin`]), and the
//!   event must be about the claim's own message (the message id SES gave
//!   the send, when it answered; the claim's recipient as the only
//!   destination). A complaint or bounce suppresses the claim's recipient
//!   alone, whatever else it lists.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

mod event;

use event::shown;
pub use event::{parse, Kind, Origin, Refusal, SesEvent};

use super::sends::{self, ConfirmedBy};
use super::{evidence, unknown};
use crate::booking::domain::EmailAddress;
use crate::db::DbResult;
use crate::telemetry::emf::{self, Unit};
use crate::telemetry::mask_email;

/// Message tags every send carries (SES allows `[A-Za-z0-9_-]` in names and
/// values; a hyphenated UUID passes).
pub const TAG_CLAIM: &str = "claim";
pub const TAG_EVENT: &str = "event_id";
pub const TAG_TYPE: &str = "event_type";
/// The trace id of the request that wrote the event (32 hex digits).
pub const TAG_TRACE: &str = "trace";
/// The tag SES itself puts on every event it publishes: the configuration
/// set the message was sent through.
pub const TAG_CONFIGURATION_SET: &str = "ses:configuration-set";

/// The newest verdict SES gave about the send `s` (an outer row), as a
/// lateral subquery: `kind`, `subtype`, `occurred_at` of its latest
/// Delivery, Bounce, Complaint, Reject or RenderingFailure (a Send or a
/// DeliveryDelay says nothing about where the message ended). It reads the
/// primary key.
pub const VERDICT_OF_SEND: &str = "SELECT f.kind, f.subtype, f.occurred_at FROM send_feedback f \
      WHERE f.send_id = s.id AND f.kind IN ('Delivery', 'Bounce', 'Complaint', 'Reject', 'RenderingFailure') \
      ORDER BY f.occurred_at DESC LIMIT 1";

/// Retention: deletes up to `limit` feedback rows received more than
/// `max_age` ago whose send no longer exists (retention deleted it, after
/// its event). While the send exists, what SES said about it stays: the
/// API shows it (`notify::tracking`).
pub async fn purge(client: &impl GenericClient, max_age: std::time::Duration, limit: i64) -> DbResult<u64> {
    const SQL: &str = const_format::formatcp!(
        "DELETE FROM send_feedback WHERE ctid IN ( \
             SELECT f.ctid FROM send_feedback f \
              WHERE f.received_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS ({}f.send_id) LIMIT $2)",
        sends::SEND_WITH_ID
    );
    Ok(client.execute(SQL, &[&max_age.as_secs_f64(), &limit]).await?)
}

/// Why an event about a claim is not about that claim's message: the
/// message id SES gave the send differs, or the message did not go to the
/// claim's recipient alone. None: it matches.
fn mismatch(target: &sends::outcome::FeedbackTarget, event: &SesEvent) -> Option<&'static str> {
    if target.message_id.as_deref().is_some_and(|id| id != event.message_id) {
        return Some("its message id is not the one SES gave the send");
    }
    let recipient = target.recipient.to_lowercase();
    if event.destination.is_empty() || event.destination.iter().any(|d| *d != recipient) {
        return Some("its message was not sent to the claim's recipient alone");
    }
    None
}

/// What recording an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Recorded {
    /// New feedback for a known claim.
    Recorded { confirmed: bool, suppressed: u32 },
    /// An event of a canary (a message to SES's mailbox simulator): it
    /// moved the watermark, and nothing else.
    Canary,
    /// About a claim that was resent on SES's evidence: it came after the
    /// resend, so the recipient very likely got two (the residual risk of
    /// resending on evidence, reported loudly).
    AfterResend,
    /// Already recorded (an at-least-once repeat).
    Duplicate,
    /// Not our mail, or its claim is gone: acknowledged, nothing to do.
    Unmatched,
    /// It names a claim but not that claim's message (another message id,
    /// another recipient): dropped with a warning, nothing changed.
    Mismatched,
}

/// Records one event: that SES's stream got this far (the watermark,
/// `evidence`), then in one transaction the feedback row, the confirmation
/// of its claim (or its refusal), and any suppression.
pub async fn record(client: &mut deadpool_postgres::Client, event: &SesEvent) -> DbResult<Recorded> {
    // Every event of the stack's configuration set is evidence of how far
    // the stream has got, whoever's mail it is about.
    if let Some(mail_at) = event.mail_at {
        evidence::observe(&*client, mail_at).await?;
    }
    if let Some(canary) = event.canary {
        let ours = evidence::canary_seen(&*client, canary).await?;
        tracing::info!(%canary, ours, kind = event.kind.name(), "canary event: the watermark moved");
        return Ok(Recorded::Canary);
    }
    let Some(claim) = event.claim else {
        tracing::info!(message_id = %event.message_id, kind = event.kind.name(), "SES event for untagged mail ignored");
        return Ok(Recorded::Unmatched);
    };
    let tx = client.transaction().await?;
    let Some(target) = sends::outcome::lock_for_feedback(&tx, claim).await? else {
        if unknown::resent_on_evidence(&tx, claim).await? {
            tracing::error!(%claim, kind = event.kind.name(), message_id = %event.message_id,
                "SES event for a send resent on SES's evidence: it came after the resend, so the recipient very \
                 likely got two (raise FEEDBACK_GRACE_SECS if this repeats)");
            return Ok(Recorded::AfterResend);
        }
        tracing::info!(%claim, kind = event.kind.name(), "SES event for a claim that no longer exists ignored");
        return Ok(Recorded::Unmatched);
    };
    if let Some(reason) = mismatch(&target, event) {
        tracing::warn!(%claim, kind = event.kind.name(), message_id = %shown(Some(&event.message_id)), reason,
            "SES event that does not match its claim dropped");
        return Ok(Recorded::Mismatched);
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
    // A rejection settles an ambiguous send too: SES had it and refused it.
    if !event.kind.proves_acceptance() {
        let reason = format!("SES reported {} after the call", event.kind.name());
        sends::outcome::refuse(&tx, claim, &reason).await?;
    }
    let mut suppressed = 0;
    if event.kind.suppresses() {
        // A bounce stops the address that bounced, exactly: anyone can make
        // `v+x@` bounce at a domain that refuses sub-addresses, and that
        // says nothing of `v@`. A complaint, which only the person can
        // make, stops their mailbox: every spelling of it.
        let (reason, covers) = match &subtype {
            Some(subtype) => (format!("bounced ({subtype})"), Covers::Address),
            None => ("complained".to_string(), Covers::Mailbox),
        };
        // Only the claim's own recipient, and only when the event names it:
        // whatever other addresses an event lists are never suppressed.
        let recipient = target.recipient.to_lowercase();
        if event.recipients.contains(&recipient) {
            let mailbox = mailbox_of(&recipient);
            suppressed += tx
                .execute(
                    "INSERT INTO suppressed_addresses AS s (email, mailbox, covers, reason, send_id) \
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (email) DO UPDATE \
                     SET covers = excluded.covers, mailbox = excluded.mailbox, reason = excluded.reason, \
                         send_id = excluded.send_id \
                     WHERE s.covers = 'address' AND excluded.covers = 'mailbox'",
                    &[&recipient, &mailbox, &covers.as_str(), &reason, &claim],
                )
                .await? as u32;
            tracing::warn!(recipient = %mask_email(&recipient), kind = event.kind.name(), covers = covers.as_str(), "address suppressed");
        } else {
            tracing::warn!(%claim, kind = event.kind.name(), "the event does not name the claim's recipient; nothing suppressed");
        }
    }
    tx.commit().await?;
    if confirmed {
        tracing::info!(%claim, kind = event.kind.name(), "send confirmed by its SES event");
    }
    Ok(Recorded::Recorded { confirmed, suppressed })
}

/// How many of the latest `sample` messages SES accepted by its own
/// answer, claimed between `window` and `grace` ago, still have no event
/// of SES's about them: its stream is behind, stopped, or losing events,
/// and until they come nothing may be resent on its evidence (an event
/// held back that long could be an ambiguous send's too).
pub async fn behind(client: &impl GenericClient, grace: Duration, window: Duration, sample: i64) -> DbResult<i64> {
    const SQL: &str = const_format::formatcp!(
        "SELECT count(*) FROM ({}) s WHERE NOT EXISTS (SELECT 1 FROM send_feedback f WHERE f.send_id = s.id)",
        sends::ANSWERED_BY_SES
    );
    let (grace, window) = (grace.as_secs_f64(), (grace + window).as_secs_f64());
    Ok(client.query_one(SQL, &[&grace, &window, &sample]).await?.get(0))
}

/// The mailbox an address reaches ([`EmailAddress::mailbox`]); an address
/// that does not parse is its own (lower-cased) mailbox.
fn mailbox_of(email: &str) -> String {
    EmailAddress::parse(email).map(|e| e.mailbox()).unwrap_or_else(|_| email.to_lowercase())
}

/// What a suppression stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Covers {
    /// The address that bounced, spelled as it was.
    Address,
    /// Every spelling of the mailbox of the person who complained.
    Mailbox,
}

impl Covers {
    fn as_str(self) -> &'static str {
        match self {
            Covers::Address => "address",
            Covers::Mailbox => "mailbox",
        }
    }
}

/// Why an address is suppressed, if it is: it bounced, spelled exactly so,
/// or a complaint came from any spelling of its mailbox.
pub async fn suppression(client: &impl GenericClient, email: &str) -> DbResult<Option<String>> {
    Ok(suppressions_of(client, &[email]).await?.remove(email))
}

/// [`suppression`] for many addresses, in one statement: the suppressed
/// ones, with why (the earliest reason).
pub async fn suppressions_of(
    client: &impl GenericClient,
    emails: &[&str],
) -> DbResult<std::collections::HashMap<String, String>> {
    if emails.is_empty() {
        return Ok(Default::default());
    }
    let lowered: Vec<String> = emails.iter().map(|e| e.to_lowercase()).collect();
    let mailboxes: Vec<String> = emails.iter().map(|e| mailbox_of(e)).collect();
    let sql = "SELECT email, mailbox, covers, reason FROM suppressed_addresses \
               WHERE email = ANY($1) OR (covers = 'mailbox' AND mailbox = ANY($2)) ORDER BY created_at";
    let rows = client.query(&client.prepare_cached(sql).await?, &[&lowered, &mailboxes]).await?;
    let mut why = std::collections::HashMap::new();
    for (email, (lowered, mailbox)) in emails.iter().zip(lowered.iter().zip(&mailboxes)) {
        let first = rows.iter().find(|r| {
            r.get::<_, &str>(0) == lowered || (r.get::<_, &str>(2) == "mailbox" && r.get::<_, &str>(1) == mailbox)
        });
        if let Some(r) = first {
            why.insert(email.to_string(), r.get::<_, String>(3));
        }
    }
    Ok(why)
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

/// Lifts what stops mail to an address (it was fixed, or the complaint was
/// a mistake): its own bounce, and a complaint from any spelling of its
/// mailbox; returns the earliest that was removed, if any was.
pub async fn unsuppress(client: &impl GenericClient, email: &str, by: &str) -> DbResult<Option<Suppression>> {
    let rows = client
        .query(
            "DELETE FROM suppressed_addresses WHERE email = $1 OR (covers = 'mailbox' AND mailbox = $2) \
             RETURNING email, reason, send_id, created_at",
            &[&email.to_lowercase(), &mailbox_of(email)],
        )
        .await?;
    let removed = rows
        .iter()
        .map(|r| Suppression { email: r.get(0), reason: r.get(1), send_id: r.get(2), created_at: r.get(3) })
        .min_by_key(|s| s.created_at);
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
    /// Not an event this service reads, or not from this account's SES:
    /// logged and acknowledged, so it never poisons a batch or loops
    /// through retries, and changes nothing.
    Refused(Refusal),
}

/// Reads and records one delivered event, accepted only from `origin`'s
/// SES. Only a database error is an error (the invocation fails and
/// EventBridge retries it).
pub async fn handle(pool: &deadpool_postgres::Pool, origin: &Origin, value: &Value) -> DbResult<Handled> {
    let event = match parse(value, origin) {
        Ok(event) => event,
        Err(refusal) => {
            let metric = match refusal {
                Refusal::Foreign(_) => "ForeignSesEvents",
                Refusal::Malformed(_) => "MalformedSesEvents",
            };
            tracing::error!(reason = %refusal, "SES event refused: acknowledged and dropped");
            emf::emit("ses-events", &[(metric, 1.0, Unit::Count)]);
            return Ok(Handled::Refused(refusal));
        }
    };
    use tracing::Instrument;
    let span = tracing::info_span!(
        "ses_event",
        kind = event.kind.name(),
        claim = %event.claim.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
        link_trace_id = event.trace_id.as_deref().unwrap_or("-"),
    );
    async {
        let mut client = pool.get().await?;
        let recorded = record(&mut client, &event).await?;
        tracing::info!(?recorded, "SES event handled");
        emf::emit("ses-events", &metrics(&event.kind, &recorded));
        Ok(Handled::Recorded(recorded))
    }
    .instrument(span)
    .await
}

/// One event as EMF metrics (namespace `BookingOutbox`, function
/// `ses-events`): what SES reported, counted once (a repeat counts
/// nothing), for the template's bounce-rate and complaint-rate alarms.
pub fn metrics(kind: &Kind, recorded: &Recorded) -> Vec<(&'static str, f64, Unit)> {
    let (confirmed, suppressed) = match *recorded {
        Recorded::Recorded { confirmed, suppressed } => (confirmed, suppressed),
        Recorded::Duplicate => return vec![("RepeatedSesEvents", 1.0, Unit::Count)],
        Recorded::Canary => return vec![("CanaryEvents", 1.0, Unit::Count)],
        Recorded::AfterResend => return vec![("EventsAfterResend", 1.0, Unit::Count)],
        Recorded::Unmatched => return vec![("UnmatchedSesEvents", 1.0, Unit::Count)],
        Recorded::Mismatched => return vec![("MismatchedSesEvents", 1.0, Unit::Count)],
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
