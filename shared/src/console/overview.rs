//! The overview: how the outbox stands now and over the last hour, read
//! through the module that owns each table.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;

use crate::db::DbResult;
use crate::notify::evidence::resend::{self, UnknownCounts, UnknownSend};
use crate::notify::evidence::{suppression, watermark};
use crate::notify::pacing::send_rate;
use crate::notify::sends::{self, Minute};
use crate::outbox::events::lease::{self, Held};
use crate::outbox::events::standing::{self, Backlog, Stopped};
use crate::relay::SweeperConfig;

/// How far back the charts look.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// A minute this long past its end is settled: no send completes in it
/// any more (an outcome's time is its transaction's start, and a poller's
/// transactions are short).
const SETTLED_AFTER: Duration = Duration::from_secs(120);

/// The last hour's settled minutes, kept by the container between
/// requests: each request reads only what has settled since (a few
/// minutes of sends), never the whole hour again. A new container reads
/// the hour once.
#[derive(Default)]
pub struct Minutes {
    settled: std::sync::Mutex<(Option<DateTime<Utc>>, Vec<Minute>)>,
}

impl Minutes {
    /// The window's minutes at `now`, reading only from the first minute
    /// not yet settled when last asked.
    async fn fetch(&self, client: &impl GenericClient, now: DateTime<Utc>) -> DbResult<Vec<Minute>> {
        let start = now - WINDOW;
        let (known_until, mut kept) = {
            let guard = self.settled.lock().expect("not poisoned");
            (guard.0.filter(|t| *t > start), guard.1.clone())
        };
        let from = known_until.unwrap_or(start);
        let fresh = sends::read::minutes(client, from).await?;
        // Minutes up to this line are settled: keep them for next time.
        let line = chrono::DurationRound::duration_trunc(now - SETTLED_AFTER, chrono::Duration::minutes(1))
            .unwrap_or(now - SETTLED_AFTER);
        kept.retain(|m| m.at >= start && m.at < from);
        kept.extend(fresh.iter().filter(|m| m.at >= start).cloned());
        *self.settled.lock().expect("not poisoned") =
            (Some(line.max(from)), kept.iter().filter(|m| m.at < line.max(from)).cloned().collect());
        Ok(kept)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub now: DateTime<Utc>,
    pub backlog: Backlog,
    pub stuck: i64,
    pub stopped: Option<Stopped>,
    /// Each minute of the last hour that settled a send.
    pub minutes: Vec<Minute>,
    pub rates: Vec<send_rate::Standing>,
    pub unknown: UnknownCounts,
    /// The ambiguous sends left for an operator (and why), newest first.
    pub left_for_operator: Vec<UnknownSend>,
    pub dead_reasons: Vec<(String, i64, DateTime<Utc>)>,
    pub dead: Vec<crate::outbox::events::StoredEvent>,
    pub suppressed: i64,
    pub suppressions: Vec<suppression::Suppression>,
    pub watermark: Option<watermark::Watermark>,
    pub leases: Vec<Held>,
}

impl Overview {
    pub async fn fetch(client: &impl GenericClient, config: &SweeperConfig, kept: &Minutes) -> DbResult<Overview> {
        let now = client.query_one("SELECT now()", &[]).await?.get(0);
        Ok(Overview {
            now,
            backlog: standing::backlog(client).await?,
            stuck: standing::count_stuck(client, config.stuck_after).await?,
            stopped: standing::stopped(client).await?,
            minutes: kept.fetch(client, now).await?,
            rates: send_rate::standing(client).await?,
            unknown: resend::counts(client, config.feedback.grace).await?,
            left_for_operator: sends::unknown::left_for_operator(client, config.feedback.grace, 10).await?,
            dead_reasons: standing::dead_reasons(client, 5).await?,
            dead: crate::outbox::events::list_dead(client, 10).await?,
            suppressed: suppression::count(client).await?,
            suppressions: suppression::suppressions(client, 10).await?,
            watermark: watermark::watermark(client).await?,
            leases: lease::held(client).await?,
        })
    }

    /// Sends settled over the window, by outcome.
    pub fn totals(&self) -> Minute {
        self.minutes.iter().fold(
            Minute {
                at: self.now,
                sent: 0,
                failed: 0,
                unknown: 0,
                superseded: 0,
                capped: 0,
                latency_p50: None,
                latency_p99: None,
            },
            |mut t, m| {
                t.sent += m.sent;
                t.failed += m.failed;
                t.unknown += m.unknown;
                t.superseded += m.superseded;
                t.capped += m.capped;
                t
            },
        )
    }
}
