//! # The booking service and its transactional outbox
//!
//! This crate holds all the behaviour of the service; the Lambda binaries in
//! `functions/` only adapt Lambda events to calls into it. Read it in the
//! order a booking travels (the design story, `outbox-story.txt`):
//!
//! 1. [`api`] turns an API Gateway HTTP API request into a call on
//!    [`booking`], after checking the caller and parsing the body into domain
//!    types (an invalid title or address cannot exist past the edge).
//! 2. [`booking`] writes the booking **and** its outbox event in one Postgres
//!    transaction ([`outbox::events`]), so either both exist or neither does.
//! 3. The poller and sweeper (later layers of [`outbox`]) claim due events with
//!    `FOR UPDATE SKIP LOCKED`, record them in `processed_events`, and claim
//!    each recipient's notification before the mailer is called.
//!
//! Cross-cutting pieces: [`config`] (validated at cold start), [`db`] (the
//! connection pool and migrations) and [`fault`] (named fault points, inert
//! unless a test turns them on).

pub mod api;
pub mod booking;
pub mod config;
pub mod db;
pub mod fault;
pub mod notify;
pub mod outbox;
pub mod telemetry;
