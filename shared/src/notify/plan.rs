//! Who is told what about one event, resolved against the booking's later
//! events and the sends already made.
//!
//! Events of one booking are dispatched in version order, so when an event
//! is processed, any later event of its booking is still waiting. For each
//! recipient:
//!
//! - If a later event will tell them something (the meeting as it then
//!   stands, its cancellation or their removal), this event's message is
//!   moot: it is recorded as SUPERSEDED by that event, not sent.
//! - Else this event is their last word. A cancellation (or removal) is
//!   not sent to someone who was never told anything about the meeting;
//!   it is recorded as SUPERSEDED by this event ("nothing to cancel").
//! - Everyone else is sent this event's message. Someone who may have been
//!   told something (a send SENT, UNKNOWN or CLAIMED) always gets the
//!   final state, from this event or the later one.
//!
//! "Never told" is decided from the sends rows and the resends (a resend
//! removes the UNKNOWN claim it replaces, but that person may have been
//! told: `resend::resent_recipients_of`) of the events still stored, and,
//! once retention has deleted some, from what it kept of theirs
//! ([`introductions`]): a person added to an aged booking is a first
//! contact like any other. Each decision is itself a claim, so a later
//! attempt never revisits it.
//!
//! An event can also run again after later ones settled: an operator's
//! resend of one recipient, or a replay of a dead letter. Then a later
//! event already DONE (it told them the newer state) or DEAD (replaying it
//! will) supersedes this one just the same, whatever `skip_superseded`
//! says, and an invitation is never sent for a booking that is cancelled
//! now: an old message never overtakes a newer one.
//!
//! A reminder (`BOOKING_REMINDER`, in a lane of its own:
//! `booking::reminder_events`) follows the booking's events instead of their
//! order. It answers for one offset before one start until a later event
//! moves the meeting, cancels it or drops the offset: that event supersedes
//! it (so does a booking cancelled now). Any other change leaves it the
//! reminder of its offset, and it reminds the booking as its latest event
//! states it: that event's attendees, title and place. One picked up once
//! the meeting has started is recorded too late ([`NotSentBecause::TooLate`]). While any event of the booking
//! is unfinished (pending, being sent, or dead until an operator replays
//! it) it waits ([`Waiting`]): a reminder never overtakes its invitation or
//! an update. Then it goes to each attendee who may have been told of the
//! meeting, never to one whose every message was capped, refused or
//! superseded. The claim checks again that the booking has not changed
//! since this plan (`deliver`): a change committed meanwhile plans it anew.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use crate::booking::domain::BookingStatus;
use crate::booking::events::{BookingEvent, EventPayload, EventType, Notice};
use crate::booking::{reminder_events, store};
use crate::db::DbResult;
use crate::notify::evidence::resend;
use crate::notify::notification::Notification;
use crate::notify::sends::{self, introductions, NotSentBecause};
use crate::outbox::events::{self, EventStatus, Unfinished};

/// One recipient's message, to send or to record as superseded.
#[derive(Debug, Clone)]
pub enum Planned {
    Send(Notification),
    /// Not sent: recorded as a SUPERSEDED claim naming event `by`.
    Superseded {
        notification: Notification,
        by: Uuid,
        reason: String,
        because: Option<NotSentBecause>,
    },
}

impl Planned {
    pub fn notification(&self) -> &Notification {
        match self {
            Planned::Send(n) | Planned::Superseded { notification: n, .. } => n,
        }
    }
}

/// A reminder that must wait: an event of its booking is unfinished. The
/// event goes back to PENDING for `retry`, without using an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: String,
    pub retry: std::time::Duration,
}

impl Waiting {
    /// Behind an event being sent, or a change committed during the plan.
    pub const RETRY: std::time::Duration = std::time::Duration::from_secs(5);
    /// Behind a dead letter, until an operator replays it (or the meeting
    /// starts: then it is too late).
    pub const RETRY_DEAD: std::time::Duration = std::time::Duration::from_secs(60);
}

