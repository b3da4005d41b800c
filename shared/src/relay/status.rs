//! How the whole pipeline stands, for `outboxctl status`: events by status,
//! lag, stuck rows, sends by status, how the ambiguous sends stand against
//! SES's feedback, and what holds back vacuum.

use std::collections::BTreeMap;

use deadpool_postgres::GenericClient;
use serde::Serialize;

use super::config::SweeperConfig;
use crate::db::horizon::{self, Horizon};
use crate::db::DbResult;
use crate::notify::evidence::resend::{self, UnknownCounts};
use crate::notify::sends::{self, SendStatus};
use crate::outbox::events::{self, EventStatus};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Status {
    /// Events by status, zeros included.
    pub events: BTreeMap<EventStatus, i64>,
    /// Age of the oldest PENDING event that is due now, in seconds.
    pub oldest_due_pending_age_secs: Option<f64>,
    /// PROCESSING rows older than the sweep timeout (their worker died).
    pub processing_past_sweep_timeout: i64,
    pub dead: i64,
    /// Sends by status, zeros included.
    pub sends: BTreeMap<SendStatus, i64>,
    /// The ambiguous sends against SES's feedback (`FEEDBACK_GRACE_SECS`).
    pub unknown: UnknownCounts,
    /// What holds back vacuum, and for how long.
    pub vacuum_horizon: Horizon,
    /// Events waiting because sending stopped (the provider paused the
    /// account, or refused the stack's configuration), and why.
    pub sending_stopped: Option<events::standing::Stopped>,
}

pub async fn fetch(client: &impl GenericClient, config: &SweeperConfig) -> DbResult<Status> {
    let events = events::standing::counts(client).await?;
    Ok(Status {
        dead: events[&EventStatus::Dead],
        events,
        oldest_due_pending_age_secs: events::standing::oldest_due_age(client).await?,
        processing_past_sweep_timeout: events::standing::count_stuck(client, config.stuck_after).await?,
        sends: sends::counts(client).await?,
        unknown: resend::counts(client, config.feedback.grace).await?,
        vacuum_horizon: horizon::fetch(client).await?,
        sending_stopped: events::standing::stopped(client).await?,
    })
}
