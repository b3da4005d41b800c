//! The functions' database logins, made from their secrets at every deploy,
//! so that no SQL is run by hand (migration V19 made the roles).
//!
//! The stack generates one secret per function (Secrets Manager's
//! `GenerateSecretString`: a username and a password). After the
//! migrations, the migration function reads each one and:
//!
//! - creates the login (`LOGIN`, a member of the function's role, nothing
//!   else), or, when it exists, sets its password to the secret's and its
//!   membership (a rotated secret takes effect at the next deploy);
//! - completes the secret with the database's host, port and name in the
//!   RDS format the functions (and RDS Proxy) read, once.
//!
//! The password reaches Postgres only as a SCRAM-SHA-256 verifier computed
//! here, so no statement log ever holds it. Whoever can write a function's
//! secret must not be able to point it at another role and have the next
//! deploy set that role's password: the username must be the stack's own
//! name for the function's login (`<role>_<stack id's first part>`, as the
//! template generates it), and a role of that name that exists is refused
//! unless it is a plain login: not a superuser nor able to create roles or
//! databases, a member of no role but the function's, with no members, and
//! owning nothing and granted nothing directly in any database. A login
//! made before V19 in the application's first role (`booking_app`, whose
//! rights are far wider than a function's) is moved out of it into its function's. On Delete
//! the logins are kept, like the schema.

use deadpool_postgres::GenericClient;
use serde_json::{Map, Value};

use super::{DbConfig, DbError};
use crate::config::settings as S;
use crate::config::ConfigError;

/// The role of each function (V19; the operator function's, V31), each
/// granted only what it runs.
pub const FUNCTION_ROLES: [&str; 5] =
    ["booking_api", "outbox_poller", "outbox_sweeper", "ses_events", "outbox_operator"];
/// The application's first role (V5), whose rights are far wider than any
/// function's: the role of the functions' logins made before V19.
pub const LEGACY_ROLE: &str = "booking_app";

/// A function's secret: the role its login joins, and the secret's ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginSecret {
    pub role: &'static str,
    pub arn: String,
}

/// The logins to make: the functions' secrets, and a client to read and
/// complete them.
#[derive(Debug, Clone)]
pub struct Logins {
    pub secrets: aws_sdk_secretsmanager::Client,
    pub functions: Vec<LoginSecret>,
    /// The stack's own part of each login's name ([`stack_tag`]).
    pub stack_tag: String,
}

/// The part of a stack's id its logins are named with: the first group of
/// the stack's UUID (`arn:…:stack/name/1a2b3c4d-…` is `1a2b3c4d`), as the
/// template's generated secrets spell `<role>_<tag>`.
pub fn stack_tag(stack_id: &str) -> Option<String> {
    let uuid = stack_id.split('/').nth(2)?;
    let tag = uuid.split('-').next()?.to_ascii_lowercase();
    (!tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric())).then_some(tag)
}

/// The only username a function's secret may name: `<role>_<tag>`.
pub fn login_name(role: &str, stack_tag: &str) -> String {
    format!("{role}_{stack_tag}")
}

impl Logins {
    /// `DATABASE_LOGIN_SECRET_ARNS` (`role=arn,…`), read at cold start; None
    /// when unset (a database whose logins are made otherwise).
    pub async fn from_env() -> Result<Option<Self>, ConfigError> {
        let Some(raw) = S::DATABASE_LOGIN_SECRET_ARNS.value() else { return Ok(None) };
        let functions = parse_secret_arns(&raw)?;
        let name = S::CUSTOM_RESOURCE_STACK_ID.name;
        let stack_tag = S::CUSTOM_RESOURCE_STACK_ID.value().as_deref().and_then(stack_tag).ok_or_else(|| {
            ConfigError::new(
                name,
                "names no stack",
                "set it to the stack's id (`!Ref AWS::StackId`): logins are named after it",
            )
        })?;
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
        Ok(Some(Self { secrets: aws_sdk_secretsmanager::Client::new(&sdk), functions, stack_tag }))
    }
}

