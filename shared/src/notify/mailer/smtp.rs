//! The SMTP mailer (`MAILER=smtp`): one message per recipient over a pooled
//! TLS connection, with every failure classified by *where* it happened.
//!
//! The design story's hardest case is SMTP's: the server has the whole
//! message once it reads the final `.` of DATA, and a connection lost
//! before its reply says nothing about whether it took responsibility. So
//! the transaction is driven command by command (lettre's connection, not
//! its transport, which folds every stage into one error):
//!
//! | where | what | outcome |
//! |---|---|---|
//! | anywhere | `421` (service unavailable) | paused: release, stop this run |
//! | connecting, MAIL, RCPT, DATA, writing the body | `4xx`, refused, dropped, timed out | known failure: release, retry with backoff |
//! | RCPT, DATA, after the final `.` | `5xx` | permanent for this recipient: FAILED |
//! | after the final `.` | `4xx` | known failure: the server refused it |
//! | after the final `.` | dropped, timed out, unreadable reply | UNKNOWN: the claim is kept |
//! | TLS, STARTTLS, AUTH, greeting, MAIL | refused (`5xx`, bad certificate, no STARTTLS) | configuration: dead letter with the reason |
//!
//! "After the final `.`" starts once the whole body has been written: the
//! `.` is written next, with nothing in between that could fail alone.
//!
//! TLS is never optional: `smtps://` is implicit TLS, `smtp://` must
//! upgrade with STARTTLS or the send is a configuration error. Connections
//! are kept (up to `SMTP_MAX_CONNECTIONS`, idle at most [`IDLE_MAX`]) and
//! reused; one the server closed while idle fails at MAIL with nothing
//! sent, and that send moves to a new connection within the same worst
//! case.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{
    AsyncSmtpConnection, AsyncTokioStream, Certificate, CertificateStore, TlsParameters,
};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use lettre::transport::smtp::Error as SmtpError;
use lettre::Address;
use tokio::time::{timeout_at, Instant};

use super::{Mailer, SendOutcome};
use crate::config::settings as S;
use crate::config::ConfigError;
use crate::notify::invite::{self, Sender};
use crate::notify::Notification;

/// How long a kept connection may sit idle before it is closed instead of
/// reused (servers must wait at least 5 minutes, RFC 5321 4.5.3.2.7; many
/// hosted ones close sooner).
pub const IDLE_MAX: Duration = Duration::from_secs(30);

/// How the connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Security {
    /// `smtps://`: TLS from the first byte (port 465).
    Implicit,
    /// `smtp://`: STARTTLS, required (port 587).
    StartTls,
}

/// SMTP AUTH credentials; the password never reaches a log.
#[derive(Clone)]
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
        let login = match (S::SMTP_SECRET_ARN.value(), S::SMTP_USERNAME.value(), S::SMTP_PASSWORD.value()) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(ConfigError::new(
                    S::SMTP_SECRET_ARN.name,
                    "is set, and so is SMTP_USERNAME or SMTP_PASSWORD",
                    "keep the credentials in one place: the secret (production) or the two variables",
                ))
            }
            (Some(arn), None, None) => {
                let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
                Some(login_from_secret(&crate::db::fetch_secret(&sdk, S::SMTP_SECRET_ARN.name, &arn).await?)?)
            }
            (None, Some(username), Some(password)) => Some(Login { username, password }),
            (None, None, None) => None,
            (None, _, _) => {
                return Err(ConfigError::new(
                    S::SMTP_USERNAME.name,
                    "and SMTP_PASSWORD must be set together",
                    "set both, or neither for a server that needs no AUTH",
                ))
            }
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
        })
    }
}

