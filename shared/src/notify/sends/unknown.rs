//! Sends whose outcome was unknown, as operators and the sweeper see them:
//! listed with where they stand against SES's evidence, found for a resend
//! once SES's event stream has moved past them, left for an operator when
//! no evidence can settle them, and locked or deleted for a resend
//! (`notify::evidence::resend` records the decision).

use std::time::Duration;

use chrono::{DateTime, Utc};
use const_format::formatcp;
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use super::status::confirmed_sql::SES_EVENT;
use super::status::send_sql::{CLAIMED, SENT, UNKNOWN};
use super::status::{via_sql, SendStatus};
use crate::db::DbResult;

/// An ambiguous send SES's evidence has not settled within this long is
/// left for an operator (its events are not coming: no event destination,
/// or a stream that stopped), and canaries stop.
pub const EVIDENCE_GIVE_UP: Duration = Duration::from_secs(86_400);

/// The providers whose sends SES's events may settle
/// ([`SentVia::publishes_events`]), as an SQL list for the statements below.
const FEEDBACK_PROVIDERS: &str = formatcp!("{}, {}", via_sql::SES, via_sql::SES_SMTP);

/// `r.reaches_by` for the send `s`: when it could last have reached the
/// provider (a claim made before V25 has no such time: its claim plus a
/// minute stands in).
const REACHES_BY: &str =
    "CROSS JOIN LATERAL (SELECT coalesce(s.reaches_provider_by, s.claimed_at + interval '1 minute') AS reaches_by) r";

/// Why an UNKNOWN send through a provider that reports nothing is left for
/// an operator.
pub const NO_FEEDBACK: &str = "sent through SMTP, which reports nothing back: check its log for the Message-ID";

/// Where a send whose outcome was unknown stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confirmation {
    /// SES's own event may still settle it, or its stream has not yet moved
    /// past it for the grace: resent automatically only once it has and no
    /// event names it.
    AwaitingEvidence,
    /// Was ambiguous, then SES's own event proved it accepted: SENT.
    ConfirmedBySes,
    /// SES's stream moved past it and no event named it: resent (the
    /// decision and its evidence are recorded).
    ResentOnEvidence,
    /// No evidence can settle it (SMTP reports nothing; resent as often as
    /// allowed; its event is DEAD; SES reported a rejection): an operator
    /// decides, and `left_for_operator` says why.
    LeftForOperator,
}

impl Confirmation {
    pub fn describe(self) -> &'static str {
        match self {
            Confirmation::AwaitingEvidence => "awaiting SES's evidence",
            Confirmation::ConfirmedBySes => "confirmed by SES event",
            Confirmation::ResentOnEvidence => "resent on SES's evidence",
            Confirmation::LeftForOperator => "left for an operator",
        }
    }
}

/// The watermark second that proved SES's stream moved past a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Evidence {
    /// A second of SES's clock after the send could last have reached it...
    pub mail_second: DateTime<Utc>,
    /// ...whose first event arrived then, at least the grace ago.
    pub received_at: DateTime<Utc>,
}

impl Evidence {
    fn of(row: &tokio_postgres::Row) -> Option<Self> {
        match (row.get("evidence_mail_second"), row.get("evidence_received_at")) {
            (Some(mail_second), Some(received_at)) => Some(Evidence { mail_second, received_at }),
            _ => None,
        }
    }
}

/// A send whose outcome was unknown (or one resent on evidence).
#[derive(Debug, Clone, Serialize)]
pub struct UnknownSend {
    pub id: Uuid,
    pub event_id: Uuid,
    /// None for a resent send (its claim is gone; the new one has it).
    pub booking_id: Option<Uuid>,
    pub recipient: String,
    pub event_type: String,
    pub status: SendStatus,
    pub confirmation: Confirmation,
    /// Why it is left for an operator.
    pub left_for_operator: Option<String>,
    pub last_error: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub claimed_by: Option<String>,
    /// When it could last have reached the provider.
    pub reaches_provider_by: Option<DateTime<Utc>>,
    /// What SES's stream proves about it already (or proved, for a resend).
    pub evidence: Option<Evidence>,
    /// For a resend: when and by whom it was decided.
    pub resent: Option<(DateTime<Utc>, String)>,
}