/// What happens to one event: each recipient's message, or (a reminder)
/// a wait.
pub type EventPlan = Result<Vec<Planned>, Waiting>;

/// The plan for `event`. With `skip_superseded` off, everyone is sent
/// this event's message, as before superseding existed (a reminder always
/// follows its booking).
pub async fn plan(client: &impl GenericClient, event: &BookingEvent, skip_superseded: bool) -> DbResult<EventPlan> {
    Ok(plan_many(client, &[event], skip_superseded).await?.pop().expect("one plan per event"))
}

/// [`plan`] for a batch of events of distinct bookings (and reminders),
/// reading what the plans need in a few statements for the whole batch.
pub async fn plan_many(
    client: &impl GenericClient,
    batch: &[&BookingEvent],
    skip_superseded: bool,
) -> DbResult<Vec<EventPlan>> {
    let of: Vec<(Uuid, i32)> = batch.iter().map(|e| (e.payload.booking.id, e.payload.booking.version)).collect();
    // The bookings first: each version's event commits with it, so every
    // event up to the version read here is among those read next.
    let bookings: Vec<Uuid> = of.iter().map(|a| a.0).collect();
    let standing = store::standing_among(client, &bookings).await?;
    let later = events::later_many(client, &of).await?;
    // What comes after each event (a batch may hold a booking's event and
    // its reminders, of other lanes and versions): only its own, once.
    let after: Vec<Vec<Later>> = batch
        .iter()
        .map(|event| {
            let version = event.payload.booking.version;
            let mut seen = std::collections::HashSet::new();
            let after: Vec<events::StoredEvent> = later
                .get(&event.payload.booking.id)
                .into_iter()
                .flatten()
                .filter(|e| e.aggregate_version > version && seen.insert(e.id))
                .cloned()
                .collect();
            readable(&after)
        })
        .collect();
    // Who was told before: an update or a cancellation asks of the events
    // before it; a reminder, of every event up to the latest it speaks for.
    let asks: Vec<(Uuid, i32)> = batch
        .iter()
        .zip(&of)
        .zip(&after)
        .filter(|((e, _), _)| !first_event(e))
        .map(
            |((e, &(id, v)), after)| {
                if is_reminder(e) {
                    (id, latest(e, after).payload.booking.version + 1)
                } else {
                    (id, v)
                }
            },
        )
        .collect();
    let whole = events::history_complete_many(client, &asks).await?;
    let reminded: Vec<Uuid> = batch.iter().zip(&of).filter(|(e, _)| is_reminder(e)).map(|(_, a)| a.0).collect();
    let unfinished = events::unfinished_of(client, &reminded).await?;
    // Who may have been told: their sends (and resends) while the events
    // exist; what retention kept of the events it deleted
    // ([`introductions`]) for a booking whose history it has begun to
    // delete.
    let asked_ids: Vec<Uuid> = asks.iter().map(|a| a.0).collect::<std::collections::HashSet<_>>().into_iter().collect();
    let mut told_by = sends::possibly_told_many(client, &asked_ids).await?;
    for (booking, recipient) in resend::resent_recipients_of(client, &asked_ids).await? {
        told_by.entry(booking).or_default().push(recipient);
    }
    let aged: Vec<Uuid> = asked_ids.iter().filter(|id| !whole.contains(id)).copied().collect();
    for (booking, kept) in introductions::kept_for(client, &aged).await? {
        told_by.entry(booking).or_default().extend(kept);
    }
    let now = Utc::now();
    Ok(batch
        .iter()
        .zip(&after)
        .map(|(event, later)| {
            let id = event.payload.booking.id;
            let now_at = standing.get(&id).copied();
            let cancelled = now_at.is_some_and(|s| s.cancelled);
            let told = if first_event(event) {
                Told::Nobody
            } else {
                Told::Some(told_by.get(&id).cloned().unwrap_or_default())
            };
            if is_reminder(event) {
                let stands = Stands { gone: now_at.is_none(), cancelled, version: now_at.map_or(0, |s| s.version) };
                plan_reminder(event, later, &told, stands, unfinished.get(&id).copied(), now)
            } else {
                Ok(plan_with(event, later, &told, cancelled, skip_superseded))
            }
        })
        .collect())
}