impl SmtpConfig {
    /// The sends each batch in flight may have at once so that the poller
    /// never has more than `SMTP_MAX_CONNECTIONS` (its `concurrency` is per
    /// batch): the configured concurrency, capped at an equal share.
    pub fn sends_per_batch(&self, concurrency: usize, batches_in_flight: usize) -> Result<usize, ConfigError> {
        if self.max_connections < batches_in_flight {
            return Err(ConfigError::new(
                S::SMTP_MAX_CONNECTIONS.name,
                format!(
                    "({}) is below POLLER_BATCHES_IN_FLIGHT ({batches_in_flight}): each batch in flight needs a connection",
                    self.max_connections
                ),
                "raise SMTP_MAX_CONNECTIONS, or lower POLLER_BATCHES_IN_FLIGHT",
            ));
        }
        Ok(concurrency.min(self.max_connections / batches_in_flight.max(1)))
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

/// Where in the SMTP exchange a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// TCP, implicit TLS, the greeting and EHLO.
    Connect,
    StartTls,
    Auth,
    Mail,
    Rcpt,
    /// The DATA command (before any of the message is written).
    Data,
    /// Writing the message, before the final `.`.
    Body,
    /// The whole message and its final `.` written: the server may have it.
    AfterDot,
}

/// What went wrong at a stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A negative reply, with its code.
    Reply(u16, String),
    /// The TLS handshake failed (certificate, protocol), or STARTTLS is not offered.
    Tls(String),
    /// Connection refused, reset or closed, an unreadable reply, a client error.
    Lost(String),
    /// No reply within the timeout.
    TimedOut(String),
}

/// The outcome of a failure at a stage: the table in this module's doc.
/// When in doubt after the final `.`: unknown, the only answer that can
/// never send twice.
pub fn classify(stage: Stage, failure: Failure) -> SendOutcome {
    let at = match stage {
        Stage::Connect => "connecting",
        Stage::StartTls => "STARTTLS",
        Stage::Auth => "AUTH",
        Stage::Mail => "MAIL",
        Stage::Rcpt => "RCPT",
        Stage::Data => "DATA",
        Stage::Body => "writing the message",
        Stage::AfterDot => "the final .",
    };
    match failure {
        Failure::Reply(421, text) => SendOutcome::Paused { reason: format!("SMTP 421 at {at}: {text}") },
        // Only the handshake is configuration: a TLS error later (an alert,
        // a bad record) is a connection lost, placed like one below.
        Failure::Tls(text) if matches!(stage, Stage::Connect | Stage::StartTls) => {
            SendOutcome::Misconfigured { reason: format!("SMTP TLS failed at {at}: {text}") }
        }
        Failure::Reply(code, text) => {
            let reason = format!("SMTP {code} at {at}: {text}");
            let permanent = (500..600).contains(&code);
            let throttling = ["throttl", "rate limit", "too many"].iter().any(|w| text.to_lowercase().contains(w));
            match stage {
                // The sender, the credentials or the server's policy for us.
                Stage::Connect | Stage::StartTls | Stage::Auth | Stage::Mail if permanent => {
                    SendOutcome::Misconfigured { reason }
                }
                // STARTTLS refused at all: TLS is required.
                Stage::StartTls => SendOutcome::Misconfigured { reason },
                // "Authentication required" is ours to fix, not the recipient's.
                Stage::Rcpt if code == 530 => SendOutcome::Misconfigured { reason },
                Stage::Rcpt | Stage::Data | Stage::Body | Stage::AfterDot if permanent => {
                    SendOutcome::Rejected { reason }
                }
                // A rate refusal (SES's SMTP interface: "454 Throttling
                // failure"): nothing was taken; back soon, no attempt used.
                _ if throttling => SendOutcome::Throttled { reason },
                _ => SendOutcome::NotSent { reason },
            }
        }
        Failure::Tls(text) | Failure::Lost(text) | Failure::TimedOut(text) => {
            let reason = format!("SMTP connection {at}: {text}");
            match stage {
                Stage::AfterDot => SendOutcome::Unknown { reason },
                _ => SendOutcome::NotSent { reason },
            }
        }
    }
}

/// What a lettre error at a stage was.
fn failure_of(e: &SmtpError) -> Failure {
    if let Some(code) = e.status() {
        let text = e.to_string();
        return Failure::Reply(u16::from(code), text);
    }
    if e.is_tls() || caused_by_tls(e) {
        return Failure::Tls(e.to_string());
    }
    Failure::Lost(e.to_string())
}

/// An I/O error of the TLS handshake: a rustls error inside is TLS (the
/// certificate, the protocol), anything else the connection.
fn io_failure(e: std::io::Error) -> Failure {
    if e.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
        Failure::Tls(format!("the TLS handshake failed: {e}"))
    } else {
        Failure::Lost(e.to_string())
    }
}

/// A handshake error reaches lettre as an I/O error around a rustls one.
fn caused_by_tls(e: &SmtpError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if err.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
                return true;
            }
        }
        source = err.source();
    }
    false
}

