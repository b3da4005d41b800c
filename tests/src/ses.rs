//! SES v2 in tests: the real `aws-sdk-sesv2` client against moto (started by
//! scripts/test.sh, endpoint in `SES_ENDPOINT_URL`), an independent parser of
//! what moto received, and a loopback proxy that injects faults (throttling,
//! hangs) in front of moto.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use shared::notify::mailer::ses::{SesConfig, SesMailer};
use shared::notify::render::invite::Sender;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

pub fn moto_endpoint() -> String {
    std::env::var("SES_ENDPOINT_URL")
        .expect("SES_ENDPOINT_URL is not set: run the tests with ./scripts/test.sh, which starts moto")
}

/// Creates a Secrets Manager secret (named `{prefix}-<uuid>`) in moto,
/// holding `value`; returns its ARN.
pub async fn create_secret(endpoint: &str, prefix: &str, value: &str) -> String {
    aws_sdk_secretsmanager::Client::new(&sdk_config_for(endpoint))
        .create_secret()
        .name(format!("{prefix}-{}", uuid::Uuid::now_v7().simple()))
        .secret_string(value)
        .send()
        .await
        .expect("moto creates the secret")
        .arn
        .unwrap()
}

fn sdk_config() -> aws_config::SdkConfig {
    sdk_config_with(None)
}

/// An SDK config with static test credentials whose every service goes to
/// `endpoint` (moto).
pub fn sdk_config_for(endpoint: &str) -> aws_config::SdkConfig {
    sdk_config_with(Some(endpoint))
}

fn sdk_config_with(endpoint: Option<&str>) -> aws_config::SdkConfig {
    let mut builder = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sesv2::config::SharedCredentialsProvider::new(
            aws_sdk_sesv2::config::Credentials::new("test", "test", None, None, "tests"),
        ));
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    builder.build()
}

/// A sender address unique to one test, so tests sharing moto can tell
/// their mail apart.
pub fn unique_sender() -> String {
    format!("bookings.{}@example.com", uuid::Uuid::now_v7().simple())
}

pub fn ses_config(endpoint: &str, from: &str) -> SesConfig {
    SesConfig {
        from: Sender::parse(&format!("Bookings <{from}>")).unwrap(),
        region: "us-east-1".into(),
        endpoint_url: Some(endpoint.to_string()),
        configuration_set: None,
        canary_to: None,
        max_send_rate: None,
        connect_timeout: Duration::from_millis(1000),
        read_timeout: Duration::from_millis(1500),
    }
}

pub fn ses_mailer(config: SesConfig) -> SesMailer {
    SesMailer::new(&sdk_config(), config)
}

/// Verifies `email` as a sending identity in moto (SES v2 CreateEmailIdentity).
pub async fn verify_sender(endpoint: &str, email: &str) {
    let conf = aws_sdk_sesv2::config::Builder::from(&sdk_config()).endpoint_url(endpoint).build();
    aws_sdk_sesv2::Client::from_conf(conf)
        .create_email_identity()
        .email_identity(email)
        .send()
        .await
        .expect("moto accepts CreateEmailIdentity");
}

/// Every message moto received from `sender`, parsed by Python's `email`
/// and `icalendar` packages (tests/tools/inspect_mail.py).
pub fn sent_mail(endpoint: &str, sender: &str) -> Vec<Value> {
    crate::inspect_mail(&[endpoint, sender])
}

/// What the fault proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// 429 TooManyRequestsException: refused before acceptance.
    Throttle,
    /// 500 InternalFailure, answered by the proxy: never reached SES.
    ServerError,
    /// Read the request, never answer, never forward: never reached SES.
    Hang,
    /// Forward it (SES accepts it), then close the connection unanswered.
    DropAfterForward,
    /// Forward it (SES accepts it), then hold the answer past any timeout.
    DelayAfterForward,
    /// Pass it to moto.
    Forward,
}

impl Fault {
    /// The request reached SES (moto), whatever the client saw.
    pub fn reaches_ses(self) -> bool {
        matches!(self, Fault::DropAfterForward | Fault::DelayAfterForward | Fault::Forward)
    }
}

