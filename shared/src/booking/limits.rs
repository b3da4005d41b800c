//! Abuse limits, enforced in the database so they hold across containers:
//! per organizer and UTC day, bookings created and recipients mailed; per
//! booking and day, changes (reschedules and cancels); per day for the
//! whole stack, the recipients of accounts in their first
//! [`NEW_ACCOUNT_DAYS`] (migration V44). Every statement on
//! `organizer_daily_usage`, `booking_daily_changes`, `organizer_accounts`
//! and `new_account_daily_usage` lives here.
//!
//! Each operation increments its counters inside the booking's own
//! transaction and reads them back; the row lock of the upsert serialises
//! concurrent requests, so exactly the allowed number commit and the rest
//! roll back, counters and all: a refused request writes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use deadpool_postgres::GenericClient;

use super::domain::{Booking, Caller};
use super::BookingError;
use crate::db::DbResult;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bookings one organizer may create per UTC day.
    pub bookings_per_day: i32,
    /// Invitations, updates and cancellations one organizer may cause per day
    /// (each attendee of each create, reschedule or cancel counts).
    pub recipients_per_day: i32,
    /// Reschedules plus cancels of one booking per day.
    pub changes_per_booking_per_day: i32,
    /// Recipients all accounts in their first [`NEW_ACCOUNT_DAYS`] may
    /// cause together per day: accounts made by the dozen mail no more
    /// than this, however many they are.
    pub new_accounts_recipients_per_day: i32,
}

/// An account is new for this many days from its first booking; an
/// organizer whose mail first reached someone this long ago has standing
/// with each person (`notify::pacing::recipient_limit`).
pub const NEW_ACCOUNT_DAYS: i32 = 7;

/// The declared defaults (`LIMIT_*` in `config::settings`).
impl Default for Limits {
    fn default() -> Self {
        use crate::config::settings as S;
        Limits {
            bookings_per_day: S::LIMIT_BOOKINGS_PER_DAY.default_value(),
            recipients_per_day: S::LIMIT_RECIPIENTS_PER_DAY.default_value(),
            changes_per_booking_per_day: S::LIMIT_CHANGES_PER_BOOKING_PER_DAY.default_value(),
            new_accounts_recipients_per_day: S::LIMIT_NEW_ACCOUNTS_RECIPIENTS_PER_DAY.default_value(),
        }
    }
}

impl Limits {
    /// No limits (service-level tests and tools that are not the public API).
    pub const UNLIMITED: Limits = Limits {
        bookings_per_day: i32::MAX,
        recipients_per_day: i32::MAX,
        changes_per_booking_per_day: i32::MAX,
        new_accounts_recipients_per_day: i32::MAX,
    };
}

/// Which limit a request hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    BookingsPerDay,
    RecipientsPerDay,
    /// A later day's, full of reminders due on it.
    RecipientsOn(NaiveDate),
    ChangesPerBookingPerDay,
    NewAccountsRecipientsPerDay,
}

impl Limit {
    pub fn describe(self, max: i32) -> String {
        match self {
            Limit::BookingsPerDay => format!("an organizer may create {max} bookings per day"),
            Limit::RecipientsPerDay => format!("an organizer's bookings may notify {max} recipients per day"),
            Limit::RecipientsOn(day) => format!(
                "an organizer's bookings may notify {max} recipients per day, each reminder on the day it is sent; \
                 {day} has no room for this request's reminders"
            ),
            Limit::ChangesPerBookingPerDay => format!("a booking may be rescheduled or cancelled {max} times per day"),
            Limit::NewAccountsRecipientsPerDay => format!(
                "accounts less than {NEW_ACCOUNT_DAYS} days old may together notify {max} recipients per day here"
            ),
        }
    }
}

/// The mail one write causes, by the UTC day it goes out: its invitations,
/// updates and cancellations today, each reminder on the day it falls due.
/// Each day's share is charged to that day's counters, so reminders
/// pointed at one day from writes made on many days share that one day's
/// allowance (issue 52: charged on the day they were written, an
/// organizer could point weeks of allowance at one instant).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mailing(BTreeMap<NaiveDate, i32>);

impl Mailing {
    /// `recipients` mailed now.
    pub fn today(recipients: usize) -> Self {
        let mut m = Mailing::default();
        m.add(Utc::now(), recipients);
        m
    }

    /// `recipients` mailed at `at` (a reminder's due time).
    pub fn add(&mut self, at: DateTime<Utc>, recipients: usize) {
        let day = at.date_naive().max(Utc::now().date_naive());
        *self.0.entry(day).or_default() += i32::try_from(recipients).unwrap_or(i32::MAX);
    }