/// Connections are boxed: one is over a kilobyte, and moves a lot.
type Conn = Box<AsyncSmtpConnection>;

struct Idle {
    conn: Conn,
    since: std::time::Instant,
}

pub struct SmtpMailer {
    config: SmtpConfig,
    from: Address,
    tls: TlsParameters,
    hello: ClientId,
    /// Implicit TLS (`smtps://`), made here on a NODELAY socket; STARTTLS
    /// is lettre's, with [`Self::tls`]. Both trust the same roots.
    implicit: tokio_rustls::TlsConnector,
    server_name: rustls::pki_types::ServerName<'static>,
    idle: Mutex<Vec<Idle>>,
    /// One per connection open at once (`SMTP_MAX_CONNECTIONS`).
    open: tokio::sync::Semaphore,
}

/// How a transaction on one connection ended.
enum Ended {
    /// An outcome, and the connection when it can be kept.
    Outcome(SendOutcome, Option<Conn>),
    /// A kept connection failed at MAIL with nothing sent (closed while idle).
    Stale(String),
}

impl SmtpMailer {
    pub fn new(config: SmtpConfig) -> Result<Self, ConfigError> {
        let from: Address = config.from.email.as_str().parse().map_err(|e| {
            ConfigError::new(S::SMTP_FROM_ADDRESS.name, format!("is not an SMTP address: {e}"), "use an ASCII address")
        })?;
        let (tls, implicit, server_name) = tls_for(&config)?;
        let domain = config.from.email.as_str().rsplit('@').next().unwrap_or("localhost").to_string();
        let open = tokio::sync::Semaphore::new(config.max_connections);
        Ok(Self {
            config,
            from,
            tls,
            hello: ClientId::Domain(domain),
            implicit,
            server_name,
            idle: Mutex::new(Vec::new()),
            open,
        })
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().expect("idle lock");
        while let Some(kept) = idle.pop() {
            if kept.since.elapsed() < IDLE_MAX {
                return Some(kept.conn);
            }
            close(kept.conn);
        }
        None
    }

    fn keep(&self, conn: Conn) {
        let mut idle = self.idle.lock().expect("idle lock");
        if idle.len() < self.config.max_connections {
            idle.push(Idle { conn, since: std::time::Instant::now() });
        } else {
            close(conn);
        }
    }

    /// Connection kept open now (tests).
    pub fn idle_connections(&self) -> usize {
        self.idle.lock().expect("idle lock").len()
    }

    /// Opens, secures and authenticates a connection.
    async fn connect(&self) -> Result<Conn, SendOutcome> {
        let lost = |e: std::io::Error| classify(Stage::Connect, Failure::Lost(e.to_string()));
        let tcp = tokio::net::TcpStream::connect((self.config.host.as_str(), self.config.port)).await.map_err(lost)?;
        // The message and its final `.` are two writes: without NODELAY the
        // `.` waits for the server's delayed ACK of the body (Nagle), some
        // 40 ms a message.
        tcp.set_nodelay(true).map_err(lost)?;
        let stream: Box<dyn AsyncTokioStream> = match self.config.security {
            Security::StartTls => Box::new(tcp),
            Security::Implicit => {
                let peer = tcp.peer_addr().map_err(lost)?;
                let tls = self.implicit.connect(self.server_name.clone(), tcp).await;
                Box::new(Transport(tls.map_err(|e| classify(Stage::Connect, io_failure(e)))?, peer))
            }
        };
        let mut conn = AsyncSmtpConnection::connect_with_transport(stream, &self.hello)
            .await
            .map_err(|e| classify(Stage::Connect, failure_of(&e)))?;
        if self.config.security == Security::StartTls {
            if !conn.can_starttls() {
                return Err(classify(
                    Stage::StartTls,
                    Failure::Tls(
                        "the server does not offer STARTTLS, and TLS is required (smtp:// means STARTTLS)".into(),
                    ),
                ));
            }
            conn.starttls(self.tls.clone(), &self.hello)
                .await
                .map_err(|e| classify(Stage::StartTls, failure_of(&e)))?;
        }
        if let Some(login) = &self.config.login {
            let credentials = Credentials::new(login.username.clone(), login.password.clone());
            if let Err(e) = conn.auth(&[Mechanism::Plain, Mechanism::Login], &credentials).await {
                if e.is_client() {
                    // No mechanism in common (PLAIN, LOGIN): no retry can help.
                    return Err(SendOutcome::Misconfigured { reason: format!("SMTP AUTH: {e}") });
                }
                return Err(classify(Stage::Auth, failure_of(&e)));
            }
        }
        Ok(Box::new(conn))
    }

