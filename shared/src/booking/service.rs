//! The booking operations. Each is one Postgres transaction that changes the
//! booking and inserts its outbox event; nothing outside the database is
//! called here (notifications are the outbox worker's job).

use deadpool_postgres::Pool;
use uuid::Uuid;

use super::domain::{Booking, BookingChanges, BookingStatus, Caller, Language, NewBooking, Person};
use super::events::{EventPayload, EventType};
use super::idempotency::{self, Begin, IdempotencyRequest, StoredResponse};
use super::limits::{self, Limits};
use super::{reminder_events, store, BookingError};
use crate::fault::Faults;
use crate::outbox;

/// Fault point between the booking insert and the outbox insert.
pub const FAULT_CREATE_BETWEEN_INSERTS: &str = "booking.create.between_inserts";
/// Fault point between the booking update and the outbox insert (cancel, update).
pub const FAULT_CHANGE_BETWEEN_WRITES: &str = "booking.change.between_writes";

pub enum CreateOutcome {
    Created(Booking),
    /// Same key, same request: the original response, nothing created.
    Replayed(StoredResponse),
}

/// The result of a cancel or update: the booking, and whether this call
/// changed it (cancelling a cancelled booking, or an update to the values
/// it already has, changes nothing).
pub struct Changed {
    pub booking: Booking,
    pub changed: bool,
}

#[derive(Clone)]
pub struct BookingService {
    pool: Pool,
    faults: Faults,
    limits: Limits,
    reminder_scale: u32,
    default_language: Language,
}

impl BookingService {
    pub fn new(pool: Pool, faults: Faults, limits: Limits) -> Self {
        Self { pool, faults, limits, reminder_scale: 1, default_language: Language::En }
    }

    /// The language of an attendee who names none, and whose organizer
    /// names none either (`DEFAULT_LOCALE`).
    pub fn with_default_language(self, default_language: Language) -> Self {
        Self { default_language, ..self }
    }

    /// Divides every reminder's offset by `scale` (development only, so a
    /// reminder arrives within minutes: `DEV_REMINDER_SCALE`).
    pub fn with_reminder_scale(self, scale: u32) -> Self {
        Self { reminder_scale: scale.max(1), ..self }
    }

    /// Writes the reminders of `booking` as it now stands, changed from
    /// `before`, in `tx` (those an earlier event answers for are not
    /// written again: [`reminder_events::covered`]).
    async fn schedule_reminders(
        &self,
        tx: &impl deadpool_postgres::GenericClient,
        booking: &Booking,
        before: Option<&Booking>,
    ) -> Result<(), BookingError> {
        for event in reminder_events::events(booking, before, chrono::Utc::now(), self.reminder_scale) {
            outbox::events::insert(tx, &event).await?;
        }
        Ok(())
    }

    #[tracing::instrument(skip_all, fields(booking_id, organizer = %crate::telemetry::mask_email(organizer.person.email.as_str())))]
    pub async fn create(
        &self,
        organizer: &Caller,
        new: NewBooking,
        idem: Option<IdempotencyRequest>,
    ) -> Result<CreateOutcome, BookingError> {
        // The organizer's language: the body's, else their token's; each
        // attendee's, decided now, so the response says what they will read.
        let organizer = &Caller {
            person: Person {
                locale: new.organizer_locale.clone().or(organizer.person.locale.clone()),
                ..organizer.person.clone()
            },
            subject: organizer.subject.clone(),
        };
        let new = new.with_languages(organizer.person.locale.as_ref(), self.default_language);
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        if let Some(idem) = &idem {
            match idempotency::begin(&tx, &organizer.key(), idem).await? {
                Begin::Fresh => {}
                Begin::Replay(stored) if stored.request_hash == idem.request_hash => {
                    return Ok(CreateOutcome::Replayed(stored));
                }
                Begin::Replay(_) => return Err(BookingError::IdempotencyKeyMismatch),
            }
        }
        // Each reminder mails every attendee too, on the day it falls due.
        let mut mailing = limits::Mailing::today(new.attendees.len());
        for (_, _, due) in
            reminder_events::ahead(&new.reminders, new.range.start(), chrono::Utc::now(), self.reminder_scale)
        {
            mailing.add(due, new.attendees.len());
        }
        limits::count_create(&tx, &self.limits, organizer, &mailing).await?;
        let booking = store::insert(&tx, Uuid::now_v7(), organizer, &new).await?;
        tracing::Span::current().record("booking_id", tracing::field::display(booking.id));
        self.faults.hit(FAULT_CREATE_BETWEEN_INSERTS)?;
        let payload = EventPayload::of(booking);
        let event_id = outbox::events::insert(&tx, &payload.to_outbox(EventType::BookingConfirmed)).await?;
        self.schedule_reminders(&tx, &payload.booking, None).await?;
        if let Some(idem) = &idem {
            idempotency::complete(&tx, &organizer.key(), &idem.key, 201, &payload.booking, payload.booking.id).await?;
        }
        tx.commit().await?;
        tracing::info!(%event_id, "booking created");
        Ok(CreateOutcome::Created(payload.booking))
    }

    /// A page of the caller's own bookings ([`store::list`]).
    pub async fn list(&self, caller: &Caller, listing: &store::Listing) -> Result<Vec<Booking>, BookingError> {
        let bookings = store::list(&self.pool.get().await?, caller, listing).await?;
        Ok(bookings.into_iter().map(|b| b.as_seen_by(caller)).collect())
    }

