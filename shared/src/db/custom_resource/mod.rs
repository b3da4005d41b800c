//! Migrations on deploy: the CloudFormation custom resource
//! `SchemaMigration` invokes the migration function on every deploy whose
//! code changed (the migrations are compiled in), so a stack update brings
//! its schema with it, with no bastion host to reach a database in a VPC.
//!
//! CloudFormation waits for an answer PUT to the request's pre-signed
//! `ResponseURL`. Every outcome is answered, failures included (a bad
//! setting, an unreachable database, a failing migration), so a failed
//! migration fails the deploy at once instead of leaving the stack waiting
//! for an hour. After the migrations, each function's login is made from
//! its generated secret ([`logins`]): no SQL is left to run
//! by hand. Delete answers SUCCESS without touching the database: the
//! schema, its data and the logins outlive the stack.
//!
//! The function runs as the schema owner inside the VPC, so it serves only
//! what CloudFormation sends for its own stack ([`Trust`]): a request of
//! another stack, or whose `ResponseURL` is not CloudFormation's response
//! bucket over HTTPS, is refused before anything runs or is sent. The
//! reason CloudFormation is told names the kind of failure, never its
//! detail (a host, an error text), which goes to the function's log.

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::config::settings::CUSTOM_RESOURCE_STACK_ID;
use crate::config::ConfigError;
use crate::db::logins::{self, LoginError, Logins};
use crate::db::role_limits::RoleLimits;
use crate::db::{self, DbConfig};

mod respond;

/// What a run needs: the migration role's settings, and the functions'
/// logins to make (none where they are made otherwise).
#[derive(Debug)]
pub struct Setup {
    pub db: DbConfig,
    pub logins: Option<Logins>,
}

impl Setup {
    /// The migration function's settings: the database (the migration
    /// role's secret) and `DATABASE_LOGIN_SECRET_ARNS`.
    pub async fn from_env() -> Result<Self, ConfigError> {
        Ok(Self { db: DbConfig::from_env_with_pool_default(1).await?, logins: Logins::from_env().await? })
    }
}

/// The resource's one physical id: stable, so an update never looks like
/// a replacement (which would send a Delete for the "old" one).
pub const PHYSICAL_ID: &str = "booking-outbox-schema";

/// Whom the function serves: CloudFormation, for one stack.
#[derive(Debug, Clone)]
pub struct Trust {
    stack_id: String,
    answers: Answers,
}

#[derive(Debug, Clone)]
enum Answers {
    /// CloudFormation's response bucket of this region, over HTTPS.
    CloudFormation { region: String },
    /// Tests only: a plain-HTTP server at this loopback `host:port`.
    #[cfg(feature = "dev")]
    Loopback { authority: String },
}

/// Why a request was not served (nothing ran, nothing was sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("custom-resource request refused: {0}")]
pub struct Refused(String);

impl Trust {
    /// `CUSTOM_RESOURCE_STACK_ID` (the template passes its own stack) and
    /// the function's `AWS_REGION`, checked at cold start.
    pub fn from_env() -> Result<Trust, ConfigError> {
        let name = CUSTOM_RESOURCE_STACK_ID.name;
        let stack_id = CUSTOM_RESOURCE_STACK_ID
            .value()
            .ok_or_else(|| ConfigError::new(name, "is not set", "set it to the stack's id (`!Ref AWS::StackId`)"))?;
        if !stack_id.starts_with("arn:") || !stack_id.contains(":cloudformation:") {
            return Err(ConfigError::new(name, format!("{stack_id:?} is not a stack ARN"), "use `!Ref AWS::StackId`"));
        }
        let region = crate::config::lambda_region()
            .ok_or_else(|| ConfigError::new("AWS_REGION", "is not set", "set it to the stack's region"))?;
        Ok(Trust { stack_id, answers: Answers::CloudFormation { region } })
    }

    /// CloudFormation in `region`, for `stack_id`.
    pub fn cloudformation(stack_id: &str, region: &str) -> Trust {
        Trust { stack_id: stack_id.to_string(), answers: Answers::CloudFormation { region: region.to_string() } }
    }

    /// Tests only (`dev` builds): answers go to plain HTTP at `authority`
    /// (`127.0.0.1:PORT`), in place of the pre-signed S3 URL.
    #[cfg(feature = "dev")]
    pub fn loopback_for_tests(stack_id: &str, authority: &str) -> Trust {
        Trust { stack_id: stack_id.to_string(), answers: Answers::Loopback { authority: authority.to_string() } }
    }

