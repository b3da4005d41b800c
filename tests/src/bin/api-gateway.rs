//! A test-only stand-in for API Gateway (HTTP API, payload v2) in front of
//! the booking API, for the fuzzer (scripts/fuzz.sh). It listens on a
//! loopback port, turns each HTTP request into the event API Gateway would
//! build (`outbox_tests::api::gateway_event`, the same the tests use), runs
//! the real handler (`shared::api::Api`, configured from the environment
//! like the Lambda), and writes its response back.
//!
//! The JWT authorizer is played by a fixed table of bearer tokens:
//! `Bearer fuzz-bob` and `Bearer fuzz-alice` carry those users' verified
//! claims; any other request reaches the function with no claims, and the
//! function answers 401 itself.
//!
//! usage: api-gateway 127.0.0.1:PORT   (env: DATABASE_URL, API settings)

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use outbox_tests::api::{gateway_event, Caller, ALICE, BOB};
use outbox_tests::http::read_message;
use serde_json::{json, Map, Value};
use shared::api::config::ApiConfig;
use shared::api::Api;
use shared::db::DbConfig;
use shared::fault::Faults;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const USERS: [(&str, Caller<'static>); 2] = [("fuzz-bob", BOB), ("fuzz-alice", ALICE)];

#[tokio::main]
async fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| {
        eprintln!("usage: api-gateway 127.0.0.1:PORT");
        std::process::exit(2)
    });
    let listen: std::net::SocketAddr = addr.parse().expect("a socket address");
    assert!(listen.ip().is_loopback(), "api-gateway listens on loopback only");
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let pool = DbConfig::from_url(&url, 8, Duration::from_secs(5)).unwrap().build_pool().unwrap();
    let config = ApiConfig::from_env().unwrap_or_else(|e| panic!("{e}"));
    let api = Arc::new(Api::new(pool, Faults::none(), config));
    let listener = TcpListener::bind(listen).await.expect("bind");
    eprintln!("api-gateway: listening on http://{listen}");
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let api = api.clone();
        tokio::spawn(async move { serve(&api, stream).await });
    }
}

/// One request per connection, answered and closed.
async fn serve(api: &Api, mut stream: TcpStream) {
    let Some(raw) = read_message(&mut stream).await else { return };
    let request = to_event(&raw).and_then(|event| match lambda_http::request::from_str(&event.to_string()) {
        Ok(req) => Some(req),
        Err(e) => {
            eprintln!("api-gateway: refused as API Gateway would ({e}): {event}");
            None
        }
    });
    let response = match request {
        Some(req) => {
            let resp = api.handle(req).await;
            let mut out = format!("HTTP/1.1 {}\r\n", resp.status()).into_bytes();
            for (name, value) in resp.headers() {
                out.extend_from_slice(format!("{name}: ").as_bytes());
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            let body: &[u8] = resp.body().as_ref();
            out.extend_from_slice(format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(body);
            out
        }
        // What API Gateway answers to a request it cannot parse.
        None => b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 26\r\nconnection: close\r\n\r\n{\"message\":\"Bad Request\"}\n".to_vec(),
    };
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

/// The API Gateway v2 event for one raw HTTP/1.1 request.
fn to_event(raw: &[u8]) -> Option<Value> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    // Header bytes that are not UTF-8 reach the function as replacement
    // characters (and its header checks refuse them).
    let head = String::from_utf8_lossy(&raw[..end]);
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, target) = (request_line.next()?, request_line.next()?);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Map::new();
    let mut claims = None;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "authorization" {
            let token = value.strip_prefix("Bearer ").unwrap_or("");
            claims = USERS.iter().find(|(t, _)| *t == token).map(|(_, user)| user.claims());
        }
        // API Gateway joins repeated headers with commas.
        let joined = match headers.get(&name).and_then(Value::as_str) {
            Some(previous) => format!("{previous},{value}"),
            None => value.to_string(),
        };
        headers.insert(name, json!(joined));
    }
    let mut event = gateway_event(method, path, query, headers, None, claims);
    if !body.is_empty() {
        match std::str::from_utf8(body) {
            Ok(text) => event["body"] = json!(text),
            Err(_) => {
                event["body"] = json!(base64::engine::general_purpose::STANDARD.encode(body));
                event["isBase64Encoded"] = json!(true);
            }
        }
    }
    Some(event)
}
