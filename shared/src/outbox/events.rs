//! SQL that writes `outbox_events` rows, always inside the caller's
//! transaction: the event commits with the business change or not at all.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use crate::booking::domain::Booking;

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

/// Inserts a PENDING event for `payload.booking` at its current version.
pub async fn insert(
    tx: &impl GenericClient,
    event_type: EventType,
    payload: &EventPayload,
) -> Result<Uuid, tokio_postgres::Error> {
    let id = Uuid::now_v7();
    let json = serde_json::to_value(payload).expect("event payload serialises");
    tx.execute(
        &tx.prepare_cached("INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload) \
         VALUES ($1, $2, $3, $4, $5)").await?,
        &[&id, &payload.booking.id, &payload.booking.version, &event_type.as_str(), &json],
    )
    .await?;
    Ok(id)
}
