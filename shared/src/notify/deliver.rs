//! Deliver notifications: claim the sends, commit the claims, call the
//! mailer, record the outcomes. [`deliver`] does it for a claim group, with
//! one statement per step and the sends made concurrently; a group of one
//! is the same path.
//!
//! The order is the whole point (the story's "claim before send"): once a
//! claim is committed, no later attempt will send that email again, whatever
//! happens to this process. A crash after the claim can lose an email (it
//! shows up as UNKNOWN); nothing can duplicate one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use tracing::Instrument;
use uuid::Uuid;

use super::feedback;
use super::mailer::{Mailer, SendOutcome};
use super::pace::Pacer;
use super::plan::Planned;
use super::recipient_limit;
use super::sends::{self, Claim, GroupClaim, Outcome, SendStatus, Settled};
use super::Notification;
use crate::db::DbError;
use crate::fault::{FaultError, Faults};
use crate::telemetry::mask_email;

/// How the `last_error` of a send refused for a suppressed address begins
/// (what [`tracking`](super::tracking) reads as `suppressed`).
pub const SUPPRESSED: &str = "suppressed:";

/// Claim committed, mailer not yet called.
pub const FAULT_AFTER_SEND_CLAIM: &str = "deliver.after_send_claim";
/// Mailer accepted the message, outcome not yet recorded.
pub const FAULT_AFTER_SEND: &str = "deliver.after_send";

/// When writing outcomes fails (the connection was lost, the server
/// restarted), they are written again on a fresh connection after each of
/// these pauses: an outcome the mailer reported is not dropped for one
/// broken connection, and the claim it settles does not turn UNKNOWN.
pub const RECORD_RETRIES: [Duration; 3] =
    [Duration::from_millis(50), Duration::from_millis(250), Duration::from_millis(1000)];

/// What happened to one recipient. The caller decides what it means for
/// the event (retry, dead letter, pause); every send is already recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Accepted by the provider; the send is SENT.
    Sent { message_id: String },
    /// An earlier attempt claimed it and recorded an outcome: not sent again.
    AlreadyClaimed,
    /// An earlier attempt claimed it and died before recording an outcome:
    /// now UNKNOWN, never re-sent automatically.
    Orphaned,
    /// Certainly not sent: the claim is released; retry the event later.
    Released { reason: String },
    /// Refused for the account's send rate: the claim is released, the
    /// fleet slowed down; retry soon, without using up an attempt.
    Throttled { reason: String },
    /// The provider paused sending: the claim is released; stop sending.
    Paused { reason: String },
    /// Permanently refused for this recipient: FAILED.
    Rejected { reason: String },
    /// Our mailer configuration is wrong: the claim is released; the event
    /// should be dead-lettered until an operator fixes it.
    Misconfigured { reason: String },
    /// The provider may or may not have accepted it: UNKNOWN, kept.
    Unknown { reason: String },
    /// Not sent: a later event made it moot (recorded SUPERSEDED).
    Superseded { by: Uuid },
    /// Not sent: the recipient's mailbox had its daily limit across every
    /// organizer (recorded CAPPED); never retried.
    Capped { reason: String },
    /// Not sent: the invocation's deadline came before the send could
    /// start; the claim is released for the next invocation.
    Deferred { reason: String },
}

#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Fault(#[from] FaultError),
}

/// What a mailer's answer means for the claim, and for the event.
fn judge(outcome: SendOutcome) -> (Outcome, Delivery) {
    match outcome {
        SendOutcome::Sent { message_id } => {
            tracing::info!(%message_id, "accepted by the provider");
            (Outcome::Sent(message_id.clone()), Delivery::Sent { message_id })
        }
        SendOutcome::NotSent { reason } => {
            tracing::warn!(%reason, "not sent; claim released for retry");
            (Outcome::Released, Delivery::Released { reason })
        }
        SendOutcome::Throttled { reason } => {
            tracing::warn!(%reason, "throttled; claim released, the fleet slows down");
            (Outcome::Released, Delivery::Throttled { reason })
        }
        SendOutcome::Paused { reason } => {
            tracing::error!(%reason, "provider paused sending; stopping this run");
            (Outcome::Released, Delivery::Paused { reason })
        }
        SendOutcome::Rejected { reason } => {
            tracing::warn!(%reason, "permanently rejected for this recipient");
            (Outcome::Settled(Settled::Failed, reason.clone()), Delivery::Rejected { reason })
        }
        SendOutcome::Misconfigured { reason } => {
            tracing::error!(%reason, "mailer misconfigured; the event goes to the dead letter");
            (Outcome::Released, Delivery::Misconfigured { reason })
        }
        SendOutcome::Unknown { reason } => {
            tracing::warn!(%reason, "outcome unknown; claim kept, never re-sent automatically");
            (Outcome::Settled(Settled::Unknown, reason.clone()), Delivery::Unknown { reason })
        }
    }
}

