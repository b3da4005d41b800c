//! What one message says, before it is a text or an HTML part: its
//! subject and its facts, each in the recipient's language (Fluent) and
//! zone (ICU4X). Both parts are written from one [`Card`], so they state
//! the same facts in the same words (`page`'s tests compare them).
//!
//! - an invitation: when (the date once, the zone's short label once), the
//!   organizer's time when theirs reads differently, how long, where (a
//!   link when it holds one), the organizer, the other guests by name
//!   (unless the organizer hid them), the description, and that the
//!   calendar app holds the answer buttons;
//! - an update: what changed, old and new side by side, then the rest;
//! - a cancellation or a removal: what, and when it would have been;
//! - a reminder: what, when, how long from now, where.

use chrono::{DateTime, Utc};
use fluent_bundle::FluentArgs;

use super::i18n::Language;
use crate::booking::domain::{GuestList, Person, Timezone};
use crate::booking::events::{EventType, Notice};
use crate::notify::notification::Notification;

/// The other guests named by name; past this, "and N more".
pub const MAX_GUESTS_NAMED: usize = 10;

/// What kind of message it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Invitation,
    Update,
    Cancellation,
    Removal,
    Reminder,
}

/// One fact: a label and its value, with the link the value holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub label: String,
    pub value: String,
    /// An `http(s)` address inside the value (a meeting room's link).
    pub link: Option<Link>,
}

/// Where in a fact's value its link is, and where it leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The bytes of the value shown as the link.
    pub at: std::ops::Range<usize>,
    pub href: String,
}

impl Fact {
    /// The value before its link, the link's text, and the value after it.
    pub fn split(&self) -> (&str, &str, &str) {
        match &self.link {
            Some(l) => (&self.value[..l.at.start], &self.value[l.at.clone()], &self.value[l.at.end..]),
            None => (&self.value, "", ""),
        }
    }
}

/// One change of an update: the value before and the value now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub label: String,
    pub was: Fact,
    pub now: Fact,
}

/// What a message says.
#[derive(Debug, Clone)]
pub struct Card {
    pub language: Language,
    pub kind: Kind,
    pub subject: String,
    /// The meeting's title: the heading.
    pub title: String,
    /// Who did what: the first line.
    pub lead: String,
    /// "What changed", above `changes`, when there are any.
    pub changes_heading: String,
    pub changes: Vec<Change>,
    pub facts: Vec<Fact>,
    pub description: Option<String>,
    /// What to do (answer in the calendar app), or that nothing is needed.
    pub note: String,
}

/// The recipient's language, decided when the booking was written
/// (`Booking::with_languages`); English for one written before.
pub fn language(n: &Notification) -> Language {
    n.recipient.language.unwrap_or(Language::En)
}

/// The region of the recipient's (else the organizer's) tag in their
/// language: `en-US` reads a 12-hour clock, `en-GB` a 24-hour one.
fn region(n: &Notification) -> Option<&str> {
    let lang = language(n);
    let tags = [n.recipient.locale.as_ref(), n.payload.booking.organizer.locale.as_ref()];
    tags.into_iter().flatten().find(|tag| Language::of(tag) == Some(lang)).and_then(|tag| tag.region())
}

/// Nobody named a language: the compact English of before languages.
fn unnamed(n: &Notification) -> bool {
    language(n) == Language::En && n.recipient.locale.is_none() && n.payload.booking.organizer.locale.is_none()
}

/// `t` where and as the recipient reads it, for the subject: in their
/// language's long form; the compact English form ("Mon 7 Jan 2030 10:00
/// (CET)") when nobody named a language, as before languages existed.
fn when(n: &Notification, t: DateTime<Utc>) -> String {
    if unnamed(n) {
        return local_time(t, zone(n));
    }
    language(n).when(t, zone(n).tz(), region(n)).unwrap_or_else(|| local_time(t, zone(n)))
}

/// A meeting's time in `zone`, from `start` to `end`.
fn range(n: &Notification, start: DateTime<Utc>, end: DateTime<Utc>, zone: Timezone) -> String {
    language(n)
        .range(start, end, zone.tz(), region(n))
        .unwrap_or_else(|| format!("{} – {}", local_time(start, zone), local_time(end, zone)))
}

/// Where the recipient reads the times: their own time zone, else the
/// booking's (the iCalendar part keeps exact UTC times).
fn zone(n: &Notification) -> Timezone {
    n.recipient.timezone.unwrap_or(n.payload.booking.timezone)
}

fn local_time(t: DateTime<Utc>, timezone: Timezone) -> String {
    t.with_timezone(&timezone.tz()).format("%a %-d %b %Y %H:%M (%Z)").to_string()
}

