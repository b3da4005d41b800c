//! Each function's database role (V19: `booking_api`, `outbox_poller`,
//! `outbox_sweeper`, `ses_events`) runs everything its function does and
//! nothing it does not; the operators' role (`outbox_operator`, V31) runs
//! every outboxctl command; none can change the schema.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::SENT;
use shared::outbox::events::status::sql::{DEAD, DONE, PENDING, PROCESSING};
use std::sync::Arc;
use std::time::Duration;

use outbox_tests::api::{booking_body, test_config, TestApi, BOB};
use outbox_tests::outbox::{age_processing_rows, one_attempt, sweeper_config, AGE_SENDS_30_DAYS};
use outbox_tests::TestDb;
use serde_json::json;
use shared::api::Api;
use shared::fault::Faults;
use shared::notify::evidence::intake;
use shared::notify::evidence::suppression;
use shared::notify::evidence::{feedback, resend};
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::notify::sends;
use shared::outbox::events::transitions::{self, ReplaySelection};
use shared::relay::{status, sweeper, FeedbackConfig, Poller, PollerConfig};
use tokio_postgres::error::SqlState;

#[tokio::test]
async fn each_function_runs_as_its_own_role_and_the_operators_as_theirs() {
    let db = TestDb::create().await;
    let pool = db.operator_pool().await;
    let who: String = pool.get().await.unwrap().query_one("SELECT current_user", &[]).await.unwrap().get(0);
    assert!(who.starts_with("app_"), "connected as the app role, not the owner: {who}");
    let (api_pool, poller_pool) = (db.role_pool("booking_api").await, db.role_pool("outbox_poller").await);
    let sweeper_pool = db.role_pool("outbox_sweeper").await;

    // The booking API: create (with an idempotency key), list, read, reschedule, cancel.
    let api = TestApi { api: Api::new(api_pool.clone(), Faults::none(), test_config()) };
    let key = [("Idempotency-Key", "least-privilege")];
    let created = api.send("POST", "/bookings", Some(BOB), &key, Some(&booking_body(9).to_string())).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let path = format!("/bookings/{}", created.body["id"].as_str().unwrap());
    assert_eq!(api.get(&path, BOB).await.status, 200);
    assert_eq!(api.get(&format!("{path}/notifications"), BOB).await.status, 200);
    assert_eq!(api.get("/bookings?role=organizer", BOB).await.status, 200);
    let patch = json!({"start": "2026-12-01T10:00:00Z", "end": "2026-12-01T10:30:00Z", "version": 1}).to_string();
    assert_eq!(api.send("PATCH", &path, Some(BOB), &[], Some(&patch)).await.status, 200);
    let mut dead = booking_body(12);
    dead["attendees"] = json!([{"email": "dave@example.com", "name": "Dave"}]);
    assert_eq!(api.post("/bookings", BOB, &dead).await.status, 201);

    // The poller: sends, an unknown outcome, a released claim and, its
    // one attempt used, a dead letter.
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("dave@example.com", outbox_tests::outbox::refused(), 1);
    let poller = Poller::new(poller_pool.clone(), mailer.clone(), Faults::none(), one_attempt("app"));
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
    let unknown_send = resend::list(&client, std::time::Duration::from_secs(900), false, 10).await.unwrap().remove(0);
    resend::resend(&mut client, unknown_send.id, resend::Decision::Operator("operator")).await.unwrap();
    let all = ReplaySelection::All { event_type: None, since: None };
    let report = transitions::replay(&mut client, all, "operator", 100, false).await.unwrap();
    assert_eq!(report.replayed.len(), 1);
    poller.drain().await.unwrap();
    status::fetch(&client, &sweeper_config(8)).await.unwrap();

    // The sweeper: sweep a stuck row, then retention deletes old rows.
    let admin = db.pool.get().await.unwrap();
    admin
        .batch_execute(&format!(
            "UPDATE outbox_events SET status = {PROCESSING}, locked_by = 'dead', locked_at = now() \
              WHERE id = (SELECT id FROM outbox_events LIMIT 1); \
             UPDATE outbox_events SET completed_at = now() - interval '30 days' WHERE status = {DONE}; \
             UPDATE processed_events SET processed_at = now() - interval '30 days'; \
             {AGE_SENDS_30_DAYS}; \
             UPDATE idempotency_keys SET created_at = now() - interval '30 days'; \
             UPDATE organizer_daily_usage SET day = day - 30; UPDATE booking_daily_changes SET day = day - 30;",
        ))
        .await
        .unwrap();
    age_processing_rows(&db, 301).await;
    let run = sweeper::run(&sweeper_pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.reset, 1);
    let r = &run.retention;
    assert!(
        r.events > 0 && r.processed_events > 0 && r.sends > 0 && r.idempotency_keys > 0 && r.usage_counters > 0,
        "{r:?}"
    );
}

