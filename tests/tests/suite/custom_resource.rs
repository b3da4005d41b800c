//! The migration function's handler, driven with CloudFormation's
//! custom-resource requests against a real Postgres, answering a real HTTP
//! server on loopback in place of the pre-signed S3 URL (a `dev` build's
//! loopback `Trust`); and, with the production `Trust`, every request that
//! is not CloudFormation's for this stack refused before anything runs.

use std::time::Duration;

use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::config::ConfigError;
use shared::db::custom_resource::{self as schema, CustomResourceRequest, HandleError, Setup, Status, Trust};
use shared::db::logins::{LoginSecret, Logins};
use shared::db::DbConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A one-shot HTTP server: answers 200 to one request and hands back its
/// method, path, headers and JSON body.
/// Also the `Trust` that answers there, for this stack.
async fn response_catcher() -> (String, Trust, tokio::task::JoinHandle<(String, String, Value)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let url = format!("http://{address}/cfn-response/stack?X-Amz-Signature=abc");
    let trust = Trust::loopback_for_tests(STACK, &address);
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
    (url, trust, task)
}

const STACK: &str = "arn:aws:cloudformation:us-east-1:123456789012:stack/booking/1";

fn request(kind: &str, response_url: &str) -> CustomResourceRequest {
    serde_json::from_value(json!({
        "RequestType": kind,
        "ResponseURL": response_url,
        "StackId": STACK,
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

async fn config(db: &TestDb) -> Result<Setup, ConfigError> {
    Ok(Setup { db: DbConfig::from_url(&db.url, 1, Duration::from_secs(5))?, logins: None })
}

#[tokio::test]
async fn create_and_update_migrate_and_answer_success() {
    let db = TestDb::create_unmigrated().await;
    let (url, trust, answer) = response_catcher().await;
    let response = schema::handle(&trust, &request("Create", &url), || config(&db)).await.unwrap().response;
    assert_eq!(response.status, Status::Success, "{}", response.reason);
    let (line, head, body) = answer.await.unwrap();
    assert!(line.starts_with("PUT /cfn-response/stack?X-Amz-Signature=abc "), "{line}");
    assert!(!head.to_ascii_lowercase().contains("content-type"), "the pre-signed URL does not sign a content type");
    assert_eq!(body["Status"], "SUCCESS");
    assert_eq!(body["PhysicalResourceId"], schema::PHYSICAL_ID);
    assert_eq!(body["RequestId"], "req-Create");
    assert_eq!(body["LogicalResourceId"], "SchemaMigration");
    assert_eq!(body["StackId"], "arn:aws:cloudformation:us-east-1:123456789012:stack/booking/1");
    assert_eq!(body["Data"]["Applied"], json!(migrations().to_string()));
    let reply = serde_json::to_vec(&body).unwrap().len();
    assert!(reply < 4096, "CloudFormation refuses a reply over 4,096 bytes: {reply}");
    assert_eq!(db.count("refinery_schema_history").await, migrations() as i64);

    let (url, trust, answer) = response_catcher().await;
    let response = schema::handle(&trust, &request("Update", &url), || config(&db)).await.unwrap().response;
    assert_eq!(response.status, Status::Success);
    let (_, _, body) = answer.await.unwrap();
    assert_eq!(body["Data"]["Applied"], json!("0"), "an update with nothing new applies nothing");
    assert_eq!(body["Reason"], "the schema is up to date");
}

/// `booking_app`'s settings in this database, as `ALTER ROLE … SET` left them.
async fn booking_app_settings(db: &TestDb) -> String {
    db.scalar(
        "SELECT coalesce(array_to_string(s.setconfig, ','), '') FROM pg_db_role_setting s \
           JOIN pg_roles r ON r.oid = s.setrole \
          WHERE r.rolname = 'booking_app' AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .await
}

/// A change of `AppStatementTimeoutMs` or `AppIdleInTransactionTimeoutMs`
/// alone publishes no new version of the migration function (SAM hashes the
/// template's text, where each is a `Ref`), so it reaches the database as
/// `SchemaMigration`'s properties, which CloudFormation sends (as strings)
/// in the Update a changed property causes.
#[tokio::test]
async fn a_parameter_only_change_of_the_roles_timeouts_reaches_the_database() {
    let db = TestDb::create_unmigrated().await;
    let with = |kind: &str, url: &str, statement: &str, idle: &str| {
        let mut req = request(kind, url);
        req.resource_properties.insert("AppStatementTimeoutMs".into(), json!(statement));
        req.resource_properties.insert("AppIdleInTransactionTimeoutMs".into(), json!(idle));
        req
    };
    let (url, trust, answer) = response_catcher().await;
    let created = schema::handle(&trust, &with("Create", &url, "30000", "300000"), || config(&db)).await.unwrap();
    assert_eq!(created.response.status, Status::Success, "{}", created.response.reason);
    answer.await.unwrap();
    let settings = booking_app_settings(&db).await;
    assert!(settings.contains("statement_timeout=30000ms"), "{settings}");

    let (url, trust, answer) = response_catcher().await;
    let updated = schema::handle(&trust, &with("Update", &url, "45000", "600000"), || config(&db)).await.unwrap();
    assert_eq!(updated.response.status, Status::Success, "{}", updated.response.reason);
    assert_eq!(answer.await.unwrap().2["Data"]["Applied"], json!("0"), "no migration: only the limits changed");
    let settings = booking_app_settings(&db).await;
    assert!(
        settings.contains("statement_timeout=45000ms")
            && settings.contains("idle_in_transaction_session_timeout=600000ms"),
        "the Update's properties reached the role: {settings}"
    );

    // A property that is not a number fails the deploy before anything runs.
    let (url, trust, answer) = response_catcher().await;
    let bad = schema::handle(&trust, &with("Update", &url, "soon", "600000"), || config(&db)).await.unwrap();
    assert_eq!(bad.response.status, Status::Failed);
    assert!(bad.response.reason.contains("settings are invalid"), "{}", bad.response.reason);
    assert!(bad.cause.unwrap().contains("APP_STATEMENT_TIMEOUT_MS"), "the log names the setting");
    answer.await.unwrap();
    assert!(booking_app_settings(&db).await.contains("statement_timeout=45000ms"), "nothing changed");
}

/// The template passes each of [`role_limits::PROPERTIES`] to
/// `SchemaMigration` as its parameter of the same name, and no longer sets
/// them in the migration function's environment (one way in).
#[test]
fn schema_migration_carries_the_roles_timeouts_as_properties() {
    let template = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    let start = template.find("\n  SchemaMigration:\n").expect("SchemaMigration");
    let end = template[start + 1..].find("\n  # ").map(|i| start + 1 + i).unwrap();
    let resource = &template[start..end];
    for (property, setting) in shared::db::role_limits::PROPERTIES {
        assert!(
            resource.contains(&format!("\n      {property}: !Ref {property}\n")),
            "SchemaMigration must pass {property} (for {}): {resource}",
            setting.name
        );
        assert!(
            !template.contains(&format!("{}: !Ref", setting.name)),
            "{} is set in an environment too",
            setting.name
        );
    }
}

#[tokio::test]
async fn delete_answers_success_and_never_touches_the_database() {
    let (url, trust, answer) = response_catcher().await;
    let never = || async { panic!("Delete must not read the database settings") };
    let response = schema::handle(&trust, &request("Delete", &url), never).await.unwrap().response;
    assert_eq!(response.status, Status::Success);
    assert_eq!(answer.await.unwrap().2["Status"], "SUCCESS");
}

#[tokio::test]
async fn a_failing_migration_answers_failed_at_once() {
    let db = TestDb::create_unmigrated().await;
    // A table in the way: V1 cannot create `bookings`.
    db.pool.get().await.unwrap().batch_execute("CREATE TABLE bookings (id int)").await.unwrap();
    let (url, trust, answer) = response_catcher().await;
    let answered = schema::handle(&trust, &request("Create", &url), || config(&db)).await.unwrap();
    assert_eq!(answered.response.status, Status::Failed);
    let (_, _, body) = answer.await.unwrap();
    assert_eq!(body["Status"], "FAILED");
    let reason = body["Reason"].as_str().unwrap();
    assert!(reason.contains("a migration failed") && reason.contains("req-Create"), "{reason}");
    assert!(!reason.contains("bookings"), "CloudFormation is told the kind, not the detail: {reason}");
    let cause = answered.cause.unwrap();
    assert!(cause.contains("bookings"), "the log has the cause: {cause}");
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM pg_tables WHERE tablename = 'outbox_events'").await, 0);
}

#[tokio::test]
async fn bad_settings_or_no_database_answer_failed_naming_the_kind_and_logging_the_cause() {
    let (url, trust, answer) = response_catcher().await;
    let bad = || async { Err(ConfigError::new("DATABASE_SECRET_ARN", "is not set", "set it to the migration secret")) };
    let answered = schema::handle(&trust, &request("Update", &url), bad).await.unwrap();
    assert_eq!(answered.response.status, Status::Failed);
    let reason = answer.await.unwrap().2["Reason"].as_str().unwrap().to_string();
    assert!(reason.contains("settings are invalid"), "{reason}");
    assert!(answered.cause.unwrap().contains("DATABASE_SECRET_ARN"));

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (url, trust, answer) = response_catcher().await;
    let unreachable = || async move {
        let url = format!("postgres://postgres:hunter2@127.0.0.1:{port}/x");
        Ok(Setup { db: DbConfig::from_url(&url, 1, Duration::from_secs(2))?, logins: None })
    };
    let answered = schema::handle(&trust, &request("Create", &url), unreachable).await.unwrap();
    assert_eq!(answered.response.status, Status::Failed);
    let body = answer.await.unwrap().2;
    assert_eq!(body["Status"], "FAILED");
    let reason = body["Reason"].as_str().unwrap();
    assert!(reason.contains("the database could not be reached"), "{reason}");
    for secret in ["hunter2", &port.to_string(), "127.0.0.1"] {
        assert!(!reason.contains(secret), "no host, port or password in what CloudFormation is told: {reason}");
        assert!(!answered.cause.as_deref().unwrap().contains("hunter2"), "no password in the log either");
    }
}

#[tokio::test]
async fn an_unreachable_response_url_is_an_error_for_the_lambda_log() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let req = request("Delete", &format!("http://{address}/gone"));
    let err = schema::handle(&Trust::loopback_for_tests(STACK, &address), &req, || async { unreachable!() })
        .await
        .unwrap_err();
    assert!(matches!(err, HandleError::Respond(_)), "{err}");
    assert!(err.to_string().contains("cannot answer CloudFormation"), "{err}");
}

/// Nothing connects to `listener` within a second.
async fn nothing_arrives(listener: &tokio::net::TcpListener) {
    let accepted = tokio::time::timeout(Duration::from_secs(1), listener.accept()).await;
    assert!(accepted.is_err(), "something was sent to {:?}", listener.local_addr());
}

#[tokio::test]
async fn response_url_to_a_private_address_is_refused() {
    // The production Trust: CloudFormation's response bucket of us-east-1.
    let trust = Trust::cloudformation(STACK, "us-east-1");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap();
    let bucket = "cloudformation-custom-resource-response-useast1";
    for url in [
        format!("http://{local}/cfn-response"),
        format!("https://{local}/cfn-response"),
        "https://169.254.169.254/latest/meta-data".to_string(),
        "https://10.0.0.5/x".to_string(),
        format!("http://{bucket}.s3.amazonaws.com/arn%3Aaws/x"),
        format!("https://{bucket}.s3.amazonaws.com.evil.example/arn%3Aaws/x"),
        format!("https://user@{bucket}.s3.amazonaws.com/arn%3Aaws/x"),
        format!("https://{bucket}.s3.amazonaws.com:8443/arn%3Aaws/x"),
        "https://cloudformation-custom-resource-response-euwest1.s3.amazonaws.com/arn%3Aaws/x".to_string(),
        format!("https://{bucket}.s3.amazonaws.com/"),
        "not a url".to_string(),
    ] {
        for kind in ["Create", "Delete"] {
            let never = || async { panic!("a refused request must not read the database settings ({url})") };
            let err = schema::handle(&trust, &request(kind, &url), never).await.unwrap_err();
            assert!(matches!(err, HandleError::Refused(_)), "{url}: {err}");
        }
    }
    nothing_arrives(&listener).await;
    // What CloudFormation really sends passes the same check.
    for host in [
        format!("{bucket}.s3.amazonaws.com"),
        format!("{bucket}.s3-us-east-1.amazonaws.com"),
        format!("{bucket}.s3.us-east-1.amazonaws.com"),
    ] {
        let url = format!("https://{host}/arn%3Aaws%3Acloudformation%3Aus-east-1/req?X-Amz-Signature=abc");
        assert_eq!(trust.check(&request("Create", &url)), Ok(()), "{url}");
    }
}

#[tokio::test]
async fn a_request_for_another_stack_is_refused_and_answered_nowhere() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let other = Trust::loopback_for_tests("arn:aws:cloudformation:us-east-1:123456789012:stack/other/2", &address);
    let never = || async { panic!("another stack's request must not read the database settings") };
    let url = format!("http://{address}/cfn-response");
    let err = schema::handle(&other, &request("Create", &url), never).await.unwrap_err();
    assert!(matches!(err, HandleError::Refused(_)) && err.to_string().contains("stack"), "{err}");
    nothing_arrives(&listener).await;
}

/// The functions' secrets as the stack generates them (a username and a
/// password) in Secrets Manager (moto), for one test.
async fn generated_secrets(client: &aws_sdk_secretsmanager::Client, tag: &str) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for role in shared::db::logins::FUNCTION_ROLES {
        let username = format!("{role}_{tag}");
        let password = format!("pw-{}", uuid::Uuid::new_v4().simple());
        let created = client
            .create_secret()
            .name(format!("{username}-secret"))
            .secret_string(json!({"username": username, "password": password}).to_string())
            .send()
            .await
            .expect("moto serves Secrets Manager");
        out.push((role, created.arn().unwrap().to_string(), password));
    }
    out
}

fn secrets_client() -> aws_sdk_secretsmanager::Client {
    let sdk = outbox_tests::ses::sdk_config_for(&outbox_tests::ses::moto_endpoint());
    aws_sdk_secretsmanager::Client::new(&sdk)
}

async fn secret_json(client: &aws_sdk_secretsmanager::Client, arn: &str) -> Value {
    let out = client.get_secret_value().secret_id(arn).send().await.unwrap();
    serde_json::from_str(out.secret_string().unwrap()).unwrap()
}

/// Connects with a function's secret, as the function does (its password
/// checked: the test cluster asks members of outbox_password_checked for it).
async fn connect_with(secret: &Value) -> Result<deadpool_postgres::Object, String> {
    let config = DbConfig::from_secret(&secret.to_string(), None, 1, Duration::from_secs(5)).unwrap();
    let pool = config.build_pool().unwrap();
    pool.get().await.map_err(|e| shared::db::DbError::from(e).to_string())
}

#[tokio::test]
async fn each_functions_login_is_made_from_its_generated_secret_rotated_on_update_and_kept_on_delete() {
    let db = TestDb::create_unmigrated().await;
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..10];
    let secrets = secrets_client();
    let made = generated_secrets(&secrets, tag).await;
    let functions: Vec<LoginSecret> =
        made.iter().map(|(role, arn, _)| LoginSecret { role, arn: arn.clone() }).collect();
    let setup = || async {
        let db = DbConfig::from_url(&db.url, 1, Duration::from_secs(5))?;
        let logins = Logins { secrets: secrets.clone(), functions: functions.clone(), stack_tag: tag.to_string() };
        Ok(Setup { db, logins: Some(logins) })
    };
    let (url, trust, answer) = response_catcher().await;
    let answered = schema::handle(&trust, &request("Create", &url), setup).await.unwrap();
    assert_eq!(answered.response.status, Status::Success, "{:?}", answered.cause);
    answer.await.unwrap();
    let admin = db.pool.get().await.unwrap();
    admin
        .batch_execute(
            "DO $$ BEGIN CREATE ROLE outbox_password_checked NOLOGIN; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$",
        )
        .await
        .unwrap();
    for (role, arn, password) in &made {
        let username = format!("{role}_{tag}");
        let member: bool = admin
            .query_one(
                "SELECT pg_has_role($1, $2, 'MEMBER') AND NOT rolsuper FROM pg_roles WHERE rolname = $1",
                &[&username, role],
            )
            .await
            .unwrap()
            .get(0);
        assert!(member, "{username} is a plain login in {role}");
        let timeouts: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole \
                  WHERE r.rolname = $1 AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                    AND array_to_string(s.setconfig, ',') LIKE '%statement_timeout=%' \
                    AND array_to_string(s.setconfig, ',') LIKE '%idle_in_transaction_session_timeout=%'",
                &[&username],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(timeouts, 1, "{username} has its role's timeouts from the same run");
        admin.batch_execute(&format!("GRANT outbox_password_checked TO {username}")).await.unwrap();
        // The secret is completed in the RDS format the function reads.
        let secret = secret_json(&secrets, arn).await;
        assert_eq!(
            (&secret["username"], &secret["password"], &secret["engine"]),
            (&json!(username), &json!(password), &json!("postgres"))
        );
        assert!(
            secret["host"].is_string() && secret["port"].is_number() && secret["dbname"] == json!(db.name),
            "{secret}"
        );
        let client = connect_with(&secret).await.unwrap_or_else(|e| panic!("{username} connects: {e}"));
        let who: String = client.query_one("SELECT current_user", &[]).await.unwrap().get(0);
        assert_eq!(who, username);
        let mut wrong = secret.clone();
        wrong["password"] = json!("not-the-password-at-all");
        let refused = connect_with(&wrong).await.expect_err("a wrong password is refused");
        assert!(refused.contains("28P01"), "the test cluster checks it (invalid_password): {refused}");
    }

    // The API books through its own login.
    let (_, api_arn, _) = made.iter().find(|(role, ..)| *role == "booking_api").unwrap();
    let api_secret = secret_json(&secrets, api_arn).await;
    let pool =
        DbConfig::from_secret(&api_secret.to_string(), None, 2, Duration::from_secs(5)).unwrap().build_pool().unwrap();
    let api = outbox_tests::api::TestApi {
        api: shared::api::Api::new(pool, shared::fault::Faults::none(), outbox_tests::api::test_config()),
    };
    let booked = api.post("/bookings", outbox_tests::api::BOB, &outbox_tests::api::booking_body(9)).await;
    assert_eq!(booked.status, 201, "{}", booked.body);

    // A rotated secret takes effect at the next deploy: the old password no
    // longer works, the new one does.
    let (_, poller_arn, old_password) = made.iter().find(|(role, ..)| *role == "outbox_poller").unwrap();
    let mut rotated = secret_json(&secrets, poller_arn).await;
    rotated["password"] = json!(format!("rotated-{}", uuid::Uuid::new_v4().simple()));
    secrets.put_secret_value().secret_id(poller_arn).secret_string(rotated.to_string()).send().await.unwrap();
    // A login in another role is not a plain function login: this test's
    // own membership (for the password check) goes during the deploy.
    let logins: Vec<String> = made.iter().map(|(role, ..)| format!("{role}_{tag}")).collect();
    admin.batch_execute(&format!("REVOKE outbox_password_checked FROM {}", logins.join(", "))).await.unwrap();
    let (url, trust, answer) = response_catcher().await;
    let answered = schema::handle(&trust, &request("Update", &url), setup).await.unwrap();
    assert_eq!(answered.response.status, Status::Success, "{:?}", answered.cause);
    answer.await.unwrap();
    admin.batch_execute(&format!("GRANT outbox_password_checked TO {}", logins.join(", "))).await.unwrap();
    let _works = connect_with(&rotated).await.expect("the rotated password works");
    let mut old = rotated.clone();
    old["password"] = json!(old_password);
    assert!(connect_with(&old).await.is_err(), "the old password no longer works");

    // Delete keeps the logins, like the schema.
    let (url, trust, answer) = response_catcher().await;
    let never = || async { panic!("Delete must not read the settings") };
    assert_eq!(schema::handle(&trust, &request("Delete", &url), never).await.unwrap().response.status, Status::Success);
    answer.await.unwrap();
    let _kept = connect_with(&rotated).await.expect("kept on delete");
}

/// One deploy (`kind`) whose only function secret, for `role`, names
/// `username` (stack tag `tag`): what CloudFormation was told (its status
/// and reason) and the cause the function logged.
async fn deploy_one_login(
    db: &TestDb,
    secrets: &aws_sdk_secretsmanager::Client,
    role: &'static str,
    username: &str,
    tag: &str,
    kind: &str,
) -> (Status, String, Option<String>) {
    let created = secrets
        .create_secret()
        .name(format!("login-{username}-{}", uuid::Uuid::new_v4().simple()))
        .secret_string(json!({"username": username, "password": "a-long-enough-password"}).to_string())
        .send()
        .await
        .unwrap();
    let functions = vec![LoginSecret { role, arn: created.arn().unwrap().to_string() }];
    let setup = || async {
        let db = DbConfig::from_url(&db.url, 1, Duration::from_secs(5))?;
        Ok(Setup { db, logins: Some(Logins { secrets: secrets.clone(), functions, stack_tag: tag.to_string() }) })
    };
    let (url, trust, answer) = response_catcher().await;
    let answered = schema::handle(&trust, &request(kind, &url), setup).await.unwrap();
    let reason = answer.await.unwrap().2["Reason"].as_str().unwrap().to_string();
    (answered.response.status, reason, answered.cause)
}

#[tokio::test]
async fn a_secret_naming_the_owner_or_a_privileged_role_takes_over_nothing() {
    let db = TestDb::create_unmigrated().await;
    let secrets = secrets_client();
    for username in ["postgres", "booking_app", "outbox_poller"] {
        let (status, reason, cause) =
            deploy_one_login(&db, &secrets, "booking_api", username, "0a1b2c3d", "Create").await;
        assert_eq!(status, Status::Failed, "{username}");
        assert!(reason.contains("login could not be made"), "{reason}");
        assert!(cause.unwrap().contains("not a function's login"), "{username}");
        let row = db
            .pool
            .get()
            .await
            .unwrap()
            .query_one("SELECT rolcanlogin, rolpassword IS NOT NULL FROM pg_authid WHERE rolname = $1", &[&username])
            .await
            .unwrap();
        let (can_login, has_password): (bool, bool) = (row.get(0), row.get(1));
        match username {
            "postgres" => assert!(!has_password, "the owner's password is untouched"),
            _ => assert!(!can_login && !has_password, "the group role {username} was not made a login"),
        }
    }
}

/// Low 3 of issue 37: whoever can write a function's secret points its
/// username at a role that is not this stack's own login: another stack's
/// login, or this stack's login name made beforehand with rights of its
/// own (a member of pg_write_all_data or of an RDS-style admin role, the
/// owner of a table). The deploy fails, and no role's password is set.
#[tokio::test]
async fn a_login_secret_naming_another_role_sets_no_password() {
    let db = TestDb::create_unmigrated().await;
    let secrets = secrets_client();
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let own = format!("booking_api_{tag}");
    let admin = db.pool.get().await.unwrap();
    admin
        .batch_execute(
            "DO $$ BEGIN CREATE ROLE fake_rds_superuser NOLOGIN; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$",
        )
        .await
        .unwrap();
    let cases: Vec<(String, String)> = vec![
        (format!("booking_api_other{tag}"), format!("CREATE ROLE booking_api_other{tag} LOGIN")),
        (own.clone(), format!("CREATE ROLE {own} LOGIN IN ROLE pg_write_all_data")),
        (own.clone(), format!("CREATE ROLE {own} LOGIN IN ROLE fake_rds_superuser")),
        (
            own.clone(),
            format!(
                "CREATE ROLE {own} LOGIN; CREATE TABLE owned_{tag} (x int); ALTER TABLE owned_{tag} OWNER TO {own}"
            ),
        ),
    ];
    for (username, made) in cases {
        admin.batch_execute(&made).await.unwrap();
        let (status, reason, cause) = deploy_one_login(&db, &secrets, "booking_api", &username, tag, "Create").await;
        assert_eq!(status, Status::Failed, "{made}");
        assert!(!reason.contains("a-long-enough-password"), "{reason}");
        assert!(cause.unwrap().contains("not a function's login"), "{made}");
        let has_password: bool = admin
            .query_one("SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = $1", &[&username])
            .await
            .unwrap()
            .get(0);
        assert!(!has_password, "{made}: no password was set");
        let member: bool =
            admin.query_one("SELECT pg_has_role($1, 'booking_api', 'MEMBER')", &[&username]).await.unwrap().get(0);
        assert!(!member, "{made}: not made a member of booking_api");
        admin.batch_execute(&format!("DROP TABLE IF EXISTS owned_{tag}; DROP ROLE {username}")).await.unwrap();
    }
}

/// Low 8 of issue 37: a function's login made before V19 is a member of
/// `booking_app` (V5), the operators' role, with rights far wider than the
/// function's. The next deploy moves it into its function's role alone.
#[tokio::test]
async fn a_login_made_before_v19_in_the_operators_role_is_moved_to_its_functions_role() {
    let db = TestDb::create().await;
    let secrets = secrets_client();
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let username = format!("outbox_sweeper_{tag}");
    let admin = db.pool.get().await.unwrap();
    admin.batch_execute(&format!("CREATE ROLE {username} LOGIN IN ROLE booking_app")).await.unwrap();
    let (status, _, cause) = deploy_one_login(&db, &secrets, "outbox_sweeper", &username, tag, "Update").await;
    assert_eq!(status, Status::Success, "{cause:?}");
    let row = admin
        .query_one(
            "SELECT pg_has_role($1, 'outbox_sweeper', 'MEMBER'), pg_has_role($1, 'booking_app', 'MEMBER')",
            &[&username],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, bool>(1)), (true, false), "moved, not widened");
}

