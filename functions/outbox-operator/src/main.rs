//! Operator Lambda (invoked by hand, never by a schedule): runs one of
//! `outboxctl`'s commands inside the stack's network, where the database
//! is, logged in as the stack's operator login (role `outbox_operator`,
//! V31). An adapter to `outboxctl::invoke`:
//!
//! ```sh
//! aws lambda invoke --function-name <OperatorFunctionName> \
//!   --cli-binary-format raw-in-base64-out --payload '{"args": ["status"]}' /dev/stdout
//! ```
//!
//! answers `{"output": [lines]}` (`--json`: the command's JSON). Wrong
//! arguments or a failed command fail the invocation with one line;
//! `migrate` is refused (every deploy migrates, as the schema owner).

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde::Deserialize;
use shared::db::DbConfig;
use tracing::Instrument;

/// `{"args": ["dead", "list", "--limit", "10"]}`: what follows `outboxctl`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Invocation {
    args: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let pool = DbConfig::from_env_with_pool_default(1).await?.build_pool()?;
    let pool = &pool;
    run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let request_id = event.context.request_id.clone();
        let span = tracing::info_span!("invocation", request_id = %request_id);
        async move {
            let invocation: Invocation = serde_json::from_value(event.payload)
                .map_err(|e| format!(r#"the event must be {{"args": ["status"]}}: the words after outboxctl ({e})"#))?;
            tracing::info!(command = ?invocation.args.first(), "operator command");
            let who = format!("operator function, request {request_id}");
            let answer = outboxctl::invoke(&invocation.args, pool, &who).await?;
            Ok::<_, Error>(serde_json::to_value(answer)?)
        }
        .instrument(span)
    }))
    .await
}
