//! Outbox poller Lambda (EventBridge schedule): an adapter from the
//! scheduled event to `shared::relay::Poller::invoke`, which keeps
//! polling until the invocation's deadline minus a safety margin, emits EMF
//! metrics and returns a health summary. The pool, the SES client and the
//! pacer (the fleet's shared send rate) are built once per container.

use std::sync::Arc;

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::db::DbConfig;
use shared::fault::Faults;
use shared::notify::mailer::ses::{SesConfig, SesMailer};
use shared::notify::mailer::Mailer;
use shared::notify::pace::Pacer;
use shared::notify::send_rate;
use shared::relay::{deadline_from, Poller, PollerConfig, Wake};
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let batches = PollerConfig::batches_in_flight_from_env()?;
    let db = DbConfig::from_env_with_pool_default(PollerConfig::min_pool_size(batches)).await?.with_custom_plans();
    let config = PollerConfig::from_env(db.pool_size)?;
    let ses = SesConfig::from_env()?;
    let cap = ses.max_send_rate;
    let mailer = Arc::new(SesMailer::from_env(ses).await);
    config.check_send_fits(mailer.worst_case())?;
    let listen = config.listen;
    let pool = db.build_pool()?;
    // Every send is paced by the fleet's rate: the account's, or the cap.
    let pacer = Pacer::new(pool.clone(), send_rate::SES, config.concurrency);
    let mut poller = Poller::new(pool, mailer, Faults::from_env()?, config).with_pace(pacer, cap);
    if listen {
        poller = poller.with_wake(Wake::new(db.connector()?));
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
