//! Domain types for bookings. Parse, don't validate: each type can only be
//! built through `parse`, so an address with a CR/LF in it or an end before
//! its start cannot exist past the API edge.
//!
//! Fields that reach an email header (title → Subject, names → To/From
//! display names, addresses) refuse every control character; that is what
//! keeps a hostile title from adding or splitting a header. They also refuse
//! the invisible characters that spoof what a reader sees (Unicode format
//! characters, Cf, such as bidi overrides and zero-width spaces) and the
//! line and paragraph separators (Zl, Zp).

use std::borrow::Cow;
use std::fmt;

use chrono::{DateTime, Datelike, Duration, Utc};
use serde::{Deserialize, Serialize};
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_NAME_CHARS: usize = 100;
pub const MAX_LOCATION_CHARS: usize = 500;
pub const MAX_DESCRIPTION_CHARS: usize = 5000;
pub const MAX_EMAIL_CHARS: usize = 254;
pub const MAX_ATTENDEES: usize = 50;
pub const MAX_DURATION_DAYS: i64 = 31;

/// Why a value was refused, naming the field it was read as. The parsers
/// below name their natural field (`title`, `email`, ...); a caller that
/// knows the real path (`attendees[2].name`, `bookings.timezone`) says so
/// with [`ParseError::at`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {problem}")]
pub struct ParseError {
    pub field: Cow<'static, str>,
    /// What is wrong, phrased to follow the field's name ("must not be empty").
    pub problem: String,
}

impl ParseError {
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self { field: Cow::Borrowed(field), problem: problem.into() }
    }

    /// The same problem, under the name the caller knows the field by.
    pub fn at(self, field: impl Into<Cow<'static, str>>) -> Self {
        Self { field: field.into(), ..self }
    }
}

