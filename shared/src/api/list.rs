//! `GET /bookings`: the caller's bookings, a page at a time.
//!
//! Query: `role` (`organizer`, `attendee`; both when left out), `from` and
//! `to` (the bookings that overlap `[from, to)`), `status` (`CONFIRMED`,
//! `CANCELLED`; both when left out), `limit` (1 to 100, default 50) and
//! `cursor` (the `next_cursor` of the page before). Order: start, then id,
//! so bookings inserted meanwhile never make a page repeat or skip one.
//!
//! A cursor is opaque and signed: the position of the page's last booking
//! and an HMAC-SHA256 tag over it, the caller and the query, under a key
//! made once per database (`api_cursor_key`, migration V18). One the API
//! did not issue, or issued for another caller or query, is 400.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use hmac::{Hmac, KeyInit, Mac};
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Serialize;
use sha2::Sha256;
use tokio::sync::OnceCell;
use uuid::Uuid;

use super::fields::FieldErrors;
use super::json;
use super::problem::{self, Problem};
use crate::booking::domain::{parse_instant, Booking, BookingStatus, Caller};
use crate::booking::service::BookingService;
use crate::booking::store::{Listing, Role};
use crate::db::DbError;

pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 100;
const PARAMS: &[&str] = &["role", "from", "to", "status", "limit", "cursor"];

/// The key cursors are signed with, read once per container.
#[derive(Default)]
pub struct CursorKey(OnceCell<Vec<u8>>);

impl CursorKey {
    /// `api_cursor_key`, the table's only statement.
    async fn get(&self, pool: &Pool) -> Result<&[u8], DbError> {
        let key = self
            .0
            .get_or_try_init(|| async {
                let client = pool.get().await?;
                let row = client.query_one("SELECT key FROM api_cursor_key", &[]).await?;
                Ok::<_, DbError>(row.get::<_, Vec<u8>>(0))
            })
            .await?;
        Ok(key)
    }
}

#[derive(Serialize)]
struct Page<'a> {
    bookings: &'a [Booking],
    /// Where the next page starts; null on the last page.
    next_cursor: Option<String>,
}

/// Answers `GET /bookings` for `caller`.
pub async fn list(
    req: &Request,
    caller: &Caller,
    bookings: &BookingService,
    pool: &Pool,
    key: &CursorKey,
) -> Result<Response<Body>, Problem> {
    let (mut listing, cursor) = parse(req)?;
    let key = key.get(pool).await.map_err(|e| {
        tracing::error!(error = %e, "the cursor key could not be read");
        Problem::new(&problem::UNAVAILABLE, "the database is unavailable; retry shortly")
    })?;
    let binding = binding(caller, &listing);
    if let Some(cursor) = cursor {
        listing.after = open(key, &binding, &cursor)
            .ok_or_else(|| Problem::new(&problem::INVALID_CURSOR, "the cursor was not issued for this query"))?;
    }
    let limit = listing.limit;
    // One more than the page, to know whether another follows.
    listing.limit += 1;
    let mut found = bookings.list(caller, &listing).await.map_err(|e| super::bookings::problem_for(e, false))?;
    let next_cursor = if found.len() as i64 > limit {
        found.truncate(limit as usize);
        found.last().map(|b| seal(key, &binding, (b.range.start(), b.id)))
    } else {
        None
    };
    Ok(json(StatusCode::OK, &Page { bookings: &found, next_cursor }))
}

