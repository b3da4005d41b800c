//! RFC 9457 `application/problem+json` error bodies, and the catalog of
//! their types.
//!
//! A problem's `type` is an absolute URI: `API_PROBLEM_TYPE_BASE` followed
//! by the type's slug when the operator hosts the documentation, else this
//! API's own `/problems/<slug>`, which answers with the type's page
//! ([`page`]), without a token.

use lambda_http::http::{header, StatusCode};
use lambda_http::{Body, Response};
use serde::Serialize;

/// One kind of problem: its slug (the last segment of its `type`), status,
/// title, and what it means for a client.
#[derive(Debug, PartialEq, Eq)]
pub struct ProblemType {
    pub slug: &'static str,
    pub status: StatusCode,
    pub title: &'static str,
    pub doc: &'static str,
}

macro_rules! problem_types {
    ($( $name:ident = $slug:literal, $status:ident, $title:literal, $doc:literal; )+) => {
        $( pub const $name: ProblemType =
            ProblemType { slug: $slug, status: StatusCode::$status, title: $title, doc: $doc }; )+
        /// Every problem type the API answers with.
        pub const PROBLEM_TYPES: &[&ProblemType] = &[$(&$name),+];
    };
}

problem_types! {
    MALFORMED_JSON = "malformed-json", BAD_REQUEST, "Malformed JSON",
        "The body is not valid JSON. Fix the syntax and send it again.";
    DUPLICATE_KEY = "duplicate-key", BAD_REQUEST, "Duplicate JSON key",
        "A key appears twice in one JSON object (invalid_params names its path). Send each key once.";
    INVALID_IDEMPOTENCY_KEY = "invalid-idempotency-key", BAD_REQUEST, "Invalid Idempotency-Key",
        "The Idempotency-Key header must be 1 to 255 visible ASCII characters.";
    INVALID_IF_MATCH = "invalid-if-match", BAD_REQUEST, "Invalid If-Match",
        "If-Match must be one entity tag this API issued: the booking's ETag, like \"3\".";
    INVALID_CURSOR = "invalid-cursor", BAD_REQUEST, "Invalid cursor",
        "The cursor was not issued by this API for this query (altered, or used with other filters). Start the listing again without one.";
    UNAUTHORIZED = "unauthorized", UNAUTHORIZED, "Not authenticated",
        "The token lacks a subject or a verified email, or its name is not a valid display name.";
    FORBIDDEN = "forbidden", FORBIDDEN, "Forbidden",
        "Only the organizer may change or cancel a booking.";
    ORGANIZER_DOMAIN = "organizer-domain", FORBIDDEN, "Not an organizer here",
        "This stack lets only addresses at its ORGANIZER_DOMAINS create and change bookings, and the caller's is not one; detail names them. Cancelling a booking of one's own is always allowed.";
    ORGANIZER_PAUSED = "organizer-paused", FORBIDDEN, "Sending paused",
        "Complaints about this account's mail paused its sending: its new bookings and changes are refused, its cancellations still go. detail says why; the stack's operator can lift it.";
    NOT_FOUND = "not-found", NOT_FOUND, "Not found",
        "No such booking, or not one the caller may see: a stranger cannot learn that a booking exists.";
    METHOD_NOT_ALLOWED = "method-not-allowed", METHOD_NOT_ALLOWED, "Method not allowed",
        "The route exists, but not with this method; the Allow header lists those it takes.";
    OVERLAP = "overlap", CONFLICT, "Overlapping booking",
        "The organizer already has a confirmed booking that overlaps this time range.";
    VERSION_CONFLICT = "version-conflict", CONFLICT, "Version conflict",
        "The booking changed since the version named in the body; current_version says which it is now. Read it again and retry.";
    CANCELLED = "cancelled", CONFLICT, "Booking cancelled",
        "The booking is cancelled and can no longer be changed.";
    PRECONDITION_FAILED = "precondition-failed", PRECONDITION_FAILED, "Precondition failed",
        "The If-Match header names a version the booking no longer has (current_version says which it is). Read it again and retry.";
    PAYLOAD_TOO_LARGE = "payload-too-large", PAYLOAD_TOO_LARGE, "Request body too large",
        "The body is larger than API_MAX_BODY_BYTES (64 KiB by default).";
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type", UNSUPPORTED_MEDIA_TYPE, "Unsupported media type",
        "Send Content-Type: application/json.";
    VALIDATION = "validation", UNPROCESSABLE_ENTITY, "The request is invalid",
        "One or more fields are missing, unknown, of the wrong type or invalid; invalid_params names each with why.";
    IDEMPOTENCY_KEY_MISMATCH = "idempotency-key-mismatch", UNPROCESSABLE_ENTITY, "Idempotency-Key reused",
        "This Idempotency-Key was used with a different body. Use a fresh key for a different request.";
    LIMIT_EXCEEDED = "limit-exceeded", TOO_MANY_REQUESTS, "Limit exceeded",
        "A daily limit was reached; Retry-After gives the seconds until it resets (UTC midnight).";
    INTERNAL = "internal", INTERNAL_SERVER_ERROR, "Internal error",
        "The request could not be completed, and nothing was saved.";
    UNAVAILABLE = "unavailable", SERVICE_UNAVAILABLE, "Service unavailable",
        "The database is unavailable or a transient error occurred; retry after Retry-After seconds.";
}

