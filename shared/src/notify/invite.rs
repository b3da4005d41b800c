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
use icalendar::{Calendar, Component, EventLike, EventStatus, Property};
use mail_builder::headers::address::Address;
use mail_builder::mime::MimePart;
use mail_builder::MessageBuilder;
use sha2::{Digest, Sha256};

use super::Notification;
use crate::booking::domain::{EmailAddress, Person, Timezone};
use crate::booking::events::{EventType, Notice};

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

/// The stable iCalendar UID of a booking.
pub fn uid(booking_id: uuid::Uuid) -> String {
    format!("{booking_id}@booking-outbox")
}

fn subject(n: &Notification) -> String {
    let b = &n.payload.booking;
    let when = local_time(b.range.start(), zone(n));
    match n.notice {
        Notice::Request if n.introduces || n.event_type == EventType::BookingConfirmed => {
            format!("Invitation: {} @ {when}", b.title)
        }
        Notice::Request => format!("Updated invitation: {} @ {when}", b.title),
        Notice::Cancel => format!("Cancelled: {} @ {when}", b.title),
        Notice::Removed => format!("Removed: {} @ {when}", b.title),
        Notice::Reminder => format!("Reminder: {} @ {when}", b.title),
    }
}

/// When the message is written: its claim's time (a UUIDv7), so the same
/// send renders the same bytes however often it is rendered; now, before
/// it is claimed (a preview).
fn written_at(n: &Notification) -> chrono::DateTime<chrono::Utc> {
    let claimed = n
        .claim
        .and_then(|c| c.get_timestamp())
        .map(|t| t.to_unix())
        .and_then(|(secs, nanos)| chrono::DateTime::from_timestamp(secs as i64, nanos));
    claimed.unwrap_or_else(chrono::Utc::now)
}

/// How long before the start a reminder says the meeting is: its offset
/// when it goes on time (or early), else the time truly left, in whole
/// minutes; each unit that is not zero ("1 day", "1 hour and 30 minutes").
fn ahead(offset_secs: i32, left_secs: i64) -> String {
    let secs = if left_secs + 60 >= i64::from(offset_secs) { i64::from(offset_secs) } else { left_secs / 60 * 60 };
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

/// iCalendar parameter values cannot contain DQUOTE (RFC 5545 §3.1).
fn cn(name: &str) -> String {
    name.replace('"', "'")
}

fn person_property(key: &str, p: &Person) -> Property {
    let mut prop = Property::new(key, format!("mailto:{}", p.email));
    prop.add_parameter("CN", &cn(p.name.as_str()));
    prop
}

/// The `text/calendar` body; None for a reminder, which carries none.
pub fn ics(n: &Notification) -> Option<String> {
    let b = &n.payload.booking;
    let method = n.notice.method()?;
    let mut event = icalendar::Event::new();
    event
        .uid(&uid(b.id))
        .sequence(b.version.saturating_sub(1).max(0) as u32)
        .timestamp(b.updated_at)
        .starts(b.range.start())
        .ends(b.range.end())
        .summary(b.title.as_str())
        .status(if method == "CANCEL" { EventStatus::Cancelled } else { EventStatus::Confirmed })
        .append_property(person_property("ORGANIZER", &b.organizer));
    if let Some(d) = &b.description {
        event.description(d.as_str());
    }
    if let Some(l) = &b.location {
        event.location(l.as_str());
    }
    // A removed attendee's CANCEL names only them (RFC 5546 §3.2.5).
    let attendees = match n.notice {
        Notice::Removed => std::slice::from_ref(&n.recipient),
        Notice::Request | Notice::Cancel | Notice::Reminder => b.attendees.as_slice(),
    };
    for a in attendees {
        let mut prop = person_property("ATTENDEE", a);
        prop.add_parameter("ROLE", "REQ-PARTICIPANT").add_parameter("CUTYPE", "INDIVIDUAL");
        if method == "REQUEST" {
            prop.add_parameter("PARTSTAT", "NEEDS-ACTION").add_parameter("RSVP", "TRUE");
        }
        event.append_multi_property(prop);
    }
    let mut cal = Calendar::new();
    cal.append_property(Property::new("METHOD", method));
    cal.push(event.done());
    Some(cal.done().to_string())
}

fn text_body(n: &Notification) -> String {
    let b = &n.payload.booking;
    let who = format!("{} <{}>", b.organizer.name.as_str(), b.organizer.email);
    let title = &b.title;
    let mut s = match (n.notice, n.event_type) {
        (Notice::Request, _) if n.introduces => format!("{who} invited you to \"{title}\".\n\n"),
        (Notice::Request, EventType::BookingRescheduled) => format!("{who} moved \"{title}\".\n\n"),
        (Notice::Request, _) => format!("{who} updated \"{title}\".\n\n"),
        (Notice::Cancel, _) => format!("{who} cancelled \"{title}\".\n\n"),
        (Notice::Removed, _) => format!("{who} removed you from \"{title}\".\n\n"),
        (Notice::Reminder, _) => {
            let offset = n.payload.reminder.map(|r| r.secs()).unwrap_or(0);
            let left = (b.range.start() - written_at(n)).num_seconds();
            format!("Reminder: \"{title}\", organized by {who}, starts in {}.\n\n", ahead(offset, left))
        }
    };
    s.push_str(&format!("When:  {} – {}\n", local_time(b.range.start(), zone(n)), local_time(b.range.end(), zone(n))));
    if let (Some(ps), Some(_), false) = (n.payload.previous_start, n.payload.previous_end, n.introduces) {
        s.push_str(&format!("Was:   {}\n", local_time(ps, zone(n))));
    }
    if let Some(l) = &b.location {
        s.push_str(&format!("Where: {l}\n"));
    }
    if let Some(d) = &b.description {
        s.push_str(&format!("\n{d}\n"));
    }
    s
}

fn html_body(n: &Notification) -> String {
    let text = text_body(n);
    let escaped = html_escape::encode_text(&text);
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

/// A canary's message (`notify::evidence`): to `to`, from `sender`, a line
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
pub fn build(n: &Notification, sender: &Sender) -> Vec<u8> {
    let b = &n.payload.booking;
    // The sender's name is fixed by configuration: an organizer's chosen
    // name never appears as the sender on our domain. Who organizes the
    // meeting is in the body and in Reply-To.
    let from_name = sender.name.clone();
    let mut parts = vec![MimePart::new("text/plain", text_body(n)), MimePart::new("text/html", html_body(n))];
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
        .to(Address::new_address(Some(n.recipient.name.as_str().to_string()), n.recipient.email.as_str().to_string()))
        .reply_to(Address::new_address(
            Some(b.organizer.name.as_str().to_string()),
            b.organizer.email.as_str().to_string(),
        ))
        .subject(subject(n))
        .message_id(message_id(n, sender))
        .date(written_at(n).timestamp())
        .body(body)
        .write_to_vec()
        .expect("writing to a Vec cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_send_renders_the_same_bytes_each_time() {
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
