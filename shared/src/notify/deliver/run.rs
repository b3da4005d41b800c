//! One call of `deliver`: the decisions claimed up front,
//! each chunk of sends admitted by the pacer and claimed, each send made at
//! its time.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tracing::Instrument;
use uuid::Uuid;

use super::delivery::{judge, Delivery, Gate, FAULT_AFTER_SEND, START_WITHIN};
use super::record::release_unsent;
use crate::booking::events::{EventType, Notice};
use crate::booking::store;
use crate::db::DbError;
use crate::fault::{FaultError, Faults, RunError};
use crate::notify::evidence::suppression;
use crate::notify::mailer::{Mailer, SendOutcome};
use crate::notify::notification::Notification;
use crate::notify::pacing::pace::{Admitted, LATE};
use crate::notify::pacing::pauses;
use crate::notify::pacing::recipient_limit::{self, Invitation, Verdict};
use crate::notify::plan::Planned;
use crate::notify::sends::{self, Claim, Claimant, Decided, GroupClaim, Outcome, SendStatus, Settled};
use crate::telemetry::mask_email;
use deadpool_postgres::Pool;

/// One send admitted and claimed, to make.
pub struct Admission<'a> {
    pub item: usize,
    claim: Uuid,
    /// When its claim statement started: the send must start within
    /// [`START_WITHIN`] of it.
    claimed: Instant,
    admitted: Admitted<'a>,
}

/// What claiming one chunk did.
pub struct Chunk<'a> {
    /// How many pending items it took (claimed, or settled by their claim).
    pub taken: usize,
    pub sends: Vec<Admission<'a>>,
    pub settled: Vec<(usize, Delivery)>,
}

/// One call of `deliver`.
pub struct Run<'a> {
    pub pool: &'a Pool,
    /// The call's connection: claims and outcomes, pipelined.
    pub client: &'a deadpool_postgres::Client,
    pub mailer: &'a dyn Mailer,
    pub faults: &'a Faults,
    pub claimant: Claimant<'a>,
    pub gate: &'a Gate<'a>,
    pub items: &'a [Planned],
}