    /// Reads a booking the caller may see; anyone else gets `NotFound`.
    pub async fn get(&self, caller: &Caller, id: Uuid) -> Result<Booking, BookingError> {
        let client = self.pool.get().await?;
        match store::get(&client, id).await? {
            Some(b) if b.visible_to(caller) => Ok(b.as_seen_by(caller)),
            _ => Err(BookingError::NotFound),
        }
    }

    /// Cancels a booking; with `expected_version`, only if it is still that
    /// version. Cancelling a cancelled booking changes nothing.
    #[tracing::instrument(skip_all, fields(booking_id = %id))]
    pub async fn cancel(
        &self,
        caller: &Caller,
        id: Uuid,
        expected_version: Option<i32>,
    ) -> Result<Changed, BookingError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let current = Self::lock_for_change(&tx, caller, id).await?;
        if let Some(expected) = expected_version.filter(|v| *v != current.version) {
            return Err(BookingError::VersionConflict { expected, current: current.version });
        }
        if current.status == BookingStatus::Cancelled {
            return Ok(Changed { booking: current, changed: false });
        }
        limits::count_cancel(&tx, caller, &current, current.attendees.len()).await?;
        let booking = store::mark_cancelled(&tx, id).await?;
        self.faults.hit(FAULT_CHANGE_BETWEEN_WRITES)?;
        let payload = EventPayload::of(booking);
        let event_id = outbox::events::insert(&tx, &payload.to_outbox(EventType::BookingCancelled)).await?;
        tx.commit().await?;
        tracing::info!(%event_id, sub = caller.subject.as_deref().unwrap_or("-"), "booking cancelled");
        Ok(Changed { booking: payload.booking, changed: true })
    }

    /// Changes a booking (any of its fields and its attendees), if the
    /// caller has seen its current version (optimistic concurrency). A
    /// change that changes nothing writes nothing.
    #[tracing::instrument(skip_all, fields(booking_id = %id))]
    pub async fn update(
        &self,
        caller: &Caller,
        id: Uuid,
        changes: &BookingChanges,
        expected_version: i32,
    ) -> Result<Changed, BookingError> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let current = Self::lock_for_change(&tx, caller, id).await?;
        if current.version != expected_version {
            return Err(BookingError::VersionConflict { expected: expected_version, current: current.version });
        }
        if current.status == BookingStatus::Cancelled {
            return Err(BookingError::Cancelled);
        }
        // Each attendee's language, decided again for the booking as it
        // will stand (a tag changed, the organizer's, an attendee added).
        // A change that leaves every value as it is writes nothing, even
        // where the stored languages were decided otherwise (a booking from
        // before languages, or an older DEFAULT_LOCALE).
        let wanted = changes.apply_to(&current).with_languages(self.default_language);
        if wanted == current.clone().with_languages(self.default_language) {
            return Ok(Changed { booking: current, changed: false });
        }
        // An attendee's own time zone is kept, with a new version and an
        // event that tells nobody: no news, no mail.
        let quiet = wanted.differs_only_in_preferences(&current);
        // Every attendee of either list is mailed: the new list an update
        // and each new reminder still ahead, an added attendee the
        // reminders already written too, the removed ones a cancellation.
        // Each reminder on the day it falls due.
        let added = wanted.attendees.iter().filter(|a| !current.attendees.iter().any(|p| p.email == a.email)).count();
        let removed = current.attendees.iter().filter(|p| !wanted.attendees.iter().any(|a| a.email == p.email)).count();
        let mut mailing = limits::Mailing::default();
        if !quiet {
            mailing = limits::Mailing::today(wanted.attendees.len() + removed);
            let now = chrono::Utc::now();
            for (_, reminder, due) in
                reminder_events::ahead(&wanted.reminders, wanted.range.start(), now, self.reminder_scale)
            {
                let written_before = reminder_events::covered(Some(&current), &wanted, reminder);
                mailing.add(due, if written_before { added } else { wanted.attendees.len() });
            }
        }
        limits::count_change(&tx, &self.limits, caller, &current, &mailing).await?;
        let booking = store::update(&tx, &wanted).await?;
        self.faults.hit(FAULT_CHANGE_BETWEEN_WRITES)?;
        let payload = EventPayload { quiet, ..EventPayload::update(&current, booking) };
        let event_id = outbox::events::insert(&tx, &payload.to_outbox(EventType::BookingUpdated)).await?;
        // The reminders this change asks for anew (a new start, an offset
        // added); the older events of a moved start or a dropped offset
        // are superseded by this one when they fall due (booking::reminder_events).
        self.schedule_reminders(&tx, &payload.booking, Some(&current)).await?;
        tx.commit().await?;
        tracing::info!(%event_id, sub = caller.subject.as_deref().unwrap_or("-"), "booking updated");
        Ok(Changed { booking: payload.booking, changed: true })
    }

    async fn lock_for_change(
        tx: &deadpool_postgres::Transaction<'_>,
        caller: &Caller,
        id: Uuid,
    ) -> Result<Booking, BookingError> {
        match store::get_for_update(tx, id).await? {
            Some(b) if b.is_organizer(caller) => Ok(b),
            Some(b) if b.visible_to(caller) => Err(BookingError::NotOrganizer),
            _ => Err(BookingError::NotFound),
        }
    }
}
