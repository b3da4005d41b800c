//! SES v2 in tests: the real `aws-sdk-sesv2` client against moto (started by
//! scripts/test.sh, endpoint in `SES_ENDPOINT_URL`), an independent parser of
//! what moto received, and a loopback proxy that injects faults (throttling,
//! hangs) in front of moto.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use shared::notify::invite::Sender;
use shared::notify::mailer::ses::{SesConfig, SesMailer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub fn moto_endpoint() -> String {
    std::env::var("SES_ENDPOINT_URL")
        .expect("SES_ENDPOINT_URL is not set: run the tests with ./scripts/test.sh, which starts moto")
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
        max_send_rate: NonZeroU32::new(1000).unwrap(),
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
    let python = std::env::var("OUTBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/inspect_mail.py");
    let out = std::process::Command::new(&python).arg(script).arg(endpoint).arg(sender).output().expect("run python");
    assert!(out.status.success(), "inspect_mail.py failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// What the fault proxy does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 429 TooManyRequestsException: refused before acceptance.
    Throttle,
    /// Read the request, never answer.
    Hang,
    /// Pass it to moto.
    Forward,
}

/// A loopback HTTP proxy in front of moto that answers the first requests
/// with scripted faults and forwards the rest. It records every request body.
pub struct FaultProxy {
    pub endpoint: String,
    pub requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap_or(0)))
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return Some(buf);
            }
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

impl FaultProxy {
    pub async fn start(upstream: &str, script: Vec<Fault>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").trim_end_matches('/').to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                let (recorded, script, upstream) = (recorded.clone(), script.clone(), upstream.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut client).await else { return };
                    let text = String::from_utf8_lossy(&request).to_string();
                    recorded.lock().unwrap().push(text);
                    let fault = script.lock().unwrap().pop_front().unwrap_or(Fault::Forward);
                    match fault {
                        Fault::Throttle => {
                            let body = r#"{"message":"Maximum sending rate exceeded."}"#;
                            let resp = format!(
                                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
                                 x-amzn-errortype: TooManyRequestsException\r\ncontent-length: {}\r\n\
                                 connection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = client.write_all(resp.as_bytes()).await;
                        }
                        Fault::Hang => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        Fault::Forward => {
                            let Ok(mut up) = TcpStream::connect(&upstream).await else { return };
                            let _ = up.write_all(&request).await;
                            let mut response = Vec::new();
                            let _ = tokio::time::timeout(Duration::from_secs(10), up.read_to_end(&mut response)).await;
                            let _ = client.write_all(&response).await;
                        }
                    }
                    let _ = client.shutdown().await;
                });
            }
        });
        Self { endpoint, requests, task }
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
