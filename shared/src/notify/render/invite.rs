//! The invitation email: a MIME message (mail-builder) with a plain-text
//! part, an HTML part and a `text/calendar` part (icalendar) that calendar
//! clients understand.
//!
//! - Per iTIP (RFC 5546): `METHOD:REQUEST` with every attendee for the
//!   meeting as it stands (an invitation or an update), `METHOD:CANCEL` for
//!   a cancelled one, and a `CANCEL` listing only the recipient for an
//!   attendee an update removed; the MIME `method=` matches.
//! - `UID` is the booking's, so every message about one booking updates
//!   the same calendar entry; `SEQUENCE` is the booking version minus one, so
//!   an update or cancellation replaces the earlier invite.
//!
//! Titles and names are untrusted. They were refused at the API edge if they
//! held control characters, and here they only ever reach a header through
//! mail-builder's encoders (RFC 2047 for non-ASCII), never by string
//! concatenation, so no input can add or split a header.

use chrono::{DateTime, Utc};
use mail_builder::headers::address::Address;
use mail_builder::mime::MimePart;
use mail_builder::MessageBuilder;
use sha2::{Digest, Sha256};

use super::calendar::ics;
use super::card::{time_of, Card};
use super::page;
use crate::booking::domain::EmailAddress;
use crate::booking::events::Notice;
use crate::notify::notification::Notification;

/// The verified SES identity the mail is sent from.
#[derive(Debug, Clone)]
pub struct Sender {
    pub name: String,
    pub email: EmailAddress,
}

impl Sender {
    /// Parses `Name <address>` or a bare address.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        let (name, addr) = match (raw.rfind('<'), raw.ends_with('>')) {
            (Some(i), true) => (raw[..i].trim().trim_matches('"').trim(), &raw[i + 1..raw.len() - 1]),
            _ => ("", raw),
        };
        if name.chars().any(char::is_control) {
            return Err("the sender name must not contain control characters".into());
        }
        let email = EmailAddress::parse(addr.trim()).map_err(|e| format!("the sender address {}", e.problem))?;
        let name = if name.is_empty() { "Bookings".to_string() } else { name.to_string() };
        Ok(Self { name, email })
    }
}

/// When the message was written, its `Date`: when the change it tells of
/// was committed (its event's UUIDv7), a reminder when it fell due. Not
/// when it was claimed, so a retry, an operator's resend or a resend on
/// SES's evidence renders the same bytes as the first claim did, but for
/// the claim's own header. One claimed more than three hours later (a
/// backlog, a replay of a dead-lettered event) is dated by its claim: a
/// Date hours old is what spam filters score (SpamAssassin's
/// DATE_IN_PAST_03_06 and up); and never after its claim.
fn dated(n: &Notification) -> DateTime<Utc> {
    let committed = time_of(n.event_id).unwrap_or_else(Utc::now);
    let written = match (n.notice, n.payload.reminder) {
        (Notice::Reminder, Some(r)) => {
            committed.max(n.payload.booking.range.start() - chrono::Duration::seconds(r.secs().into()))
        }
        _ => committed,
    };
    match n.claim.and_then(time_of) {
        Some(claimed) if claimed - written > chrono::Duration::hours(3) => claimed,
        Some(claimed) => written.min(claimed),
        None => written,
    }
}

/// A Message-ID derived from the claim's key (event, recipient): the same
/// for every claim of one recipient's notification (a released claim's
/// retry, an operator's resend), so through SMTP a provider or mailbox
/// that de-duplicates on Message-ID drops a repeat, and support finds the
/// send: the event and a digest of the recipient name the claim's key.
/// SES overwrites it with its own (docs/invitation.md).
pub fn message_id(n: &Notification, sender: &Sender) -> String {
    let digest = Sha256::digest(n.recipient.email.as_str().as_bytes());
    let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let domain = sender.email.as_str().rsplit('@').next().unwrap_or("booking-outbox.invalid");
    format!("{}.{short}@{domain}", n.event_id)
}

