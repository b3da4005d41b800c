//! Notifications: one email per recipient of a booking event, each claimed
//! in `booking_notification_sends` and committed before the mailer is called
//! (layer 3 of the design story).
//!
//! - [`sends`]: the `booking_notification_sends` table, every statement.
//! - [`plan`]: who is told what about an event, and which of those
//!   messages a later event of the booking has superseded.
//! - [`deliver`]: claim → send → record, for one notification; the outcome
//!   is one [`deliver::Delivery`].
//! - [`feedback`]: SES's own events about each send: confirmations of
//!   ambiguous sends, deliveries, bounces, complaints, suppression.
//! - [`mailer`]: the `Mailer` trait and its adapters (SES, recording).
//! - [`send_rate`]: the `send_rate` table, the fleet's shared token bucket.
//! - [`introductions`]: who each booking may have reached, kept as
//!   retention deletes its events.
//! - [`pauses`]: organizers whose sending is paused (complaints about
//!   their mail), and lifting it.
//! - [`recipient_limit`]: each organizer's invitations to each mailbox
//!   today, and its first contacts; an invitation over either is CAPPED.
//! - [`pace`]: one poller's pace: tokens from that bucket, and enough sends
//!   in flight to reach the rate.
//! - [`invite`]: the invitation email (MIME + iCalendar).
//! - [`unknown`]: sends whose outcome is unknown, and the explicit resend.

pub mod deliver;
pub mod evidence;
pub mod feedback;
pub mod i18n;
pub mod introductions;
pub mod invite;
pub mod mailer;
pub mod pace;
pub mod pauses;
pub mod plan;
pub mod recipient_limit;
pub mod send_rate;
pub mod sends;
pub mod tracking;
pub mod unknown;

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
