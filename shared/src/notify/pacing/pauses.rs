//! `organizer_pauses`, every statement but its count: sending paused for an
//! organizer whose mail draws complaints (migration V43, whose trigger
//! counts each complaint SES reports as it is recorded, and pauses the
//! organizer at the third).
//!
//! While paused, an organizer's invitations, updates and reminders are not
//! sent (the deliverer records them CAPPED with [`Pause::reason`]), and the
//! API refuses their new bookings and changes; their cancellations still
//! go. An operator sees why ([`paused`]) and lifts it ([`lift`]), which
//! counts their complaints from zero again.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::booking::domain::Booking;
use crate::db::DbResult;

/// The complaints (about distinct sends) at which an organizer is paused.
pub const COMPLAINTS_TO_PAUSE: i32 = 3;

/// A paused organizer: who, since when, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    pub organizer_email: String,
    pub complaints: i32,
    pub paused_at: DateTime<Utc>,
    pub reason: String,
}

impl Pause {
    /// Why an organizer's send was not made (stored on the claim, shown to
    /// the organizer).
    pub fn capped_reason(reason: &str) -> String {
        format!("paused: {reason}; an operator lifts it (outboxctl organizers lift)")
    }
}

/// Whose sending a booking's mail is: its organizer's address, as every
/// event's payload carries it and V43 counts by.
pub fn key_of(booking: &Booking) -> String {
    booking.organizer.email.as_str().to_string()
}

const PAUSED: &str = "paused_at IS NOT NULL AND lifted_at IS NULL";

/// Which of `keys` are paused, with why.
pub async fn paused_among(client: &impl GenericClient, keys: &[String]) -> DbResult<Vec<(String, String)>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<&String> = keys.iter().collect::<HashSet<_>>().into_iter().collect();
    let sql = const_format::formatcp!(
        "SELECT organizer_email, reason FROM organizer_pauses WHERE organizer_email = ANY($1) AND {PAUSED}"
    );
    let rows = client.query(&client.prepare_cached(sql).await?, &[&keys]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Every organizer paused now, the latest first.
pub async fn paused(client: &impl GenericClient) -> DbResult<Vec<Pause>> {
    let sql = const_format::formatcp!(
        "SELECT organizer_email, complaints, paused_at, reason FROM organizer_pauses WHERE {PAUSED} \
          ORDER BY paused_at DESC"
    );
    Ok(client
        .query(sql, &[])
        .await?
        .iter()
        .map(|r| Pause { organizer_email: r.get(0), complaints: r.get(1), paused_at: r.get(2), reason: r.get(3) })
        .collect())
}

/// Lifts `organizer_email`'s pause, recording who did, and counts their
/// complaints from zero again. False when they were not paused.
pub async fn lift(client: &impl GenericClient, organizer_email: &str, by: &str) -> DbResult<bool> {
    let sql = const_format::formatcp!(
        "UPDATE organizer_pauses SET lifted_at = now(), lifted_by = $2, complaints = 0 \
          WHERE organizer_email = $1 AND {PAUSED}"
    );
    Ok(client.execute(sql, &[&organizer_email, &by]).await? == 1)
}
