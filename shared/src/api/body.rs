//! Request bodies: size and media-type checks, JSON parsing, and reading
//! the fields into domain types, naming every invalid field at once.
//!
//! One rule for optional text (`description`, `location`): an empty value
//! (or, for the one-line location, only spaces) is no value. A create
//! stores none; an update clears it, as `null` does.

use lambda_http::http::header;
use lambda_http::Request;
use serde_json::Value;

use super::fields::{FieldErrors, Object, Patch};
use super::json::{parse_unique_keys, JsonError};
use super::problem::{InvalidParam, Problem, DUPLICATE_KEY, MALFORMED_JSON, PAYLOAD_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE};
use crate::booking::domain::{
    self, BookingChanges, Description, DisplayName, EmailAddress, GuestList, LocaleTag, Location, NewBooking, Person,
    Reminder, Reminders, StartWindow, TimeRange, Timezone, Title, MAX_ATTENDEES,
};

/// Checks the size and media type, then parses the body: a JSON object
/// with no key twice.
pub fn parse_json(req: &Request, max_bytes: usize) -> Result<Value, Problem> {
    let bytes: &[u8] = req.body().as_ref();
    if bytes.len() > max_bytes {
        return Err(Problem::new(
            &PAYLOAD_TOO_LARGE,
            format!("the body is {} bytes; the limit is {max_bytes}", bytes.len()),
        ));
    }
    let content_type = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if essence != "application/json" {
        return Err(Problem::new(
            &UNSUPPORTED_MEDIA_TYPE,
            format!("send Content-Type: application/json (got {content_type:?})"),
        ));
    }
    let value = parse_unique_keys(bytes).map_err(|e| match e {
        JsonError::Syntax(e) => Problem::new(&MALFORMED_JSON, format!("the body is not valid JSON: {e}")),
        JsonError::DuplicateKey(path) => {
            let mut problem =
                Problem::new(&DUPLICATE_KEY, format!("the key {path:?} appears twice; send each key once"));
            problem.invalid_params.push(InvalidParam { name: path, reason: "appears more than once".into() });
            problem
        }
    })?;
    if !value.is_object() {
        return Err(Problem::field("body", "must be a JSON object"));
    }
    Ok(value)
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

const CREATE_FIELDS: &[&str] =
    &["title", "start", "end", "timezone", "attendees", "description", "location", "reminders", "locale", "guest_list"];

/// `guest_list`: `"visible"` or `"hidden"`.
fn guest_list(errors: &mut FieldErrors, raw: &str) -> Option<GuestList> {
    match raw.parse() {
        Ok(g) => Some(g),
        Err(_) => {
            errors.refuse("guest_list", "must be \"visible\" (attendees see each other) or \"hidden\"");
            None
        }
    }
}

/// `POST /bookings`: every field read, every problem named. A booking
/// that names no `reminders` gets `default_reminders`.
pub fn new_booking(body: &Value, window: &StartWindow, default_reminders: &Reminders) -> Result<NewBooking, Problem> {
    let mut errors = FieldErrors::default();
    let obj = Object::of(body, "", &mut errors).ok_or_else(|| Problem::field("body", "must be a JSON object"))?;
    obj.deny_unknown(CREATE_FIELDS, &mut errors);
    let title = obj.string("title", &mut errors).and_then(|t| errors.check("title", Title::parse(t)));
    let (start, end) = (obj.string("start", &mut errors), obj.string("end", &mut errors));
    let range = match (start, end) {
        (Some(start), Some(end)) => parse_range(&mut errors, start, end, window),
        _ => None,
    };
    let timezone = obj.string("timezone", &mut errors).and_then(|z| errors.check("timezone", Timezone::parse(z)));
    let description = optional_text(&obj, "description", &mut errors, Description::parse).flatten();
    let location = optional_text(&obj, "location", &mut errors, Location::parse).flatten();
    let attendees = obj.array("attendees", &mut errors).map(|list| parse_attendees(&mut errors, &obj, list));
    let reminders = match obj.patch_array("reminders", &mut errors) {
        Patch::Absent => Some(default_reminders.clone()),
        Patch::Null => {
            errors.refuse("reminders", "must be a list; send [] for no reminders");
            None
        }
        Patch::Value(list) => parse_reminders(&mut errors, list),
    };
    // The organizer's own language; left out, their token's.
    let organizer_locale = match obj.patch_string("locale", &mut errors) {
        Patch::Value(l) => errors.check("locale", LocaleTag::parse(l)),
        Patch::Absent | Patch::Null => None,
    };
    let guests = obj.patch_string("guest_list", &mut errors);
    let guests = match not_null(&mut errors, "guest_list", guests) {
        Some(raw) => guest_list(&mut errors, raw),
        None => Some(GuestList::default()),
    };
    errors.into_result()?;
    Ok(NewBooking {
        title: title.expect("checked"),
        description,
        location,
        timezone: timezone.expect("checked"),
        range: range.expect("checked"),
        attendees: attendees.expect("checked"),
        reminders: reminders.expect("checked"),
        organizer_locale,
        guest_list: guests.expect("checked"),
    })
}

/// At most 5 ISO 8601 offsets before the start (`PT24H`, `PT15M`), each
/// from 5 minutes to 30 days, none twice.
fn parse_reminders(errors: &mut FieldErrors, list: &[Value]) -> Option<Reminders> {
    let before = errors.len();
    let mut parsed = Vec::with_capacity(list.len());
    for (i, value) in list.iter().enumerate() {
        let path = format!("reminders[{i}]");
        match value.as_str() {
            Some(raw) => parsed.extend(errors.check(path, Reminder::parse(raw))),
            None => errors.refuse(path, "must be a string, an ISO 8601 duration like PT15M"),
        }
    }
    let reminders = errors.check("reminders", Reminders::new(parsed));
    reminders.filter(|_| errors.len() == before)
}

/// An optional text field: `None` when left out; `Some(None)` when `null`
/// or empty (no value); `Some(Some(v))` when it parses.
fn optional_text<T>(
    obj: &Object<'_>,
    name: &str,
    errors: &mut FieldErrors,
    parse: fn(&str) -> Result<T, domain::ParseError>,
) -> Option<Option<T>> {
    match obj.patch_string(name, errors) {
        Patch::Absent => None,
        Patch::Null => Some(None),
        Patch::Value(v) if v.trim().is_empty() => Some(None),
        Patch::Value(v) => errors.check(obj.path(name), parse(v)).map(Some),
    }
}

/// 1 to 50 attendees, each an object with a valid address and name (and
/// optionally their own time zone), no address twice.
fn parse_attendees(errors: &mut FieldErrors, parent: &Object<'_>, list: &[Value]) -> Vec<Person> {
    if list.is_empty() || list.len() > MAX_ATTENDEES {
        errors
            .refuse(parent.path("attendees"), format!("must list 1 to {MAX_ATTENDEES} attendees (got {})", list.len()));
    }
    let mut attendees: Vec<Person> = Vec::with_capacity(list.len());
    for (i, value) in list.iter().enumerate() {
        let path = format!("attendees[{i}]");
        let Some(a) = Object::of(value, &path, errors) else { continue };
        // `language` is the server's answer (GET's): sent back, it is ignored.
        a.deny_unknown(&["email", "name", "timezone", "locale", "language"], errors);
        let email = a.string("email", errors).and_then(|e| errors.check(a.path("email"), EmailAddress::parse(e)));
        let name = a.string("name", errors).and_then(|n| errors.check(a.path("name"), DisplayName::parse(n)));
        let timezone = match a.patch_string("timezone", errors) {
            Patch::Value(z) => errors.check(a.path("timezone"), Timezone::parse(z).map(Some)),
            Patch::Absent | Patch::Null => Some(None),
        };
        let locale = match a.patch_string("locale", errors) {
            Patch::Value(l) => errors.check(a.path("locale"), LocaleTag::parse(l).map(Some)),
            Patch::Absent | Patch::Null => Some(None),
        };
        if let (Some(email), Some(name), Some(timezone), Some(locale)) = (email, name, timezone, locale) {
            if attendees.iter().any(|p| p.email == email) {
                errors.refuse(a.path("email"), format!("{email} is listed twice"));
            } else {
                attendees.push(Person { email, name, timezone, locale, language: None });
            }
        }
    }
    attendees
}

const UPDATE_FIELDS: &[&str] = &[
    "version",
    "title",
    "description",
    "location",
    "start",
    "end",
    "timezone",
    "attendees",
    "reminders",
    "locale",
    "guest_list",
];

/// A field that may be changed but not removed: `null` is an error.
fn not_null<T>(errors: &mut FieldErrors, field: &str, value: Patch<T>) -> Option<T> {
    match value {
        Patch::Null => {
            errors.refuse(field, format!("{field} cannot be removed; leave it out to keep it"));
            None
        }
        Patch::Value(v) => Some(v),
        Patch::Absent => None,
    }
}

/// `PATCH /bookings/{id}`: the version last seen (optional here: an
/// `If-Match` header may carry it instead), and the changes, with the same
/// validation as a create for the fields present.
pub fn changes(body: &Value, window: &StartWindow) -> Result<(Option<i32>, BookingChanges), Problem> {
    let mut errors = FieldErrors::default();
    let obj = Object::of(body, "", &mut errors).ok_or_else(|| Problem::field("body", "must be a JSON object"))?;
    obj.deny_unknown(UPDATE_FIELDS, &mut errors);
    let version = if obj.has("version") { obj.integer("version", &mut errors) } else { None };
    let mut changes = BookingChanges::default();
    let title = obj.patch_string("title", &mut errors);
    if let Some(t) = not_null(&mut errors, "title", title) {
        changes.title = errors.check("title", Title::parse(t));
    }
    changes.description = optional_text(&obj, "description", &mut errors, Description::parse);
    changes.location = optional_text(&obj, "location", &mut errors, Location::parse);
    let (start, end) = (obj.patch_string("start", &mut errors), obj.patch_string("end", &mut errors));
    let together = "start and end change together: send both";
    match (not_null(&mut errors, "start", start), not_null(&mut errors, "end", end)) {
        (Some(start), Some(end)) => changes.range = parse_range(&mut errors, start, end, window),
        (Some(_), None) if end == Patch::Absent => errors.refuse("end", together),
        (None, Some(_)) if start == Patch::Absent => errors.refuse("start", together),
        _ => {}
    }
    let timezone = obj.patch_string("timezone", &mut errors);
    if let Some(tz) = not_null(&mut errors, "timezone", timezone) {
        changes.timezone = errors.check("timezone", Timezone::parse(tz));
    }
    let attendees = obj.patch_array("attendees", &mut errors);
    if let Some(list) = not_null(&mut errors, "attendees", attendees) {
        changes.attendees = Some(parse_attendees(&mut errors, &obj, list));
    }
    match obj.patch_array("reminders", &mut errors) {
        Patch::Absent => {}
        Patch::Null => errors.refuse("reminders", "must be a list; send [] to remove every reminder"),
        Patch::Value(list) => changes.reminders = parse_reminders(&mut errors, list),
    }
    match obj.patch_string("locale", &mut errors) {
        Patch::Absent => {}
        Patch::Null => changes.organizer_locale = Some(None),
        Patch::Value(l) => changes.organizer_locale = errors.check("locale", LocaleTag::parse(l)).map(Some),
    }
    let guests = obj.patch_string("guest_list", &mut errors);
    if let Some(raw) = not_null(&mut errors, "guest_list", guests) {
        changes.guest_list = guest_list(&mut errors, raw);
    }
    if UPDATE_FIELDS[1..].iter().all(|f| body.get(f).is_none()) {
        errors.refuse(
            "body",
            "nothing to change: send at least one of title, description, location, start and end, timezone, \
             attendees, reminders, locale, guest_list",
        );
    }
    errors.into_result()?;
    Ok((version, changes))
}
