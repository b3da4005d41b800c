//! The booking API: API Gateway HTTP API (payload v2) requests in,
//! JSON responses out.
//!
//! | route | what it does |
//! |---|---|
//! | `POST /bookings` | create (honours `Idempotency-Key`) |
//! | `GET /bookings/{id}` | read (organizer or attendee; anyone else 404) |
//! | `PATCH /bookings/{id}` | change any field or the attendees, with the version last seen |
//! | `POST /bookings/{id}/cancel` | cancel (idempotent) |
//!
//! Every error is `application/problem+json`. Bad input is a 4xx that names
//! the field, and is refused before the database is touched.

mod body;
pub mod config;
pub mod identity;
pub mod json;
pub mod problem;

use deadpool_postgres::Pool;
use lambda_http::http::{header, Method, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::booking::domain::{Booking, Caller};
use crate::booking::idempotency::IdempotencyRequest;
use crate::booking::service::{BookingService, CreateOutcome};
use crate::booking::BookingError;
use crate::db::DbError;
use crate::fault::Faults;
use body::{parse_json, CreateBookingBody, UpdateBookingBody};
use config::ApiConfig;
use problem::Problem;

pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// One operation of the API and every status the function itself can
/// answer for it. `openapi.yaml` documents the same (plus what API Gateway
/// answers on its own); `tests/tests/suite/openapi.rs` keeps the two in step.
#[derive(Debug, Clone, Copy)]
pub struct Operation {
    pub id: &'static str,
    pub method: &'static str,
    pub path: &'static str,
    pub statuses: &'static [u16],
}

pub const OPERATIONS: [Operation; 4] = [
    Operation {
        id: "createBooking",
        method: "POST",
        path: "/bookings",
        statuses: &[201, 400, 401, 409, 413, 415, 422, 429, 500, 503],
    },
    Operation { id: "getBooking", method: "GET", path: "/bookings/{id}", statuses: &[200, 401, 404, 500, 503] },
    Operation {
        id: "updateBooking",
        method: "PATCH",
        path: "/bookings/{id}",
        statuses: &[200, 400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503],
    },
    Operation {
        id: "cancelBooking",
        method: "POST",
        path: "/bookings/{id}/cancel",
        // No 429 of its own: a cancel is never refused by a daily limit.
        statuses: &[200, 401, 403, 404, 500, 503],
    },
];

pub struct Api {
    bookings: BookingService,
    config: ApiConfig,
}

enum Route {
    Collection,
    Item(Uuid),
    Cancel(Uuid),
}

impl Api {
    pub fn new(pool: Pool, faults: Faults, config: ApiConfig) -> Self {
        Self { bookings: BookingService::new(pool, faults, config.limits), config }
    }

    /// Handles one request. Never fails: every error becomes a problem
    /// response, and only a server-side fault becomes a 5xx.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        use tracing::Instrument;
        let request_id = req.lambda_context_ref().map(|c| c.request_id.clone()).unwrap_or_default();
        let span = tracing::info_span!("request", %request_id, method = %req.method(), path = %req.uri().path());
        let resp = match self.route_request(&req).instrument(span.clone()).await {
            Ok(resp) => resp,
            Err(problem) => problem.into_response(),
        };
        span.in_scope(|| tracing::info!(status = resp.status().as_u16(), "handled"));
        resp
    }

    /// Routes one request to its handler.
    async fn route_request(&self, req: &Request) -> Result<Response<Body>, Problem> {
        let route = route(req.uri().path()).ok_or_else(|| {
            Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found", format!("no route for {}", req.uri().path()))
        })?;
        let allowed = match route {
            Route::Collection => "POST",
            Route::Item(_) => "GET, PATCH",
            Route::Cancel(_) => "POST",
        };
        let method = req.method();
        let known = match route {
            Route::Collection | Route::Cancel(_) => method == Method::POST,
            Route::Item(_) => method == Method::GET || method == Method::PATCH,
        };
        if !known {
            let mut resp = Problem::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "Method not allowed",
                format!("{method} is not allowed here; use {allowed}"),
            )
            .into_response();
            resp.headers_mut().insert(header::ALLOW, allowed.parse().expect("static header"));
            return Ok(resp);
        }
        let caller = identity::caller(req, &self.config)?;
        match route {
            Route::Collection => self.create(req, &caller).await,
            Route::Item(id) if method == Method::GET => {
                let booking = self.bookings.get(&caller, id).await.map_err(problem_for)?;
                Ok(json(StatusCode::OK, &booking))
            }
            Route::Item(id) => self.update(req, &caller, id).await,
            Route::Cancel(id) => {
                let changed = self.bookings.cancel(&caller, id).await.map_err(problem_for)?;
                Ok(json(StatusCode::OK, &changed.booking))
            }
        }
    }

    async fn create(&self, req: &Request, caller: &Caller) -> Result<Response<Body>, Problem> {
        let idem_key = idempotency_key(req)?;
        let (value, body): (_, CreateBookingBody) = parse_json(req, self.config.max_body_bytes)?;
        let new = body.into_new_booking(&self.config.start_window)?;
        let idem = idem_key.map(|key| IdempotencyRequest {
            key,
            request_hash: request_hash("POST /bookings", &value),
            ttl: self.config.idempotency_key_ttl,
        });
        match self.bookings.create(caller, new, idem).await.map_err(problem_for)? {
            CreateOutcome::Created(booking) => Ok(created(&booking)),
            CreateOutcome::Replayed(stored) => {
                let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::CREATED);
                let mut resp = json(status, &stored.body);
                if let Some(id) = stored.booking_id {
                    resp.headers_mut().insert(header::LOCATION, location(id).parse().expect("uuid path"));
                }
                resp.headers_mut().insert("idempotent-replayed", "true".parse().expect("static"));
                Ok(resp)
            }
        }
    }

    async fn update(&self, req: &Request, caller: &Caller, id: Uuid) -> Result<Response<Body>, Problem> {
        let (_, body): (_, UpdateBookingBody) = parse_json(req, self.config.max_body_bytes)?;
        let version = body.version;
        let changes = body.into_changes(&self.config.start_window)?;
        let changed = self.bookings.update(caller, id, &changes, version).await.map_err(problem_for)?;
        Ok(json(StatusCode::OK, &changed.booking))
    }
}

