//! `booking_notification_sends`: one row per
//! `(outbox_event_id, recipient_email, event_type)`. Every statement on the
//! table lives here.
//!
//! The claim runs in its own (autocommit) transaction on purpose: it must be
//! durable *before* the mailer is called, so that a crash after an accepted
//! send can never lead to a second send.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use const_format::{concatcp, formatcp};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use super::Notification;
use crate::db::DbResult;
use crate::outbox::events::{EventStatus, EVENT_WITH_ID};

/// The state of one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SendStatus {
    /// Committed; the mailer has not answered (or the worker died).
    Claimed,
    /// Accepted by the provider.
    Sent,
    /// Permanently refused for this recipient.
    Failed,
    /// The outcome could not be known; never re-sent automatically.
    Unknown,
    /// Not sent: a later event of the booking made it moot
    /// (`superseded_by`). Never sent afterwards either.
    Superseded,
}

impl SendStatus {
    pub const ALL: [SendStatus; 5] =
        [SendStatus::Claimed, SendStatus::Sent, SendStatus::Failed, SendStatus::Unknown, SendStatus::Superseded];

    /// The status as stored; statements splice it in at compile time.
    pub const fn as_str(self) -> &'static str {
        match self {
            SendStatus::Claimed => "CLAIMED",
            SendStatus::Sent => "SENT",
            SendStatus::Failed => "FAILED",
            SendStatus::Unknown => "UNKNOWN",
            SendStatus::Superseded => "SUPERSEDED",
        }
    }
}

impl fmt::Display for SendStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SendStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| format!("unknown send status {s:?}"))
    }
}

fn status_of(row: &tokio_postgres::Row, idx: &str) -> SendStatus {
    let raw: &str = row.get(idx);
    raw.parse().unwrap_or_else(|e| panic!("booking_notification_sends.{idx}: {e}"))
}

const CLAIMED: &str = concatcp!("'", SendStatus::Claimed.as_str(), "'");
const SENT: &str = concatcp!("'", SendStatus::Sent.as_str(), "'");
const FAILED: &str = concatcp!("'", SendStatus::Failed.as_str(), "'");
const SUPERSEDED: &str = concatcp!("'", SendStatus::Superseded.as_str(), "'");
const UNKNOWN: &str = concatcp!("'", SendStatus::Unknown.as_str(), "'");
const EVENT_PROCESSING: &str = concatcp!("'", EventStatus::Processing.as_str(), "'");

pub enum Claim {
    /// This worker owns the send; the claim is committed.
    Won(Uuid),
    /// A claim already exists: never send again.
    Exists { id: Uuid, status: SendStatus },
}

/// Claims one send. Commits before returning (autocommit statement).
pub async fn claim(client: &impl GenericClient, n: &Notification, worker: &str) -> DbResult<Claim> {
    insert_claim(client, n, worker, SendStatus::Claimed, None).await
}

/// Records that `n` will not be sent because event `by` made it moot,
/// with the reason: a SUPERSEDED claim, so no later attempt sends it.
pub async fn claim_superseded(
    client: &impl GenericClient,
    n: &Notification,
    worker: &str,
    by: Uuid,
    reason: &str,
) -> DbResult<Claim> {
    insert_claim(client, n, worker, SendStatus::Superseded, Some((by, reason))).await
}

async fn insert_claim(
    client: &impl GenericClient,
    n: &Notification,
    worker: &str,
    status: SendStatus,
    superseded: Option<(Uuid, &str)>,
) -> DbResult<Claim> {
    debug_assert_eq!(status == SendStatus::Superseded, superseded.is_some());
    let mut claims = claim_group(client, &[GroupClaim { notification: n, superseded }], worker).await?;
    Ok(claims.pop().expect("one claim per item"))
}

/// One claim of a group: a send (CLAIMED) or a superseded decision
/// (SUPERSEDED, naming the later event and the reason).
pub struct GroupClaim<'a> {
    pub notification: &'a Notification,
    pub superseded: Option<(Uuid, &'a str)>,
}

