//! The `text/calendar` part of each message (iTIP, RFC 5546): `METHOD:REQUEST`
//! with every attendee for the meeting as it stands (an invitation or an
//! update), `METHOD:CANCEL` for a cancelled one, and a `CANCEL` listing only
//! the recipient for an attendee an update removed. `UID` is the booking's,
//! so every message about one booking updates the same calendar entry;
//! `SEQUENCE` is the booking version minus one, so an update or
//! cancellation replaces the earlier invite.

use icalendar::{Calendar, Component, EventLike, EventStatus, Property};

use crate::booking::domain::{GuestList, Person};
use crate::booking::events::Notice;
use crate::notify::notification::Notification;

/// The product's own identifier (RFC 5545 §3.7.3), not a library's
/// default: no version in it, so one event's part is the same bytes from
/// every build.
pub const PRODID: &str = "-//booking-outbox//Booking Outbox//EN";

/// The stable iCalendar UID of a booking.
pub fn uid(booking_id: uuid::Uuid) -> String {
    format!("{booking_id}@booking-outbox")
}

/// A UTC DATE-TIME (RFC 5545 §3.3.5, form #2).
fn format_utc(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y%m%dT%H%M%SZ").to_string()
}

/// iCalendar parameter values cannot contain DQUOTE (RFC 5545 §3.1).
fn cn(name: &str) -> String {
    name.replace('"', "'")
}

fn person_property(key: &str, p: &Person) -> Property {
    let mut prop = Property::new(key, format!("mailto:{}", p.email));
    prop.add_parameter("CN", &cn(p.name.as_str()));
    prop
}

/// The `text/calendar` body; None for a reminder, which carries none.
pub fn ics(n: &Notification) -> Option<String> {
    let b = &n.payload.booking;
    let method = n.notice.method()?;
    let mut event = icalendar::Event::new();
    event
        .uid(&uid(b.id))
        .sequence(b.version.saturating_sub(1).max(0) as u32)
        .timestamp(b.updated_at)
        .starts(b.range.start())
        .ends(b.range.end())
        .summary(b.title.as_str())
        .status(if method == "CANCEL" { EventStatus::Cancelled } else { EventStatus::Confirmed })
        .append_property(Property::new("CREATED", format_utc(b.created_at)))
        .append_property(Property::new("LAST-MODIFIED", format_utc(b.updated_at)))
        // Busy while it lasts, a meeting anyone on the list may see.
        .append_property(Property::new("TRANSP", "OPAQUE"))
        .append_property(Property::new("CLASS", "PUBLIC"))
        .append_property(person_property("ORGANIZER", &b.organizer));
    if let Some(d) = &b.description {
        event.description(d.as_str());
    }
    if let Some(l) = &b.location {
        event.location(l.as_str());
        // A meeting room's link, where a calendar app shows one to click.
        if let Some(link) = super::card::link_in(l.as_str()) {
            event.append_property(Property::new("URL", link.href));
        }
    }
    // A removed attendee's CANCEL names only them (RFC 5546 §3.2.5); so
    // does every message of a booking whose guest list is hidden.
    let attendees = match (n.notice, b.guest_list) {
        (Notice::Removed, _) | (_, GuestList::Hidden) => std::slice::from_ref(&n.recipient),
        (Notice::Request | Notice::Cancel | Notice::Reminder, GuestList::Visible) => b.attendees.as_slice(),
    };
    for a in attendees {
        let mut prop = person_property("ATTENDEE", a);
        prop.add_parameter("ROLE", "REQ-PARTICIPANT").add_parameter("CUTYPE", "INDIVIDUAL");
        if method == "REQUEST" {
            prop.add_parameter("PARTSTAT", "NEEDS-ACTION").add_parameter("RSVP", "TRUE");
        }
        event.append_multi_property(prop);
    }
    let mut cal = Calendar::empty();
    cal.append_property(Property::new("VERSION", "2.0"))
        .append_property(Property::new("PRODID", PRODID))
        .append_property(Property::new("CALSCALE", "GREGORIAN"))
        .append_property(Property::new("METHOD", method));
    cal.push(event.done());
    Some(cal.done().to_string())
}
