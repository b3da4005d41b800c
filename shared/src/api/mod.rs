//! The booking API: API Gateway HTTP API (payload v2) requests in,
//! JSON responses out.
//!
//! | route | what it does |
//! |---|---|
//! | `GET /bookings` | the caller's bookings, as organizer or attendee, a page at a time |
//! | `POST /bookings` | create (honours `Idempotency-Key`) |
//! | `GET /bookings/{id}` | read (organizer or attendee; anyone else 404), with its `ETag`; the organizer also sees where each notification stands |
//! | `GET /bookings/{id}/notifications` | where each notification stands, per recipient (an attendee sees their own) |
//! | `PATCH /bookings/{id}` | change any field or the attendees, with the version last seen (`If-Match` or `version`) |
//! | `POST /bookings/{id}/cancel` | cancel (idempotent; `If-Match` optional) |
//! | `GET /problems/{slug}` | what a problem type means (no token needed) |
//!
//! Every error is `application/problem+json` whose `type` is an absolute
//! URI. Bad input is a 4xx that names every invalid field, and is refused
//! before the database is touched.

mod body;
mod bookings;
pub mod config;
mod fields;
pub mod identity;
pub mod json;
mod list;
pub mod problem;

use deadpool_postgres::Pool;
use lambda_http::http::{header, Method, StatusCode};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use uuid::Uuid;

use crate::booking::service::BookingService;
use crate::fault::Faults;
use crate::telemetry::trace::{self, TraceContext};
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

pub const OPERATIONS: [Operation; 7] = [
    Operation { id: "listBookings", method: "GET", path: "/bookings", statuses: &[200, 400, 401, 422, 500, 503] },
    Operation {
        id: "createBooking",
        method: "POST",
        path: "/bookings",
        statuses: &[201, 400, 401, 403, 409, 413, 415, 422, 429, 500, 503],
    },
    Operation { id: "getBooking", method: "GET", path: "/bookings/{id}", statuses: &[200, 401, 404, 500, 503] },
    Operation {
        id: "updateBooking",
        method: "PATCH",
        path: "/bookings/{id}",
        statuses: &[200, 400, 401, 403, 404, 409, 412, 413, 415, 422, 429, 500, 503],
    },
    Operation {
        id: "cancelBooking",
        method: "POST",
        path: "/bookings/{id}/cancel",
        // No 429 of its own: a cancel is never refused by a daily limit.
        statuses: &[200, 400, 401, 403, 404, 412, 500, 503],
    },
    Operation {
        id: "listNotifications",
        method: "GET",
        path: "/bookings/{id}/notifications",
        statuses: &[200, 401, 404, 500, 503],
    },
    Operation { id: "getProblemType", method: "GET", path: "/problems/{slug}", statuses: &[200, 404] },
];

pub struct Api {
    pool: Pool,
    bookings: BookingService,
    config: ApiConfig,
    cursor_key: list::CursorKey,
}

/// Where a request goes, and the methods each place takes.
enum Route {
    Collection,
    Item(Uuid),
    Cancel(Uuid),
    Notifications(Uuid),
    ProblemType(String),
}

impl Route {
    fn of(path: &str) -> Option<Route> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let id = |s: &str| Uuid::parse_str(s).ok();
        match segments.as_slice() {
            ["bookings"] => Some(Route::Collection),
            ["bookings", raw] => id(raw).map(Route::Item),
            ["bookings", raw, "cancel"] => id(raw).map(Route::Cancel),
            ["bookings", raw, "notifications"] => id(raw).map(Route::Notifications),
            ["problems", slug] => Some(Route::ProblemType(slug.to_string())),
            _ => None,
        }
    }

    /// The methods the place takes, as the `Allow` header lists them.
    fn allowed(&self) -> &'static str {
        match self {
            Route::Collection => "GET, POST",
            Route::Cancel(_) => "POST",
            Route::Item(_) => "GET, PATCH",
            Route::Notifications(_) | Route::ProblemType(_) => "GET",
        }
    }
}