    /// Today's share, then each later day's, in day order (the order every
    /// request takes the counters' row locks in: no deadlock between two).
    fn days(&self) -> impl Iterator<Item = (NaiveDate, i32)> + '_ {
        let today = Utc::now().date_naive();
        std::iter::once((today, self.0.get(&today).copied().unwrap_or(0)))
            .chain(self.0.iter().filter(move |(d, _)| **d > today).map(|(d, n)| (*d, *n)))
    }
}

/// Time until the counters reset (the next UTC midnight).
pub fn until_reset(now: DateTime<Utc>) -> Duration {
    let tomorrow = (now.date_naive() + chrono::Days::new(1)).and_hms_opt(0, 0, 0).expect("midnight exists").and_utc();
    (tomorrow - now).to_std().unwrap_or_default().max(Duration::from_secs(1))
}

/// Over `limit` on `day`: today's resets at midnight; a later day's is
/// not emptied by waiting.
fn over(limit: Limit, max: i32, day: NaiveDate) -> BookingError {
    let now = Utc::now();
    let (limit, retry_after) = match limit {
        Limit::RecipientsPerDay if day > now.date_naive() => (Limit::RecipientsOn(day), None),
        _ if day > now.date_naive() => (limit, None),
        _ => (limit, Some(until_reset(now))),
    };
    BookingError::LimitExceeded { limit, max, retry_after }
}

