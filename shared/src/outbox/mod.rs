//! The outbox: durable promises that a side effect must happen.
//!
//! - [`events`]: writing an event inside the business transaction.
pub mod events;
