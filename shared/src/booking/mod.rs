//! Bookings: the business operations and the tables they own.
//!
//! Every operation that changes a booking writes its outbox event in the same
//! transaction (see [`service`]). That is the first guarantee of the design
//! story: the booking and the promise to notify exist together or not at all.
//! [`events`] says what those events carry and who is told about them.

pub mod domain;
pub mod events;
pub mod idempotency;
pub mod limits;
pub mod reminder_events;
pub mod service;
pub mod store;

/// Why a booking operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BookingError {
    #[error("booking not found")]
    NotFound,
    /// The caller may see the booking but may not change it.
    #[error("only the organizer may change this booking")]
    NotOrganizer,
    #[error("the organizer already has an active booking overlapping this time range")]
    Overlap,
    #[error("the booking is at version {current}, not {expected}")]
    VersionConflict { expected: i32, current: i32 },
    #[error("the booking is cancelled and cannot be rescheduled")]
    Cancelled,
    #[error("this Idempotency-Key was already used with a different request")]
    IdempotencyKeyMismatch,
    /// An abuse limit; nothing was written.
    /// `retry_after` is the time until the limit resets, when it is
    /// today's (a day ahead, full of reminders, does not empty by waiting).
    #[error("{}{}", .limit.describe(*.max), .retry_after.map(|d| format!("; the limit resets in {} s", d.as_secs())).unwrap_or_default())]
    LimitExceeded { limit: limits::Limit, max: i32, retry_after: Option<std::time::Duration> },
    #[error(transparent)]
    Db(#[from] crate::db::DbError),
    #[error(transparent)]
    Fault(#[from] crate::fault::FaultError),
}

crate::from_driver_errors!(BookingError);