/// Parses `role=arn,role=arn`: each role one of [`FUNCTION_ROLES`], once.
pub fn parse_secret_arns(raw: &str) -> Result<Vec<LoginSecret>, ConfigError> {
    let bad = |why: String| {
        ConfigError::new(
            "DATABASE_LOGIN_SECRET_ARNS",
            why,
            format!("list role=secret-arn pairs separated by commas; the roles are {}", FUNCTION_ROLES.join(", ")),
        )
    };
    let mut out: Vec<LoginSecret> = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (role, arn) = pair.split_once('=').ok_or_else(|| bad(format!("{pair:?} is not role=arn")))?;
        let role = FUNCTION_ROLES
            .into_iter()
            .find(|r| *r == role.trim())
            .ok_or_else(|| bad(format!("{:?} is not a function's role", role.trim())))?;
        if out.iter().any(|l| l.role == role) {
            return Err(bad(format!("{role} is named twice")));
        }
        let arn = arn.trim();
        if !arn.starts_with("arn:") {
            return Err(bad(format!("{role}'s secret {arn:?} is not an ARN")));
        }
        out.push(LoginSecret { role, arn: arn.to_string() });
    }
    if out.is_empty() {
        return Err(bad("names no secret".into()));
    }
    Ok(out)
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The secret cannot be read, or is not a username and password.
    #[error("{0}")]
    Secret(String),
    /// The secret names a login this function must not touch.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// What [`ensure`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ensured {
    Created,
    /// It existed: its password and membership now match.
    Updated,
}