fn route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let id = |s: &str| Uuid::parse_str(s).ok();
    match segments.as_slice() {
        ["bookings"] => Some(Route::Collection),
        ["bookings", raw] => id(raw).map(Route::Item),
        ["bookings", raw, "cancel"] => id(raw).map(Route::Cancel),
        _ => None,
    }
}

fn idempotency_key(req: &Request) -> Result<Option<String>, Problem> {
    let Some(raw) = req.headers().get(IDEMPOTENCY_KEY_HEADER) else { return Ok(None) };
    let bad = || {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "invalid-idempotency-key",
            "Invalid Idempotency-Key",
            format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} visible ASCII characters"),
        )
    };
    let key = raw.to_str().map_err(|_| bad())?.trim();
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN || !key.chars().all(|c| c.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok(Some(key.to_string()))
}

/// Hash of the route and the body's canonical JSON (keys sorted, no
/// whitespace), so a replay that only reformats the body still matches.
fn request_hash(route: &str, body: &serde_json::Value) -> Vec<u8> {
    let mut hasher = Sha256::new();
    hasher.update(route.as_bytes());
    hasher.update(b"\n");
    hasher.update(serde_json::to_vec(body).expect("JSON value serialises"));
    hasher.finalize().to_vec()
}

fn location(id: Uuid) -> String {
    format!("/bookings/{id}")
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::Text(serde_json::to_string(value).expect("response serialises")))
        .expect("valid response")
}

fn created(booking: &Booking) -> Response<Body> {
    let mut resp = json(StatusCode::CREATED, booking);
    resp.headers_mut().insert(header::LOCATION, location(booking.id).parse().expect("uuid path"));
    resp
}

fn problem_for(err: BookingError) -> Problem {
    use BookingError::*;
    match err {
        NotFound => Problem::not_found(),
        NotOrganizer => Problem::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", err.to_string()),
        Overlap => Problem::new(StatusCode::CONFLICT, "overlap", "Overlapping booking", err.to_string()),
        VersionConflict { current, .. } => Problem {
            current_version: Some(current),
            ..Problem::new(
                StatusCode::CONFLICT,
                "version-conflict",
                "Version conflict",
                format!("{err}; reload and retry"),
            )
        },
        Cancelled => Problem::new(StatusCode::CONFLICT, "cancelled", "Booking cancelled", err.to_string()),
        LimitExceeded { retry_after, .. } => Problem {
            retry_after: Some(retry_after.as_secs().max(1)),
            ..Problem::new(StatusCode::TOO_MANY_REQUESTS, "limit-exceeded", "Limit exceeded", err.to_string())
        },
        IdempotencyKeyMismatch => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency-key-mismatch",
            "Idempotency-Key reused",
            err.to_string(),
        ),
        Db(DbError::Unavailable(_)) => {
            tracing::error!(error = %err, "database unavailable");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Service unavailable",
                "the database is unavailable; retry shortly",
            )
        }
        Db(ref e) if e.is_transient() => {
            tracing::warn!(error = %err, "transient database error");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Service unavailable",
                "a transient database error occurred; retry",
            )
        }
        Db(_) | Fault(_) => {
            tracing::error!(error = %err, "booking operation failed");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "the request could not be completed; nothing was saved",
            )
        }
    }
}
