//! The booking routes: create, read, update, cancel, each answered for one
//! authenticated caller.
//!
//! Versions in HTTP terms: a booking's `ETag` is its version (`"3"`); an
//! update or a cancel with `If-Match` goes ahead only on that version, else
//! 412. An update may name the version in its body instead (`version`,
//! then 409 on a mismatch), as before; with both, they must agree.

use deadpool_postgres::Pool;
use lambda_http::http::{header, HeaderValue, StatusCode};
use lambda_http::{Body, Request, Response};
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::config::ApiConfig;
use super::problem::{self, Problem};
use super::{body, json, IDEMPOTENCY_KEY_HEADER, MAX_IDEMPOTENCY_KEY_LEN};
use crate::booking::domain::{Booking, Caller};
use crate::booking::idempotency::IdempotencyRequest;
use crate::booking::service::{BookingService, CreateOutcome};
use crate::booking::BookingError;
use crate::db::DbError;
use crate::notify::tracking::{self, Reader, Tracked};

/// One request's context: where the API was reached, its settings, and
/// the caller.
pub struct At<'a> {
    pub base: &'a str,
    pub pool: &'a Pool,
    pub config: &'a ApiConfig,
    pub bookings: &'a BookingService,
    pub caller: &'a Caller,
}

impl At<'_> {
    pub async fn create(&self, req: &Request) -> Result<Response<Body>, Problem> {
        self.may_organize().await?;
        let idem_key = idempotency_key(req)?;
        let value = body::parse_json(req, self.config.max_body_bytes)?;
        let new = body::new_booking(&value, &self.config.start_window, &self.config.default_reminders)?;
        let idem = idem_key.map(|key| IdempotencyRequest {
            key,
            request_hash: request_hash("POST /bookings", &value),
            ttl: self.config.idempotency_key_ttl,
        });
        match self.bookings.create(self.caller, new, idem).await.map_err(|e| problem_for(e, false))? {
            CreateOutcome::Created(booking) => {
                let mut resp = self.booking(StatusCode::CREATED, &booking);
                resp.headers_mut().insert(header::LOCATION, self.location(booking.id));
                Ok(resp)
            }
            CreateOutcome::Replayed(stored) => {
                let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::CREATED);
                let mut resp = json(status, &stored.body);
                if let Some(id) = stored.booking_id {
                    resp.headers_mut().insert(header::LOCATION, self.location(id));
                }
                resp.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
                Ok(resp)
            }
        }
    }

    /// A booking; for its organizer, with where each notification stands.
    pub async fn get(&self, id: Uuid) -> Result<Response<Body>, Problem> {
        let booking = self.bookings.get(self.caller, id).await.map_err(|e| problem_for(e, false))?;
        let notifications = if booking.is_organizer(self.caller) {
            Some(self.tracked(&booking, Reader::Organizer).await?)
        } else {
            None
        };
        let mut resp = json(StatusCode::OK, &WithNotifications { booking: &booking, notifications });
        resp.headers_mut().insert(header::ETAG, etag(booking.version));
        Ok(resp)
    }

    /// Where each notification of a booking stands: every recipient for
    /// its organizer, an attendee's own for an attendee; 404 for anyone
    /// else, as for the booking.
    pub async fn notifications(&self, id: Uuid) -> Result<Response<Body>, Problem> {
        let booking = self.bookings.get(self.caller, id).await.map_err(|e| problem_for(e, false))?;
        let reader = if booking.is_organizer(self.caller) {
            Reader::Organizer
        } else {
            Reader::Recipient(self.caller.person.email.as_str())
        };
        let notifications = self.tracked(&booking, reader).await?;
        Ok(json(StatusCode::OK, &serde_json::json!({ "booking_id": id, "notifications": notifications })))
    }

    async fn tracked(&self, booking: &Booking, reader: Reader<'_>) -> Result<Vec<Tracked>, Problem> {
        let client = self.pool.get().await.map_err(|e| problem_for(DbError::from(e).into(), false))?;
        tracking::of_booking(&client, booking, reader).await.map_err(|e| problem_for(e.into(), false))
    }

    pub async fn update(&self, req: &Request, id: Uuid) -> Result<Response<Body>, Problem> {
        self.may_organize().await?;
        let if_match = if_match(req)?;
        let value = body::parse_json(req, self.config.max_body_bytes)?;
        let (in_body, changes) = body::changes(&value, &self.config.start_window)?;
        let version = match (if_match, in_body) {
            (Some(m), Some(b)) if m != b => {
                return Err(Problem::field("version", format!("is {b}, but If-Match names version {m}")))
            }
            (Some(v), _) | (None, Some(v)) => v,
            (None, None) => {
                return Err(Problem::field("version", "missing field (send it, or the ETag you read as If-Match)"))
            }
        };
        let changed = self
            .bookings
            .update(self.caller, id, &changes, version)
            .await
            .map_err(|e| problem_for(e, if_match.is_some()))?;
        Ok(self.booking(StatusCode::OK, &changed.booking))
    }

    pub async fn cancel(&self, req: &Request, id: Uuid) -> Result<Response<Body>, Problem> {
        let if_match = if_match(req)?;
        let changed =
            self.bookings.cancel(self.caller, id, if_match).await.map_err(|e| problem_for(e, if_match.is_some()))?;
        Ok(self.booking(StatusCode::OK, &changed.booking))
    }

    /// Whether the caller may create and change bookings: an address at
    /// the stack's `ORGANIZER_DOMAINS`, whose sending is not paused
    /// ([`pauses`](crate::notify::pacing::pauses)). A cancel is never refused by
    /// either: an organizer can always call a meeting off.
    async fn may_organize(&self) -> Result<(), Problem> {
        if let Some(domains) = &self.config.organizer_domains {
            if !domains.admits(&self.caller.person.email) {
                return Err(Problem::new(
                    &super::problem::ORGANIZER_DOMAIN,
                    format!("only addresses at {} may create or change bookings here", domains.list()),
                ));
            }
        }
        let client = self.pool.get().await.map_err(|e| problem_for(DbError::from(e).into(), false))?;
        let key = [self.caller.person.email.as_str().to_string()];
        let paused = crate::notify::pacing::pauses::paused_among(&client, &key)
            .await
            .map_err(|e| problem_for(e.into(), false))?;
        match paused.into_iter().next() {
            Some((_, why)) => Err(Problem::new(
                &super::problem::ORGANIZER_PAUSED,
                format!("sending is paused for this account ({why}); its operator can lift it"),
            )),
            None => Ok(()),
        }
    }

    /// A booking as JSON, with its version as the `ETag`.
    fn booking(&self, status: StatusCode, booking: &Booking) -> Response<Body> {
        let mut resp = json(status, booking);
        resp.headers_mut().insert(header::ETAG, etag(booking.version));
        resp
    }

    /// The booking's absolute URL, where the caller reached the API.
    fn location(&self, id: Uuid) -> HeaderValue {
        HeaderValue::from_str(&format!("{}/bookings/{id}", self.base)).expect("a domain and a uuid")
    }
}

