//! What an operator may do from the console, each with the same rules as
//! its `outboxctl` command, because it is the same call:
//!
//! | action | `outboxctl` | the call |
//! |---|---|---|
//! | replay a dead event | `dead replay ID` | [`transitions::replay`] |
//! | resend an UNKNOWN send | `unknown resend ID` | [`resend::resend`] (refuses a moot one: [`resend::preview`]) |
//! | lift a suppression | `suppression remove EMAIL` | [`suppression::unsuppress`] |
//!
//! Each is first shown ([`Action::preview`]: what it will do, or why it
//! cannot), then done ([`Action::run`]), recorded as the operator.

use deadpool_postgres::Client;
use serde::Deserialize;
use uuid::Uuid;

use super::auth::Operator;
use crate::db::DbError;
use crate::notify::evidence::resend::{self, ResendError};
use crate::notify::evidence::suppression;
use crate::outbox::events;
use crate::outbox::events::transitions::{self, ReplayError, ReplaySelection};

/// An action and its target, as the console's page posts it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    Replay { event_id: Uuid },
    Resend { send_id: Uuid },
    Unsuppress { email: String },
}

/// What an action would do, or did; `Refused` says why not, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    Ok(String),
    Refused(String),
}

impl Action {
    /// Parses what the page posted: one line naming what is wrong.
    pub fn parse(body: &[u8]) -> Result<Action, String> {
        let action: Action = serde_json::from_slice(body).map_err(|e| format!("not an action: {e}"))?;
        if let Action::Unsuppress { email } = &action {
            if email.len() > 320 || !email.contains('@') {
                return Err("email must be an address".into());
            }
        }
        Ok(action)
    }

    /// What it would do.
    pub async fn preview(&self, client: &mut Client) -> Result<Said, DbError> {
        Ok(match self {
            Action::Replay { event_id } => {
                match transitions::replay(client, ReplaySelection::Ids(&[*event_id]), "preview", 1, true).await {
                    Ok(r) if r.replayed.contains(event_id) => {
                        let e = events::get(&*client, *event_id).await?;
                        let what = e.map(|e| format!("{} v{}", e.event_type, e.aggregate_version)).unwrap_or_default();
                        Said::Ok(format!(
                            "Replay event {event_id} ({what}): it goes back to PENDING with fresh attempts, and a \
                             poller sends it to each recipient not yet sent (those already sent keep their claim and \
                             get nothing twice)."
                        ))
                    }
                    Ok(r) => {
                        Said::Refused(events::standing::not_replayed(&*client, &[*event_id], &r).await?.join("; "))
                    }
                    Err(ReplayError::Db(e)) => return Err(e),
                    Err(e @ ReplayError::TooMany { .. }) => Said::Refused(e.to_string()),
                }
            }
            Action::Resend { send_id } => match resend::preview(&*client, *send_id).await {
                Ok(p) => Said::Ok(format!(
                    "Resend the {} to {}: its unknown claim is recorded and removed, and event {} runs again for \
                     this recipient alone. If the first message did arrive, they will have two.",
                    p.event_type, p.recipient, p.event_id
                )),
                Err(ResendError::Db(e)) => return Err(e),
                Err(e) => Said::Refused(e.to_string()),
            },
            Action::Unsuppress { email } => match suppression::suppression(&*client, email).await? {
                Some(why) => Said::Ok(format!(
                    "Lift the suppression of {email} ({why}): it may be mailed again. If it still bounces, SES \
                     counts it against the account's reputation."
                )),
                None => Said::Refused(format!("{email} is not suppressed")),
            },
        })
    }

    /// Does it, recorded as `operator`.
    pub async fn run(&self, client: &mut Client, operator: &Operator) -> Result<Said, DbError> {
        let who = operator.recorded_as();
        Ok(match self {
            Action::Replay { event_id } => {
                match transitions::replay(client, ReplaySelection::Ids(&[*event_id]), &who, 1, false).await {
                    Ok(r) if r.replayed.contains(event_id) => {
                        tracing::warn!(event_id = %event_id, by = %who, "dead event replayed from the console");
                        Said::Ok(format!("Replayed: event {event_id} is PENDING again (recorded for {who})."))
                    }
                    Ok(r) => {
                        Said::Refused(events::standing::not_replayed(&*client, &[*event_id], &r).await?.join("; "))
                    }
                    Err(ReplayError::Db(e)) => return Err(e),
                    Err(e @ ReplayError::TooMany { .. }) => Said::Refused(e.to_string()),
                }
            }
            Action::Resend { send_id } => {
                match resend::resend(client, *send_id, resend::Decision::Operator(&who)).await {
                    Ok(event) => {
                        tracing::warn!(send_id = %send_id, by = %who, "send resent from the console");
                        Said::Ok(format!(
                        "Will be re-sent: event {event} is PENDING again for this recipient (decision recorded for \
                         {who})."
                    ))
                    }
                    Err(ResendError::Db(e)) => return Err(e),
                    Err(e) => Said::Refused(e.to_string()),
                }
            }
            Action::Unsuppress { email } => match suppression::unsuppress(&*client, email, &who).await? {
                Some(s) => Said::Ok(format!("{} may be mailed again (was: {}).", s.email, s.reason)),
                None => Said::Refused(format!("{email} is not suppressed")),
            },
        })
    }
}
