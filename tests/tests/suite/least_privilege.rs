//! The functions' database role (a login member of `booking_app`, created by
//! migration V5) can do everything the functions and the operator CLI do,
//! and cannot change the schema.

use std::sync::Arc;
use std::time::Duration;

use outbox_tests::api::{booking_body, test_config, TestApi, BOB};
use outbox_tests::outbox::{age_processing_rows, sweeper_config, AGE_SENDS_30_DAYS};
use outbox_tests::TestDb;
use serde_json::json;
use shared::api::Api;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::notify::{feedback, sends, unknown};
use shared::outbox::events::transitions::{self, ReplaySelection};
use shared::relay::{status, sweeper, FeedbackConfig, Poller, PollerConfig};
use tokio_postgres::error::SqlState;

#[tokio::test]
async fn the_app_role_runs_every_function_and_operator_command() {
    let db = TestDb::create().await;
    let pool = db.app_role_pool().await;
    let who: String = pool.get().await.unwrap().query_one("SELECT current_user", &[]).await.unwrap().get(0);
    assert!(who.starts_with("app_"), "connected as the app role, not the owner: {who}");

    // The booking API: create (with an idempotency key), read, reschedule, cancel.
    let api = TestApi { api: Api::new(pool.clone(), Faults::none(), test_config()) };
    let key = [("Idempotency-Key", "least-privilege")];
    let created = api.send("POST", "/bookings", Some(BOB), &key, Some(&booking_body(9).to_string())).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let path = format!("/bookings/{}", created.body["id"].as_str().unwrap());
    assert_eq!(api.get(&path, BOB).await.status, 200);
    let patch = json!({"start": "2026-12-01T10:00:00Z", "end": "2026-12-01T10:30:00Z", "version": 1}).to_string();
    assert_eq!(api.send("PATCH", &path, Some(BOB), &[], Some(&patch)).await.status, 200);
    let mut dead = booking_body(12);
    dead["attendees"] = json!([{"email": "dave@example.com", "name": "Dave"}]);
    assert_eq!(api.post("/bookings", BOB, &dead).await.status, 201);

    // The poller: sends, an unknown outcome, a released claim, a dead letter.
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("alice@example.com", SendOutcome::NotSent { reason: "throttled".into() }, 1);
    mailer.script("dave@example.com", SendOutcome::Misconfigured { reason: "unverified".into() }, 1);
    let poller = Poller::new(pool.clone(), mailer.clone(), Faults::none(), PollerConfig::for_tests("app"));
    poller.drain().await.unwrap();
    mailer.script("alice@example.com", SendOutcome::Unknown { reason: "timeout".into() }, 1);
    poller.drain().await.unwrap();
    assert_eq!(api.post(&format!("{path}/cancel"), BOB, &json!({})).await.status, 200);
    poller.drain().await.unwrap();
    let client = pool.get().await.unwrap();
    let counts = sends::counts(&client).await.unwrap();
    assert!(counts[&sends::SendStatus::Sent] >= 1 && counts[&sends::SendStatus::Unknown] == 1, "{counts:?}");

    // The operator CLI's commands.
    let mut client = pool.get().await.unwrap();
    let unknown_send = unknown::list(&client, std::time::Duration::from_secs(900), false, 10).await.unwrap().remove(0);
    unknown::resend(&mut client, unknown_send.id, "operator").await.unwrap();
    let all = ReplaySelection::All { event_type: None, since: None };
    let report = transitions::replay(&mut client, all, "operator", 100, false).await.unwrap();
    assert_eq!(report.replayed.len(), 1);
    poller.drain().await.unwrap();
    status::fetch(&client, &sweeper_config(8)).await.unwrap();

    // The sweeper: sweep a stuck row, then retention deletes old rows.
    let admin = db.pool.get().await.unwrap();
    admin
        .batch_execute(&format!(
            "UPDATE outbox_events SET status = 'PROCESSING', locked_by = 'dead', locked_at = now() \
              WHERE id = (SELECT id FROM outbox_events LIMIT 1); \
             UPDATE outbox_events SET completed_at = now() - interval '30 days' WHERE status = 'DONE'; \
             UPDATE processed_events SET processed_at = now() - interval '30 days'; \
             {AGE_SENDS_30_DAYS}; \
             UPDATE idempotency_keys SET created_at = now() - interval '30 days'; \
             UPDATE organizer_daily_usage SET day = day - 30; UPDATE booking_daily_changes SET day = day - 30;",
        ))
        .await
        .unwrap();
    age_processing_rows(&db, 301).await;
    let run = sweeper::run(&pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.reset, 1);
    let r = &run.retention;
    assert!(
        r.events > 0 && r.processed_events > 0 && r.sends > 0 && r.idempotency_keys > 0 && r.usage_counters > 0,
        "{r:?}"
    );
}

