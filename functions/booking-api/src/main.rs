//! Booking API Lambda: an adapter from API Gateway HTTP API events to
//! `shared::api::Api`. Configuration is read and the pool built once per
//! container (cold start), then reused by every invocation. A configuration
//! error fails the cold start with a message naming the variable to fix.

use lambda_http::{run, service_fn, Request};
use shared::api::config::ApiConfig;
use shared::api::Api;
use shared::db::DbConfig;
use shared::fault::Faults;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::telemetry::init();
    let pool = DbConfig::from_env().await?.build_pool()?;
    let api = Api::new(pool, Faults::from_env()?, ApiConfig::from_env()?);
    let api = &api;
    run(service_fn(move |req: Request| async move { Ok::<_, std::convert::Infallible>(api.handle(req).await) })).await
}
