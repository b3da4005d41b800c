//! The texts of a booking and its people: addresses, titles, names,
//! locations and descriptions. Those that reach an email header refuse
//! every control character and the invisible ones that spoof what a
//! reader sees.

use std::fmt;

use serde::{Deserialize, Serialize};
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

use super::parse::{
    ParseError, MAX_DESCRIPTION_CHARS, MAX_EMAIL_CHARS, MAX_LOCATION_CHARS, MAX_NAME_CHARS, MAX_TITLE_CHARS,
};

/// An email address, normalised to lower case so the same person written
/// twice is one recipient.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct EmailAddress(String);

deserialize_via_parse!(EmailAddress);

impl EmailAddress {
    /// A plain address SES can deliver to: an ASCII local part (SES cannot
    /// send to an internationalised one: such a send would end UNKNOWN on
    /// an operator's desk), and the domain in its ASCII form (an
    /// internationalised domain is converted, UTS 46: `exämple.com` is
    /// `xn--exmple-cua.com`). Stored in lower case.
    pub fn parse(raw: &str) -> Result<Self, ParseError> {
        Self::check(raw).map(Self).map_err(|p| ParseError::new("email", p))
    }

    fn check(raw: &str) -> Result<String, String> {
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
        let (local, domain) = raw.rsplit_once('@').ok_or("is not a valid email address: it has no @")?;
        if !local.is_ascii() {
            return Err("must have an ASCII part before the @ (SES cannot deliver to an internationalised one)".into());
        }
        let domain = idna::domain_to_ascii(domain).map_err(|_| "has a domain that is not a valid domain name")?;
        let address = format!("{local}@{domain}").to_lowercase();
        let parsed: email_address::EmailAddress =
            address.parse().map_err(|e| format!("is not a valid email address: {e}"))?;
        if !parsed.domain().contains('.') {
            return Err("must have a domain with a dot, like alice@example.com".into());
        }
        Ok(address)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The domain, in its ASCII form and lower case.
    pub fn domain(&self) -> &str {
        self.0.rsplit_once('@').expect("a parsed address has an @").1
    }

    /// The mailbox this address reaches, whatever spelling reaches it, as
    /// its provider documents (`shared/data/subaddressing.json`): on Gmail
    /// `v.i.c.t.i.m+x@googlemail.com` is `victim@gmail.com`; on Outlook.com
    /// `v+x@outlook.com` is `v@outlook.com`. At any other domain the
    /// address is its own mailbox: `v+x@example.com` is not `v@`, since a
    /// domain may refuse sub-addresses or route them elsewhere. Limits per
    /// recipient and suppressions by complaint count by it.
    pub fn mailbox(&self) -> String {
        let (local, domain) = self.0.rsplit_once('@').expect("a parsed address has an @");
        super::mailbox::of(local, domain)
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
///
/// The zero-width joiner and non-joiner are letters' business in Persian,
/// Arabic and the Indic scripts (نرگس‌ها, क्‍ष): they are allowed between two
/// letters or marks, and nowhere else.
///
/// No ASCII character is Cf, Zl or Zp: ASCII text (most names, addresses
/// and titles, read again from every event the poller decodes) is not
/// looked up character by character in Unicode's tables.
fn refuse_invisible(raw: &str) -> Result<(), String> {
    if raw.is_ascii() {
        return Ok(());
    }
    let chars: Vec<char> = raw.chars().collect();
    let joins_letters = |i: usize| {
        let letter_or_mark = |c: &char| {
            matches!(
                c.general_category(),
                GeneralCategory::UppercaseLetter
                    | GeneralCategory::LowercaseLetter
                    | GeneralCategory::TitlecaseLetter
                    | GeneralCategory::ModifierLetter
                    | GeneralCategory::OtherLetter
                    | GeneralCategory::NonspacingMark
                    | GeneralCategory::SpacingMark
                    | GeneralCategory::EnclosingMark
            )
        };
        matches!(chars[i], '\u{200C}' | '\u{200D}')
            && i > 0
            && chars.get(i - 1).is_some_and(letter_or_mark)
            && chars.get(i + 1).is_some_and(letter_or_mark)
    };
    let bad = chars.iter().enumerate().find(|(i, c)| {
        !c.is_ascii()
            && matches!(
                c.general_category(),
                GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
            )
            && !joins_letters(*i)
    });
    let bad = bad.map(|(_, c)| *c);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn email_refuses_header_injection_and_oddities() {
        assert_eq!(EmailAddress::parse("Alice@Example.COM").unwrap().as_str(), "alice@example.com");
        let mailbox = |a: &str| EmailAddress::parse(a).unwrap().mailbox();
        for same in ["victim@outlook.com", "Victim+1@outlook.com", "victim+a+b@OUTLOOK.com"] {
            assert_eq!(mailbox(same), "victim@outlook.com", "{same}");
        }
        for own in ["victim+1@example.com", "victim+a+b@example.com", "Victim+x@mail.example.org"] {
            assert_eq!(mailbox(own), own.to_lowercase(), "a domain that documents nothing folds nothing");
        }
        assert_eq!(mailbox("v.ictim+x@outlook.com"), "v.ictim@outlook.com", "dots count outside Gmail");
        for same in ["v.i.c.t.i.m@gmail.com", "Victim+x@googlemail.com", "vic.tim@gmail.com"] {
            assert_eq!(mailbox(same), "victim@gmail.com", "{same}");
        }
        assert_eq!(mailbox("v.ictim@example.com"), "v.ictim@example.com", "dots count outside Gmail");
        assert_eq!(mailbox("+tag@outlook.com"), "+tag@outlook.com", "an address that is all tag stays whole");
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
    fn no_ascii_character_is_invisible_so_ascii_text_skips_the_lookup() {
        for c in (0u8..=0x7F).map(char::from) {
            assert!(
                !matches!(
                    c.general_category(),
                    GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
                ),
                "U+{:04X}",
                c as u32
            );
        }
        // Mixed text is still read character by character, ASCII around it.
        assert!(refuse_invisible("Team sync \u{202E}gnp.exe").is_err());
        assert!(refuse_invisible("Caf\u{E9} \u{2028}").is_err());
        assert!(refuse_invisible("Caf\u{E9} au lait").is_ok());
        assert!(refuse_invisible("\u{0646}\u{0631}\u{06AF}\u{0633}\u{200C}\u{0647}\u{0627}").is_ok());
    }
}
