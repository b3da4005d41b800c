//! The sweeper's settings: its sweep, retention, and the evidence it
//! resends UNKNOWN sends on.

use std::time::Duration;

use crate::config::settings as S;
use crate::config::ConfigError;
use crate::outbox::events::transitions::Stuck;

#[derive(Debug, Clone)]
pub struct SweeperConfig {
    /// A PROCESSING row older than this is presumed abandoned.
    pub stuck_after: Duration,
    /// The poller's maximum run time (its Lambda timeout).
    pub poller_timeout: Duration,
    pub max_attempts: i32,
    /// Rows per sweep statement.
    pub batch_size: i64,
    pub retention: RetentionConfig,
    pub feedback: FeedbackConfig,
}

impl SweeperConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let cfg = Self::new(
            Duration::from_secs(S::SWEEP_STUCK_AFTER_SECS.parsed()?),
            Duration::from_secs(S::POLLER_TIMEOUT_SECS.parsed()?),
            S::OUTBOX_MAX_ATTEMPTS.parsed()?,
            S::SWEEP_BATCH_SIZE.parsed()?,
            RetentionConfig::from_env()?,
        )?;
        Ok(Self { feedback: FeedbackConfig::from_env()?, ..cfg })
    }

    pub fn new(
        stuck_after: Duration,
        poller_timeout: Duration,
        max_attempts: i32,
        batch_size: i64,
        retention: RetentionConfig,
    ) -> Result<Self, ConfigError> {
        // A live poller must never be swept: its row would be handed to a
        // second worker while the first is still sending.
        if stuck_after <= poller_timeout {
            return Err(ConfigError::new(
                "SWEEP_STUCK_AFTER_SECS",
                format!(
                    ": the sweeper timeout ({}s) must exceed the poller timeout ({}s)",
                    stuck_after.as_secs(),
                    poller_timeout.as_secs()
                ),
                "raise SWEEP_STUCK_AFTER_SECS or lower POLLER_TIMEOUT_SECS",
            ));
        }
        if max_attempts < 1 {
            return Err(ConfigError::new("OUTBOX_MAX_ATTEMPTS", "must be at least 1", "set it to 1 or more"));
        }
        if batch_size < 1 {
            return Err(ConfigError::new("SWEEP_BATCH_SIZE", "must be at least 1", "set it to 1 or more"));
        }
        Ok(Self {
            stuck_after,
            poller_timeout,
            max_attempts,
            batch_size,
            retention,
            feedback: FeedbackConfig::default(),
        })
    }
}

impl SweeperConfig {
    /// The rows one sweep statement takes.
    pub fn stuck(&self) -> Stuck {
        Stuck { stuck_after: self.stuck_after, max_attempts: self.max_attempts, limit: self.batch_size }
    }
}

#[derive(Debug, Clone)]
pub struct RetentionConfig {
    pub max_age: Duration,
    pub batch_size: i64,
    /// Batches per table per run (bounds one run's work).
    pub max_batches: u32,
    pub idempotency_key_ttl: Duration,
}

impl RetentionConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let days: u64 = S::RETENTION_DAYS.parsed()?;
        let cfg = Self {
            max_age: Duration::from_secs(days * 86_400),
            batch_size: S::RETENTION_BATCH_SIZE.parsed()?,
            max_batches: S::RETENTION_MAX_BATCHES.parsed()?,
            idempotency_key_ttl: Duration::from_secs(S::IDEMPOTENCY_KEY_TTL_HOURS.parsed::<u64>()? * 3600),
        };
        if cfg.batch_size < 1 {
            return Err(ConfigError::new("RETENTION_BATCH_SIZE", "must be at least 1", "set it to 1 or more"));
        }
        // The sweeper's role may delete nothing younger (V39's policies).
        if days < 1 {
            return Err(ConfigError::new("RETENTION_DAYS", "must be at least 1", "set it to 1 or more"));
        }
        Ok(cfg)
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(S::RETENTION_DAYS.default_value::<u64>() * 86_400),
            batch_size: S::RETENTION_BATCH_SIZE.default_value(),
            max_batches: S::RETENTION_MAX_BATCHES.default_value(),
            idempotency_key_ttl: Duration::from_secs(S::IDEMPOTENCY_KEY_TTL_HOURS.default_value::<u64>() * 3600),
        }
    }
}

/// Settling sends whose outcome stayed unknown on SES's evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackConfig {
    /// How long after SES's event stream moved past an ambiguous send its
    /// own event may still come (`FEEDBACK_GRACE_SECS`); then, with none,
    /// it is resent.
    pub grace: Duration,
    /// Automatic resends of one recipient's ambiguous send
    /// (`UNKNOWN_RESENDS_MAX`; 0: none, every one left for an operator).
    pub max_resends: u32,
}

impl Default for FeedbackConfig {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(S::FEEDBACK_GRACE_SECS.default_value()),
            max_resends: S::UNKNOWN_RESENDS_MAX.default_value(),
        }
    }
}

impl FeedbackConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::new(Duration::from_secs(S::FEEDBACK_GRACE_SECS.parsed()?), S::UNKNOWN_RESENDS_MAX.parsed()?)
    }

    pub fn new(grace: Duration, max_resends: u32) -> Result<Self, ConfigError> {
        if grace.is_zero() {
            return Err(ConfigError::new(
                "FEEDBACK_GRACE_SECS",
                "must be at least 1",
                "set it to how much later than another message's an SES event may arrive, or unset it for the default",
            ));
        }
        Ok(Self { grace, max_resends })
    }
}