/// Read back through the same parser that let the value in at the edge:
/// a stored or queued value that no longer parses is refused, not trusted.
macro_rules! deserialize_via_parse {
    ($name:ident) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = <Cow<'de, str>>::deserialize(d)?;
                $name::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// An email address, normalised to lower case so the same person written
/// twice is one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct EmailAddress(String);

deserialize_via_parse!(EmailAddress);

impl EmailAddress {
    pub fn parse(raw: &str) -> Result<Self, ParseError> {
        Self::check(raw).map(|()| Self(raw.to_lowercase())).map_err(|p| ParseError::new("email", p))
    }

    fn check(raw: &str) -> Result<(), String> {
        if raw.is_empty() {
            return Err("must not be empty".into());
        }
        if raw.chars().count() > MAX_EMAIL_CHARS {
            return Err(format!("must be at most {MAX_EMAIL_CHARS} characters"));
        }
        if raw.chars().any(char::is_control) {
            return Err("must not contain control characters (such as CR or LF)".into());
        }
        refuse_invisible(raw)?;
        // The crate accepts RFC 5322 oddities (quoted local parts, comments,
        // domain literals) that have no place in a header we build; refuse
        // the characters they need.
        if let Some(c) = raw.chars().find(|c| c.is_whitespace() || "\"<>()[],;:\\".contains(*c)) {
            return Err(format!("must be a plain address like alice@example.com (found {c:?})"));
        }
        let parsed: email_address::EmailAddress =
            raw.parse().map_err(|e| format!("is not a valid email address: {e}"))?;
        if !parsed.domain().contains('.') {
            return Err("must have a domain with a dot, like alice@example.com".into());
        }
        Ok(())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Refuses Unicode format characters (Cf: bidi overrides and isolates,
/// zero-width characters, soft hyphens...) and line or paragraph separators
/// (Zl, Zp): in a Subject or a display name they make text read other than
/// it is.
fn refuse_invisible(raw: &str) -> Result<(), String> {
    let bad = raw.chars().find(|c| {
        matches!(
            c.general_category(),
            GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
        )
    });
    match bad {
        Some(c) => {
            Err(format!("must not contain invisible formatting or separator characters (found U+{:04X})", c as u32))
        }
        None => Ok(()),
    }
}

fn single_line(raw: &str, max_chars: usize, allow_empty: bool) -> Result<String, String> {
    if raw.chars().any(char::is_control) {
        return Err("must not contain control characters (such as CR, LF or TAB)".into());
    }
    refuse_invisible(raw)?;
    let trimmed = raw.trim();
    if trimmed.is_empty() && !allow_empty {
        return Err("must not be empty".into());
    }
    if trimmed.chars().count() > max_chars {
        return Err(format!("must be at most {max_chars} characters"));
    }
    Ok(trimmed.to_string())
}

macro_rules! text_type {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        deserialize_via_parse!($name);

        impl $name {
            pub fn parse(raw: &str) -> Result<Self, ParseError> {
                single_line(raw, $max, false).map(Self).map_err(|p| ParseError::new($field, p))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_type!(
    /// A booking title: it becomes the email Subject, so a single line.
    Title,
    "title",
    MAX_TITLE_CHARS
);
text_type!(
    /// A person's display name: it reaches To/From headers, so a single line.
    DisplayName,
    "name",
    MAX_NAME_CHARS
);
text_type!(
    /// Where the meeting is: a single line (iCalendar LOCATION).
    Location,
    "location",
    MAX_LOCATION_CHARS
);

/// Free text for the invitation body. Line breaks and tabs are allowed here
/// (it never reaches a header); other control characters are not. Every
/// line break is stored as LF: a lone CR would otherwise reach the
/// iCalendar DESCRIPTION, where RFC 5545 forbids it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Description(String);

deserialize_via_parse!(Description);

impl Description {
    pub fn parse(raw: &str) -> Result<Self, ParseError> {
        if raw.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) {
            return Err(ParseError::new(
                "description",
                "must not contain control characters other than line breaks and tabs",
            ));
        }
        if raw.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(ParseError::new("description", format!("must be at most {MAX_DESCRIPTION_CHARS} characters")));
        }
        Ok(Self(raw.replace("\r\n", "\n").replace('\r', "\n")))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Description {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An IANA time zone name that exists in the tz database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timezone(chrono_tz::Tz);

deserialize_via_parse!(Timezone);

impl Serialize for Timezone {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Timezone {
    pub fn parse(raw: &str) -> Result<Self, ParseError> {
        if raw.chars().any(char::is_control) {
            return Err(ParseError::new("timezone", "must not contain control characters"));
        }
        raw.parse::<chrono_tz::Tz>().map(Self).map_err(|_| {
            ParseError::new("timezone", format!("{raw:?} is not an IANA time zone name (like Europe/Paris)"))
        })
    }
    pub fn name(&self) -> &'static str {
        self.0.name()
    }
    pub fn tz(&self) -> chrono_tz::Tz {
        self.0
    }
}

/// Parses an RFC 3339 timestamp (offset required) into UTC.
/// The error names the field `instant`; callers say which (`start`, `end`).
pub fn parse_instant(raw: &str) -> Result<DateTime<Utc>, ParseError> {
    let t = DateTime::parse_from_rfc3339(raw).map(|t| t.with_timezone(&Utc)).map_err(|e| {
        ParseError::new(
            "instant",
            format!("must be an RFC 3339 timestamp with an offset, like 2027-06-15T09:00:00Z ({e})"),
        )
    })?;
    // Only instants whose UTC form is again a four-digit-year RFC 3339
    // timestamp: `9999-12-31T23:30:00-01:00` is year 10000 in UTC.
    if !(1..=9999).contains(&t.year()) {
        return Err(ParseError::new("instant", "must lie between the years 0001 and 9999 in UTC"));
    }
    Ok(t)
}

/// How far from now a booking may start: not further back than `max_past`,
/// not further ahead than `max_future`. It also keeps every instant a
/// four-digit-year RFC 3339 timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartWindow {
    pub max_past: Duration,
    pub max_future: Duration,
}

impl StartWindow {
    pub fn check(&self, start: DateTime<Utc>, now: DateTime<Utc>) -> Result<(), ParseError> {
        if start < now - self.max_past {
            return Err(ParseError::new(
                "start",
                format!("must not be more than {} days in the past", self.max_past.num_days()),
            ));
        }
        if start > now + self.max_future {
            return Err(ParseError::new("start", format!("must be at most {} days ahead", self.max_future.num_days())));
        }
        Ok(())
    }
}

/// A half-open time range `[start, end)` with `end > start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

impl TimeRange {
    /// The error names the field `end`.
    pub fn new(start: DateTime<Utc>, end: DateTime<Utc>) -> Result<Self, ParseError> {
        if end <= start {
            return Err(ParseError::new("end", "must be after start"));
        }
        if end - start > Duration::days(MAX_DURATION_DAYS) {
            return Err(ParseError::new("end", format!("must be at most {MAX_DURATION_DAYS} days after start")));
        }
        Ok(Self { start, end })
    }
    pub fn start(&self) -> DateTime<Utc> {
        self.start
    }
    pub fn end(&self) -> DateTime<Utc> {
        self.end
    }
}

/// A person: an address and a display name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    pub email: EmailAddress,
    pub name: DisplayName,
}

/// A validated request to create a booking.
#[derive(Debug, Clone)]
pub struct NewBooking {
    pub title: Title,
    pub description: Option<Description>,
    pub location: Option<Location>,
    pub timezone: Timezone,
    pub range: TimeRange,
    pub attendees: Vec<Person>,
}

/// A validated change to a booking (`PATCH`): each field present replaces
/// the stored one; `Some(None)` clears an optional text.
#[derive(Debug, Clone, Default)]
pub struct BookingChanges {
    pub title: Option<Title>,
    pub description: Option<Option<Description>>,
    pub location: Option<Option<Location>>,
    pub timezone: Option<Timezone>,
    pub range: Option<TimeRange>,
    /// The full new list of attendees.
    pub attendees: Option<Vec<Person>>,
}

impl BookingChanges {
    /// `current` with these changes applied (id, organizer, status and
    /// version are the caller's to handle).
    pub fn apply_to(&self, current: &Booking) -> Booking {
        let mut b = current.clone();
        if let Some(t) = &self.title {
            b.title = t.clone();
        }
        if let Some(d) = &self.description {
            b.description = d.clone();
        }
        if let Some(l) = &self.location {
            b.location = l.clone();
        }
        if let Some(tz) = self.timezone {
            b.timezone = tz;
        }
        if let Some(r) = self.range {
            b.range = r;
        }
        if let Some(a) = &self.attendees {
            b.attendees = a.clone();
        }
        b
    }
}

crate::stored_enum! {
    /// Booking status as stored.
    pub enum BookingStatus in "bookings.status", sql: status_sql {
        Confirmed = "CONFIRMED" => CONFIRMED,
        Cancelled = "CANCELLED" => CANCELLED,
    }
}

/// A stored booking, as the API returns it and as outbox payloads carry it.
/// Every field is a domain type, read back (from a row or a payload)
/// through the parser that let it in. In JSON the range is two fields,
/// `start` and `end`.
#[derive(Debug, Clone, PartialEq)]
pub struct Booking {
    pub id: uuid::Uuid,
    pub title: Title,
    pub description: Option<Description>,
    pub location: Option<Location>,
    pub range: TimeRange,
    pub timezone: Timezone,
    pub organizer: Person,
    /// The organizer's token subject, when the booking was made with one.
    /// Never shown to anyone and not carried in outbox payloads.
    pub organizer_sub: Option<String>,
    pub attendees: Vec<Person>,
    pub status: BookingStatus,
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The JSON form of a [`Booking`]: the range as `start` and `end`, and no
/// `organizer_sub` (never shown, never queued). Read field by field through
/// each type's parser, the range checked as one.
#[derive(Serialize, Deserialize)]
struct BookingJson<T, D, L, Z, P, A> {
    id: uuid::Uuid,
    title: T,
    description: Option<D>,
    location: Option<L>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    timezone: Z,
    organizer: P,
    attendees: A,
    status: BookingStatus,
    version: i32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl Serialize for Booking {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        BookingJson {
            id: self.id,
            title: &self.title,
            description: self.description.as_ref(),
            location: self.location.as_ref(),
            start: self.range.start(),
            end: self.range.end(),
            timezone: &self.timezone,
            organizer: &self.organizer,
            attendees: &self.attendees,
            status: self.status,
            version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Booking {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let j = BookingJson::<Title, Description, Location, Timezone, Person, Vec<Person>>::deserialize(d)?;
        Ok(Booking {
            id: j.id,
            title: j.title,
            description: j.description,
            location: j.location,
            range: TimeRange::new(j.start, j.end).map_err(serde::de::Error::custom)?,
            timezone: j.timezone,
            organizer: j.organizer,
            organizer_sub: None,
            attendees: j.attendees,
            status: j.status,
            version: j.version,
            created_at: j.created_at,
            updated_at: j.updated_at,
        })
    }
}

/// Who is calling: the verified identity the API established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub person: Person,
    /// The token's `sub` (absent only in local development).
    pub subject: Option<String>,
}

impl Booking {
    /// The organizer is matched by token subject when the booking has one
    /// (an address can change, or pass to someone else; a subject cannot),
    /// else by address.
    pub fn is_organizer(&self, caller: &Caller) -> bool {
        match (&self.organizer_sub, &caller.subject) {
            (Some(owner), Some(subject)) => owner == subject,
            (Some(_), None) => false,
            (None, _) => self.organizer.email == caller.person.email,
        }
    }

    /// The organizer and the attendees may see a booking; nobody else may
    /// even learn that it exists.
    pub fn visible_to(&self, caller: &Caller) -> bool {
        self.is_organizer(caller) || self.attendees.iter().any(|a| a.email == caller.person.email)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_refuses_header_injection_and_oddities() {
        assert_eq!(EmailAddress::parse("Alice@Example.COM").unwrap().as_str(), "alice@example.com");
        for bad in [
            "alice@example.com\r\nBcc: eve@evil.test",
            "alice@example.com\n",
            "\"a b\"@example.com",
            "Alice <alice@example.com>",
            "alice",
            "alice@localhost",
            "a,b@example.com",
            "",
        ] {
            assert!(EmailAddress::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn titles_are_single_bounded_lines() {
        assert_eq!(Title::parse("  Standup ").unwrap().as_str(), "Standup");
        assert!(Title::parse("Standup\r\nBcc: x@y.z").is_err());
        assert!(Title::parse("tab\there").is_err());
        assert!(Title::parse("   ").is_err());
        assert!(Title::parse(&"x".repeat(MAX_TITLE_CHARS + 1)).is_err());
        assert!(Title::parse(&"é".repeat(MAX_TITLE_CHARS)).is_ok());
    }

    #[test]
    fn description_allows_line_breaks_only() {
        assert_eq!(Description::parse("a\r\nb").unwrap().as_str(), "a\nb");
        assert!(Description::parse("a\u{0}b").is_err());
    }

    #[test]
    fn time_ranges_and_zones() {
        let t = |s| parse_instant(s).unwrap();
        assert!(TimeRange::new(t("2026-12-01T10:00:00Z"), t("2026-12-01T10:00:00Z")).is_err());
        assert!(TimeRange::new(t("2026-12-01T10:00:00Z"), t("2026-12-01T09:00:00Z")).is_err());
        assert!(TimeRange::new(t("2026-12-01T10:00:00+01:00"), t("2026-12-01T09:30:00Z")).is_ok());
        assert!(parse_instant("2026-12-01 10:00").is_err());
        assert!(parse_instant("9999-12-31T23:30:00-01:00").is_err(), "year 10000 in UTC");
        assert!(parse_instant("0000-01-01T00:10:00+01:00").is_err(), "year -1 in UTC");
        assert_eq!(parse_instant("9999-12-31T22:30:00-01:00").unwrap().to_rfc3339(), "9999-12-31T23:30:00+00:00");
        assert!(Timezone::parse("Europe/Paris").is_ok());
        assert!(Timezone::parse("Mars/Olympus_Mons").is_err());
    }
}
