//! Drives `shared::api::Api` through the same path Lambda uses: an API
//! Gateway HTTP API (v2) event as JSON, deserialised by lambda_http.

use lambda_http::http::HeaderMap;
use serde_json::{json, Value};
use shared::api::config::{ApiConfig, AuthMode};
use shared::api::Api;
use shared::booking::domain::StartWindow;
use shared::fault::Faults;

use crate::TestDb;

pub struct TestApi {
    pub api: Api,
}

/// The JWT claims API Gateway's authorizer would pass (with
/// `email_verified: "true"`; see [`TestApi::send_claims`] for any others).
#[derive(Clone, Copy)]
pub struct Caller<'a> {
    pub email: &'a str,
    pub name: &'a str,
    pub sub: &'a str,
}

impl Caller<'_> {
    pub fn claims(&self) -> Value {
        json!({"sub": self.sub, "email": self.email, "name": self.name, "email_verified": "true"})
    }
}

pub const BOB: Caller<'static> = Caller { email: "bob@example.com", name: "Bob Organizer", sub: "sub-bob" };
pub const ALICE: Caller<'static> = Caller { email: "alice@example.com", name: "Alice Attendee", sub: "sub-alice" };
pub const EVE: Caller<'static> = Caller { email: "eve@example.com", name: "Eve Stranger", sub: "sub-eve" };

pub struct TestResponse {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
}

impl TestResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The production configuration, except that a booking may start up to a
/// century from now either way: the tests use fixed dates (December 2026),
/// which must stay bookable whenever the suite runs. The start-window test
/// sets its own window.
pub fn test_config() -> ApiConfig {
    let century = chrono::Duration::days(36_500);
    ApiConfig { start_window: StartWindow { max_past: century, max_future: century }, ..ApiConfig::default() }
}

impl TestApi {
    pub fn new(db: &TestDb) -> Self {
        Self::with(db, Faults::none(), test_config())
    }

    pub fn with(db: &TestDb, faults: Faults, config: ApiConfig) -> Self {
        Self { api: Api::new(db.pool.clone(), faults, config) }
    }

    pub fn dev_mode(db: &TestDb) -> Self {
        Self::with(db, Faults::none(), ApiConfig { auth_mode: AuthMode::InsecureDevHeaders, ..test_config() })
    }

    /// Sends a request with a JSON body (or raw text when `body` is a string).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        caller: Option<Caller<'_>>,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> TestResponse {
        self.send_claims(method, path, caller.map(|c| c.claims()), headers, body).await
    }

    /// As [`TestApi::send`], with the authorizer's claims as given.
    pub async fn send_claims(
        &self,
        method: &str,
        path: &str,
        claims: Option<Value>,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> TestResponse {
        let mut hdrs = serde_json::Map::new();
        hdrs.insert("content-type".into(), json!("application/json"));
        for (k, v) in headers {
            hdrs.insert(k.to_ascii_lowercase(), json!(v));
        }
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let event = gateway_event(method, path, query, hdrs, body, claims);
        let req = lambda_http::request::from_str(&event.to_string()).expect("valid API Gateway v2 event");
        let resp = self.api.handle(req).await;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes: &[u8] = resp.body().as_ref();
        let json = headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.contains("json"));
        let body = match (bytes.is_empty(), json) {
            (true, _) => Value::Null,
            (false, true) => serde_json::from_slice(bytes).expect("JSON response body"),
            // A problem type's page.
            (false, false) => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        };
        if status >= 400 {
            assert_eq!(
                headers.get("content-type").and_then(|v| v.to_str().ok()),
                Some("application/problem+json"),
                "errors are problem+json: {body}"
            );
        }
        TestResponse { status, headers, body }
    }

    /// Creates Bob's booking starting at `hour` and returns it (201 or panic).
    pub async fn create_as_bob(&self, hour: u32) -> Value {
        let resp = self.post("/bookings", BOB, &booking_body(hour)).await;
        assert_eq!(resp.status, 201, "{}", resp.body);
        resp.body
    }

    pub async fn post(&self, path: &str, caller: Caller<'_>, body: &Value) -> TestResponse {
        self.send("POST", path, Some(caller), &[], Some(&body.to_string())).await
    }

    pub async fn get(&self, path: &str, caller: Caller<'_>) -> TestResponse {
        self.send("GET", path, Some(caller), &[], None).await
    }
}

/// Where the test events say the API was reached (`domainName`, the
/// default stage): the base of `Location` and of problem types.
pub const API_BASE: &str = "https://api.example.test";

/// The absolute `type` of the problem `slug`, as the API answers it here.
pub fn problem_type(slug: &str) -> String {
    format!("{API_BASE}/problems/{slug}")
}

/// `rawQueryString` decoded as API Gateway passes it in
/// `queryStringParameters`: each name once, repeated values joined by commas.
fn query_parameters(raw_query: &str) -> Value {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let hex = b.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
            match (b[i], hex) {
                (b'+', _) => out.push(b' '),
                (b'%', Some(byte)) => {
                    out.push(byte);
                    i += 2;
                }
                (c, _) => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    let mut params = serde_json::Map::new();
    for pair in raw_query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (name, value) = (decode(name), decode(value));
        match params.get_mut(&name) {
            Some(Value::String(joined)) => {
                joined.push(',');
                joined.push_str(&value);
            }
            _ => {
                params.insert(name, Value::String(value));
            }
        }
    }
    Value::Object(params)
}

/// The event API Gateway (HTTP API, payload v2) hands the function for one
/// request: the authorizer's JWT claims, when there are any, in
/// `requestContext.authorizer.jwt`.
pub fn gateway_event(
    method: &str,
    path: &str,
    raw_query: &str,
    headers: serde_json::Map<String, Value>,
    body: Option<&str>,
    claims: Option<Value>,
) -> Value {
    let authorizer = claims.map(|claims| json!({"jwt": {"claims": claims, "scopes": null}}));
    let mut event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": raw_query,
        "queryStringParameters": query_parameters(raw_query),
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api",
            "domainName": "api.example.test",
            "domainPrefix": "api",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "test"},
            "requestId": uuid::Uuid::new_v4().to_string(),
            "routeKey": "$default",
            "stage": "$default",
            "time": "30/Nov/2026:12:00:00 +0000",
            "timeEpoch": 1_796_040_000_000u64
        },
        "body": body,
        "isBase64Encoded": false
    });
    if let Some(authorizer) = authorizer {
        event["requestContext"]["authorizer"] = authorizer;
    }
    event
}

/// A valid booking body: tomorrow-ish, 30 minutes, Alice invited.
pub fn booking_body(start_hour: u32) -> Value {
    json!({
        "title": "Design review",
        "start": format!("2026-12-01T{start_hour:02}:00:00Z"),
        "end": format!("2026-12-01T{start_hour:02}:30:00Z"),
        "timezone": "Europe/Paris",
        "attendees": [{"email": "alice@example.com", "name": "Alice Attendee"}],
        "description": "Agenda:\n- outbox",
        "location": "Room 4"
    })
}
