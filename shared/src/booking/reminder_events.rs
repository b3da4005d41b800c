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
//! of its own aggregate, a *lane* whose id is derived from the booking's
//! ([`lane`]), and the claim's ordering never relates it to anything else.
//! A booking's lane ids share their first 14 bytes (the booking id's, but
//! for its version nibble), so one index range
//! ([`lanes_of`]) finds every reminder of a booking, and retention keeps
//! the booking's events (and their sends) while one is unfinished.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::domain::{Booking, BookingStatus, Reminder, Reminders};
use super::events::{EventPayload, EventType};
use crate::outbox::NewEvent;

/// The lane of a booking's reminder: a side lane of the booking
/// ([`outbox::events::side_lane`](crate::outbox::events::side_lane)),
/// numbered by booking version and position.
pub fn lane(booking: Uuid, version: i32, slot: usize) -> Uuid {
    let n = ((version as u32).wrapping_mul(8).wrapping_add(slot as u32) & 0xffff) as u16;
    crate::outbox::events::side_lane(booking, n)
}

/// The first and last lane ids a booking's reminders can have (inclusive).
pub fn lanes_of(booking: Uuid) -> (Uuid, Uuid) {
    crate::outbox::events::side_lanes_of(booking)
}

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
        .map(|(slot, reminder, due)| {
            let payload = EventPayload { reminder: Some(reminder), ..EventPayload::of(booking.clone()) };
            NewEvent {
                aggregate_id: lane(booking.id, booking.version, slot),
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
    fn lanes_are_never_a_booking_id_and_stay_within_their_bookings_range() {
        let booking = Uuid::now_v7();
        let (first, last) = lanes_of(booking);
        let mut seen = std::collections::HashSet::new();
        for version in 1..200 {
            for slot in 0..5 {
                let l = lane(booking, version, slot);
                assert_eq!(l.get_version_num(), 8);
                assert!(first <= l && l <= last, "{l} in [{first}, {last}]");
                assert!(seen.insert(l), "one lane per version and slot");
            }
        }
        assert_eq!(booking.as_bytes()[..6], first.as_bytes()[..6], "the same time prefix");
        let other = Uuid::now_v7();
        assert!(!(lanes_of(other).0 <= lane(booking, 1, 0) && lane(booking, 1, 0) <= lanes_of(other).1));
    }
}