/// When a group's sends may start, and when they stop short: the provider
/// paused sending (this run sends nothing more), or the next send would not
/// end before the deadline. With a [`Pacer`], each send also waits for a
/// place among the sends in flight and for the fleet's rate.
pub struct Gate<'a> {
    pub paused: &'a AtomicBool,
    pub send_fits: &'a (dyn Fn() -> bool + Sync),
    pub pace: Option<&'a Pacer>,
    /// How many mails one mailbox may get per UTC day, across every
    /// organizer ([`recipient_limit`]).
    pub mails_per_recipient_per_day: i32,
}

/// Delivers a group of planned notifications (each event's recipients, of
/// events of distinct bookings) at most once each:
///
/// 1. one statement claims them all (sends CLAIMED, superseded decisions
///    SUPERSEDED) and commits: every claim is durable before any send;
/// 2. claims found CLAIMED from a dead attempt become UNKNOWN, suppressed
///    addresses FAILED, and mailboxes over their daily limit CAPPED (one
///    statement each);
/// 3. the sends run `concurrently` at a time (and as the [`Gate`]'s pacer
///    allows); each checks the gate first, and one that may not start has
///    its claim released;
/// 4. outcomes are recorded as the sends finish, one statement for those
///    that finished together, again on a fresh connection if that fails
///    ([`RECORD_RETRIES`]).
///
/// A database error in 1 or 2, before any send, releases the claims this
/// call made (the retry sends them). A crash between 1 and 4 leaves the
/// group's claims CLAIMED, which the next attempt marks UNKNOWN: up to a
/// group of emails lost, none duplicated. The caller must hold the events'
/// `processed_events` row locks, so no other attempt on them is live and a
/// claim still CLAIMED belongs to an attempt that died. Returns one
/// [`Delivery`] per item, in order.
pub async fn deliver(
    pool: &Pool,
    mailer: &dyn Mailer,
    faults: &Faults,
    worker: &str,
    concurrently: usize,
    gate: &Gate<'_>,
    group: &[Planned],
) -> Result<Vec<Delivery>, DeliverError> {
    let claims: Vec<GroupClaim> = group
        .iter()
        .map(|p| match p {
            Planned::Send(n) => GroupClaim { notification: n, superseded: None },
            Planned::Superseded { notification, by, reason } => {
                GroupClaim { notification, superseded: Some((*by, reason.as_str())) }
            }
        })
        .collect();
    let ids = sends::claim::new_ids(&claims);
    let limit = gate.mails_per_recipient_per_day;
    let claimant = (worker, mailer.provider());
    let Claimed { mut out, to_send } = match claim_group(pool, group, &claims, &ids, claimant, limit).await {
        Ok(claimed) => claimed,
        Err(e) => {
            release_unsent(pool, &ids, &e).await;
            return Err(e.into());
        }
    };
    let counted: Vec<usize> = to_send.iter().map(|(i, _)| *i).collect();
    if !to_send.is_empty() {
        faults.hit(FAULT_AFTER_SEND_CLAIM)?;
    }
    let sent = stream::iter(to_send)
        .map(|(i, id)| {
            let n = group[i].notification();
            let span = tracing::info_span!(
                "send",
                event_id = %n.event_id,
                booking_id = %n.payload.booking.id,
                recipient = %mask_email(n.recipient.email.as_str()),
                link_trace_id = n.trace_id.as_deref().unwrap_or("-"),
            );
            async move {
                if gate.paused.load(Ordering::SeqCst) {
                    let reason = "sending paused earlier in this run".to_string();
                    return Ok((i, id, Outcome::Released, Delivery::Paused { reason }));
                }
                let deferred = || {
                    let reason = "the invocation's deadline came first; the claim was released unsent".to_string();
                    Ok((i, id, Outcome::Released, Delivery::Deferred { reason }))
                };
                let _slot = match gate.pace {
                    Some(pace) => {
                        let slot = pace.slot().await;
                        match pace.token(gate.send_fits).await {
                            Ok(true) => Some(slot),
                            Ok(false) => return deferred(),
                            Err(e) => {
                                let reason = format!("the fleet's send rate could not be read: {e}");
                                tracing::warn!(%reason, "claim released unsent");
                                return Ok((i, id, Outcome::Released, Delivery::Released { reason }));
                            }
                        }
                    }
                    None => None,
                };
                if !(gate.send_fits)() {
                    return deferred();
                }
                let n = Notification { claim: Some(id), ..group[i].notification().clone() };
                let started = Instant::now();
                // Reasons are logged and stored from here on: no address in them.
                let outcome = mailer.send(&n).await.masked();
                if let Some(pace) = gate.pace {
                    pace.observe(started.elapsed());
                }
                faults.hit(FAULT_AFTER_SEND)?;
                match (&outcome, gate.pace) {
                    (SendOutcome::Paused { .. }, _) => gate.paused.store(true, Ordering::SeqCst),
                    (SendOutcome::Throttled { .. }, Some(pace)) => {
                        if let Err(e) = pace.throttled().await {
                            tracing::warn!(error = %e, "could not slow the fleet down after a throttling answer");
                        }
                    }
                    _ => {}
                }
                let (outcome, delivery) = judge(outcome);
                Ok::<_, FaultError>((i, id, outcome, delivery))
            }
            .instrument(span)
        })
        .buffer_unordered(concurrently.max(1));
    tokio::pin!(sent);
    // Each outcome is recorded as soon as its send ends, not after the
    // group's slowest send, so a crash leaves fewer accepted sends
    // unrecorded. One write is in flight at a time, and it takes every
    // outcome that ended while the previous one ran (a group commit): the
    // sends go on meanwhile, and a fast mailer costs a few writes a group,
    // not one per send.
    let mut ended: Vec<(Uuid, Outcome)> = Vec::new();
    let mut writing: Option<BoxFuture<'_, Result<(), DbError>>> = None;
    let mut sending = true;
    loop {
        if writing.is_none() && !ended.is_empty() {
            let outcomes = std::mem::take(&mut ended);
            writing = Some(Box::pin(async move { record_durably(pool, &outcomes).await }));
        }
        if !sending && writing.is_none() {
            break;
        }
        tokio::select! {
            next = sent.next(), if sending => match next {
                Some(Ok((i, id, outcome, delivery))) => {
                    ended.push((id, outcome));
                    out[i] = Some(delivery);
                }
                // As a crash there would: nothing more is recorded.
                Some(Err(fault)) => return Err(fault.into()),
                None => sending = false,
            },
            written = async { writing.as_mut().expect("a write in flight").await }, if writing.is_some() => {
                written?;
                writing = None;
            }
        }
    }
    let out: Vec<Delivery> = out.into_iter().map(|d| d.expect("every item of the group has a delivery")).collect();
    give_back_unsent(pool, group, &counted, &out).await;
    Ok(out)
}

