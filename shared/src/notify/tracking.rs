//! Where each notification of a booking stands, recipient by recipient:
//! what the API shows its organizer (every recipient) and each attendee
//! (their own rows).
//!
//! One statement reads it all: the booking's events (`outbox_events`),
//! each event's sends (`booking_notification_sends`) and each send's
//! newest verdict from SES (`send_feedback`), each table read through the
//! fragment its owner exports, by its keys. A recipient an event has not
//! reached yet has no send row: they are found in the event's own payload
//! (its audience), which the statement returns only while the event is not
//! DONE. What retention has deleted (events, then their sends) is no longer
//! shown.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::booking::domain::Booking;
use crate::booking::domain::Reminder;
use crate::booking::events::{BookingEvent, EventType};
use crate::booking::reminder_events;
use crate::db::DbResult;
use crate::notify::sends::{ConfirmedBy, NotSentBecause, SendStatus, SentVia};
use crate::outbox::events::EventStatus;

/// Where one recipient's notification stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The event waits for a poller (or is being planned).
    Pending,
    /// A reminder, due at `due`.
    Scheduled,
    /// Claimed; the provider has not answered yet.
    Sending,
    /// SES accepted it.
    Sent,
    /// SES delivered it to the recipient's mail server.
    Delivered,
    /// The recipient's mail server refused it (`detail`: the bounce type).
    Bounced,
    /// The recipient marked it as spam.
    Complained,
    /// Whether SES accepted it could not be known; it is never sent again
    /// automatically. SES's own event settles it when it comes.
    Unknown,
    /// Not sent: a later change of the booking told them instead (for a
    /// reminder: the booking changed or was cancelled; `detail` says).
    Superseded,
    /// Not sent: a reminder picked up once the meeting had started (a
    /// backlog, an outage).
    TooLate,
    /// Not sent: the address bounced permanently or complained before.
    Suppressed,
    /// Not sent: refused for this recipient, or the event was dead-lettered.
    Failed,
    /// Not sent: an invitation over a limit that protects its recipient.
    Capped,
    /// What an organizer sees for `bounced` and `suppressed`: not
    /// delivered, and no reason. Why (a bounce, a complaint, perhaps caused
    /// by another organizer's mail) is the recipient's history: shown to
    /// them and kept for operators, never to an organizer.
    NotDelivered,
}

/// What an organizer is shown of a state: nothing of the recipient's own
/// history. A complaint is the recipient's act about a message that was
/// delivered; a bounce or a suppression, that it was not.
fn for_organizer(state: State, detail: Option<String>) -> (State, Option<String>) {
    match state {
        State::Complained => (State::Delivered, None),
        State::Bounced | State::Suppressed => (State::NotDelivered, Some("not delivered to this address".to_string())),
        _ => (state, detail),
    }
}

/// One recipient's notification about one event of the booking.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tracked {
    pub event_id: Uuid,
    pub event_type: String,
    /// The booking version the notification is about.
    pub version: i32,
    pub recipient: String,
    pub state: State,
    /// When it reached that state.
    pub at: DateTime<Utc>,
    /// For a reminder: when it is (or was) due, the start minus its
    /// offset. Null otherwise.
    pub due: Option<DateTime<Utc>>,
    /// For a message SES accepted (or may have): whether its acceptance
    /// was in doubt and SES's own event settled it. Null otherwise.
    pub confirmed_by_ses: Option<bool>,
    /// More about the state, in words (a bounce's type, why it was not sent).
    pub detail: Option<String>,
}

/// What the booking's notifications look like from one reader's seat.
pub enum Reader<'a> {
    /// The organizer: every recipient.
    Organizer,
    /// An attendee: only notifications to this address.
    Recipient(&'a str),
}

/// One statement over what each table's owner exports (V47): the booking's
/// events (`outbox::events`), each one's sends (`sends`), SES's verdict on
/// each (`evidence::feedback`), when each was resent on SES's evidence
/// (`evidence::resend`). It names no table.
const SQL: &str = "SELECT e.id AS event_id, e.aggregate_version, e.event_type, e.status AS event_status, \
            e.created_at, e.updated_at, e.open_payload, e.payload -> 'booking' ->> 'start' AS reminded_start, \
            e.payload ->> 'reminder' AS reminder, e.payload -> 'booking' -> 'reminders' AS booking_reminders, \
            s.recipient_email, s.status AS send_status, s.claimed_at, s.completed_at, s.confirmed_by, \
            s.left_for_operator, s.last_error, s.not_sent_because, s.provider, \
            f.kind AS verdict, f.subtype AS verdict_subtype, f.occurred_at AS verdict_at, x AS resent_at \
       FROM outbox_events_of_aggregate($1) e \
       LEFT JOIN LATERAL booking_notification_sends_of_event(e.id) s ON true \
       LEFT JOIN LATERAL send_verdict(s.id) f ON true \
       LEFT JOIN LATERAL resent_on_evidence(e.id, s.recipient_email, e.event_type) x ON true";