#[tokio::test]
async fn the_app_role_reconciles_unconfirmed_sends_and_manages_suppressions() {
    let db = TestDb::create().await;
    let pool = db.app_role_pool().await;
    let api = TestApi { api: Api::new(pool.clone(), Faults::none(), test_config()) };
    assert_eq!(api.post("/bookings", BOB, &booking_body(9)).await.status, 201);
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("alice@example.com", SendOutcome::Unknown { reason: "timeout".into() }, 1);
    let poller = Poller::new(pool.clone(), mailer.clone(), Faults::none(), PollerConfig::for_tests("app"));
    poller.drain().await.unwrap();
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute("UPDATE booking_notification_sends SET claimed_at = now() - interval '1 hour'")
        .await
        .unwrap();

    // The sweeper reports it not confirmed and (opted in) resends it.
    let mut config = sweeper_config(8);
    config.feedback = FeedbackConfig::new(Duration::from_secs(60), Some(Duration::from_secs(120))).unwrap();
    let run = sweeper::run(&pool, &config).await.unwrap();
    assert_eq!((run.feedback.newly_unconfirmed, run.feedback.auto_resent), (1, 1), "{:?}", run.feedback);
    poller.drain().await.unwrap();
    let counts = sends::counts(&pool.get().await.unwrap()).await.unwrap();
    assert_eq!(counts[&sends::SendStatus::Unknown], 0, "{counts:?}");

    // Suppressions: list and remove.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute("INSERT INTO suppressed_addresses (email, reason) VALUES ('carol@example.com', 'complained')")
        .await
        .unwrap();
    let client = pool.get().await.unwrap();
    assert_eq!(feedback::suppressions(&client, 10).await.unwrap().len(), 1);
    assert!(feedback::unsuppress(&client, "Carol@example.com", "operator").await.unwrap().is_some());
    assert!(feedback::suppressions(&client, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_app_role_cannot_create_alter_drop_or_truncate() {
    let db = TestDb::create().await;
    let pool = db.app_role_pool().await;
    let client = pool.get().await.unwrap();
    for ddl in [
        "CREATE TABLE evil (id int)",
        "ALTER TABLE bookings ADD COLUMN evil int",
        "ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_processing_is_locked",
        "DROP TABLE bookings",
        "DROP INDEX outbox_events_due",
        "TRUNCATE outbox_events",
        "CREATE INDEX evil ON bookings (title)",
        "CREATE FUNCTION evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "DELETE FROM bookings",
        "DELETE FROM outbox_replays",
        "SELECT * FROM refinery_schema_history",
    ] {
        let err = client.batch_execute(ddl).await.expect_err(ddl);
        let code = err.code().cloned();
        assert!(
            code == Some(SqlState::INSUFFICIENT_PRIVILEGE),
            "{ddl}: expected insufficient_privilege, got {code:?} ({err})"
        );
    }
}

#[tokio::test]
async fn the_app_roles_timeouts_end_an_idle_in_transaction_session_and_a_runaway_statement() {
    use shared::db::role_limits::RoleLimits;
    let db = TestDb::create().await;
    // A login role created after the first migration, as operators add one:
    // the next migration run sets it too, in this database only.
    let app = db.app_role_pool().await;
    let limits = RoleLimits {
        statement_timeout: Duration::from_millis(300),
        idle_in_transaction_timeout: Duration::from_millis(500),
    };
    shared::db::migrate_with(&db.pool, shared::db::MigrationTarget::Latest, &limits).await.unwrap();
    let client = app.get().await.unwrap();
    let shown: String = client.query_one("SHOW statement_timeout", &[]).await.unwrap().get(0);
    assert_eq!(shown, "300ms");

    let runaway = client.batch_execute("SELECT pg_sleep(2)").await.unwrap_err();
    assert_eq!(runaway.code(), Some(&SqlState::QUERY_CANCELED), "{runaway}");

    // A transaction left open (a report, a forgotten psql session) ends
    // instead of holding back vacuum.
    client.batch_execute("BEGIN; SELECT count(*) FROM outbox_events").await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    let ended = client.batch_execute("SELECT 1").await.unwrap_err();
    assert!(
        ended.code() == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT) || client.is_closed(),
        "the idle transaction's session was ended: {ended}"
    );
    let sessions: i64 = db
        .scalar("SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = current_database()")
        .await;
    assert_eq!(sessions, 0);

    // The schema owner (operators, migrations) is not limited.
    let owner: String = db.pool.get().await.unwrap().query_one("SHOW statement_timeout", &[]).await.unwrap().get(0);
    assert_eq!(owner, "0");
}
