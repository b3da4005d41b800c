//! Configuration read from the environment once, at cold start.
//!
//! Every value is validated here so a misconfigured function fails its first
//! invocation with a message that says what to change, instead of failing
//! later in the middle of a transaction.

use std::env;
use std::str::FromStr;

pub mod settings;

pub use settings::{Reader, Setting};

/// How a function behind API Gateway (the booking API, the operator
/// console) learns who is calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Production: the claims that API Gateway's JWT authorizer verified
    /// and put in the request context.
    Jwt,
    /// Local development only: the `X-Dev-User-*` headers are trusted when the request carries no JWT claims. Must be
    /// switched on explicitly (`AUTH_MODE=insecure-dev-headers`), and exists
    /// only in builds with the `dev` feature: a release binary cannot be
    /// configured into it.
    #[cfg(feature = "dev")]
    InsecureDevHeaders,
}

impl FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jwt" => Ok(AuthMode::Jwt),
            #[cfg(feature = "dev")]
            "insecure-dev-headers" => Ok(AuthMode::InsecureDevHeaders),
            #[cfg(feature = "dev")]
            other => Err(format!(
                "unknown auth mode {other:?}; use \"jwt\" (default) or \"insecure-dev-headers\" (local development only)"
            )),
            #[cfg(not(feature = "dev"))]
            other => Err(format!("unknown auth mode {other:?}; this build accepts only \"jwt\"")),
        }
    }
}

/// A setting that cannot work, with the variable to change and how.
/// Cold start fails with it, so the first invocation's log says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration error: {var} {problem}; {fix}")]
pub struct ConfigError {
    /// The environment variable (or setting) at fault.
    pub var: String,
    /// What is wrong with it, worded to follow the variable's name.
    pub problem: String,
    /// What to do about it.
    pub fix: String,
}

impl ConfigError {
    pub fn new(var: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { var: var.into(), problem: problem.into(), fix: fix.into() }
    }
}

/// The function's region: `AWS_REGION`, which the Lambda runtime sets (not a
/// setting of ours, so not in [`settings`]); None when unset or empty.
pub fn lambda_region() -> Option<String> {
    std::env::var("AWS_REGION").ok().filter(|r| !r.is_empty())
}

impl Setting {
    /// The value set in the environment (trimmed), if any: unset and empty
    /// are the same.
    pub fn value(&self) -> Option<String> {
        env::var(self.name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
    }

    /// The value set, else the declared default; neither is an error that
    /// says what the setting is for.
    pub fn parsed<T: FromStr>(&self) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        match (self.value(), self.default) {
            (Some(v), _) => self.parse(&v),
            (None, Some(default)) => default.parse().map_err(|e| {
                ConfigError::new(
                    self.name,
                    format!("has an unusable built-in default {default:?} ({e})"),
                    "report this as a bug; set it meanwhile",
                )
            }),
            (None, None) => Err(ConfigError::new(self.name, "is not set", format!("set it: {}", self.doc))),
        }
    }

    /// The value set, if any (a setting that is off when unset).
    pub fn optional<T: FromStr>(&self) -> Result<Option<T>, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        self.value().map(|v| self.parse(&v)).transpose()
    }

    /// The value set, else `fallback`: for a reader whose default follows
    /// from its other settings (the poller's pool size), as the doc says.
    pub fn parsed_or<T: FromStr>(&self, fallback: T) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        Ok(self.optional()?.unwrap_or(fallback))
    }

    /// The declared default, parsed: for configurations built in code
    /// (tests, `Default` impls). A default that does not parse is a bug in
    /// the declaration, which every reader's tests would meet first.
    pub fn default_value<T: FromStr>(&self) -> T
    where
        T::Err: std::fmt::Display,
    {
        let raw = self.default.unwrap_or_else(|| panic!("{} declares no default", self.name));
        raw.parse().unwrap_or_else(|e| panic!("{}'s default {raw:?}: {e}", self.name))
    }

    /// `v` parsed as this setting's value (a value that arrives other than
    /// from the environment, such as a custom resource's property).
    pub fn parse<T: FromStr>(&self, v: &str) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        v.parse().map_err(|e| {
            ConfigError::new(
                self.name,
                format!("is invalid ({v:?}: {e})"),
                "set a valid value, or unset it for the default",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_names_the_variable_and_the_fix() {
        const NUMBER: Setting =
            Setting { name: "OUTBOX_CONFIG_TEST_NUMBER", default: Some("4"), read_by: &[], doc: "a test number" };
        const UNSET: Setting = Setting { name: "OUTBOX_CONFIG_TEST_UNSET", default: Some("4"), read_by: &[], doc: "" };
        const REQUIRED: Setting =
            Setting { name: "OUTBOX_CONFIG_TEST_REQUIRED", default: None, read_by: &[], doc: "the test's own" };
        std::env::set_var(NUMBER.name, "many");
        let err = NUMBER.parsed::<u32>().unwrap_err();
        assert_eq!(err.var, "OUTBOX_CONFIG_TEST_NUMBER");
        let text = err.to_string();
        assert!(text.starts_with("configuration error: OUTBOX_CONFIG_TEST_NUMBER is invalid (\"many\""), "{text}");
        assert!(text.ends_with("set a valid value, or unset it for the default"), "{text}");
        assert_eq!(UNSET.parsed::<u32>().unwrap(), 4);
        assert_eq!(UNSET.optional::<u32>().unwrap(), None);
        let missing = REQUIRED.parsed::<String>().unwrap_err().to_string();
        assert!(missing.contains("OUTBOX_CONFIG_TEST_REQUIRED is not set; set it: the test's own"), "{missing}");
    }
}