/// Issue 38, item 8: a deploy applied a migration this code does not know
/// (as one release later would), then CloudFormation rolls the stack back
/// and sends the older code's custom resource an Update. It answers
/// SUCCESS, applies nothing and says why: the rollback completes instead
/// of ending UPDATE_ROLLBACK_FAILED. A database that lacks one of this
/// code's migrations besides is still refused.
#[tokio::test]
async fn a_rollback_to_older_code_on_a_newer_schema_succeeds_and_applies_nothing() {
    let db = TestDb::create().await;
    let admin = db.pool.get().await.unwrap();
    admin
        .batch_execute(
            "CREATE TABLE from_a_newer_release (x int); \
             INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
             VALUES (9999, 'from_a_newer_release', '2026-12-03T23:00:00Z', '1')",
        )
        .await
        .unwrap();
    let history = || async {
        let rows = db.pool.get().await.unwrap().query("SELECT version FROM refinery_schema_history", &[]).await;
        rows.unwrap().len()
    };
    let before = history().await;
    let setup = || async { Ok(Setup { db: DbConfig::from_url(&db.url, 1, Duration::from_secs(5))?, logins: None }) };
    let (url, trust, answer) = response_catcher().await;
    let answered = schema::handle(&trust, &request("Update", &url), setup).await.unwrap();
    assert_eq!(answered.response.status, Status::Success, "{:?}", answered.cause);
    let reason = answer.await.unwrap().2["Reason"].as_str().unwrap().to_string();
    assert!(reason.contains("ahead of this code") && reason.contains("V9999__from_a_newer_release"), "{reason}");
    assert_eq!(history().await, before, "nothing applied");

    // One of this code's migrations missing besides: not a schema it runs on.
    admin.batch_execute("DELETE FROM refinery_schema_history WHERE version = 30").await.unwrap();
    let setup = || async { Ok(Setup { db: DbConfig::from_url(&db.url, 1, Duration::from_secs(5))?, logins: None }) };
    let (url, trust, answer) = response_catcher().await;
    let answered = schema::handle(&trust, &request("Update", &url), setup).await.unwrap();
    assert_eq!(answered.response.status, Status::Failed);
    answer.await.unwrap();
    assert!(answered.cause.unwrap().contains("lacks V30"), "refused, naming the gap");
}
