//! Outbox poller Lambda (EventBridge schedule): an adapter from the
//! scheduled event to `shared::relay::Poller::invoke`, which keeps
//! polling until the invocation's deadline minus a safety margin, emits EMF
//! metrics and returns a health summary. The pool, the mailer (SES v2 or
//! SMTP, `MAILER`) and the pacer (the fleet's shared send rate) are built
//! once per container.

use std::sync::Arc;

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::db::{DbConfig, DbPool as Pool};
use shared::fault::Faults;
use shared::notify::mailer::ses::{SesConfig, SesMailer};
use shared::notify::mailer::smtp::{SmtpConfig, SmtpMailer};
use shared::notify::mailer::{Mailer, Provider};
use shared::notify::pace::Pacer;
use shared::notify::send_rate;
use shared::relay::{deadline_from, Poller, PollerConfig, Wake};
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let provider = Provider::from_env()?;
    let batches = PollerConfig::batches_in_flight_from_env()?;
    let db = DbConfig::from_env_with_pool_default(PollerConfig::min_pool_size(batches)).await?.with_custom_plans();
    let mut config = PollerConfig::from_env(db.pool_size)?;
    let wake = if config.listen { Some(Wake::new(db.connector()?)) } else { None };
    let pool = db.build_pool()?;
    match provider {
        Provider::Ses => {
            let ses = SesConfig::from_env()?;
            // Every send is paced by the fleet's rate: the account's, or the cap.
            let pace = Some((send_rate::SES, ses.max_send_rate));
            serve(pool, SesMailer::from_env(ses).await, config, pace, wake).await
        }
        Provider::Smtp => {
            let smtp = SmtpConfig::from_env().await?;
            // No more sends at once than connections; paced only under a cap.
            config.concurrency = smtp.sends_in_flight(config.concurrency);
            let pace = smtp.max_send_rate.map(|cap| (send_rate::SMTP, Some(cap)));
            serve(pool, SmtpMailer::new(smtp)?, config, pace, wake).await
        }
    }
}

async fn serve<M: Mailer + 'static>(
    pool: Pool,
    mailer: M,
    config: PollerConfig,
    pace: Option<(&'static str, Option<f64>)>,
    wake: Option<Wake>,
) -> Result<(), Error> {
    config.check_send_fits(mailer.worst_case(), mailer.timeouts())?;
    let (concurrency, headroom) = (config.concurrency, config.send_rate_headroom);
    let mut poller = Poller::new(pool.clone(), Arc::new(mailer), Faults::from_env()?, config);
    if let Some((provider, cap)) = pace {
        poller = poller.with_pace(Pacer::new(pool, provider, concurrency, headroom), cap);
    }
    if let Some(wake) = wake {
        poller = poller.with_wake(wake);
    }
    let poller = &poller;
    run(service_fn(move |event: LambdaEvent<Value>| {
        let span = tracing::info_span!("invocation", request_id = %event.context.request_id);
        async move {
            let health = poller.invoke(deadline_from(event.context.deadline())).await?;
            tracing::info!(summary = ?health.summary, "poller run finished");
            Ok::<_, Error>(serde_json::to_value(health)?)
        }
        .instrument(span)
    }))
    .await
}
