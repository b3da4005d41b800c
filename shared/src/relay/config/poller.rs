//! The poller's settings (`PollerConfig`), read from the environment once
//! per cold start and validated there.

use std::time::Duration;

use crate::config::settings as S;
use crate::config::ConfigError;
use crate::notify::pacing::recipient_limit::RecipientLimits;

#[derive(Debug, Clone)]
pub struct PollerConfig {
    pub batch_size: i64,
    /// The most sends one poller has in flight (`POLLER_CONCURRENCY`); a
    /// paced poller keeps the fleet's rate × its send latency of them.
    pub concurrency: usize,
    /// The most sends claimed in one committed statement
    /// (`POLLER_CLAIM_GROUP`). A send is claimed only once it may start (a
    /// place in flight, and its time in the fleet's schedule), so a crash
    /// leaves at most the sends in flight UNKNOWN, whatever this is.
    pub claim_group: usize,
    /// The share of the fleet's rate the schedule keeps
    /// (`SEND_RATE_HEADROOM`): below 1, so the network's jitter never puts
    /// more than the rate in one second at the provider.
    pub send_rate_headroom: f64,
    /// At most one canary this often (`SES_CANARY_EVERY_SECS`), and only
    /// after that long without an SES event.
    pub canary_every: Duration,
    /// Batches processed at once by one poller
    /// (`POLLER_BATCHES_IN_FLIGHT`, default 2): the next batch is claimed
    /// while one waits on the database or the mailer.
    pub batches_in_flight: usize,
    /// Wait between empty polls (the fallback when listening).
    pub idle_wait: Duration,
    /// Wake on a committed event's notification (`POLLER_LISTEN`, default
    /// on); off, only the idle wait paces the polls.
    pub listen: bool,
    /// Stop claiming when less than this remains before the deadline.
    pub safety_margin: Duration,
    pub max_attempts: i32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// How long to wait after the provider paused sending.
    pub pause_delay: Duration,
    /// `locked_by` of claimed rows, and the holder of the run's lease.
    pub worker_id: String,
    /// How long a run's lease lasts unrenewed (`POLLER_LEASE_SECS`): once
    /// its poller stops renewing it (dead, frozen, cut off), its events are
    /// taken over by the next claim after at most this long. Renewed every
    /// quarter of it ([`RENEWALS_PER_LEASE`](crate::relay::lease::RENEWALS_PER_LEASE)).
    pub lease: Duration,
    /// Record a notification a later event of the booking made moot as
    /// SUPERSEDED instead of sending it (`POLLER_SKIP_SUPERSEDED`, default on).
    pub skip_superseded: bool,
    /// The function's own timeout (`POLLER_TIMEOUT_SECS`), when known: one
    /// send's worst case plus the safety margin must fit inside it.
    pub function_timeout: Option<Duration>,
    /// Optional cap on one invocation's polling time (and the run time used
    /// when the runtime reports no usable deadline, as local emulators do).
    pub max_run: Option<Duration>,
    /// The schedule's period (`POLLER_SCHEDULE_SECS`), when known: one run
    /// should poll past the next run's start, so one is always claiming.
    pub schedule: Option<Duration>,
    /// Invitations one mailbox may get (`LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY`
    /// per organizer, `LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY` first
    /// contacts); over them, an invitation is CAPPED.
    pub recipient_limits: RecipientLimits,
}

impl PollerConfig {
    pub fn concurrency_from_env() -> Result<usize, ConfigError> {
        S::POLLER_CONCURRENCY.parsed()
    }

    /// The batches in flight configured in the environment, so the pool
    /// can be sized for them before the rest is read.
    pub fn batches_in_flight_from_env() -> Result<usize, ConfigError> {
        S::POLLER_BATCHES_IN_FLIGHT.parsed()
    }

    /// The smallest pool that cannot deadlock: each batch in flight holds
    /// its processed_events transaction plus one connection for its claims,
    /// one more claims the next batch, and one renews the run's lease.
    pub fn min_pool_size(batches_in_flight: usize) -> usize {
        2 * batches_in_flight + 2
    }