/// Every notification of `booking_id` that `reader` may see, by version
/// then recipient. One statement, whatever the number of events and
/// recipients.
pub async fn of_booking(client: &impl GenericClient, booking: &Booking, reader: Reader<'_>) -> DbResult<Vec<Tracked>> {
    let booking_id = booking.id;
    let rows = client.query(&client.prepare_cached(SQL).await?, &[&booking_id]).await?;
    let shown = |recipient: &str| match reader {
        Reader::Organizer => true,
        Reader::Recipient(me) => me == recipient,
    };
    let mut tracked = Vec::new();
    let mut reached: HashSet<(Uuid, String)> = HashSet::new();
    let mut open: Vec<Open> = Vec::new();
    // The booking's own events, as each left it: what ends a reminder.
    let mut changes: Vec<Change> = Vec::new();
    for row in &rows {
        let event_id: Uuid = row.get("event_id");
        let event_type: String = row.get("event_type");
        let event_status = EventStatus::from_row(row, "event_status")?;
        let due = due(row);
        if event_type != EventType::BookingReminder.as_str() && !changes.iter().any(|c| c.event_id == event_id) {
            changes.push(Change::of(row, event_id, &event_type));
        }
        if let Some(payload) = row.get::<_, Option<serde_json::Value>>("open_payload") {
            // An unreadable payload is a poison message: it reaches no one.
            if !open.iter().any(|o| o.event_id == event_id) {
                if let Ok(event) = BookingEvent::from_parts(event_id, &event_type, &payload) {
                    let (created_at, updated_at) = (row.get("created_at"), row.get("updated_at"));
                    open.push(Open { event_id, status: event_status, created_at, updated_at, due, event });
                }
            }
        }
        let Some(recipient) = row.get::<_, Option<String>>("recipient_email") else { continue };
        reached.insert((event_id, recipient.clone()));
        if !shown(&recipient) {
            continue;
        }
        let (state, at, confirmed_by_ses, detail) = send_state(row)?;
        let (state, at, confirmed_by_ses, detail) = match reader {
            Reader::Organizer => match for_organizer(state, detail) {
                // Nothing tells a bounce (SES had the message, and later
                // said so) from a suppression (never sent): not whether
                // SES's event settled it, not when.
                (State::NotDelivered, detail) => (State::NotDelivered, row.get("claimed_at"), None, detail),
                (state, detail) => (state, at, confirmed_by_ses, detail),
            },
            Reader::Recipient(_) => (state, at, confirmed_by_ses, detail),
        };
        tracked.push(Tracked {
            event_id,
            event_type,
            version: row.get("aggregate_version"),
            recipient,
            state,
            at,
            due,
            confirmed_by_ses,
            detail,
        });
    }
    for Open { event_id, status, created_at, updated_at, due, event } in open {
        // A reminder reminds the booking as it now stands (its attendees
        // now), unless the booking no longer asks for it: then it will be
        // recorded superseded when it falls due (`notify::plan`).
        let (audience, ended) = match event.payload.reminder {
            Some(offset) => {
                let (version, start) = (event.payload.booking.version, event.payload.booking.range.start());
                let ended_by = changes.iter().filter(|c| c.version > version).find(|c| !c.asks(start, offset));
                match ended_by {
                    None if reminder_events::still_asks(booking, start, offset) => (booking.attendees.clone(), None),
                    _ => {
                        let by = ended_by.map_or(booking.version, |c| c.version);
                        let why = format!("the booking changed (version {by}): this reminder will not be sent");
                        (event.payload.booking.attendees.clone(), Some(why))
                    }
                }
            }
            None => (event.audience().into_iter().map(|(p, _)| p).collect(), None),
        };
        for person in audience {
            let recipient = person.email.as_str().to_string();
            if reached.contains(&(event_id, recipient.clone())) || !shown(&recipient) {
                continue;
            }
            let (state, at, detail) = match (status, &ended) {
                (_, Some(why)) => (State::Superseded, updated_at, Some(why.clone())),
                (EventStatus::Dead, _) => (State::Failed, updated_at, Some("the event was dead-lettered".to_string())),
                _ if due.is_some() => (State::Scheduled, created_at, None),
                _ => (State::Pending, created_at, None),
            };
            tracked.push(Tracked {
                event_id,
                event_type: event.event_type.to_string(),
                version: event.payload.booking.version,
                recipient,
                state,
                at,
                due,
                confirmed_by_ses: None,
                detail,
            });
        }
    }
    tracked.sort_by(|a, b| {
        (a.version, a.due, &a.recipient, a.event_id).cmp(&(b.version, b.due, &b.recipient, b.event_id))
    });
    Ok(tracked)
}

/// One event of the booking's own lane, as it left the booking.
struct Change {
    event_id: Uuid,
    version: i32,
    cancelled: bool,
    start: Option<DateTime<Utc>>,
    reminders: Vec<Reminder>,
}

