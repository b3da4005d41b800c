//! Notifications: who is told about an outbox event, and how each send is
//! claimed before the mailer is called (layer 3 of the design story).
//!
//! - [`claims`]: SQL of `booking_notification_sends`.
//! - [`dispatch`]: claim → send → record, for every recipient of an event.
//! - [`mailer`]: the `Mailer` trait and its adapters.
//! - [`invite`]: the invitation email (MIME + iCalendar).
//! - [`unknown`]: sends whose outcome is unknown, and the explicit resend.

pub mod claims;
pub mod dispatch;
pub mod invite;
pub mod mailer;
pub mod unknown;

use serde::Serialize;
use uuid::Uuid;

use crate::booking::domain::Person;
use crate::outbox::events::{EventPayload, EventType};

/// One email to send: an event, seen by one recipient.
#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    pub event_id: Uuid,
    pub event_type: EventType,
    pub payload: EventPayload,
    pub recipient: Person,
}

/// Every attendee is told about a confirmation, a reschedule and a
/// cancellation.
pub fn recipients(_event_type: EventType, payload: &EventPayload) -> Vec<Person> {
    payload.booking.attendees.clone()
}