    /// MAIL, RCPT, DATA and the message on `conn`, by `deadline`.
    async fn transact(
        &self,
        mut conn: Conn,
        reused: bool,
        to: &Address,
        raw: &[u8],
        message_id: &str,
        deadline: Instant,
    ) -> Ended {
        let mut params = Vec::new();
        if !raw.is_ascii() {
            if !conn.server_info().supports_feature(Extension::EightBitMime) {
                let reason = "the message is not 7-bit, and the server does not take 8BITMIME".to_string();
                return Ended::Outcome(SendOutcome::Rejected { reason }, Some(conn));
            }
            params.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        // On a kept connection MAIL is also the probe: nothing of the
        // message is sent yet, so a connection that does not answer in a
        // connect timeout, or refuses for any reason but a permanent one,
        // is replaced within the same deadline.
        let mail_by = if reused { deadline.min(Instant::now() + self.config.connect_timeout) } else { deadline };
        match timeout_at(mail_by, conn.command(Mail::new(Some(self.from.clone()), params))).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let failure = failure_of(&e);
                if reused && !matches!(failure, Failure::Reply(500..=599, _)) {
                    return Ended::Stale(e.to_string());
                }
                return Ended::Outcome(classify(Stage::Mail, failure), None);
            }
            Err(_) if reused => return Ended::Stale("no reply to MAIL on a kept connection".into()),
            Err(_) => {
                return Ended::Outcome(
                    classify(Stage::Mail, Failure::TimedOut("no reply to MAIL in time".into())),
                    None,
                )
            }
        }
        let rcpt = timeout_at(deadline, conn.command(Rcpt::new(to.clone(), vec![]))).await;
        if let Some(outcome) = failed(Stage::Rcpt, rcpt, "RCPT") {
            return Ended::Outcome(outcome, None);
        }
        let data = timeout_at(deadline, conn.command(Data)).await;
        if let Some(outcome) = failed(Stage::Data, data, "DATA") {
            return Ended::Outcome(outcome, None);
        }
        // Set once lettre asks for more of the message after writing (and
        // flushing) all of it: what it writes next is the final `.`.
        let body_written = AtomicBool::new(false);
        let parts = std::iter::once(raw).chain(std::iter::from_fn(|| {
            body_written.store(true, Ordering::SeqCst);
            None
        }));
        let result = timeout_at(deadline, conn.message_iter(parts)).await;
        let stage = if body_written.load(Ordering::SeqCst) { Stage::AfterDot } else { Stage::Body };
        match result {
            Ok(Ok(reply)) => {
                tracing::debug!(reply = ?reply.first_line(), "SMTP server took the message");
                Ended::Outcome(SendOutcome::Sent { message_id: message_id.to_string() }, Some(conn))
            }
            Ok(Err(e)) => Ended::Outcome(classify(stage, failure_of(&e)), None),
            Err(_) => {
                Ended::Outcome(classify(stage, Failure::TimedOut("no reply to the final . in time".into())), None)
            }
        }
    }
}

/// The outcome of a command that did not succeed, if it did not.
fn failed<T>(
    stage: Stage,
    result: Result<Result<T, SmtpError>, tokio::time::error::Elapsed>,
    command: &str,
) -> Option<SendOutcome> {
    match result {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(classify(stage, failure_of(&e))),
        Err(_) => Some(classify(stage, Failure::TimedOut(format!("no reply to {command} in time")))),
    }
}

