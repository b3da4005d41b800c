//! When a booking's attendees are reminded: offsets before its start,
//! written as ISO 8601 durations (`PT24H`, `PT15M`, `P2D`), read with the
//! `iso8601` crate.
//!
//! An offset is an exact length of time: weeks, days, hours, minutes and
//! whole seconds. Years and months have no fixed length and are refused,
//! as are fractions of a second. A day is 24 hours: "P1D before a meeting
//! at 09:00" is 09:00 the day before in UTC, whatever a time zone's clocks
//! do in between.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::parse::ParseError;

/// At most this many reminders per booking.
pub const MAX_REMINDERS: usize = 5;
/// The shortest offset: a reminder must leave time to read it.
pub const MIN_REMINDER_SECS: i32 = 5 * 60;
/// The longest offset.
pub const MAX_REMINDER_SECS: i32 = 30 * 24 * 3600;

/// One offset before the start, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reminder(i32);

deserialize_via_parse!(Reminder);

impl Serialize for Reminder {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Reminder {
    /// Parses one ISO 8601 duration; the error names the field `reminders`.
    pub fn parse(raw: &str) -> Result<Self, ParseError> {
        let refuse = |problem: String| Err(ParseError::new("reminders", problem));
        if raw.starts_with('-') {
            return refuse(format!("{raw:?} is negative: an offset counts back from the start, like PT15M"));
        }
        // The whole text is the duration: the crate's `FromStr` ignores what
        // follows one (`PT1H30` would read as an hour).
        let duration = match iso8601::parsers::parse_duration(raw.as_bytes()) {
            // A `T` with no time after it is not ISO 8601 either.
            Ok((rest, duration)) if rest.is_empty() && !raw.ends_with('T') => duration,
            _ => return refuse(format!("{raw:?} is not an ISO 8601 duration (like PT15M, PT24H or P2D)")),
        };
        let secs: i64 = match duration {
            iso8601::Duration::YMDHMS { year, month, .. } if year > 0 || month > 0 => {
                return refuse(format!("{raw:?}: years and months have no fixed length; use days (P30D) or hours"));
            }
            iso8601::Duration::YMDHMS { millisecond, .. } if millisecond > 0 => {
                return refuse(format!("{raw:?}: use whole seconds"));
            }
            iso8601::Duration::YMDHMS { day, hour, minute, second, .. } => {
                i64::from(day) * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second)
            }
            iso8601::Duration::Weeks(w) => i64::from(w) * 7 * 86_400,
        };
        if secs <= 0 {
            return refuse(format!("{raw:?} is zero: a reminder comes before the start"));
        }
        if secs < i64::from(MIN_REMINDER_SECS) || secs > i64::from(MAX_REMINDER_SECS) {
            return refuse(format!("{raw:?} must lie between 5 minutes (PT5M) and 30 days (P30D)"));
        }
        Ok(Self(secs as i32))
    }

    /// From stored seconds, checked like a parsed one.
    pub fn from_secs(secs: i32) -> Result<Self, ParseError> {
        if !(MIN_REMINDER_SECS..=MAX_REMINDER_SECS).contains(&secs) {
            return Err(ParseError::new("reminders", format!("{secs} s is not between 5 minutes and 30 days")));
        }
        Ok(Self(secs))
    }

    pub fn secs(self) -> i32 {
        self.0
    }

    pub fn duration(self) -> chrono::Duration {
        chrono::Duration::seconds(i64::from(self.0))
    }
}

/// The canonical form: hours, minutes and seconds (`PT24H`, `PT1H30M`), so
/// one offset always reads back the same, whatever form it was sent in.
impl fmt::Display for Reminder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (h, m, s) = (self.0 / 3600, self.0 % 3600 / 60, self.0 % 60);
        f.write_str("PT")?;
        if h > 0 {
            write!(f, "{h}H")?;
        }
        if m > 0 {
            write!(f, "{m}M")?;
        }
        if s > 0 {
            write!(f, "{s}S")?;
        }
        Ok(())
    }
}

