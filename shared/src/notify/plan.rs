//! Who is told what about one event, resolved against the booking's later
//! events and the sends already made.
//!
//! Events of one booking are dispatched in version order, so when an event
//! is processed, any later event of its booking is still waiting. For each
//! recipient:
//!
//! - If a later event will tell them something (the meeting as it then
//!   stands, its cancellation or their removal), this event's message is
//!   moot: it is recorded as SUPERSEDED by that event, not sent.
//! - Else this event is their last word. A cancellation (or removal) is
//!   not sent to someone who was never told anything about the meeting;
//!   it is recorded as SUPERSEDED by this event ("nothing to cancel").
//! - Everyone else is sent this event's message. Someone who may have been
//!   told something (a send SENT, UNKNOWN or CLAIMED) always gets the
//!   final state, from this event or the later one.
//!
//! "Never told" is decided from the sends rows, only when every earlier
//! event of the booking is still stored (retention has not deleted the
//! proof); otherwise the recipient is presumed told. Each decision is
//! itself a claim, so a later attempt never revisits it.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::sends;
use super::Notification;
use crate::booking::events::{BookingEvent, EventType, Notice};
use crate::db::DbResult;
use crate::outbox::events;

/// One recipient's message, to send or to record as superseded.
#[derive(Debug, Clone)]
pub enum Planned {
    Send(Notification),
    /// Not sent: recorded as a SUPERSEDED claim naming event `by`.
    Superseded { notification: Notification, by: Uuid, reason: String },
}

impl Planned {
    pub fn notification(&self) -> &Notification {
        match self {
            Planned::Send(n) | Planned::Superseded { notification: n, .. } => n,
        }
    }
}

/// The plan for `event`. With `skip_superseded` off, everyone is sent
/// this event's message, as before superseding existed.
pub async fn plan(client: &impl GenericClient, event: &BookingEvent, skip_superseded: bool) -> DbResult<Vec<Planned>> {
    let booking = &event.payload.booking;
    let later: Vec<BookingEvent> = if skip_superseded {
        events::later_unfinished(client, booking.id, booking.version)
            .await?
            .iter()
            // An unreadable later event will be dead-lettered: it tells no one.
            .filter_map(|e| BookingEvent::from_stored(e).ok())
            .collect()
    } else {
        Vec::new()
    };
    let told = told(client, event).await?;
    let mut plan = Vec::new();
    for (person, notice) in event.audience() {
        let email = person.email.as_str().to_string();
        let introduces = !told.may_have_told(&email);
        let n = Notification::new(event, person, notice, introduces);
        if let Some(last) = later.iter().rev().find(|l| l.notice_for(&email).is_some()) {
            let reason = format!("superseded by the later {} (version {})", last.event_type, last.payload.booking.version);
            plan.push(Planned::Superseded { notification: n, by: last.id, reason });
        } else if skip_superseded && notice != Notice::Request && introduces {
            let reason = "never told of this meeting: nothing to cancel".to_string();
            plan.push(Planned::Superseded { notification: n, by: event.id, reason });
        } else {
            plan.push(Planned::Send(n));
        }
    }
    Ok(plan)
}

/// Who may have been told something about the booking before this event.
enum Told {
    /// The first event of a booking: nobody yet (an earlier attempt's own
    /// claims are found by the claim itself).
    Nobody,
    Some(Vec<String>),
    /// The proof is gone (retention): presume everyone was.
    Everyone,
}

impl Told {
    fn may_have_told(&self, email: &str) -> bool {
        match self {
            Told::Nobody => false,
            Told::Some(told) => told.iter().any(|t| t == email),
            Told::Everyone => true,
        }
    }
}

async fn told(client: &impl GenericClient, event: &BookingEvent) -> DbResult<Told> {
    let booking = &event.payload.booking;
    if event.event_type == EventType::BookingConfirmed && booking.version == 1 {
        return Ok(Told::Nobody);
    }
    if !events::history_complete(client, booking.id, booking.version).await? {
        return Ok(Told::Everyone);
    }
    Ok(Told::Some(sends::possibly_told(client, booking.id).await?))
}
