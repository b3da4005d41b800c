//! SQL owned by the `bookings` table. Every function takes a transaction (or
//! any `GenericClient`) so the caller decides what commits together.

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use tokio_postgres::Row;
use uuid::Uuid;

use super::domain::status_sql::CANCELLED;
use super::domain::{
    Booking, BookingStatus, Caller, Description, DisplayName, EmailAddress, Location, NewBooking, ParseError, Person,
    TimeRange, Timezone, Title,
};
use super::BookingError;
use crate::db::DbError;

const COLUMNS: &str = "id, organizer_email, organizer_name, organizer_sub, title, description, location, \
                       timezone, starts_at, ends_at, attendees, status, version, created_at, updated_at";

/// The columns the database fills in on insert.
const GENERATED: &str = "status, version, created_at, updated_at";

/// Name of the exclusion constraint that forbids overlapping active bookings.
pub const NO_OVERLAP_CONSTRAINT: &str = "bookings_no_overlapping_active";

/// Reads a row back through the parsers that let its values in, so the
/// type stays honest if someone edits the table by hand: a value they
/// refuse is [`DbError::Corrupt`], naming the column.
fn from_row(row: &Row) -> Result<Booking, BookingError> {
    let text = |column: &'static str| -> Result<&str, DbError> { Ok(row.try_get(column)?) };
    let corrupt =
        |e: ParseError, column: &'static str| DbError::Corrupt(e.at(format!("bookings.{column}")).to_string());
    let optional = |column: &'static str| -> Result<Option<&str>, DbError> { Ok(row.try_get(column)?) };
    let Json(attendees) = row
        .try_get::<_, Json<Vec<Person>>>("attendees")
        .map_err(|e| DbError::Corrupt(format!("bookings.attendees: {e}")))?;
    Ok(Booking {
        id: row.get("id"),
        title: Title::parse(text("title")?).map_err(|e| corrupt(e, "title"))?,
        description: optional("description")?
            .map(Description::parse)
            .transpose()
            .map_err(|e| corrupt(e, "description"))?,
        location: optional("location")?.map(Location::parse).transpose().map_err(|e| corrupt(e, "location"))?,
        range: TimeRange::new(row.get("starts_at"), row.get("ends_at")).map_err(|e| corrupt(e, "ends_at"))?,
        timezone: Timezone::parse(text("timezone")?).map_err(|e| corrupt(e, "timezone"))?,
        organizer: Person {
            email: EmailAddress::parse(text("organizer_email")?).map_err(|e| corrupt(e, "organizer_email"))?,
            name: DisplayName::parse(text("organizer_name")?).map_err(|e| corrupt(e, "organizer_name"))?,
        },
        organizer_sub: row.get("organizer_sub"),
        attendees,
        status: BookingStatus::from_row(row, "status")?,
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    })
}

/// Maps the exclusion-constraint violation to a domain conflict.
fn overlap_or(e: tokio_postgres::Error) -> BookingError {
    let e = DbError::from(e);
    if e.constraint() == Some(NO_OVERLAP_CONSTRAINT) {
        return BookingError::Overlap;
    }
    BookingError::Db(e)
}

pub async fn insert(
    tx: &impl GenericClient,
    id: Uuid,
    organizer: &Caller,
    new: &NewBooking,
) -> Result<Booking, BookingError> {
    let attendees = Json(&new.attendees);
    const SQL: &str = formatcp!(
        "INSERT INTO bookings (id, organizer_email, organizer_name, organizer_sub, title, description, \
                               location, timezone, starts_at, ends_at, attendees) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING {GENERATED}"
    );
    let row = tx
        .query_one(
            &tx.prepare_cached(SQL).await?,
            &[
                &id,
                &organizer.person.email.as_str(),
                &organizer.person.name.as_str(),
                &organizer.subject,
                &new.title.as_str(),
                &new.description.as_ref().map(|d| d.as_str()),
                &new.location.as_ref().map(|l| l.as_str()),
                &new.timezone.name(),
                &new.range.start(),
                &new.range.end(),
                &attendees,
            ],
        )
        .await
        .map_err(overlap_or)?;
    // The values written are domain types already: only what the database
    // made (status, version, stamps) is read back.
    Ok(Booking {
        id,
        title: new.title.clone(),
        description: new.description.clone(),
        location: new.location.clone(),
        range: new.range,
        timezone: new.timezone,
        organizer: organizer.person.clone(),
        organizer_sub: organizer.subject.clone(),
        attendees: new.attendees.clone(),
        status: BookingStatus::from_row(&row, "status")?,
        version: row.get("version"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    })
}

pub async fn get(client: &impl GenericClient, id: Uuid) -> Result<Option<Booking>, BookingError> {
    const SQL: &str = formatcp!("SELECT {COLUMNS} FROM bookings WHERE id = $1");
    client.query_opt(&client.prepare_cached(SQL).await?, &[&id]).await?.as_ref().map(from_row).transpose()
}

/// Reads and row-locks a booking, so changes to one booking (and the outbox
/// events they write) are serialised in version order.
pub async fn get_for_update(tx: &impl GenericClient, id: Uuid) -> Result<Option<Booking>, BookingError> {
    const SQL: &str = formatcp!("SELECT {COLUMNS} FROM bookings WHERE id = $1 FOR UPDATE");
    tx.query_opt(&tx.prepare_cached(SQL).await?, &[&id]).await?.as_ref().map(from_row).transpose()
}

pub async fn mark_cancelled(tx: &impl GenericClient, id: Uuid) -> Result<Booking, BookingError> {
    const SQL: &str = formatcp!(
        "UPDATE bookings SET status = {CANCELLED}, version = version + 1, updated_at = now() \
         WHERE id = $1 RETURNING {COLUMNS}"
    );
    from_row(&tx.query_one(&tx.prepare_cached(SQL).await?, &[&id]).await?)
}

/// Writes every changeable field of `b` (a booking changed in memory) and
/// bumps the version.
pub async fn update(tx: &impl GenericClient, b: &Booking) -> Result<Booking, BookingError> {
    let attendees = Json(&b.attendees);
    const SQL: &str = formatcp!(
        "UPDATE bookings SET title = $2, description = $3, location = $4, timezone = $5, starts_at = $6, \
                             ends_at = $7, attendees = $8, version = version + 1, updated_at = now() \
         WHERE id = $1 RETURNING {COLUMNS}"
    );
    let row = tx
        .query_one(
            &tx.prepare_cached(SQL).await?,
            &[
                &b.id,
                &b.title.as_str(),
                &b.description.as_ref().map(|d| d.as_str()),
                &b.location.as_ref().map(|l| l.as_str()),
                &b.timezone.name(),
                &b.range.start(),
                &b.range.end(),
                &attendees,
            ],
        )
        .await
        .map_err(overlap_or)?;
    from_row(&row)
}
