//! The message a recipient reads: what the mailers send.
//!
//! - [`invite`]: one message per recipient, MIME with a plain-text part,
//!   an HTML part and the iCalendar invitation.
//! - [`calendar`]: the iCalendar part (iTIP REQUEST and CANCEL).
//! - [`i18n`]: each language's texts (Fluent, `shared/locales/`) and its
//!   dates, times and zone names (ICU4X's CLDR data).

pub mod calendar;
pub mod i18n;
pub mod invite;
