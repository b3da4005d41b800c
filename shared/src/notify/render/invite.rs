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
use super::i18n::Language;
use crate::booking::domain::{EmailAddress, Timezone};
use crate::booking::events::{EventType, Notice};
use crate::notify::notification::Notification;
use fluent_bundle::FluentArgs;

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

/// The recipient's language, decided when the booking was written
/// (`Booking::with_languages`); English for one written before.
fn language(n: &Notification) -> Language {
    n.recipient.language.unwrap_or(Language::En)
}

/// `t` where and as the recipient reads it: in their language's long form,
/// by the conventions of the region of the tag it came from (theirs, or the
/// organizer's); the compact English form ("Mon 7 Jan 2030 10:00 (CET)")
/// when nobody named a language, as before languages existed.
fn when(n: &Notification, t: DateTime<Utc>) -> String {
    let lang = language(n);
    let tags = [n.recipient.locale.as_ref(), n.payload.booking.organizer.locale.as_ref()];
    if lang == Language::En && tags.iter().all(Option::is_none) {
        return local_time(t, zone(n));
    }
    let region = tags.into_iter().flatten().find(|tag| Language::of(tag) == Some(lang)).and_then(|tag| tag.region());
    lang.when(t, zone(n).tz(), region).unwrap_or_else(|| local_time(t, zone(n)))
}

fn subject(n: &Notification) -> String {
    let b = &n.payload.booking;
    let key = match n.notice {
        Notice::Request if n.introduces || n.event_type == EventType::BookingConfirmed => "subject-invitation",
        Notice::Request => "subject-updated",
        Notice::Cancel => "subject-cancelled",
        Notice::Removed => "subject-removed",
        Notice::Reminder => "subject-reminder",
    };
    let mut args = FluentArgs::new();
    args.set("title", b.title.as_str());
    args.set("when", when(n, b.range.start()));
    language(n).text(key, &args)
}

/// The time of a UUIDv7.
fn time_of(id: uuid::Uuid) -> Option<DateTime<Utc>> {
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    DateTime::from_timestamp(secs as i64, nanos)
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

/// When the message goes: its claim's time; now, before it is claimed (a
/// preview). A late reminder says the time truly left from then.
fn sent_at(n: &Notification) -> DateTime<Utc> {
    n.claim.and_then(time_of).unwrap_or_else(Utc::now)
}

/// How long before the start a reminder says the meeting is, in English
/// ([`i18n::said_left`](crate::notify::render::i18n::said_left)), each unit that is not
/// zero ("1 day", "1 hour and 30 minutes").
fn ahead(offset_secs: i32, left_secs: i64) -> String {
    let secs = crate::notify::render::i18n::said_left(offset_secs, left_secs);
    if secs < 60 {
        return "less than a minute".to_string();
    }
    let unit = |n: i64, one: &str| if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") };
    let parts: Vec<String> =
        [(secs / 86_400, "day"), (secs % 86_400 / 3600, "hour"), (secs % 3600 / 60, "minute"), (secs % 60, "second")]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, one)| unit(n, one))
            .collect();
    match parts.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => unreachable!("at least a minute"),
    }
}

/// Where the recipient reads the times: their own time zone, else the
/// booking's (the iCalendar part keeps the booking's, with its `TZID`).
fn zone(n: &Notification) -> Timezone {
    n.recipient.timezone.unwrap_or(n.payload.booking.timezone)
}

fn local_time(t: DateTime<Utc>, timezone: Timezone) -> String {
    t.with_timezone(&timezone.tz()).format("%a %-d %b %Y %H:%M (%Z)").to_string()
}

fn text_body(n: &Notification) -> String {
    let b = &n.payload.booking;
    let lang = language(n);
    let mut args = FluentArgs::new();
    args.set("who", format!("{} <{}>", b.organizer.name.as_str(), b.organizer.email));
    args.set("title", b.title.as_str());
    let key = match (n.notice, n.event_type) {
        (Notice::Request, _) if n.introduces => "body-invited",
        (Notice::Request, EventType::BookingRescheduled) => "body-moved",
        (Notice::Request, _) => "body-updated",
        (Notice::Cancel, _) => "body-cancelled",
        (Notice::Removed, _) => "body-removed",
        (Notice::Reminder, _) => {
            let offset = n.payload.reminder.map(|r| r.secs()).unwrap_or(0);
            let left = (b.range.start() - sent_at(n)).num_seconds();
            args.set("left", if lang == Language::En { ahead(offset, left) } else { lang.left(offset, left) });
            "body-reminder"
        }
    };
    let mut s = format!("{}\n\n", lang.text(key, &args));
    let none = FluentArgs::new();
    let label = |key: &str| lang.text(key, &none);
    let (w, was, at) = (label("label-when"), label("label-was"), label("label-where"));
    let width = [&w, &was, &at].iter().map(|l| l.chars().count()).max().unwrap_or(0) + 1;
    let pad = |l: &str| format!("{l:<width$}");
    s.push_str(&format!("{}{} – {}\n", pad(&w), when(n, b.range.start()), when(n, b.range.end())));
    if let (Some(ps), Some(_), false) = (n.payload.previous_start, n.payload.previous_end, n.introduces) {
        s.push_str(&format!("{}{}\n", pad(&was), when(n, ps)));
    }
    if let Some(l) = &b.location {
        s.push_str(&format!("{}{l}\n", pad(&at)));
    }
    if let Some(d) = &b.description {
        s.push_str(&format!("\n{d}\n"));
    }
    s
}

