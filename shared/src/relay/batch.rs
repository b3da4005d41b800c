//! Claimed events, from `processed_events` to DONE (or retry, or the dead
//! letter): tell every recipient what the plan says (or record why not),
//! then settle each event by what its deliveries say.
//!
//! [`Batch::process`] takes a whole claimed batch: one transaction holds
//! every event's `processed_events` row, the plans are read for the batch,
//! the sends are claimed and recorded as the pacer admits them
//! ([`deliver`], each send claimed just in time), and the events complete
//! in one statement.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use deadpool_postgres::Pool;
use uuid::Uuid;

use super::config::PollerConfig;
use super::lease::Lease;
use super::summary::RunSummary;
use crate::booking::events::BookingEvent;
use crate::fault::{Faults, RunError};
use crate::notify::deliver::{deliver, Delivery, Gate};
use crate::notify::evidence::resend;
use crate::notify::mailer::Mailer;
use crate::notify::pacing::pace::Pacer;
use crate::notify::plan::{plan_many, Planned, Waiting};
use crate::outbox::events::transitions::{self, Requeue, Retried};
use crate::outbox::events::ClaimedEvent;
use crate::outbox::processed;

/// Every recipient handled; `processed_events` + DONE not yet committed.
pub const FAULT_BEFORE_DONE_COMMIT: &str = "poller.before_done_commit";

/// A batch whose processing failed on the database is processed again
/// after each of these pauses, before it is left to the sweeper.
pub const BATCH_RETRIES: [Duration; 3] =
    [Duration::from_millis(100), Duration::from_millis(500), Duration::from_millis(2000)];

/// How an event handed back because sending stopped says why, before the
/// provider's words (for people: `stopped`, V46, is what programs read).
const STOPPED_MISCONFIGURED: &str = "mailer misconfigured: ";
const STOPPED_PAUSED: &str = "sending paused: ";

/// An event whose send was throttled is due again this much later (the
/// fleet sends at half its rate meanwhile): a retry without a storm.
pub const THROTTLED_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// What the deliveries of one event mean for the event. When several apply,
/// the strongest wins (in this order), with the first reason of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Settle {
    /// Every recipient has an outcome: DONE.
    Done,
    /// The run's deadline came before every recipient was sent: back to
    /// PENDING at once, without using an attempt; the sent ones keep their
    /// claims, the rest were never claimed.
    Deadline(String),
    /// Throttled for the account's send rate: back to PENDING soon
    /// ([`THROTTLED_RETRY`]), without using an attempt.
    Throttled(String),
    /// The provider paused sending: back to PENDING without using an attempt.
    Requeue(String),
    /// A reminder whose booking's events are unfinished, or changed since
    /// its plan: back to PENDING after the wait, without using an attempt.
    Wait(String, std::time::Duration),
    /// A known failure: back to PENDING with backoff (or DEAD when out of attempts).
    Retry(String),
    /// The provider refused the stack's own configuration (the sender's
    /// identity, its rights, its TLS): sending stops, and the event waits
    /// for the fix without using an attempt.
    Misconfigured(String),
    /// Another claim took the event over (this run's lease ended): nothing
    /// more is written about it here.
    Lost,
}

impl Settle {
    fn rank(&self) -> u8 {
        match self {
            Settle::Done => 0,
            Settle::Deadline(_) => 1,
            Settle::Throttled(_) => 2,
            Settle::Requeue(_) => 3,
            Settle::Wait(..) => 4,
            Settle::Retry(_) => 5,
            Settle::Misconfigured(_) => 6,
            Settle::Lost => 7,
        }
    }

    fn join(self, other: Settle) -> Settle {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }

    fn of(d: &Delivery) -> Settle {
        match d {
            Delivery::Released { reason } => Settle::Retry(reason.clone()),
            Delivery::Throttled { reason } => Settle::Throttled(reason.clone()),
            Delivery::Paused { reason } => Settle::Requeue(reason.clone()),
            Delivery::Misconfigured { reason } => Settle::Misconfigured(reason.clone()),
            Delivery::Deferred { reason } => Settle::Deadline(reason.clone()),
            Delivery::Replan { reason } => Settle::Wait(reason.clone(), Waiting::RETRY),
            Delivery::Fenced => Settle::Lost,
            _ => Settle::Done,
        }
    }
}

/// Runs `work` while pinging `tx` every lease renewal, for as long as the
/// lease holds: the transaction's own idle timeout (a lease's length) then
/// ends it only once this process stops working (frozen, cut off) or has
/// lost its lease.
async fn keep_alive<T>(
    tx: &deadpool_postgres::Transaction<'_>,
    lease: &Lease,
    work: impl std::future::Future<Output = T>,
) -> T {
    let ping = async {
        loop {
            tokio::time::sleep(lease.renew_every()).await;
            if !lease.holds() {
                std::future::pending::<()>().await;
            }
            if let Err(e) = tx.execute("SELECT 1", &[]).await {
                tracing::warn!(error = %e, "the batch's transaction is gone; its writes will fail and be retried");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        out = work => out,
        _ = ping => unreachable!("the keepalive only ends with the work"),
    }
}

/// What processing a claimed batch needs of its poller.
pub struct Batch<'a> {
    pub pool: &'a Pool,
    pub mailer: &'a dyn Mailer,
    pub faults: &'a Faults,
    pub config: &'a PollerConfig,
    /// Set once the provider pauses sending (or refuses the stack's
    /// configuration): no further send this run.
    pub paused: &'a AtomicBool,
    /// Whether a send started now would end before the run's deadline.
    pub send_fits: &'a (dyn Fn() -> bool + Sync),
    pub pace: &'a Pacer,
}

impl Batch<'_> {
    /// Processes the events a claim returned: an unreadable one is
    /// dead-lettered at once (a poison message: retrying cannot help); the
    /// rest are [`process`](Self::process)ed, again on fresh connections
    /// after each of [`BATCH_RETRIES`] when the database fails midway.
    pub async fn process_claimed(&self, claimed: Vec<ClaimedEvent>, lease: &Lease) -> Result<RunSummary, RunError> {
        let mut summary = RunSummary::default();
        let mut readable = Vec::with_capacity(claimed.len());
        for event in claimed {
            match BookingEvent::decode(&event) {
                Ok(decoded) => readable.push((decoded, event.attempts)),
                Err(reason) => {
                    // A poison message: retrying cannot help.
                    tracing::error!(event_id = %event.id, %reason, "unreadable event dead-lettered");
                    let client = self.pool.get().await?;
                    if transitions::dead_letter(&client, event.id, lease.id, &reason).await? {
                        summary.dead_lettered += 1;
                    } else {
                        summary.fenced += 1;
                    }
                }
            }
        }
        if readable.is_empty() {
            return Ok(summary);
        }
        // A lost connection, or a restarted server, fails the batch midway.
        // The events are still this worker's (PROCESSING under its lease),
        // so it processes them again itself on fresh connections while its
        // lease holds: what was recorded stands (a claim with an outcome is
        // never sent again, one left CLAIMED becomes UNKNOWN), the rest goes
        // out now. Once the lease is lost, they are the next claim's.
        let mut pauses = BATCH_RETRIES.iter();
        loop {
            match self.process(readable.clone(), lease).await {
                Ok(one) => {
                    summary.add(&one);
                    break;
                }
                // An injected crash stops the run, as a real one would.
                Err(e @ RunError::Fault(_)) => return Err(e),
                Err(e) if !lease.holds() => {
                    tracing::warn!(error = %e, "batch processing failed and the lease is lost; the events are \
                        the next claim's");
                    summary.errors += 1;
                    break;
                }
                Err(e) => match pauses.next() {
                    Some(pause) => {
                        tracing::warn!(error = %e, "batch processing failed; processing it again on fresh connections");
                        summary.recovered += 1;
                        tokio::time::sleep(*pause).await;
                    }
                    None => {
                        // The events stay PROCESSING; once the run ends its
                        // lease, the next claim takes them over.
                        tracing::error!(error = %e, "batch processing failed again; left for the next claim");
                        summary.errors += 1;
                        break;
                    }
                },
            }
        }
        Ok(summary)
    }

    /// Processes a whole claimed batch (events of distinct bookings); see
    /// the module documentation.
    #[tracing::instrument(skip_all, fields(events = batch.len()))]
    pub async fn process(&self, batch: Vec<(BookingEvent, i32)>, lease: &Lease) -> Result<RunSummary, RunError> {
        let mut summary = RunSummary::default();
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        // The transaction holds the batch's processed_events rows, which a
        // later claim of these events waits for: it must not outlive this
        // run's hold on them. The server ends it (and the session) once it
        // sits idle for a lease's length; while the lease holds, a keepalive
        // below keeps it from idling (a frozen process sends none).
        tx.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', $1, true)",
            &[&self.config.lease.as_millis().to_string()],
        )
        .await?;
        let ids: Vec<Uuid> = batch.iter().map(|(e, _)| e.id).collect();
        let fresh: HashSet<Uuid> = processed::try_insert_many(&tx, &ids).await?.into_iter().collect();
        // Those a previous attempt committed are processed already.
        let (batch, already): (Vec<_>, Vec<_>) = batch.into_iter().partition(|(e, _)| fresh.contains(&e.id));
        summary.already_processed += already.len() as u32;
        let fresh_ids: Vec<Uuid> = batch.iter().map(|(e, _)| e.id).collect();
        // An operator's resend: a reopened event runs for the named
        // recipients alone, whatever the others' sends are.
        let only = resend::pending_recipients_many(&tx, &fresh_ids).await?;
        let events: Vec<&BookingEvent> = batch.iter().map(|(e, _)| e).collect();
        let plans = plan_many(&tx, &events, self.config.skip_superseded).await?;
        let mut items: Vec<(usize, Planned)> = Vec::new();
        let mut settle = vec![Settle::Done; events.len()];
        for (i, (event, plan)) in events.iter().zip(plans).enumerate() {
            let plan = match plan {
                Ok(plan) => plan,
                Err(Waiting { reason, retry }) => {
                    settle[i] = Settle::Wait(reason, retry);
                    continue;
                }
            };
            let only = only.get(&event.id);
            items.extend(
                plan.into_iter()
                    .filter(|p| only.is_none_or(|o| o.iter().any(|r| r == p.notification().recipient.email.as_str())))
                    .map(|p| (i, p)),
            );
        }
        let send_fits = || (self.send_fits)() && lease.holds();
        let gate = Gate {
            paused: self.paused,
            send_fits: &send_fits,
            pace: self.pace,
            claim_group: self.config.claim_group,
            recipient_limits: self.config.recipient_limits,
        };
        let (owners, planned): (Vec<usize>, Vec<Planned>) = items.into_iter().unzip();
        let delivering =
            deliver(self.pool, self.mailer, self.faults, (&self.config.worker_id, lease.id), &gate, &planned);
        let deliveries = keep_alive(&tx, lease, delivering).await?;
        for (i, delivery) in owners.into_iter().zip(&deliveries) {
            summary.count(delivery);
            settle[i] = settle[i].clone().join(Settle::of(delivery));
        }
        let mut done: Vec<Uuid> = already.iter().map(|(e, _)| e.id).collect();
        let mut unfinished = Vec::new();
        for ((event, attempts), settle) in batch.iter().zip(settle) {
            match settle {
                Settle::Done => done.push(event.id),
                Settle::Lost => summary.fenced += 1,
                settle => unfinished.push((event.id, *attempts, settle)),
            }
        }
        if !done.is_empty() {
            self.faults.hit(FAULT_BEFORE_DONE_COMMIT)?;
        }
        // DONE only for those still held under this run's lease (the fence).
        let completed: HashSet<Uuid> = transitions::complete_many(&tx, &done, lease.id).await?.into_iter().collect();
        let lost = done.iter().filter(|id| !completed.contains(id)).count() as u32;
        summary.fenced += lost;
        // Not done, or another holder's now: the processed_events rows this
        // transaction inserted for them must not commit, so they run again
        // (a row an earlier attempt committed is never undone).
        let again: Vec<Uuid> = fresh_ids.iter().filter(|id| !completed.contains(id)).copied().collect();
        processed::undo_many(&tx, &again).await?;
        for id in completed.iter().filter(|id| only.contains_key(id)) {
            resend::mark_resent(&tx, *id).await?;
        }
        tx.commit().await?;
        summary.done += completed.len() as u32;
        if summary.fenced > 0 {
            tracing::warn!(
                count = summary.fenced,
                "events taken over by another claim while this run worked on them; \
                it wrote nothing more about them"
            );
        }
        for (id, attempts, settle) in unfinished {
            self.settle_unfinished(id, attempts, settle, lease, &mut summary).await?;
        }
        Ok(summary)
    }

    /// Hands back an event that is not done, by why.
    #[tracing::instrument(skip_all, fields(%event_id, attempt = attempts))]
    async fn settle_unfinished(
        &self,
        event_id: Uuid,
        attempts: i32,
        settle: Settle,
        lease: &Lease,
        summary: &mut RunSummary,
    ) -> Result<(), RunError> {
        let client = self.pool.get().await?;
        let lease = lease.id;
        let moved = match settle {
            Settle::Done | Settle::Lost => true, // committed by the caller; another holder's
            Settle::Misconfigured(reason) => {
                // Nothing was sent and nothing the event holds is wrong:
                // it waits, like a pause, until the configuration is fixed
                // (each run tries one send, alarmed by SendingStopped).
                let reason = format!("{STOPPED_MISCONFIGURED}{reason}");
                transitions::requeue(&client, event_id, lease, self.config.pause_delay, &reason, Requeue::Stopped)
                    .await?
            }
            Settle::Retry(reason) => {
                let delay = self.config.backoff(attempts);
                let max = self.config.max_attempts;
                match transitions::retry(&client, event_id, lease, delay, &reason, max).await? {
                    Retried::Dead => {
                        tracing::error!(%reason, attempts, "attempts exhausted; dead-lettered");
                        summary.dead_lettered += 1;
                        true
                    }
                    Retried::Pending => {
                        tracing::info!(%reason, delay_ms = delay.as_millis() as u64, "will retry");
                        summary.retried += 1;
                        true
                    }
                    Retried::NotOwned => false,
                }
            }
            Settle::Deadline(reason) => {
                let moved =
                    transitions::requeue(&client, event_id, lease, Duration::ZERO, &reason, Requeue::Later).await?;
                tracing::info!("event handed back at the deadline; the next invocation goes on");
                summary.deadline_requeued += moved as u32;
                moved
            }
            Settle::Throttled(reason) => {
                let reason = format!("throttled: {reason}");
                let moved =
                    transitions::requeue(&client, event_id, lease, THROTTLED_RETRY, &reason, Requeue::Later).await?;
                summary.throttled += moved as u32;
                moved
            }
            Settle::Wait(reason, retry) => {
                let moved = transitions::requeue(&client, event_id, lease, retry, &reason, Requeue::Later).await?;
                summary.waiting += moved as u32;
                moved
            }
            Settle::Requeue(reason) => {
                let delay = self.config.pause_delay;
                let reason = format!("{STOPPED_PAUSED}{reason}");
                transitions::requeue(&client, event_id, lease, delay, &reason, Requeue::Stopped).await?
            }
        };
        if !moved {
            tracing::warn!("event taken over by another claim (or swept) from under this run; left to its new holder");
            summary.fenced += 1;
        }
        Ok(())
    }
}
