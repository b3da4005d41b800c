//! Settings of the booking API function, read once at cold start.

use crate::booking::domain::{Language, LocaleTag, Reminders, StartWindow};
use crate::booking::limits::Limits;
use crate::config::settings as S;
use crate::config::ConfigError;

pub use crate::config::AuthMode;

/// Settings of the booking API function.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    pub auth_mode: AuthMode,
    /// Requests with a larger body get 413 before anything is parsed.
    pub max_body_bytes: usize,
    /// How far back and ahead a booking may start
    /// (`BOOKING_MAX_PAST_DAYS`, `BOOKING_MAX_FUTURE_DAYS`).
    pub start_window: StartWindow,
    /// An `Idempotency-Key` older than this is forgotten, even before
    /// retention deletes it (`IDEMPOTENCY_KEY_TTL_HOURS`).
    pub idempotency_key_ttl: std::time::Duration,
    /// Abuse limits (`LIMIT_BOOKINGS_PER_DAY`, `LIMIT_RECIPIENTS_PER_DAY`,
    /// `LIMIT_CHANGES_PER_BOOKING_PER_DAY`).
    pub limits: Limits,
    /// Where problem types are documented (`API_PROBLEM_TYPE_BASE`, an
    /// https URL ending in `/`); None: this API's own `/problems/`.
    pub problem_type_base: Option<String>,
    /// The reminders of a booking created without `reminders`
    /// (`DEFAULT_REMINDERS`).
    pub default_reminders: Reminders,
    /// Divides every reminder's offset (`DEV_REMINDER_SCALE`, read only by
    /// `dev` builds; 1 in every release binary).
    pub reminder_scale: u32,
    /// The language of an attendee who names none, and whose organizer
    /// names none (`DEFAULT_LOCALE`).
    pub default_language: Language,
    /// Whose addresses may organize (`ORGANIZER_DOMAINS`); None: any
    /// verified address.
    pub organizer_domains: Option<OrganizerDomains>,
}

/// The domains whose addresses may create and change bookings: with the
/// user pool's sign-up open, an account anyone can make at any domain (a
/// catch-all yields thousands) cannot mail from the stack's verified
/// domain. Exact domains: `corp.example` admits `a@corp.example`, not
/// `a@eu.corp.example` (list it too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrganizerDomains(Vec<String>);

impl OrganizerDomains {
    /// From `ORGANIZER_DOMAINS`' value: None when empty.
    pub fn parse(raw: &str) -> Result<Option<Self>, ConfigError> {
        let mut domains = Vec::new();
        for d in raw.split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let ascii = idna::domain_to_ascii(d).ok().filter(|a| {
                a.contains('.')
                    && a.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            });
            let Some(ascii) = ascii else {
                return Err(ConfigError::new(
                    "ORGANIZER_DOMAINS",
                    format!("({d:?}) is not a domain name"),
                    "use a comma-separated list of domains, like corp.example,corp.example.org",
                ));
            };
            domains.push(ascii);
        }
        Ok((!domains.is_empty()).then_some(Self(domains)))
    }

    pub fn admits(&self, email: &crate::booking::domain::EmailAddress) -> bool {
        self.0.iter().any(|d| d == email.domain())
    }

    pub fn list(&self) -> String {
        self.0.join(", ")
    }
}

impl ApiConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let auth_mode = S::AUTH_MODE.parsed()?;
        let max_body_bytes: usize = S::API_MAX_BODY_BYTES.parsed()?;
        if max_body_bytes < 1024 {
            return Err(ConfigError::new(
                "API_MAX_BODY_BYTES",
                format!("{max_body_bytes} is too small for a 50-attendee booking"),
                "use at least 1024",
            ));
        }
        let past: i64 = S::BOOKING_MAX_PAST_DAYS.parsed()?;
        let future: i64 = S::BOOKING_MAX_FUTURE_DAYS.parsed()?;
        // Beyond ~9000 years an instant no longer fits a four-digit year.
        for (var, days) in [("BOOKING_MAX_PAST_DAYS", past), ("BOOKING_MAX_FUTURE_DAYS", future)] {
            if !(0..=3_000_000).contains(&days) {
                return Err(ConfigError::new(var, format!("({days}) is out of range"), "use 0 to 3000000 days"));
            }
        }
        let ttl_hours: u64 = S::IDEMPOTENCY_KEY_TTL_HOURS.parsed()?;
        Ok(Self {
            auth_mode,
            max_body_bytes,
            start_window: StartWindow {
                max_past: chrono::Duration::days(past),
                max_future: chrono::Duration::days(future),
            },
            idempotency_key_ttl: std::time::Duration::from_secs(ttl_hours * 3600),
            limits: limits_from_env()?,
            problem_type_base: problem_type_base_from_env()?,
            default_reminders: S::DEFAULT_REMINDERS.optional()?.unwrap_or_default(),
            reminder_scale: reminder_scale_from_env()?,
            default_language: default_language_from_env()?,
            organizer_domains: OrganizerDomains::parse(&S::ORGANIZER_DOMAINS.value().unwrap_or_default())?,
        })
    }
}

