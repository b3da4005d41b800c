//! Request bodies: size and media-type checks, JSON parsing that names the
//! offending field, and conversion into domain types.

use lambda_http::http::{header, StatusCode};
use lambda_http::Request;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::json::{parse_unique_keys, JsonError};
use super::problem::{InvalidParam, Problem};
use crate::booking::domain::{
    self, BookingChanges, Description, DisplayName, EmailAddress, Location, NewBooking, ParseError, Person,
    StartWindow, TimeRange, Timezone, Title, MAX_ATTENDEES,
};

/// Collects field errors so one response names all of them.
#[derive(Default)]
pub struct FieldErrors(Vec<InvalidParam>);

impl FieldErrors {
    /// The value, or `None` with its problem reported under `field` (the
    /// JSON path, which the parser cannot know).
    pub fn check<T>(&mut self, field: impl Into<String>, r: Result<T, ParseError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.refuse(field, e.problem);
                None
            }
        }
    }

    /// Reports `field` as invalid for `reason`.
    pub fn refuse(&mut self, field: impl Into<String>, reason: impl Into<String>) {
        self.0.push(InvalidParam { name: field.into(), reason: reason.into() });
    }

    pub fn into_result(self) -> Result<(), Problem> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Problem::invalid(self.0))
        }
    }
}

/// Checks the size and media type, then parses the body into `T`.
/// Returns the JSON value too (for idempotency hashing).
pub fn parse_json<T: DeserializeOwned>(req: &Request, max_bytes: usize) -> Result<(serde_json::Value, T), Problem> {
    let bytes: &[u8] = req.body().as_ref();
    if bytes.len() > max_bytes {
        return Err(Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Request body too large",
            format!("the body is {} bytes; the limit is {max_bytes}", bytes.len()),
        ));
    }
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if essence != "application/json" {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            format!("send Content-Type: application/json (got {content_type:?})"),
        ));
    }
    let value = parse_unique_keys(bytes).map_err(|e| match e {
        JsonError::Syntax(e) => Problem::new(
            StatusCode::BAD_REQUEST,
            "malformed-json",
            "Malformed JSON",
            format!("the body is not valid JSON: {e}"),
        ),
        JsonError::DuplicateKey(path) => {
            let mut problem = Problem::new(
                StatusCode::BAD_REQUEST,
                "duplicate-key",
                "Duplicate JSON key",
                format!("the key {path:?} appears twice; send each key once"),
            );
            problem.invalid_params.push(InvalidParam { name: path, reason: "appears more than once".into() });
            problem
        }
    })?;
    if !value.is_object() {
        return Err(Problem::field("body", "must be a JSON object"));
    }
    let parsed = serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        // A missing field is reported at its parent's path; name the field itself.
        let name = match missing_field(&message) {
            Some(field) if path == "." => field,
            Some(field) => format!("{path}.{field}"),
            None if path == "." => "body".to_string(),
            None => path,
        };
        Problem::field(name, message)
    })?;
    Ok((value, parsed))
}