    /// Whether `req` is CloudFormation's, for this stack, answered where
    /// CloudFormation listens.
    pub fn check(&self, req: &CustomResourceRequest) -> Result<(), Refused> {
        if req.stack_id != self.stack_id {
            return Err(Refused(format!("the request is for stack {:?}, not this one", shorten(&req.stack_id))));
        }
        let uri: hyper::Uri =
            req.response_url.parse().map_err(|_| Refused("the ResponseURL is not a URL".to_string()))?;
        let authority = uri.authority().map(|a| a.as_str()).unwrap_or("");
        let (scheme, allowed) = match &self.answers {
            Answers::CloudFormation { region } => {
                ("https", response_hosts(region).contains(&authority.to_ascii_lowercase()))
            }
            #[cfg(feature = "dev")]
            Answers::Loopback { authority: expected } => ("http", authority == expected),
        };
        if uri.scheme_str() != Some(scheme) || !allowed || uri.path().len() < 2 {
            return Err(Refused(format!(
                "the ResponseURL {:?} is not CloudFormation's response bucket over {scheme}",
                shorten(&req.response_url)
            )));
        }
        Ok(())
    }
}

/// The hosts of CloudFormation's custom-resource response bucket in
/// `region` (the pre-signed URLs use each form), exactly: no port, no user.
fn response_hosts(region: &str) -> Vec<String> {
    let bucket = format!("cloudformation-custom-resource-response-{}", region.replace('-', ""));
    let domain = if region.starts_with("cn-") { "amazonaws.com.cn" } else { "amazonaws.com" };
    vec![
        format!("{bucket}.s3.{domain}"),
        format!("{bucket}.s3-{region}.{domain}"),
        format!("{bucket}.s3.{region}.{domain}"),
    ]
}