impl UnknownSend {
    fn of(r: &tokio_postgres::Row) -> DbResult<Self> {
        let status = SendStatus::from_row(r, "status")?;
        let left: Option<String> = r.get("left_for_operator");
        let confirmation = match status {
            SendStatus::Sent => Confirmation::ConfirmedBySes,
            _ if left.is_some() => Confirmation::LeftForOperator,
            _ => Confirmation::AwaitingEvidence,
        };
        Ok(Self {
            id: r.get("id"),
            event_id: r.get("outbox_event_id"),
            booking_id: Some(r.get("booking_id")),
            recipient: r.get("recipient_email"),
            event_type: r.get("event_type"),
            status,
            confirmation,
            left_for_operator: left,
            last_error: r.get("last_error"),
            claimed_at: r.get("claimed_at"),
            claimed_by: r.get("claimed_by"),
            reaches_provider_by: r.get("reaches_provider_by"),
            evidence: Evidence::of(r),
            resent: None,
        })
    }
}

/// The columns of [`UnknownSend`] for the send `s` (with `r` and the
/// watermark `w`; `$1` is the grace in seconds).
const UNKNOWN_COLUMNS: &str = formatcp!(
    "s.id, s.outbox_event_id, s.booking_id, s.recipient_email, s.event_type, s.status, s.last_error, \
     s.claimed_at, s.claimed_by, s.reaches_provider_by, \
     CASE WHEN s.status = {UNKNOWN} AND s.provider NOT IN ({FEEDBACK_PROVIDERS}) \
          THEN coalesce(s.left_for_operator, '{NO_FEEDBACK}') \
          WHEN s.status = {UNKNOWN} THEN s.left_for_operator END AS left_for_operator, \
     w.mail_second AS evidence_mail_second, w.received_at AS evidence_received_at"
);

/// A CLAIMED send whose event is not in flight: its worker died and no
/// retry has looked at it yet.
const ORPHANED: &str =
    formatcp!("(s.status = {CLAIMED} AND NOT EXISTS (SELECT 1 FROM outbox_event_in_flight(s.outbox_event_id)))");

/// UNKNOWN sends and orphaned CLAIMED ones, newest claim first (ids are
/// UUIDv7s made at the claim), each with where it stands against SES's
/// evidence (`grace`: how long after the stream moved past a send its own
/// event may still come); with `confirmed`, also the ones SES's event
/// settled.
pub async fn list_unknown(
    client: &impl GenericClient,
    grace: Duration,
    confirmed: bool,
    limit: i64,
) -> DbResult<Vec<UnknownSend>> {
    let sql = formatcp!(
        "SELECT {UNKNOWN_COLUMNS} FROM booking_notification_sends s {REACHES_BY} \
           LEFT JOIN LATERAL ses_stream_passed(r.reaches_by, $1) w ON s.status = {UNKNOWN} \
          WHERE s.status = {UNKNOWN} OR {ORPHANED} \
             OR ($2 AND s.status = {SENT} AND s.confirmed_by = {SES_EVENT}) \
          ORDER BY s.id DESC LIMIT $3"
    );
    let rows = client.query(sql, &[&grace.as_secs_f64(), &confirmed, &limit]).await?;
    rows.iter().map(UnknownSend::of).collect()
}

/// An UNKNOWN send SES's events may settle, not left for an operator, with
/// the evidence (if any yet) that SES's stream moved past it at least
/// `grace` ago.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub id: Uuid,
    pub event_id: Uuid,
    pub recipient: String,
    pub event_type: String,
    pub evidence: Option<Evidence>,
    /// It has waited longer than [`EVIDENCE_GIVE_UP`].
    pub given_up: bool,
}

