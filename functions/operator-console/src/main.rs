//! Operator console Lambda: an adapter from API Gateway HTTP API events to
//! `shared::console::Console`. Configuration is read and the pool built
//! once per container (cold start); a configuration error fails the cold
//! start with a message naming the variable to fix.

use lambda_http::{run, service_fn, Request};
use shared::console::config::ConsoleConfig;
use shared::console::Console;
use shared::db::DbConfig;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    shared::telemetry::init();
    let config = ConsoleConfig::from_env()?;
    let pool = DbConfig::from_env().await?.build_pool()?;
    let console = Console::new(pool, config);
    let console = &console;
    run(service_fn(move |req: Request| async move { Ok::<_, std::convert::Infallible>(console.handle(req).await) }))
        .await
}