/// The HTML part: the text part, escaped, as preformatted text.
fn html_body(text: &str) -> String {
    let escaped = html_escape::encode_text(text);
    format!("<!doctype html><html><body><pre style=\"font-family:sans-serif\">{escaped}</pre></body></html>")
}

/// A Message-ID derived from the claim's key (event, recipient): the same
/// for every claim of one recipient's notification (a released claim's
/// retry, an operator's resend), so a provider or mailbox that
/// de-duplicates on Message-ID drops a repeat. The claim itself is in
/// [`CLAIM_HEADER`].
pub fn message_id(n: &Notification, sender: &Sender) -> String {
    let digest = Sha256::digest(n.recipient.email.as_str().as_bytes());
    let short: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let domain = sender.email.as_str().rsplit('@').next().unwrap_or("booking-outbox.invalid");
    format!("{}.{short}@{domain}", n.event_id)
}

/// The header naming the send's claim (`booking_notification_sends.id`), so
/// an operator can match a provider's log line to the claim row.
pub const CLAIM_HEADER: &str = "X-Outbox-Claim";

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
    let text = text_body(n);
    let html = html_body(&text);
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
    let mut message = MessageBuilder::new();
    if let Some(claim) = n.claim {
        message = message.header(CLAIM_HEADER, mail_builder::headers::raw::Raw::new(claim.to_string()));
    }
    message
        .from(Address::new_address(Some(from_name), sender.email.as_str().to_string()))
        .to(Address::new_address(Some(header_text(n.recipient.name.as_str())), n.recipient.email.as_str().to_string()))
        .reply_to(Address::new_address(
            Some(header_text(b.organizer.name.as_str())),
            b.organizer.email.as_str().to_string(),
        ))
        .subject(header_text(&subject(n)))
        .message_id(message_id(n, sender))
        .date(dated(n).timestamp())
        .body(body)
        .write_to_vec()
        .expect("writing to a Vec cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message without its claim's header.
    fn unclaimed(raw: &[u8]) -> String {
        let text = String::from_utf8(raw.to_vec()).unwrap();
        let claim = text.lines().filter(|l| l.starts_with(CLAIM_HEADER)).count();
        assert_eq!(claim, 1, "{text}");
        text.lines().filter(|l| !l.starts_with(CLAIM_HEADER)).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn one_recipients_message_renders_the_same_bytes_for_every_claim_but_the_claims_header() {
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
        assert_eq!(unclaimed(&first), unclaimed(&build(&again, &sender)));
        // A replay hours later is dated by its claim.
        let days_later = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            (Utc::now() + chrono::Duration::hours(4)).timestamp() as u64,
            0,
        ));
        let late = Notification { claim: Some(days_later), ..n };
        assert_ne!(unclaimed(&first), unclaimed(&build(&late, &sender)));
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

    #[test]
    fn a_reminder_says_its_offset_on_time_and_the_time_left_when_late() {
        assert_eq!(ahead(900, 900), "15 minutes");
        assert_eq!(ahead(900, 3600), "15 minutes", "early (a test): its offset");
        assert_eq!(ahead(3600, 3600), "1 hour");
        assert_eq!(ahead(5400, 5400), "1 hour and 30 minutes");
        assert_eq!(ahead(3601, 3601), "1 hour and 1 second");
        assert_eq!(ahead(90_000, 90_000), "1 day and 1 hour");
        assert_eq!(ahead(93_660, 93_660), "1 day, 2 hours and 1 minute");
        assert_eq!(ahead(900, 659), "10 minutes", "four minutes late");
        assert_eq!(ahead(900, 30), "less than a minute");
    }
}
