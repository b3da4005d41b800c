//! The message a recipient reads: what the mailers send.
//!
//! - [`card`]: what a message says (its subject and facts), in the
//!   recipient's language and zone.
//! - [`page`]: a card as the text part and the HTML part (askama,
//!   `shared/templates/mail.html`).
//! - [`invite`]: one message per recipient, MIME with the two parts and
//!   the iCalendar invitation.
//! - [`calendar`]: the iCalendar part (iTIP REQUEST and CANCEL).
//! - [`i18n`]: each language's texts (Fluent, `shared/locales/`) and its
//!   dates, times and zone names (ICU4X's CLDR data).

pub mod calendar;
pub mod card;
pub mod i18n;
pub mod invite;
pub mod page;
