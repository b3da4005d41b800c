//! The life of an `outbox_events` row, and the one place its status is
//! spelled in SQL.
//!
//! ```text
//!             claim                 complete
//!   PENDING ─────────▶ PROCESSING ───────────▶ DONE
//!      ▲  ▲               │  │  │
//!      │  └─ retry/requeue┘  │  └─ dead-letter (or retry with attempts used up) ─▶ DEAD
//!      └──── reset (sweep) ──┘                                                      │
//!      └────────────────────────────── replay ──────────────────────────────────────┘
//! ```
//!
//! DONE goes back to PENDING only by `reopen`, an operator's recorded
//! decision to resend one recipient.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventStatus {
    /// Waiting for `next_attempt_at`.
    Pending,
    /// Claimed by the worker in `locked_by`.
    Processing,
    /// Processed: its `processed_events` row committed with this status.
    Done,
    /// The dead letter: out of attempts, or not processable as it is.
    Dead,
}

impl EventStatus {
    pub const ALL: [EventStatus; 4] =
        [EventStatus::Pending, EventStatus::Processing, EventStatus::Done, EventStatus::Dead];

    /// The status as stored. SQL statements splice it in at compile time
    /// (`const_format`), so the partial indexes on literal statuses still
    /// match; no other code spells a status.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventStatus::Pending => "PENDING",
            EventStatus::Processing => "PROCESSING",
            EventStatus::Done => "DONE",
            EventStatus::Dead => "DEAD",
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| format!("unknown event status {s:?}"))
    }
}

/// Reads a status column; a value outside the table's CHECK constraint is
/// impossible, so it is reported as the bug it would be.
pub(crate) fn from_row(row: &tokio_postgres::Row, idx: &str) -> EventStatus {
    let raw: &str = row.get(idx);
    raw.parse().unwrap_or_else(|e| panic!("outbox_events.{idx}: {e}"))
}

/// `'PENDING'` etc. as SQL literals, for the statements of this module.
pub(crate) mod sql {
    use super::EventStatus::*;
    use const_format::concatcp;
    pub const PENDING: &str = concatcp!("'", Pending.as_str(), "'");
    pub const PROCESSING: &str = concatcp!("'", Processing.as_str(), "'");
    pub const DONE: &str = concatcp!("'", Done.as_str(), "'");
    pub const DEAD: &str = concatcp!("'", Dead.as_str(), "'");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_sql_text() {
        for s in EventStatus::ALL {
            assert_eq!(s.as_str().parse::<EventStatus>().unwrap(), s);
        }
        assert_eq!(sql::PENDING, "'PENDING'");
        assert!("NOPE".parse::<EventStatus>().is_err());
    }
}