/// Up to `limit` UNKNOWN sends awaiting SES's evidence, oldest claim
/// first, those with evidence first (read from the index of the sends that
/// were not SENT: every UNKNOWN send says why).
pub async fn awaiting_evidence(client: &impl GenericClient, grace: Duration, limit: i64) -> DbResult<Vec<Candidate>> {
    let sql = formatcp!(
        "SELECT s.id, s.outbox_event_id, s.recipient_email, s.event_type, \
                w.mail_second AS evidence_mail_second, w.received_at AS evidence_received_at, \
                r.reaches_by < now() - make_interval(secs => {give_up}) AS given_up \
           FROM booking_notification_sends s {REACHES_BY} LEFT JOIN LATERAL ses_stream_passed(r.reaches_by, $1) w ON true \
          WHERE s.last_error IS NOT NULL AND s.status = {UNKNOWN} AND s.provider IN ({FEEDBACK_PROVIDERS}) \
            AND s.left_for_operator IS NULL \
          ORDER BY w.mail_second IS NULL, s.claimed_at LIMIT $2",
        give_up = EVIDENCE_GIVE_UP.as_secs()
    );
    let rows = client.query(sql, &[&grace.as_secs_f64(), &limit]).await?;
    Ok(rows
        .iter()
        .map(|r| Candidate {
            id: r.get("id"),
            event_id: r.get("outbox_event_id"),
            recipient: r.get("recipient_email"),
            event_type: r.get("event_type"),
            evidence: Evidence::of(r),
            given_up: r.get("given_up"),
        })
        .collect())
}

/// Whether any UNKNOWN send awaits SES's evidence (for the canary).
pub async fn awaiting_evidence_any(client: &impl GenericClient) -> DbResult<bool> {
    let sql = formatcp!(
        "SELECT EXISTS (SELECT 1 FROM booking_notification_sends s \
          WHERE s.last_error IS NOT NULL AND s.status = {UNKNOWN} AND s.provider IN ({FEEDBACK_PROVIDERS}) \
            AND s.left_for_operator IS NULL)"
    );
    Ok(client.query_one(sql, &[]).await?.get(0))
}

/// Leaves an UNKNOWN send for an operator, saying why (once: a reason
/// already given stays). Returns whether it was left now.
pub async fn leave_for_operator(client: &impl GenericClient, id: Uuid, why: &str) -> DbResult<bool> {
    let sql = formatcp!(
        "UPDATE booking_notification_sends SET left_for_operator = $2, updated_at = now() \
          WHERE id = $1 AND status = {UNKNOWN} AND left_for_operator IS NULL"
    );
    Ok(client.execute(sql, &[&id, &why]).await? == 1)
}

/// How the sends that were ambiguous stand.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnknownCounts {
    /// UNKNOWN, waiting for SES's evidence.
    pub awaiting_evidence: i64,
    /// Of those, the ones SES's stream has not moved past although they
    /// could last have reached SES more than the grace ago: its events are
    /// not arriving (no event destination, the SES-events function
    /// failing), and nothing will be resent until they do.
    pub evidence_stalled: i64,
    /// UNKNOWN and left for an operator.
    pub left_for_operator: i64,
    /// Ambiguous, then confirmed by SES's own event.
    pub confirmed_by_ses: i64,
    /// Resent on SES's evidence (filled in by `notify::evidence::resend::counts`).
    pub resent_on_evidence: i64,
}

