//! Outbox sweeper Lambda (EventBridge schedule): an adapter to
//! `shared::relay::sweeper::run`, which resets rows stuck in PROCESSING (or
//! dead-letters them when out of attempts), applies retention and emits EMF
//! metrics. Configuration is checked at cold start: the stuck timeout must
//! exceed the poller's timeout.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::db::DbConfig;
use shared::relay::{sweeper, SweeperConfig};
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let config = SweeperConfig::from_env()?;
    let pool = DbConfig::from_env_with_pool_default(2).await?.build_pool()?;
    let (pool, config) = (&pool, &config);
    run(service_fn(move |event: LambdaEvent<Value>| {
        let span = tracing::info_span!("invocation", request_id = %event.context.request_id);
        async move {
            let report = sweeper::run(pool, config).await?;
            tracing::info!(reset = report.reset, dead_lettered = report.dead_lettered, "sweep finished");
            Ok::<_, Error>(serde_json::to_value(report)?)
        }
        .instrument(span)
    }))
    .await
}
