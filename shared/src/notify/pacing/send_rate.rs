//! The `send_rate` table and its bucket, every statement: one token bucket
//! per provider that every live poller takes its sends from, so the fleet's
//! total rate is the account's however many containers run (migrations V10
//! and V15).
//!
//! The bucket is a schedule with no burst (GCRA, V24): every send of the
//! fleet gets a start time of its own ([`reserve`]), each `1 / rate` after
//! the one before whichever poller holds it, so no one-second window ever
//! holds more than the rate, whatever shape the provider's limiter has. A
//! throttling answer lowers a factor on the rate a little, and it grows
//! back by a step a second ([`throttled`]). The row holds what changes
//! rarely (the account's rate, the cap, the rate, the factor); the
//! schedule's state is the time from which the next send may start, in a
//! sequence per provider (`send_rate_<provider>_next`), which `setval`
//! overwrites in place: a reservation writes no row version, so a snapshot
//! held for hours (which keeps every version of an updated row) cannot slow
//! it down. The SQL functions `send_rate_reserve` and `send_rate_throttled`
//! (V24) read and set it under an advisory lock, so two pollers never share
//! a start time.

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
    // Two pollers configuring the first row at once: the second's insert
    // waits for the first's, then changes nothing, and its statement's
    // snapshot (from before that commit) sees no row. The next statement
    // does.
    for _ in 0..2 {
        if let Some(row) = configure_once(client, provider, account_rate, cap).await? {
            return Ok(Configured { account_rate: row.get(0), rate: row.get(1) });
        }
    }
    Err(crate::db::DbError::Corrupt(format!("no send_rate row for {provider} after writing it twice")))
}

async fn configure_once(
    client: &impl GenericClient,
    provider: &str,
    account_rate: f64,
    cap: Option<f64>,
) -> DbResult<Option<tokio_postgres::Row>> {
    Ok(client
        .query_opt(
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
        .await?)
}

/// The times [`reserve`] gave a poller's sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reserved {
    /// Sends that have a start time (0 to `want`).
    pub granted: u32,
    /// When the first may start, from the database's now.
    pub first_in: Duration,
    /// Between one start and the next: 1 / the rate kept.
    pub gap: Duration,
    /// The rate the fleet keeps now (the row's rate × headroom × throttle
    /// factor), in sends a second.
    pub rate: f64,
    /// When none was reserved: how long until one can be.
    pub wait: Duration,
}

/// How the fleet's schedule is kept: the share of the rate it uses, and
/// how it answers a throttling answer (see `V24__smooth_send_rate.sql`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// The share of the rate the schedule keeps (`SEND_RATE_HEADROOM`).
    pub headroom: f64,
    /// A throttling answer multiplies the factor by this.
    pub decrease: f64,
    /// The factor never goes below this.
    pub floor: f64,
    /// It grows back by this much a second, up to 1.
    pub recovery_per_sec: f64,
    /// Several throttling answers within this long lower it once.
    pub once_per: Duration,
}

/// Reserves up to `want` start times of `provider`'s schedule: the first
/// `lead` from now at the earliest, none later than `lead + horizon` from
/// now, each `1 / rate` after the one before, whichever poller holds it.
/// None: the provider has no row (no poller configured it yet).
pub async fn reserve(
    client: &impl GenericClient,
    provider: &str,
    want: u32,
    lead: Duration,
    horizon: Duration,
    shape: &Shape,
) -> DbResult<Option<Reserved>> {
    let want = i32::try_from(want).unwrap_or(i32::MAX);
    let sql = "SELECT granted, first_in, gap, rate, wait_secs FROM send_rate_reserve($1, $2, $3, $4, $5, $6)";
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
        [&provider, &want, &lead.as_secs_f64(), &horizon.as_secs_f64(), &shape.headroom, &shape.recovery_per_sec];
    let row = client.query_opt(&client.prepare_cached(sql).await?, &params).await?;
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    Ok(row.map(|row| {
        let (granted, first_in, gap, rate, wait): (i32, f64, f64, f64, f64) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        Reserved { granted: granted.max(0) as u32, first_in: secs(first_in), gap: secs(gap), rate, wait: secs(wait) }
    }))
}

/// After a throttling answer: the fleet's throttle factor is lowered (at
/// most once per `shape.once_per`). Returns the factor now.
pub async fn throttled(client: &impl GenericClient, provider: &str, shape: &Shape) -> DbResult<f64> {
    let row = client
        .query_one(
            "SELECT send_rate_throttled($1, $2::float8, $3::float8, $4::float8, $5::float8)",
            &[&provider, &shape.decrease, &shape.floor, &shape.recovery_per_sec, &shape.once_per.as_secs_f64()],
        )
        .await?;
    Ok(row.get::<_, Option<f64>>(0).unwrap_or(1.0))
}

/// A provider's rate as the operator console shows it.
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct Standing {
    pub provider: String,
    /// The provider's figure for the account (SES's `MaxSendRate`).
    pub account_rate: f64,
    /// The operator's cap, if any.
    pub cap: Option<f64>,
    /// What the fleet may send: the lower of the two.
    pub rate: f64,
    /// The factor throttling answers lowered it by (1: none lately).
    pub factor: f64,
    pub refreshed_at: chrono::DateTime<chrono::Utc>,
}

/// Every provider's rate, as last configured.
pub async fn standing(client: &impl GenericClient) -> DbResult<Vec<Standing>> {
    let rows = client
        .query("SELECT provider, account_rate, cap, rate, factor, refreshed_at FROM send_rate ORDER BY provider", &[])
        .await?;
    Ok(rows
        .iter()
        .map(|r| Standing {
            provider: r.get(0),
            account_rate: r.get(1),
            cap: r.get(2),
            rate: r.get(3),
            factor: r.get(4),
            refreshed_at: r.get(5),
        })
        .collect())
}
