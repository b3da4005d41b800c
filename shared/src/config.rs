//! Configuration read from the environment once, at cold start.
//!
//! Every value is validated here so a misconfigured function fails its first
//! invocation with a message that says what to change, instead of failing
//! later in the middle of a transaction.

use std::env;
use std::str::FromStr;

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

/// Reads `name`, or `default` when it is unset or empty.
pub fn var_or(name: &str, default: &str) -> String {
    match env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => default.to_string(),
    }
}

/// Reads a required variable.
pub fn required(name: &str, hint: &str) -> Result<String, ConfigError> {
    match env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(ConfigError::new(name, "is not set", hint)),
    }
}

/// Reads and parses `name`, falling back to `default`.
pub fn parsed_or<T: FromStr>(name: &str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|e| {
            ConfigError::new(name, format!("is invalid ({v:?}: {e})"), "set a valid value, or unset it for the default")
        }),
        _ => Ok(default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_value_names_the_variable_and_the_fix() {
        std::env::set_var("OUTBOX_CONFIG_TEST_NUMBER", "many");
        let err = parsed_or("OUTBOX_CONFIG_TEST_NUMBER", 4u32).unwrap_err();
        assert_eq!(err.var, "OUTBOX_CONFIG_TEST_NUMBER");
        let text = err.to_string();
        assert!(text.starts_with("configuration error: OUTBOX_CONFIG_TEST_NUMBER is invalid (\"many\""), "{text}");
        assert!(text.ends_with("set a valid value, or unset it for the default"), "{text}");
        assert_eq!(parsed_or("OUTBOX_CONFIG_TEST_UNSET", 4u32).unwrap(), 4);
    }
}
