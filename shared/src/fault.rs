//! Named fault points for crash and failure tests.
//!
//! A fault point is a line such as `faults.hit("booking.create.between_inserts")?`
//! at a place where the design story says a crash must be survivable.
//!
//! Fault points exist only in builds with the `dev` feature (tests, `make
//! dev`). There, `OUTBOX_FAULT_POINTS="point=action,point=action"` enables
//! them, where action is `error` (the step fails with [`FaultError`]) or
//! `kill` (the process sends itself SIGKILL: a real death, no destructors,
//! no rollback messages). A release build has no way to turn one on:
//! [`Faults`] is empty and [`Faults::hit`] always passes.

#[derive(Debug, thiserror::Error)]
#[error("injected fault at {0}")]
pub struct FaultError(pub &'static str);

/// Why a worker's run stopped: the database, or an injected fault (a
/// mailer's failure is an outcome, not an error). The deliverer and the
/// relay both return it.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Db(#[from] crate::db::DbError),
    #[error(transparent)]
    Fault(#[from] FaultError),
}

crate::from_driver_errors!(RunError);

#[cfg(feature = "dev")]
pub use enabled::*;

#[cfg(not(feature = "dev"))]
pub use disabled::*;

#[cfg(not(feature = "dev"))]
mod disabled {
    use super::FaultError;
    use crate::config::ConfigError;

    /// No fault points: this build cannot inject faults.
    #[derive(Debug, Clone, Default)]
    pub struct Faults;

    impl Faults {
        pub fn none() -> Self {
            Faults
        }

        /// Release builds read no fault settings.
        pub fn from_env() -> Result<Self, ConfigError> {
            Ok(Faults)
        }

        pub fn is_enabled(&self) -> bool {
            false
        }

        #[inline(always)]
        pub fn hit(&self, _point: &'static str) -> Result<(), FaultError> {
            Ok(())
        }
    }
}

#[cfg(feature = "dev")]
mod enabled {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::FaultError;
    use crate::config::ConfigError;

    pub const ENV_VAR: &str = crate::config::settings::OUTBOX_FAULT_POINTS.name;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FaultAction {
        Error,
        Kill,
    }

    #[derive(Debug, Clone, Default)]
    pub struct Faults {
        points: Option<Arc<HashMap<String, FaultAction>>>,
    }

    impl Faults {
        /// No fault points enabled.
        pub fn none() -> Self {
            Self::default()
        }

        /// Enables one point; for in-process tests.
        pub fn with(mut self, point: &str, action: FaultAction) -> Self {
            let mut map = self.points.as_deref().cloned().unwrap_or_default();
            map.insert(point.to_string(), action);
            self.points = Some(Arc::new(map));
            self
        }

        /// Reads `OUTBOX_FAULT_POINTS`; unset means inert.
        pub fn from_env() -> Result<Self, ConfigError> {
            match std::env::var(ENV_VAR) {
                Ok(spec) if !spec.trim().is_empty() => Self::parse(&spec),
                _ => Ok(Self::none()),
            }
        }

        pub fn parse(spec: &str) -> Result<Self, ConfigError> {
            let mut faults = Self::none();
            for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (point, action) = item.split_once('=').ok_or_else(|| {
                    ConfigError::new(
                        ENV_VAR,
                        format!("has {item:?}, which is not point=action"),
                        "write point=error or point=kill",
                    )
                })?;
                let action = match action {
                    "error" => FaultAction::Error,
                    "kill" => FaultAction::Kill,
                    other => {
                        return Err(ConfigError::new(
                            ENV_VAR,
                            format!("has an unknown action {other:?} for {point}"),
                            "use error or kill",
                        ))
                    }
                };
                faults = faults.with(point, action);
            }
            if faults.points.is_some() {
                tracing::warn!(spec, "fault points are ENABLED; this must never happen in production");
            }
            Ok(faults)
        }

        pub fn is_enabled(&self) -> bool {
            self.points.is_some()
        }

        /// Passes through unless `point` is enabled.
        pub fn hit(&self, point: &'static str) -> Result<(), FaultError> {
            let Some(points) = &self.points else { return Ok(()) };
            match points.get(point) {
                None => Ok(()),
                Some(FaultAction::Error) => Err(FaultError(point)),
                Some(FaultAction::Kill) => {
                    eprintln!("fault point {point}: SIGKILL");
                    // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
                    unsafe {
                        libc::kill(libc::getpid(), libc::SIGKILL);
                    }
                    // SIGKILL cannot be caught; this line is never reached.
                    unreachable!("process survived SIGKILL")
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn inert_by_default_and_parsed_from_spec() {
            assert!(Faults::none().hit("anything").is_ok());
            let f = Faults::parse("a=error, b=kill").unwrap();
            assert!(f.hit("a").is_err());
            assert!(f.hit("c").is_ok());
            assert!(Faults::parse("a=explode").is_err());
            assert!(Faults::parse("nonsense").is_err());
        }
    }
}
