//! One meeting's messages, each kind to a recipient in each language the
//! screenshots show: what `mail-samples` writes and the card tests read.
//! Real values through the real builder: a booking parsed as the API
//! parses one, its events made as the service makes them.

use serde_json::json;
use shared::booking::domain::{Booking, Language};
use shared::booking::events::{BookingEvent, EventPayload, EventType, Notice};
use shared::notify::notification::Notification;

/// The kinds of message, by the names the files and tests use.
pub const KINDS: [&str; 4] = ["invitation", "update", "cancellation", "reminder"];

/// The languages the screenshots show: a Latin script, one with long
/// words and zone names, and one without spaces.
pub const LANGUAGES: [Language; 3] = [Language::En, Language::Fr, Language::Ja];

/// The booking as first written: a design review organized from Paris,
/// with a room and its link, a description, and guests in three zones.
pub fn booking(version: i32) -> Booking {
    serde_json::from_value(json!({
        "id": "0190d7b2-6a6e-7a3c-8c1e-1234567890ab",
        "title": "Design review: the booking service's new notification card",
        "description": "Agenda:\n1. What a person reads on a phone\n2. Dark mode\n3. Questions",
        "location": "Room 4.12, 10 Rue de la Paix, Paris (https://meet.example.com/design-review-4-12)",
        "timezone": "Europe/Paris",
        "start": "2030-01-07T09:00:00Z", "end": "2030-01-07T10:30:00Z",
        "organizer": {"email": "bob.organizer@example.com", "name": "Bob Organizer"},
        "attendees": [
            {"email": "alice.longname-for-a-narrow-screen@example.com", "name": "Alice Martin",
             "timezone": "America/New_York", "locale": "en-US", "language": "en"},
            {"email": "carol@example.fr", "name": "Carol Dupont", "timezone": "Europe/Paris",
             "locale": "fr-FR", "language": "fr"},
            {"email": "taro@example.jp", "name": "山田 太郎", "timezone": "Asia/Tokyo",
             "locale": "ja-JP", "language": "ja"},
            {"email": "dan@example.com", "name": "Dan Ng"}
        ],
        "reminders": ["PT15M"],
        "status": "CONFIRMED", "version": version,
        "created_at": "2029-12-01T10:00:00Z", "updated_at": "2029-12-02T10:00:00Z"
    }))
    .expect("a valid booking")
}

/// The same booking moved by an hour, renamed and moved to another room.
fn updated() -> Booking {
    let mut b: serde_json::Value = serde_json::to_value(booking(2)).unwrap();
    b["title"] = json!("Design review: the notification card, second pass");
    b["location"] = json!("https://meet.example.com/design-review-second-pass");
    b["start"] = json!("2030-01-07T10:00:00Z");
    b["end"] = json!("2030-01-07T11:30:00Z");
    serde_json::from_value(b).expect("a valid booking")
}

/// A UUIDv7 at `t`.
fn at(t: chrono::DateTime<chrono::Utc>) -> uuid::Uuid {
    uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, t.timestamp() as u64, 0))
}

/// The message of `kind` to the attendee who reads `language` (Dan, who
/// named none, reads any other), claimed when it would be (a reminder 15
/// minutes before the start).
pub fn notification(kind: &str, language: Language) -> Notification {
    let first = booking(1);
    let (event_type, payload, notice, introduces) = match kind {
        "invitation" => (EventType::BookingConfirmed, EventPayload::of(first.clone()), Notice::Request, true),
        "update" => (EventType::BookingUpdated, EventPayload::update(&first, updated()), Notice::Request, false),
        "cancellation" => (EventType::BookingCancelled, EventPayload::of(booking(2)), Notice::Cancel, false),
        "reminder" => {
            let reminder = first.reminders.iter().next();
            (
                EventType::BookingReminder,
                EventPayload { reminder, ..EventPayload::of(first.clone()) },
                Notice::Reminder,
                false,
            )
        }
        other => panic!("no kind {other}"),
    };
    let committed = payload.booking.updated_at;
    let claimed = match notice {
        Notice::Reminder => payload.booking.range.start() - chrono::Duration::minutes(15),
        _ => committed + chrono::Duration::seconds(1),
    };
    let event = BookingEvent { id: at(committed), event_type, payload, trace_id: None };
    let attendees = &event.payload.booking.attendees;
    let recipient = match attendees.iter().find(|a| a.language == Some(language)) {
        Some(a) => a.clone(),
        None => shared::booking::domain::Person { language: Some(language), ..attendees[3].clone() },
    };
    Notification { claim: Some(at(claimed)), ..Notification::new(&event, recipient, notice, introduces) }
}

/// Raw messages as Python's `email` and `icalendar` read them
/// ([`crate::inspect_mail`]), in order.
pub fn parsed(raws: &[(String, Vec<u8>)]) -> Vec<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("outbox-mail-samples-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let mailbox = dir.join("mailbox.jsonl");
    let lines: Vec<String> = raws
        .iter()
        .map(|(to, raw)| {
            json!({"data": String::from_utf8_lossy(raw), "rcpt_tos": [to], "mail_from": "bookings@example.com"})
                .to_string()
        })
        .collect();
    std::fs::write(&mailbox, lines.join("\n") + "\n").unwrap();
    let parsed = crate::inspect_mail(&[std::ffi::OsStr::new("--mailbox"), mailbox.as_os_str()]);
    let _ = std::fs::remove_dir_all(&dir);
    parsed
}
