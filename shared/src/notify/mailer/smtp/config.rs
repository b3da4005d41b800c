//! The SMTP mailer's settings (`SMTP_*`, read and checked at cold start).

use std::time::Duration;

use crate::config::settings as S;
use crate::config::ConfigError;
use crate::notify::render::invite::Sender;

/// How the connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// `smtps://`: TLS from the first byte (port 465).
    Implicit,
    /// `smtp://`: STARTTLS, required (port 587).
    StartTls,
}

/// SMTP AUTH credentials; the password never reaches a log.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

#[derive(Debug, Clone)]
pub struct SmtpConfig {
    /// `SMTP_FROM_ADDRESS`.
    pub from: Sender,
    /// From `SMTP_URL`.
    pub host: String,
    pub port: u16,
    pub security: Security,
    /// `SMTP_SECRET_ARN`, or `SMTP_USERNAME` + `SMTP_PASSWORD`; None: no AUTH.
    pub login: Option<Login>,
    /// `SMTP_CA_FILE`: PEM certificates trusted besides the public roots.
    pub extra_roots_pem: Option<Vec<u8>>,
    pub connect_timeout: Duration,
    pub send_timeout: Duration,
    /// `SMTP_MAX_CONNECTIONS`: kept connections, and sends at once.
    pub max_connections: usize,
    /// `SMTP_MAX_SEND_RATE`: the fleet's cap in messages a second.
    pub max_send_rate: Option<f64>,
    /// `SMTP_SES_CONFIGURATION_SET`: through SES's own SMTP interface, the
    /// configuration set each message names, so SES publishes its events
    /// and they settle ambiguous sends as SES v2's do (None: a provider
    /// that reports nothing back).
    pub ses_configuration_set: Option<String>,
    /// `SES_CANARY_ADDRESS`, through SES's SMTP interface with a
    /// configuration set: where a canary goes (None: no canary).
    pub canary_to: Option<String>,
}

/// Where the SMTP AUTH credentials come from.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Credentials {
    /// `SMTP_SECRET_ARN`: Secrets Manager (every build).
    Secret(String),
    /// `SMTP_USERNAME` + `SMTP_PASSWORD`: plain environment variables, read
    /// by `dev` builds alone (local development); a password in a
    /// function's environment is readable by anyone who can read its
    /// configuration.
    Plain(Login),
    None,
}

/// Checks `(SMTP_SECRET_ARN, SMTP_USERNAME, SMTP_PASSWORD)`; `dev_build`:
/// whether this binary was built with the `dev` feature.
pub(super) fn credentials(
    dev_build: bool,
    given: (Option<String>, Option<String>, Option<String>),
) -> Result<Credentials, ConfigError> {
    match given {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(ConfigError::new(
            S::SMTP_SECRET_ARN.name,
            "is set, and so is SMTP_USERNAME or SMTP_PASSWORD",
            "keep the credentials in one place: the secret",
        )),
        (Some(arn), None, None) => Ok(Credentials::Secret(arn)),
        (None, _, Some(_)) if !dev_build => Err(ConfigError::new(
            S::SMTP_PASSWORD.name,
            "is a password in plain environment, which only dev builds read",
            "put the username and password in a Secrets Manager secret and set SMTP_SECRET_ARN",
        )),
        (None, Some(username), Some(password)) => Ok(Credentials::Plain(Login { username, password })),
        (None, None, None) => Ok(Credentials::None),
        (None, _, _) => Err(ConfigError::new(
            S::SMTP_USERNAME.name,
            "and SMTP_PASSWORD must be set together",
            "set both, or neither for a server that needs no AUTH",
        )),
    }
}

