//! The fleet's send rate, as a poller reads it: the account's (SES
//! `GetAccount`) or the operator's cap, written to the shared row every
//! [`RATE_REFRESH`] for every poller's pacer.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::fault::RunError;
use crate::notify::mailer::Mailer;
use crate::notify::pacing::pace::{Pacer, ASSUMED_LATENCY};

/// How often a poller reads the account's rate again (at the start of a
/// run, once this long has passed since the last read).
pub const RATE_REFRESH: Duration = Duration::from_secs(60);

/// The rate used when the account's cannot be read and no cap is set: the
/// lowest SES grants (a sandbox account sends 1 a second).
pub const FALLBACK_RATE: f64 = 1.0;

/// Where the fleet's rate comes from: the account's, or the operator's cap
/// (`SES_MAX_SEND_RATE`) when lower; and when it was last read.
#[derive(Debug, Default)]
pub struct RateSource {
    cap: Option<f64>,
    read_at: Mutex<Option<Instant>>,
}

impl RateSource {
    pub fn capped(cap: Option<f64>) -> Self {
        Self { cap, read_at: Mutex::new(None) }
    }

    /// Reads the account's rate and writes the fleet's (with the cap) to
    /// the shared row, if it is due ([`RATE_REFRESH`]). Returns the fleet's
    /// rate when it was read. If the account's rate cannot be read, the
    /// row keeps what another poller wrote; a first read that fails writes
    /// the cap, or [`FALLBACK_RATE`].
    pub async fn refresh(&self, mailer: &dyn Mailer, pace: &Pacer) -> Result<Option<f64>, RunError> {
        if pace.provider().is_none() {
            return Ok(None);
        }
        let cap = self.cap;
        let read_at = *self.read_at.lock().expect("rate lock");
        if read_at.is_some_and(|at| at.elapsed() < RATE_REFRESH) {
            return Ok(None);
        }
        let account = match mailer.account_rate().await {
            Ok(Some(rate)) => rate,
            Ok(None) => cap.unwrap_or(FALLBACK_RATE),
            Err(e) if read_at.is_some() => {
                tracing::error!(error = %e, "could not read the account's send rate; keeping the last one \
                    (the poller's role needs ses:GetAccount)");
                *self.read_at.lock().expect("rate lock") = Some(Instant::now());
                return Ok(None);
            }
            Err(e) => {
                let rate = cap.unwrap_or(FALLBACK_RATE);
                tracing::error!(error = %e, rate, "could not read the account's send rate; sending at the cap \
                    or 1 a second (the poller's role needs ses:GetAccount)");
                rate
            }
        };
        let configured = pace.configure(account, cap).await?;
        *self.read_at.lock().expect("rate lock") = Some(Instant::now());
        let reach = pace.ceiling();
        let needed = Pacer::needed(configured.rate, ASSUMED_LATENCY);
        tracing::info!(
            account_rate = configured.account_rate,
            fleet_rate = configured.rate,
            cap,
            in_flight_needed = needed,
            in_flight_most = reach,
            "the fleet's send rate"
        );
        if needed > reach {
            tracing::warn!(
                needed,
                reach,
                "one poller cannot keep enough sends in flight to reach the fleet's rate at {} ms a send: \
                 raise POLLER_CONCURRENCY, or run more pollers",
                ASSUMED_LATENCY.as_millis()
            );
        }
        Ok(Some(configured.rate))
    }
}
