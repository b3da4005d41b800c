//! A sent message as its recipient saw it: rendered again from the stored
//! event, for the recipient the send names, as the poller renders it (the
//! card, its text and HTML parts, its calendar part). Every claim of one
//! recipient's notification renders the very same bytes (no claim header),
//! so this is what was sent, save one thing the plan decided at the time
//! and does not store: whether an update read as an invitation because
//! nothing of the booking had reached them before. That is worked out the
//! same way here, from the sends the booking's earlier events kept.

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use crate::booking::events::{BookingEvent, EventType};
use crate::db::DbResult;
use crate::notify::notification::Notification;
use crate::notify::render::{calendar, card::Card, page};
use crate::notify::sends::{self, SendStatus};
use crate::outbox::events;

/// Which part of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Html,
    Text,
    Calendar,
}

impl Part {
    pub fn parse(s: &str) -> Option<Part> {
        match s {
            "html" => Some(Part::Html),
            "text" => Some(Part::Text),
            "ics" => Some(Part::Calendar),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Part::Html => "text/html; charset=utf-8",
            Part::Text => "text/plain; charset=utf-8",
            Part::Calendar => "text/calendar; charset=utf-8",
        }
    }
}

/// The part of the message `send_id` carried (None: no such send, its
/// event is gone, or the event names no such recipient any more).
pub async fn of_send(client: &impl GenericClient, send_id: Uuid, part: Part) -> DbResult<Option<String>> {
    let Some(send) = sends::read::get(client, send_id).await? else { return Ok(None) };
    let Some(stored) = events::get(client, send.event_id).await? else { return Ok(None) };
    let Ok(event) = BookingEvent::from_stored(&stored) else { return Ok(None) };
    let Some((person, notice)) = event.audience().into_iter().find(|(p, _)| p.email.as_str() == send.recipient) else {
        return Ok(None);
    };
    let introduces = match event.event_type {
        EventType::BookingConfirmed | EventType::BookingReminder => false,
        _ => {
            let earlier: Vec<Uuid> = events::history(client, stored.aggregate_id)
                .await?
                .into_iter()
                .filter(|e| e.aggregate_version < stored.aggregate_version)
                .map(|e| e.id)
                .collect();
            !sends::of_events(client, &earlier)
                .await?
                .iter()
                .any(|s| s.recipient == send.recipient && matches!(s.status, SendStatus::Sent | SendStatus::Unknown))
        }
    };
    let n = Notification { claim: Some(send.id), ..Notification::new(&event, person, notice, introduces) };
    Ok(match part {
        Part::Html => Some(page::html(&Card::of(&n))),
        Part::Text => Some(page::text(&Card::of(&n))),
        Part::Calendar => calendar::ics(&n),
    })
}
