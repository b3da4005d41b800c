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

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Read back through the same parser that let the value in at the edge:
/// a stored or queued value that no longer parses is refused, not trusted.
macro_rules! deserialize_via_parse {
    ($name:ident) => {
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                $name::parse(&raw).map_err(serde::de::Error::custom)
            }
        }
    };
}

mod locale;
mod mailbox;
mod parse;
mod reminders;
mod text;
mod time;

pub use locale::{Language, LocaleTag};
pub use parse::{
    ParseError, MAX_ATTENDEES, MAX_DESCRIPTION_CHARS, MAX_DURATION_DAYS, MAX_EMAIL_CHARS, MAX_LOCATION_CHARS,
    MAX_NAME_CHARS, MAX_TITLE_CHARS,
};
pub use reminders::{Reminder, Reminders, MAX_REMINDERS, MAX_REMINDER_SECS, MIN_REMINDER_SECS};
pub use text::{Description, DisplayName, EmailAddress, Location, Title};
pub use time::{parse_instant, StartWindow, TimeRange, Timezone};

/// A person: an address, a display name, and (an attendee's) own time
/// zone: their messages show times there. Absent: the booking's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    pub email: EmailAddress,
    pub name: DisplayName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<Timezone>,
    /// Their own language, as they gave it (a BCP 47 tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locale: Option<LocaleTag>,
    /// The shipped language their messages are written in, decided when
    /// the booking is written ([`Booking::with_languages`]); absent on an
    /// organizer, and on an attendee written before languages existed.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "Language::deserialize_lenient")]
    pub language: Option<Language>,
}

impl Person {
    pub fn new(email: EmailAddress, name: DisplayName) -> Self {
        Self { email, name, timezone: None, locale: None, language: None }
    }
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
    pub reminders: Reminders,
    /// The organizer's own language (the body's `locale`); absent: the
    /// token's `locale` claim, if it has one.
    pub organizer_locale: Option<LocaleTag>,
    pub guest_list: GuestList,
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
    /// The full new list of reminders (empty: none).
    pub reminders: Option<Reminders>,
    /// The organizer's own language (`Some(None)` clears it).
    pub organizer_locale: Option<Option<LocaleTag>>,
    pub guest_list: Option<GuestList>,
}

impl NewBooking {
    /// With each attendee's language decided, for an organizer who reads
    /// `organizer` ([`Booking::with_languages`]).
    pub fn with_languages(mut self, organizer: Option<&LocaleTag>, default: Language) -> NewBooking {
        assign_languages(&mut self.attendees, organizer, default);
        self
    }
}

/// Sets each attendee's [`Person::language`]: see [`Booking::with_languages`].
fn assign_languages(attendees: &mut [Person], organizer: Option<&LocaleTag>, default: Language) {
    let organizers = organizer.and_then(Language::of);
    for a in attendees {
        a.language = Some(match &a.locale {
            Some(tag) => Language::of(tag).unwrap_or(default),
            None => organizers.unwrap_or(default),
        });
    }
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
        if let Some(r) = &self.reminders {
            b.reminders = r.clone();
        }
        if let Some(l) = &self.organizer_locale {
            b.organizer.locale = l.clone();
        }
        if let Some(g) = self.guest_list {
            b.guest_list = g;
        }
        b
    }
}

crate::stored_enum! {
    /// Whether the attendees see each other: in each one's message (the
    /// other guests, and the calendar part's `ATTENDEE`s) and in their
    /// reading of the booking. Visible unless the organizer hides them.
    pub enum GuestList in "bookings.guest_list", sql: guest_list_sql {
        Visible = "visible" => VISIBLE,
        Hidden = "hidden" => HIDDEN,
    }
}

impl Default for GuestList {
    /// As Google Calendar's and Outlook's: invitees see each other.
    fn default() -> Self {
        GuestList::Visible
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
    pub guest_list: GuestList,
    /// When attendees are reminded, before the start.
    pub reminders: Reminders,
    pub status: BookingStatus,
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The JSON form of a [`Booking`]: the range as `start` and `end`, and no
/// `organizer_sub` (never shown, never queued). Read field by field through
/// each type's parser, the range checked as one. `reminders` is absent from
/// payloads written before bookings had them: none.
#[derive(Serialize, Deserialize)]
struct BookingJson<T, D, L, Z, P, A, R> {
    id: uuid::Uuid,
    title: T,
    description: Option<D>,
    location: Option<L>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    timezone: Z,
    organizer: P,
    attendees: A,
    /// Absent from payloads written before it existed: visible.
    #[serde(default)]
    guest_list: GuestList,
    #[serde(default)]
    reminders: R,
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
            guest_list: self.guest_list,
            reminders: &self.reminders,
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
        let j = BookingJson::<Title, Description, Location, Timezone, Person, Vec<Person>, Reminders>::deserialize(d)?;
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
            guest_list: j.guest_list,
            reminders: j.reminders,
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

impl Caller {
    /// Who the caller is for what is theirs (usage counters, idempotency
    /// keys, the overlap rule): the token subject when there is one, since
    /// an address can change hands or be changed to dodge a limit; else
    /// the address. The overlap constraint of migration V17 spells the
    /// same key in SQL.
    pub fn key(&self) -> String {
        match &self.subject {
            Some(sub) => format!("sub:{sub}"),
            None => format!("email:{}", self.person.email),
        }
    }
}

impl Booking {
    /// Whether this (`other` changed in memory, same version) differs from
    /// `other` only in what people asked for themselves (an attendee's own
    /// time zone or language, the organizer's language): no news to anyone.
    pub fn differs_only_in_preferences(&self, other: &Booking) -> bool {
        let plain = |b: &Booking| Booking {
            attendees: b.attendees.iter().map(|p| Person::new(p.email.clone(), p.name.clone())).collect(),
            organizer: Person::new(b.organizer.email.clone(), b.organizer.name.clone()),
            ..b.clone()
        };
        self != other && plain(self) == plain(other)
    }

    /// This booking with the language each attendee's messages are written
    /// in: their own tag's, when we ship it; without a tag of their own, the
    /// organizer's, when we ship that; else `default` (`DEFAULT_LOCALE`).
    /// A tag we do not ship (`pt-BR`) does not fall to the organizer's: the
    /// person said what they read, and the deployment's default is the
    /// language it chose for everyone.
    pub fn with_languages(mut self, default: Language) -> Booking {
        assign_languages(&mut self.attendees, self.organizer.locale.as_ref(), default);
        self
    }

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

    /// The booking as `caller` may read it: whole for its organizer; for an
    /// attendee of a booking whose guest list is hidden, with themselves as
    /// its only attendee.
    pub fn as_seen_by(mut self, caller: &Caller) -> Booking {
        if self.guest_list == GuestList::Hidden && !self.is_organizer(caller) {
            self.attendees.retain(|a| a.email == caller.person.email);
        }
        self
    }

    /// The organizer and the attendees may see a booking; nobody else may
    /// even learn that it exists.
    pub fn visible_to(&self, caller: &Caller) -> bool {
        self.is_organizer(caller) || self.attendees.iter().any(|a| a.email == caller.person.email)
    }
}