/// Claims a group of sends in one statement, committed before it returns
/// (autocommit): every send of the group is durable before any is made.
/// Returns one [`Claim`] per item, in order; finding the existing claims
/// costs a second statement only when some were claimed before.
pub async fn claim_group(client: &impl GenericClient, group: &[GroupClaim<'_>], worker: &str) -> DbResult<Vec<Claim>> {
    let ids: Vec<Uuid> = group.iter().map(|_| Uuid::now_v7()).collect();
    let events: Vec<Uuid> = group.iter().map(|c| c.notification.event_id).collect();
    let bookings: Vec<Uuid> = group.iter().map(|c| c.notification.payload.booking.id).collect();
    let recipients: Vec<&str> = group.iter().map(|c| c.notification.recipient.email.as_str()).collect();
    let types: Vec<&str> = group.iter().map(|c| c.notification.event_type.as_str()).collect();
    let statuses: Vec<&str> = group
        .iter()
        .map(|c| if c.superseded.is_some() { SendStatus::Superseded } else { SendStatus::Claimed }.as_str())
        .collect();
    let by: Vec<Option<Uuid>> = group.iter().map(|c| c.superseded.map(|s| s.0)).collect();
    let reasons: Vec<Option<&str>> = group.iter().map(|c| c.superseded.map(|s| s.1)).collect();
    let won = client
        .query(
            &client
                .prepare_cached(
                    "INSERT INTO booking_notification_sends \
                         (id, outbox_event_id, booking_id, recipient_email, event_type, claimed_by, status, \
                          superseded_by, last_error, completed_at) \
                     SELECT c.id, c.event_id, c.booking_id, c.recipient, c.event_type, $6, c.status, c.by, c.reason, \
                            CASE WHEN c.by IS NULL THEN NULL ELSE now() END \
                       FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $7::text[], \
                                   $8::uuid[], $9::text[]) \
                            AS c(id, event_id, booking_id, recipient, event_type, status, by, reason) \
                     ON CONFLICT (outbox_event_id, recipient_email, event_type) DO NOTHING RETURNING id",
                )
                .await?,
            &[&ids, &events, &bookings, &recipients, &types, &worker, &statuses, &by, &reasons],
        )
        .await?;
    let won: std::collections::HashSet<Uuid> = won.iter().map(|r| r.get(0)).collect();
    let mut existing = std::collections::HashMap::new();
    if won.len() < group.len() {
        let rows = client
            .query(
                &client
                    .prepare_cached(
                        "SELECT s.id, s.outbox_event_id, s.recipient_email, s.event_type, s.status \
                           FROM booking_notification_sends s \
                           JOIN unnest($1::uuid[], $2::text[], $3::text[]) AS c(event_id, recipient, event_type) \
                             ON s.outbox_event_id = c.event_id AND s.recipient_email = c.recipient \
                            AND s.event_type = c.event_type",
                    )
                    .await?,
                &[&events, &recipients, &types],
            )
            .await?;
        for row in rows {
            let key: (Uuid, String, String) = (row.get(1), row.get(2), row.get(3));
            existing.insert(key, Claim::Exists { id: row.get(0), status: status_of(&row, "status") });
        }
    }
    Ok(ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            if won.contains(id) {
                return Claim::Won(*id);
            }
            let key = (events[i], recipients[i].to_string(), types[i].to_string());
            match existing.get(&key) {
                Some(Claim::Exists { id, status }) => Claim::Exists { id: *id, status: *status },
                // Deleted in between (a release by a swept attempt): claimed
                // by nobody now, but not by us either; the retry will see.
                _ => Claim::Exists { id: Uuid::nil(), status: SendStatus::Failed },
            }
        })
        .collect())
}

/// What became of one claimed send, to record with [`record_outcomes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted: SENT with the provider's message id.
    Sent(String),
    /// FAILED or UNKNOWN with the reason (kept SENT if SES's event came first).
    Settled(Settled, String),
    /// Certainly not sent: the claim is deleted, so a retry may send it.
    Released,
}

/// Records the outcomes of claims in one statement: SENT with the message
/// id; FAILED or UNKNOWN with the reason (a send SES's own event already
/// confirmed while the mailer waited stays SENT); or the claim deleted, so
/// a retry may send it.
pub async fn record_outcomes(client: &impl GenericClient, outcomes: &[(Uuid, Outcome)]) -> DbResult<()> {
    if outcomes.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = outcomes.iter().map(|(id, _)| *id).collect();
    let statuses: Vec<Option<&str>> = outcomes
        .iter()
        .map(|(_, o)| match o {
            Outcome::Sent(_) => Some(SendStatus::Sent.as_str()),
            Outcome::Settled(Settled::Failed, _) => Some(SendStatus::Failed.as_str()),
            Outcome::Settled(Settled::Unknown, _) => Some(SendStatus::Unknown.as_str()),
            Outcome::Released => None,
        })
        .collect();
    let message_ids: Vec<Option<&str>> =
        outcomes.iter().map(|(_, o)| if let Outcome::Sent(m) = o { Some(m.as_str()) } else { None }).collect();
    let errors: Vec<Option<&str>> =
        outcomes.iter().map(|(_, o)| if let Outcome::Settled(_, e) = o { Some(e.as_str()) } else { None }).collect();
    let sql = formatcp!(
        "WITH o AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) \
                      AS o(id, status, message_id, error)), \
              released AS (DELETE FROM booking_notification_sends s USING o \
                            WHERE s.id = o.id AND o.status IS NULL AND s.status = {CLAIMED} RETURNING s.id) \
         UPDATE booking_notification_sends s \
            SET status = o.status, provider_message_id = coalesce(o.message_id, s.provider_message_id), \
                last_error = coalesce(o.error, s.last_error), completed_at = now(), updated_at = now() \
           FROM o WHERE s.id = o.id AND o.status IS NOT NULL AND (s.status = {CLAIMED} OR o.status = {SENT})"
    );
    client.execute(&client.prepare_cached(sql).await?, &[&ids, &statuses, &message_ids, &errors]).await?;
    Ok(())
}