impl Change {
    fn of(row: &tokio_postgres::Row, event_id: Uuid, event_type: &str) -> Self {
        let start = row.get::<_, Option<&str>>("reminded_start").and_then(|s| DateTime::parse_from_rfc3339(s).ok());
        let listed: Option<Vec<String>> =
            row.get::<_, Option<serde_json::Value>>("booking_reminders").and_then(|v| serde_json::from_value(v).ok());
        Self {
            event_id,
            version: row.get("aggregate_version"),
            cancelled: event_type == EventType::BookingCancelled.as_str(),
            start: start.map(|s| s.with_timezone(&Utc)),
            reminders: listed.unwrap_or_default().iter().filter_map(|r| Reminder::parse(r).ok()).collect(),
        }
    }

    /// Whether the booking as this event left it still asks for the
    /// reminder `offset` before `start` (the plan's rule, `notify::plan`).
    fn asks(&self, start: DateTime<Utc>, offset: Reminder) -> bool {
        !self.cancelled && self.start == Some(start) && self.reminders.contains(&offset)
    }
}

/// An event not yet DONE: its audience may hold recipients it has not
/// reached.
struct Open {
    event_id: Uuid,
    status: EventStatus,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    due: Option<DateTime<Utc>>,
    event: BookingEvent,
}

/// A reminder's due time, from its payload: the start minus its offset.
fn due(row: &tokio_postgres::Row) -> Option<DateTime<Utc>> {
    let offset = Reminder::parse(row.get::<_, Option<&str>>("reminder")?).ok()?;
    let start = DateTime::parse_from_rfc3339(row.get::<_, Option<&str>>("reminded_start")?).ok()?;
    Some(start.with_timezone(&Utc) - offset.duration())
}

type SendState = (State, DateTime<Utc>, Option<bool>, Option<String>);

/// For a send made after an earlier attempt was resent on SES's evidence:
/// that it was, and when.
fn resent(row: &tokio_postgres::Row) -> Option<String> {
    row.get::<_, Option<DateTime<Utc>>>("resent_at").map(|at| {
        format!(
            "resent on SES's evidence at {}: the earlier attempt's outcome was lost, and SES's events showed it \
             never arrived",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    })
}

/// The state of one send row, its SES verdict included.
fn send_state(row: &tokio_postgres::Row) -> DbResult<SendState> {
    let status = SendStatus::from_row(row, "send_status")?;
    let claimed_at: DateTime<Utc> = row.get("claimed_at");
    let at = row.get::<_, Option<DateTime<Utc>>>("completed_at").unwrap_or(claimed_at);
    let by_ses = match row.get::<_, Option<&str>>("confirmed_by") {
        Some(raw) => raw.parse::<ConfirmedBy>()? == ConfirmedBy::SesEvent,
        None => false,
    };
    let reason = || row.get::<_, Option<String>>("last_error");
    let because = row.get::<_, Option<&str>>("not_sent_because").map(str::parse::<NotSentBecause>).transpose()?;
    if let (Some(kind), Some(verdict_at)) =
        (row.get::<_, Option<&str>>("verdict"), row.get::<_, Option<DateTime<Utc>>>("verdict_at"))
    {
        if matches!(status, SendStatus::Sent | SendStatus::Unknown | SendStatus::Claimed) {
            let subtype = row.get::<_, Option<String>>("verdict_subtype");
            let verdict = match kind {
                "Delivery" => Some((State::Delivered, None)),
                "Bounce" => Some((State::Bounced, subtype)),
                "Complaint" => Some((State::Complained, None)),
                "Reject" => Some((State::Failed, Some("SES rejected the message".to_string()))),
                "RenderingFailure" => Some((State::Failed, Some("SES could not render the message".to_string()))),
                _ => None,
            };
            if let Some((state, detail)) = verdict {
                let accepted = !matches!(state, State::Failed);
                return Ok((state, verdict_at, accepted.then_some(by_ses), detail.or_else(|| resent(row))));
            }
        }
    }
    Ok(match status {
        SendStatus::Claimed => (State::Sending, claimed_at, None, None),
        SendStatus::Sent => (State::Sent, at, Some(by_ses), resent(row)),
        SendStatus::Unknown => {
            let provider = row.get::<_, Option<&str>>("provider").map(str::parse::<SentVia>).transpose()?;
            let detail = match row.get::<_, Option<String>>("left_for_operator") {
                _ if !provider.is_some_and(SentVia::publishes_events) => {
                    "sent through SMTP, whose answer was lost: the server may have it, and nothing reports back; \
                     left for an operator"
                        .to_string()
                }
                Some(why) => format!("left for an operator: {why}"),
                None => "awaiting SES's evidence: its own event settles it, and if SES's events move past it with \
                         none naming it, it is resent"
                    .to_string(),
            };
            (State::Unknown, at, Some(false), Some(detail))
        }
        SendStatus::Superseded if because == Some(NotSentBecause::TooLate) => (State::TooLate, at, None, reason()),
        SendStatus::Superseded => (State::Superseded, at, None, reason()),
        SendStatus::Failed if because == Some(NotSentBecause::Suppressed) => (State::Suppressed, at, None, reason()),
        SendStatus::Failed => (State::Failed, at, None, Some("refused by the provider for this recipient".to_string())),
        SendStatus::Capped => {
            (State::Capped, at, None, reason().or_else(|| Some("a limit that protects the recipient".to_string())))
        }
    })
}