/// A canary's message (`notify::evidence::watermark`): to `to`, from `sender`, a line
/// of text naming it; never an invitation.
pub fn canary(id: uuid::Uuid, to: &str, sender: &Sender) -> Vec<u8> {
    MessageBuilder::new()
        .from(Address::new_address(Some(sender.name.clone()), sender.email.as_str().to_string()))
        .to(Address::new_address(None::<String>, to.to_string()))
        .subject("Booking outbox canary")
        .message_id(format!(
            "canary.{id}@{}",
            sender.email.as_str().rsplit('@').next().unwrap_or("booking-outbox.invalid")
        ))
        .date(Utc::now().timestamp())
        .text_body(format!("canary {id}: its SES events move the feedback watermark"))
        .write_to_vec()
        .expect("writing to a Vec cannot fail")
}

/// The raw RFC 5322 message for one recipient.
/// A title or a name as a header carries it. mail-builder writes ASCII
/// text raw, so `=?utf-8?B?4oCu?=` in a title or a name (ASCII: it passed
/// the invisible-character checks) would be decoded by the reader's client
/// into what it encodes, a bidi override say. Text holding `=?` is always
/// encoded instead: mail-builder encodes text that ends in a space, so such
/// text gets one, and the client shows `=?...?=` as typed (and a trailing
/// space no one sees). `header_text_holding_an_encoded_word_is_encoded`
/// checks the bytes.
fn header_text(text: &str) -> String {
    if text.contains("=?") {
        format!("{text} ")
    } else {
        text.to_string()
    }
}

