//! Deliver notifications: claim the sends, commit the claims, call the
//! mailer, record the outcomes. `deliver` does it for a batch's
//! recipients, claiming each send just in time (when the pacer lets it
//! start), a chunk of sends per statement, the sends made concurrently.
//!
//! The order is the whole point (the story's "claim before send"): once a
//! claim is committed, no later attempt will send that email again, whatever
//! happens to this process. A crash after the claim can lose an email (it
//! shows up as UNKNOWN); nothing can duplicate one.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

use deadpool_postgres::Pool;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use uuid::Uuid;

use super::delivery::{Delivery, Gate, FAULT_AFTER_SEND_CLAIM};
use super::record::record_durably;
use super::run::{Chunk, Run};
use crate::db::DbError;
use crate::fault::{Faults, RunError};
use crate::notify::mailer::Mailer;
use crate::notify::pacing::recipient_limit::{self, Invitation};
use crate::notify::plan::Planned;
use crate::notify::sends::{Claimant, Outcome};

/// Delivers planned notifications (each event's recipients, of events of
/// distinct bookings) at most once each, claiming each send just in time:
///
/// 1. the decisions that need no send are claimed settled, in one
///    statement: SUPERSEDED (a later event made them moot) and FAILED (a
///    suppressed address); a claim found from an earlier attempt is never
///    sent again (still CLAIMED: its attempt died, so it becomes UNKNOWN);
/// 2. then, chunk after chunk, the [`Pacer`](crate::notify::pacing::pace::Pacer) admits the sends that can
///    start now (a place in flight each and, when paced, a start time
///    within its horizon), and one statement claims exactly those and
///    commits: every claim is durable before its send, and at most a
///    horizon away from it; invitations over a limit that protects their
///    recipient are CAPPED;
///    A reminder is claimed only if its booking is still the version its
///    plan read, not cancelled and not started (read just before the
///    claim): a change committed while it waited for the pacer plans it
///    again ([`Delivery::Replan`]);
/// 3. each send starts at its time, unless the provider paused sending or
///    it would not end before the deadline (its claim is then released);
/// 4. outcomes are recorded as the sends finish, one statement for those
///    that finished together, again on a fresh connection if that fails
///    ([`RECORD_RETRIES`](super::delivery::RECORD_RETRIES)).
///
/// What the run's deadline or a pause leaves is never claimed. A database
/// error while claiming a chunk releases that chunk's claims, lets the
/// sends in flight end and be recorded, and is returned (the retry sends
/// the rest). A crash leaves CLAIMED only the sends in flight (at most the
/// pacer's places), which the next attempt marks UNKNOWN: none duplicated.
/// The caller must hold the events' `processed_events` row locks, so no
/// other attempt on them is live and a claim still CLAIMED belongs to an
/// attempt that died. Returns one [`Delivery`] per item, in order.
pub async fn deliver(
    pool: &Pool,
    mailer: &dyn Mailer,
    faults: &Faults,
    (worker, lease): (&str, Uuid),
    gate: &Gate<'_>,
    items: &[Planned],
) -> Result<Vec<Delivery>, RunError> {
    // One connection for the claims and the outcomes, whose statements it
    // pipelines; a failed write is retried on fresh ones.
    let client = pool.get().await.map_err(DbError::from)?;
    let claimant = Claimant { worker, provider: mailer.provider(), lease };
    let run = Run { pool, client: &client, mailer, faults, claimant, gate, items };
    let mut out: Vec<Option<Delivery>> = vec![None; items.len()];
    let organizer = |i: usize| items[i].notification().payload.booking.organizer.email.as_str();
    let mut pending: VecDeque<usize> = in_turns(run.settle_decided(&mut out).await?, organizer).into();
    let mut counted: Vec<usize> = Vec::new();
    let mut in_flight = FuturesUnordered::new();
    let mut admitting: Option<BoxFuture<'_, Result<Chunk<'_>, DbError>>> = None;
    let mut failed: Option<DbError> = None;
    // Each outcome is recorded as soon as its send ends, not after the
    // slowest send, so a crash leaves fewer accepted sends unrecorded. One
    // write is in flight at a time, and it takes every outcome that ended
    // while the previous one ran (a group commit): the sends go on
    // meanwhile, and a fast mailer costs a few writes, not one per send.
    let mut ended: Vec<(Uuid, Outcome)> = Vec::new();
    let mut writing: Option<BoxFuture<'_, Result<(), DbError>>> = None;
    loop {
        if admitting.is_none() && failed.is_none() && !pending.is_empty() {
            match run.stop() {
                Some(stop) => pending.drain(..).for_each(|i| out[i] = Some(stop.clone())),
                None => {
                    let chunk: Vec<usize> = pending.iter().take(gate.claim_group.max(1)).copied().collect();
                    admitting = Some(Box::pin(run.admit_and_claim(chunk)));
                }
            }
        }
        if writing.is_none() && !ended.is_empty() {
            let outcomes = std::mem::take(&mut ended);
            let client = &client;
            writing = Some(Box::pin(async move { record_durably(pool, Some(client), &outcomes, lease).await }));
        }
        if admitting.is_none() && writing.is_none() && in_flight.is_empty() {
            break;
        }
        tokio::select! {
            chunk = async { admitting.as_mut().expect("admitting").await }, if admitting.is_some() => {
                admitting = None;
                match chunk {
                    Ok(chunk) => {
                        pending.drain(..chunk.taken);
                        if chunk.taken == 0 {
                            // Nothing fits before the deadline any more.
                            let deferred = run.deferred("left unclaimed");
                            pending.drain(..).for_each(|i| out[i] = Some(deferred.clone()));
                        }
                        for (i, delivery) in chunk.settled {
                            out[i] = Some(delivery);
                        }
                        counted.extend(chunk.sends.iter().map(|s| s.item));
                        if !chunk.sends.is_empty() {
                            faults.hit(FAULT_AFTER_SEND_CLAIM)?;
                        }
                        in_flight.extend(chunk.sends.into_iter().map(|s| Box::pin(run.send(s))));
                    }
                    // The sends in flight still end and are recorded first.
                    Err(e) => failed = Some(e),
                }
            },
            next = in_flight.next(), if !in_flight.is_empty() => match next {
                Some(Ok((i, id, outcome, delivery))) => {
                    ended.push((id, outcome));
                    out[i] = Some(delivery);
                }
                // As a crash there would: nothing more is recorded.
                Some(Err(fault)) => return Err(fault.into()),
                None => {}
            },
            written = async { writing.as_mut().expect("a write in flight").await }, if writing.is_some() => {
                written?;
                writing = None;
            }
        }
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
    let out: Vec<Delivery> = out.into_iter().map(|d| d.expect("every item has a delivery")).collect();
    give_back_unsent(pool, items, &counted, &out).await;
    Ok(out)
}

/// The invitations that were counted (`pacing::recipient_limit`) and certainly
/// not made give their counts back (a crash before this leaves
/// them counted: the limit errs towards mailing less).
async fn give_back_unsent(pool: &Pool, items: &[Planned], counted: &[usize], out: &[Delivery]) {
    let unsent: Vec<Invitation> = counted
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
        .filter_map(|i| Invitation::of(items[*i].notification()))
        .collect();
    if unsent.is_empty() {
        return;
    }
    let given = async { recipient_limit::give_back(&pool.get().await?, &unsent).await }.await;
    if let Err(e) = given {
        tracing::warn!(error = %e, count = unsent.len(), "could not give back the daily counts of unsent mails");
    }
}

/// The batch's sends in fair turns between organizers: each organizer's
/// first before any organizer's second, each organizer's own in the order
/// given. The claim takes a share of each organizer's due events (V45);
/// this keeps one organizer's hundreds in a batch from putting another's
/// one behind them. (A batch holds one event per booking, so a booking's
/// order is never in question here.)
fn in_turns<K: Eq + Hash>(order: Vec<usize>, key: impl Fn(usize) -> K) -> Vec<usize> {
    let mut taken: HashMap<K, usize> = HashMap::new();
    let mut ranked: Vec<(usize, usize)> = order
        .into_iter()
        .map(|i| {
            let turn = taken.entry(key(i)).or_default();
            *turn += 1;
            (*turn, i)
        })
        .collect();
    // Stable: within a rank, the order given.
    ranked.sort_by_key(|(turn, _)| *turn);
    ranked.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::in_turns;

    #[test]
    fn one_organizers_many_sends_in_a_batch_never_go_before_anothers_first() {
        // Items 0..=6 and 8 are A's, 7 is B's, 9 is C's.
        let key = |i: usize| match i {
            7 => "b",
            9 => "c",
            _ => "a",
        };
        assert_eq!(in_turns((0..10).collect(), key), vec![0, 7, 9, 1, 2, 3, 4, 5, 6, 8]);
        assert_eq!(in_turns(Vec::new(), key), Vec::<usize>::new());
    }
}
