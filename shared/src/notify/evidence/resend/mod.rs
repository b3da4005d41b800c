//! Sends whose outcome is unknown: claimed, but the worker died or the
//! provider's answer was ambiguous before the outcome was recorded. These
//! are the emails that may have been lost in the claim-then-crash window.
//!
//! SES's own events settle the ones SES accepted ([`feedback`](super::feedback)): an event
//! proves acceptance and the claim becomes SENT. The rest are resent, but
//! only on SES's evidence ([`settle_on_evidence`], the sweeper's step):
//! its event stream has moved past the send ([`watermark`](super::watermark)), the grace has
//! passed since, and still no event names it. Each resend is a recorded
//! decision in `notification_resends` (every statement on that table lives
//! here), with its evidence: the claim is removed and the event reopened,
//! and the poller then sends that one recipient and nobody else
//! ([`pending_recipients`]), however the event's other sends stand. A
//! recipient is resent at most `UNKNOWN_RESENDS_MAX` times; what no
//! evidence can settle is left for an operator, who may resend by hand
//! ([`resend`], `outboxctl unknown resend`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::db::{DbError, DbResult};
use crate::notify::sends::{self, SendStatus};
use crate::outbox::events::transitions;
use crate::outbox::processed;

mod check;
mod history;

use check::event_settled;
pub use check::{preview, Preview, ResendError};
pub use history::{mark_resent, of_events, pending_recipients, pending_recipients_many, Resent};
pub use sends::unknown::{Candidate, Confirmation, Evidence, UnknownCounts, UnknownSend};

/// Who the sweeper records as deciding a resend on evidence.
pub const EVIDENCE_DECIDER: &str = "sweeper (SES's events moved past it; none named it)";

/// Why a resend was decided: an operator's word, or SES's evidence.
#[derive(Debug, Clone, Copy)]
pub enum Decision<'a> {
    Operator(&'a str),
    Evidence { evidence: Evidence, grace: Duration },
}

/// Records the decision and reopens the event so the poller re-sends this
/// one recipient. One transaction; returns the event's id. Only an UNKNOWN
/// (or orphaned CLAIMED) send, checked under its row lock, which the
/// SES-events function takes too: any event of SES's about it settles it
/// (SENT, or FAILED for a rejection), so an event that came first wins.
pub async fn resend(
    client: &mut deadpool_postgres::Client,
    send_id: Uuid,
    decision: Decision<'_>,
) -> Result<Uuid, ResendError> {
    let tx = client.transaction().await?;
    let send = sends::unknown::lock(&tx, send_id).await?.ok_or(ResendError::NotFound(send_id))?;
    let (event_id, status) = (send.event_id, send.status);
    if !matches!(status, SendStatus::Unknown | SendStatus::Claimed) {
        return Err(ResendError::NotUnknown { id: send_id, status });
    }
    event_settled(&tx, send_id, event_id).await?;
    if matches!(decision, Decision::Operator(_)) {
        if let Some(why) = check::moot(&tx, event_id).await? {
            return Err(ResendError::Moot { id: send_id, why });
        }
    }
    let (decided_by, mail_second, received_at, grace) = match decision {
        Decision::Operator(who) => (who, None, None, None),
        Decision::Evidence { evidence, grace } => {
            (EVIDENCE_DECIDER, Some(evidence.mail_second), Some(evidence.received_at), Some(grace.as_secs_f64()))
        }
    };
    tx.execute(
        "INSERT INTO notification_resends (id, send_id, outbox_event_id, recipient_email, event_type, \
                 previous_status, previous_error, claimed_at, decided_by, evidence_mail_second, \
                 evidence_received_at, evidence_grace_secs) \
         VALUES (gen_random_uuid(), $1, $6, $7, $8, $9, $10, $11, $2, $3, $4, $5)",
        &[
            &send_id,
            &decided_by,
            &mail_second,
            &received_at,
            &grace,
            &event_id,
            &send.recipient,
            &send.event_type,
            &status.as_str(),
            &send.last_error,
            &send.claimed_at,
        ],
    )
    .await?;
    sends::unknown::delete(&tx, send_id).await?;
    // The event runs again: processed_events must let it through.
    processed::forget(&tx, event_id).await?;
    let reason = format!("resend of one recipient decided by {decided_by}");
    if !transitions::reopen(&tx, event_id, &reason).await? {
        return Err(ResendError::EventInFlight { id: send_id, event_id, status: "changing".into() });
    }
    tx.commit().await?;
    Ok(event_id)
}

