//! Each recipient's language: the message texts, from Fluent files in
//! `shared/locales/<language>/mail.ftl` (a contributor adds a language
//! without touching Rust), and dates, times and time zone names from
//! ICU4X's CLDR data.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use chrono::{DateTime, Datelike, Offset, Timelike, Utc};
use fluent_bundle::concurrent::FluentBundle;
use fluent_bundle::{FluentArgs, FluentResource};
use unic_langid::LanguageIdentifier;

pub use crate::booking::domain::Language;

impl Language {
    fn source(self) -> &'static str {
        match self {
            Language::En => include_str!("../../../locales/en/mail.ftl"),
            Language::Fr => include_str!("../../../locales/fr/mail.ftl"),
            Language::De => include_str!("../../../locales/de/mail.ftl"),
            Language::Es => include_str!("../../../locales/es/mail.ftl"),
            Language::Ja => include_str!("../../../locales/ja/mail.ftl"),
        }
    }

    fn bundle(self) -> &'static FluentBundle<FluentResource> {
        static BUNDLES: [OnceLock<FluentBundle<FluentResource>>; 5] =
            [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
        let i = Language::ALL.iter().position(|l| *l == self).expect("shipped");
        BUNDLES[i].get_or_init(|| {
            let id: LanguageIdentifier = self.code().parse().expect("a shipped code");
            let mut bundle = FluentBundle::new_concurrent(vec![id]);
            // Titles and names are the organizer's own text: no isolation
            // marks around them in a plain-text mail.
            bundle.set_use_isolating(false);
            let resource = FluentResource::try_new(self.source().to_string())
                .unwrap_or_else(|(_, errors)| panic!("locales/{}/mail.ftl: {errors:?} (tested)", self.code()));
            bundle.add_resource(resource).expect("no key twice (tested)");
            bundle
        })
    }

    /// The message `key` with `args`, in this language (English if this
    /// language lacks it, which a test forbids).
    pub fn text(self, key: &str, args: &FluentArgs<'_>) -> String {
        let (bundle, message) = match self.bundle().get_message(key) {
            Some(m) => (self.bundle(), m),
            None => (Language::En.bundle(), Language::En.bundle().get_message(key).expect("an English key")),
        };
        let mut errors = Vec::new();
        let pattern = message.value().expect("a message with a value");
        bundle.format_pattern(pattern, Some(args), &mut errors).into_owned()
    }

    /// How long until a start, in this language: the offset when on time,
    /// else the time truly left, in days, hours and minutes.
    pub fn left(self, offset_secs: i32, left_secs: i64) -> String {
        self.span(said_left(offset_secs, left_secs), "left")
    }

    /// How long a meeting lasts, in this language ("1 heure 30 minutes").
    pub fn length(self, secs: i64) -> String {
        self.span(secs, "length")
    }

    /// A length of time in days, hours and minutes, by the messages
    /// `{kind}-days`, `-hours` and `-minutes` (German says "in 2 Tagen"
    /// but lasts "2 Tage"); under a minute, said so.
    fn span(self, secs: i64, kind: &str) -> String {
        if secs < 60 {
            return self.text("left-under-a-minute", &FluentArgs::new());
        }
        let parts: Vec<String> =
            [(secs / 86_400, "days"), (secs % 86_400 / 3600, "hours"), (secs % 3600 / 60, "minutes")]
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, unit)| {
                    let mut args = FluentArgs::new();
                    args.set("n", n);
                    self.text(&format!("{kind}-{unit}"), &args)
                })
                .collect();
        parts.join(" ")
    }

    /// From `start` to `end` in `zone`, as a person there reads a meeting's
    /// time: the date once when both ends fall on one local day ("Monday,
    /// January 7, 2030, 10:00 – 11:00"), both dates when not, and the zone's
    /// short label once ("GMT+1", "JST"), not its long name at each end.
    ///
    /// None for a date ICU4X's calendar does not hold (as [`Self::when`]).
    pub fn range(
        self,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        zone: chrono_tz::Tz,
        region: Option<&str>,
    ) -> Option<String> {
        let formatters = formatters(self, region);
        let (from, to) = (Local::of(start, zone)?, Local::of(end, zone)?);
        let mut args = FluentArgs::new();
        args.set("zone", formatters.zone_short.format(&from.zone(zone)).to_string());
        let key = if from.date == to.date {
            args.set("date", formatters.date.format(&from.date.to_calendar(icu_calendar::Gregorian)).to_string());
            args.set("from", formatters.time.format(&from.time).to_string());
            args.set("to", formatters.time.format(&to.time).to_string());
            "when-one-day"
        } else {
            args.set("from", formatters.date_time.format(&from.gregorian()).to_string());
            args.set("to", formatters.date_time.format(&to.gregorian()).to_string());
            "when-days"
        };
        Some(self.text(key, &args))
    }

    /// `at` in `zone`, by the conventions of this language, or of
    /// `region`'s variant of it (`en-US` a 12-hour clock, `en-GB` a
    /// 24-hour one): the long date, the time, and the zone's name ("lundi 7
    /// janvier 2030 à 10:00 (heure normale d’Europe centrale)").
    ///
    /// None for a date ICU4X's calendar does not hold (a local year past
    /// 9999: a booking at the very end of the range, seen from a zone ahead
    /// of UTC); the caller writes it its own way.
    pub fn when(self, at: DateTime<Utc>, zone: chrono_tz::Tz, region: Option<&str>) -> Option<String> {
        let local = Local::of(at, zone)?;
        let formatters = formatters(self, region);
        let when = formatters.date_time.format(&local.gregorian());
        Some(format!("{when} ({})", formatters.zone.format(&local.zone(zone))))
    }
}