/// The problem type named `slug`.
pub fn problem_type(slug: &str) -> Option<&'static ProblemType> {
    PROBLEM_TYPES.iter().copied().find(|t| t.slug == slug)
}

/// The page a problem type's URI answers with (`GET /problems/<slug>`).
pub fn page(t: &ProblemType) -> Response<Body> {
    use html_escape::encode_text as esc;
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head>\
         <body><h1>{title}</h1><p>HTTP {status}</p><p>{doc}</p></body></html>\n",
        title = esc(t.title),
        status = t.status.as_u16(),
        doc = esc(t.doc)
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "public, max-age=86400")
        .body(Body::Text(html))
        .expect("valid response")
}

/// One invalid field: its JSON path (`attendees[2].email`) and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InvalidParam {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct Problem {
    /// The type's slug; [`Problem::into_response`] makes it an absolute URI.
    pub slug: &'static str,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    pub invalid_params: Vec<InvalidParam>,
    pub current_version: Option<i32>,
    /// Seconds for the `Retry-After` header (429; 503 defaults to 1).
    pub retry_after: Option<u32>,
    /// The `Allow` header (405).
    pub allow: Option<&'static str>,
}

/// A problem's body (RFC 9457), its `type` absolute.
#[derive(Serialize)]
struct Wire<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    invalid_params: &'a [InvalidParam],
    #[serde(skip_serializing_if = "Option::is_none")]
    current_version: Option<i32>,
}

impl Problem {
    pub fn new(t: &'static ProblemType, detail: impl Into<String>) -> Self {
        Self {
            slug: t.slug,
            title: t.title,
            status: t.status.as_u16(),
            detail: detail.into(),
            invalid_params: Vec::new(),
            current_version: None,
            retry_after: None,
            allow: None,
        }
    }

    /// 422 naming every invalid field.
    pub fn invalid(params: Vec<InvalidParam>) -> Self {
        let detail = params.iter().map(|p| format!("{}: {}", p.name, p.reason)).collect::<Vec<_>>().join("; ");
        Self { invalid_params: params, ..Self::new(&VALIDATION, detail) }
    }

    /// 422 for one field.
    pub fn field(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::invalid(vec![InvalidParam { name: name.into(), reason: reason.into() }])
    }

    pub fn not_found() -> Self {
        Self::new(&NOT_FOUND, "no such booking")
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The response, its `type` the slug under `types` (a base URI ending
    /// in `/`).
    pub fn into_response(self, types: &str) -> Response<Body> {
        let body = serde_json::to_string(&Wire {
            kind: format!("{types}{}", self.slug),
            title: self.title,
            status: self.status,
            detail: &self.detail,
            invalid_params: &self.invalid_params,
            current_version: self.current_version,
        })
        .expect("problem serialises");
        let mut builder =
            Response::builder().status(self.status()).header(header::CONTENT_TYPE, "application/problem+json");
        let retry_after = match self.retry_after {
            Some(secs) => Some(secs),
            None if self.status == StatusCode::SERVICE_UNAVAILABLE.as_u16() => Some(1),
            None => None,
        };
        if let Some(secs) = retry_after {
            builder = builder.header(header::RETRY_AFTER, secs.to_string());
        }
        if let Some(allow) = self.allow {
            builder = builder.header(header::ALLOW, allow);
        }
        builder.body(Body::Text(body)).expect("valid response")
    }
}
