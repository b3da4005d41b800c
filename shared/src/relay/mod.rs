//! The relay: the workers at the top of the library. They drive the layers
//! below and nothing below imports them.
//!
//! - [`poller`]: claims due outbox events until its deadline, woken by
//!   [`wake`] when one commits, and sends a canary (`canary`) when SES's
//!   evidence about ambiguous sends needs one;
//!   [`event`] takes each one from `processed_events` to DONE, telling every
//!   recipient through `notify` and settling the event by the outcomes.
//! - [`sweeper`]: resets rows stuck in PROCESSING, applies [`retention`],
//!   reports metrics.
//! - [`config`]: their settings, validated at cold start; [`summary`]: what
//!   a run did; [`status`]: how the pipeline stands (operators).

mod canary;
pub mod config;
pub mod event;
pub mod lease;
pub mod poller;
pub mod rate;
pub mod retention;
pub mod role;
pub mod status;
pub mod summary;
pub mod sweeper;
pub mod wake;

pub use config::{FeedbackConfig, PollerConfig, RetentionConfig, SweeperConfig};
pub use poller::{deadline_from, Poller};
pub use summary::{Health, RunSummary, SweepRun};
pub use wake::Wake;

use crate::db::DbError;
use crate::fault::FaultError;
use crate::notify::deliver::DeliverError;

/// Why a worker run stopped: the database, or an injected fault. (Mailer
/// failures are outcomes, not errors.)
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Fault(#[from] FaultError),
}

impl From<DeliverError> for RelayError {
    fn from(e: DeliverError) -> Self {
        match e {
            DeliverError::Db(e) => RelayError::Db(e),
            DeliverError::Fault(e) => RelayError::Fault(e),
        }
    }
}

crate::from_driver_errors!(RelayError);
