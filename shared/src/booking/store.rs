//! SQL owned by the `bookings` table. Every function takes a transaction (or
//! any `GenericClient`) so the caller decides what commits together.

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use tokio_postgres::Row;
use uuid::Uuid;

use super::domain::status_sql::CANCELLED;
use super::domain::{
    Booking, BookingStatus, Caller, Description, DisplayName, EmailAddress, GuestList, LocaleTag, Location, NewBooking,
    ParseError, Person, Reminders, TimeRange, Timezone, Title,
};
use super::BookingError;
use crate::db::DbError;

const COLUMNS: &str = "id, organizer_email, organizer_name, organizer_sub, organizer_locale, title, description, \
                       location, timezone, starts_at, ends_at, attendees, guest_list, reminders, status, version, \
                       created_at, updated_at";

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
            locale: optional("organizer_locale")?
                .map(LocaleTag::parse)
                .transpose()
                .map_err(|e| corrupt(e, "organizer_locale"))?,
            ..Person::new(
                EmailAddress::parse(text("organizer_email")?).map_err(|e| corrupt(e, "organizer_email"))?,
                DisplayName::parse(text("organizer_name")?).map_err(|e| corrupt(e, "organizer_name"))?,
            )
        },
        organizer_sub: row.get("organizer_sub"),
        attendees,
        guest_list: GuestList::from_row(row, "guest_list")?,
        reminders: Reminders::from_secs(&row.try_get::<_, Vec<i32>>("reminders")?)
            .map_err(|e| corrupt(e, "reminders"))?,
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

/// Writes a new booking of `organizer` (whose person carries their
/// language, decided by the caller: [`NewBooking::organizer_locale`] or
/// the token's).
pub async fn insert(
    tx: &impl GenericClient,
    id: Uuid,
    organizer: &Caller,
    new: &NewBooking,
) -> Result<Booking, BookingError> {
    let attendees = Json(&new.attendees);
    const SQL: &str = formatcp!(
        "INSERT INTO bookings (id, organizer_email, organizer_name, organizer_sub, title, description, \
                               location, timezone, starts_at, ends_at, attendees, reminders, organizer_locale, \
                               guest_list) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING {GENERATED}"
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
                &new.reminders.secs(),
                &organizer.person.locale.as_ref().map(|l| l.to_string()),
                &new.guest_list.as_str(),
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
        guest_list: new.guest_list,
        reminders: new.reminders.clone(),
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

/// Where a booking stands now, as the poller reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub cancelled: bool,
    pub version: i32,
}

/// How each of `ids` stands now (the poller reads these three columns of a
/// booking and nothing else: an event run again after its booking's later
/// events are gone never invites anyone to a cancelled meeting, and a
/// reminder of an older version never goes).
pub async fn standing_among(
    client: &impl GenericClient,
    ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, Standing>, DbError> {
    if ids.is_empty() {
        return Ok(Default::default());
    }
    const SQL: &str = formatcp!("SELECT id, status = {CANCELLED}, version FROM bookings WHERE id = ANY($1)");
    let rows = client.query(&client.prepare_cached(SQL).await?, &[&ids]).await?;
    Ok(rows.iter().map(|r| (r.get(0), Standing { cancelled: r.get(1), version: r.get(2) })).collect())
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
                             ends_at = $7, attendees = $8, reminders = $9, organizer_locale = $10, \
                             guest_list = $11, version = version + 1, updated_at = now() \
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
                &b.reminders.secs(),
                &b.organizer.locale.as_ref().map(|l| l.to_string()),
                &b.guest_list.as_str(),
            ],
        )
        .await
        .map_err(overlap_or)?;
    from_row(&row)
}

/// Whose bookings a listing reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Those the caller organizes (by [`Caller::key`]).
    Organizer,
    /// Those the caller is invited to (by verified address).
    Attendee,
    /// Both.
    Either,
}

/// One page of a listing: the bookings that overlap `[from, to)`, in
/// `statuses`, after `after` in (start, id) order, at most `limit`.
#[derive(Debug, Clone)]
pub struct Listing {
    pub role: Role,
    pub from: chrono::DateTime<chrono::Utc>,
    pub to: chrono::DateTime<chrono::Utc>,
    pub statuses: Vec<BookingStatus>,
    pub after: (chrono::DateTime<chrono::Utc>, Uuid),
    pub limit: i64,
}

/// The caller's key as the organizer index spells it (migration V17/V18).
const ORGANIZER_KEY: &str = "coalesce('sub:' || organizer_sub, 'email:' || organizer_email)";

