//! The relay: the workers at the top of the library. They drive the layers
//! below and nothing below imports them.
//!
//! - [`poller`]: claims due outbox events until its deadline, under a
//!   [`lease`], woken by [`wake`] when one commits; [`role`]: what each of
//!   its batch loops claims; [`rate`]: the fleet's send rate it reads;
//!   [`canary`]: a message when SES's evidence about ambiguous sends needs
//!   one; [`assemble`]: a poller from the function's settings.
//! - [`batch`]: a claimed batch from `processed_events` to DONE, telling
//!   every recipient through `notify` and settling each event by the
//!   outcomes.
//! - [`sweeper`]: resets rows stuck in PROCESSING, applies [`retention`],
//!   reports metrics.
//! - [`config`]: their settings, validated at cold start; [`summary`]: what
//!   a run did; [`status`]: how the pipeline stands (operators).

#[cfg(all(feature = "ses", feature = "smtp"))]
pub mod assemble;
pub mod batch;
pub mod canary;
pub mod config;
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

/// Why a worker run stopped: the database, or an injected fault (the same
/// error the deliverer returns).
pub use crate::fault::RunError as RelayError;