impl SmtpConfig {
    /// Reads and checks every `SMTP_*` setting (and the AUTH secret, when
    /// one is named): at cold start, so a wrong one fails the first
    /// invocation with the fix.
    pub async fn from_env() -> Result<Self, ConfigError> {
        let url: String = S::SMTP_URL.value().ok_or_else(|| {
            ConfigError::new(
                S::SMTP_URL.name,
                "is not set, and MAILER is smtp",
                "set it to smtps://host:465 (implicit TLS) or smtp://host:587 (STARTTLS)",
            )
        })?;
        let (host, port, security) = parse_url(&url)?;
        let from: String = S::SMTP_FROM_ADDRESS.value().ok_or_else(|| {
            ConfigError::new(
                S::SMTP_FROM_ADDRESS.name,
                "is not set, and MAILER is smtp",
                "set the sender your SMTP provider lets you use, e.g. \"Bookings <bookings@example.com>\"",
            )
        })?;
        let from = Sender::parse(&from).map_err(|e| {
            ConfigError::new(
                S::SMTP_FROM_ADDRESS.name,
                format!("is invalid: {e}"),
                "use \"Name <address>\" or a bare address",
            )
        })?;
        let given = (S::SMTP_SECRET_ARN.value(), S::SMTP_USERNAME.value(), S::SMTP_PASSWORD.value());
        let login = match credentials(cfg!(feature = "dev"), given)? {
            Credentials::Secret(arn) => {
                let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
                Some(login_from_secret(&crate::db::fetch_secret(&sdk, S::SMTP_SECRET_ARN.name, &arn).await?)?)
            }
            Credentials::Plain(login) => Some(login),
            Credentials::None => None,
        };
        let extra_roots_pem = match S::SMTP_CA_FILE.value() {
            Some(path) => {
                let pem = std::fs::read(&path).map_err(|e| {
                    ConfigError::new(
                        S::SMTP_CA_FILE.name,
                        format!("({path}) cannot be read: {e}"),
                        "point it at a PEM file",
                    )
                })?;
                match crate::db::pem_certificates(&pem) {
                    Ok(certs) if !certs.is_empty() => Some(pem),
                    Ok(_) => {
                        return Err(ConfigError::new(
                            S::SMTP_CA_FILE.name,
                            format!("({path}) holds no certificate"),
                            "point it at PEM CA certificates",
                        ))
                    }
                    Err(e) => {
                        return Err(ConfigError::new(
                            S::SMTP_CA_FILE.name,
                            format!("({path}) holds no usable certificate: {e}"),
                            "point it at PEM CA certificates",
                        ))
                    }
                }
            }
            None => None,
        };
        let max_send_rate: Option<f64> = S::SMTP_MAX_SEND_RATE.optional::<f64>()?.filter(|r| *r != 0.0);
        if max_send_rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            return Err(ConfigError::new(
                S::SMTP_MAX_SEND_RATE.name,
                "must be a positive number of messages a second",
                "set it above 0 (e.g. 10), or to 0 or unset for no cap",
            ));
        }
        let max_connections: usize = S::SMTP_MAX_CONNECTIONS.parsed()?;
        if max_connections == 0 {
            return Err(ConfigError::new(
                S::SMTP_MAX_CONNECTIONS.name,
                "must be 1 or more",
                "set it to 1 or more (e.g. 8)",
            ));
        }
        let ms = |s: &crate::config::Setting| -> Result<Duration, ConfigError> {
            let ms: u64 = s.parsed()?;
            if ms == 0 {
                return Err(ConfigError::new(s.name, "must be above 0", "set a number of milliseconds, e.g. 3000"));
            }
            Ok(Duration::from_millis(ms))
        };
        let ses_configuration_set = ses_configuration_set(&host)?;
        let canary_to =
            S::SES_CANARY_ADDRESS.value().filter(|a| !a.trim().is_empty() && ses_configuration_set.is_some());
        Ok(Self {
            from,
            host,
            port,
            security,
            login,
            extra_roots_pem,
            connect_timeout: ms(&S::SMTP_CONNECT_TIMEOUT_MS)?,
            send_timeout: ms(&S::SMTP_SEND_TIMEOUT_MS)?,
            max_connections,
            max_send_rate,
            ses_configuration_set,
            canary_to,
        })
    }
}

/// Whether `host` is SES's own SMTP interface (`email-smtp.<region>.amazonaws.com`,
/// its FIPS and China endpoints included).
pub fn is_ses_smtp(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    host.starts_with("email-smtp") && (host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn"))
}

/// `SMTP_SES_CONFIGURATION_SET`, checked against the host: a name SES
/// takes (letters, digits, `_` and `-`, up to 64); without one, SES's own
/// SMTP interface publishes no events, which is said at cold start.
fn ses_configuration_set(host: &str) -> Result<Option<String>, ConfigError> {
    let name = S::SMTP_SES_CONFIGURATION_SET.value().filter(|v| !v.trim().is_empty());
    if let Some(set) = &name {
        if set.is_empty() || set.len() > 64 || !set.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(ConfigError::new(
                S::SMTP_SES_CONFIGURATION_SET.name,
                format!("({set:?}) is not a configuration set name"),
                "use the set's name: letters, digits, _ and -, up to 64",
            ));
        }
        if !is_ses_smtp(host) {
            tracing::warn!(
                host,
                "SMTP_SES_CONFIGURATION_SET is set, but SMTP_URL is not SES's SMTP interface \
                (email-smtp.<region>.amazonaws.com): only SES publishes the events it asks for"
            );
        }
    } else if is_ses_smtp(host) {
        tracing::warn!(
            "SMTP_URL is SES's SMTP interface but SMTP_SES_CONFIGURATION_SET is not set: SES publishes \
            no events, so an ambiguous send is left for an operator instead of being settled by them"
        );
    }
    Ok(name)
}

