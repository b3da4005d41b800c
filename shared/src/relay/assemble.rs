//! The poller function's poller, from its settings: the mail provider
//! (`MAILER`), its pacing, the pool sized for the batches in flight, the
//! LISTEN wake-up. The Lambda binary only wires it to the runtime.

use std::sync::Arc;

use super::config::PollerConfig;
use super::poller::Poller;
use super::wake::Wake;
use crate::db::{DbConfig, DbPool};
use crate::fault::Faults;
use crate::notify::mailer::ses::{SesConfig, SesMailer};
use crate::notify::mailer::smtp::{SmtpConfig, SmtpMailer};
use crate::notify::mailer::{Mailer, Provider};
use crate::notify::pacing::pace::Pacer;
use crate::notify::pacing::send_rate;

/// Any error of the cold start, each naming the setting to fix.
pub type ColdStartError = Box<dyn std::error::Error + Send + Sync>;

/// Builds the poller a container keeps for all its invocations.
pub async fn poller_from_env() -> Result<Poller, ColdStartError> {
    let provider = Provider::from_env()?;
    let batches = PollerConfig::batches_in_flight_from_env()?;
    let db = DbConfig::from_env_with_pool_default(PollerConfig::min_pool_size(batches)).await?.with_custom_plans();
    let mut config = PollerConfig::from_env(db.pool_size)?;
    let wake = if config.listen { Some(Wake::new(db.connector()?)) } else { None };
    let pool = db.build_pool()?;
    let poller = match provider {
        Provider::Ses => {
            let ses = SesConfig::from_env()?;
            // Every send is paced by the fleet's rate: the account's, or the cap.
            let pace = Some((send_rate::SES, ses.max_send_rate));
            let mailer = SesMailer::from_env(ses).await;
            // Before the first booking's send: an identity SES will not send
            // from stops sending stack-wide, with SES's reason.
            mailer.check_identity().await;
            assemble(pool, mailer, config, pace)?
        }
        Provider::Smtp => {
            let smtp = SmtpConfig::from_env().await?;
            // No more sends at once than connections; paced only under a cap.
            config.concurrency = smtp.sends_in_flight(config.concurrency);
            let pace = smtp.max_send_rate.map(|cap| (send_rate::SMTP, Some(cap)));
            assemble(pool, SmtpMailer::new(smtp)?, config, pace)?
        }
    };
    Ok(match wake {
        Some(wake) => poller.with_wake(wake),
        None => poller,
    })
}

fn assemble<M: Mailer + 'static>(
    pool: DbPool,
    mailer: M,
    config: PollerConfig,
    pace: Option<(&'static str, Option<f64>)>,
) -> Result<Poller, ColdStartError> {
    config.check_send_fits(mailer.worst_case(), mailer.timeouts())?;
    let (concurrency, headroom) = (config.concurrency, config.send_rate_headroom);
    let mut poller = Poller::new(pool.clone(), Arc::new(mailer), Faults::from_env()?, config);
    if let Some((provider, cap)) = pace {
        poller = poller.with_pace(Pacer::new(pool, provider, concurrency, headroom), cap);
    }
    Ok(poller)
}
