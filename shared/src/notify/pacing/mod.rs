//! How fast, and to whom: what holds a send back before it is claimed.
//!
//! - [`send_rate`]: `send_rate`, the fleet's shared schedule at the
//!   account's rate (every statement on the table).
//! - [`pace`]: one poller's pace: places in flight, each send's start time
//!   from that schedule.
//! - [`recipient_limit`]: `mailbox_organizers`, each organizer's
//!   invitations to each mailbox today and the day's first contacts.
//! - [`pauses`]: `organizer_pauses`, organizers whose sending is paused for
//!   complaints, and lifting it.

pub mod pace;
pub mod pauses;
pub mod recipient_limit;
pub mod send_rate;