/// The query, checked: every bad parameter named at once.
fn parse(req: &Request) -> Result<(Listing, Option<String>), Problem> {
    let query = req.query_string_parameters_ref();
    let mut errors = FieldErrors::default();
    let one = |name: &str, errors: &mut FieldErrors| -> Option<String> {
        let values = query.and_then(|q| q.all(name)).unwrap_or_default();
        match values.as_slice() {
            [] => None,
            [v] => Some(v.to_string()),
            _ => {
                errors.refuse(name, "must be given once");
                None
            }
        }
    };
    if let Some(q) = query {
        for (name, _) in q.iter().filter(|(n, _)| !PARAMS.contains(n)) {
            errors.refuse(name, format!("unknown query parameter; the parameters are {}", PARAMS.join(", ")));
        }
    }
    let role = match one("role", &mut errors).as_deref() {
        None => Role::Either,
        Some("organizer") => Role::Organizer,
        Some("attendee") => Role::Attendee,
        Some(_) => {
            errors.refuse("role", "must be organizer or attendee");
            Role::Either
        }
    };
    let mut instant = |name: &str, default: DateTime<Utc>| match one(name, &mut errors) {
        None => default,
        Some(raw) => errors.check(name, parse_instant(&raw)).unwrap_or(default),
    };
    let earliest = parse_instant("0001-01-01T00:00:00Z").expect("a valid instant");
    let latest = parse_instant("9999-12-31T23:59:59Z").expect("a valid instant");
    let (from, to) = (instant("from", earliest), instant("to", latest));
    if from >= to {
        errors.refuse("to", "must be after from");
    }
    let statuses = match one("status", &mut errors) {
        None => vec![BookingStatus::Confirmed, BookingStatus::Cancelled],
        Some(raw) => match raw.parse::<BookingStatus>() {
            Ok(s) => vec![s],
            Err(_) => {
                errors.refuse("status", "must be CONFIRMED or CANCELLED");
                Vec::new()
            }
        },
    };
    let limit = match one("limit", &mut errors) {
        None => DEFAULT_LIMIT,
        Some(raw) => match raw.parse::<i64>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                errors.refuse("limit", format!("must be an integer from 1 to {MAX_LIMIT}"));
                DEFAULT_LIMIT
            }
        },
    };
    let cursor = one("cursor", &mut errors);
    errors.into_result()?;
    Ok((Listing { role, from, to, statuses, after: (earliest, Uuid::nil()), limit }, cursor))
}

/// What a cursor is bound to: the caller and every filter of the query
/// (not the limit, which may change between pages).
fn binding(caller: &Caller, l: &Listing) -> Vec<u8> {
    let statuses: Vec<&str> = l.statuses.iter().map(|s| s.as_str()).collect();
    format!(
        "bookings cursor v1\n{}\n{}\n{:?}\n{}\n{}\n{}",
        caller.key(),
        caller.person.email,
        l.role,
        l.from.timestamp_micros(),
        l.to.timestamp_micros(),
        statuses.join(",")
    )
    .into_bytes()
}

const TAG_BYTES: usize = 16;

fn mac(key: &[u8], binding: &[u8], position: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(binding);
    mac.update(b"\n");
    mac.update(position);
    mac
}

/// A cursor for the page after `(start, id)`.
fn seal(key: &[u8], binding: &[u8], (start, id): (DateTime<Utc>, Uuid)) -> String {
    let mut bytes = Vec::with_capacity(8 + 16 + TAG_BYTES);
    bytes.extend_from_slice(&start.timestamp_micros().to_be_bytes());
    bytes.extend_from_slice(id.as_bytes());
    let tag = mac(key, binding, &bytes).finalize().into_bytes();
    bytes.extend_from_slice(&tag[..TAG_BYTES]);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The position a cursor names, if this API issued it for this query.
fn open(key: &[u8], binding: &[u8], cursor: &str) -> Option<(DateTime<Utc>, Uuid)> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    if bytes.len() != 8 + 16 + TAG_BYTES {
        return None;
    }
    let (position, tag) = bytes.split_at(8 + 16);
    mac(key, binding, position).verify_truncated_left(tag).ok()?;
    let micros = i64::from_be_bytes(position[..8].try_into().ok()?);
    let id = Uuid::from_slice(&position[8..]).ok()?;
    Some((DateTime::from_timestamp_micros(micros)?, id))
}
