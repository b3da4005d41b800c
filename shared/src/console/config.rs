//! Settings of the operator console function, read once at cold start.

use crate::config::settings as S;
use crate::config::ConfigError;
use crate::relay::SweeperConfig;

pub use crate::config::AuthMode;

/// Where the console's page signs an operator in: Cognito's endpoint and
/// the user pool's app client, public values (any app's sign-in page shows
/// them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignIn {
    /// `https://cognito-idp.<region>.amazonaws.com/`
    pub endpoint: String,
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
        let endpoint: Option<String> = S::CONSOLE_SIGN_IN_ENDPOINT.optional()?;
        let client_id: Option<String> = S::CONSOLE_CLIENT_ID.optional()?;
        let sign_in = match (endpoint, client_id) {
            (Some(url), Some(client_id)) => {
                let parsed = url::Url::parse(&url).ok().filter(|u| u.scheme() == "https" && u.path() == "/");
                if parsed.is_none() || url.contains(['"', '<', '>', ' ', '\'', ';']) {
                    return Err(ConfigError::new(
                        S::CONSOLE_SIGN_IN_ENDPOINT.name,
                        format!("is not an https:// endpoint ({url:?})"),
                        "set Cognito's endpoint of the user pool's region: https://cognito-idp.<region>.amazonaws.com/",
                    ));
                }
                Some(SignIn { endpoint: url, client_id })
            }
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(ConfigError::new(
                    "CONSOLE_SIGN_IN_ENDPOINT/CONSOLE_CLIENT_ID",
                    "are not set together",
                    "set both (the console's sign-in) or neither",
                ))
            }
        };
        Ok(Self { auth_mode, operators_group, sign_in, sweeper: SweeperConfig::from_env()? })
    }
}
