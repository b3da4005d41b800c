//! The `send_rate` table, every statement: one token bucket per provider
//! that every live poller takes its sends from, so the fleet's total rate is
//! the account's however many containers run (migration V10).
//!
//! The bucket refills at `rate` sends a second, up to [`BURST_SECS`] of
//! sends; a poller takes a few tokens at a time ([`take`]) and starts one
//! send per token. A throttling answer halves the fleet's rate for a while
//! and empties the bucket ([`slow_down`]). Each statement is one `UPDATE`
//! of the provider's row: the row lock orders concurrent pollers, and every
//! expression reads the row version it updates, so no token is granted twice.

use std::time::Duration;

use const_format::formatcp;
use deadpool_postgres::GenericClient;

use crate::db::DbResult;

/// The provider row of SES.
pub const SES: &str = "ses";

/// The bucket holds at most this many seconds of sends (SQL text): a fleet
/// that was idle starts with a short burst, far below a second of the
/// account's rate.
pub const BURST_SECS: &str = "0.2";

/// While slowed down after a throttling answer, the fleet sends at this
/// share of its rate (SQL text).
pub const SLOW_SHARE: &str = "0.5";

/// The rate now, in sends a second (halved while slowed down).
const RATE_NOW: &str =
    formatcp!("(CASE WHEN slow_until > statement_timestamp() THEN rate * {SLOW_SHARE} ELSE rate END)");

/// The tokens the row holds at this statement's time: refilled since
/// `filled_at` (never backwards: a statement that waited on the row lock
/// started before the one it waited for), up to the burst.
const AVAILABLE: &str = formatcp!(
    "least(greatest(1, rate * {BURST_SECS}), \
     tokens + greatest(0, extract(epoch FROM statement_timestamp() - filled_at)::float8) * {RATE_NOW})"
);

/// The fleet's rate as last configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Configured {
    /// The provider's figure for the account.
    pub account_rate: f64,
    /// What the fleet may send: the lower of the account's rate and the cap.
    pub rate: f64,
}

/// Writes the account's rate (and the operator's cap) for `provider`: at a
/// poller's cold start and on each refresh. The bucket itself is kept.
pub async fn configure(
    client: &impl GenericClient,
    provider: &str,
    account_rate: f64,
    cap: Option<f64>,
) -> DbResult<Configured> {
    let row = client
        .query_one(
            "INSERT INTO send_rate (provider, account_rate, cap, rate, tokens) \
             VALUES ($1, $2::float8, $3::float8, least($2::float8, coalesce($3::float8, $2::float8)), 0) \
             ON CONFLICT (provider) DO UPDATE SET account_rate = EXCLUDED.account_rate, cap = EXCLUDED.cap, \
             rate = EXCLUDED.rate, refreshed_at = now() \
             RETURNING account_rate, rate",
            &[&provider, &account_rate, &cap],
        )
        .await?;
    Ok(Configured { account_rate: row.get(0), rate: row.get(1) })
}

/// What [`take`] granted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    /// Sends that may start now (0 to `want`).
    pub granted: u32,
    /// The fleet's rate now, in sends a second.
    pub rate: f64,
    /// When nothing was granted: how long until the next token.
    pub wait: Duration,
}

/// Takes up to `want` tokens from `provider`'s bucket. None: the provider
/// has no row (no poller configured it yet).
pub async fn take(client: &impl GenericClient, provider: &str, want: u32) -> DbResult<Option<Grant>> {
    const SQL: &str = formatcp!(
        "UPDATE send_rate SET \
           granted = least(floor({AVAILABLE}), $2::float8)::int, \
           tokens = {AVAILABLE} - least(floor({AVAILABLE}), $2::float8), \
           filled_at = greatest(filled_at, statement_timestamp()) \
         WHERE provider = $1 \
         RETURNING granted, {RATE_NOW}, tokens"
    );
    let row = client.query_opt(SQL, &[&provider, &f64::from(want)]).await?;
    Ok(row.map(|row| {
        let (granted, rate, tokens): (i32, f64, f64) = (row.get(0), row.get(1), row.get(2));
        let wait = if granted > 0 { Duration::ZERO } else { Duration::from_secs_f64(((1.0 - tokens) / rate).max(0.0)) };
        Grant { granted: granted.max(0) as u32, rate, wait }
    }))
}

/// After a throttling answer: the fleet sends at [`SLOW_SHARE`] of its rate
/// for `slow_for`, and the bucket owes half a second of sends (no more than
/// a second's: repeated answers do not stop the fleet for long).
pub async fn slow_down(client: &impl GenericClient, provider: &str, slow_for: Duration) -> DbResult<()> {
    client
        .execute(
            "UPDATE send_rate SET slow_until = statement_timestamp() + make_interval(secs => $2::float8), \
             tokens = greatest(-rate, least(tokens, 0) - rate * 0.5) WHERE provider = $1",
            &[&provider, &slow_for.as_secs_f64()],
        )
        .await?;
    Ok(())
}
