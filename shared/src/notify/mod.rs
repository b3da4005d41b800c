//! Notifications: one email per recipient of a booking event, each claimed
//! in `booking_notification_sends` and committed before the mailer is called
//! (layer 3 of the design story).
//!
//! Its wings, each named by its job, from the bottom up (a wing imports
//! only wings below it, and no two files of a wing import each other; the
//! layers test holds both):
//!
//! - [`notification`]: one email, an event as one recipient sees it.
//! - [`sends`]: the ledger: `booking_notification_sends` (every statement)
//!   and `booking_introductions` (who each booking may have reached).
//! - [`pacing`]: how fast and to whom: the fleet's send rate (`send_rate`),
//!   one poller's pace, each mailbox's daily limits (`mailbox_organizers`),
//!   organizers whose sending is paused (`organizer_pauses`).
//! - [`render`]: the message itself: MIME and iCalendar, in each
//!   recipient's language (Fluent) and zone (ICU4X).
//! - [`mailer`]: the `Mailer` port and its adapters (SES v2, SMTP,
//!   recording), and the tags each message carries.
//! - [`evidence`]: what SES says after the call: its events read and
//!   recorded (`send_feedback`), suppressions, the watermark of its
//!   stream, and the resends decided on it (`notification_resends`).
//! - [`plan`]: who is told what about an event, and what a later event of
//!   the booking made moot.
//! - [`deliver`]: claim → commit → send → record, for a batch's
//!   recipients; the outcome is one `Delivery` each.
//! - [`tracking`]: where each notification of a booking stands, per
//!   recipient (the API's read model).

pub mod deliver;
pub mod evidence;
pub mod mailer;
pub mod notification;
pub mod pacing;
pub mod plan;
pub mod render;
pub mod sends;
pub mod tracking;
