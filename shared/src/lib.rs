//! # The booking service and its transactional outbox
//!
//! This crate holds all the behaviour of the service; the Lambda binaries in
//! `functions/` only adapt Lambda events to calls into it. The modules are
//! layers, and imports point one way, down:
//!
//! ```text
//!   console          the operators' web console: overview, timelines,
//!     ▼              outboxctl's actions (reads each table through its owner)
//!   relay  api       the workers (poller, sweeper, retention, run summaries);
//!     ▼     ▼        HTTP requests → booking operations (problem+json)
//!   notify           one email per recipient: claim, send, record (SES);
//!     ▼              where each notification stands, for the API
//!   booking          bookings, their rules, and the events they write
//!     ▼
//!   outbox           a generic outbox: outbox_events, processed_events
//!     ▼
//!   db, config, fault, telemetry   (used by every layer)
//! ```
//!
//! `relay` and `api` sit side by side and never import each other;
//! `console`, at the very top, reads the sweeper's settings from `relay`
//! and a request's JWT claims as `api` reads them; nothing imports
//! `console`, `api` or `relay` from below; `outbox` imports neither `booking` nor `notify`. A module
//! that needs something from above is handed it as a value.
//!
//! Follow one booking down the tree (the design story, `outbox-story.txt`):
//!
//! 1. [`api`] turns an API Gateway HTTP API request into a call on
//!    [`booking`], after checking the caller and parsing the body into domain
//!    types (an invalid title or address cannot exist past the edge).
//! 2. [`booking::service`] writes the booking **and** its outbox event
//!    ([`booking::events`] → [`outbox::events::insert`]) in one Postgres
//!    transaction, so either both exist or neither does.
//! 3. [`relay::poller`] claims due events with `FOR UPDATE SKIP LOCKED`
//!    ([`outbox::events::claim`]); [`relay::batch`] records each in
//!    `processed_events` ([`outbox::processed`]) and hands every recipient's
//!    [`notify::notification::Notification`] to [`notify::deliver`], which claims the send
//!    in `booking_notification_sends` ([`notify::sends`]), commits, and only
//!    then calls the mailer ([`notify::mailer::ses`]).
//! 4. [`relay::sweeper`] resets rows stuck in PROCESSING and applies
//!    retention.
//!
//! Cross-cutting pieces: [`config`] (validated at cold start), [`db`] (the
//! pool, migrations and the one [`db::DbError`]), [`fault`] (named fault
//! points, inert unless a test turns them on) and [`telemetry`].

/// With feature `mimalloc` (every function turns it on), mimalloc is the
/// global allocator: the handlers allocate many small short-lived values
/// (JSON, rows), where it is cheaper than glibc's malloc.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod api;
pub mod booking;
pub mod config;
pub mod console;
pub mod db;
pub mod fault;
pub mod notify;
pub mod outbox;
pub mod relay;
pub mod telemetry;
