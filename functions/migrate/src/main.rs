//! Migration Lambda behind the `SchemaMigration` custom resource: an adapter
//! from the CloudFormation request to `shared::db::custom_resource::handle`,
//! which serves only its own stack's requests answered to CloudFormation
//! (`CUSTOM_RESOURCE_STACK_ID`, the region's response bucket), applies the
//! migrations as the schema owner (the migration secret) and answers
//! CloudFormation, success or failure.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::db::custom_resource::{self, CustomResourceRequest, Setup, Trust};

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    let trust = &Trust::from_env()?;
    run(service_fn(move |event: LambdaEvent<Value>| async move {
        let request: CustomResourceRequest = serde_json::from_value(event.payload)?;
        let answer = Box::pin(custom_resource::handle(trust, &request, Setup::from_env)).await?;
        let response = &answer.response;
        tracing::info!(status = ?response.status, reason = %response.reason, "answered CloudFormation");
        Ok::<_, Error>(serde_json::to_value(response)?)
    }))
    .await
}
