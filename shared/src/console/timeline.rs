//! A booking's timeline: each of its events (and its reminders') from
//! commit to settlement, and per recipient each send from claim to the
//! provider's answer to SES's own events, with every replay and resend and
//! what it was decided on. Each table is read through its owner, by keys:
//! the cost is the booking's, never the history's.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::booking::events::BookingEvent;
use crate::booking::store::{self, Found};
use crate::booking::BookingError;
use crate::notify::evidence::feedback::{self, Heard};
use crate::notify::evidence::resend::{self, Resent};
use crate::notify::evidence::suppression;
use crate::notify::sends::{self, NotSentBecause, Send, SendStatus};
use crate::outbox::events::transitions::{self, Replayed};
use crate::outbox::events::{self, EventStatus, StoredEvent};

#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub booking: Found,
    pub events: Vec<EventLine>,
    /// The booking's recipients whose address is suppressed now, and why.
    pub suppressed: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EventLine {
    pub event: StoredEvent,
    /// The trace of the request that wrote it.
    pub trace_id: Option<String>,
    pub replays: Vec<Replayed>,
    pub sends: Vec<SendLine>,
    /// Recorded resends of its notifications (the claims they replaced are gone).
    pub resends: Vec<Resent>,
    /// Its recipients no send names yet (an event not DONE): each waits for
    /// a poller's claim, or its claim was released after a known failure.
    pub unclaimed: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SendLine {
    pub send: Send,
    /// SES's events about it, oldest first.
    pub heard: Vec<Heard>,
    /// Where it stands, in words.
    pub says: String,
}

impl Timeline {
    /// The timeline of `booking_id`, or None when no such booking exists.
    pub async fn fetch(client: &impl GenericClient, booking_id: Uuid) -> Result<Option<Timeline>, BookingError> {
        let Some(booking) = store::find(client, store::Search::Id(booking_id), 1).await?.pop() else {
            return Ok(None);
        };
        let history = events::history(client, booking_id).await?;
        let ids: Vec<Uuid> = history.iter().map(|e| e.id).collect();
        let all_sends = sends::of_events(client, &ids).await?;
        let send_ids: Vec<Uuid> = all_sends.iter().map(|s| s.id).collect();
        let heard = feedback::of_sends(client, &send_ids).await?;
        let resends = resend::of_events(client, &ids).await?;
        let replays = transitions::replays_of(client, &ids).await?;
        let mut recipients: Vec<&str> = all_sends.iter().map(|s| s.recipient.as_str()).collect();
        recipients.sort_unstable();
        recipients.dedup();
        let mut suppressed: Vec<(String, String)> =
            suppression::suppressions_of(client, &recipients).await?.into_iter().collect();
        suppressed.sort();
        let events = history
            .into_iter()
            .map(|event| EventLine {
                unclaimed: match (event.status, BookingEvent::from_stored(&event)) {
                    (EventStatus::Done, _) | (_, Err(_)) => Vec::new(),
                    (_, Ok(e)) => e
                        .audience()
                        .into_iter()
                        .map(|(p, _)| p.email.as_str().to_string())
                        .filter(|r| !all_sends.iter().any(|s| s.event_id == event.id && &s.recipient == r))
                        .collect(),
                },
                trace_id: event.traceparent.as_deref().and_then(|t| t.split('-').nth(1)).map(str::to_string),
                replays: replays.iter().filter(|r| r.event_id == event.id).cloned().collect(),
                resends: resends.iter().filter(|r| r.event_id == event.id).cloned().collect(),
                sends: all_sends
                    .iter()
                    .filter(|s| s.event_id == event.id)
                    .map(|s| SendLine {
                        says: says(s),
                        heard: heard.iter().filter(|h| h.send_id == s.id).cloned().collect(),
                        send: s.clone(),
                    })
                    .collect(),
                event,
            })
            .collect();
        Ok(Some(Timeline { booking, events, suppressed }))
    }
}

/// What an event's status means, in words.
pub fn event_says(e: &StoredEvent, now: DateTime<Utc>) -> String {
    match e.status {
        EventStatus::Pending if e.next_attempt_at > now && e.attempts == 0 => {
            format!("scheduled: falls due {}", e.next_attempt_at.format("%Y-%m-%d %H:%M:%S UTC"))
        }
        EventStatus::Pending if e.next_attempt_at > now => format!(
            "waiting to retry (attempt {} failed: {}) at {}",
            e.attempts,
            e.last_error.as_deref().unwrap_or("no reason stored"),
            e.next_attempt_at.format("%H:%M:%S UTC")
        ),
        EventStatus::Pending => "due now: waiting for a poller".to_string(),
        EventStatus::Processing => {
            format!("being processed by {}", e.locked_by.as_deref().unwrap_or("a poller"))
        }
        EventStatus::Done => "done: every recipient's send is settled".to_string(),
        EventStatus::Dead => format!(
            "dead-lettered after {} attempts: {}; replaying it sends to the recipients not yet sent",
            e.attempts,
            e.last_error.as_deref().unwrap_or("no reason stored")
        ),
    }
}

/// What a send's state means, in words.
pub fn says(s: &Send) -> String {
    let error = s.last_error.as_deref().unwrap_or("no reason stored");
    match s.status {
        SendStatus::Claimed => {
            format!("claimed by {}; the provider has not answered yet", s.claimed_by.as_deref().unwrap_or("a poller"))
        }
        SendStatus::Sent if s.confirmed_by.is_some() => {
            "accepted: the provider's answer was lost, and SES's own event proved it accepted the message".to_string()
        }
        SendStatus::Sent => format!("accepted by {}", s.provider),
        SendStatus::Failed if s.not_sent_because == Some(NotSentBecause::Suppressed) => {
            format!("not sent: the address is suppressed ({error})")
        }
        SendStatus::Failed => format!("refused for this recipient: {error}"),
        SendStatus::Unknown => match &s.left_for_operator {
            Some(why) => format!("outcome unknown, left for an operator: {why} (the call: {error})"),
            None if s.provider.publishes_events() => {
                format!("outcome unknown ({error}); awaiting SES's evidence, never resent blindly")
            }
            None => format!("outcome unknown ({error}); nothing reports back on this provider"),
        },
        SendStatus::Superseded if s.not_sent_because == Some(NotSentBecause::TooLate) => {
            "not sent: a reminder picked up once its meeting had started".to_string()
        }
        SendStatus::Superseded => match s.superseded_by {
            Some(later) => format!("not sent: a later change told them instead (event {later})"),
            None => format!("not sent: {error}"),
        },
        SendStatus::Capped => format!("not sent: over a limit that protects the recipient ({error})"),
    }
}