/// A page of `caller`'s bookings. Organized ones come from
/// `bookings_by_organizer` (key, start, id) in order; invited ones from
/// `booking_attendees` (address, start, id) in order (V30, kept by a
/// trigger on `bookings`): either way one range read that stops after the
/// page, however many bookings list the caller. A booking whose
/// invitation to the caller was capped, and nothing of it reached them
/// since, is not theirs to list (V42). Both together are the two
/// ranges merged. A booking lasts at most 31 days, so "overlaps `from`" is
/// also a lower bound on its start that the indexes can use.
pub async fn list(client: &impl GenericClient, caller: &Caller, q: &Listing) -> Result<Vec<Booking>, BookingError> {
    const WINDOW: &str = formatcp!(
        "starts_at >= $2::timestamptz - make_interval(days => {}) AND ends_at > $2 AND starts_at < $3 \
         AND status = ANY($4) AND (starts_at, id) > ($5, $6)",
        super::domain::MAX_DURATION_DAYS
    );
    // $1: the caller's key (organizer) or address (attendee); $8 the
    // address when both are asked for.
    const ORGANIZER: &str = formatcp!("{ORGANIZER_KEY} = $1");
    const ORDER: &str = "ORDER BY starts_at, id LIMIT $7";
    const BY_ORGANIZER: &str = formatcp!("SELECT {COLUMNS} FROM bookings WHERE {ORGANIZER} AND {WINDOW} {ORDER}");
    // The attendee's range of booking_attendees, in order, each row joined
    // to its booking (the window's bounds on start repeated on the index,
    // and its status and end read from the index's own copy, V42: a row
    // the window leaves out never visits its booking).
    const INVITED: &str = formatcp!(
        "SELECT {COLUMNS} FROM booking_attendees a JOIN bookings ON id = a.booking_id \
          WHERE a.attendee_email = ADDRESS \
            AND a.booking_starts_at >= $2::timestamptz - make_interval(days => {}) \
            AND a.booking_starts_at < $3 AND (a.booking_starts_at, a.booking_id) > ($5, $6) \
            AND a.booking_status = ANY($4) AND a.booking_ends_at > $2 AND {WINDOW} \
          ORDER BY a.booking_starts_at, a.booking_id LIMIT $7",
        super::domain::MAX_DURATION_DAYS
    );
    const BY_ATTENDEE: &str = const_format::str_replace!(INVITED, "ADDRESS", "$1");
    const BY_EITHER: &str = formatcp!(
        "SELECT * FROM (({BY_ORGANIZER}) UNION ({})) u {ORDER}",
        const_format::str_replace!(INVITED, "ADDRESS", "$8")
    );
    let statuses: Vec<&str> = q.statuses.iter().map(|s| s.as_str()).collect();
    let (key, email) = (caller.key(), caller.person.email.as_str());
    let window: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
        [&q.from, &q.to, &statuses, &q.after.0, &q.after.1, &q.limit];
    let (sql, first, last): (&str, &(dyn tokio_postgres::types::ToSql + Sync), Option<&str>) = match q.role {
        Role::Organizer => (BY_ORGANIZER, &key, None),
        Role::Attendee => (BY_ATTENDEE, &email, None),
        Role::Either => (BY_EITHER, &key, Some(email)),
    };
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = vec![first];
    params.extend(window);
    if let Some(email) = &last {
        params.push(email);
    }
    let rows = client.query(&client.prepare_cached(sql).await?, &params).await?;
    rows.iter().map(from_row).collect()
}

/// A booking as the operator console lists it: what it is, never what it
/// says (the columns `outbox_operator` may read, V49).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Found {
    pub id: Uuid,
    pub organizer_email: String,
    pub organizer_name: String,
    pub title: String,
    pub timezone: String,
    pub starts_at: chrono::DateTime<chrono::Utc>,
    pub ends_at: chrono::DateTime<chrono::Utc>,
    pub status: BookingStatus,
    pub version: i32,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
}

/// What an operator searches by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Search<'a> {
    Id(Uuid),
    /// An address, as organizer or as attendee.
    Address(&'a str),
}

/// The bookings that match, newest first, at most `limit`: by id (the
/// primary key), or by address as organizer (`bookings_by_organizer_email`)
/// and as attendee (`booking_attendees`' primary key), each a range read.
pub async fn find(client: &impl GenericClient, search: Search<'_>, limit: i64) -> Result<Vec<Found>, BookingError> {
    const FOUND: &str =
        "id, organizer_email, organizer_name, title, timezone, starts_at, ends_at, status, version, created_at, updated_at";
    const BY_ID: &str = formatcp!("SELECT {FOUND} FROM bookings WHERE id = $1");
    const BY_ADDRESS: &str = formatcp!(
        "SELECT {FOUND} FROM bookings WHERE id IN ( \
             (SELECT id FROM bookings WHERE organizer_email = $1 ORDER BY created_at DESC LIMIT $2) \
             UNION (SELECT booking_id FROM booking_attendees WHERE attendee_email = $1 \
                     ORDER BY booking_starts_at DESC LIMIT $2)) \
          ORDER BY created_at DESC, id LIMIT $2"
    );
    let rows = match search {
        Search::Id(id) => client.query(BY_ID, &[&id]).await?,
        Search::Address(address) => client.query(BY_ADDRESS, &[&address, &limit]).await?,
    };
    rows.iter()
        .map(|r| {
            Ok(Found {
                id: r.get("id"),
                organizer_email: r.get("organizer_email"),
                organizer_name: r.get("organizer_name"),
                title: r.get("title"),
                timezone: r.get("timezone"),
                starts_at: r.get("starts_at"),
                ends_at: r.get("ends_at"),
                status: BookingStatus::from_row(r, "status")?,
                version: r.get("version"),
                created_at: r.get("created_at"),
                updated_at: r.get("updated_at"),
            })
        })
        .collect()
}
