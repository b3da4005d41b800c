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
//! decision to run it again.

crate::stored_enum! {
    /// The state of an `outbox_events` row.
    pub enum EventStatus in "outbox_events.status", sql: sql {
        /// Waiting for `next_attempt_at`.
        Pending = "PENDING" => PENDING,
        /// Claimed by the worker in `locked_by`.
        Processing = "PROCESSING" => PROCESSING,
        /// Processed: its `processed_events` row committed with this status.
        Done = "DONE" => DONE,
        /// The dead letter: out of attempts, or not processable as it is.
        Dead = "DEAD" => DEAD,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_sql_text() {
        for &s in EventStatus::ALL {
            assert_eq!(s.as_str().parse::<EventStatus>().unwrap(), s);
        }
        assert_eq!(sql::PENDING, "'PENDING'");
        assert!("NOPE".parse::<EventStatus>().is_err());
    }
}