/// Which fault each request gets: the scripted ones first, then (with a
/// mix) one drawn at random per request, else forwarded.
struct Plan {
    script: std::collections::VecDeque<Fault>,
    /// `(fault, chance in per mille)`.
    mix: Vec<(Fault, u32)>,
    rng: crate::Rng,
}

impl Plan {
    fn next(&mut self) -> Fault {
        if let Some(fault) = self.script.pop_front() {
            return fault;
        }
        let mut draw = self.rng.below(1000) as u32;
        for &(fault, chance) in &self.mix {
            if draw < chance {
                return fault;
            }
            draw -= chance;
        }
        Fault::Forward
    }
}

/// A loopback HTTP proxy in front of moto that answers requests with
/// scripted or random faults and forwards the rest. It records every
/// request body and the fault each got.
pub struct FaultProxy {
    pub endpoint: String,
    pub requests: Arc<Mutex<Vec<String>>>,
    /// The fault applied to each request, in arrival order.
    pub applied: Arc<Mutex<Vec<Fault>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An error answer of SES v2's REST-JSON protocol.
fn error_response(status: &str, error_type: &str, message: &str) -> String {
    let body = format!(r#"{{"message":"{message}"}}"#);
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nx-amzn-errortype: {error_type}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Sends the request upstream and returns the whole answer.
async fn forward(upstream: &str, request: &[u8]) -> Option<Vec<u8>> {
    let mut up = TcpStream::connect(upstream).await.ok()?;
    up.write_all(request).await.ok()?;
    tokio::time::timeout(Duration::from_secs(10), crate::http::read_message(&mut up)).await.ok().flatten()
}

impl FaultProxy {
    /// The first requests get `script`'s faults, in order; the rest are forwarded.
    pub async fn start(upstream: &str, script: Vec<Fault>) -> Self {
        Self::with_plan(upstream, Plan { script: script.into(), mix: Vec::new(), rng: crate::Rng::new(1) }).await
    }

    /// Each request gets a fault drawn from `mix` (`(fault, per mille)`),
    /// reproducibly from `seed`; the rest are forwarded.
    pub async fn start_random(upstream: &str, mix: &[(Fault, u32)], seed: u64) -> Self {
        Self::with_plan(upstream, Plan { script: Default::default(), mix: mix.to_vec(), rng: crate::Rng::new(seed) })
            .await
    }

    async fn with_plan(upstream: &str, plan: Plan) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let applied = Arc::new(Mutex::new(Vec::new()));
        let (recorded, faults) = (requests.clone(), applied.clone());
        let plan = Arc::new(Mutex::new(plan));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                let (recorded, faults, plan, upstream) =
                    (recorded.clone(), faults.clone(), plan.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Some(request) = crate::http::read_message(&mut client).await else { return };
                    let fault = {
                        let fault = plan.lock().unwrap().next();
                        recorded.lock().unwrap().push(String::from_utf8_lossy(&request).to_string());
                        faults.lock().unwrap().push(fault);
                        fault
                    };
                    match fault {
                        Fault::Throttle => {
                            let answer = error_response(
                                "429 Too Many Requests",
                                "TooManyRequestsException",
                                "Maximum sending rate exceeded.",
                            );
                            let _ = client.write_all(answer.as_bytes()).await;
                        }
                        Fault::ServerError => {
                            let answer =
                                error_response("500 Internal Server Error", "InternalFailure", "Internal failure.");
                            let _ = client.write_all(answer.as_bytes()).await;
                        }
                        Fault::Hang => tokio::time::sleep(Duration::from_secs(3600)).await,
                        Fault::DropAfterForward => {
                            let _ = forward(&upstream, &request).await;
                        }
                        Fault::DelayAfterForward => {
                            let _ = forward(&upstream, &request).await;
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        Fault::Forward => {
                            if let Some(response) = forward(&upstream, &request).await {
                                let _ = client.write_all(&response).await;
                            }
                        }
                    }
                    let _ = client.shutdown().await;
                });
            }
        });
        Self { endpoint, requests, applied, task }
    }

    pub fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

/// A loopback port with nothing listening on it.
pub fn closed_port_endpoint() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("http://127.0.0.1:{port}")
}