/// The booking as a reminder's plan reads it now.
struct Stands {
    /// No booking row: deleted (by hand; nothing deletes bookings).
    gone: bool,
    cancelled: bool,
    version: i32,
}

/// The latest event a reminder speaks for: its booking's last readable
/// later event, else its own.
fn latest<'a>(event: &'a BookingEvent, later: &'a [Later]) -> &'a BookingEvent {
    later.last().map_or(event, |l| &l.event)
}

/// A reminder's plan; see the module documentation.
fn plan_reminder(
    event: &BookingEvent,
    later: &[Later],
    told: &Told,
    now_at: Stands,
    unfinished: Option<Unfinished>,
    now: DateTime<Utc>,
) -> EventPlan {
    let start = event.payload.booking.range.start();
    let not_sent = |by: Uuid, reason: String, because: Option<NotSentBecause>| -> EventPlan {
        Ok(event
            .audience()
            .into_iter()
            .map(|(person, notice)| Planned::Superseded {
                notification: Notification::new(event, person, notice, false),
                by,
                reason: reason.clone(),
                because,
            })
            .collect())
    };
    let Some(offset) = event.payload.reminder else {
        return not_sent(event.id, "a reminder without its offset: no reminder".to_string(), None);
    };
    // The first later event that no longer asks for it ends it.
    let ended =
        later.iter().map(|l| &l.event).find(|l| !reminder_events::still_asks(&l.payload.booking, start, offset));
    if let Some(last) = ended {
        let b = &last.payload.booking;
        let reason = if last.event_type == EventType::BookingCancelled || b.status == BookingStatus::Cancelled {
            format!("the booking was cancelled (version {}): no reminder", b.version)
        } else if b.range.start() != start {
            format!("the meeting moved (version {}): the reminders of its new time replace this one", b.version)
        } else {
            format!("the reminder {offset} was removed (version {}): no reminder", b.version)
        };
        return not_sent(last.id, reason, None);
    }
    if now_at.gone {
        return not_sent(event.id, "the booking is gone: no reminder".to_string(), None);
    }
    if now_at.cancelled {
        return not_sent(event.id, "the booking is cancelled: no reminder".to_string(), None);
    }
    if now >= start {
        let start = start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let reason = format!("too late: the meeting started at {start}; a reminder never comes after");
        return not_sent(event.id, reason, Some(NotSentBecause::TooLate));
    }
    let latest = latest(event, later);
    match unfinished {
        Some(Unfinished::Running) => {
            let reason = "an event of the booking is still being sent: a reminder never goes before it";
            return Err(Waiting { reason: reason.to_string(), retry: Waiting::RETRY });
        }
        Some(Unfinished::Dead) => {
            let reason = "an event of the booking is dead-lettered: a reminder waits for its replay";
            return Err(Waiting { reason: reason.to_string(), retry: Waiting::RETRY_DEAD });
        }
        None => {}
    }
    // A version the events read after it do not reach: its event is gone
    // (deleted by hand; retention keeps them), so what changed is unknown.
    if now_at.version > latest.payload.booking.version {
        let reason = "the booking changed since and the events that changed it are gone: no reminder of this version";
        return not_sent(event.id, reason.to_string(), None);
    }
    // The booking as its latest event states it, reminded at this offset.
    let speaks = BookingEvent {
        payload: EventPayload { reminder: Some(offset), ..EventPayload::of(latest.payload.booking.clone()) },
        ..event.clone()
    };
    Ok(speaks
        .audience()
        .into_iter()
        .map(|(person, notice)| {
            let told_of_it = told.may_have_told(person.email.as_str());
            let n = Notification::new(&speaks, person, notice, false);
            if told_of_it {
                Planned::Send(n)
            } else {
                let reason = "never told of this meeting: no reminder".to_string();
                Planned::Superseded { notification: n, by: event.id, reason, because: None }
            }
        })
        .collect())
}

