//! `booking_notification_sends`: one row per
//! `(outbox_event_id, recipient_email, event_type)`, layer 3 of the design
//! story. Every statement on the table lives in this module and its
//! children; other modules call them.
//!
//! - [`status`]: [`SendStatus`] and [`ConfirmedBy`], and their SQL text;
//! - [`claim`](mod@claim): the committed claim of a group of sends, before any send;
//! - [`outcome`]: the outcomes recorded after the sends, orphans marked
//!   UNKNOWN, and confirmations from SES's events;
//! - [`unknown`]: the ambiguous sends as operators and the sweeper see them;
//! - [`read`]: what the plans read (who may have been told), counts, retention;
//! - [`introductions`]: `booking_introductions`, who each booking may have
//!   reached, kept past retention.

pub mod claim;
pub mod introductions;
pub mod outcome;
pub mod read;
pub mod status;
pub mod unknown;

pub use claim::{claim, Claim, Claimant, Decided, GroupClaim};
pub use outcome::{Outcome, Settled};
pub use read::{counts, of_event, of_events, possibly_told_many, purge, Minute, Send};
pub use status::{ConfirmedBy, NotSentBecause, SendStatus, SentVia};
pub use unknown::{Confirmation, UnknownCounts, UnknownSend};
