//! Migrations on deploy: the CloudFormation custom resource
//! `SchemaMigration` invokes the migration function on every deploy whose
//! code changed (the migrations are compiled in), so a stack update brings
//! its schema with it, with no bastion host to reach a database in a VPC.
//!
//! CloudFormation waits for an answer PUT to the request's pre-signed
//! `ResponseURL`. Every outcome is answered, failures included (a bad
//! setting, an unreachable database, a failing migration), so a failed
//! migration fails the deploy at once instead of leaving the stack waiting
//! for an hour. Delete answers SUCCESS without touching the database: the
//! schema and its data outlive the stack.

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::db::{self, DbConfig};

/// The resource's one physical id: stable, so an update never looks like
/// a replacement (which would send a Delete for the "old" one).
pub const PHYSICAL_ID: &str = "booking-outbox-schema";

/// CloudFormation reads at most 4 KiB of response; keep the reason short.
const MAX_REASON_CHARS: usize = 1000;

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
    /// `Applied`: the migrations this run applied.
    pub data: serde_json::Value,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot answer CloudFormation at the ResponseURL: {0}")]
pub struct RespondError(String);

/// Runs the request: migrations for Create and Update, nothing for Delete.
/// `load_db` reads the settings (the migration role's secret) only when
/// they are needed, so a Delete never fails on them.
pub async fn apply<F, Fut>(req: &CustomResourceRequest, load_db: F) -> CustomResourceResponse
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<DbConfig, ConfigError>>,
{
    let outcome = match req.request_type {
        RequestType::Delete => Ok((String::from("the schema and its data are kept"), Vec::new())),
        RequestType::Create | RequestType::Update => migrate(load_db).await,
    };
    let (status, reason, applied) = match outcome {
        Ok((reason, applied)) => (Status::Success, reason, applied),
        Err(reason) => {
            tracing::error!(%reason, "schema migration failed");
            (Status::Failed, reason.chars().take(MAX_REASON_CHARS).collect(), Vec::new())
        }
    };
    CustomResourceResponse {
        status,
        reason,
        physical_resource_id: PHYSICAL_ID.to_string(),
        stack_id: req.stack_id.clone(),
        request_id: req.request_id.clone(),
        logical_resource_id: req.logical_resource_id.clone(),
        data: serde_json::json!({ "Applied": applied }),
    }
}

async fn migrate<F, Fut>(load_db: F) -> Result<(String, Vec<String>), String>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<DbConfig, ConfigError>>,
{
    let pool = load_db().await.and_then(|c| c.build_pool()).map_err(|e| e.to_string())?;
    let applied = db::migrate(&pool).await.map_err(|e| e.to_string())?;
    tracing::info!(?applied, "schema migrated");
    let reason = match applied.len() {
        0 => "the schema is up to date".to_string(),
        n => format!("applied {n} migration(s): {}", applied.join(", ")),
    };
    Ok((reason, applied))
}

/// Runs the request and PUTs the answer to its `ResponseURL`.
pub async fn handle<F, Fut>(req: &CustomResourceRequest, load_db: F) -> Result<CustomResourceResponse, RespondError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<DbConfig, ConfigError>>,
{
    let response = apply(req, load_db).await;
    respond(&req.response_url, &response).await?;
    Ok(response)
}

/// PUTs `response` as JSON to `url` (a pre-signed S3 URL: no content type,
/// which its signature does not cover).
pub async fn respond(url: &str, response: &CustomResourceResponse) -> Result<(), RespondError> {
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let err = |e: &dyn std::fmt::Display| RespondError(e.to_string());
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let body = serde_json::to_vec(response).expect("response serialises");
    let request = hyper::Request::put(url)
        .header(hyper::header::CONTENT_LENGTH, body.len())
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| err(&e))?;
    let answer = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .map_err(|_| RespondError("no answer within 30 s".into()))?
        .map_err(|e| err(&e))?;
    if !answer.status().is_success() {
        return Err(RespondError(format!("HTTP {}", answer.status())));
    }
    Ok(())
}