/// The TLS of a connection to the configured host, trusting the public
/// roots plus `SMTP_CA_FILE`'s: lettre's parameters for STARTTLS, and the
/// connector for implicit TLS, which is made here on a NODELAY socket.
fn tls_for(
    config: &SmtpConfig,
) -> Result<(TlsParameters, tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>), ConfigError> {
    let ca = |e: String| ConfigError::new(S::SMTP_CA_FILE.name, format!("holds no usable certificate: {e}"), "use PEM");
    let extra = match &config.extra_roots_pem {
        Some(pem) => crate::db::pem_certificates(pem).map_err(ca)?,
        None => Vec::new(),
    };
    let mut starttls = TlsParameters::builder(config.host.clone()).certificate_store(CertificateStore::WebpkiRoots);
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in extra {
        starttls = starttls.add_root_certificate(Certificate::from_der(cert.to_vec()).map_err(|e| ca(e.to_string()))?);
        roots.add(cert).map_err(|e| ca(e.to_string()))?;
    }
    let host = |e: String| {
        ConfigError::new(
            S::SMTP_URL.name,
            format!("names a host TLS cannot check: {e}"),
            "use a DNS name or an IP address",
        )
    };
    let starttls = starttls.build_rustls().map_err(|e| host(e.to_string()))?;
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new(S::SMTP_URL.name, format!("cannot set up TLS: {e}"), "report this as a bug"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(config.host.clone()).map_err(|e| host(e.to_string()))?;
    Ok((starttls, tokio_rustls::TlsConnector::from(std::sync::Arc::new(client)), name))
}

/// A stream as lettre takes its transport: the implicit-TLS one made here
/// (and the tests' in-memory pipe), with the peer's address.
#[derive(Debug)]
struct Transport<S>(S, std::net::SocketAddr);

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Transport<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Transport<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S> AsyncTokioStream for Transport<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + std::fmt::Debug,
{
    fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Ok(self.1)
    }
}

/// Says QUIT and closes, in the background (a send never waits for it).
fn close(mut conn: Conn) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(1), conn.abort()).await;
        });
    }
}

#[async_trait::async_trait]
impl Mailer for SmtpMailer {
    /// Connecting, then one transaction: everything a send does runs by
    /// this one deadline, a stale kept connection's MAIL included.
    fn worst_case(&self) -> Duration {
        self.config.connect_timeout + self.config.send_timeout
    }

    fn timeouts(&self) -> &'static str {
        "SMTP_CONNECT_TIMEOUT_MS + SMTP_SEND_TIMEOUT_MS"
    }

    fn provider(&self) -> &'static str {
        crate::notify::send_rate::SMTP
    }

    async fn send(&self, n: &Notification) -> SendOutcome {
        let deadline = Instant::now() + self.worst_case();
        // The poller never has more sends in flight than connections
        // ([`SmtpConfig::sends_per_batch`]); should it, the extra one waits
        // for nothing: it is refused before anything is sent.
        let Ok(_open) = self.open.try_acquire() else {
            let max = self.config.max_connections;
            return SendOutcome::NotSent {
                reason: format!("all {max} SMTP connections (SMTP_MAX_CONNECTIONS) are busy"),
            };
        };
        let to: Address = match n.recipient.email.as_str().parse() {
            Ok(to) => to,
            Err(e) => return SendOutcome::Rejected { reason: format!("the recipient is not an SMTP address: {e}") },
        };
        let raw = invite::build(n, &self.config.from);
        let message_id = invite::message_id(n, &self.config.from);
        if let Some(conn) = self.take_idle() {
            match self.transact(conn, true, &to, &raw, &message_id, deadline).await {
                Ended::Outcome(outcome, conn) => return self.finish(outcome, conn),
                Ended::Stale(why) => {
                    tracing::debug!(error = %why, "a kept SMTP connection was closed; opening another")
                }
            }
        }
        let connect_by = deadline.min(Instant::now() + self.config.connect_timeout);
        let conn = match timeout_at(connect_by, self.connect()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(outcome)) => return outcome,
            Err(_) => return classify(Stage::Connect, Failure::TimedOut("connecting timed out".into())),
        };
        match self.transact(conn, false, &to, &raw, &message_id, deadline).await {
            Ended::Outcome(outcome, conn) => self.finish(outcome, conn),
            Ended::Stale(why) => classify(Stage::Mail, Failure::Lost(why)),
        }
    }
}

