//! What every parser of the domain shares: the longest each text may be,
//! and [`ParseError`], naming the field a value was refused as.

use std::borrow::Cow;

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