    pub fn from_env(pool_size: usize) -> Result<Self, ConfigError> {
        let cfg = Self {
            batch_size: S::POLLER_BATCH_SIZE.parsed()?,
            concurrency: Self::concurrency_from_env()?,
            claim_group: S::POLLER_CLAIM_GROUP.parsed()?,
            send_rate_headroom: S::SEND_RATE_HEADROOM.parsed()?,
            canary_every: Duration::from_secs(S::SES_CANARY_EVERY_SECS.parsed()?),
            batches_in_flight: Self::batches_in_flight_from_env()?,
            idle_wait: Duration::from_millis(S::POLLER_IDLE_WAIT_MS.parsed()?),
            listen: S::POLLER_LISTEN.parsed()?,
            safety_margin: Duration::from_secs(S::POLLER_SAFETY_MARGIN_SECS.parsed()?),
            max_attempts: S::OUTBOX_MAX_ATTEMPTS.parsed()?,
            backoff_base: Duration::from_secs_f64(S::OUTBOX_BACKOFF_BASE_SECS.parsed()?),
            backoff_cap: Duration::from_secs_f64(S::OUTBOX_BACKOFF_CAP_SECS.parsed()?),
            pause_delay: Duration::from_secs(S::OUTBOX_PAUSE_DELAY_SECS.parsed()?),
            worker_id: default_worker_id(),
            lease: Duration::from_secs_f64(S::POLLER_LEASE_SECS.parsed()?),
            skip_superseded: S::POLLER_SKIP_SUPERSEDED.parsed()?,
            // Checked against only when set: the sweeper's default is not
            // evidence of this function's timeout.
            function_timeout: S::POLLER_TIMEOUT_SECS.optional::<u64>()?.filter(|s| *s > 0).map(Duration::from_secs),
            max_run: S::POLLER_MAX_RUN_SECS.optional::<u64>()?.filter(|s| *s > 0).map(Duration::from_secs),
            schedule: S::POLLER_SCHEDULE_SECS.optional::<u64>()?.filter(|s| *s > 0).map(Duration::from_secs),
            recipient_limits: RecipientLimits {
                invitations_per_organizer: S::LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY.parsed()?,
                new_organizers: S::LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY.parsed()?,
            },
        };
        cfg.validate(pool_size)?;
        Ok(cfg)
    }

    /// Defaults suitable for tests and benchmarks.
    pub fn for_tests(worker_id: &str) -> Self {
        Self {
            batch_size: 32,
            concurrency: 4,
            claim_group: S::POLLER_CLAIM_GROUP.default_value(),
            send_rate_headroom: S::SEND_RATE_HEADROOM.default_value(),
            canary_every: Duration::from_secs(S::SES_CANARY_EVERY_SECS.default_value()),
            batches_in_flight: 2,
            idle_wait: Duration::from_millis(20),
            listen: false,
            safety_margin: Duration::from_millis(0),
            max_attempts: S::OUTBOX_MAX_ATTEMPTS.default_value(),
            backoff_base: Duration::from_millis(0),
            backoff_cap: Duration::from_millis(0),
            pause_delay: Duration::from_secs(300),
            worker_id: worker_id.to_string(),
            lease: Duration::from_secs_f64(S::POLLER_LEASE_SECS.default_value()),
            skip_superseded: true,
            function_timeout: None,
            max_run: None,
            schedule: None,
            // Tests mail one attendee many times; the limit's own tests set it.
            recipient_limits: RecipientLimits::UNLIMITED,
        }
    }

    pub fn validate(&self, pool_size: usize) -> Result<(), ConfigError> {
        for (var, ok) in [
            ("POLLER_BATCH_SIZE", self.batch_size >= 1),
            ("POLLER_CONCURRENCY", self.concurrency >= 1),
            ("POLLER_CLAIM_GROUP", self.claim_group >= 1),
            ("POLLER_BATCHES_IN_FLIGHT", self.batches_in_flight >= 1),
            ("OUTBOX_MAX_ATTEMPTS", self.max_attempts >= 1),
            ("LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY", self.recipient_limits.invitations_per_organizer >= 1),
            ("LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY", self.recipient_limits.new_organizers >= 1),
        ] {
            if !ok {
                return Err(ConfigError::new(var, "must be at least 1", format!("set {var} to 1 or more")));
            }
        }
        if !(self.lease >= MIN_LEASE && self.lease <= MAX_LEASE) {
            return Err(ConfigError::new(
                "POLLER_LEASE_SECS",
                format!("({}s) is out of range", self.lease.as_secs_f64()),
                format!(
                    "set it from {} to {} seconds: shorter, a busy database's renewal could lose it; longer, a \
                     dead poller's events wait that long",
                    MIN_LEASE.as_secs(),
                    MAX_LEASE.as_secs()
                ),
            ));
        }
        if !(self.send_rate_headroom > 0.0 && self.send_rate_headroom <= 1.0) {
            return Err(ConfigError::new(
                "SEND_RATE_HEADROOM",
                format!("({}) is not a share of the rate", self.send_rate_headroom),
                "set it above 0 and at most 1 (e.g. 0.97)",
            ));
        }
        if self.backoff_cap < self.backoff_base {
            return Err(ConfigError::new(
                "OUTBOX_BACKOFF_CAP_SECS",
                "is below OUTBOX_BACKOFF_BASE_SECS",
                "raise OUTBOX_BACKOFF_CAP_SECS to at least OUTBOX_BACKOFF_BASE_SECS",
            ));
        }
        // Fewer would let every connection wait for another: a deadlock.
        let (in_flight, var) = (self.batches_in_flight, "POLLER_BATCHES_IN_FLIGHT");
        let needed = Self::min_pool_size(in_flight);
        if pool_size < needed {
            return Err(ConfigError::new(
                "DATABASE_POOL_SIZE",
                format!("({pool_size}) is too small for {var} ({in_flight})"),
                format!("it needs at least {needed}; raise it or lower {var}"),
            ));
        }
        Ok(())
    }

