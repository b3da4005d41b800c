//! Notifications: one email per recipient of a booking event, each claimed
//! in `booking_notification_sends` and committed before the mailer is called
//! (layer 3 of the design story).
//!
//! - [`sends`]: the `booking_notification_sends` table, every statement.
//! - [`deliver`]: claim → send → record, for one notification; the outcome
//!   is one [`deliver::Delivery`].
//! - [`feedback`]: SES's own events about each send: confirmations of
//!   ambiguous sends, deliveries, bounces, complaints, suppression.
//! - [`mailer`]: the `Mailer` trait and its adapters (SES, recording).
//! - [`invite`]: the invitation email (MIME + iCalendar).
//! - [`unknown`]: sends whose outcome is unknown, and the explicit resend.

pub mod deliver;
pub mod feedback;
pub mod invite;
pub mod mailer;
pub mod sends;
pub mod unknown;

use serde::Serialize;
use uuid::Uuid;

use crate::booking::domain::Person;
use crate::booking::events::{BookingEvent, EventPayload, EventType};

/// One email to send: an event, seen by one recipient.
#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    pub event_id: Uuid,
    pub event_type: EventType,
    pub payload: EventPayload,
    pub recipient: Person,
    /// The send's claim (`booking_notification_sends.id`), once claimed: it
    /// travels with the message as a tag, so SES's events map back to it.
    pub claim: Option<Uuid>,
}

impl Notification {
    /// One notification per recipient of `event`, in the event's order.
    pub fn for_each_recipient(event: &BookingEvent) -> Vec<Notification> {
        event
            .recipients()
            .iter()
            .map(|recipient| Notification {
                event_id: event.id,
                event_type: event.event_type,
                payload: event.payload.clone(),
                recipient: recipient.clone(),
                claim: None,
            })
            .collect()
    }
}