/// A booking with where its notifications stand (for its organizer).
#[derive(Serialize)]
struct WithNotifications<'a> {
    #[serde(flatten)]
    booking: &'a Booking,
    #[serde(skip_serializing_if = "Option::is_none")]
    notifications: Option<Vec<Tracked>>,
}

fn etag(version: i32) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).expect("digits")
}

/// The version `If-Match` names: one entity tag, `"3"` (or `W/"3"`). None
/// without the header.
fn if_match(req: &Request) -> Result<Option<i32>, Problem> {
    let Some(raw) = req.headers().get(header::IF_MATCH) else { return Ok(None) };
    let bad =
        || Problem::new(&problem::INVALID_IF_MATCH, "If-Match must be one entity tag: the booking's ETag, like \"3\"");
    let tag = raw.to_str().map_err(|_| bad())?.trim();
    let tag = tag.strip_prefix("W/").unwrap_or(tag);
    let version = tag.strip_prefix('"').and_then(|t| t.strip_suffix('"')).ok_or_else(bad)?;
    version.parse::<i32>().ok().filter(|v| *v >= 1).map(Some).ok_or_else(bad)
}

fn idempotency_key(req: &Request) -> Result<Option<String>, Problem> {
    let Some(raw) = req.headers().get(IDEMPOTENCY_KEY_HEADER) else { return Ok(None) };
    let bad = || {
        Problem::new(
            &problem::INVALID_IDEMPOTENCY_KEY,
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

/// The problem a booking error answers with. A version mismatch is 412
/// when `If-Match` named the version, else 409.
pub(super) fn problem_for(err: BookingError, if_match: bool) -> Problem {
    use BookingError::*;
    match err {
        NotFound => Problem::not_found(),
        NotOrganizer => Problem::new(&problem::FORBIDDEN, err.to_string()),
        Overlap => Problem::new(&problem::OVERLAP, err.to_string()),
        VersionConflict { current, .. } if if_match => Problem {
            current_version: Some(current),
            ..Problem::new(&problem::PRECONDITION_FAILED, format!("{err}; read it again (its ETag) and retry"))
        },
        VersionConflict { current, .. } => Problem {
            current_version: Some(current),
            ..Problem::new(&problem::VERSION_CONFLICT, format!("{err}; reload and retry"))
        },
        Cancelled => Problem::new(&problem::CANCELLED, err.to_string()),
        LimitExceeded { retry_after, .. } => Problem {
            retry_after: retry_after.map(|d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX).max(1)),
            ..Problem::new(&problem::LIMIT_EXCEEDED, err.to_string())
        },
        IdempotencyKeyMismatch => Problem::new(&problem::IDEMPOTENCY_KEY_MISMATCH, err.to_string()),
        Db(DbError::Unavailable(_)) => {
            tracing::error!(error = %err, "database unavailable");
            Problem::new(&problem::UNAVAILABLE, "the database is unavailable; retry shortly")
        }
        Db(ref e) if e.is_transient() => {
            tracing::warn!(error = %err, "transient database error");
            Problem::new(&problem::UNAVAILABLE, "a transient database error occurred; retry")
        }
        Db(_) | Fault(_) => {
            tracing::error!(error = %err, "booking operation failed");
            Problem::new(&problem::INTERNAL, "the request could not be completed; nothing was saved")
        }
    }
}
