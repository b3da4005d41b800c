//! A stand-in for the SES account's limits, in front of moto (or answering
//! itself): it enforces a `MaxSendRate` as SES does, answering `SendEmail`
//! above it with SES v2's throttling error (429 `TooManyRequestsException`),
//! reports that rate through `GetAccount`, adds a network latency to every
//! answer, and logs when it accepted each message, to whom, for which claim.
//!
//! The rate is enforced, when a request arrives, in one of the shapes a
//! limiter may have ([`Limiter`]): AWS documents only that the maximum send
//! rate is "per second" and that "you can exceed this quota for short
//! bursts, but not for sustained periods", never the shape. A token bucket
//! holding one second of sends is the most forgiving; at most the rate in
//! any sliding one-second window the strictest. A refused request counts
//! for nothing (SES counts messages it accepted). An accepted message is forwarded to the
//! upstream (moto) when there is one, and answered with moto's message id;
//! without one, the stand-in answers with its own id, as SES would.
//!
//! With [`Limits::identities`] it checks identities as SES does: the From
//! address must belong to a verified identity of the account (an address,
//! or its domain) in every case and, while the account is in the sandbox,
//! each recipient too, except the mailbox simulator's addresses; a refusal
//! is SES's 400 `MessageRejected` naming the identities that failed.
//!
//! HTTP/1.1 with keep-alive, as the SDK's connection pool expects. Loopback
//! only; every connection ends with its client.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// How the stand-in counts the account's rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    /// A token bucket holding one second of sends, refilled at the rate.
    Bucket,
    /// At most the rate in any one-second window ending now.
    Sliding,
    /// At most the rate in each calendar second (fixed windows).
    Calendar,
}

impl Limiter {
    pub const ALL: [Limiter; 3] = [Limiter::Bucket, Limiter::Sliding, Limiter::Calendar];

    pub fn name(self) -> &'static str {
        match self {
            Limiter::Bucket => "bucket",
            Limiter::Sliding => "sliding",
            Limiter::Calendar => "calendar",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Limiter::Bucket => "token bucket of one second",
            Limiter::Sliding => "any sliding second",
            Limiter::Calendar => "each calendar second",
        }
    }

    pub fn parse(name: &str) -> Option<Limiter> {
        Self::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// How the stand-in behaves.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The account's `MaxSendRate`, in messages a second.
    pub rate: f64,
    /// How that rate is counted.
    pub limiter: Limiter,
    /// What `GetAccount` reports, when not `rate` (another sender on the
    /// account uses part of it, unseen by the pollers).
    pub reported: Option<f64>,
    /// The round trip to SES, added to every call: half before the
    /// stand-in sees the request (and accepts the message), half after.
    pub latency: Duration,
    /// The latency varies uniformly by up to this much either way.
    pub jitter: Duration,
    /// moto's endpoint, to forward accepted messages to; None: answer here.
    pub upstream: Option<String>,
    /// The account's verified identities, checked as SES checks them
    /// (None: not checked here).
    pub identities: Option<Identities>,
}

/// The account's verified identities in the region, and whether it is in
/// the SES sandbox.
#[derive(Debug, Clone, Default)]
pub struct Identities {
    /// Addresses and domains, verified.
    pub verified: Vec<String>,
    /// Addresses and domains created but not verified yet (the address's
    /// click, the domain's DKIM records, still awaited): SES sends from
    /// none of them, and `GetEmailIdentity` says so.
    pub pending: Vec<String>,
    /// In the sandbox: every recipient must be verified too (or the mailbox
    /// simulator's), at most [`SANDBOX_DAILY_QUOTA`] messages in 24 hours,
    /// and `GetAccount` says so (`ProductionAccessEnabled` false).
    pub sandbox: bool,
}

/// A sandbox account's `Max24HourSend`
/// (<https://docs.aws.amazon.com/ses/latest/dg/request-production-access.html>).
pub const SANDBOX_DAILY_QUOTA: usize = 200;

/// The mailbox simulator's domain: SES accepts its addresses from any
/// account, in the sandbox too, and answers with the scenario the local
/// part names (`success@`, `bounce@`, `complaint@`, ...).
pub const SIMULATOR: &str = "simulator.amazonses.com";

