//! The migration function's handler, driven with CloudFormation's
//! custom-resource requests against a real Postgres, answering a real HTTP
//! server on loopback in place of the pre-signed S3 URL.

use std::time::Duration;

use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::config::ConfigError;
use shared::db::DbConfig;
use shared::relay::schema::{self, CustomResourceRequest, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-shot HTTP server: answers 200 to one request and hands back its
/// method, path, headers and JSON body.
async fn response_catcher() -> (String, tokio::task::JoinHandle<(String, String, Value)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/cfn-response/stack?X-Amz-Signature=abc", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut sock, _) = tokio::time::timeout(Duration::from_secs(30), listener.accept()).await.unwrap().unwrap();
        let mut buf = Vec::new();
        let (head, body) = loop {
            let mut chunk = [0u8; 4096];
            let n = sock.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed early");
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let head = text[..end].to_string();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
                    })
                    .expect("content-length");
                if buf.len() >= end + 4 + len {
                    break (head, buf[end + 4..end + 4 + len].to_vec());
                }
            }
        };
        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await.unwrap();
        let request_line = head.lines().next().unwrap().to_string();
        (request_line, head, serde_json::from_slice(&body).unwrap())
    });
    (url, task)
}

fn request(kind: &str, response_url: &str) -> CustomResourceRequest {
    serde_json::from_value(json!({
        "RequestType": kind,
        "ResponseURL": response_url,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/booking/1",
        "RequestId": format!("req-{kind}"),
        "ResourceType": "Custom::SchemaMigration",
        "LogicalResourceId": "SchemaMigration",
        "PhysicalResourceId": schema::PHYSICAL_ID,
        "ResourceProperties": {"ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:migrate:live", "MigrateFunctionVersion": "3"}
    }))
    .unwrap()
}

fn migrations() -> usize {
    std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations")).unwrap().count()
}

async fn config(db: &TestDb) -> Result<DbConfig, ConfigError> {
    DbConfig::from_url(&db.url, 1, Duration::from_secs(5))
}

#[tokio::test]
async fn create_and_update_migrate_and_answer_success() {
    let db = TestDb::create_unmigrated().await;
    let (url, answer) = response_catcher().await;
    let response = schema::handle(&request("Create", &url), || config(&db)).await.unwrap();
    assert_eq!(response.status, Status::Success, "{}", response.reason);
    let (line, head, body) = answer.await.unwrap();
    assert!(line.starts_with("PUT /cfn-response/stack?X-Amz-Signature=abc "), "{line}");
    assert!(!head.to_ascii_lowercase().contains("content-type"), "the pre-signed URL does not sign a content type");
    assert_eq!(body["Status"], "SUCCESS");
    assert_eq!(body["PhysicalResourceId"], schema::PHYSICAL_ID);
    assert_eq!(body["RequestId"], "req-Create");
    assert_eq!(body["LogicalResourceId"], "SchemaMigration");
    assert_eq!(body["StackId"], "arn:aws:cloudformation:us-east-1:123456789012:stack/booking/1");
    assert_eq!(body["Data"]["Applied"].as_array().unwrap().len(), migrations());
    assert_eq!(db.count("refinery_schema_history").await, migrations() as i64);

    let (url, answer) = response_catcher().await;
    let response = schema::handle(&request("Update", &url), || config(&db)).await.unwrap();
    assert_eq!(response.status, Status::Success);
    let (_, _, body) = answer.await.unwrap();
    assert_eq!(body["Data"]["Applied"], json!([]), "an update with nothing new applies nothing");
    assert_eq!(body["Reason"], "the schema is up to date");
}

#[tokio::test]
async fn delete_answers_success_and_never_touches_the_database() {
    let (url, answer) = response_catcher().await;
    let never = || async { panic!("Delete must not read the database settings") };
    let response = schema::handle(&request("Delete", &url), never).await.unwrap();
    assert_eq!(response.status, Status::Success);
    assert_eq!(answer.await.unwrap().2["Status"], "SUCCESS");
}

#[tokio::test]
async fn a_failing_migration_answers_failed_at_once() {
    let db = TestDb::create_unmigrated().await;
    // A table in the way: V1 cannot create `bookings`.
    db.pool.get().await.unwrap().batch_execute("CREATE TABLE bookings (id int)").await.unwrap();
    let (url, answer) = response_catcher().await;
    let response = schema::handle(&request("Create", &url), || config(&db)).await.unwrap();
    assert_eq!(response.status, Status::Failed);
    let (_, _, body) = answer.await.unwrap();
    assert_eq!(body["Status"], "FAILED");
    let reason = body["Reason"].as_str().unwrap();
    assert!(reason.contains("migration failed") && reason.contains("bookings"), "{reason}");
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM pg_tables WHERE tablename = 'outbox_events'").await, 0);
}

#[tokio::test]
async fn bad_settings_or_no_database_answer_failed_naming_the_cause() {
    let (url, answer) = response_catcher().await;
    let bad = || async { Err(ConfigError::new("DATABASE_SECRET_ARN", "is not set", "set it to the migration secret")) };
    let response = schema::handle(&request("Update", &url), bad).await.unwrap();
    assert_eq!(response.status, Status::Failed);
    assert!(answer.await.unwrap().2["Reason"].as_str().unwrap().contains("DATABASE_SECRET_ARN"));

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (url, answer) = response_catcher().await;
    let unreachable = || async move {
        DbConfig::from_url(&format!("postgres://postgres@127.0.0.1:{port}/x"), 1, Duration::from_secs(2))
    };
    let response = schema::handle(&request("Create", &url), unreachable).await.unwrap();
    assert_eq!(response.status, Status::Failed);
    assert_eq!(answer.await.unwrap().2["Status"], "FAILED");
}

#[tokio::test]
async fn an_unreachable_response_url_is_an_error_for_the_lambda_log() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let req = request("Delete", &format!("http://127.0.0.1:{port}/gone"));
    let err = schema::handle(&req, || async { unreachable!() }).await.unwrap_err();
    assert!(err.to_string().contains("cannot answer CloudFormation"), "{err}");
}