impl SmtpConfig {
    /// The most sends the poller may have in flight, so that it never
    /// needs more than `SMTP_MAX_CONNECTIONS` (its `concurrency` is shared
    /// by its batches in flight): the configured concurrency, capped there.
    pub fn sends_in_flight(&self, concurrency: usize) -> usize {
        concurrency.min(self.max_connections).max(1)
    }
}

/// `smtps://host[:port]` or `smtp://host[:port]`, nothing else: no
/// credentials (they belong in a secret), no path, no query.
pub fn parse_url(raw: &str) -> Result<(String, u16, Security), ConfigError> {
    let var = S::SMTP_URL.name;
    let fix = "use smtps://host:465 (implicit TLS) or smtp://host:587 (STARTTLS, required)";
    let url = url::Url::parse(raw).map_err(|e| ConfigError::new(var, format!("is not a URL: {e}"), fix))?;
    let (security, default_port) = match url.scheme() {
        "smtps" => (Security::Implicit, 465),
        "smtp" => (Security::StartTls, 587),
        other => return Err(ConfigError::new(var, format!("has the scheme {other:?}"), fix)),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ConfigError::new(
            var,
            "holds credentials",
            "remove them from the URL and put them in the secret named by SMTP_SECRET_ARN \
             (or SMTP_USERNAME and SMTP_PASSWORD)",
        ));
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err(ConfigError::new(var, "has a path, a query or a fragment", fix));
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(ConfigError::new(var, "names no host", fix)),
    };
    Ok((host, url.port().unwrap_or(default_port), security))
}

/// The AUTH secret: JSON with `username` and `password`.
fn login_from_secret(secret: &str) -> Result<Login, ConfigError> {
    #[derive(serde::Deserialize)]
    struct Fields {
        username: String,
        password: String,
    }
    let f: Fields = serde_json::from_str(secret).map_err(|_| {
        ConfigError::new(
            S::SMTP_SECRET_ARN.name,
            "names a secret that is not JSON with a username and a password",
            "store {\"username\": \"...\", \"password\": \"...\"} in it",
        )
    })?;
    Ok(Login { username: f.username, password: f.password })
}

#[cfg(test)]
impl SmtpConfig {
    /// A configuration for `host:port` (STARTTLS, no AUTH), for tests.
    pub(crate) fn for_tests(host: &str, port: u16, max_connections: usize) -> Self {
        SmtpConfig {
            from: Sender::parse("Bookings <bookings@example.com>").unwrap(),
            host: host.into(),
            port,
            security: Security::StartTls,
            login: None,
            extra_roots_pem: None,
            connect_timeout: Duration::from_secs(2),
            send_timeout: Duration::from_secs(5),
            max_connections,
            max_send_rate: None,
            ses_configuration_set: None,
            canary_to: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_in_flight_never_add_up_to_more_than_the_connections() {
        let server = |max| SmtpConfig::for_tests("h", 25, max);
        assert_eq!(server(8).sends_in_flight(128), 8);
        assert_eq!(server(8).sends_in_flight(3), 3);
        assert_eq!(server(1).sends_in_flight(128), 1);
    }

    #[test]
    fn ses_own_smtp_interface_is_known_by_its_host() {
        for host in [
            "email-smtp.eu-west-1.amazonaws.com",
            "email-smtp-fips.us-east-1.amazonaws.com",
            "EMAIL-SMTP.us-east-1.AmazonAWS.com",
        ] {
            assert!(is_ses_smtp(host), "{host}");
        }
        for host in ["smtp.zeptomail.com", "email-smtp.example.com", "127.0.0.1"] {
            assert!(!is_ses_smtp(host), "{host}");
        }
    }

    #[test]
    fn the_url_takes_only_tls_schemes_and_no_credentials() {
        assert_eq!(
            parse_url("smtps://mail.example.com").unwrap(),
            ("mail.example.com".into(), 465, Security::Implicit)
        );
        assert_eq!(parse_url("smtp://127.0.0.1:2525").unwrap(), ("127.0.0.1".into(), 2525, Security::StartTls));
        assert_eq!(parse_url("smtp://[::1]:25/").unwrap(), ("::1".into(), 25, Security::StartTls));
        for bad in [
            "http://mail.example.com",
            "smtp://user:pw@mail.example.com",
            "smtp://u@h",
            "smtp://h/x",
            "smtp://h?a=1",
            "nope",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert_eq!(e.var, "SMTP_URL", "{bad}");
        }
        assert!(parse_url("smtps://user:secret@h").unwrap_err().fix.contains("SMTP_SECRET_ARN"));
    }

    #[test]
    fn the_password_is_never_printed() {
        let login = Login { username: "u".into(), password: "hunter2".into() };
        assert!(!format!("{login:?}").contains("hunter2"));
    }
}