#[tokio::test]
async fn the_sweeper_resends_on_ses_evidence_and_operators_manage_suppressions_each_as_its_role() {
    let db = TestDb::create().await;
    let pool = db.operator_pool().await;
    let api = TestApi { api: Api::new(db.role_pool("booking_api").await, Faults::none(), test_config()) };
    assert_eq!(api.post("/bookings", BOB, &booking_body(9)).await.status, 201);
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("alice@example.com", SendOutcome::Unknown { reason: "timeout".into() }, 1);
    let poller_pool = db.role_pool("outbox_poller").await;
    let poller = Poller::new(poller_pool, mailer.clone(), Faults::none(), PollerConfig::for_tests("app"));
    poller.drain().await.unwrap();
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute(
            "UPDATE booking_notification_sends SET claimed_at = now() - interval '2 hours', \
                    reaches_provider_by = now() - interval '2 hours'",
        )
        .await
        .unwrap();

    // The poller sends a canary; its event, recorded as the ses-events
    // role, moves the watermark past the send; the sweeper resends it.
    assert!(poller.canary().await.unwrap().is_some());
    let canary = serde_json::json!({"version": "0", "id": "c", "detail-type": "Email Sent", "source": "aws.ses",
        "account": "123456789012", "region": "us-east-1", "detail": {"eventType": "Send",
        "mail": {"timestamp": chrono::Utc::now().to_rfc3339(), "messageId": "m", "destination": ["success@simulator.amazonses.com"],
                 "sendingAccountId": "123456789012", "tags": {"canary": [mailer.canaries()[0].to_string()], "ses:configuration-set": [outbox_tests::ses_events::CONFIGURATION_SET]}}, "send": {}}});
    let ses_events = db.role_pool("ses_events").await;
    intake::handle(&ses_events, &outbox_tests::ses_events::origin(), &canary).await.unwrap();
    // An hour on: the canary's event is old evidence, and a later event
    // (here the same one, a minute later) shows the stream alive since.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute(
            "UPDATE ses_event_watermarks SET mail_second = mail_second - interval '1 hour', \
                    received_at = received_at - interval '1 hour'",
        )
        .await
        .unwrap();
    intake::handle(&ses_events, &outbox_tests::ses_events::origin(), &canary).await.unwrap();
    let mut config = sweeper_config(8);
    config.feedback = FeedbackConfig::new(Duration::from_secs(60), 3).unwrap();
    let run = sweeper::run(&db.role_pool("outbox_sweeper").await, &config).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 1, "{:?}", run.feedback);
    poller.drain().await.unwrap();
    let counts = sends::counts(&pool.get().await.unwrap()).await.unwrap();
    assert_eq!(counts[&sends::SendStatus::Unknown], 0, "{counts:?}");

    // Suppressions: list and remove.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute("INSERT INTO suppressed_addresses (email, mailbox, reason) VALUES ('carol@example.com', 'carol@example.com', 'complained')")
        .await
        .unwrap();
    let client = pool.get().await.unwrap();
    assert_eq!(suppression::suppressions(&client, 10).await.unwrap().len(), 1);
    assert!(suppression::unsuppress(&client, "Carol@example.com", "operator").await.unwrap().is_some());
    assert!(suppression::suppressions(&client, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn no_app_role_can_create_alter_drop_or_truncate() {
    let db = TestDb::create().await;
    for role in ["booking_app", "booking_api", "outbox_poller", "outbox_sweeper", "ses_events", "outbox_operator"] {
        let client = db.role_pool(role).await.get().await.unwrap();
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
            refused(&client, role, ddl).await;
        }
    }
}

async fn refused(client: &tokio_postgres::Client, role: &str, sql: &str) {
    let err = client.batch_execute(sql).await.expect_err(sql);
    let code = err.code().cloned();
    assert!(
        code == Some(SqlState::INSUFFICIENT_PRIVILEGE),
        "{role}: {sql}: expected insufficient_privilege, got {code:?} ({err})"
    );
}

const INSERT_EVENT: &str = "INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload) \
     VALUES (gen_random_uuid(), gen_random_uuid(), 1, 'BOOKING_CONFIRMED', '{}')";
const INSERT_SEND: &str = "INSERT INTO booking_notification_sends (id, outbox_event_id, booking_id, recipient_email, \
     event_type) VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'a@example.com', 'BOOKING_CONFIRMED')";
const INSERT_SUPPRESSION: &str =
    "INSERT INTO suppressed_addresses (email, mailbox, reason) VALUES ('a@example.com', 'a@example.com', 'x')";

/// What each function never does, refused to its role: the API never moves
/// an event or reads a suppression, the poller never reads a booking or
/// writes an event, the sweeper never sends, SES's events never reach a
/// booking or an event.
#[tokio::test]
async fn each_function_role_is_refused_what_its_function_never_does() {
    let db = TestDb::create().await;
    let cases: [(&str, &[&str]); 5] = [
        (
            "booking_api",
            &[
                formatcp!("UPDATE outbox_events SET status = {DONE}"),
                "DELETE FROM outbox_events",
                "DELETE FROM bookings",
                "SELECT * FROM suppressed_addresses",
                "INSERT INTO send_feedback (send_id, kind, occurred_at, provider_message_id) \
                 VALUES (gen_random_uuid(), 'Send', now(), 'x')",
                formatcp!("UPDATE booking_notification_sends SET status = {SENT}"),
                "SELECT * FROM send_rate",
            ],
        ),
        (
            "outbox_poller",
            &[
                "SELECT * FROM bookings",
                INSERT_EVENT,
                "DELETE FROM outbox_events",
                INSERT_SUPPRESSION,
                "SELECT * FROM idempotency_keys",
                "SELECT * FROM send_feedback",
            ],
        ),
        (
            "outbox_sweeper",
            &[
                "SELECT * FROM bookings",
                INSERT_SEND,
                INSERT_EVENT,
                INSERT_SUPPRESSION,
                "SELECT send_rate_take('ses', 1)",
            ],
        ),
        (
            "ses_events",
            &[
                "SELECT * FROM bookings",
                "SELECT * FROM outbox_events",
                "DELETE FROM suppressed_addresses",
                "DELETE FROM booking_notification_sends",
                INSERT_SEND,
            ],
        ),
        (
            "outbox_operator",
            &[
                "SELECT * FROM bookings",
                INSERT_EVENT,
                INSERT_SEND,
                INSERT_SUPPRESSION,
                "UPDATE outbox_events SET payload = '{}'",
                "UPDATE booking_notification_sends SET recipient_email = 'x@example.com'",
                "DELETE FROM outbox_events",
                "SELECT * FROM idempotency_keys",
                "SELECT * FROM send_rate",
            ],
        ),
    ];
    for (role, statements) in cases {
        let client = db.role_pool(role).await.get().await.unwrap();
        for sql in statements {
            refused(&client, role, sql).await;
        }
    }
}

/// Low 12 of issue 52: a compromised sweeper reopens a DONE event and
/// deletes its claims, so the poller mails everyone again; deletes an event
/// still to send, or a live poller's lease; resets an event a live lease
/// holds; records a resend of a send that reached its person. Its grants
/// allow each of these statements; V39's row policies pass none of their
/// rows (its own steps run as its role in the tests above).
#[tokio::test]
async fn a_compromised_sweeper_can_neither_reopen_a_done_event_nor_delete_its_claims() {
    let db = TestDb::create().await;
    let api = TestApi { api: Api::new(db.role_pool("booking_api").await, Faults::none(), test_config()) };
    assert_eq!(api.post("/bookings", BOB, &booking_body(9)).await.status, 201);
    let mailer = Arc::new(RecordingMailer::new());
    let poller_pool = db.role_pool("outbox_poller").await;
    let poller = Poller::new(poller_pool, mailer.clone(), Faults::none(), PollerConfig::for_tests("app"));
    poller.drain().await.unwrap();
    let mailed = mailer.count();
    assert!(mailed >= 1);
    // A booking still to send, and one event held under a live lease.
    assert_eq!(api.post("/bookings", BOB, &booking_body(10)).await.status, 201);
    assert_eq!(api.post("/bookings", BOB, &booking_body(11)).await.status, 201);
    let admin = db.pool.get().await.unwrap();
    admin
        .batch_execute(
            formatcp!("INSERT INTO outbox_leases (id, holder, expires_at) VALUES ('00000000-0000-0000-0000-00000000000a', 'live', now() + interval '1 hour'); \
             UPDATE outbox_events SET status = {PROCESSING}, locked_by = 'live', locked_at = now() - interval '1 hour', \
                    lease_id = '00000000-0000-0000-0000-00000000000a' \
              WHERE id = (SELECT id FROM outbox_events WHERE status = {PENDING} ORDER BY created_at LIMIT 1)"),
        )
        .await
        .unwrap();
    let before: Vec<(String, String)> = states(&admin).await;

    let sweeper = db.role_pool("outbox_sweeper").await.get().await.unwrap();
    for attack in [
        formatcp!("UPDATE outbox_events SET status = {PENDING}, attempts = 0, next_attempt_at = now(), completed_at = NULL \
          WHERE status = {DONE}"),
        "DELETE FROM booking_notification_sends",
        "DELETE FROM outbox_events",
        formatcp!("UPDATE outbox_events SET status = {DEAD}, last_error = 'x', updated_at = now() WHERE status = {PENDING}"),
        formatcp!("UPDATE outbox_events SET status = {PENDING}, lease_id = NULL, locked_by = NULL WHERE status = {PROCESSING}"),
        "DELETE FROM outbox_leases",
        "UPDATE booking_notification_sends SET left_for_operator = 'x', updated_at = now()",
    ] {
        assert_eq!(sweeper.execute(attack, &[]).await.unwrap(), 0, "the sweeper changed rows with: {attack}");
    }
    let forged = sweeper
        .batch_execute(
            "INSERT INTO notification_resends (id, send_id, outbox_event_id, recipient_email, event_type, \
                     previous_status, claimed_at, decided_by, evidence_mail_second) \
             SELECT gen_random_uuid(), id, outbox_event_id, recipient_email, event_type, status, claimed_at, \
                    'mallory', now() FROM booking_notification_sends",
        )
        .await
        .expect_err("a resend of a send that reached its person is refused");
    assert_eq!(forged.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE), "{forged}");
    assert_eq!(states(&admin).await, before, "nothing the sweeper did changed an event, a claim or a lease");

    // The lease ends; what it held is the sweeper's to reset, and the
    // poller sends the rest: nobody is mailed twice.
    admin.batch_execute("UPDATE outbox_leases SET expires_at = now() - interval '1 minute'").await.unwrap();
    let run = sweeper::run(&db.role_pool("outbox_sweeper").await, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.reset, 1);
    poller.drain().await.unwrap();
    let mut to: Vec<String> = mailer.deliveries().iter().map(|d| format!("{} {}", d.recipient, d.event_id)).collect();
    let all = to.len();
    to.sort();
    to.dedup();
    assert_eq!(to.len(), all, "each person mailed once per event");
    assert!(all > mailed);
}