/// The sends that counted towards their mailbox's daily limit and were
/// certainly not made give their counts back (a crash before this leaves
/// them counted: the limit errs towards mailing less).
async fn give_back_unsent(pool: &Pool, group: &[Planned], counted: &[usize], out: &[Delivery]) {
    let unsent: Vec<String> = counted
        .iter()
        .filter(|i| {
            matches!(
                out[**i],
                Delivery::Released { .. }
                    | Delivery::Throttled { .. }
                    | Delivery::Paused { .. }
                    | Delivery::Misconfigured { .. }
                    | Delivery::Deferred { .. }
            )
        })
        .map(|i| group[*i].notification().recipient.email.mailbox())
        .collect();
    if unsent.is_empty() {
        return;
    }
    let given = async { recipient_limit::give_back(&pool.get().await?, &unsent).await }.await;
    if let Err(e) = given {
        tracing::warn!(error = %e, count = unsent.len(), "could not give back the daily counts of unsent mails");
    }
}

/// What [`claim_group`] leaves to send.
struct Claimed {
    /// Each item's delivery where it is already known (None: to send).
    out: Vec<Option<Delivery>>,
    /// The claims won for sends: (item, claim id).
    to_send: Vec<(usize, Uuid)>,
}

/// Claims a group (step 1) and settles the claims that are not to be sent
/// (step 2).
async fn claim_group(
    pool: &Pool,
    group: &[Planned],
    claims: &[GroupClaim<'_>],
    ids: &[Uuid],
    (worker, provider): (&str, &str),
    mails_per_recipient_per_day: i32,
) -> Result<Claimed, DbError> {
    let client = pool.get().await?;
    let claimed = sends::claim(&client, claims, ids, worker, provider).await?;
    let mut out: Vec<Option<Delivery>> = vec![None; group.len()];
    let (mut orphans, mut to_send) = (Vec::new(), Vec::new());
    for (i, (p, claim)) in group.iter().zip(claimed).enumerate() {
        out[i] = match (p, claim) {
            (_, Claim::Exists { id, status: SendStatus::Claimed }) => {
                orphans.push(id);
                Some(Delivery::Orphaned)
            }
            (_, Claim::Exists { .. }) => Some(Delivery::AlreadyClaimed),
            (Planned::Superseded { by, .. }, Claim::Won(_)) => Some(Delivery::Superseded { by: *by }),
            (Planned::Send(_), Claim::Won(id)) => {
                to_send.push((i, id));
                None
            }
        };
    }
    if !orphans.is_empty() {
        sends::outcome::mark_orphans_unknown(&client, &orphans).await?;
        tracing::warn!(count = orphans.len(), "orphaned claims marked UNKNOWN; not re-sent");
    }
    // An address that bounced permanently or complained is never mailed.
    let emails: Vec<&str> = to_send.iter().map(|(i, _)| group[*i].notification().recipient.email.as_str()).collect();
    let suppressed = feedback::suppressions_of(&client, &emails).await?;
    let mut refused = Vec::new();
    to_send.retain(|(i, id)| match suppressed.get(group[*i].notification().recipient.email.as_str()) {
        Some(why) => {
            let reason = format!("{SUPPRESSED} the address {why} earlier");
            tracing::warn!(%reason, "not sent to a suppressed address");
            refused.push((*id, Outcome::Settled(Settled::Failed, reason.clone())));
            out[*i] = Some(Delivery::Rejected { reason });
            false
        }
        None => true,
    });
    // Nobody is mailed more than the daily limit, across every organizer
    // and however the address is spelled.
    let mailboxes: Vec<String> =
        to_send.iter().map(|(i, _)| group[*i].notification().recipient.email.mailbox()).collect();
    let allowed = recipient_limit::take(&client, &mailboxes, mails_per_recipient_per_day).await?;
    let mut allowed = allowed.into_iter();
    to_send.retain(|(i, id)| {
        if allowed.next().unwrap_or(false) {
            return true;
        }
        let reason = format!(
            "capped: the recipient's mailbox reached its limit of {mails_per_recipient_per_day} mails a day \
             (LIMIT_MAILS_PER_RECIPIENT_PER_DAY) across every organizer"
        );
        tracing::warn!(%reason, "not sent to a recipient at the daily limit");
        refused.push((*id, Outcome::Settled(Settled::Capped, reason.clone())));
        out[*i] = Some(Delivery::Capped { reason });
        false
    });
    sends::outcome::record(&client, &refused).await?;
    Ok(Claimed { out, to_send })
}

/// Nothing of a group whose claim failed was sent: the claims the statement
/// may have committed before its answer was lost (the connection cut, the
/// server restarted), or that a later statement of step 2 left CLAIMED, are
/// released on a fresh connection ([`RECORD_RETRIES`]), so the batch's retry
/// sends them instead of finding them CLAIMED and marking them UNKNOWN. A
/// release deletes only CLAIMED rows with this call's own new ids.
async fn release_unsent(pool: &Pool, ids: &[Uuid], cause: &DbError) {
    let released: Vec<(Uuid, Outcome)> = ids.iter().map(|id| (*id, Outcome::Released)).collect();
    match record_durably(pool, &released).await {
        Ok(()) => {
            tracing::warn!(error = %cause, count = ids.len(), "claiming a group failed; its claims were released unsent")
        }
        Err(e) => tracing::error!(error = %cause, release_error = %e, count = ids.len(),
            "claiming a group failed and its claims could not be released; a retry will mark them UNKNOWN"),
    }
}

/// Records outcomes; when that fails, again on a fresh connection after
/// each pause of [`RECORD_RETRIES`]. Recording is idempotent: an outcome
/// written twice is written once.
async fn record_durably(pool: &Pool, outcomes: &[(Uuid, Outcome)]) -> Result<(), DbError> {
    let mut pauses = RECORD_RETRIES.iter();
    loop {
        let attempt = async { sends::outcome::record(&pool.get().await?, outcomes).await }.await;
        match (attempt, pauses.next()) {
            (Ok(()), _) => return Ok(()),
            (Err(e), Some(pause)) => {
                tracing::warn!(error = %e, count = outcomes.len(), "recording outcomes failed; again on a fresh connection");
                tokio::time::sleep(*pause).await;
            }
            (Err(e), None) => return Err(e),
        }
    }
}

crate::from_driver_errors!(DeliverError);