/// Claims left CLAIMED by an attempt that died between claim and outcome:
/// the email may or may not have gone out, so each becomes UNKNOWN and is
/// never re-sent automatically (`outboxctl unknown` lists them).
pub async fn mark_orphans_unknown(client: &impl GenericClient, ids: &[Uuid]) -> DbResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let sql = formatcp!(
        "UPDATE booking_notification_sends SET status = {UNKNOWN}, \
             last_error = 'claimed by an attempt that died before recording the outcome', \
             completed_at = now(), updated_at = now() \
         WHERE id = ANY($1) AND status = {CLAIMED}"
    );
    client.execute(&client.prepare_cached(sql).await?, &[&ids]).await?;
    Ok(())
}

/// For each booking, the recipients that may have been told something
/// about it: a send SENT, UNKNOWN, or still CLAIMED (an attempt may be
/// sending it). One statement for all of them.
pub async fn possibly_told_many(
    client: &impl GenericClient,
    booking_ids: &[Uuid],
) -> DbResult<std::collections::HashMap<Uuid, Vec<String>>> {
    let mut told: std::collections::HashMap<Uuid, Vec<String>> = booking_ids.iter().map(|b| (*b, Vec::new())).collect();
    if booking_ids.is_empty() {
        return Ok(told);
    }
    let sql = formatcp!(
        "SELECT DISTINCT booking_id, recipient_email FROM booking_notification_sends \
          WHERE booking_id = ANY($1) AND status IN ({SENT}, {UNKNOWN}, {CLAIMED})"
    );
    for row in client.query(&client.prepare_cached(sql).await?, &[&booking_ids]).await? {
        told.entry(row.get(0)).or_default().push(row.get(1));
    }
    Ok(told)
}

/// How a send settled without being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Permanently refused for this recipient.
    Failed,
    /// The provider may or may not have accepted it.
    Unknown,
}

/// `(recipient, status)` of every send of an event, by recipient.
pub async fn of_event(client: &impl GenericClient, event_id: Uuid) -> DbResult<Vec<(String, SendStatus)>> {
    let rows = client
        .query(
            "SELECT recipient_email, status FROM booking_notification_sends WHERE outbox_event_id = $1 \
             ORDER BY recipient_email",
            &[&event_id],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get("recipient_email"), status_of(r, "status"))).collect())
}

/// Sends by status, zeros included.
pub async fn counts(client: &impl GenericClient) -> DbResult<BTreeMap<SendStatus, i64>> {
    let mut counts: BTreeMap<SendStatus, i64> = SendStatus::ALL.into_iter().map(|s| (s, 0)).collect();
    for row in client.query("SELECT status, count(*) AS n FROM booking_notification_sends GROUP BY status", &[]).await?
    {
        counts.insert(status_of(&row, "status"), row.get("n"));
    }
    Ok(counts)
}

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
}

impl Confirmation {
    fn of(row: &tokio_postgres::Row) -> Self {
        match row.get::<_, &str>("confirmation") {
            "confirmed" => Confirmation::ConfirmedBySes,
            "not_confirmed" => Confirmation::NotConfirmed,
            _ => Confirmation::AwaitingFeedback,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Confirmation::AwaitingFeedback => "awaiting SES feedback",
            Confirmation::NotConfirmed => "not confirmed by SES",
            Confirmation::ConfirmedBySes => "confirmed by SES event",
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
    fn of(r: &tokio_postgres::Row) -> Self {
        Self {
            id: r.get("id"),
            event_id: r.get("outbox_event_id"),
            booking_id: r.get("booking_id"),
            recipient: r.get("recipient_email"),
            event_type: r.get("event_type"),
            status: status_of(r, "status"),
            confirmation: Confirmation::of(r),
            last_error: r.get("last_error"),
            claimed_at: r.get("claimed_at"),
            claimed_by: r.get("claimed_by"),
            unconfirmed_at: r.get("unconfirmed_at"),
        }
    }
}

/// The columns of [`UnknownSend`]; `$1` is the feedback grace in seconds.
const UNKNOWN_COLUMNS: &str = formatcp!(
    "s.id, s.outbox_event_id, s.booking_id, s.recipient_email, s.event_type, s.status, s.last_error, \
     s.claimed_at, s.claimed_by, s.unconfirmed_at, \
     CASE WHEN s.status = {SENT} THEN 'confirmed' \
          WHEN s.claimed_at < now() - make_interval(secs => $1) THEN 'not_confirmed' \
          ELSE 'awaiting' END AS confirmation"
);

/// A CLAIMED send whose event is not in flight: its worker died and no
/// retry has looked at it yet.
const ORPHANED: &str = formatcp!(
    "(s.status = {CLAIMED} AND NOT EXISTS ( \
        SELECT 1 FROM outbox_events e WHERE e.id = s.outbox_event_id AND e.status = {EVENT_PROCESSING}))"
);

/// UNKNOWN sends and orphaned CLAIMED ones, newest first, each with its
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
             OR ($2 AND s.status = {SENT} AND s.confirmed_by = 'ses-event') \
          ORDER BY s.claimed_at DESC LIMIT $3"
    );
    let rows = client.query(sql, &[&grace.as_secs_f64(), &confirmed, &limit]).await?;
    Ok(rows.iter().map(UnknownSend::of).collect())
}

