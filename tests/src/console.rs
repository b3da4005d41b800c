//! The operator console as the deployed function runs it (`AUTH_MODE=jwt`,
//! the template's defaults), and an operator's claims as API Gateway's JWT
//! authorizer passes them: what the suite and the console bench share.

use serde_json::{json, Value};
use shared::console::config::{AuthMode, ConsoleConfig};
use shared::console::Console;
use shared::relay::SweeperConfig;

pub fn console(pool: deadpool_postgres::Pool) -> Console {
    let config = ConsoleConfig {
        auth_mode: AuthMode::Jwt,
        operators_group: "operators".into(),
        sign_in: None,
        sweeper: SweeperConfig::from_env().expect("the defaults"),
    };
    Console::new(pool, config)
}

/// An operator's ID token's claims (`cognito:groups` as API Gateway renders
/// an array claim).
pub fn operator() -> Value {
    json!({"sub": "op-1", "email": "oncall@example.com", "email_verified": "true", "token_use": "id",
           "cognito:groups": "[operators]"})
}
