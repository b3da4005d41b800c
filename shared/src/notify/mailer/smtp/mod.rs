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

mod classify;
mod config;
mod ses;
mod starttls;
mod transport;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, AsyncTokioStream};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use lettre::transport::smtp::Error as SmtpError;
use lettre::Address;
use tokio::time::{timeout_at, Instant};

pub use classify::{classify, Failure, Stage};
use classify::{failure_of, io_failure};
pub use config::{parse_url, Login, Security, SmtpConfig};
use transport::{tls_for, Transport};

use super::{Mailer, SendOutcome};
use crate::config::settings as S;
use crate::config::ConfigError;
use crate::notify::notification::Notification;
use crate::notify::render::invite;
use crate::notify::sends::SentVia;

/// How long a kept connection may sit idle before it is closed instead of
/// reused (servers must wait at least 5 minutes, RFC 5321 4.5.3.2.7; many
/// hosted ones close sooner).
pub const IDLE_MAX: Duration = Duration::from_secs(30);

/// Connections are boxed: one is over a kilobyte, and moves a lot.
type Conn = Box<AsyncSmtpConnection>;

struct Idle {
    conn: Conn,
    since: std::time::Instant,
}

pub struct SmtpMailer {
    config: SmtpConfig,
    from: Address,
    hello: ClientId,
    /// TLS, made here on a NODELAY socket: from the first byte (`smtps://`)
    /// or after STARTTLS ([`starttls`]).
    implicit: tokio_rustls::TlsConnector,
    server_name: rustls::pki_types::ServerName<'static>,
    idle: Mutex<Vec<Idle>>,
    /// One per send in flight, each on a connection of its own: with the
    /// kept ones, never more than `SMTP_MAX_CONNECTIONS` open.
    open: tokio::sync::Semaphore,
}

/// How a transaction on one connection ended.
enum Ended {
    /// An outcome, and the connection when it can be kept.
    Outcome(SendOutcome, Option<Conn>),
    /// A kept connection failed at MAIL, or did not answer it in time, with
    /// nothing of the message sent (closed while idle, or dead).
    Stale(String),
}

impl SmtpMailer {
    pub fn new(config: SmtpConfig) -> Result<Self, ConfigError> {
        let from: Address = config.from.email.as_str().parse().map_err(|e| {
            ConfigError::new(S::SMTP_FROM_ADDRESS.name, format!("is not an SMTP address: {e}"), "use an ASCII address")
        })?;
        let (implicit, server_name) = tls_for(&config)?;
        let domain = config.from.email.as_str().rsplit('@').next().unwrap_or("localhost").to_string();
        let open = tokio::sync::Semaphore::new(config.max_connections);
        Ok(Self {
            config,
            from,
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
            // The plain-text part by hand, a byte at a time, so nothing sent
            // before TLS can pass for an answer inside it (starttls.rs).
            Security::StartTls => {
                let mut tcp = tcp;
                let peer = tcp.peer_addr().map_err(lost)?;
                starttls::negotiate(&mut tcp, &self.hello.to_string()).await.map_err(|(at, f)| classify(at, f))?;
                let tls = self.implicit.connect(self.server_name.clone(), tcp).await;
                let tls = tls.map_err(|e| classify(Stage::StartTls, io_failure(e)))?;
                Box::new(Transport(starttls::Greeted::new(tls), peer))
            }
            Security::Implicit => {
                let peer = tcp.peer_addr().map_err(lost)?;
                let tls = self.implicit.connect(self.server_name.clone(), tcp).await;
                Box::new(Transport(tls.map_err(|e| classify(Stage::Connect, io_failure(e)))?, peer))
            }
        };
        let mut conn = AsyncSmtpConnection::connect_with_transport(stream, &self.hello)
            .await
            .map_err(|e| classify(Stage::Connect, failure_of(&e)))?;
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
                // SES's SMTP interface answers "Ok <its message id>": the id
                // its events carry, which the feedback handler matches.
                let ses_id =
                    self.config.ses_configuration_set.as_ref().and_then(|_| ses::message_id(reply.first_line()?));
                let message_id = ses_id.unwrap_or_else(|| message_id.to_string());
                Ended::Outcome(SendOutcome::Sent { message_id }, Some(conn))
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

    /// `ses-smtp` through SES's own SMTP interface with a configuration
    /// set: SES's events settle its ambiguous sends.
    fn provider(&self) -> SentVia {
        match self.config.ses_configuration_set {
            Some(_) => SentVia::SesSmtp,
            None => SentVia::Smtp,
        }
    }

    /// Through SES's own SMTP interface with a configuration set, a canary
    /// to `SES_CANARY_ADDRESS`, tagged with its id.
    async fn canary(&self, id: uuid::Uuid) -> Option<SendOutcome> {
        let (set, to) = (self.config.ses_configuration_set.as_ref()?, self.config.canary_to.as_deref()?);
        let raw = [ses::canary_headers(set, id).into_bytes(), invite::canary(id, to, &self.config.from)].concat();
        Some(self.deliver(to, &raw, &format!("canary.{id}")).await)
    }

    async fn send(&self, n: &Notification) -> SendOutcome {
        let mut raw = invite::build(n, &self.config.from);
        if let Some(set) = &self.config.ses_configuration_set {
            raw = [ses::headers(set, n).into_bytes(), raw].concat();
        }
        let message_id = invite::message_id(n, &self.config.from);
        self.deliver(n.recipient.email.as_str(), &raw, &message_id).await
    }
}

impl SmtpMailer {
    /// One message to `to`, on a kept connection or a new one.
    async fn deliver(&self, to: &str, raw: &[u8], message_id: &str) -> SendOutcome {
        let deadline = Instant::now() + self.worst_case();
        // The poller never has more sends in flight than connections
        // ([`SmtpConfig::sends_in_flight`]); should it, the extra one waits
        // for nothing: it is refused before anything is sent.
        let Ok(_open) = self.open.try_acquire() else {
            let max = self.config.max_connections;
            return SendOutcome::NotSent {
                reason: format!("all {max} SMTP connections (SMTP_MAX_CONNECTIONS) are busy"),
            };
        };
        let to: Address = match to.parse() {
            Ok(to) => to,
            Err(e) => return SendOutcome::Rejected { reason: format!("the recipient is not an SMTP address: {e}") },
        };
        if let Some(conn) = self.take_idle() {
            match self.transact(conn, true, &to, raw, message_id, deadline).await {
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
        match self.transact(conn, false, &to, raw, message_id, deadline).await {
            Ended::Outcome(outcome, conn) => self.finish(outcome, conn),
            Ended::Stale(why) => classify(Stage::Mail, Failure::Lost(why)),
        }
    }

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
mod tests;