fn is_reminder(event: &BookingEvent) -> bool {
    event.event_type == EventType::BookingReminder
}

/// A later event of the booking, and whether it has settled (DONE, or DEAD
/// for a replay): this event then runs again after it.
struct Later {
    event: BookingEvent,
    settled: bool,
}

/// The later events that tell anyone anything (an unreadable one will be
/// dead-lettered and tells no one), whatever their status.
fn readable(stored: &[events::StoredEvent]) -> Vec<Later> {
    stored
        .iter()
        .filter_map(|e| {
            let settled = matches!(e.status, EventStatus::Done | EventStatus::Dead);
            BookingEvent::from_stored(e).ok().map(|event| Later { event, settled })
        })
        .collect()
}

fn plan_with(
    event: &BookingEvent,
    later: &[Later],
    told: &Told,
    cancelled_now: bool,
    skip_superseded: bool,
) -> Vec<Planned> {
    // A cancellation writes its event in the same transaction as the
    // booking's status: the booking is cancelled now if a later event is,
    // or if the booking says so (its later events may be gone).
    let cancelled = cancelled_now || later.iter().any(|l| l.event.event_type == EventType::BookingCancelled);
    let mut plan = Vec::new();
    for (person, notice) in event.audience() {
        let email = person.email.as_str().to_string();
        let introduces = !told.may_have_told(&email);
        let n = as_they_now_ask(Notification::new(event, person, notice, introduces), later);
        let mut telling = later.iter().rev().filter(|l| l.event.notice_for(&email).is_some());
        // The newest later event that tells them supersedes this message,
        // if it has settled (always) or is still to run (when skipping).
        let superseding = telling.clone().find(|l| l.settled || skip_superseded);
        let still_to_tell = telling.any(|l| !l.settled);
        if let Some(Later { event: last, .. }) = superseding {
            let reason =
                format!("superseded by the later {} (version {})", last.event_type, last.payload.booking.version);
            plan.push(Planned::Superseded { notification: n, by: last.id, reason, because: None });
        } else if cancelled && notice == Notice::Request && !still_to_tell {
            let reason = "the booking is cancelled: no invitation to a meeting that no longer exists".to_string();
            plan.push(Planned::Superseded { notification: n, by: event.id, reason, because: None });
        } else if skip_superseded && notice != Notice::Request && introduces {
            let reason = "never told of this meeting: nothing to cancel".to_string();
            plan.push(Planned::Superseded { notification: n, by: event.id, reason, because: None });
        } else {
            plan.push(Planned::Send(n));
        }
    }
    plan
}

/// The message as its recipient now asks to read it: their own zone and
/// language, and the organizer's language, from the newest version of the
/// booking that lists them. A change of those alone tells no one, so it
/// supersedes nothing: without this, a message queued before it would go
/// in the zone and language it replaced.
fn as_they_now_ask(mut n: Notification, later: &[Later]) -> Notification {
    let newest = later
        .iter()
        .map(|l| &l.event.payload.booking)
        .filter(|b| b.version > n.payload.booking.version)
        .filter_map(|b| b.attendees.iter().find(|p| p.email == n.recipient.email).map(|p| (b, p)))
        .max_by_key(|(b, _)| b.version);
    if let Some((booking, person)) = newest {
        n.recipient.timezone = person.timezone;
        n.recipient.locale = person.locale.clone();
        n.recipient.language = person.language;
        n.payload.booking.organizer.locale = booking.organizer.locale.clone();
    }
    n
}

/// Who may have been told something about the booking before this event.
enum Told {
    /// The first event of a booking: nobody yet (an earlier attempt's own
    /// claims are found by the claim itself).
    Nobody,
    Some(Vec<String>),
}

impl Told {
    fn may_have_told(&self, email: &str) -> bool {
        match self {
            Told::Nobody => false,
            Told::Some(told) => told.iter().any(|t| t == email),
        }
    }
}

fn first_event(event: &BookingEvent) -> bool {
    event.event_type == EventType::BookingConfirmed && event.payload.booking.version == 1
}