/// A moment on a zone's wall clock, as ICU4X takes it.
struct Local {
    date: icu_calendar::Date<icu_calendar::Iso>,
    time: icu_time::Time,
    offset: Option<icu_time::zone::UtcOffset>,
}

impl Local {
    /// None past the calendar's years (see [`Language::when`]).
    fn of(at: DateTime<Utc>, zone: chrono_tz::Tz) -> Option<Self> {
        let local = at.with_timezone(&zone);
        Some(Self {
            date: icu_calendar::Date::try_new_iso(local.year(), local.month() as u8, local.day() as u8).ok()?,
            time: icu_time::Time::try_new(local.hour() as u8, local.minute() as u8, 0, 0).ok()?,
            offset: icu_time::zone::UtcOffset::try_from_seconds(local.offset().fix().local_minus_utc()).ok(),
        })
    }

    fn gregorian(&self) -> icu_time::DateTime<icu_calendar::Gregorian> {
        icu_time::DateTime { date: self.date.to_calendar(icu_calendar::Gregorian), time: self.time }
    }

    /// The zone at this moment, for its name.
    fn zone(&self, zone: chrono_tz::Tz) -> icu_time::TimeZoneInfo<icu_time::zone::models::AtTime> {
        icu_time::zone::IanaParser::new()
            .parse(zone.name())
            .with_offset(self.offset)
            .at_date_time(icu_time::DateTime { date: self.date, time: self.time })
    }
}

/// What a reminder says is left before the start, in seconds: its offset
/// when it goes on time (or early), else the time truly left, in whole
/// minutes.
pub(crate) fn said_left(offset_secs: i32, left_secs: i64) -> i64 {
    if left_secs + 60 >= i64::from(offset_secs) {
        i64::from(offset_secs)
    } else {
        left_secs / 60 * 60
    }
}