/// An untrusted value for a log line or a refusal: cut short.
fn shorten(value: &str) -> String {
    value.chars().take(120).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RequestType {
    Create,
    Update,
    Delete,
}

/// The fields of a custom-resource request this handler uses.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CustomResourceRequest {
    pub request_type: RequestType,
    #[serde(rename = "ResponseURL")]
    pub response_url: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    /// The resource's properties, each value a string as CloudFormation
    /// sends them: the roles' limits ([`RoleLimits::from_properties`]).
    #[serde(default)]
    pub resource_properties: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Success,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CustomResourceResponse {
    pub status: Status,
    pub reason: String,
    pub physical_resource_id: String,
    pub stack_id: String,
    pub request_id: String,
    pub logical_resource_id: String,
    /// `Applied`: how many migrations this run applied; `Latest`: the last
    /// of them (strings, as `Fn::GetAtt` reads them).
    pub data: serde_json::Value,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot answer CloudFormation at the ResponseURL: {0}")]
pub struct RespondError(String);

/// Why [`handle`] could not answer.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Respond(#[from] RespondError),
}

/// What went wrong, as CloudFormation is told it: the kind, never the
/// detail (which is logged).
#[derive(Debug)]
enum Failure {
    Settings(String),
    Database(String),
    Migration(String),
    Login(String),
}

impl Failure {
    fn reason(&self, request_id: &str) -> String {
        let kind = match self {
            Failure::Settings(_) => "the migration function's settings are invalid",
            Failure::Database(_) => "the database could not be reached",
            Failure::Migration(_) => "a migration failed",
            Failure::Login(_) => "a function's database login could not be made from its secret",
        };
        format!("schema migration failed: {kind}; the migration function's log has the cause (request {request_id})")
    }

    fn detail(&self) -> &str {
        match self {
            Failure::Settings(d) | Failure::Database(d) | Failure::Migration(d) | Failure::Login(d) => d,
        }
    }
}

/// An answer, and the cause of a failure for the log.
#[derive(Debug)]
pub struct Answer {
    pub response: CustomResourceResponse,
    /// What failed, in full (settings, connection or migration error);
    /// logged, never sent.
    pub cause: Option<String>,
}

/// Runs the request: migrations and the functions' logins for Create and
/// Update, nothing for Delete. `load` reads the settings (the migration
/// role's secret) only when they are needed, so a Delete never fails on
/// them.
pub async fn apply<F, Fut>(req: &CustomResourceRequest, load: F) -> Answer
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Setup, ConfigError>>,
{
    let outcome = match req.request_type {
        RequestType::Delete => Ok((String::from("the schema, its data and the logins are kept"), Vec::new())),
        RequestType::Create | RequestType::Update => migrate(req, load).await,
    };
    let (status, reason, applied, cause) = match outcome {
        Ok((reason, applied)) => (Status::Success, reason, applied, None),
        Err(failure) => {
            tracing::error!(cause = %failure.detail(), request_id = %req.request_id, "schema migration failed");
            (Status::Failed, failure.reason(&req.request_id), Vec::new(), Some(failure.detail().to_string()))
        }
    };
    let response = CustomResourceResponse {
        status,
        reason,
        physical_resource_id: PHYSICAL_ID.to_string(),
        stack_id: req.stack_id.clone(),
        request_id: req.request_id.clone(),
        logical_resource_id: req.logical_resource_id.clone(),
        data: serde_json::json!({
            "Applied": applied.len().to_string(),
            "Latest": applied.last().cloned().unwrap_or_default(),
        }),
    };
    Answer { response, cause }
}

/// Migrations named in a reply: CloudFormation refuses a response body over
/// 4,096 bytes (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref.html>),
/// and a new stack's Create applies every migration, so a long list names
/// its first and last only (the function's log has them all).
fn named(list: &[String]) -> String {
    match list {
        [] => String::new(),
        [one] => one.clone(),
        [first, second] => format!("{first}, {second}"),
        [first, .., last] => format!("{first} … {last}"),
    }
}

async fn migrate<F, Fut>(req: &CustomResourceRequest, load: F) -> Result<(String, Vec<String>), Failure>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Setup, ConfigError>>,
{
    let limits = RoleLimits::from_properties(&req.resource_properties).map_err(|e| Failure::Settings(e.to_string()))?;
    let setup = load().await.map_err(|e| Failure::Settings(e.to_string()))?;
    let pool = setup.db.build_pool().map_err(|e| Failure::Settings(e.to_string()))?;
    let applied = db::migrate_with(&pool, db::MigrationTarget::Latest, &limits).await.map_err(|e| match e {
        db::MigrateError::Db(e) => Failure::Database(e.to_string()),
        e => Failure::Migration(e.to_string()),
    })?;
    tracing::info!(?applied, "schema migrated");
    let mut reason = match applied.len() {
        0 => "the schema is up to date".to_string(),
        n => format!("applied {n} migration(s): {}", named(&applied)),
    };
    // A rollback (or an older deploy) meets a database ahead of its code:
    // nothing to apply, and the code runs on it (expand, then contract).
    let client = pool.get().await.map_err(|e| Failure::Database(e.to_string()))?;
    let newer = db::ahead_of_this_code(&client).await.map_err(|e| Failure::Database(e.to_string()))?;
    if !newer.is_empty() {
        reason = format!(
            "the database is ahead of this code ({}): nothing applied; this code runs on it (migrations expand, \
             then contract a release later)",
            named(&newer)
        );
    }
    drop(client);
    if let Some(logins) = &setup.logins {
        let client = pool.get().await.map_err(|e| Failure::Database(e.to_string()))?;
        for login in &logins.functions {
            let ensured = logins::apply(&client, logins, login, &setup.db).await.map_err(|e| match e {
                LoginError::Db(e) => Failure::Database(e.to_string()),
                e => Failure::Login(e.to_string()),
            })?;
            tracing::info!(role = login.role, ?ensured, "function login made from its secret");
        }
        // The logins made just now get their roles' timeouts too.
        db::role_limits::apply(&client, &limits).await.map_err(|e| Failure::Database(e.to_string()))?;
        reason.push_str(&format!("; {} function login(s) match their secrets", logins.functions.len()));
    }
    Ok((reason, applied))
}

/// Checks the request against `trust`, runs it and PUTs the answer to its
/// `ResponseURL`. A refused request runs nothing and is answered nowhere.
pub async fn handle<F, Fut>(trust: &Trust, req: &CustomResourceRequest, load: F) -> Result<Answer, HandleError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Setup, ConfigError>>,
{
    if let Err(refused) = trust.check(req) {
        tracing::error!(reason = %refused, request_id = %shorten(&req.request_id), "custom-resource request refused");
        return Err(refused.into());
    }
    let answer = apply(req, load).await;
    respond(&req.response_url, &answer.response).await?;
    Ok(answer)
}

/// PUTs `response` as JSON to `url`, CloudFormation's pre-signed
/// `ResponseURL` (no content type, which its signature does not cover).
pub async fn respond(url: &str, response: &CustomResourceResponse) -> Result<(), RespondError> {
    respond::put(url, serde_json::to_vec(response).expect("response serialises")).await.map_err(RespondError)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply stays far under CloudFormation's 4,096 bytes whatever the
    /// number of migrations a new stack's Create applies.
    #[test]
    fn a_reply_naming_any_number_of_migrations_fits_cloudformations_limit() {
        let applied: Vec<String> =
            (1..=500).map(|n| format!("V{n}__a_migration_with_a_long_descriptive_name")).collect();
        let reason = format!("applied {} migration(s): {}", applied.len(), named(&applied));
        let response = CustomResourceResponse {
            status: Status::Success,
            reason,
            physical_resource_id: PHYSICAL_ID.into(),
            stack_id: format!(
                "arn:aws:cloudformation:eu-west-1:123456789012:stack/{}/{}",
                "s".repeat(128),
                uuid::Uuid::nil()
            ),
            request_id: uuid::Uuid::nil().to_string(),
            logical_resource_id: "SchemaMigration".into(),
            data: serde_json::json!({"Applied": "500", "Latest": applied.last()}),
        };
        let body = serde_json::to_vec(&response).unwrap();
        assert!(body.len() < 1024, "{} bytes", body.len());
        assert_eq!(
            named(&applied[..2]),
            "V1__a_migration_with_a_long_descriptive_name, V2__a_migration_with_a_long_descriptive_name"
        );
    }
}