/// The recipients of each of `booking_ids` whose send was resent: a
/// resend removes the claim it replaces (so the poller may claim that
/// recipient again), but that claim was UNKNOWN or CLAIMED, so the person
/// may have been told. The plan counts them as told, with the sends that
/// stand ([`sends::possibly_told_many`]): a cancellation planned before
/// the resend ran still reaches them.
pub async fn resent_recipients_of(client: &impl GenericClient, booking_ids: &[Uuid]) -> DbResult<Vec<(Uuid, String)>> {
    if booking_ids.is_empty() {
        return Ok(Vec::new());
    }
    // `outbox_events_of_aggregates` (V47): the events module's answer.
    const SQL: &str = "SELECT DISTINCT e.aggregate_id, r.recipient_email FROM outbox_events_of_aggregates($1) e \
                         JOIN notification_resends r ON r.outbox_event_id = e.id";
    let rows = client.query(&client.prepare_cached(SQL).await?, &[&booking_ids]).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// What one pass of [`settle_on_evidence`] did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct EvidenceReport {
    /// `(send, event)` resent on SES's evidence.
    pub resent: Vec<(Uuid, Uuid)>,
    /// `(send, why)` left for an operator now.
    pub left: Vec<(Uuid, String)>,
    /// Still waiting for evidence (or for their event to settle).
    pub awaiting: u32,
}

/// The sweeper's step: each UNKNOWN send SES's evidence can settle, up to
/// `limit`, is resent once SES's stream has moved past it at least `grace`
/// ago and no event names it, unless it was resent `max_resends` times
/// already (then, or with resends off, it is left for an operator, as it is
/// when its event is DEAD). The only error is the database's.
pub async fn settle_on_evidence(
    client: &mut deadpool_postgres::Client,
    grace: Duration,
    max_resends: u32,
    limit: i64,
) -> Result<EvidenceReport, DbError> {
    let mut report = EvidenceReport::default();
    for c in sends::unknown::awaiting_evidence(&*client, grace, limit).await? {
        let Some(evidence) = c.evidence else {
            if c.given_up {
                let why = format!(
                    "SES's events have not moved past it in {} h: none are arriving (check the configuration \
                     set's event destination and the ses-events function)",
                    sends::unknown::EVIDENCE_GIVE_UP.as_secs() / 3600
                );
                if sends::unknown::leave_for_operator(&*client, c.id, &why).await? {
                    report.left.push((c.id, why));
                }
            } else {
                report.awaiting += 1;
            }
            continue;
        };
        let before = resends_of(&*client, c.event_id, &c.recipient, &c.event_type).await?;
        let leave = if max_resends == 0 {
            Some(
                "SES's events moved past it and none named it, but automatic resends are off \
                  (UNKNOWN_RESENDS_MAX=0)"
                    .to_string(),
            )
        } else if before >= max_resends {
            Some(format!("resent {before} times on SES's evidence (UNKNOWN_RESENDS_MAX) and still ambiguous"))
        } else {
            match resend(client, c.id, Decision::Evidence { evidence, grace }).await {
                Ok(event_id) => {
                    report.resent.push((c.id, event_id));
                    None
                }
                Err(ResendError::Db(e)) => return Err(e),
                Err(e @ ResendError::EventDead { .. }) => Some(e.to_string()),
                // In flight, or settled meanwhile: the next run sees.
                Err(_) => {
                    report.awaiting += 1;
                    None
                }
            }
        };
        if let Some(why) = leave {
            if sends::unknown::leave_for_operator(&*client, c.id, &why).await? {
                report.left.push((c.id, why));
            }
        }
    }
    Ok(report)
}

/// How often the recipient of an event has been resent on evidence.
async fn resends_of(client: &impl GenericClient, event_id: Uuid, recipient: &str, event_type: &str) -> DbResult<u32> {
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM notification_resends \
              WHERE outbox_event_id = $1 AND recipient_email = $2 AND event_type = $3 \
                AND evidence_mail_second IS NOT NULL",
            &[&event_id, &recipient, &event_type],
        )
        .await?
        .get(0);
    Ok(n as u32)
}

/// What a resend of the sends left for an operator did, or would do.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ResendReport {
    /// `(send, event)` reopened for one recipient each.
    pub resent: Vec<(Uuid, Uuid)>,
    /// `(send, why not)`: its event is in flight or DEAD, or the send
    /// settled meanwhile.
    pub skipped: Vec<(Uuid, String)>,
}