/// The time of a UUIDv7.
pub fn time_of(id: uuid::Uuid) -> Option<DateTime<Utc>> {
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    DateTime::from_timestamp(secs as i64, nanos)
}

/// When the message goes: its claim's time; now, before it is claimed (a
/// preview). A late reminder says the time truly left from then.
fn sent_at(n: &Notification) -> DateTime<Utc> {
    n.claim.and_then(time_of).unwrap_or_else(Utc::now)
}

/// How long before the start a reminder says the meeting is, in compact
/// English ([`said_left`](super::i18n::said_left)), each unit that is not
/// zero ("1 day", "1 hour and 30 minutes").
pub(super) fn ahead(offset_secs: i32, left_secs: i64) -> String {
    let secs = super::i18n::said_left(offset_secs, left_secs);
    if secs < 60 {
        return "less than a minute".to_string();
    }
    let unit = |n: i64, one: &str| if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") };
    let parts: Vec<String> =
        [(secs / 86_400, "day"), (secs % 86_400 / 3600, "hour"), (secs % 3600 / 60, "minute"), (secs % 60, "second")]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, one)| unit(n, one))
            .collect();
    match parts.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => unreachable!("at least a minute"),
    }
}

/// The first `http://` or `https://` address in `text`, if any: where it
/// is (its trailing punctuation left out) and the URL it parses as.
pub fn link_in(text: &str) -> Option<Link> {
    let mut from = 0;
    for word in text.split_whitespace() {
        let offset = from + text[from..].find(word).expect("a word of the text");
        from = offset + word.len();
        let word = word.trim_end_matches(['.', ',', ';', ':', ')', ']', '>', '"', '\'', '»', '」']);
        let Some(start) = word.find("https://").or_else(|| word.find("http://")) else { continue };
        let Ok(url) = url::Url::parse(&word[start..]) else { continue };
        if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() {
            return Some(Link { at: offset + start..offset + word.len(), href: url.to_string() });
        }
    }
    None
}

fn kind(n: &Notification) -> Kind {
    match n.notice {
        Notice::Request if n.introduces || n.event_type == EventType::BookingConfirmed => Kind::Invitation,
        Notice::Request => Kind::Update,
        Notice::Cancel => Kind::Cancellation,
        Notice::Removed => Kind::Removal,
        Notice::Reminder => Kind::Reminder,
    }
}

fn person(p: &Person) -> String {
    format!("{} <{}>", p.name.as_str(), p.email)
}