/// Where the caller reached this API: `https://` and the request's domain,
/// then its stage unless it is the default one. Empty when the request
/// names no domain (links are then relative).
fn base_url(req: &Request) -> String {
    let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref() else { return String::new() };
    let Some(domain) = ctx.domain_name.as_deref().filter(|d| !d.is_empty()) else { return String::new() };
    match ctx.stage.as_deref() {
        Some(stage) if !stage.is_empty() && stage != "$default" => format!("https://{domain}/{stage}"),
        _ => format!("https://{domain}"),
    }
}

impl Api {
    pub fn new(pool: Pool, faults: Faults, config: ApiConfig) -> Self {
        let bookings = BookingService::new(pool.clone(), faults, config.limits)
            .with_reminder_scale(config.reminder_scale)
            .with_default_language(config.default_language);
        Self { pool, bookings, config, cursor_key: list::CursorKey::default() }
    }

    /// Handles one request. Never fails: every error becomes a problem
    /// response, and only a server-side fault becomes a 5xx.
    pub async fn handle(&self, req: Request) -> Response<Body> {
        use tracing::Instrument;
        let request_id = req.lambda_context_ref().map(|c| c.request_id.clone()).unwrap_or_default();
        // Lambda's X-Ray trace, else a new one: the events this request
        // writes keep it (telemetry::trace). The caller's own trace is a
        // link, never adopted: no caller files their mail under another's.
        let trace = TraceContext::of_request(req.lambda_context_ref().and_then(|c| c.xray_trace_id.as_deref()));
        let caller_trace = req
            .headers()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(trace::trace_id_of)
            .unwrap_or_else(|| "-".to_string());
        let span = tracing::info_span!(
            "request",
            %request_id,
            trace_id = trace.trace_id(),
            link_trace_id = %caller_trace,
            method = %req.method(),
            path = %req.uri().path()
        );
        let base = base_url(&req);
        let routed = trace::scope(trace, self.route_request(&req, &base));
        let resp = match routed.instrument(span.clone()).await {
            Ok(resp) => resp,
            Err(problem) => {
                let types = match &self.config.problem_type_base {
                    Some(types) => types.clone(),
                    None => format!("{base}/problems/"),
                };
                problem.into_response(&types)
            }
        };
        span.in_scope(|| tracing::info!(status = resp.status().as_u16(), "handled"));
        resp
    }

    /// Routes one request to its handler.
    async fn route_request(&self, req: &Request, base: &str) -> Result<Response<Body>, Problem> {
        let route = Route::of(req.uri().path())
            .ok_or_else(|| Problem::new(&problem::NOT_FOUND, format!("no route for {}", req.uri().path())))?;
        let method = req.method();
        let allowed = route.allowed();
        if !allowed.split(", ").any(|m| m == method.as_str()) {
            return Err(Problem {
                allow: Some(allowed),
                ..Problem::new(&problem::METHOD_NOT_ALLOWED, format!("{method} is not allowed here; use {allowed}"))
            });
        }
        // Problem types are documentation: anyone may read them.
        if let Route::ProblemType(slug) = &route {
            return match problem::problem_type(slug) {
                Some(t) => Ok(problem::page(t)),
                None => Err(Problem::new(&problem::NOT_FOUND, format!("no problem type {slug:?}"))),
            };
        }
        let caller = identity::caller(req, &self.config)?;
        let at =
            bookings::At { base, pool: &self.pool, config: &self.config, bookings: &self.bookings, caller: &caller };
        match route {
            Route::Collection if method == Method::GET => {
                list::list(req, &caller, &self.bookings, &self.pool, &self.cursor_key).await
            }
            Route::Collection => at.create(req).await,
            Route::Item(id) if method == Method::GET => at.get(id).await,
            Route::Item(id) => at.update(req, id).await,
            Route::Cancel(id) => at.cancel(req, id).await,
            Route::Notifications(id) => at.notifications(id).await,
            Route::ProblemType(_) => unreachable!("answered above"),
        }
    }
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::Text(serde_json::to_string(value).expect("response serialises")))
        .expect("valid response")
}