    /// Checks at cold start that one send's worst case (`worst_case`: the
    /// mailer's connect plus read timeout) and the safety margin fit in
    /// the function's timeout; otherwise no send could ever start safely.
    pub fn check_send_fits(&self, worst_case: Duration, timeouts: &str) -> Result<(), ConfigError> {
        if let Some(max_run) = self.max_run {
            if worst_case + self.safety_margin >= max_run {
                return Err(ConfigError::new(
                    "POLLER_MAX_RUN_SECS",
                    format!(
                        "({}s) leaves no room for one send: {timeouts} ({} ms) \
                         plus POLLER_SAFETY_MARGIN_SECS ({}s) do not fit in it, so no run would claim anything",
                        max_run.as_secs(),
                        worst_case.as_millis(),
                        self.safety_margin.as_secs()
                    ),
                    format!("lower {timeouts} or the safety margin, or raise POLLER_MAX_RUN_SECS"),
                ));
            }
        }
        let Some(timeout) = self.function_timeout else { return Ok(()) };
        if let Some(period) = self.schedule {
            // Polling stops once one send's worst case and the margin no
            // longer fit; the next run starts one period after this one.
            let polls = timeout.saturating_sub(worst_case + self.safety_margin);
            if polls < period + COLD_START_ALLOWANCE {
                tracing::warn!(
                    polls_secs = polls.as_secs(),
                    period_secs = period.as_secs(),
                    "a run stops claiming before the next one starts: for {}s of every {}s no poller claims, \
                     and a booking committed then waits for its invitation; raise the poller's timeout \
                     (POLLER_TIMEOUT_SECS, the template's PollerTimeoutSeconds) to at least {}s, \
                     with reserved concurrency for two runs",
                    (period + COLD_START_ALLOWANCE).saturating_sub(polls).as_secs(),
                    period.as_secs(),
                    (period + COLD_START_ALLOWANCE + worst_case + self.safety_margin).as_secs_f64().ceil()
                );
            } else if polls < 2 * period + COLD_START_ALLOWANCE {
                tracing::warn!(
                    polls_secs = polls.as_secs(),
                    period_secs = period.as_secs(),
                    "most of the time one run claims alone: when it dies, its events wait for the next run's \
                     start instead of a live poller's take-over once its lease ends; raise the poller's timeout \
                     to at least {}s, with reserved concurrency for three runs",
                    (2 * period + COLD_START_ALLOWANCE + worst_case + self.safety_margin).as_secs_f64().ceil()
                );
            }
        }
        if worst_case + self.safety_margin >= timeout {
            return Err(ConfigError::new(
                "POLLER_TIMEOUT_SECS",
                format!(
                    "({}s) leaves no room for one send: {timeouts} ({} ms) \
                     plus POLLER_SAFETY_MARGIN_SECS ({}s) do not fit in it",
                    timeout.as_secs(),
                    worst_case.as_millis(),
                    self.safety_margin.as_secs()
                ),
                format!("lower {timeouts} or the safety margin, or raise the function's timeout"),
            ));
        }
        Ok(())
    }

    /// Exponential backoff with jitter for the attempt that just failed
    /// (1-based): `base * 2^(n-1)`, capped, plus up to 100% jitter, capped again.
    pub fn backoff(&self, attempt: i32) -> Duration {
        let n = attempt.max(1) as usize;
        use backon::BackoffBuilder;
        backon::ExponentialBuilder::default()
            .with_min_delay(self.backoff_base)
            .with_max_delay(self.backoff_cap)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build()
            .nth(n - 1)
            .unwrap_or(self.backoff_cap)
            .min(self.backoff_cap)
    }
}

/// The shortest lease `POLLER_LEASE_SECS` takes: its renewal (every
/// quarter of it) must survive a database that answers in hundreds of ms.
pub const MIN_LEASE: Duration = Duration::from_secs(2);
/// The longest: a dead poller's events wait up to this long.
pub const MAX_LEASE: Duration = Duration::from_secs(300);

/// The overlap a run needs past the next run's start: that run's cold
/// start, and the scheduler's own lateness.
pub const COLD_START_ALLOWANCE: Duration = Duration::from_secs(5);

fn default_worker_id() -> String {
    let host = std::env::var("AWS_LAMBDA_LOG_STREAM_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "local".into());
    format!("{host}:{}:{}", std::process::id(), &uuid::Uuid::now_v7().simple().to_string()[24..])
}
