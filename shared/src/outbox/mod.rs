//! The outbox: durable promises that a side effect must happen, and the
//! machinery that keeps them. One module per job:
//!
//! - [`events`]: writing an event inside the business transaction.
//! - [`claim`]: claiming due events (`FOR UPDATE SKIP LOCKED`, PROCESSING).
//! - [`complete`]: `processed_events` + DONE together; retry with backoff; dead letter.
//! - [`poller`]: the loop that claims and dispatches until its deadline.
//! - [`sweep`]: resetting rows stuck in PROCESSING (or failing them).
//! - [`retention`]: deleting finished rows in bounded batches.
//! - [`status`]: how far behind the outbox is (operators, metrics).
//! - [`dead_letter`]: listing and replaying DEAD events.
pub mod claim;
pub mod dead_letter;
pub mod complete;
pub mod events;
pub mod poller;
pub mod retention;
pub mod status;
pub mod sweep;
