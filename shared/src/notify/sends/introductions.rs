//! `booking_introductions`: who each booking may have reached, kept past
//! retention (migration V41, whose trigger is the table's only writer: as
//! retention deletes a booking's events, the people their sends may have
//! reached, and the recipients resent, are kept, in the same statement).
//!
//! The plan learns who was told of a booking from its events' sends while
//! they all exist; once retention has deleted the first of them, it reads
//! these too ([`kept_for`]), so a person added to an aged booking is still
//! a first contact, counted and limited as any other, and one told before
//! still hears of its change or its cancellation.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use crate::db::DbResult;

/// For each of `booking_ids`, the people kept as possibly told when its
/// events were deleted (bookings with none are absent).
pub async fn kept_for(client: &impl GenericClient, booking_ids: &[Uuid]) -> DbResult<HashMap<Uuid, Vec<String>>> {
    let mut kept: HashMap<Uuid, Vec<String>> = HashMap::new();
    if booking_ids.is_empty() {
        return Ok(kept);
    }
    let sql = "SELECT booking_id, recipient_email FROM booking_introductions WHERE booking_id = ANY($1)";
    for row in client.query(&client.prepare_cached(sql).await?, &[&booking_ids]).await? {
        kept.entry(row.get(0)).or_default().push(row.get(1));
    }
    Ok(kept)
}