/// Read from the partial indexes alone (an UNKNOWN send always says why,
/// `booking_notification_sends_with_error`; a confirmation names its
/// source, `booking_notification_sends_confirmed`, V49): the cost is that
/// of the ambiguous sends, never the history's.
pub async fn unknown_counts(client: &impl GenericClient, grace: Duration) -> DbResult<UnknownCounts> {
    let sql = formatcp!(
        "SELECT count(*) FILTER (WHERE s.provider IN ({FEEDBACK_PROVIDERS}) AND s.left_for_operator IS NULL), \
                count(*) FILTER (WHERE s.provider IN ({FEEDBACK_PROVIDERS}) AND s.left_for_operator IS NULL \
                                   AND r.reaches_by < now() - make_interval(secs => $1) AND NOT EXISTS (SELECT 1 FROM ses_stream_reached(r.reaches_by))), \
                count(*) FILTER (WHERE s.left_for_operator IS NOT NULL OR s.provider NOT IN ({FEEDBACK_PROVIDERS})), \
                (SELECT count(*) FROM booking_notification_sends c \
                  WHERE c.confirmed_by IS NOT NULL AND c.status = {SENT} AND c.confirmed_by = {SES_EVENT}) \
           FROM booking_notification_sends s {REACHES_BY} WHERE s.last_error IS NOT NULL AND s.status = {UNKNOWN}"
    );
    let row = client.query_one(sql, &[&grace.as_secs_f64()]).await?;
    Ok(UnknownCounts {
        awaiting_evidence: row.get(0),
        evidence_stalled: row.get(1),
        left_for_operator: row.get(2),
        confirmed_by_ses: row.get(3),
        resent_on_evidence: 0,
    })
}

/// The UNKNOWN sends left for an operator, the latest claimed first, at
/// most `limit` (from `booking_notification_sends_with_error`, in order).
pub async fn left_for_operator(client: &impl GenericClient, grace: Duration, limit: i64) -> DbResult<Vec<UnknownSend>> {
    let sql = formatcp!(
        "SELECT {UNKNOWN_COLUMNS} FROM booking_notification_sends s {REACHES_BY} \
           LEFT JOIN LATERAL ses_stream_passed(r.reaches_by, $1) w ON true \
          WHERE s.last_error IS NOT NULL AND s.status = {UNKNOWN} AND s.left_for_operator IS NOT NULL \
          ORDER BY s.claimed_at DESC LIMIT $2"
    );
    let rows = client.query(sql, &[&grace.as_secs_f64(), &limit]).await?;
    rows.iter().map(UnknownSend::of).collect()
}

/// Locks one send for a resend; returns its event, status and provider.
pub async fn lock(tx: &impl GenericClient, id: Uuid) -> DbResult<Option<Locked>> {
    read_one(tx, id, true).await
}

/// One send as [`lock`] reads it, without the lock (what a preview shows).
pub async fn lock_free(client: &impl GenericClient, id: Uuid) -> DbResult<Option<Locked>> {
    read_one(client, id, false).await
}

async fn read_one(client: &impl GenericClient, id: Uuid, for_update: bool) -> DbResult<Option<Locked>> {
    const SQL: &str = "SELECT outbox_event_id, recipient_email, event_type, status, last_error, claimed_at \
                         FROM booking_notification_sends WHERE id = $1";
    const LOCKED: &str = formatcp!("{SQL} FOR UPDATE");
    let row = client.query_opt(if for_update { LOCKED } else { SQL }, &[&id]).await?;
    row.map(|r| {
        Ok(Locked {
            event_id: r.get("outbox_event_id"),
            recipient: r.get("recipient_email"),
            event_type: r.get("event_type"),
            status: SendStatus::from_row(&r, "status")?,
            last_error: r.get("last_error"),
            claimed_at: r.get("claimed_at"),
        })
    })
    .transpose()
}

/// A send under its row lock ([`lock`]): what a decision about it records.
#[derive(Debug, Clone)]
pub struct Locked {
    pub event_id: Uuid,
    pub recipient: String,
    pub event_type: String,
    pub status: SendStatus,
    pub last_error: Option<String>,
    pub claimed_at: DateTime<Utc>,
}

/// Deletes a claim (a resend decision, recorded first).
pub async fn delete(tx: &impl GenericClient, id: Uuid) -> DbResult<()> {
    tx.execute("DELETE FROM booking_notification_sends WHERE id = $1", &[&id]).await?;
    Ok(())
}