impl<'a> Run<'a> {
    fn notification(&self, i: usize) -> &'a Notification {
        self.items[i].notification()
    }

    pub fn deferred(&self, what: &str) -> Delivery {
        Delivery::Deferred { reason: format!("the invocation's deadline came first; {what}") }
    }

    /// Why no more sends may be claimed in this run, if so.
    pub fn stop(&self) -> Option<Delivery> {
        if self.gate.paused.load(Ordering::SeqCst) {
            Some(Delivery::Paused { reason: "sending paused earlier in this run; left unclaimed".into() })
        } else if !(self.gate.send_fits)() {
            Some(self.deferred("left unclaimed"))
        } else {
            None
        }
    }

    /// Step 1: claims the decisions that need no send (superseded, or to a
    /// suppressed address), settled at once; one an earlier attempt
    /// claimed stays as it was. Returns the items left to send, in order.
    pub async fn settle_decided(&self, out: &mut [Option<Delivery>]) -> Result<Vec<usize>, RunError> {
        let sends: Vec<&str> = (0..self.items.len())
            .filter(|i| matches!(self.items[*i], Planned::Send(_)))
            .map(|i| self.notification(i).recipient.email.as_str())
            .collect();
        let client = self.client;
        // An address that bounced permanently or complained is never mailed.
        let suppressed = suppression::suppressions_of(client, &sends).await?;
        let reasons: Vec<Option<String>> = self
            .items
            .iter()
            .map(|p| match p {
                Planned::Send(n) => suppressed
                    .get(n.recipient.email.as_str())
                    .map(|why| format!("suppressed: the address {why} earlier")),
                Planned::Superseded { .. } => None,
            })
            .collect();
        let decided: Vec<usize> = (0..self.items.len())
            .filter(|i| matches!(self.items[*i], Planned::Superseded { .. }) || reasons[*i].is_some())
            .collect();
        let claims: Vec<GroupClaim> = decided
            .iter()
            .map(|i| GroupClaim {
                notification: self.notification(*i),
                decided: Some(match (&self.items[*i], &reasons[*i]) {
                    (Planned::Superseded { by, reason, because, .. }, _) => {
                        Decided::Superseded { by: *by, reason, because: *because }
                    }
                    (Planned::Send(_), reason) => Decided::Suppressed { reason: reason.as_deref().unwrap_or_default() },
                }),
            })
            .collect();
        let ids = sends::claim::new_ids(&claims);
        let claimed = match self.claim(client, &claims, &ids).await {
            Ok(claimed) => claimed,
            Err(e) => {
                release_unsent(self.pool, &ids, self.claimant.lease, &e).await;
                return Err(e.into());
            }
        };
        for (i, claim) in decided.iter().zip(claimed) {
            out[*i] = Some(match (claim, &self.items[*i], &reasons[*i]) {
                (Err(settled), ..) => settled,
                (Ok(_), Planned::Superseded { by, .. }, _) => Delivery::Superseded { by: *by },
                (Ok(_), _, reason) => {
                    let reason = reason.clone().unwrap_or_default();
                    tracing::warn!(%reason, "not sent to a suppressed address");
                    Delivery::Rejected { reason }
                }
            });
        }
        Ok((0..self.items.len()).filter(|i| out[*i].is_none()).collect())
    }

    /// Claims `claims` in one committed statement, as `ids`. Ok(id): won;
    /// Err: an earlier attempt's claim, never sent again (one left
    /// CLAIMED, whose attempt died, is marked UNKNOWN).
    async fn claim(
        &self,
        client: &deadpool_postgres::Client,
        claims: &[GroupClaim<'_>],
        ids: &[Uuid],
    ) -> Result<Vec<Result<Uuid, Delivery>>, DbError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let reaches_within = START_WITHIN + self.mailer.worst_case();
        let claimed = sends::claim(client, claims, ids, &self.claimant, reaches_within).await?;
        let mut orphans = Vec::new();
        let won = claimed
            .into_iter()
            .map(|claim| match claim {
                Claim::Won(id) => Ok(id),
                Claim::Exists { id, status: SendStatus::Claimed } => {
                    orphans.push(id);
                    Err(Delivery::Orphaned)
                }
                Claim::Exists { .. } => Err(Delivery::AlreadyClaimed),
                Claim::Fenced => Err(Delivery::Fenced),
            })
            .collect();
        if !orphans.is_empty() {
            let marked = sends::outcome::mark_orphans_unknown(client, &orphans, self.claimant.lease).await?;
            tracing::warn!(count = marked, "orphaned claims marked UNKNOWN; not re-sent");
        }
        Ok(won)
    }

    /// Step 2: waits until some of `chunk` may start, and claims exactly
    /// those. A database error releases what this chunk claimed.
    pub async fn admit_and_claim(&self, chunk: Vec<usize>) -> Result<Chunk<'a>, DbError> {
        let admitted = self.gate.pace.admit(chunk.len(), self.gate.send_fits).await?;
        let taken = admitted.len();
        let (chunk, admitted, replan) = self.as_planned(&chunk[..taken], admitted).await?;
        let claims: Vec<GroupClaim> =
            chunk.iter().map(|i| GroupClaim { notification: self.notification(*i), decided: None }).collect();
        let ids = sends::claim::new_ids(&claims);
        let started = Instant::now();
        let claimed = self.claim_chunk(&chunk, &claims, &ids, admitted, started).await;
        self.gate.pace.observe_claim(started.elapsed());
        if let Err(e) = &claimed {
            release_unsent(self.pool, &ids, self.claimant.lease, e).await;
        }
        let mut claimed = claimed?;
        claimed.taken = taken;
        claimed.settled.extend(replan);
        Ok(claimed)
    }

    /// The items of `chunk` (and their admissions) still as planned: a
    /// reminder only while its booking is the version its plan read, not
    /// cancelled, and not started. The others are planned again. One
    /// statement, only for a chunk that holds a reminder; what commits
    /// after it can still race its send, for at most [`START_WITHIN`].
    #[allow(clippy::type_complexity)]
    async fn as_planned(
        &self,
        chunk: &[usize],
        admitted: Vec<Admitted<'a>>,
    ) -> Result<(Vec<usize>, Vec<Admitted<'a>>, Vec<(usize, Delivery)>), DbError> {
        let reminder = |i: usize| self.notification(i).event_type == EventType::BookingReminder;
        if !chunk.iter().any(|i| reminder(*i)) {
            return Ok((chunk.to_vec(), admitted, Vec::new()));
        }
        let bookings: Vec<Uuid> =
            chunk.iter().filter(|i| reminder(**i)).map(|i| self.notification(*i).payload.booking.id).collect();
        let standing = store::standing_among(self.client, &bookings).await?;
        let now = chrono::Utc::now();
        let (mut kept, mut places, mut replan) = (Vec::new(), Vec::new(), Vec::new());
        for (i, admission) in chunk.iter().zip(admitted) {
            let b = &self.notification(*i).payload.booking;
            let why = match standing.get(&b.id) {
                _ if !reminder(*i) => None,
                None => Some("its booking is gone"),
                Some(s) if s.cancelled => Some("its booking was cancelled since its plan"),
                Some(s) if s.version != b.version => Some("its booking changed since its plan"),
                Some(_) if now >= b.range.start() => Some("its meeting started since its plan"),
                Some(_) => None,
            };
            match why {
                None => {
                    kept.push(*i);
                    places.push(admission);
                }
                Some(why) => {
                    tracing::info!(reason = why, "reminder not claimed; planned again");
                    replan.push((*i, Delivery::Replan { reason: format!("{why}: planned again") }));
                }
            }
        }
        Ok((kept, places, replan))
    }

    /// The claim of one admitted chunk, and no invitation beyond what its
    /// recipient's limits allow ([`recipient_limit`]).
    async fn claim_chunk(
        &self,
        chunk: &[usize],
        claims: &[GroupClaim<'_>],
        ids: &[Uuid],
        admitted: Vec<Admitted<'a>>,
        claimed_at: Instant,
    ) -> Result<Chunk<'a>, DbError> {
        let client = self.client;
        // The invitations are counted with the claim, on the same
        // connection (pipelined: one round trip); a send found claimed
        // before gives its count back.
        let invitations: Vec<Option<Invitation>> =
            chunk.iter().map(|i| Invitation::of(self.notification(*i))).collect();
        let counted: Vec<Invitation> = invitations.iter().flatten().cloned().collect();
        let limits = self.gate.recipient_limits;
        // And whether their organizers' sending is paused ([`pauses`]):
        // all but a cancellation or a removal waits for an operator.
        let pausable = |i: &usize| !matches!(self.notification(*i).notice, Notice::Cancel | Notice::Removed);
        let organizers: Vec<String> = chunk
            .iter()
            .filter(|i| pausable(i))
            .map(|i| pauses::key_of(&self.notification(*i).payload.booking))
            .collect();
        let (claimed, verdicts, paused) = tokio::try_join!(
            self.claim(client, claims, ids),
            recipient_limit::take(client, &counted, limits),
            pauses::paused_among(client, &organizers)
        )?;
        let paused: std::collections::HashMap<String, String> = paused.into_iter().collect();
        let mut verdicts = verdicts.into_iter();
        let (mut kept, mut settled, mut capped, mut not_ours) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (((i, claim), admitted), invitation) in chunk.iter().zip(claimed).zip(admitted).zip(invitations) {
            let verdict = match &invitation {
                Some(_) => verdicts.next().expect("one verdict per invitation"),
                None => Verdict::Send,
            };
            let pause = pausable(i)
                .then(|| paused.get(&pauses::key_of(&self.notification(*i).payload.booking)))
                .flatten()
                .map(|why| pauses::Pause::capped_reason(why));
            // A paused organizer's invitation was counted above, and is not sent.
            let uncounted = pause.is_some() && verdict == Verdict::Send;
            match (claim, pause.or_else(|| verdict.reason(limits))) {
                (Ok(claim), None) => kept.push(Admission { item: *i, claim, claimed: claimed_at, admitted }),
                (Ok(claim), Some(reason)) => {
                    if uncounted {
                        not_ours.extend(invitation);
                    }
                    tracing::warn!(%reason, "not sent: a limit that protects its recipient, or its organizer paused");
                    capped.push((claim, Outcome::Settled(Settled::Capped, reason.clone())));
                    settled.push((*i, Delivery::Capped { reason }));
                }
                (Err(delivery), _) => {
                    not_ours.extend(invitation);
                    settled.push((*i, delivery));
                }
            }
        }
        recipient_limit::give_back(client, &not_ours).await?;
        sends::outcome::record(client, &capped, self.claimant.lease).await?;
        Ok(Chunk { taken: chunk.len(), sends: kept, settled })
    }

    /// Step 3: one send, at its time, and what its answer means.
    pub async fn send(&self, s: Admission<'a>) -> Result<(usize, Uuid, Outcome, Delivery), FaultError> {
        let Admission { item: i, claim: id, claimed, admitted } = s;
        let n = self.notification(i);
        let span = tracing::info_span!(
            "send",
            event_id = %n.event_id,
            booking_id = %n.payload.booking.id,
            recipient = %mask_email(n.recipient.email.as_str()),
            link_trace_id = n.trace_id.as_deref().unwrap_or("-"),
        );
        async move {
            let pace = self.gate.pace;
            let Admitted { place, mut at } = admitted;
            // A send late for its time takes a new one: starting late would
            // crowd the next sends of the fleet's schedule.
            while let Some(time) = at {
                tokio::time::sleep_until(time.into()).await;
                if Instant::now() <= time + LATE {
                    break;
                }
                at = match pace.retime(self.gate.send_fits).await {
                    Ok(Some(time)) => Some(time),
                    Ok(None) => return Ok((i, id, Outcome::Released, self.deferred("the claim was released unsent"))),
                    Err(e) => {
                        let reason = format!("the fleet's send rate could not be read: {e}");
                        tracing::warn!(%reason, "claim released unsent");
                        return Ok((i, id, Outcome::Released, Delivery::Released { reason }));
                    }
                };
            }
            if self.gate.paused.load(Ordering::SeqCst) {
                let reason = "sending paused earlier in this run".to_string();
                return Ok((i, id, Outcome::Released, Delivery::Paused { reason }));
            }
            if !(self.gate.send_fits)() {
                return Ok((i, id, Outcome::Released, self.deferred("the claim was released unsent")));
            }
            // Its claim told SES's evidence it would start by now at the
            // latest: a send that did not is released, never started late.
            if claimed.elapsed() > START_WITHIN {
                let reason = "its start came later than its claim allowed; the claim was released unsent";
                return Ok((i, id, Outcome::Released, Delivery::Deferred { reason: reason.into() }));
            }
            let n = Notification { claim: Some(id), ..n.clone() };
            let started = Instant::now();
            // Reasons are logged and stored from here on: no address in them.
            let outcome = self.mailer.send(&n).await.masked();
            pace.observe(started.elapsed());
            drop(place);
            self.faults.hit(FAULT_AFTER_SEND)?;
            match &outcome {
                // The provider paused the account, or refused the stack's
                // configuration: every further send would be refused too.
                SendOutcome::Paused { .. } | SendOutcome::Misconfigured { .. } => {
                    self.gate.paused.store(true, Ordering::SeqCst)
                }
                SendOutcome::Throttled { .. } => {
                    if let Err(e) = pace.throttled().await {
                        tracing::warn!(error = %e, "could not slow the fleet down after a throttling answer");
                    }
                }
                _ => {}
            }
            let (outcome, delivery) = judge(outcome);
            Ok((i, id, outcome, delivery))
        }
        .instrument(span)
        .await
    }
}