impl Card {
    pub fn of(n: &Notification) -> Self {
        let b = &n.payload.booking;
        let lang = language(n);
        let kind = kind(n);
        let none = FluentArgs::new();
        let label = |key: &str| lang.text(key, &none);
        let fact = |key: &str, value: String| Fact { label: label(key), link: None, value };
        let place = |key: &str, value: &str| Fact { label: label(key), link: link_in(value), value: value.to_string() };

        let mut args = FluentArgs::new();
        args.set("title", b.title.as_str());
        args.set("when", when(n, b.range.start()));
        let subject = lang.text(
            match kind {
                Kind::Invitation => "subject-invitation",
                Kind::Update => "subject-updated",
                Kind::Cancellation => "subject-cancelled",
                Kind::Removal => "subject-removed",
                Kind::Reminder => "subject-reminder",
            },
            &args,
        );
        args.set("who", person(&b.organizer));
        let lead_key = match kind {
            Kind::Invitation => "body-invited",
            Kind::Update if n.event_type == EventType::BookingRescheduled => "body-moved",
            Kind::Update => "body-updated",
            Kind::Cancellation => "body-cancelled",
            Kind::Removal => "body-removed",
            Kind::Reminder => {
                let offset = n.payload.reminder.map(|r| r.secs()).unwrap_or(0);
                let left = (b.range.start() - sent_at(n)).num_seconds();
                args.set("left", if unnamed(n) { ahead(offset, left) } else { lang.left(offset, left) });
                "body-reminder"
            }
        };
        let lead = lang.text(lead_key, &args);

        let now_when = range(n, b.range.start(), b.range.end(), zone(n));
        let mut changes = Vec::new();
        let mut facts = Vec::new();
        // What an update changed is said once, old beside new, not again
        // among the facts.
        let (mut moved, mut replaced) = (false, false);
        if kind == Kind::Update {
            if let (Some(start), Some(end)) = (n.payload.previous_start, n.payload.previous_end) {
                moved = true;
                changes.push(Change {
                    label: label("label-when"),
                    was: fact("label-was", range(n, start, end, zone(n))),
                    now: fact("label-now", now_when.clone()),
                });
            }
            if let Some(before) = &n.payload.before {
                if before.title != b.title {
                    changes.push(Change {
                        label: label("label-title"),
                        was: fact("label-was", before.title.as_str().to_string()),
                        now: fact("label-now", b.title.as_str().to_string()),
                    });
                }
                if before.location != b.location {
                    replaced = true;
                    let text = |l: &Option<crate::booking::domain::Location>| {
                        l.as_ref().map(|l| l.as_str().to_string()).unwrap_or_else(|| "—".to_string())
                    };
                    // The old place's link no longer leads to the meeting.
                    changes.push(Change {
                        label: label("label-where"),
                        was: fact("label-was", text(&before.location)),
                        now: place("label-now", &text(&b.location)),
                    });
                }
            }
        }
        if !moved {
            let key = if matches!(kind, Kind::Cancellation) { "label-planned" } else { "label-when" };
            facts.push(fact(key, now_when.clone()));
        }
        let theirs = b.organizer.timezone.unwrap_or(b.timezone);
        if matches!(kind, Kind::Invitation | Kind::Update) {
            let organizer_when = range(n, b.range.start(), b.range.end(), theirs);
            if organizer_when != now_when {
                facts.push(fact("label-organizer-time", organizer_when));
            }
        }
        if !matches!(kind, Kind::Cancellation | Kind::Removal) {
            facts.push(fact("label-duration", lang.length((b.range.end() - b.range.start()).num_seconds())));
        }
        if let (Some(l), false) = (&b.location, replaced || kind == Kind::Removal) {
            facts.push(place("label-where", l.as_str()));
        }
        facts.push(fact("label-organizer", person(&b.organizer)));
        if matches!(kind, Kind::Invitation | Kind::Update) && b.guest_list == GuestList::Visible {
            let others: Vec<&str> =
                b.attendees.iter().filter(|a| a.email != n.recipient.email).map(|a| a.name.as_str()).collect();
            if !others.is_empty() {
                let mut named = others.iter().take(MAX_GUESTS_NAMED).copied().collect::<Vec<_>>().join(", ");
                if others.len() > MAX_GUESTS_NAMED {
                    let mut args = FluentArgs::new();
                    args.set("n", others.len() - MAX_GUESTS_NAMED);
                    named = format!("{named} {}", lang.text("more-guests", &args));
                }
                facts.push(fact("label-guests", named));
            }
        }
        let note = match kind {
            Kind::Invitation | Kind::Update => "note-answer",
            Kind::Cancellation => "note-cancelled",
            Kind::Removal => "note-removed",
            Kind::Reminder => "note-reminder",
        };
        Card {
            language: lang,
            kind,
            subject,
            title: b.title.as_str().to_string(),
            lead,
            changes_heading: label("heading-changes"),
            changes,
            facts,
            description: match kind {
                Kind::Invitation | Kind::Update | Kind::Reminder => {
                    b.description.as_ref().map(|d| d.as_str().to_string())
                }
                Kind::Cancellation | Kind::Removal => None,
            },
            note: label(note),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reminder_says_its_offset_on_time_and_the_time_left_when_late() {
        assert_eq!(ahead(900, 900), "15 minutes");
        assert_eq!(ahead(900, 3600), "15 minutes", "early (a test): its offset");
        assert_eq!(ahead(3600, 3600), "1 hour");
        assert_eq!(ahead(5400, 5400), "1 hour and 30 minutes");
        assert_eq!(ahead(3601, 3601), "1 hour and 1 second");
        assert_eq!(ahead(90_000, 90_000), "1 day and 1 hour");
        assert_eq!(ahead(93_660, 93_660), "1 day, 2 hours and 1 minute");
        assert_eq!(ahead(900, 659), "10 minutes", "four minutes late");
        assert_eq!(ahead(900, 30), "less than a minute");
    }

    #[test]
    fn a_place_holding_an_address_links_to_it_and_nothing_else_is_a_link() {
        let href = |t: &str| link_in(t).map(|l| l.href);
        assert_eq!(href("https://meet.example.com/abc"), Some("https://meet.example.com/abc".into()));
        assert_eq!(href("Room 4 (https://meet.example.com/abc)."), Some("https://meet.example.com/abc".into()));
        assert_eq!(href("Salle 4 « https://x.example/a »"), Some("https://x.example/a".into()));
        let place = Fact {
            label: "Where:".into(),
            value: "Room 4 (https://x.example)".into(),
            link: link_in("Room 4 (https://x.example)"),
        };
        assert_eq!(place.split(), ("Room 4 (", "https://x.example", ")"));
        assert_eq!(place.link.unwrap().href, "https://x.example/", "as it parses");
        assert_eq!(link_in("javascript:alert(1)"), None);
        assert_eq!(link_in("ftp://example.com/x"), None);
        assert_eq!(link_in("Room 4, floor 2"), None);
        assert_eq!(link_in("https://"), None);
    }
}
