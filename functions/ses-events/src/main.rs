//! SES feedback Lambda (an EventBridge rule on the configuration set's
//! events): an adapter to `shared::notify::evidence::intake::handle`, which records
//! each event against its send's claim, confirms ambiguous sends and
//! suppresses bouncing or complaining addresses. The pool is built once per
//! container. Only events from SES in the stack's own account
//! (`SES_EVENTS_ACCOUNT`) and region, of the stack's configuration set
//! (`SES_CONFIGURATION_SET`), are read; a foreign or malformed event
//! is acknowledged with a log line. Only a database error fails the
//! invocation (EventBridge retries, then its DLQ).

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::db::DbConfig;
use shared::notify::evidence::intake;
use shared::notify::evidence::ses_event;
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    // Only this account's SES, in this region, for this configuration set, is trusted.
    let origin = &ses_event::Origin::from_env()?;
    let pool = DbConfig::from_env_with_pool_default(2).await?.build_pool()?;
    let pool = &pool;
    run(service_fn(move |event: LambdaEvent<Value>| {
        let span = tracing::info_span!("invocation", request_id = %event.context.request_id);
        async move {
            let handled = intake::handle(pool, origin, &event.payload).await?;
            Ok::<_, Error>(serde_json::to_value(handled)?)
        }
        .instrument(span)
    }))
    .await
}