/// Adds `bookings` and `recipients` to the organizer's usage on `day`
/// (never before the database's today); returns the new totals.
async fn add_usage(
    tx: &impl GenericClient,
    key: &str,
    day: NaiveDate,
    bookings: i32,
    recipients: i32,
) -> DbResult<(i32, i32)> {
    let row = tx
        .query_one(
            &tx.prepare_cached(
                "INSERT INTO organizer_daily_usage AS u (organizer_key, day, bookings, recipients) \
                 VALUES ($1, greatest($4::date, (now() AT TIME ZONE 'UTC')::date), $2, $3) \
                 ON CONFLICT (organizer_key, day) DO UPDATE \
                    SET bookings = u.bookings + EXCLUDED.bookings, recipients = u.recipients + EXCLUDED.recipients \
                 RETURNING bookings, recipients",
            )
            .await?,
            &[&key, &bookings, &recipients, &day],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Charges `mailing` to the organizer's days (and `bookings` to today);
/// refuses one over a limit on any day.
async fn charge(
    tx: &impl GenericClient,
    limits: &Limits,
    organizer: &Caller,
    bookings: i32,
    mailing: &Mailing,
) -> Result<(), BookingError> {
    for (i, (day, recipients)) in mailing.days().enumerate() {
        let made = if i == 0 { bookings } else { 0 };
        let (created, mailed) = add_usage(tx, &organizer.key(), day, made, recipients).await?;
        if made > 0 && created > limits.bookings_per_day {
            return Err(over(Limit::BookingsPerDay, limits.bookings_per_day, day));
        }
        if mailed > limits.recipients_per_day {
            return Err(over(Limit::RecipientsPerDay, limits.recipients_per_day, day));
        }
    }
    Ok(())
}

/// Counts a new booking and the mail it causes, each reminder on its day;
/// refuses one over a limit.
pub async fn count_create(
    tx: &impl GenericClient,
    limits: &Limits,
    organizer: &Caller,
    mailing: &Mailing,
) -> Result<(), BookingError> {
    charge(tx, limits, organizer, 1, mailing).await?;
    count_new_account(tx, limits, organizer, mailing).await
}

/// For an account in its first [`NEW_ACCOUNT_DAYS`] (from its first
/// booking, recorded now if this is it), adds `mailing` to the stack's
/// new accounts' usage, each day's share on its day; refuses one over the
/// allowance. The day's row lock orders new accounts' requests (an
/// established account never takes it).
async fn count_new_account(
    tx: &impl GenericClient,
    limits: &Limits,
    organizer: &Caller,
    mailing: &Mailing,
) -> Result<(), BookingError> {
    // A concurrent first booking of the same account: this statement's
    // snapshot may see neither row; new, then.
    let first_seen: Option<chrono::NaiveDate> = tx
        .query_opt(
            &tx.prepare_cached(
                "WITH first AS (INSERT INTO organizer_accounts (organizer_key, first_seen) \
                                VALUES ($1, (now() AT TIME ZONE 'UTC')::date) \
                                ON CONFLICT (organizer_key) DO NOTHING RETURNING first_seen) \
                 SELECT first_seen FROM first \
                 UNION ALL SELECT first_seen FROM organizer_accounts WHERE organizer_key = $1 LIMIT 1",
            )
            .await?,
            &[&organizer.key()],
        )
        .await?
        .map(|r| r.get(0));
    let today = Utc::now().date_naive();
    if first_seen.is_some_and(|d| (today - d).num_days() >= NEW_ACCOUNT_DAYS as i64) {
        return Ok(());
    }
    for (day, recipients) in mailing.days().filter(|(_, n)| *n > 0) {
        let mailed: i32 = tx
            .query_one(
                &tx.prepare_cached(
                    "INSERT INTO new_account_daily_usage AS u (day, recipients) \
                     VALUES (greatest($2::date, (now() AT TIME ZONE 'UTC')::date), $1) \
                     ON CONFLICT (day) DO UPDATE SET recipients = u.recipients + EXCLUDED.recipients \
                     RETURNING recipients",
                )
                .await?,
                &[&recipients, &day],
            )
            .await?
            .get(0);
        if mailed > limits.new_accounts_recipients_per_day {
            return Err(over(Limit::NewAccountsRecipientsPerDay, limits.new_accounts_recipients_per_day, day));
        }
    }
    Ok(())
}

/// Counts a change of `booking` and the mail it causes (every attendee
/// again and any removed one today, each reminder it asks for on its
/// day); refuses one over a limit.
pub async fn count_change(
    tx: &impl GenericClient,
    limits: &Limits,
    organizer: &Caller,
    booking: &Booking,
    mailing: &Mailing,
) -> Result<(), BookingError> {
    let changes = record_change(tx, booking).await?;
    if changes > limits.changes_per_booking_per_day {
        return Err(over(Limit::ChangesPerBookingPerDay, limits.changes_per_booking_per_day, Utc::now().date_naive()));
    }
    charge(tx, limits, organizer, 0, mailing).await?;
    count_new_account(tx, limits, organizer, mailing).await
}

/// Counts a cancellation like any change, but never refuses it: an
/// organizer at a limit can always call a meeting off, and its CANCEL
/// mails go out. A booking is cancelled once, so this adds at most one
/// round of mails per booking created, which the create limits bound.
pub async fn count_cancel(
    tx: &impl GenericClient,
    organizer: &Caller,
    booking: &Booking,
    recipients: usize,
) -> Result<(), BookingError> {
    record_change(tx, booking).await?;
    add_usage(tx, &organizer.key(), Utc::now().date_naive(), 0, recipients as i32).await?;
    Ok(())
}

/// Adds one change of `booking` to today's counter; returns the count
/// after it.
async fn record_change(tx: &impl GenericClient, booking: &Booking) -> Result<i32, BookingError> {
    let changes: i32 = tx
        .query_one(
            &tx.prepare_cached(
                "INSERT INTO booking_daily_changes AS c (booking_id, day, changes) \
                 VALUES ($1, (now() AT TIME ZONE 'UTC')::date, 1) \
                 ON CONFLICT (booking_id, day) DO UPDATE SET changes = c.changes + 1 \
                 RETURNING changes",
            )
            .await?,
            &[&booking.id],
        )
        .await?
        .get(0);
    Ok(changes)
}

/// Retention: deletes up to `limit` rows of each counter table whose day is
/// before yesterday; returns how many.
pub async fn purge_old(client: &impl GenericClient, limit: i64) -> DbResult<u64> {
    const OLD_USAGE: &str = "DELETE FROM organizer_daily_usage WHERE (organizer_key, day) IN ( \
         SELECT organizer_key, day FROM organizer_daily_usage \
          WHERE day < (now() AT TIME ZONE 'UTC')::date - 1 LIMIT $1)";
    const OLD_CHANGES: &str = "DELETE FROM booking_daily_changes WHERE (booking_id, day) IN ( \
         SELECT booking_id, day FROM booking_daily_changes \
          WHERE day < (now() AT TIME ZONE 'UTC')::date - 1 LIMIT $1)";
    const OLD_NEW_ACCOUNTS: &str = "DELETE FROM new_account_daily_usage WHERE day IN ( \
         SELECT day FROM new_account_daily_usage WHERE day < (now() AT TIME ZONE 'UTC')::date - 1 LIMIT $1)";
    let mut deleted = 0;
    for sql in [OLD_USAGE, OLD_CHANGES, OLD_NEW_ACCOUNTS] {
        deleted += client.execute(sql, &[&limit]).await?;
    }
    Ok(deleted)
}
