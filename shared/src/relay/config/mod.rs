//! The workers' settings, read from the environment once per cold start and
//! validated there, so a misconfigured function fails its first invocation
//! with the variable to change: [`poller`]'s and [`sweeper`]'s.

pub mod poller;
pub mod sweeper;

pub use poller::{PollerConfig, COLD_START_ALLOWANCE, MAX_LEASE, MIN_LEASE};
pub use sweeper::{FeedbackConfig, RetentionConfig, SweeperConfig};
