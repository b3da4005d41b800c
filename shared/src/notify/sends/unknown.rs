//! Sends whose outcome was unknown, as operators and the sweeper see them:
//! listed with their standing against SES's feedback, stamped when the
//! grace period passes unconfirmed, and locked or deleted for an operator's
//! resend (`notify::unknown` records the decision).

use std::time::Duration;

use chrono::{DateTime, Utc};
use const_format::formatcp;
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use super::status::confirmed_sql::SES_EVENT;
use super::status::send_sql::{CLAIMED, SENT, UNKNOWN};
use super::SendStatus;
use crate::db::DbResult;
use crate::outbox::events::IN_FLIGHT_EVENT_WITH_ID;

/// The only provider whose events can settle an UNKNOWN send (a literal
/// for the statements below).
const FEEDBACK_PROVIDER: &str = formatcp!("'{}'", crate::notify::send_rate::SES);

/// Where a send with an unknown outcome stands with SES's own feedback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confirmation {
    /// Within the feedback grace period: SES's Send event may still come.
    AwaitingFeedback,
    /// No Send (or later) event within the grace period: very likely never
    /// accepted by SES. Only these need an operator's decision.
    NotConfirmed,
    /// Was ambiguous, then SES's own event proved it accepted: SENT.
    ConfirmedBySes,
    /// Sent through SMTP, which reports nothing back: the server may have
    /// it. Never resent by the sweeper or `--unconfirmed`; an operator
    /// checks the provider's log for its Message-ID.
    NoFeedback,
}

impl Confirmation {
    fn of(row: &tokio_postgres::Row) -> Self {
        match row.get::<_, &str>("confirmation") {
            "confirmed" => Confirmation::ConfirmedBySes,
            "not_confirmed" => Confirmation::NotConfirmed,
            "no_feedback" => Confirmation::NoFeedback,
            _ => Confirmation::AwaitingFeedback,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Confirmation::AwaitingFeedback => "awaiting SES feedback",
            Confirmation::NotConfirmed => "not confirmed by SES",
            Confirmation::ConfirmedBySes => "confirmed by SES event",
            Confirmation::NoFeedback => "sent through SMTP, which reports nothing back: check its log",
        }
    }
}

/// A send whose outcome was unknown.
#[derive(Debug, Clone, Serialize)]
pub struct UnknownSend {
    pub id: Uuid,
    pub event_id: Uuid,
    pub booking_id: Uuid,
    pub recipient: String,
    pub event_type: String,
    pub status: SendStatus,
    pub confirmation: Confirmation,
    pub last_error: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub claimed_by: Option<String>,
    /// When the sweeper first reported it not confirmed.
    pub unconfirmed_at: Option<DateTime<Utc>>,
}

impl UnknownSend {
    fn of(r: &tokio_postgres::Row) -> DbResult<Self> {
        Ok(Self {
            id: r.get("id"),
            event_id: r.get("outbox_event_id"),
            booking_id: r.get("booking_id"),
            recipient: r.get("recipient_email"),
            event_type: r.get("event_type"),
            status: SendStatus::from_row(r, "status")?,
            confirmation: Confirmation::of(r),
            last_error: r.get("last_error"),
            claimed_at: r.get("claimed_at"),
            claimed_by: r.get("claimed_by"),
            unconfirmed_at: r.get("unconfirmed_at"),
        })
    }
}

/// The columns of [`UnknownSend`]; `$1` is the feedback grace in seconds.
const UNKNOWN_COLUMNS: &str = formatcp!(
    "s.id, s.outbox_event_id, s.booking_id, s.recipient_email, s.event_type, s.status, s.last_error, \
     s.claimed_at, s.claimed_by, s.unconfirmed_at, \
     CASE WHEN s.status = {SENT} THEN 'confirmed' \
          WHEN s.provider <> {FEEDBACK_PROVIDER} THEN 'no_feedback' \
          WHEN s.claimed_at < now() - make_interval(secs => $1) THEN 'not_confirmed' \
          ELSE 'awaiting' END AS confirmation"
);

/// A CLAIMED send whose event is not in flight: its worker died and no
/// retry has looked at it yet.
const ORPHANED: &str = formatcp!("(s.status = {CLAIMED} AND NOT EXISTS ({IN_FLIGHT_EVENT_WITH_ID}s.outbox_event_id))");

