//! What one recipient's delivery came to ([`Delivery`]), what a mailer's
//! answer means for its claim ([`judge`]), and what a call of
//! `deliver` is given to decide when sends may start ([`Gate`]).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use uuid::Uuid;

use crate::notify::mailer::SendOutcome;
use crate::notify::pacing::pace::Pacer;
use crate::notify::pacing::recipient_limit::RecipientLimits;
use crate::notify::sends::{Outcome, Settled};

/// Claim committed, mailer not yet called.
pub const FAULT_AFTER_SEND_CLAIM: &str = "deliver.after_send_claim";
/// Mailer accepted the message, outcome not yet recorded.
pub const FAULT_AFTER_SEND: &str = "deliver.after_send";

/// A send starts within this long of its claim, or not at all (its claim
/// is released): the claim records that it can reach the provider until
/// this plus the mailer's worst case, which SES's evidence is judged by.
pub const START_WITHIN: Duration = Duration::from_secs(1);

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
    /// The provider refused the stack's own configuration (the sender's
    /// identity not verified, access denied, TLS): the claim is released;
    /// stop sending, and the event waits for the fix, using no attempt.
    Misconfigured { reason: String },
    /// The provider may or may not have accepted it: UNKNOWN, kept.
    Unknown { reason: String },
    /// Not sent: a later event made it moot (recorded SUPERSEDED).
    Superseded { by: Uuid },
    /// Not sent: an invitation over a limit that protects its recipient
    /// (`pacing::recipient_limit`; recorded CAPPED); never retried.
    Capped { reason: String },
    /// Not sent: the invocation's deadline came before the send could
    /// start; the claim is released for the next invocation.
    Deferred { reason: String },
    /// Not claimed: a reminder whose booking changed (or started) since
    /// its plan; the event is planned again soon, without an attempt.
    Replan { reason: String },
    /// Not claimed, or its outcome not recorded: the event is no longer
    /// held under this worker's lease (taken over, or swept). Its new
    /// holder decides; this worker stops working on it.
    Fenced,
}

/// What a mailer's answer means for the claim, and for the event.
pub fn judge(outcome: SendOutcome) -> (Outcome, Delivery) {
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
            tracing::error!(%reason, "the provider refused the stack's configuration; sending stops until it is fixed");
            (Outcome::Released, Delivery::Misconfigured { reason })
        }
        SendOutcome::Unknown { reason } => {
            tracing::warn!(%reason, "outcome unknown; claim kept, never re-sent automatically");
            (Outcome::Settled(Settled::Unknown, reason.clone()), Delivery::Unknown { reason })
        }
    }
}

/// When sends may start, and when they stop short: the provider paused
/// sending (this run sends nothing more), or the next send would not end
/// before the deadline. Every send waits for the [`Pacer`]: a place among
/// the sends in flight and, when paced, its time in the fleet's schedule.
pub struct Gate<'a> {
    pub paused: &'a AtomicBool,
    pub send_fits: &'a (dyn Fn() -> bool + Sync),
    pub pace: &'a Pacer,
    /// The most sends claimed in one statement (`POLLER_CLAIM_GROUP`).
    pub claim_group: usize,
    /// How many invitations one mailbox may get (`pacing::recipient_limit`).
    pub recipient_limits: RecipientLimits,
}
