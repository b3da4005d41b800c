//! When a booking happens: its instants, its range, the window its start
//! must lie in, and the zone its invitation shows times in.

use chrono::{DateTime, Datelike, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::parse::{ParseError, MAX_DURATION_DAYS};

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
    // chrono reads 23:59:60 as a leap second; Postgres would store the next
    // second. Refused rather than moved.
    if t.timestamp_subsec_nanos() >= 1_000_000_000 {
        return Err(ParseError::new("instant", "must not be a leap second (:60); use :59 or the next minute"));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