fn missing_field(message: &str) -> Option<String> {
    message.strip_prefix("missing field `").and_then(|m| m.split('`').next()).map(str::to_string)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttendeeBody {
    pub email: String,
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBookingBody {
    pub title: String,
    pub start: String,
    pub end: String,
    pub timezone: String,
    pub attendees: Vec<AttendeeBody>,
    pub description: Option<String>,
    pub location: Option<String>,
}

/// Parses `start` and `end` into a range whose start lies in `window`.
pub fn parse_range(errors: &mut FieldErrors, start: &str, end: &str, window: &StartWindow) -> Option<TimeRange> {
    let start = errors
        .check("start", domain::parse_instant(start))
        .and_then(|s| errors.check("start", window.check(s, chrono::Utc::now()).map(|_| s)));
    let end = errors.check("end", domain::parse_instant(end));
    match (start, end) {
        (Some(s), Some(e)) => errors.check("end", TimeRange::new(s, e)),
        _ => None,
    }
}

impl CreateBookingBody {
    pub fn into_new_booking(self, window: &StartWindow) -> Result<NewBooking, Problem> {
        let mut errors = FieldErrors::default();
        let title = errors.check("title", Title::parse(&self.title));
        let range = parse_range(&mut errors, &self.start, &self.end, window);
        let timezone = errors.check("timezone", Timezone::parse(&self.timezone));
        let description = self.description.as_deref().and_then(|d| errors.check("description", Description::parse(d)));
        let location = self.location.as_deref().and_then(|l| errors.check("location", Location::parse(l)));
        let attendees = parse_attendees(&mut errors, &self.attendees);
        errors.into_result()?;
        Ok(NewBooking {
            title: title.expect("checked"),
            description,
            location,
            timezone: timezone.expect("checked"),
            range: range.expect("checked"),
            attendees,
        })
    }
}

/// 1 to 50 attendees, each a valid address and name, no address twice.
fn parse_attendees(errors: &mut FieldErrors, list: &[AttendeeBody]) -> Vec<Person> {
    if list.is_empty() || list.len() > MAX_ATTENDEES {
        errors.refuse("attendees", format!("must list 1 to {MAX_ATTENDEES} attendees (got {})", list.len()));
    }
    let mut attendees: Vec<Person> = Vec::with_capacity(list.len());
    for (i, a) in list.iter().enumerate() {
        let email = errors.check(format!("attendees[{i}].email"), EmailAddress::parse(&a.email));
        let name = errors.check(format!("attendees[{i}].name"), DisplayName::parse(&a.name));
        if let (Some(email), Some(name)) = (email, name) {
            if attendees.iter().any(|p| p.email == email) {
                errors.refuse(format!("attendees[{i}].email"), format!("{email} is listed twice"));
            } else {
                attendees.push(Person { email, name });
            }
        }
    }
    attendees
}

/// `"field": null` → `Some(None)` (clear it), absent → `None` (keep it).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// `PATCH /bookings/{id}`: the version last seen, and any fields to change.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateBookingBody {
    pub version: i32,
    #[serde(default, deserialize_with = "present")]
    pub title: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub description: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub location: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub start: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub end: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub timezone: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub attendees: Option<Option<Vec<AttendeeBody>>>,
}

/// A field that may be changed but not removed: `null` is an error.
fn not_null<'a, T>(errors: &mut FieldErrors, field: &str, value: &'a Option<Option<T>>) -> Option<&'a T> {
    match value {
        Some(None) => {
            errors.refuse(field, format!("{field} cannot be removed; leave it out to keep it"));
            None
        }
        Some(Some(v)) => Some(v),
        None => None,
    }
}

impl UpdateBookingBody {
    /// The same validation as a create, for the fields present.
    pub fn into_changes(self, window: &StartWindow) -> Result<BookingChanges, Problem> {
        let mut errors = FieldErrors::default();
        let mut changes = BookingChanges::default();
        if let Some(t) = not_null(&mut errors, "title", &self.title) {
            changes.title = errors.check("title", Title::parse(t));
        }
        if let Some(d) = &self.description {
            changes.description = match d {
                None => Some(None),
                Some(d) => errors.check("description", Description::parse(d)).map(Some),
            };
        }
        if let Some(l) = &self.location {
            changes.location = match l {
                None => Some(None),
                Some(l) => errors.check("location", Location::parse(l)).map(Some),
            };
        }
        let together = "start and end change together: send both";
        match (not_null(&mut errors, "start", &self.start), not_null(&mut errors, "end", &self.end)) {
            (Some(start), Some(end)) => changes.range = parse_range(&mut errors, start, end, window),
            (Some(_), None) if self.end.is_none() => errors.refuse("end", together),
            (None, Some(_)) if self.start.is_none() => errors.refuse("start", together),
            _ => {}
        }
        if let Some(tz) = not_null(&mut errors, "timezone", &self.timezone) {
            changes.timezone = errors.check("timezone", Timezone::parse(tz));
        }
        if let Some(list) = not_null(&mut errors, "attendees", &self.attendees) {
            changes.attendees = Some(parse_attendees(&mut errors, list));
        }
        let nothing = self.title.is_none()
            && self.description.is_none()
            && self.location.is_none()
            && self.start.is_none()
            && self.end.is_none()
            && self.timezone.is_none()
            && self.attendees.is_none();
        if nothing {
            errors.refuse(
                "body",
                "nothing to change: send at least one of title, description, location, start and end, timezone, attendees",
            );
        }
        errors.into_result()?;
        Ok(changes)
    }
}