/// A booking's reminders: at most [`MAX_REMINDERS`], no offset twice,
/// the earliest reminder (longest offset) first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Reminders(Vec<Reminder>);

impl<'de> Deserialize<'de> for Reminders {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Reminders::new(Vec::<Reminder>::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl Reminders {
    /// Checks the count and duplicates; the error names the field `reminders`.
    pub fn new(mut list: Vec<Reminder>) -> Result<Self, ParseError> {
        if list.len() > MAX_REMINDERS {
            return Err(ParseError::new(
                "reminders",
                format!("at most {MAX_REMINDERS} reminders per booking (got {})", list.len()),
            ));
        }
        list.sort_by(|a, b| b.cmp(a));
        if let Some(w) = list.windows(2).find(|w| w[0] == w[1]) {
            return Err(ParseError::new("reminders", format!("{} is listed twice", w[0])));
        }
        Ok(Self(list))
    }

    /// A comma-separated list (the `DEFAULT_REMINDERS` setting); empty: none.
    pub fn parse_list(raw: &str) -> Result<Self, ParseError> {
        let list = raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(Reminder::parse);
        Self::new(list.collect::<Result<Vec<_>, _>>()?)
    }

    /// From stored seconds.
    pub fn from_secs(secs: &[i32]) -> Result<Self, ParseError> {
        Self::new(secs.iter().map(|s| Reminder::from_secs(*s)).collect::<Result<Vec<_>, _>>()?)
    }

    pub fn secs(&self) -> Vec<i32> {
        self.0.iter().map(|r| r.secs()).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = Reminder> + '_ {
        self.0.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::str::FromStr for Reminders {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_list(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_read_as_exact_durations_and_print_in_one_form() {
        let p = |s: &str| Reminder::parse(s).map(|r| r.to_string());
        assert_eq!(p("PT24H").unwrap(), "PT24H");
        assert_eq!(p("P1D").unwrap(), "PT24H");
        assert_eq!(p("P1W").unwrap(), "PT168H");
        assert_eq!(p("PT90M").unwrap(), "PT1H30M");
        assert_eq!(p("PT5M").unwrap(), "PT5M");
        assert_eq!(p("P30D").unwrap(), "PT720H");
        let bad = ["PT4M59S", "P31D", "PT0S", "P0D", "-PT15M", "PT", "15 minutes", "P1M", "P1Y", "PT15.5M", ""];
        // Trailing text is never ignored, and units are capitals.
        let trailing = ["PT1H30", "PT24H,PT15M", "PT15m", " PT15M", "PT15M ", "PT15MX", "P1DT"];
        for bad in bad.into_iter().chain(trailing) {
            let e = Reminder::parse(bad).unwrap_err();
            assert_eq!(e.field, "reminders", "{bad}: {e}");
        }
        assert!(Reminder::parse("-PT15M").unwrap_err().problem.contains("negative"));
        assert!(Reminder::parse("PT0M").unwrap_err().problem.contains("zero"));
    }

    #[test]
    fn a_list_has_at_most_five_no_offset_twice_earliest_first() {
        let r = |s: &str| Reminder::parse(s).unwrap();
        let list = Reminders::new(vec![r("PT15M"), r("PT24H")]).unwrap();
        assert_eq!(serde_json::to_string(&list).unwrap(), r#"["PT24H","PT15M"]"#);
        assert!(Reminders::new(vec![r("PT1H"), r("PT60M")]).unwrap_err().problem.contains("twice"));
        let six = ["PT5M", "PT6M", "PT7M", "PT8M", "PT9M", "PT10M"].map(r).to_vec();
        assert!(Reminders::new(six).unwrap_err().problem.contains("at most 5"));
        assert_eq!(Reminders::parse_list(" PT24H, PT15M ").unwrap(), list);
        assert!(Reminders::parse_list("").unwrap().is_empty());
        assert_eq!(Reminders::from_secs(&list.secs()).unwrap(), list);
        assert!(serde_json::from_str::<Reminders>(r#"["PT1H","PT1H"]"#).is_err());
    }
}
