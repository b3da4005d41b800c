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
        let event = gateway_event(method, path, "", hdrs, body, claims);
        let req = lambda_http::request::from_str(&event.to_string()).expect("valid API Gateway v2 event");
        let resp = self.api.handle(req).await;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes: &[u8] = resp.body().as_ref();
        let body =
            if bytes.is_empty() { Value::Null } else { serde_json::from_slice(bytes).expect("JSON response body") };
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