impl Identities {
    fn verified(&self, address: &str) -> bool {
        let address = address.to_ascii_lowercase();
        let domain = address.rsplit_once('@').map_or("", |(_, d)| d);
        self.verified.iter().any(|v| {
            let v = v.to_ascii_lowercase();
            v == address || v == domain
        })
    }

    /// `GetEmailIdentity`'s answer for `identity`: None when the account
    /// has no such identity (SES's 404 NotFoundException).
    fn describe(&self, identity: &str) -> Option<serde_json::Value> {
        let identity = identity.to_ascii_lowercase();
        let known = |list: &[String]| list.iter().any(|v| v.to_ascii_lowercase() == identity);
        let verified = known(&self.verified);
        if !verified && !known(&self.pending) {
            return None;
        }
        let domain = !identity.contains('@');
        let status = if verified { "SUCCESS" } else { "PENDING" };
        Some(serde_json::json!({
            "IdentityType": if domain { "DOMAIN" } else { "EMAIL_ADDRESS" },
            "FeedbackForwardingStatus": true,
            "VerifiedForSendingStatus": verified,
            "VerificationStatus": status,
            "DkimAttributes": if domain {
                serde_json::json!({"SigningEnabled": true, "Status": status, "SigningAttributesOrigin": "AWS_SES"})
            } else {
                serde_json::json!({"SigningEnabled": false, "Status": "NOT_STARTED"})
            },
        }))
    }

    /// The identities of a message that fail the check, as SES lists them.
    fn failing(&self, from: &str, to: &[String]) -> Vec<String> {
        let mut failing: Vec<String> = Vec::new();
        if !self.verified(from) {
            failing.push(from.to_string());
        }
        if self.sandbox {
            failing.extend(
                to.iter()
                    .filter(|t| !t.to_ascii_lowercase().ends_with(&format!("@{SIMULATOR}")) && !self.verified(t))
                    .cloned(),
            );
        }
        failing
    }
}

/// One accepted message.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// When it arrived, from the stand-in's start.
    pub at: Duration,
    pub recipient: String,
    /// The claim id the message was tagged with.
    pub claim: Option<String>,
}

#[derive(Default)]
struct Log {
    accepted: Vec<Accepted>,
    /// When each refused `SendEmail` arrived.
    throttled: Vec<Duration>,
    /// Every `SendEmail` call.
    send_calls: usize,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    /// Arrival times of the messages accepted in the last second.
    window: std::collections::VecDeque<Instant>,
    /// The calendar second being counted, and its count.
    second: (u64, usize),
}

struct State {
    limits: Limits,
    /// The limits' identities, which a test may verify while it runs.
    identities: Mutex<Option<Identities>>,
    started: Instant,
    bucket: Mutex<Bucket>,
    log: Mutex<Log>,
    rng: Mutex<crate::Rng>,
}

/// A running stand-in; dropping it stops it.
pub struct SesStandIn {
    pub endpoint: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SesStandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SesStandIn {
    /// Starts it on a free loopback port.
    pub async fn start(limits: Limits) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the SES stand-in");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(State {
            identities: Mutex::new(limits.identities.clone()),
            bucket: Mutex::new(Bucket {
                tokens: limits.rate.max(1.0),
                at: Instant::now(),
                window: Default::default(),
                second: (0, 0),
            }),
            limits,
            started: Instant::now(),
            log: Mutex::default(),
            rng: Mutex::new(crate::Rng::new(7)),
        });
        let served = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                tokio::spawn(serve(served.clone(), client));
            }
        });
        Self { endpoint, state, task }
    }

    /// `t` on the clock of [`Accepted::at`]: from the stand-in's start.
    pub fn since_start(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.state.started)
    }

    /// Every accepted message, in arrival order.
    pub fn accepted(&self) -> Vec<Accepted> {
        self.state.log.lock().unwrap().accepted.clone()
    }

    /// The operator completes `identity`'s verification: SES sends from it
    /// from now on.
    pub fn verify(&self, identity: &str) {
        let mut identities = self.state.identities.lock().unwrap();
        let ids = identities.get_or_insert_with(Default::default);
        ids.pending.retain(|p| !p.eq_ignore_ascii_case(identity));
        ids.verified.push(identity.to_string());
    }

    /// How many `SendEmail` calls arrived, accepted or not.
    pub fn send_calls(&self) -> usize {
        self.state.log.lock().unwrap().send_calls
    }

    /// How many `SendEmail` calls were refused for the rate.
    pub fn throttled(&self) -> usize {
        self.state.log.lock().unwrap().throttled.len()
    }

    /// When each refused `SendEmail` arrived, from the stand-in's start.
    pub fn throttle_times(&self) -> Vec<Duration> {
        self.state.log.lock().unwrap().throttled.clone()
    }

    /// The most messages accepted in any `window` (a sliding window over the
    /// acceptance times).
    pub fn most_in(accepted: &[Accepted], window: Duration) -> usize {
        let times: Vec<Duration> = accepted.iter().map(|a| a.at).collect();
        let (mut most, mut first) = (0, 0);
        for (last, t) in times.iter().enumerate() {
            while *t - times[first] >= window {
                first += 1;
            }
            most = most.max(last - first + 1);
        }
        most
    }
}

