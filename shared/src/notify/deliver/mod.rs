//! Deliver notifications: claim the sends, commit the claims, call the
//! mailer, record the outcomes, a batch's recipients at a time.
//!
//! - [`delivery`]: what one recipient's delivery came to, what a mailer's
//!   answer means, and the gate every send waits at;
//! - [`flow`]: [`deliver`], the call: decisions first, then chunks claimed
//!   as the pacer admits them, sends in flight, outcomes written as they end;
//! - [`run`]: one call's steps (the decisions claimed settled, a chunk
//!   admitted and claimed, one send at its time);
//! - [`record`]: outcomes written durably, a failed chunk's claims released.

pub mod delivery;
pub mod flow;
pub mod record;
pub mod run;

pub use delivery::{Delivery, Gate, FAULT_AFTER_SEND, FAULT_AFTER_SEND_CLAIM, RECORD_RETRIES, START_WITHIN};
pub use flow::deliver;
