//! The `send_rate` table and its bucket, every statement: one token bucket
//! per provider that every live poller takes its sends from, so the fleet's
//! total rate is the account's however many containers run (migrations V10
//! and V15).
//!
//! The bucket refills at `rate` sends a second, up to a fifth of a second of
//! sends; a poller takes a few tokens at a time ([`take`]) and starts one
//! send per token. A throttling answer halves the fleet's rate for a while
//! and puts the bucket in debt ([`slow_down`]). The row holds what changes
//! rarely (the account's rate, the cap, the rate, `slow_until`); the
//! bucket's state is the time from which the next send may start, in a
//! sequence per provider (`send_rate_<provider>_next`), which `setval`
//! overwrites in place: a take writes no row version, so a snapshot held
//! for hours (which keeps every version of an updated row) cannot slow it
//! down. The SQL functions `send_rate_take` and `send_rate_slow_down`
//! (V15) read and set it under an advisory lock, so concurrent pollers
//! never share a token.

use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::db::DbResult;

/// The provider row of SES.
pub const SES: &str = "ses";

/// The provider row of the SMTP mailer (paced only with `SMTP_MAX_SEND_RATE`).
pub const SMTP: &str = "smtp";

/// The fleet's rate as last configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Configured {
    /// The provider's figure for the account.
    pub account_rate: f64,
    /// What the fleet may send: the lower of the account's rate and the cap.
    pub rate: f64,
}

/// Writes the account's rate (and the operator's cap) for `provider`: at a
/// poller's cold start and on each refresh. The bucket itself is kept, and
/// an unchanged rate writes nothing (`refreshed_at` is when it last
/// changed).
pub async fn configure(
    client: &impl GenericClient,
    provider: &str,
    account_rate: f64,
    cap: Option<f64>,
) -> DbResult<Configured> {
    let row = client
        .query_one(
            "WITH changed AS ( \
                 INSERT INTO send_rate (provider, account_rate, cap, rate) \
                 VALUES ($1, $2::float8, $3::float8, least($2::float8, coalesce($3::float8, $2::float8))) \
                 ON CONFLICT (provider) DO UPDATE SET account_rate = EXCLUDED.account_rate, cap = EXCLUDED.cap, \
                 rate = EXCLUDED.rate, refreshed_at = now() \
                 WHERE (send_rate.account_rate, send_rate.cap) IS DISTINCT FROM (EXCLUDED.account_rate, EXCLUDED.cap) \
                 RETURNING account_rate, rate) \
             SELECT account_rate, rate FROM changed \
             UNION ALL SELECT account_rate, rate FROM send_rate WHERE provider = $1 AND NOT EXISTS (SELECT 1 FROM changed)",
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
    let want = i32::try_from(want).unwrap_or(i32::MAX);
    let sql = "SELECT granted, rate, wait_secs FROM send_rate_take($1, $2)";
    let row = client.query_opt(&client.prepare_cached(sql).await?, &[&provider, &want]).await?;
    Ok(row.map(|row| {
        let (granted, rate, wait): (i32, f64, f64) = (row.get(0), row.get(1), row.get(2));
        Grant { granted: granted.max(0) as u32, rate, wait: Duration::from_secs_f64(wait.max(0.0)) }
    }))
}

/// After a throttling answer: the fleet sends at half its rate for
/// `slow_for`, and its next send waits half a second more (never more than
/// a second from now: repeated answers do not stop the fleet for long).
pub async fn slow_down(client: &impl GenericClient, provider: &str, slow_for: Duration) -> DbResult<()> {
    client.execute("SELECT send_rate_slow_down($1, $2::float8)", &[&provider, &slow_for.as_secs_f64()]).await?;
    Ok(())
}
