//! The functions' role's own limits, so that none of its sessions can hold
//! back vacuum for long: `statement_timeout` and
//! `idle_in_transaction_session_timeout` for `booking_app`, each function's
//! role, and each login role in them, set by every migration run (`APP_STATEMENT_TIMEOUT_MS`,
//! `APP_IDLE_IN_TRANSACTION_TIMEOUT_MS`; in a stack, `SchemaMigration`'s
//! properties of the same parameters' names, [`PROPERTIES`]).
//!
//! A role's settings apply to the role that logs in, never to the members of
//! a group, so each login role is set by name; and only in this database
//! (`ALTER ROLE … IN DATABASE …`), as roles are shared by the whole server.
//! A login role added later gets them at the next migration run (every
//! deploy runs one).

use std::time::Duration;

use deadpool_postgres::GenericClient;

use super::DbResult;
use crate::config::settings::{self as S, Setting};
use crate::config::ConfigError;

/// The limits; a zero duration sets none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleLimits {
    pub statement_timeout: Duration,
    pub idle_in_transaction_timeout: Duration,
}

impl Default for RoleLimits {
    fn default() -> Self {
        Self {
            statement_timeout: Duration::from_millis(S::APP_STATEMENT_TIMEOUT_MS.default_value()),
            idle_in_transaction_timeout: Duration::from_millis(S::APP_IDLE_IN_TRANSACTION_TIMEOUT_MS.default_value()),
        }
    }
}

impl RoleLimits {
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            statement_timeout: Duration::from_millis(S::APP_STATEMENT_TIMEOUT_MS.parsed()?),
            idle_in_transaction_timeout: Duration::from_millis(S::APP_IDLE_IN_TRANSACTION_TIMEOUT_MS.parsed()?),
        })
    }

    /// The limits a `SchemaMigration` request carries in its properties
    /// ([`PROPERTIES`]; CloudFormation sends every value as a string); one
    /// it lacks is read as [`RoleLimits::from_env`] reads it. The template
    /// passes them as properties because a change of a parameter alone
    /// publishes no new function version (SAM hashes the template's text),
    /// while a changed property is an Update: so it reaches the database.
    pub fn from_properties(properties: &serde_json::Map<String, serde_json::Value>) -> Result<Self, ConfigError> {
        let read = |(property, setting): (&str, &Setting)| -> Result<Duration, ConfigError> {
            let millis = match properties.get(property) {
                None => setting.parsed()?,
                Some(serde_json::Value::String(text)) => setting.parse(text.trim())?,
                Some(serde_json::Value::Number(n)) => setting.parse(&n.to_string())?,
                Some(other) => {
                    return Err(ConfigError::new(
                        setting.name,
                        format!("is invalid as the property {property} ({other})"),
                        "give a number of milliseconds",
                    ))
                }
            };
            Ok(Duration::from_millis(millis))
        };
        let [statement, idle] = PROPERTIES;
        Ok(Self { statement_timeout: read(statement)?, idle_in_transaction_timeout: read(idle)? })
    }
}

/// `SchemaMigration`'s properties that carry the limits, each the setting it
/// sets (the template passes its parameters of the same names).
pub const PROPERTIES: [(&str, &Setting); 2] = [
    ("AppStatementTimeoutMs", &S::APP_STATEMENT_TIMEOUT_MS),
    ("AppIdleInTransactionTimeoutMs", &S::APP_IDLE_IN_TRANSACTION_TIMEOUT_MS),
];

/// The functions' roles (the operator function's too) and the legacy
/// application role ([`logins`](super::logins)).
fn app_roles() -> Vec<&'static str> {
    super::logins::FUNCTION_ROLES.iter().copied().chain([super::logins::LEGACY_ROLE]).collect()
}

/// Sets the limits on `booking_app`, each function's role, and every role
/// directly in them, in this database; returns the roles set.
pub async fn apply(client: &impl GenericClient, limits: &RoleLimits) -> DbResult<Vec<String>> {
    let settings = [
        ("statement_timeout", limits.statement_timeout),
        ("idle_in_transaction_session_timeout", limits.idle_in_transaction_timeout),
    ];
    let mut roles = Vec::new();
    for row in client
        .query(
            "SELECT r.rolname::text FROM pg_roles r \
              WHERE r.rolname = ANY($1) \
                 OR r.oid IN (SELECT m.member FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid \
                               WHERE g.rolname = ANY($1)) \
              ORDER BY 1",
            &[&app_roles()],
        )
        .await?
    {
        let role: String = row.get(0);
        for (name, value) in settings {
            // Identifiers and the value quoted by Postgres itself.
            let sql: String = client
                .query_one(
                    "SELECT CASE WHEN $3::bigint = 0 \
                                 THEN format('ALTER ROLE %I IN DATABASE %I RESET %s', $1::text, current_database(), $2::text) \
                                 ELSE format('ALTER ROLE %I IN DATABASE %I SET %s = %L', $1::text, current_database(), \
                                             $2::text, $3::bigint || 'ms') END",
                    &[&role, &name, &(value.as_millis() as i64)],
                )
                .await?
                .get(0);
            client.batch_execute(&sql).await?;
        }
        roles.push(role);
    }
    Ok(roles)
}
