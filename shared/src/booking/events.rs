//! Booking events: what the outbox carries for a booking, and who is told.
//!
//! The outbox stores an event as a type name and JSON; this module owns
//! what those mean for bookings. A row that does not decode is a poison
//! message, which the relay dead-letters.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::domain::{Booking, Location, Person, Reminder, Title};
use crate::outbox::events::StoredEvent;
use crate::outbox::{ClaimedEvent, NewEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    BookingConfirmed,
    /// Written before `BOOKING_UPDATED` replaced it (a new time only); rows
    /// of this type may still be in a live outbox and are dispatched as an
    /// update to every attendee.
    BookingRescheduled,
    /// Any change through `PATCH`: fields, time, attendees.
    BookingUpdated,
    BookingCancelled,
    /// A reminder before the meeting, due at its start minus an offset, in
    /// a lane of its own ([`super::reminder_events`]).
    BookingReminder,
}

impl EventType {
    pub const ALL: [EventType; 5] = [
        EventType::BookingConfirmed,
        EventType::BookingRescheduled,
        EventType::BookingUpdated,
        EventType::BookingCancelled,
        EventType::BookingReminder,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            EventType::BookingConfirmed => "BOOKING_CONFIRMED",
            EventType::BookingRescheduled => "BOOKING_RESCHEDULED",
            EventType::BookingUpdated => "BOOKING_UPDATED",
            EventType::BookingCancelled => "BOOKING_CANCELLED",
            EventType::BookingReminder => "BOOKING_REMINDER",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|t| t.as_str()).collect();
            format!("unknown event type {s:?}; expected one of {}", names.join(", "))
        })
    }
}

/// What an event carries: the booking as it was when the event was written,
/// so the notification describes that version even if the booking changes
/// again before the event is dispatched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPayload {
    pub booking: Booking,
    /// For a change of time: the range it replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_start: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_end: Option<DateTime<Utc>>,
    /// For an update: the attendees before it (those no longer listed are
    /// told they were removed). Absent in events written before updates
    /// could change attendees: nobody was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_attendees: Option<Vec<Person>>,
    /// For an update: the title and place it replaced, so the message
    /// shows old and new side by side. Absent in events written before
    /// (their messages show what is, not what was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Before>,
    /// For a reminder: its offset before the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminder: Option<Reminder>,
    /// A change that is no news to anyone (an attendee's own time zone):
    /// the event keeps the booking's versions one event each, and tells
    /// nobody.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quiet: bool,
}

/// What an update replaced, besides its time and its attendees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Before {
    pub title: Title,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
}

impl EventPayload {
    pub fn of(booking: Booking) -> Self {
        Self {
            booking,
            previous_start: None,
            previous_end: None,
            previous_attendees: None,
            before: None,
            reminder: None,
            quiet: false,
        }
    }

    /// An update from `before` to `booking`.
    pub fn update(before: &Booking, booking: Booking) -> Self {
        let moved = before.range != booking.range;
        Self {
            previous_start: moved.then_some(before.range.start()),
            previous_end: moved.then_some(before.range.end()),
            previous_attendees: Some(before.attendees.clone()),
            before: Some(Before { title: before.title.clone(), location: before.location.clone() }),
            reminder: None,
            quiet: false,
            booking,
        }
    }

    /// The outbox row for this payload, keyed by the booking and its version.
    pub fn to_outbox(&self, event_type: EventType) -> NewEvent {
        NewEvent {
            aggregate_id: self.booking.id,
            aggregate_version: self.booking.version,
            event_type: event_type.as_str().to_string(),
            payload: serde_json::value::to_raw_value(self).expect("event payload serialises"),
            due_at: None,
            lane_of: None,
            // The organizer's turn: one organizer's backlog never buries
            // another's mail.
            turn: Some(self.booking.organizer.email.as_str().to_string()),
        }
    }
}

/// What one recipient is told about an event, per iTIP (RFC 5546).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Notice {
    /// `METHOD:REQUEST`: the meeting as it now stands, every attendee
    /// listed (an invitation, or an update with a higher SEQUENCE).
    Request,
    /// `METHOD:CANCEL` of the whole meeting.
    Cancel,
    /// `METHOD:CANCEL` listing only this attendee: removed from the meeting.
    Removed,
    /// A reminder before the meeting: text only, no iTIP method, so it
    /// never changes a calendar entry.
    Reminder,
}

impl Notice {
    /// The iTIP method, when the message carries a calendar object.
    pub fn method(self) -> Option<&'static str> {
        match self {
            Notice::Request => Some("REQUEST"),
            Notice::Cancel | Notice::Removed => Some("CANCEL"),
            Notice::Reminder => None,
        }
    }
}

/// An outbox event, read as a booking event.
#[derive(Debug, Clone)]
pub struct BookingEvent {
    pub id: Uuid,
    pub event_type: EventType,
    pub payload: EventPayload,
    /// The trace id of the request that wrote it, when it was traced.
    pub trace_id: Option<String>,
}

impl BookingEvent {
    /// Reads a claimed event; the error says why it cannot be (a poison
    /// message: retrying will not help).
    pub fn decode(event: &ClaimedEvent) -> Result<Self, String> {
        let trace_id = event.traceparent.as_deref().and_then(crate::telemetry::trace::trace_id_of);
        Ok(Self { trace_id, ..Self::from_parts(event.id, &event.event_type, &event.payload)? })
    }

    /// Reads any stored event of a booking.
    pub fn from_stored(event: &StoredEvent) -> Result<Self, String> {
        Self::from_parts(event.id, &event.event_type, &event.payload)
    }

    pub fn from_parts(id: Uuid, event_type: &str, payload: &serde_json::Value) -> Result<Self, String> {
        let event_type = event_type.parse::<EventType>()?;
        let payload = EventPayload::deserialize(payload).map_err(|e| format!("unreadable payload: {e}"))?;
        Ok(Self { id, event_type, payload, trace_id: None })
    }

    /// Who is told what: every attendee gets the meeting as it stands (a
    /// REQUEST), or its cancellation; an attendee an update removed gets a
    /// CANCEL of their own.
    pub fn audience(&self) -> Vec<(Person, Notice)> {
        if self.payload.quiet {
            return Vec::new();
        }
        let booking = &self.payload.booking;
        let notice = match self.event_type {
            EventType::BookingCancelled => Notice::Cancel,
            EventType::BookingReminder => Notice::Reminder,
            EventType::BookingConfirmed | EventType::BookingRescheduled | EventType::BookingUpdated => Notice::Request,
        };
        let mut audience: Vec<(Person, Notice)> = booking.attendees.iter().map(|p| (p.clone(), notice)).collect();
        if self.event_type == EventType::BookingUpdated {
            let removed = self.payload.previous_attendees.iter().flatten();
            for p in removed.filter(|p| !booking.attendees.iter().any(|a| a.email == p.email)) {
                audience.push((p.clone(), Notice::Removed));
            }
        }
        audience
    }

    /// What this event tells `email`, if anything.
    pub fn notice_for(&self, email: &str) -> Option<Notice> {
        self.audience().into_iter().find(|(p, _)| p.email.as_str() == email).map(|(_, n)| n)
    }
}