/// UNKNOWN sends and orphaned CLAIMED ones, newest claim first (ids are
/// UUIDv7s made at the claim), each with its
/// standing against the feedback `grace`; with `confirmed`, also the ones
/// SES's event settled.
pub async fn list_unknown(
    client: &impl GenericClient,
    grace: Duration,
    confirmed: bool,
    limit: i64,
) -> DbResult<Vec<UnknownSend>> {
    let sql = formatcp!(
        "SELECT {UNKNOWN_COLUMNS} FROM booking_notification_sends s \
          WHERE s.status = {UNKNOWN} OR {ORPHANED} \
             OR ($2 AND s.status = {SENT} AND s.confirmed_by = {SES_EVENT}) \
          ORDER BY s.id DESC LIMIT $3"
    );
    let rows = client.query(sql, &[&grace.as_secs_f64(), &confirmed, &limit]).await?;
    rows.iter().map(UnknownSend::of).collect()
}

/// Stamps UNKNOWN sends claimed more than `grace` ago, with no SES event
/// yet, as reported not confirmed; returns the ones stamped now (each is
/// reported once). `last_error IS NOT NULL` (every UNKNOWN send says why)
/// reads the index of the sends that were not SENT, not the whole table.
pub async fn mark_unconfirmed(client: &impl GenericClient, grace: Duration, limit: i64) -> DbResult<Vec<UnknownSend>> {
    let sql = formatcp!(
        "UPDATE booking_notification_sends s SET unconfirmed_at = now() \
          WHERE s.id IN (SELECT id FROM booking_notification_sends \
                          WHERE last_error IS NOT NULL AND status = {UNKNOWN} AND unconfirmed_at IS NULL \
                            AND provider = {FEEDBACK_PROVIDER} \
                            AND claimed_at < now() - make_interval(secs => $1) \
                          ORDER BY claimed_at LIMIT $2) \
      RETURNING {UNKNOWN_COLUMNS}"
    );
    let rows = client.query(sql, &[&grace.as_secs_f64(), &limit]).await?;
    rows.iter().map(UnknownSend::of).collect()
}

/// UNKNOWN sends claimed more than `older_than` ago and still not confirmed
/// by SES, oldest first (read from the index of the sends not SENT, as
/// [`mark_unconfirmed`]).
pub async fn unconfirmed_ids(client: &impl GenericClient, older_than: Duration, limit: i64) -> DbResult<Vec<Uuid>> {
    let sql = formatcp!(
        "SELECT id FROM booking_notification_sends \
          WHERE last_error IS NOT NULL AND status = {UNKNOWN} AND claimed_at < now() - make_interval(secs => $1) \
            AND provider = {FEEDBACK_PROVIDER} \
          ORDER BY claimed_at LIMIT $2"
    );
    let rows = client.query(sql, &[&older_than.as_secs_f64(), &limit]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// How the sends that were ambiguous stand: UNKNOWN awaiting feedback,
/// UNKNOWN not confirmed past `grace` (and every SMTP one: nothing will
/// confirm it), and those SES's events confirmed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnknownCounts {
    pub awaiting_feedback: i64,
    pub not_confirmed: i64,
    pub confirmed_by_ses: i64,
}

pub async fn unknown_counts(client: &impl GenericClient, grace: Duration) -> DbResult<UnknownCounts> {
    let sql = formatcp!(
        "SELECT count(*) FILTER (WHERE status = {UNKNOWN} AND provider = {FEEDBACK_PROVIDER} \
                                   AND claimed_at >= now() - make_interval(secs => $1)), \
                count(*) FILTER (WHERE status = {UNKNOWN} AND (provider <> {FEEDBACK_PROVIDER} \
                                   OR claimed_at < now() - make_interval(secs => $1))), \
                count(*) FILTER (WHERE status = {SENT} AND confirmed_by = {SES_EVENT}) \
           FROM booking_notification_sends WHERE status IN ({UNKNOWN}, {SENT})"
    );
    let row = client.query_one(sql, &[&grace.as_secs_f64()]).await?;
    Ok(UnknownCounts { awaiting_feedback: row.get(0), not_confirmed: row.get(1), confirmed_by_ses: row.get(2) })
}

/// Locks one send for an operator's decision; returns its event and status.
pub async fn lock(tx: &impl GenericClient, id: Uuid) -> DbResult<Option<(Uuid, SendStatus)>> {
    let row = tx
        .query_opt("SELECT outbox_event_id, status FROM booking_notification_sends WHERE id = $1 FOR UPDATE", &[&id])
        .await?;
    row.map(|r| Ok((r.get("outbox_event_id"), SendStatus::from_row(&r, "status")?))).transpose()
}

/// Deletes a claim (an operator's resend decision, recorded first).
pub async fn delete(tx: &impl GenericClient, id: Uuid) -> DbResult<()> {
    tx.execute("DELETE FROM booking_notification_sends WHERE id = $1", &[&id]).await?;
    Ok(())
}