fn valid_username(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

/// Creates `username` as a login in `role` with `password`, or sets the
/// password and membership of the login that exists. `username` must be the
/// stack's own login name for `role` ([`login_name`]), and an existing role
/// of that name a plain login of `role` (see the module documentation).
pub async fn ensure(
    client: &impl GenericClient,
    role: &str,
    username: &str,
    password: &str,
    stack_tag: &str,
) -> Result<Ensured, LoginError> {
    if !FUNCTION_ROLES.contains(&role) {
        return Err(LoginError::Refused(format!("{role:?} is not a function's role")));
    }
    let own = login_name(role, stack_tag);
    if username != own {
        return Err(LoginError::Refused(format!(
            "the secret of {role} names the login {username:?}: not a function's login (this stack's is {own})"
        )));
    }
    if !valid_username(username) {
        return Err(LoginError::Refused(format!(
            "the username {username:?} must be 1 to 63 lower-case letters, digits and underscores"
        )));
    }
    if password.chars().count() < 16 {
        return Err(LoginError::Secret(format!("the password of {username} is shorter than 16 characters")));
    }
    // An existing role of that name must be a plain login of `role`: no
    // attribute beyond LOGIN, no other membership, no members, and nothing
    // owned or granted to it directly in any database (pg_shdepend).
    let existing = client
        .query_opt(
            "SELECT r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls \
                    OR r.rolname = current_user OR r.rolname = ANY($2) \
                    OR EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid \
                                WHERE m.member = r.oid AND g.rolname NOT IN ($3, $4)) \
                    OR EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.roleid = r.oid) \
                    OR EXISTS (SELECT 1 FROM pg_shdepend d \
                                WHERE d.refclassid = 'pg_authid'::regclass AND d.refobjid = r.oid) \
               FROM pg_roles r WHERE r.rolname = $1",
            &[
                &username,
                &FUNCTION_ROLES.iter().chain([&LEGACY_ROLE]).copied().collect::<Vec<_>>(),
                &role,
                &LEGACY_ROLE,
            ],
        )
        .await
        .map_err(DbError::from)?;
    if existing.as_ref().is_some_and(|r| r.get::<_, bool>(0)) {
        return Err(LoginError::Refused(format!(
            "{username} exists and is not a plain login of {role} (a privileged or group role, a member of \
             another role, an owner of objects or a holder of grants, or the migration role itself): \
             not a function's login"
        )));
    }
    let verifier = postgres_protocol::password::scram_sha_256(password.as_bytes());
    if existing.is_some() {
        quoted(
            client,
            "SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', $1::text, $2::text)",
            &[&username, &verifier],
        )
        .await?;
        quoted(client, "SELECT format('GRANT %I TO %I', $1::text, $2::text)", &[&role, &username]).await?;
        // Before V19 each function's login was made in the application's
        // first role (V5), whose rights are far wider than any function's: migrated.
        if member_of(client, username, LEGACY_ROLE).await? {
            quoted(client, "SELECT format('REVOKE %I FROM %I', $1::text, $2::text)", &[&LEGACY_ROLE, &username])
                .await?;
            tracing::warn!(
                login = username,
                from = LEGACY_ROLE,
                to = role,
                "a login made before V19 moved to its function's role"
            );
        }
    } else {
        let create = "SELECT format('CREATE ROLE %I WITH LOGIN PASSWORD %L IN ROLE %I', $1::text, $2::text, $3::text)";
        quoted(client, create, &[&username, &verifier, &role]).await?;
    }
    Ok(if existing.is_some() { Ensured::Updated } else { Ensured::Created })
}

/// Whether `login` is a direct member of `group`.
async fn member_of(client: &impl GenericClient, login: &str, group: &str) -> Result<bool, DbError> {
    let sql = "SELECT EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles l ON l.oid = m.member \
                JOIN pg_roles g ON g.oid = m.roleid WHERE l.rolname = $1 AND g.rolname = $2)";
    Ok(client.query_one(sql, &[&login, &group]).await?.get(0))
}

/// Runs the statement `format` makes of `params`: identifiers and literals
/// quoted by Postgres itself (`%I`, `%L`).
async fn quoted(
    client: &impl GenericClient,
    format: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<(), DbError> {
    let sql: String = client.query_one(format, params).await?.get(0);
    client.batch_execute(&sql).await?;
    Ok(())
}

/// Makes the login of one function's secret and completes the secret with
/// where the database is (`db`: the migration role's settings).
pub async fn apply(
    client: &impl GenericClient,
    logins: &Logins,
    login: &LoginSecret,
    db: &DbConfig,
) -> Result<Ensured, LoginError> {
    let secrets = &logins.secrets;
    use aws_sdk_secretsmanager::error::DisplayErrorContext;
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        LoginError::Secret(format!("{}: cannot {what} {}'s secret: {e}", login.arn, login.role))
    };
    let read = secrets
        .get_secret_value()
        .secret_id(&login.arn)
        .send()
        .await
        .map_err(|e| failed("read", &DisplayErrorContext(&e)))?;
    let mut fields: Map<String, Value> =
        read.secret_string().and_then(|s| serde_json::from_str(s).ok()).ok_or_else(|| {
            LoginError::Secret(format!("{}'s secret is not a JSON object (values are not shown)", login.role))
        })?;
    let text = |name: &str| fields.get(name).and_then(Value::as_str).map(str::to_string);
    let (Some(username), Some(password)) = (text("username"), text("password")) else {
        return Err(LoginError::Secret(format!("{}'s secret has no username and password", login.role)));
    };
    let ensured = ensure(client, login.role, &username, &password, &logins.stack_tag).await?;
    let host = match db.pg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => return Err(LoginError::Secret("the migration role's settings name no TCP host".into())),
    };
    let port = db.pg.get_ports().first().copied().unwrap_or(5432);
    let dbname = db.pg.get_dbname().unwrap_or("postgres").to_string();
    let wanted = [
        ("engine", Value::from("postgres")),
        ("host", Value::from(host)),
        ("port", Value::from(port)),
        ("dbname", Value::from(dbname)),
    ];
    if wanted.iter().any(|(k, v)| fields.get(*k) != Some(v)) {
        fields.extend(wanted.into_iter().map(|(k, v)| (k.to_string(), v)));
        let completed = Value::Object(fields).to_string();
        secrets
            .put_secret_value()
            .secret_id(&login.arn)
            .secret_string(completed)
            .send()
            .await
            .map_err(|e| failed("complete", &DisplayErrorContext(&e)))?;
    }
    Ok(ensured)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_arns_name_each_function_role_once() {
        let arn = "arn:aws:secretsmanager:eu-west-1:1:secret:x";
        let parsed = parse_secret_arns(&format!("booking_api={arn}, ses_events={arn}")).unwrap();
        assert_eq!(parsed.iter().map(|l| l.role).collect::<Vec<_>>(), ["booking_api", "ses_events"]);
        for bad in ["", "booking_api", "postgres=arn:x", "booking_api=arn:x,booking_api=arn:y", "booking_api=x"] {
            let err = parse_secret_arns(bad).unwrap_err().to_string();
            assert!(err.contains("DATABASE_LOGIN_SECRET_ARNS"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_login_is_named_after_its_role_and_the_stack() {
        let stack = "arn:aws:cloudformation:eu-west-1:123456789012:stack/outbox/1A2B3C4D-5e6f-7a8b-9c0d-1e2f3a4b5c6d";
        assert_eq!(stack_tag(stack).as_deref(), Some("1a2b3c4d"));
        assert_eq!(login_name("outbox_poller", "1a2b3c4d"), "outbox_poller_1a2b3c4d");
        for bad in ["", "arn:aws:cloudformation:eu-west-1:1:stack/outbox", "arn:x:stack/outbox/-x"] {
            assert_eq!(stack_tag(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_username_is_a_plain_lower_case_identifier() {
        assert!(valid_username("booking_api_1a2b3c4d"));
        for bad in ["", "Booking", "a-b", "a\"b", "1abc", &"a".repeat(64)] {
            assert!(!valid_username(bad), "{bad}");
        }
    }
}