/// One locale's formatters: a long date with and without its time, a
/// time, and a zone's long and short names.
struct Formatters {
    date_time: icu_datetime::FixedCalendarDateTimeFormatter<icu_calendar::Gregorian, icu_datetime::fieldsets::YMDET>,
    date: icu_datetime::FixedCalendarDateTimeFormatter<icu_calendar::Gregorian, icu_datetime::fieldsets::YMDE>,
    time: icu_datetime::NoCalendarFormatter<icu_datetime::fieldsets::T>,
    zone: icu_datetime::NoCalendarFormatter<icu_datetime::fieldsets::zone::SpecificLong>,
    zone_short: icu_datetime::NoCalendarFormatter<icu_datetime::fieldsets::zone::SpecificShort>,
}

/// A language, and the region of its variant (its subtag's bytes).
type Variant = (Language, Option<[u8; 3]>);

/// How many regional variants are kept built (a recipient's region is
/// their input: past this, the language's own conventions serve).
const MAX_VARIANTS: usize = 64;

/// The formatters of `language` in `region`, built once each (a few
/// milliseconds) and kept: every message renders several dates.
fn formatters(language: Language, region: Option<&str>) -> Arc<Formatters> {
    static BUILT: OnceLock<Mutex<HashMap<Variant, Arc<Formatters>>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    // A region subtag is 2 letters or 3 digits (BCP 47).
    let key = (
        language,
        region.map(|r| {
            let mut k = [0u8; 3];
            for (to, from) in k.iter_mut().zip(r.bytes()) {
                *to = from;
            }
            k
        }),
    );
    {
        let built = built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = built.get(&key) {
            return f.clone();
        }
        if region.is_some() && built.len() >= MAX_VARIANTS {
            drop(built);
            return formatters(language, None);
        }
    }
    let tag = match region {
        Some(r) => format!("{}-{r}", language.code()),
        None => language.code().to_string(),
    };
    let locale: icu_locale_core::Locale = tag.parse().unwrap_or_else(|_| language.code().parse().expect("shipped"));
    let prefs = (&locale).into();
    let made = Arc::new(Formatters {
        date_time: icu_datetime::FixedCalendarDateTimeFormatter::try_new(
            prefs,
            icu_datetime::fieldsets::YMDE::long().with_time_hm(),
        )
        .expect("compiled data"),
        date: icu_datetime::FixedCalendarDateTimeFormatter::try_new(prefs, icu_datetime::fieldsets::YMDE::long())
            .expect("compiled data"),
        time: icu_datetime::NoCalendarFormatter::try_new(prefs, icu_datetime::fieldsets::T::hm())
            .expect("compiled data"),
        zone: icu_datetime::NoCalendarFormatter::try_new(prefs, icu_datetime::fieldsets::zone::SpecificLong)
            .expect("compiled data"),
        zone_short: icu_datetime::NoCalendarFormatter::try_new(prefs, icu_datetime::fieldsets::zone::SpecificShort)
            .expect("compiled data"),
    });
    built.lock().unwrap_or_else(|e| e.into_inner()).insert(key, made.clone());
    made
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn keys(l: Language) -> Vec<String> {
        let resource = FluentResource::try_new(l.source().to_string()).unwrap_or_else(|(_, e)| panic!("{l:?}: {e:?}"));
        resource
            .entries()
            .filter_map(|e| match e {
                fluent_syntax::ast::Entry::Message(m) => Some(m.id.name.to_string()),
                _ => None,
            })
            .collect()
    }

    /// Each message's variables (`$title`, `$when`, ...), anywhere in it.
    fn variables(l: Language) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
        use fluent_syntax::ast::{Expression, InlineExpression, Pattern, PatternElement};
        fn of_inline(e: &InlineExpression<&str>, out: &mut std::collections::BTreeSet<String>) {
            match e {
                InlineExpression::VariableReference { id } => {
                    out.insert(id.name.to_string());
                }
                InlineExpression::Placeable { expression } => of_expression(expression, out),
                _ => {}
            }
        }
        fn of_expression(e: &Expression<&str>, out: &mut std::collections::BTreeSet<String>) {
            match e {
                Expression::Inline(i) => of_inline(i, out),
                Expression::Select { selector, variants } => {
                    of_inline(selector, out);
                    for v in variants {
                        of_pattern(&v.value, out);
                    }
                }
            }
        }
        fn of_pattern(p: &Pattern<&str>, out: &mut std::collections::BTreeSet<String>) {
            for e in &p.elements {
                if let PatternElement::Placeable { expression } = e {
                    of_expression(expression, out);
                }
            }
        }
        let resource = fluent_syntax::parser::parse(l.source()).unwrap_or_else(|(_, e)| panic!("{l:?}: {e:?}"));
        resource
            .body
            .iter()
            .filter_map(|e| match e {
                fluent_syntax::ast::Entry::Message(m) => {
                    let mut out = std::collections::BTreeSet::new();
                    if let Some(p) = &m.value {
                        of_pattern(p, &mut out);
                    }
                    Some((m.id.name.to_string(), out))
                }
                _ => None,
            })
            .collect()
    }

    /// A translation that drops `{ $when }` would tell its reader nothing
    /// of the time: each message uses the variables English's does.
    #[test]
    fn every_shipped_languages_messages_use_the_variables_englishs_do() {
        let english = variables(Language::En);
        assert!(english["subject-invitation"].contains("when"));
        for l in Language::ALL {
            let own = variables(l);
            for (key, vars) in &english {
                assert_eq!(own.get(key), Some(vars), "{}: {key}", l.code());
            }
        }
    }

    #[test]
    fn every_shipped_language_has_every_key_english_has() {
        let english = keys(Language::En);
        assert!(english.len() > 10);
        for l in Language::ALL {
            let own = keys(l);
            let missing: Vec<&String> = english.iter().filter(|k| !own.contains(k)).collect();
            assert!(missing.is_empty(), "{} lacks {missing:?}", l.code());
        }
    }

    #[test]
    fn dates_times_and_zones_read_by_each_languages_conventions() {
        let at = Utc.with_ymd_and_hms(2030, 1, 7, 9, 0, 0).unwrap();
        assert_eq!(
            Language::Fr.when(at, chrono_tz::Europe::Paris, None).unwrap(),
            "lundi 7 janvier 2030 à 10:00 (heure normale d’Europe centrale)"
        );
        assert_eq!(
            Language::Ja.when(at, chrono_tz::Asia::Tokyo, Some("JP")).unwrap(),
            "2030年1月7日月曜日 18:00 (日本標準時)"
        );
        let us = Language::En.when(at, chrono_tz::America::New_York, Some("US")).unwrap();
        assert_eq!(us, "Monday, January 7, 2030 at 4:00\u{202f}AM (Eastern Standard Time)");
        let gb = Language::En.when(at, chrono_tz::Europe::London, Some("GB")).unwrap();
        assert!(gb.contains("09:00") && !gb.contains("AM"), "a 24-hour clock in Britain: {gb}");
        let odd = Language::En.when(at, chrono_tz::Europe::London, Some("ZZ")).unwrap();
        assert!(odd.starts_with("Monday, January 7, 2030"), "an unknown region: the language's own: {odd}");
        let last = Utc.with_ymd_and_hms(9999, 12, 31, 20, 0, 0).unwrap();
        assert_eq!(Language::Fr.when(last, chrono_tz::Pacific::Kiritimati, None), None, "year 10000 there");
        for r in 0..MAX_VARIANTS + 3 {
            let region = format!("{:03}", 100 + r);
            assert!(Language::En.when(at, chrono_tz::Europe::London, Some(&region)).is_some());
        }
        assert_eq!(Language::En.when(at, chrono_tz::America::New_York, Some("US")).unwrap(), us, "still kept");
        let mut args = FluentArgs::new();
        args.set("n", 2);
        assert_eq!(Language::De.text("left-hours", &args), "2 Stunden");
        let tag = |t: &str| crate::booking::domain::LocaleTag::parse(t).unwrap();
        assert_eq!(Language::of(&tag("pt-BR")), None);
        assert_eq!(Language::of(&tag("fr-CA")), Some(Language::Fr));
    }
}
