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

use super::domain::{Booking, Person};
use crate::outbox::{ClaimedEvent, NewEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    BookingConfirmed,
    BookingRescheduled,
    BookingCancelled,
}

impl EventType {
    pub const ALL: [EventType; 3] =
        [EventType::BookingConfirmed, EventType::BookingRescheduled, EventType::BookingCancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::BookingConfirmed => "BOOKING_CONFIRMED",
            EventType::BookingRescheduled => "BOOKING_RESCHEDULED",
            EventType::BookingCancelled => "BOOKING_CANCELLED",
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
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| format!("unknown event type {s:?}; expected one of BOOKING_CONFIRMED, BOOKING_RESCHEDULED, BOOKING_CANCELLED"))
    }
}

/// What an event carries: the booking as it was when the event was written,
/// so the notification describes that version even if the booking changes
/// again before the event is dispatched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPayload {
    pub booking: Booking,
    /// For a reschedule: the range it replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_start: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_end: Option<DateTime<Utc>>,
}

impl EventPayload {
    pub fn of(booking: Booking) -> Self {
        Self { booking, previous_start: None, previous_end: None }
    }

    /// The outbox row for this payload, keyed by the booking and its version.
    pub fn to_outbox(&self, event_type: EventType) -> NewEvent {
        NewEvent {
            aggregate_id: self.booking.id,
            aggregate_version: self.booking.version,
            event_type: event_type.as_str().to_string(),
            payload: serde_json::to_value(self).expect("event payload serialises"),
        }
    }
}

/// A claimed outbox event, read as a booking event.
#[derive(Debug, Clone)]
pub struct BookingEvent {
    pub id: Uuid,
    pub event_type: EventType,
    pub payload: EventPayload,
}

impl BookingEvent {
    /// Reads a claimed event; the error says why it cannot be (a poison
    /// message: retrying will not help).
    pub fn decode(event: &ClaimedEvent) -> Result<Self, String> {
        let event_type = event.event_type.parse::<EventType>()?;
        let payload = EventPayload::deserialize(&event.payload).map_err(|e| format!("unreadable payload: {e}"))?;
        Ok(Self { id: event.id, event_type, payload })
    }

    /// Who is told: every attendee, of a confirmation, a reschedule and a
    /// cancellation alike.
    pub fn recipients(&self) -> &[Person] {
        &self.payload.booking.attendees
    }
}