fn default_language_from_env() -> Result<Language, ConfigError> {
    let raw: String = S::DEFAULT_LOCALE.parsed()?;
    let shipped = || Language::ALL.iter().map(|l| l.code()).collect::<Vec<_>>().join(", ");
    let tag = LocaleTag::parse(raw.trim())
        .map_err(|e| ConfigError::new("DEFAULT_LOCALE", e.problem, format!("use a language tag: {}", shipped())))?;
    Language::of(&tag).ok_or_else(|| {
        ConfigError::new(
            "DEFAULT_LOCALE",
            format!("({tag}) is not a language we ship"),
            format!("use one of {}", shipped()),
        )
    })
}

#[cfg(feature = "dev")]
fn reminder_scale_from_env() -> Result<u32, ConfigError> {
    let scale: u32 = S::DEV_REMINDER_SCALE.parsed()?;
    if scale == 0 {
        return Err(ConfigError::new(
            "DEV_REMINDER_SCALE",
            "(0) must be at least 1",
            "use 1, or 60 to turn hours into minutes",
        ));
    }
    Ok(scale)
}

/// A release binary never scales a reminder.
#[cfg(not(feature = "dev"))]
fn reminder_scale_from_env() -> Result<u32, ConfigError> {
    Ok(1)
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            auth_mode: AuthMode::Jwt,
            max_body_bytes: S::API_MAX_BODY_BYTES.default_value(),
            start_window: StartWindow {
                max_past: chrono::Duration::days(S::BOOKING_MAX_PAST_DAYS.default_value()),
                max_future: chrono::Duration::days(S::BOOKING_MAX_FUTURE_DAYS.default_value()),
            },
            idempotency_key_ttl: std::time::Duration::from_secs(
                S::IDEMPOTENCY_KEY_TTL_HOURS.default_value::<u64>() * 3600,
            ),
            limits: Limits::default(),
            problem_type_base: None,
            default_reminders: Reminders::default(),
            reminder_scale: 1,
            default_language: Language::parse(S::DEFAULT_LOCALE.default.expect("declared")).expect("shipped"),
            organizer_domains: None,
        }
    }
}

fn limits_from_env() -> Result<Limits, ConfigError> {
    let limits = Limits {
        bookings_per_day: S::LIMIT_BOOKINGS_PER_DAY.parsed()?,
        recipients_per_day: S::LIMIT_RECIPIENTS_PER_DAY.parsed()?,
        changes_per_booking_per_day: S::LIMIT_CHANGES_PER_BOOKING_PER_DAY.parsed()?,
        new_accounts_recipients_per_day: S::LIMIT_NEW_ACCOUNTS_RECIPIENTS_PER_DAY.parsed()?,
    };
    for (var, value) in [
        ("LIMIT_BOOKINGS_PER_DAY", limits.bookings_per_day),
        ("LIMIT_RECIPIENTS_PER_DAY", limits.recipients_per_day),
        ("LIMIT_CHANGES_PER_BOOKING_PER_DAY", limits.changes_per_booking_per_day),
        ("LIMIT_NEW_ACCOUNTS_RECIPIENTS_PER_DAY", limits.new_accounts_recipients_per_day),
    ] {
        if value < 1 {
            return Err(ConfigError::new(var, format!("({value}) must be at least 1"), "set a positive daily limit"));
        }
    }
    Ok(limits)
}

fn problem_type_base_from_env() -> Result<Option<String>, ConfigError> {
    let Some(base) = S::API_PROBLEM_TYPE_BASE.value().filter(|b| !b.is_empty()) else { return Ok(None) };
    let host = base.strip_prefix("https://").and_then(|rest| rest.split('/').next()).unwrap_or("");
    if host.is_empty() || base.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ConfigError::new(
            "API_PROBLEM_TYPE_BASE",
            format!("({base:?}) is not an https URL"),
            "use an https URL under which each problem type is documented, like https://docs.example.com/problems/",
        ));
    }
    Ok(Some(if base.ends_with('/') { base.to_string() } else { format!("{base}/") }))
}