impl SmtpMailer {
    fn finish(&self, outcome: SendOutcome, conn: Option<Conn>) -> SendOutcome {
        match conn {
            Some(conn) if matches!(outcome, SendOutcome::Sent { .. }) => self.keep(conn),
            Some(conn) => close(conn),
            None => {}
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(o: SendOutcome) -> &'static str {
        match o {
            SendOutcome::Sent { .. } => "sent",
            SendOutcome::NotSent { .. } => "retryable",
            SendOutcome::Throttled { .. } => "throttled",
            SendOutcome::Paused { .. } => "paused",
            SendOutcome::Rejected { .. } => "permanent",
            SendOutcome::Misconfigured { .. } => "configuration",
            SendOutcome::Unknown { .. } => "unknown",
        }
    }

    fn reply(code: u16) -> Failure {
        Failure::Reply(code, "x".into())
    }

    #[test]
    fn every_stage_before_the_final_dot_retries_a_transient_reply_or_a_lost_connection() {
        for stage in [Stage::Connect, Stage::Auth, Stage::Mail, Stage::Rcpt, Stage::Data, Stage::Body] {
            assert_eq!(kind(classify(stage, reply(451))), "retryable", "{stage:?}");
            assert_eq!(kind(classify(stage, Failure::Lost("reset".into()))), "retryable", "{stage:?}");
            assert_eq!(kind(classify(stage, Failure::TimedOut("t".into()))), "retryable", "{stage:?}");
        }
    }

    #[test]
    fn after_the_final_dot_only_a_reply_is_known() {
        assert_eq!(kind(classify(Stage::AfterDot, Failure::Lost("eof".into()))), "unknown");
        assert_eq!(kind(classify(Stage::AfterDot, Failure::TimedOut("t".into()))), "unknown");
        assert_eq!(kind(classify(Stage::AfterDot, reply(451))), "retryable");
        assert_eq!(kind(classify(Stage::AfterDot, reply(554))), "permanent");
    }

    #[test]
    fn a_tls_error_after_the_handshake_is_a_lost_connection_and_after_the_dot_unknown() {
        let tls = || Failure::Tls("received fatal alert".into());
        assert_eq!(kind(classify(Stage::AfterDot, tls())), "unknown");
        for stage in [Stage::Auth, Stage::Mail, Stage::Rcpt, Stage::Data, Stage::Body] {
            assert_eq!(kind(classify(stage, tls())), "retryable", "{stage:?}");
        }
    }

    #[test]
    fn a_rate_refusal_is_throttled_and_530_at_rcpt_is_configuration() {
        let throttled = Failure::Reply(454, "454 Throttling failure: Maximum sending rate exceeded".into());
        assert_eq!(kind(classify(Stage::Mail, throttled.clone())), "throttled");
        assert_eq!(kind(classify(Stage::AfterDot, throttled)), "throttled");
        assert_eq!(kind(classify(Stage::Rcpt, reply(530))), "configuration");
    }

    #[test]
    fn a_421_pauses_wherever_it_comes() {
        for stage in [Stage::Connect, Stage::Mail, Stage::Rcpt, Stage::Data, Stage::AfterDot] {
            assert_eq!(kind(classify(stage, reply(421))), "paused", "{stage:?}");
        }
    }

    #[test]
    fn permanent_replies_fail_the_recipient_at_rcpt_and_after_and_the_setup_before() {
        assert_eq!(kind(classify(Stage::Rcpt, reply(550))), "permanent");
        assert_eq!(kind(classify(Stage::Data, reply(554))), "permanent");
        assert_eq!(kind(classify(Stage::Mail, reply(550))), "configuration");
        assert_eq!(kind(classify(Stage::Auth, reply(535))), "configuration");
        assert_eq!(kind(classify(Stage::Connect, reply(554))), "configuration");
        assert_eq!(kind(classify(Stage::StartTls, reply(454))), "configuration");
        assert_eq!(kind(classify(Stage::Connect, Failure::Tls("bad certificate".into()))), "configuration");
    }

    /// Where the scripted server hangs up.
    #[derive(Clone, Copy)]
    enum Cut {
        AtMail,
        MidBody,
        AfterDot,
        Never,
    }

    /// Runs one transaction against a server that hangs up at `cut`.
    async fn transact_cut_at(cut: Cut, reused: bool) -> Ended {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        // A small pipe: the body (about 8 KB) is written as the server reads.
        let (client, server) = tokio::io::duplex(256);
        let script = tokio::spawn(async move {
            let (r, mut w) = tokio::io::split(server);
            let mut r = tokio::io::BufReader::new(r);
            let mut line = String::new();
            w.write_all(b"220 scripted ESMTP\r\n").await.unwrap();
            for reply in ["250 scripted\r\n", "250 sender ok\r\n", "250 recipient ok\r\n", "354 go on\r\n"] {
                line.clear();
                r.read_line(&mut line).await.unwrap();
                if line.starts_with("MAIL") && matches!(cut, Cut::AtMail) {
                    return;
                }
                w.write_all(reply.as_bytes()).await.unwrap();
            }
            if matches!(cut, Cut::MidBody) {
                let mut some = [0u8; 512];
                r.read_exact(&mut some).await.unwrap();
                return;
            }
            loop {
                line.clear();
                assert!(r.read_line(&mut line).await.unwrap() > 0, "the client hung up first");
                if line == ".\r\n" {
                    break;
                }
            }
            if matches!(cut, Cut::Never) {
                w.write_all(b"250 queued\r\n").await.unwrap();
                let _ = r.read_line(&mut line).await; // until the client goes
            }
        });
        let config = SmtpConfig {
            from: Sender::parse("Bookings <bookings@example.com>").unwrap(),
            host: "127.0.0.1".into(),
            port: 25,
            security: Security::StartTls,
            login: None,
            extra_roots_pem: None,
            connect_timeout: Duration::from_secs(2),
            send_timeout: Duration::from_secs(5),
            max_connections: 1,
            max_send_rate: None,
        };
        let mailer = SmtpMailer::new(config).unwrap();
        let conn = AsyncSmtpConnection::connect_with_transport(
            // lettre's connection over an in-memory pipe to the scripted
            // server, so the cut falls exactly where the test says.
            Box::new(Transport(client, ([127, 0, 0, 1], 25).into())),
            &ClientId::Domain("test".into()),
        )
        .await
        .unwrap();
        let raw: Vec<u8> = (0..120).flat_map(|i| format!("Line {i:03} {}\r\n", "x".repeat(60)).into_bytes()).collect();
        let to: Address = "alice@example.com".parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let ended = mailer.transact(Box::new(conn), reused, &to, &raw, "id@example.com", deadline).await;
        if !matches!(cut, Cut::Never) {
            script.await.unwrap();
        }
        ended
    }

    fn outcome(ended: Ended) -> &'static str {
        match ended {
            Ended::Outcome(o, _) => kind(o),
            Ended::Stale(_) => "stale",
        }
    }

