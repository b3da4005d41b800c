//! Reminders before a meeting, as outbox events (docs/reminders.md).
//!
//! Each reminder is a `BOOKING_REMINDER` event due at the start minus its
//! offset, written in the same transaction as the booking change that
//! asked for it. One event answers for each pair of a start and an offset:
//! a change that keeps the start and the offset ([`covered`]) writes no new
//! event for it, and the one already written reminds the booking as it
//! stands when it falls due (its attendees, title and place then). A change
//! of the start, an offset added, or one removed and added again, writes a
//! new event for each offset still ahead; a cancel writes none. When an
//! older event falls due, the poller's plan finds the later event that
//! moved the meeting, cancelled it or dropped the offset, and records it
//! SUPERSEDED (`notify::plan`). So a reminder whose time came just as the
//! booking changed is never lost, nor sent twice.
//!
//! Lanes: the outbox sends a booking's events in version order, an event
//! waiting while an earlier one of its aggregate is unfinished. A reminder
//! due in three days must not hold back an update, nor wait behind an
//! older reminder the update made moot. So each reminder is the only event
//! of its own aggregate (a fresh id), in the booking's *lane*
//! (`NewEvent::lane_of`): the claim's ordering never relates it to anything
//! else, a reader of the booking finds it, and retention keeps the
//! booking's events (and their sends) while one is unfinished.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::domain::{Booking, BookingStatus, Reminder, Reminders};
use super::events::{EventPayload, EventType};
use crate::outbox::NewEvent;

/// The reminders of a meeting starting at `start` whose time is still
/// ahead at `now`, with their slot and due time (a meeting booked ten
/// minutes ahead gets no 15-minute reminder). `scale` divides every offset
/// (dev only: `DEV_REMINDER_SCALE`; 1 everywhere else).
pub fn ahead(
    reminders: &Reminders,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    scale: u32,
) -> Vec<(usize, Reminder, DateTime<Utc>)> {
    reminders
        .iter()
        .enumerate()
        .map(|(slot, r)| (slot, r, start - r.duration() / scale.max(1) as i32))
        .filter(|(_, _, due)| *due > now)
        .collect()
}

/// Whether `booking` still asks for a reminder `reminder` before a meeting
/// starting at `start`: not cancelled, at that start, with that offset.
pub fn still_asks(booking: &Booking, start: DateTime<Utc>, reminder: Reminder) -> bool {
    booking.status != BookingStatus::Cancelled
        && booking.range.start() == start
        && booking.reminders.iter().any(|r| r == reminder)
}

/// Whether the reminder `reminder` of `booking` was already written by an
/// earlier version: the version before it (`before`) asked for the same
/// one at the same start. Its event still answers for it.
pub fn covered(before: Option<&Booking>, booking: &Booking, reminder: Reminder) -> bool {
    before.is_some_and(|b| still_asks(b, booking.range.start(), reminder))
}

/// The reminder events to write for `booking` as it now stands, changed
/// from `before` (None: just created): one per reminder still [`ahead`]
/// that no earlier event answers for ([`covered`]).
pub fn events(booking: &Booking, before: Option<&Booking>, now: DateTime<Utc>, scale: u32) -> Vec<NewEvent> {
    ahead(&booking.reminders, booking.range.start(), now, scale)
        .into_iter()
        .filter(|(_, reminder, _)| !covered(before, booking, *reminder))
        .map(|(_, reminder, due)| {
            let payload = EventPayload { reminder: Some(reminder), ..EventPayload::of(booking.clone()) };
            NewEvent {
                aggregate_id: Uuid::now_v7(),
                lane_of: Some(booking.id),
                due_at: Some(due),
                ..payload.to_outbox(EventType::BookingReminder)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reminder_is_an_aggregate_of_its_own_in_its_bookings_lane() {
        let json = r#"{"id": "0190f5a2-1c2b-7000-8000-000000000001", "version": 1, "status": "CONFIRMED",
            "organizer": {"email": "alice@example.com", "name": "Alice"},
            "attendees": [{"email": "bob@example.com", "name": "Bob"}],
            "title": "Planning", "start": "2030-01-07T10:00:00Z", "end": "2030-01-07T11:00:00Z",
            "timezone": "UTC", "reminders": ["PT15M", "P1D"], "created_at": "2029-12-01T00:00:00Z",
            "updated_at": "2029-12-01T00:00:00Z"}"#;
        let booking: Booking = serde_json::from_str(json).expect("a booking");
        let now = "2029-12-01T00:00:00Z".parse().unwrap();
        let written = events(&booking, None, now, 1);
        assert_eq!(written.len(), 2);
        for e in &written {
            assert_eq!(e.lane_of, Some(booking.id));
            assert_ne!(e.aggregate_id, booking.id);
            assert!(e.due_at.is_some());
        }
        assert_ne!(written[0].aggregate_id, written[1].aggregate_id);
    }
}
