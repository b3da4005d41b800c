//! Settings of the operator console function, read once at cold start.

use crate::config::settings as S;
use crate::config::ConfigError;
use crate::relay::SweeperConfig;

pub use crate::config::AuthMode;

/// Where an operator signs in (the user pool's managed login), for the
/// console's page: public values, the same as any app client's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignIn {
    /// `https://<domain>.auth.<region>.amazoncognito.com`
    pub login_url: String,
    pub client_id: String,
}

#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    pub auth_mode: AuthMode,
    /// The user pool group whose members may use the console.
    pub operators_group: String,
    pub sign_in: Option<SignIn>,
    /// What `outboxctl` reads too: the sweep's timeout, SES's grace.
    pub sweeper: SweeperConfig,
}

impl ConsoleConfig {
    pub fn from_env() -> Result<Self, ConfigError> {
        let auth_mode = S::AUTH_MODE.parsed::<AuthMode>()?;
        let operators_group: String = S::CONSOLE_OPERATORS_GROUP.parsed()?;
        if operators_group.contains(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == ']') {
            return Err(ConfigError::new(
                S::CONSOLE_OPERATORS_GROUP.name,
                format!("is not a group name ({operators_group:?})"),
                "name one user pool group, without spaces, commas or brackets",
            ));
        }
        let login_url: Option<String> = S::CONSOLE_LOGIN_URL.optional()?;
        let client_id: Option<String> = S::CONSOLE_CLIENT_ID.optional()?;
        let sign_in = match (login_url, client_id) {
            (Some(url), Some(client_id)) => {
                if !url.starts_with("https://") || url.ends_with('/') || url.contains(['"', '<', '>', ' ']) {
                    return Err(ConfigError::new(
                        S::CONSOLE_LOGIN_URL.name,
                        format!("is not an https:// URL without a trailing slash ({url:?})"),
                        "set the user pool domain's URL, e.g. https://<domain>.auth.<region>.amazoncognito.com",
                    ));
                }
                Some(SignIn { login_url: url, client_id })
            }
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(ConfigError::new(
                    "CONSOLE_LOGIN_URL/CONSOLE_CLIENT_ID",
                    "are not set together",
                    "set both (the console's sign-in) or neither",
                ))
            }
        };
        Ok(Self { auth_mode, operators_group, sign_in, sweeper: SweeperConfig::from_env()? })
    }
}
