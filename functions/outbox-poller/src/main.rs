//! Outbox poller Lambda (EventBridge schedule): an adapter from the
//! scheduled event to `shared::relay::Poller::invoke`, which keeps
//! polling until the invocation's deadline minus a safety margin, emits EMF
//! metrics and returns a health summary. The poller (its pool, its mailer,
//! its pace) is built once per container from the settings
//! (`shared::relay::assemble`).

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::relay::{assemble, deadline_from};
use tracing::Instrument;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let poller = &assemble::poller_from_env().await?;
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