/// Stamps UNKNOWN sends claimed more than `grace` ago, with no SES event
/// yet, as reported not confirmed; returns the ones stamped now (each is
/// reported once).
pub async fn mark_unconfirmed(client: &impl GenericClient, grace: Duration, limit: i64) -> DbResult<Vec<UnknownSend>> {
    let sql = formatcp!(
        "UPDATE booking_notification_sends s SET unconfirmed_at = now() \
          WHERE s.id IN (SELECT id FROM booking_notification_sends \
                          WHERE status = {UNKNOWN} AND unconfirmed_at IS NULL \
                            AND claimed_at < now() - make_interval(secs => $1) \
                          ORDER BY claimed_at LIMIT $2) \
      RETURNING {UNKNOWN_COLUMNS}"
    );
    let rows = client.query(sql, &[&grace.as_secs_f64(), &limit]).await?;
    Ok(rows.iter().map(UnknownSend::of).collect())
}

/// UNKNOWN sends claimed more than `older_than` ago and still not confirmed
/// by SES, oldest first.
pub async fn unconfirmed_ids(client: &impl GenericClient, older_than: Duration, limit: i64) -> DbResult<Vec<Uuid>> {
    let sql = formatcp!(
        "SELECT id FROM booking_notification_sends \
          WHERE status = {UNKNOWN} AND claimed_at < now() - make_interval(secs => $1) \
          ORDER BY claimed_at LIMIT $2"
    );
    let rows = client.query(sql, &[&older_than.as_secs_f64(), &limit]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// How the sends that were ambiguous stand: UNKNOWN awaiting feedback,
/// UNKNOWN not confirmed past `grace`, and those SES's events confirmed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnknownCounts {
    pub awaiting_feedback: i64,
    pub not_confirmed: i64,
    pub confirmed_by_ses: i64,
}

pub async fn unknown_counts(client: &impl GenericClient, grace: Duration) -> DbResult<UnknownCounts> {
    let sql = formatcp!(
        "SELECT count(*) FILTER (WHERE status = {UNKNOWN} AND claimed_at >= now() - make_interval(secs => $1)), \
                count(*) FILTER (WHERE status = {UNKNOWN} AND claimed_at < now() - make_interval(secs => $1)), \
                count(*) FILTER (WHERE status = {SENT} AND confirmed_by = 'ses-event') \
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
    Ok(row.map(|r| (r.get("outbox_event_id"), status_of(&r, "status"))))
}

/// Deletes a claim (an operator's resend decision, recorded first).
pub async fn delete(tx: &impl GenericClient, id: Uuid) -> DbResult<()> {
    tx.execute("DELETE FROM booking_notification_sends WHERE id = $1", &[&id]).await?;
    Ok(())
}

/// Retention: deletes up to `limit` SENT/FAILED/SUPERSEDED sends completed more than
/// `max_age` ago whose event no longer exists. A claim of an event that
/// exists is kept, even a DONE one: the event may be reopened (a retry, a
/// replay or an operator's resend), and without its claim it would send
/// that email twice.
pub async fn purge(client: &impl GenericClient, max_age: Duration, limit: i64) -> DbResult<u64> {
    const SQL: &str = concatcp!(
        "DELETE FROM booking_notification_sends WHERE id IN ( \
             SELECT s.id FROM booking_notification_sends s \
              WHERE s.status IN (",
        SENT,
        ", ",
        FAILED,
        ", ",
        SUPERSEDED,
        ") AND s.completed_at < now() - make_interval(secs => $1) \
                AND NOT EXISTS (",
        EVENT_WITH_ID,
        "s.outbox_event_id) LIMIT $2)"
    );
    Ok(client.execute(SQL, &[&max_age.as_secs_f64(), &limit]).await?)
}
