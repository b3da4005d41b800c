//! SES's own evidence about ambiguous sends: how far its event stream has
//! demonstrably got (the watermark), and the canaries that move it when
//! traffic does not. Every statement on `ses_event_watermarks` and
//! `ses_canaries` (V25) lives here.
//!
//! A send whose outcome was lost could have reached SES until its
//! `reaches_provider_by` (its claim, plus the longest its start may wait,
//! plus the mailer's worst case). SES publishes an event for every message
//! it accepts, stamped with when it accepted it (`mail.timestamp`). Once an
//! event has arrived for a message SES accepted after that time (plus a
//! clock allowance of 2 s), the stream has moved past the send; once the
//! feedback grace has passed since that arrival, with events still arriving
//! after it (the stream did not stop meanwhile), and still no event names
//! the send, SES very likely never accepted it, and it may be resent
//! ([`resend`](super::resend)). The residual risk is an accepted message whose
//! every event is lost or delayed past the grace relative to a later
//! message's: docs/crash-points.md gives it in words and numbers.
//!
//! - [`observe`]: the SES-events function records, for every event of this
//!   stack's configuration set, the second of SES's clock it is about and
//!   when the first such event arrived (insert-only: an event writes no row
//!   version).
//! - `ses_stream_passed(reaches_by, grace)` and `ses_stream_reached(reaches_by)`
//!   (SQL functions, migration V47): "the stream moved past this send, at
//!   least the grace ago", and "at all", which `sends::unknown`'s
//!   statements call by name.
//! - [`canary_due`] / [`record_canary`]: when sends wait for evidence and
//!   no event has come for a minute, the poller sends a message to SES's
//!   mailbox simulator (at most one a minute, `SES_CANARY_EVERY_SECS`), whose events
//!   move the watermark, and show the stream alive, like any other.

use std::time::Duration;

use chrono::{DateTime, Utc};
use const_format::formatcp;
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::db::DbResult;

/// An event further ahead of the database's clock than this is about no
/// second the watermark may trust (SES's clock is never that far off).
const FUTURE_LIMIT_SECS: u64 = 60;

/// Records that an event about a message SES accepted at `mail_at` has
/// arrived (the first of its second stays). An event stamped far in the
/// future moves nothing.
pub async fn observe(client: &impl GenericClient, mail_at: DateTime<Utc>) -> DbResult<()> {
    let sql = formatcp!(
        "INSERT INTO ses_event_watermarks (mail_second) \
         SELECT date_trunc('second', $1::timestamptz) \
          WHERE $1::timestamptz <= now() + make_interval(secs => {FUTURE_LIMIT_SECS}) \
         ON CONFLICT (mail_second) DO NOTHING"
    );
    client.execute(&client.prepare_cached(sql).await?, &[&mail_at]).await?;
    Ok(())
}

/// How far SES's event stream has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Watermark {
    /// The newest second of SES's clock an event was about.
    pub mail_second: DateTime<Utc>,
    /// When the first event about it arrived.
    pub received_at: DateTime<Utc>,
}

/// The watermark now (None: no event has ever arrived, or retention
/// deleted them all).
pub async fn watermark(client: &impl GenericClient) -> DbResult<Option<Watermark>> {
    let row = client
        .query_opt("SELECT mail_second, received_at FROM ses_event_watermarks ORDER BY mail_second DESC LIMIT 1", &[])
        .await?;
    Ok(row.map(|r| Watermark { mail_second: r.get(0), received_at: r.get(1) }))
}

/// Whether a canary should go out now: sends await SES's evidence
/// (`awaiting`, from `sends::unknown::awaiting_evidence_any`), no event has
/// arrived for `every` (`SES_CANARY_EVERY_SECS`: traffic alone is neither
/// moving the watermark nor showing the stream alive), and no canary went
/// out in that time. So at most one per `every`, fleet-wide, and only while
/// sends wait; the sweeper leaves a send for an operator once it has waited
/// a day.
pub async fn canary_due(client: &impl GenericClient, awaiting: bool, every: Duration) -> DbResult<bool> {
    if !awaiting {
        return Ok(false);
    }
    let sql = "SELECT NOT EXISTS (SELECT 1 FROM ses_event_watermarks \
                                   WHERE received_at > now() - make_interval(secs => $1)) \
                  AND NOT EXISTS (SELECT 1 FROM ses_canaries WHERE sent_at > now() - make_interval(secs => $1))";
    Ok(client.query_one(sql, &[&every.as_secs_f64()]).await?.get(0))
}

/// Records a canary the poller sent (or tried to): its id (its tag), what
/// the provider answered, and SES's message id when it accepted it.
pub async fn record_canary(
    client: &impl GenericClient,
    id: Uuid,
    outcome: &str,
    message_id: Option<&str>,
) -> DbResult<()> {
    client
        .execute(
            "INSERT INTO ses_canaries (id, outcome, message_id) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
            &[&id, &outcome, &message_id],
        )
        .await?;
    Ok(())
}

/// A canary's event arrived; false when it is not one of ours (or retention
/// deleted it).
pub async fn canary_seen(client: &impl GenericClient, id: Uuid) -> DbResult<bool> {
    let n = client.execute("UPDATE ses_canaries SET seen_at = coalesce(seen_at, now()) WHERE id = $1", &[&id]).await?;
    Ok(n == 1)
}

/// Retention: watermark seconds and canaries older than `max_age`, up to
/// `limit` each; the newest second always stays (it is what a send
/// claimed next is compared with). Deleting old seconds never removes
/// evidence: a newer second proves at least as much about an older send.
pub async fn purge(client: &impl GenericClient, max_age: Duration, limit: i64) -> DbResult<u64> {
    let seconds = client
        .execute(
            "DELETE FROM ses_event_watermarks WHERE mail_second IN ( \
                 SELECT mail_second FROM ses_event_watermarks \
                  WHERE mail_second < now() - make_interval(secs => $1) \
                    AND mail_second < (SELECT max(mail_second) FROM ses_event_watermarks) \
                  ORDER BY mail_second LIMIT $2)",
            &[&max_age.as_secs_f64(), &limit],
        )
        .await?;
    let canaries = client
        .execute(
            "DELETE FROM ses_canaries WHERE id IN (SELECT id FROM ses_canaries \
              WHERE sent_at < now() - make_interval(secs => $1) ORDER BY sent_at LIMIT $2)",
            &[&max_age.as_secs_f64(), &limit],
        )
        .await?;
    Ok(seconds + canaries)
}