impl State {
    /// Whether one more message fits in the account's rate now, counted as
    /// the limiter does (and counted in, when it does).
    fn admit(&self) -> bool {
        let mut b = self.bucket.lock().unwrap();
        let now = Instant::now();
        // Whole messages: a rate of 14.5 a second allows 14 in one second.
        let most = (self.limits.rate.floor() as usize).max(1);
        match self.limits.limiter {
            Limiter::Bucket => {
                let capacity = self.limits.rate.max(1.0);
                b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * self.limits.rate).min(capacity);
                b.at = now;
                if b.tokens >= 1.0 {
                    b.tokens -= 1.0;
                    true
                } else {
                    false
                }
            }
            Limiter::Sliding => {
                while b.window.front().is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1)) {
                    b.window.pop_front();
                }
                let fits = b.window.len() < most;
                if fits {
                    b.window.push_back(now);
                }
                fits
            }
            Limiter::Calendar => {
                let second = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or_default();
                if b.second.0 != second {
                    b.second = (second, 0);
                }
                let fits = b.second.1 < most;
                if fits {
                    b.second.1 += 1;
                }
                fits
            }
        }
    }

    fn latency(&self) -> Duration {
        let jitter = self.limits.jitter.as_micros() as u64;
        if jitter == 0 {
            return self.limits.latency;
        }
        let offset = self.rng.lock().unwrap().below(2 * jitter + 1);
        (self.limits.latency + Duration::from_micros(offset)).saturating_sub(self.limits.jitter)
    }
}

