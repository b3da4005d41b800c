//! What SES says after the call, and what is decided on it.
//!
//! - [`ses_event`]: one SES event as EventBridge delivers it, read and
//!   checked (from the stack's own SES, in a shape this service reads).
//! - [`watermark`]: how far SES's event stream has demonstrably got
//!   (`ses_event_watermarks`), and the canaries that move it
//!   (`ses_canaries`).
//! - [`suppression`]: `suppressed_addresses`, the addresses never mailed
//!   again after a bounce or a complaint.
//! - [`resend`]: UNKNOWN sends resent on SES's evidence or left for an
//!   operator, each decision recorded (`notification_resends`).
//! - [`feedback`]: one event recorded against its claim (`send_feedback`):
//!   confirmations, refusals, suppressions.
//! - [`intake`]: what the SES-events function does with one event: read,
//!   record, count.

pub mod feedback;
pub mod intake;
pub mod resend;
pub mod ses_event;
pub mod suppression;
pub mod watermark;
