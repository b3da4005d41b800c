//! The claim: one committed statement per group of sends, before any of
//! them is made (the story's "claim before send").
//!
//! The statement runs in its own (autocommit) transaction on purpose: it
//! must be durable *before* the mailer is called, so that a crash after an
//! accepted send can never lead to a second send.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::{NotSentBecause, SendStatus, SentVia};
use crate::db::DbResult;

/// Who claims: the worker (`claimed_by`), its mailer (`provider`), and the
/// lease it holds the sends' events under (the fence).
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    pub worker: &'a str,
    pub provider: SentVia,
    pub lease: Uuid,
}
use crate::notify::notification::Notification;

pub enum Claim {
    /// This worker owns the send; the claim is committed.
    Won(Uuid),
    /// A claim already exists: never send again.
    Exists { id: Uuid, status: SendStatus },
    /// Not claimed: its event is no longer held under the claimant's lease
    /// (taken over by another claim, or swept). The claimant must stop.
    Fenced,
}

/// One claim of a group: a send (CLAIMED), or a decision not to send it
/// recorded as the claim itself.
pub struct GroupClaim<'a> {
    pub notification: &'a Notification,
    pub decided: Option<Decided<'a>>,
}

/// A claim made already settled, with no send.
#[derive(Debug, Clone, Copy)]
pub enum Decided<'a> {
    /// SUPERSEDED: a later event of the booking (`by`) made it moot, or
    /// (`TooLate`) a reminder's meeting had started.
    Superseded { by: Uuid, reason: &'a str, because: Option<NotSentBecause> },
    /// FAILED: refused before any send, the address being suppressed.
    Suppressed { reason: &'a str },
}

/// New claims' ids, one per item of a group, for [`claim`]: the caller
/// knows them before the statement runs, so it can release what the
/// statement may have committed when its answer is lost. They are UUIDv7s,
/// made now: retention finds old sends by them ([`super::read::purge`]).
pub fn new_ids(group: &[GroupClaim<'_>]) -> Vec<Uuid> {
    group.iter().map(|_| Uuid::now_v7()).collect()
}

/// Claims a group of sends in one statement, committed before it returns
/// (autocommit): every send of the group is durable before any is made.
/// `ids` ([`new_ids`]) name the claims this call makes; a send claimed
/// records that it can reach the provider until `reaches_within` from now
/// (the longest its start may wait plus the mailer's worst case: SES's
/// events about later messages are evidence about it). Returns one
/// [`Claim`] per item, in order; finding the existing claims costs a second
/// statement only when some were claimed before.
///
/// Fenced: sends are claimed only while `claimant.lease` lives, checked in
/// the same statement ([`crate::outbox::events::lease::LIVE`]): while it
/// does, the events it holds are its holder's.
pub async fn claim(
    client: &impl GenericClient,
    group: &[GroupClaim<'_>],
    ids: &[Uuid],
    claimant: &Claimant<'_>,
    reaches_within: std::time::Duration,
) -> DbResult<Vec<Claim>> {
    let Claimant { worker, provider, lease } = *claimant;
    assert_eq!(ids.len(), group.len(), "one new id per claim");
    let events: Vec<Uuid> = group.iter().map(|c| c.notification.event_id).collect();
    let bookings: Vec<Uuid> = group.iter().map(|c| c.notification.payload.booking.id).collect();
    let recipients: Vec<&str> = group.iter().map(|c| c.notification.recipient.email.as_str()).collect();
    let types: Vec<&str> = group.iter().map(|c| c.notification.event_type.as_str()).collect();
    let statuses: Vec<&str> = group
        .iter()
        .map(|c| match c.decided {
            None => SendStatus::Claimed,
            Some(Decided::Superseded { .. }) => SendStatus::Superseded,
            Some(Decided::Suppressed { .. }) => SendStatus::Failed,
        })
        .map(SendStatus::as_str)
        .collect();
    let by: Vec<Option<Uuid>> = group
        .iter()
        .map(|c| match c.decided {
            Some(Decided::Superseded { by, .. }) => Some(by),
            _ => None,
        })
        .collect();
    let reasons: Vec<Option<&str>> = group
        .iter()
        .map(|c| match c.decided {
            Some(Decided::Superseded { reason, .. } | Decided::Suppressed { reason }) => Some(reason),
            None => None,
        })
        .collect();
    let because: Vec<Option<&str>> = group
        .iter()
        .map(|c| match c.decided {
            Some(Decided::Superseded { because, .. }) => because.map(NotSentBecause::as_str),
            Some(Decided::Suppressed { .. }) => Some(NotSentBecause::Suppressed.as_str()),
            None => None,
        })
        .collect();
    let won = client
        .query(
            &client
                .prepare_cached(
                    "INSERT INTO booking_notification_sends \
                         (id, outbox_event_id, booking_id, recipient_email, event_type, claimed_by, status, \
                          superseded_by, last_error, not_sent_because, completed_at, provider, reaches_provider_by) \
                     SELECT c.id, c.event_id, c.booking_id, c.recipient, c.event_type, $6, c.status, c.by, c.reason, \
                            c.because, CASE WHEN c.reason IS NULL THEN NULL ELSE now() END, $10, \
                            CASE WHEN c.reason IS NULL THEN now() + make_interval(secs => $11) END \
                       FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $7::text[], \
                                   $8::uuid[], $9::text[], $13::text[]) \
                            AS c(id, event_id, booking_id, recipient, event_type, status, by, reason, because) \
                      WHERE EXISTS (SELECT 1 FROM outbox_lease_live($12)) \
                     ON CONFLICT (outbox_event_id, recipient_email, event_type) DO NOTHING RETURNING id",
                )
                .await?,
            &[
                &ids,
                &events,
                &bookings,
                &recipients,
                &types,
                &worker,
                &statuses,
                &by,
                &reasons,
                &provider.as_str(),
                &reaches_within.as_secs_f64(),
                &lease,
                &because,
            ],
        )
        .await?;
    let won: HashSet<Uuid> = won.iter().map(|r| r.get(0)).collect();
    let mut existing = HashMap::new();
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
            existing.insert(key, Claim::Exists { id: row.get(0), status: SendStatus::from_row(&row, "status")? });
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
                // Neither inserted nor found: the fence kept it out (the
                // lease ended; only the event's holder releases its claims,
                // and not meanwhile).
                _ => Claim::Fenced,
            }
        })
        .collect())
}
