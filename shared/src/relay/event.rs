//! One claimed event, from `processed_events` to DONE (or retry, or the
//! dead letter): tell every recipient what the plan says (or record why
//! not), then settle the event by what the deliveries say.

use std::sync::atomic::Ordering;

use super::poller::Poller;
use super::summary::RunSummary;
use super::RelayError;
use crate::booking::events::BookingEvent;
use crate::notify::deliver::{deliver, supersede, Delivery};
use crate::notify::mailer::Mailer;
use crate::notify::plan::{plan, Planned};
use crate::notify::unknown;
use crate::outbox::events::transitions::{self, Retried};
use crate::outbox::processed;

/// Every recipient handled; `processed_events` + DONE not yet committed.
pub const FAULT_BEFORE_DONE_COMMIT: &str = "poller.before_done_commit";

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
    /// The provider paused sending: back to PENDING without using an attempt.
    Requeue(String),
    /// A known failure: back to PENDING with backoff (or DEAD when out of attempts).
    Retry(String),
    /// Our mailer configuration is wrong: DEAD until an operator replays it.
    DeadLetter(String),
}

impl Settle {
    fn rank(&self) -> u8 {
        match self {
            Settle::Done => 0,
            Settle::Deadline(_) => 1,
            Settle::Requeue(_) => 2,
            Settle::Retry(_) => 3,
            Settle::DeadLetter(_) => 4,
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
            Delivery::Paused { reason } => Settle::Requeue(reason.clone()),
            Delivery::Misconfigured { reason } => Settle::DeadLetter(reason.clone()),
            _ => Settle::Done,
        }
    }
}

impl<M: Mailer + 'static> Poller<M> {
    #[tracing::instrument(skip_all, fields(event_id = %event.id, booking_id = %event.payload.booking.id, event_type = %event.event_type, attempt = attempts))]
    pub(super) async fn process(&self, event: BookingEvent, attempts: i32) -> Result<RunSummary, RelayError> {
        let mut summary = RunSummary::default();
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        if !processed::try_insert(&tx, event.id).await? {
            // A previous attempt committed: the event is processed already.
            transitions::complete(&tx, event.id).await?;
            tx.commit().await?;
            summary.already_processed += 1;
            summary.done += 1;
            return Ok(summary);
        }
        // An operator's resend: the reopened event runs for the named
        // recipients alone, whatever the others' sends are.
        let only = unknown::pending_recipients(&tx, event.id).await?;
        let planned = plan(&tx, &event, self.config.skip_superseded)
            .await?
            .into_iter()
            .filter(|p| only.is_empty() || only.iter().any(|r| r == p.notification().recipient.email.as_str()));
        let mut settle = Settle::Done;
        let worker = &self.config.worker_id;
        for p in planned {
            if self.paused.load(Ordering::SeqCst) {
                settle = settle.join(Settle::Requeue("sending paused earlier in this run".into()));
                break;
            }
            let delivery = match &p {
                Planned::Send(_) if !self.send_fits() => {
                    let reason = "the invocation's deadline came first; the recipients not yet sent were left unclaimed";
                    settle = settle.join(Settle::Deadline(reason.into()));
                    break;
                }
                Planned::Send(n) => deliver(&self.pool, &*self.mailer, &self.faults, worker, n).await?,
                Planned::Superseded { notification, by, reason } => {
                    supersede(&self.pool, worker, notification, *by, reason).await?
                }
            };
            summary.count(&delivery);
            let stop = matches!(delivery, Delivery::Paused { .. } | Delivery::Misconfigured { .. });
            if let Delivery::Paused { .. } = delivery {
                self.paused.store(true, Ordering::SeqCst);
            }
            settle = settle.join(Settle::of(&delivery));
            if stop {
                break;
            }
        }
        if settle == Settle::Done {
            self.faults.hit(FAULT_BEFORE_DONE_COMMIT)?;
            if !only.is_empty() {
                unknown::mark_resent(&tx, event.id).await?;
            }
            transitions::complete(&tx, event.id).await?;
            tx.commit().await?;
            summary.done += 1;
            return Ok(summary);
        }
        // Not done: processed_events must not commit, so the event runs again.
        tx.rollback().await?;
        let client = self.pool.get().await?;
        match settle {
            Settle::Done => {} // committed above
            Settle::DeadLetter(reason) => {
                transitions::dead_letter(&client, event.id, worker, &format!("mailer misconfigured: {reason}")).await?;
                summary.dead_lettered += 1;
            }
            Settle::Retry(reason) => {
                let delay = self.backoff(attempts);
                let max = self.config.max_attempts;
                match transitions::retry(&client, event.id, worker, delay, &reason, max).await? {
                    Retried::Dead => {
                        tracing::error!(%reason, attempts, "attempts exhausted; dead-lettered");
                        summary.dead_lettered += 1;
                    }
                    Retried::Pending => {
                        tracing::info!(%reason, delay_ms = delay.as_millis() as u64, "will retry");
                        summary.retried += 1;
                    }
                    Retried::NotOwned => tracing::warn!("event was swept from under this worker; left to its new owner"),
                }
            }
            Settle::Deadline(reason) => {
                transitions::requeue(&client, event.id, worker, std::time::Duration::ZERO, &reason).await?;
                tracing::info!("event handed back at the deadline; the next invocation goes on");
                summary.deadline_requeued += 1;
            }
            Settle::Requeue(reason) => {
                let delay = self.config.pause_delay;
                transitions::requeue(&client, event.id, worker, delay, &format!("sending paused: {reason}")).await?;
            }
        }
        Ok(summary)
    }
}