/// Every event's, claim's and lease's state, for comparing before and after.
async fn states(client: &tokio_postgres::Client) -> Vec<(String, String)> {
    let sql = "SELECT 'event ' || id, concat_ws(' ', status, attempts, lease_id, completed_at) FROM outbox_events \
               UNION ALL SELECT 'send ' || id, concat_ws(' ', status, left_for_operator) FROM booking_notification_sends \
               UNION ALL SELECT 'lease ' || id, expires_at::text FROM outbox_leases \
               UNION ALL SELECT 'resend ' || id, send_id::text FROM notification_resends ORDER BY 1";
    client.query(sql, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[tokio::test]
async fn the_app_roles_timeouts_end_an_idle_in_transaction_session_and_a_runaway_statement() {
    use shared::db::role_limits::RoleLimits;
    let db = TestDb::create().await;
    // A login role created after the first migration, as operators add one:
    // the next migration run sets it too, in this database only.
    let app = db.operator_pool().await;
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

#[tokio::test]
async fn the_ses_events_role_records_feedback_confirms_and_suppresses() {
    use outbox_tests::outbox::message_id_of;
    use outbox_tests::ses_events::{complaint_event, origin, send_event, with_message_id, ALICE};
    let db = TestDb::create().await;
    let api = TestApi { api: Api::new(db.role_pool("booking_api").await, Faults::none(), test_config()) };
    assert_eq!(api.post("/bookings", BOB, &booking_body(9)).await.status, 201);
    let mailer = Arc::new(RecordingMailer::new());
    let poller =
        Poller::new(db.role_pool("outbox_poller").await, mailer, Faults::none(), PollerConfig::for_tests("app"));
    poller.drain().await.unwrap();
    let claim: uuid::Uuid = db.scalar("SELECT id FROM booking_notification_sends").await;
    let id = message_id_of(&db, claim).await;
    let ses = db.role_pool("ses_events").await;
    for (event, want) in [
        (send_event(claim), feedback::Recorded::Recorded { confirmed: false, suppressed: 0 }),
        (complaint_event(claim, &[ALICE]), feedback::Recorded::Recorded { confirmed: false, suppressed: 1 }),
    ] {
        let handled = intake::handle(&ses, &origin(), &with_message_id(event, &id)).await.unwrap();
        assert_eq!(handled, intake::Handled::Recorded(want));
    }
}

/// Each privilege (in display order) and its columns (none: the whole object).
type Privileges = std::collections::BTreeMap<(usize, String), Vec<String>>;

const ROLES: [&str; 6] =
    ["booking_api", "outbox_poller", "outbox_sweeper", "ses_events", "outbox_operator", "booking_app"];

/// Every grant each role holds in this database, read back from the
/// catalog: `(role, object, privileges)`, privileges as `SELECT, UPDATE
/// (a, b)` (a column list: only those columns).
async fn grants_read_back(db: &TestDb) -> Vec<(String, String, String)> {
    const SQL: &str = "\
        WITH r AS (SELECT oid, rolname FROM pg_roles WHERE rolname = ANY($1)), \
             whole AS ( \
                 SELECT r.rolname, c.relname || CASE c.relkind WHEN 'S' THEN ' (sequence)' ELSE '' END AS object, \
                        a.privilege_type AS privilege, NULL::text AS col \
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public', \
                        aclexplode(c.relacl) a JOIN r ON r.oid = a.grantee \
                 UNION ALL \
                 SELECT r.rolname, c.relname, a.privilege_type, att.attname::text \
                   FROM pg_attribute att JOIN pg_class c ON c.oid = att.attrelid \
                   JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public', \
                        aclexplode(att.attacl) a JOIN r ON r.oid = a.grantee \
                 UNION ALL \
                 SELECT r.rolname, p.proname || '()', a.privilege_type, NULL \
                   FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'public', \
                        aclexplode(p.proacl) a JOIN r ON r.oid = a.grantee) \
        SELECT rolname::text, object::text, privilege::text, col FROM whole ORDER BY 1, 2, 3, 4";
    let client = db.pool.get().await.unwrap();
    let roles: Vec<&str> = ROLES.to_vec();
    let rows = client.query(SQL, &[&roles]).await.unwrap();
    let order = |p: &str| ["SELECT", "INSERT", "UPDATE", "DELETE", "EXECUTE"].iter().position(|x| *x == p).unwrap_or(9);
    let mut grouped: std::collections::BTreeMap<(usize, String), Privileges> = Default::default();
    for row in rows {
        let (role, object, privilege, col): (String, String, String, Option<String>) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let role_at = ROLES.iter().position(|r| *r == role).unwrap();
        let privileges = grouped.entry((role_at, object)).or_default();
        let columns = privileges.entry((order(&privilege), privilege)).or_default();
        columns.extend(col);
    }
    let mut out = Vec::new();
    for ((role_at, object), privileges) in grouped {
        // A column grant beside the whole table's adds nothing.
        let shown: Vec<String> = privileges
            .into_iter()
            .map(|((_, p), cols)| if cols.is_empty() { p } else { format!("{p} ({})", cols.join(", ")) })
            .collect();
        out.push((ROLES[role_at].to_string(), object, shown.join(", ")));
    }
    out
}

/// The source of every SQL statement the functions run (the library and
/// the migrations' functions), `\`-continued lines joined and each
/// one-line `&str` constant (`{UNLOCK}`) written out where it is used.
fn statements_source() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    let mut dirs = vec![root.join("shared/src"), root.join("migrations")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs" || e == "sql") {
                files.push(std::fs::read_to_string(path).unwrap());
            }
        }
    }
    let mut text = files.join("\n");
    while let Some(at) = text.find("\\\n") {
        let rest = text[at + 2..].trim_start().to_string();
        text = format!("{} {rest}", &text[..at]);
    }
    let constants: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("const ")?;
            let (name, value) = l.split_once(": &str = \"")?;
            Some((format!("{{{name}}}"), value.strip_suffix("\";")?.to_string()))
        })
        .collect();
    for (name, value) in constants {
        text = text.replace(&name, &value);
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What of `s` is outside parentheses, up to the end of its SET clause.
fn set_clause(s: &str) -> String {
    let (mut depth, mut out) = (0i32, String::new());
    for (i, c) in s.char_indices() {
        if depth == 0 && [" WHERE ", " FROM ", " RETURNING ", "\"", ";"].iter().any(|w| s[i..].starts_with(w)) {
            break;
        }
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The columns some statement of the code sets in `table`: `UPDATE table
/// … SET col = …` and `INSERT INTO table … DO UPDATE SET col = …`.
fn written_columns(source: &str, table: &str) -> std::collections::BTreeSet<String> {
    let mut sets = Vec::new();
    for (start, _) in source.match_indices(&format!("UPDATE {table} ")) {
        sets.push(&source[start..]);
    }
    for (start, _) in source.match_indices(&format!("INSERT INTO {table} ")) {
        let statement = &source[start..];
        let statement = &statement[..statement.find(['"', ';']).unwrap_or(statement.len())];
        if let Some(at) = statement.find("DO UPDATE") {
            sets.push(&source[start + at..]);
        }
    }
    let mut written = std::collections::BTreeSet::new();
    for set in sets {
        let clause = set_clause(set);
        for (at, _) in clause.match_indices(" =") {
            let name: String = clause[..at].chars().rev().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            written.insert(name.chars().rev().collect());
        }
    }
    written
}

/// Low 4 of issue 37: every role's grants, read back from the database,
/// are the table in docs/security.md; a function role may UPDATE only
/// columns (never a whole table), and only columns a statement of the code
/// sets. The other tests of this file run each function's statements as
/// its role: the grants are enough.
#[tokio::test]
async fn each_roles_grants_are_the_documented_ones_and_update_only_written_columns() {
    let db = TestDb::create().await;
    let grants = grants_read_back(&db).await;
    let mut table = String::from("| role | object | privileges |\n|---|---|---|\n");
    for (role, object, privileges) in &grants {
        table.push_str(&format!("| `{role}` | `{object}` | {privileges} |\n"));
    }
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/security.md")).unwrap();
    let documented = docs
        .split_once("<!-- grants:begin -->\n")
        .and_then(|(_, rest)| rest.split_once("<!-- grants:end -->"))
        .map(|(t, _)| t)
        .expect("docs/security.md holds the grants table between <!-- grants:begin --> and <!-- grants:end -->");
    assert_eq!(documented, table, "docs/security.md's grants table is not what the database grants; it is:\n{table}");

    // The rows each policy passes (V39), beside the grants.
    const POLICIES: &str = "SELECT tablename::text, policyname::text, cmd, array_to_string(roles, ', ') \
                            FROM pg_policies WHERE schemaname = 'public' ORDER BY 1, 2";
    let mut table = String::from("| table | policy | statement | roles |\n|---|---|---|---|\n");
    for r in db.pool.get().await.unwrap().query(POLICIES, &[]).await.unwrap() {
        let (t, p, c, who): (String, String, String, String) = (r.get(0), r.get(1), r.get(2), r.get(3));
        table.push_str(&format!("| `{t}` | `{p}` | {c} | {who} |\n"));
    }
    let documented = docs
        .split_once("<!-- policies:begin -->\n")
        .and_then(|(_, rest)| rest.split_once("<!-- policies:end -->"))
        .map(|(t, _)| t)
        .expect("docs/security.md holds the row policies between <!-- policies:begin --> and <!-- policies:end -->");
    assert_eq!(documented, table, "docs/security.md's row policies are not the database's; they are:\n{table}");

    let source = statements_source();
    // Tables this release no longer touches, kept with their grants for the
    // release before until a later migration drops them (expand, then
    // contract: docs/deploy.md).
    const KEPT_FOR_THE_RELEASE_BEFORE: [&str; 1] = ["mailbox_newcomers"];
    let tables = grants.iter().filter(|g| {
        g.0 != "booking_app" && !g.1.ends_with(')') && !KEPT_FOR_THE_RELEASE_BEFORE.contains(&g.1.as_str())
    });
    for (role, object, privileges) in tables {
        for privilege in privileges.split(", ").filter(|p| p.starts_with("UPDATE")) {
            assert!(privilege.contains('('), "{role} may UPDATE every column of {object}");
        }
        let Some((_, columns)) = privileges.split_once("UPDATE (") else { continue };
        let columns = &columns[..columns.find(')').unwrap()];
        let written = written_columns(&source, object.trim_matches('`'));
        for column in columns.split(", ") {
            assert!(
                written.contains(column),
                "{role} may UPDATE {object}.{column}, which no statement sets: {written:?}"
            );
        }
    }
}

/// The attacks of Low 4: a compromised sweeper rewrites a DONE event's
/// recipients and text to have the poller mail them; a compromised poller
/// does the same; SES's events redirect a send. Each is refused.
#[tokio::test]
async fn no_role_can_rewrite_what_an_event_or_a_send_says() {
    let db = TestDb::create().await;
    let cases: [(&str, &[&str]); 3] = [
        (
            "outbox_sweeper",
            &[
                "UPDATE outbox_events SET payload = '{}'",
                "UPDATE outbox_events SET aggregate_id = gen_random_uuid()",
                "UPDATE booking_notification_sends SET recipient_email = 'x@example.com'",
                formatcp!("UPDATE booking_notification_sends SET status = {SENT}"),
            ],
        ),
        (
            "outbox_poller",
            &[
                "UPDATE outbox_events SET payload = '{}'",
                "UPDATE outbox_events SET event_type = 'BOOKING_CANCELLED'",
                "UPDATE booking_notification_sends SET recipient_email = 'x@example.com'",
                "UPDATE bookings SET status = 'CANCELLED'",
            ],
        ),
        (
            "ses_events",
            &[
                "UPDATE booking_notification_sends SET recipient_email = 'x@example.com'",
                "UPDATE booking_notification_sends SET outbox_event_id = gen_random_uuid()",
                "UPDATE booking_notification_sends SET left_for_operator = 'x'",
            ],
        ),
    ];
    for (role, statements) in cases {
        let client = db.role_pool(role).await.get().await.unwrap();
        for sql in statements {
            refused(&client, role, sql).await;
        }
    }
    let api = db.role_pool("booking_api").await.get().await.unwrap();
    refused(&api, "booking_api", "UPDATE bookings SET organizer_sub = 'sub-mallory'").await;
    refused(&api, "booking_api", "UPDATE bookings SET organizer_email = 'mallory@example.com'").await;
}
