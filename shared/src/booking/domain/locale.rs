//! A person's language: the BCP 47 tag they gave (`fr`, `pt-BR`, `ja-JP`),
//! checked and kept in its canonical form, and the shipped [`Language`]
//! their messages are written in. The texts themselves are the messages'
//! business (`notify::render::i18n`, `shared/locales`).

use serde::{Deserialize, Serialize};

use super::parse::ParseError;

/// A well-formed BCP 47 language tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocaleTag(Box<unic_langid::LanguageIdentifier>);

deserialize_via_parse!(LocaleTag);

impl Serialize for LocaleTag {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl LocaleTag {
    /// The error names the field `locale`.
    pub fn parse(raw: &str) -> Result<Self, ParseError> {
        let malformed =
            || ParseError::new("locale", format!("{raw:?} is not a BCP 47 language tag (like fr or pt-BR)"));
        if raw.is_empty() || raw.len() > 35 || !raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(malformed());
        }
        let id: unic_langid::LanguageIdentifier = raw.parse().map_err(|_| malformed())?;
        if id.language.is_empty() {
            return Err(malformed());
        }
        Ok(Self(Box::new(id)))
    }

    pub fn id(&self) -> &unic_langid::LanguageIdentifier {
        &self.0
    }

    /// Its region subtag (`US` of `en-US`), if any.
    pub fn region(&self) -> Option<&str> {
        self.0.region.as_ref().map(|r| r.as_str())
    }
}

impl std::fmt::Display for LocaleTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The languages shipped, English first. Each has its texts in
/// `shared/locales/<code>/mail.ftl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    En,
    Fr,
    De,
    Es,
    Ja,
}

deserialize_via_parse!(Language);

impl Serialize for Language {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

impl Language {
    pub const ALL: [Language; 5] = [Language::En, Language::Fr, Language::De, Language::Es, Language::Ja];

    pub fn code(self) -> &'static str {
        match self {
            Language::En => "en",
            Language::Fr => "fr",
            Language::De => "de",
            Language::Es => "es",
            Language::Ja => "ja",
        }
    }

    /// A shipped language by its code; the error names the field `language`.
    pub fn parse(code: &str) -> Result<Self, ParseError> {
        Language::ALL.into_iter().find(|l| l.code() == code).ok_or_else(|| {
            let shipped: Vec<&str> = Language::ALL.iter().map(|l| l.code()).collect();
            ParseError::new("language", format!("{code:?} is not a shipped language ({})", shipped.join(", ")))
        })
    }

    /// The shipped language of a tag's language subtag (`fr-CA` → French),
    /// if there is one.
    pub fn of(tag: &LocaleTag) -> Option<Language> {
        Language::ALL.into_iter().find(|l| l.code() == tag.0.language.as_str())
    }

    /// A stored language, leniently: one this build does not ship (written
    /// by a newer one) reads as none, never as an unreadable payload.
    pub fn deserialize_lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Language>, D::Error> {
        let raw = Option::<std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(raw.and_then(|code| Language::parse(&code).ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_checked_and_kept_canonical() {
        assert_eq!(LocaleTag::parse("pt-br").unwrap().to_string(), "pt-BR");
        assert_eq!(LocaleTag::parse("ja").unwrap().to_string(), "ja");
        for bad in ["", "x", "fr_FR", "fr-", "français", "en-US-\u{0}", "und", "123"] {
            assert!(LocaleTag::parse(bad).is_err(), "{bad:?}");
        }
    }
}
