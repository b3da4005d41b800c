//! One email to send: an event, as one recipient sees it. Every wing of
//! `notify` speaks of it: the plan makes them, the ledger claims them, the
//! limits count them, the mailer sends them.

use serde::Serialize;
use uuid::Uuid;

use crate::booking::domain::Person;
use crate::booking::events::{BookingEvent, EventPayload, EventType, Notice};

/// One email to send: an event, seen by one recipient.
#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    pub event_id: Uuid,
    pub event_type: EventType,
    pub payload: EventPayload,
    pub recipient: Person,
    /// What the recipient is told: the meeting as it stands, its
    /// cancellation, or their removal from it.
    pub notice: Notice,
    /// Nothing about this booking may have reached the recipient before:
    /// an update then reads as an invitation.
    pub introduces: bool,
    /// The send's claim (`booking_notification_sends.id`), once claimed: it
    /// travels with the message as a tag, so SES's events map back to it.
    pub claim: Option<Uuid>,
    /// The trace of the request that wrote the event (a link, not a
    /// parent): the send's span and SES's events about it name it.
    pub trace_id: Option<String>,
}

impl Notification {
    pub fn new(event: &BookingEvent, recipient: Person, notice: Notice, introduces: bool) -> Self {
        Self {
            event_id: event.id,
            event_type: event.event_type,
            payload: event.payload.clone(),
            recipient,
            notice,
            introduces,
            claim: None,
            trace_id: event.trace_id.clone(),
        }
    }
}