/// An operator's resend of every SES send left for an operator that SES's
/// stream has moved past at least `grace` ago (the evidence the sweeper
/// uses, without its bound on resends), oldest first, at most `max`: each
/// its own recorded decision ([`resend`]). With `dry_run`, only says what
/// it would do. The only error is the database's.
pub async fn resend_left(
    client: &mut deadpool_postgres::Client,
    grace: Duration,
    decided_by: &str,
    max: usize,
    dry_run: bool,
) -> Result<ResendReport, DbError> {
    let mut report = ResendReport::default();
    let left = list(&*client, grace, false, i64::MAX).await?;
    let settleable = left.into_iter().filter(|s| {
        s.confirmation == Confirmation::LeftForOperator
            && s.evidence.is_some()
            && s.left_for_operator.as_deref() != Some(sends::unknown::NO_FEEDBACK)
    });
    for s in settleable.take(max) {
        let outcome = if dry_run {
            would_resend(&*client, s.id).await?
        } else {
            match resend(client, s.id, Decision::Operator(decided_by)).await {
                Ok(event_id) => Ok(event_id),
                Err(ResendError::Db(e)) => return Err(e),
                Err(refused) => Err(refused.to_string()),
            }
        };
        match outcome {
            Ok(event_id) => report.resent.push((s.id, event_id)),
            Err(why) => report.skipped.push((s.id, why)),
        }
    }
    Ok(report)
}

/// What [`resend`] would answer, without changing anything.
async fn would_resend(client: &impl GenericClient, id: Uuid) -> DbResult<Result<Uuid, String>> {
    let Some(send) = sends::unknown::lock(client, id).await? else {
        return Ok(Err(ResendError::NotFound(id).to_string()));
    };
    let event_id = send.event_id;
    match event_settled(client, id, event_id).await {
        Ok(()) => Ok(Ok(event_id)),
        Err(ResendError::Db(e)) => Err(e),
        Err(refused) => Ok(Err(refused.to_string())),
    }
}

/// The sends whose outcome was unknown, and the ones resent on evidence,
/// newest first, each with where it stands (`sends::unknown`); with
/// `confirmed`, also the ones SES's event settled.
pub async fn list(
    client: &impl GenericClient,
    grace: Duration,
    confirmed: bool,
    limit: i64,
) -> DbResult<Vec<UnknownSend>> {
    let mut list = sends::unknown::list_unknown(client, grace, confirmed, limit).await?;
    let rows = client
        .query(
            "SELECT send_id, outbox_event_id, recipient_email, event_type, previous_status, previous_error, \
                    claimed_at, decided_by, decided_at, evidence_mail_second, evidence_received_at \
               FROM notification_resends WHERE evidence_mail_second IS NOT NULL \
              ORDER BY send_id DESC LIMIT $1",
            &[&limit],
        )
        .await?;
    for r in rows {
        list.push(UnknownSend {
            id: r.get("send_id"),
            event_id: r.get("outbox_event_id"),
            booking_id: None,
            recipient: r.get("recipient_email"),
            event_type: r.get("event_type"),
            status: SendStatus::from_row(&r, "previous_status")?,
            confirmation: Confirmation::ResentOnEvidence,
            left_for_operator: None,
            last_error: r.get("previous_error"),
            claimed_at: r.get("claimed_at"),
            claimed_by: None,
            reaches_provider_by: None,
            evidence: Some(Evidence {
                mail_second: r.get("evidence_mail_second"),
                received_at: r.get("evidence_received_at"),
            }),
            resent: Some((r.get::<_, DateTime<Utc>>("decided_at"), r.get("decided_by"))),
        });
    }
    // Send ids are UUIDv7s made at the claim: newest claim first.
    list.sort_by_key(|s| std::cmp::Reverse(s.id));
    list.truncate(limit.max(0) as usize);
    Ok(list)
}

/// How the ambiguous sends stand, resends on evidence included.
pub async fn counts(client: &impl GenericClient, grace: Duration) -> DbResult<UnknownCounts> {
    let mut counts = sends::unknown::unknown_counts(client, grace).await?;
    counts.resent_on_evidence = client
        .query_one("SELECT count(*) FROM notification_resends WHERE evidence_mail_second IS NOT NULL", &[])
        .await?
        .get(0);
    Ok(counts)
}

/// Whether `send_id` is a claim that was resent on SES's evidence: an
/// event about it arriving now came after the resend, so the recipient
/// very likely got two (the residual risk the SES-events function reports).
pub async fn resent_on_evidence(client: &impl GenericClient, send_id: Uuid) -> DbResult<bool> {
    Ok(client
        .query_opt(
            "SELECT 1 FROM notification_resends WHERE send_id = $1 AND decided_by = $2",
            &[&send_id, &EVIDENCE_DECIDER],
        )
        .await?
        .is_some())
}
