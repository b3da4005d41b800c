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
//!
//! An event can also run again after later ones settled: an operator's
//! resend of one recipient, or a replay of a dead letter. Then a later
//! event already DONE (it told them the newer state) or DEAD (replaying it
//! will) supersedes this one just the same, whatever `skip_superseded`
//! says, and an invitation is never sent for a booking that is cancelled
//! now: an old message never overtakes a newer one.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::sends;
use super::Notification;
use crate::booking::events::{BookingEvent, EventType, Notice};
use crate::booking::store;
use crate::db::DbResult;
use crate::outbox::events::{self, EventStatus};

/// One recipient's message, to send or to record as superseded.
#[derive(Debug, Clone)]
pub enum Planned {
    Send(Notification),
    /// Not sent: recorded as a SUPERSEDED claim naming event `by`.
    Superseded {
        notification: Notification,
        by: Uuid,
        reason: String,
    },
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
    Ok(plan_many(client, &[event], skip_superseded).await?.pop().expect("one plan per event"))
}

/// [`plan`] for a batch of events of distinct bookings, reading what the
/// plans need in a few statements for the whole batch.
pub async fn plan_many(
    client: &impl GenericClient,
    batch: &[&BookingEvent],
    skip_superseded: bool,
) -> DbResult<Vec<Vec<Planned>>> {
    let of: Vec<(Uuid, i32)> = batch.iter().map(|e| (e.payload.booking.id, e.payload.booking.version)).collect();
    let mut later = events::later_many(client, &of).await?;
    // Only updates and cancellations need to know who was told before.
    let asks: Vec<(Uuid, i32)> = batch.iter().zip(&of).filter(|(e, _)| !first_event(e)).map(|(_, a)| *a).collect();
    let whole = events::history_complete_many(client, &asks).await?;
    let whole_ids: Vec<Uuid> = whole.iter().copied().collect();
    let mut told_by = sends::possibly_told_many(client, &whole_ids).await?;
    let bookings: Vec<Uuid> = of.iter().map(|a| a.0).collect();
    let cancelled_now = store::cancelled_among(client, &bookings).await?;
    Ok(batch
        .iter()
        .map(|event| {
            let id = event.payload.booking.id;
            let cancelled = cancelled_now.contains(&id);
            let later = later.remove(&id).map(|l| readable(&l)).unwrap_or_default();
            let told = if first_event(event) {
                Told::Nobody
            } else if whole.contains(&id) {
                Told::Some(told_by.remove(&id).unwrap_or_default())
            } else {
                Told::Everyone
            };
            plan_with(event, &later, &told, cancelled, skip_superseded)
        })
        .collect())
}

/// A later event of the booking, and whether it has settled (DONE, or DEAD
/// for a replay): this event then runs again after it.
struct Later {
    event: BookingEvent,
    settled: bool,
}

/// The later events that tell anyone anything (an unreadable one will be
/// dead-lettered and tells no one), whatever their status.
fn readable(stored: &[events::StoredEvent]) -> Vec<Later> {
    stored
        .iter()
        .filter_map(|e| {
            let settled = matches!(e.status, EventStatus::Done | EventStatus::Dead);
            BookingEvent::from_stored(e).ok().map(|event| Later { event, settled })
        })
        .collect()
}

fn plan_with(
    event: &BookingEvent,
    later: &[Later],
    told: &Told,
    cancelled_now: bool,
    skip_superseded: bool,
) -> Vec<Planned> {
    // A cancellation writes its event in the same transaction as the
    // booking's status: the booking is cancelled now if a later event is,
    // or if the booking says so (its later events may be gone).
    let cancelled = cancelled_now || later.iter().any(|l| l.event.event_type == EventType::BookingCancelled);
    let mut plan = Vec::new();
    for (person, notice) in event.audience() {
        let email = person.email.as_str().to_string();
        let introduces = !told.may_have_told(&email);
        let n = Notification::new(event, person, notice, introduces);
        let mut telling = later.iter().rev().filter(|l| l.event.notice_for(&email).is_some());
        // The newest later event that tells them supersedes this message,
        // if it has settled (always) or is still to run (when skipping).
        let superseding = telling.clone().find(|l| l.settled || skip_superseded);
        let still_to_tell = telling.any(|l| !l.settled);
        if let Some(Later { event: last, .. }) = superseding {
            let reason =
                format!("superseded by the later {} (version {})", last.event_type, last.payload.booking.version);
            plan.push(Planned::Superseded { notification: n, by: last.id, reason });
        } else if cancelled && notice == Notice::Request && !still_to_tell {
            let reason = "the booking is cancelled: no invitation to a meeting that no longer exists".to_string();
            plan.push(Planned::Superseded { notification: n, by: event.id, reason });
        } else if skip_superseded && notice != Notice::Request && introduces {
            let reason = "never told of this meeting: nothing to cancel".to_string();
            plan.push(Planned::Superseded { notification: n, by: event.id, reason });
        } else {
            plan.push(Planned::Send(n));
        }
    }
    plan
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

fn first_event(event: &BookingEvent) -> bool {
    event.event_type == EventType::BookingConfirmed && event.payload.booking.version == 1
}