fn response(status: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// What the SendEmail request names: the recipient and the claim tag.
fn addressed(body: &[u8]) -> (String, Option<String>) {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let recipient = json["Destination"]["ToAddresses"][0].as_str().unwrap_or_default().to_string();
    let claim = json["EmailTags"].as_array().and_then(|tags| {
        tags.iter()
            .find(|t| t["Name"] == shared::notify::mailer::tags::CLAIM)
            .and_then(|t| t["Value"].as_str().map(str::to_string))
    });
    (recipient, claim)
}

/// The identities of a SendEmail request that fail the account's check.
fn unverified(identities: &Identities, body: &[u8]) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let from = json["FromEmailAddress"].as_str().unwrap_or_default();
    let to: Vec<String> = json["Destination"]["ToAddresses"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    identities.failing(from, &to)
}

async fn serve(state: Arc<State>, mut client: TcpStream) {
    while let Some(request) = crate::http::read_message(&mut client).await {
        let end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(request.len());
        let line = String::from_utf8_lossy(&request[..end]).lines().next().unwrap_or_default().to_string();
        let body = &request[(end + 4).min(request.len())..];
        // Half the round trip before SES sees the request, half after.
        let latency = state.latency();
        tokio::time::sleep(latency / 2).await;
        let identities = state.identities.lock().unwrap().clone();
        let sandbox = identities.as_ref().is_some_and(|ids| ids.sandbox);
        let answer = if line.starts_with("GET /v2/email/account ") {
            let sent = state.log.lock().unwrap().accepted.len();
            let body = serde_json::json!({
                "SendQuota": {
                    "Max24HourSend": if sandbox { SANDBOX_DAILY_QUOTA as f64 } else { 1.0e7 },
                    "MaxSendRate": state.limits.reported.unwrap_or(state.limits.rate),
                    "SentLast24Hours": sent,
                },
                "SendingEnabled": true,
                "ProductionAccessEnabled": !sandbox,
                "EnforcementStatus": "HEALTHY",
            });
            response("200 OK", "", &body.to_string())
        } else if let Some(identity) = line.strip_prefix("GET /v2/email/identities/") {
            let identity = identity.split(' ').next().unwrap_or_default().replace("%40", "@");
            // Without identities to check, every From is sent from: each one
            // is answered verified, as consistent with that.
            let every = Identities { verified: vec![identity.clone()], ..Default::default() };
            match identities.as_ref().unwrap_or(&every).describe(&identity) {
                Some(body) => response("200 OK", "", &body.to_string()),
                None => response(
                    "404 Not Found",
                    "x-amzn-errortype: NotFoundException\r\n",
                    &serde_json::json!({ "message": format!("Email identity {identity} does not exist.") }).to_string(),
                ),
            }
        } else if line.starts_with("POST /v2/email/outbound-emails ") {
            let arrived = state.started.elapsed();
            let sent = {
                let mut log = state.log.lock().unwrap();
                log.send_calls += 1;
                log.accepted.len()
            };
            if let Some(failing) = identities.as_ref().map(|ids| unverified(ids, body)).filter(|f| !f.is_empty()) {
                // SES's words and status (a refusal sent nothing, counts for nothing).
                let message = format!(
                    "Email address is not verified. The following identities failed the check in region US-EAST-1: {}",
                    failing.join(", ")
                );
                response(
                    "400 Bad Request",
                    "x-amzn-errortype: MessageRejected\r\n",
                    &serde_json::json!({ "message": message }).to_string(),
                )
            } else if sandbox && sent >= SANDBOX_DAILY_QUOTA {
                // SES's words for the daily quota (docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas-errors.html).
                state.log.lock().unwrap().throttled.push(arrived);
                response(
                    "400 Bad Request",
                    "x-amzn-errortype: ThrottlingException\r\n",
                    r#"{"message":"Daily message quota exceeded."}"#,
                )
            } else if state.admit() {
                let (recipient, claim) = addressed(body);
                let accepted = Accepted { at: arrived, recipient, claim };
                state.log.lock().unwrap().accepted.push(accepted);
                let message_id = match &state.limits.upstream {
                    Some(upstream) => upstream_message_id(upstream, &request).await,
                    None => Some(format!("standin-{}", uuid::Uuid::now_v7())),
                };
                match message_id {
                    Some(id) => response("200 OK", "", &serde_json::json!({ "MessageId": id }).to_string()),
                    None => response("500 Internal Server Error", "x-amzn-errortype: InternalFailure\r\n", "{}"),
                }
            } else {
                state.log.lock().unwrap().throttled.push(arrived);
                response(
                    "429 Too Many Requests",
                    "x-amzn-errortype: TooManyRequestsException\r\n",
                    r#"{"message":"Maximum sending rate exceeded."}"#,
                )
            }
        } else {
            match &state.limits.upstream {
                Some(upstream) => match forward(upstream, &request).await {
                    Some(answer) => answer,
                    None => return,
                },
                None => response("404 Not Found", "x-amzn-errortype: NotFoundException\r\n", "{}"),
            }
        };
        tokio::time::sleep(latency - latency / 2).await;
        if client.write_all(&answer).await.is_err() {
            return;
        }
    }
}

/// Sends the request to moto on a connection of its own and returns the
/// whole answer.
async fn forward(upstream: &str, request: &[u8]) -> Option<Vec<u8>> {
    let host = upstream.trim_start_matches("http://").trim_end_matches('/');
    let mut up = TcpStream::connect(host).await.ok()?;
    up.write_all(request).await.ok()?;
    tokio::time::timeout(Duration::from_secs(10), crate::http::read_message(&mut up)).await.ok().flatten()
}

/// moto's message id for the forwarded SendEmail.
async fn upstream_message_id(upstream: &str, request: &[u8]) -> Option<String> {
    let answer = forward(upstream, request).await?;
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let json: serde_json::Value = serde_json::from_slice(&answer[end + 4..]).ok()?;
    json["MessageId"].as_str().map(str::to_string)
}