pub fn build(n: &Notification, sender: &Sender) -> Vec<u8> {
    let b = &n.payload.booking;
    // The sender's name is fixed by configuration: an organizer's chosen
    // name never appears as the sender on our domain. Who organizes the
    // meeting is in the body and in Reply-To.
    let from_name = sender.name.clone();
    let card = Card::of(n);
    let (text, html) = (page::text(&card), page::html(&card));
    let mut parts = vec![MimePart::new("text/plain", text), MimePart::new("text/html", html)];
    if let (Some(method), Some(ics)) = (n.notice.method(), ics(n)) {
        parts.push(MimePart::new(
            mail_builder::headers::content_type::ContentType::new("text/calendar")
                .attribute("method", method)
                .attribute("charset", "utf-8"),
            ics,
        ));
    }
    // Its boundary comes from the claim's key too, so one send renders the
    // same bytes each time (`=_` never occurs in quoted-printable or base64).
    let digest = Sha256::digest(format!("{}\n{}", n.event_id, n.recipient.email).as_bytes());
    let boundary: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    let alternative = mail_builder::headers::content_type::ContentType::new("multipart/alternative")
        .attribute("boundary", format!("=_{boundary}"));
    let body = MimePart::new(alternative, parts);
    MessageBuilder::new()
        .from(Address::new_address(Some(from_name), sender.email.as_str().to_string()))
        .to(Address::new_address(Some(header_text(n.recipient.name.as_str())), n.recipient.email.as_str().to_string()))
        .reply_to(Address::new_address(
            Some(header_text(b.organizer.name.as_str())),
            b.organizer.email.as_str().to_string(),
        ))
        .subject(header_text(&card.subject))
        .message_id(message_id(n, sender))
        .date(dated(n).timestamp())
        .body(body)
        .write_to_vec()
        .expect("writing to a Vec cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::booking::events::EventType;

    #[test]
    fn one_recipients_message_renders_the_same_bytes_for_every_claim() {
        let booking: crate::booking::domain::Booking = serde_json::from_value(serde_json::json!({
            "id": "0190d7b2-6a6e-7a3c-8c1e-1234567890ab", "title": "設計レビュー", "timezone": "Europe/Paris",
            "start": "2030-01-07T09:00:00Z", "end": "2030-01-07T10:00:00Z",
            "organizer": {"email": "bob@example.com", "name": "Bob"},
            "attendees": [{"email": "taro@example.com", "name": "山田 太郎", "timezone": "Asia/Tokyo"}],
            "status": "CONFIRMED", "version": 1,
            "created_at": "2029-12-01T10:00:00Z", "updated_at": "2029-12-01T10:00:00Z"
        }))
        .unwrap();
        let event = crate::booking::events::BookingEvent {
            id: uuid::Uuid::now_v7(),
            event_type: EventType::BookingConfirmed,
            payload: crate::booking::events::EventPayload::of(booking.clone()),
            trace_id: None,
        };
        let recipient = booking.attendees[0].clone();
        let n = Notification {
            claim: Some(uuid::Uuid::now_v7()),
            ..Notification::new(&event, recipient, Notice::Request, true)
        };
        let sender = Sender::parse("Bookings <bookings@example.com>").unwrap();
        let first = build(&n, &sender);
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert_eq!(first, build(&n, &sender), "the same claim, the same bytes");
        assert!(String::from_utf8_lossy(&first).contains("boundary=\"=_"));
        // A retry, or a resend, a second later: a new claim, the same message.
        let again = Notification { claim: Some(uuid::Uuid::now_v7()), ..n.clone() };
        assert_eq!(first, build(&again, &sender), "no claim of ours in mail to the public");
        // A replay hours later is dated by its claim.
        let days_later = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            (Utc::now() + chrono::Duration::hours(4)).timestamp() as u64,
            0,
        ));
        let late = Notification { claim: Some(days_later), ..n };
        assert_ne!(first, build(&late, &sender));
    }

    /// Low 9 of issue 52: `=?…?=` typed into a title or a name reaches the
    /// headers encoded, so no client decodes it into a bidi override.
    #[test]
    fn header_text_holding_an_encoded_word_is_encoded() {
        const WORD: &str = "=?utf-8?B?4oCuZ25pdGVlTQ==?=";
        let booking: crate::booking::domain::Booking = serde_json::from_value(serde_json::json!({
            "id": "0190d7b2-6a6e-7a3c-8c1e-1234567890ab", "title": format!("Standup {WORD}"),
            "timezone": "Europe/Paris", "start": "2030-01-07T09:00:00Z", "end": "2030-01-07T10:00:00Z",
            "organizer": {"email": "bob@example.com", "name": format!("Bob {WORD}")},
            "attendees": [{"email": "alice@example.com", "name": format!("{WORD} Alice")}],
            "status": "CONFIRMED", "version": 1,
            "created_at": "2029-12-01T10:00:00Z", "updated_at": "2029-12-01T10:00:00Z"
        }))
        .expect("ASCII text with `=?` is a valid title and name");
        let event = crate::booking::events::BookingEvent {
            id: uuid::Uuid::now_v7(),
            event_type: EventType::BookingConfirmed,
            payload: crate::booking::events::EventPayload::of(booking.clone()),
            trace_id: None,
        };
        let n = Notification::new(&event, booking.attendees[0].clone(), Notice::Request, true);
        let raw = String::from_utf8(build(&n, &Sender::parse("Bookings <bookings@example.com>").unwrap())).unwrap();
        let headers = &raw[..raw.find("\r\n\r\n").unwrap()];
        assert!(!headers.contains(WORD), "written raw, a client decodes it:\n{headers}");
        for name in ["Subject: ", "To: ", "Reply-To: "] {
            let line = headers.lines().find(|l| l.starts_with(name)).unwrap();
            assert!(line.contains("?Q?") || line.contains("?B?"), "an encoded word: {line}");
        }
        let subject = headers.lines().find(|l| l.starts_with("Subject: ")).unwrap();
        assert!(subject.contains("Standup_=3D=3Futf-8=3FB=3F4oCu"), "the word, encoded as typed: {subject}");
        let plain = header_text("Standup");
        assert_eq!(plain, "Standup", "any other text as it was");
    }
}