    #[tokio::test]
    async fn a_connection_cut_while_the_body_is_written_is_a_known_failure() {
        assert_eq!(outcome(transact_cut_at(Cut::MidBody, false).await), "retryable");
    }

    #[tokio::test]
    async fn a_connection_cut_right_after_the_final_dot_is_unknown() {
        assert_eq!(outcome(transact_cut_at(Cut::AfterDot, false).await), "unknown");
    }

    #[tokio::test]
    async fn the_whole_transaction_sends_and_keeps_the_connection() {
        match transact_cut_at(Cut::Never, false).await {
            Ended::Outcome(SendOutcome::Sent { message_id }, Some(_)) => assert_eq!(message_id, "id@example.com"),
            _ => panic!("expected Sent with the connection kept"),
        }
    }

    #[tokio::test]
    async fn a_kept_connection_cut_at_mail_is_stale_and_a_new_one_a_known_failure() {
        assert_eq!(outcome(transact_cut_at(Cut::AtMail, true).await), "stale");
        assert_eq!(outcome(transact_cut_at(Cut::AtMail, false).await), "retryable");
    }

    #[test]
    fn sends_per_batch_never_add_up_to_more_than_the_connections() {
        let server = |max| SmtpConfig {
            from: Sender::parse("b@example.com").unwrap(),
            host: "h".into(),
            port: 25,
            security: Security::StartTls,
            login: None,
            extra_roots_pem: None,
            connect_timeout: Duration::from_secs(1),
            send_timeout: Duration::from_secs(1),
            max_connections: max,
            max_send_rate: None,
        };
        assert_eq!(server(8).sends_per_batch(128, 2).unwrap(), 4);
        assert_eq!(server(8).sends_per_batch(3, 2).unwrap(), 3);
        assert_eq!(server(9).sends_per_batch(128, 4).unwrap(), 2);
        assert_eq!(server(1).sends_per_batch(128, 2).unwrap_err().var, "SMTP_MAX_CONNECTIONS");
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
