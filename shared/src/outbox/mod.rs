//! A generic transactional outbox: durable promises that a side effect must
//! happen, and the machinery that keeps them. It knows nothing of what its
//! aggregates are, nor of what its consumers do: an event is an aggregate
//! id, a version, a type name, an opaque JSON payload and, given as typed
//! columns when it is written, its due time, its turn and its lane;
//! written in the caller's transaction.
//!
//! - [`events`]: the `outbox_events` table: writing an event, claiming due
//!   events (`FOR UPDATE SKIP LOCKED`), and every status transition, each
//!   written once ([`events::EventStatus`]).
//! - [`processed`]: the `processed_events` table (layer 2 of the story).
//!
//! The workers that drive it live in `relay`, above everything else.

pub mod events;
pub mod processed;

pub use events::{ClaimedEvent, EventStatus, NewEvent};
