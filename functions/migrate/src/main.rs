//! Migration Lambda behind the `SchemaMigration` custom resource: an adapter
//! from the CloudFormation request to `shared::relay::schema::handle`, which
//! applies the migrations as the schema owner (the migration secret) and
//! answers CloudFormation, success or failure.

use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use serde_json::Value;
use shared::db::DbConfig;
use shared::relay::schema::{self, CustomResourceRequest};

#[tokio::main]
async fn main() -> Result<(), Error> {
    shared::telemetry::init();
    run(service_fn(|event: LambdaEvent<Value>| async move {
        let request: CustomResourceRequest = serde_json::from_value(event.payload)?;
        let response = schema::handle(&request, || DbConfig::from_env_with_pool_default(1)).await?;
        tracing::info!(status = ?response.status, reason = %response.reason, "answered CloudFormation");
        Ok::<_, Error>(serde_json::to_value(&response)?)
    }))
    .await
}
