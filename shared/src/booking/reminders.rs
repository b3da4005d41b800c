//! Reminders before a meeting, as outbox events (docs/reminders.md).
//!
//! Each reminder is a `BOOKING_REMINDER` event due at the start minus its
//! offset, written in the same transaction as the booking change that
//! asked for it. Every change of the booking (a new time, attendees,
//! reminders, or any other field the reminder's text shows) writes a fresh
//! set for the booking as it now stands, and a cancel writes none; the
//! poller's plan then finds the booking's later event and records the
//! older set SUPERSEDED when each falls due (`notify::plan`).
//!
//! Lanes: the outbox sends a booking's events in version order, an event
//! waiting while an earlier one of its aggregate is unfinished. A reminder
//! due in three days must not hold back an update, nor wait behind an
//! older reminder the update made moot. So each reminder is the only event
//! of its own aggregate, a *lane* whose id is derived from the booking's
//! ([`lane`]), and the claim's ordering never relates it to anything else.
//! Lane ids share the booking id's first 14 bytes, so one index range
//! ([`lanes_of`]) finds every reminder of a booking, and retention keeps
//! the booking's events (and their sends) while one is unfinished.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::domain::{Booking, Reminder, Reminders};
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

/// The reminder events of `booking` as it now stands: one per reminder
/// still [`ahead`].
pub fn events(booking: &Booking, now: DateTime<Utc>, scale: u32) -> Vec<NewEvent> {
    ahead(&booking.reminders, booking.range.start(), now, scale)
        .into_iter()
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
