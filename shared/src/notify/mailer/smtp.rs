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
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, CertificateStore, TlsParameters};
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
                Certificate::from_pem(&pem).map_err(|e| {
                    ConfigError::new(
                        S::SMTP_CA_FILE.name,
                        format!("({path}) holds no usable certificate: {e}"),
                        "point it at PEM CA certificates",
                    )
                })?;
                Some(pem)
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
        Failure::Tls(text) => SendOutcome::Misconfigured { reason: format!("SMTP TLS failed at {at}: {text}") },
        Failure::Reply(code, text) => {
            let reason = format!("SMTP {code} at {at}: {text}");
            let permanent = (500..600).contains(&code);
            match stage {
                // The sender, the credentials or the server's policy for us.
                Stage::Connect | Stage::StartTls | Stage::Auth | Stage::Mail if permanent => {
                    SendOutcome::Misconfigured { reason }
                }
                // STARTTLS refused at all: TLS is required.
                Stage::StartTls => SendOutcome::Misconfigured { reason },
                Stage::Rcpt | Stage::Data | Stage::Body | Stage::AfterDot if permanent => {
                    SendOutcome::Rejected { reason }
                }
                _ => SendOutcome::NotSent { reason },
            }
        }
        Failure::Lost(text) | Failure::TimedOut(text) => {
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
    idle: Mutex<Vec<Idle>>,
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
        let mut tls = TlsParameters::builder(config.host.clone()).certificate_store(CertificateStore::WebpkiRoots);
        if let Some(pem) = &config.extra_roots_pem {
            let cert = Certificate::from_pem(pem).map_err(|e| {
                ConfigError::new(S::SMTP_CA_FILE.name, format!("holds no usable certificate: {e}"), "use PEM")
            })?;
            tls = tls.add_root_certificate(cert);
        }
        let tls = tls.build_rustls().map_err(|e| {
            ConfigError::new(S::SMTP_URL.name, format!("cannot set up TLS for its host: {e}"), "check the host name")
        })?;
        let domain = config.from.email.as_str().rsplit('@').next().unwrap_or("localhost").to_string();
        Ok(Self { config, from, tls, hello: ClientId::Domain(domain), idle: Mutex::new(Vec::new()) })
    }

    fn take_idle(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().expect("idle lock");
        while let Some(kept) = idle.pop() {
            if kept.since.elapsed() < IDLE_MAX && !kept.conn.has_broken() {
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
        let implicit = (self.config.security == Security::Implicit).then(|| self.tls.clone());
        let server = (self.config.host.as_str(), self.config.port);
        let mut conn =
            AsyncSmtpConnection::connect_tokio1(server, Some(self.config.connect_timeout), &self.hello, implicit, None)
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
                let failure = match failure_of(&e) {
                    // No mechanism in common: no retry can help.
                    Failure::Lost(text) if e.is_client() => Failure::Reply(530, text),
                    other => other,
                };
                return Err(classify(Stage::Auth, failure));
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
        match timeout_at(deadline, conn.command(Mail::new(Some(self.from.clone()), params))).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let failure = failure_of(&e);
                if reused && matches!(failure, Failure::Lost(_) | Failure::Reply(421, _)) {
                    return Ended::Stale(e.to_string());
                }
                return Ended::Outcome(classify(Stage::Mail, failure), None);
            }
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

    async fn send(&self, n: &Notification) -> SendOutcome {
        let deadline = Instant::now() + self.worst_case();
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
