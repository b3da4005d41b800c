//! The stack's operator function (functions/outbox-operator) runs
//! `outboxctl::invoke` with the event's `args`, logged in as the operator
//! login the stack makes in `outbox_operator` (V31). Here that handler runs
//! every command an operator needs against a real database as that role:
//! its grants are enough, what it answers is what the CLI prints, and what
//! it must not do (migrate, bad arguments) is one line and changes nothing.

use const_format::formatcp;
use outbox_tests::ctl::seed_dead_and_unknown;
use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use serde_json::Value;
use shared::outbox::events::status::sql::PROCESSING;
use shared::relay::PollerConfig;

async fn invoke(pool: &deadpool_postgres::Pool, args: &[&str]) -> Result<Value, String> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    outboxctl::invoke(&args, pool, "operator function, request r-1").await.map(|a| a.output)
}

#[tokio::test]
async fn the_operator_function_runs_each_command_as_the_operators_role_and_never_migrates() {
    let db = TestDb::create().await;
    let mailer = seed_dead_and_unknown(&db, (1, 2)).await;
    let op = db.operator_pool().await;
    let who: String = op.get().await.unwrap().query_one("SELECT current_user", &[]).await.unwrap().get(0);
    let member: bool = db
        .pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT pg_has_role($1, 'outbox_operator', 'MEMBER') AND NOT pg_has_role($1, 'booking_app', 'MEMBER')",
            &[&who],
        )
        .await
        .unwrap()
        .get(0);
    assert!(member, "{who} is an operator login, nothing more");

    // status, as text lines and as JSON.
    let text = invoke(&op, &["status"]).await.unwrap();
    let lines: Vec<&str> = text.as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(lines[0].starts_with("events:") && lines[0].contains("DEAD 1"), "{lines:?}");
    let json = invoke(&op, &["status", "--json"]).await.unwrap();
    assert_eq!(json["events"]["DEAD"], 1, "{json}");

    // dead list, show, replay: recorded as the invocation, or --operator.
    let dead = invoke(&op, &["dead", "list", "--json"]).await.unwrap();
    let id = dead[0]["id"].as_str().unwrap().to_string();
    let shown = invoke(&op, &["dead", "show", &id, "--json"]).await.unwrap();
    assert_eq!(shown["id"], id.as_str(), "{shown}");
    invoke(&op, &["dead", "replay", &id]).await.unwrap();
    let by: String = db.scalar("SELECT replayed_by FROM outbox_replays").await;
    assert_eq!(by, "operator function, request r-1");
    poller(&db, mailer.clone(), PollerConfig::for_tests("after-replay")).drain().await.unwrap();
    assert_eq!(mailer.deliveries().iter().filter(|d| d.recipient == "carol@example.com").count(), 1);

    // unknown list and resend (the flag is still required).
    let unknown = invoke(&op, &["unknown", "list", "--json"]).await.unwrap();
    let send = unknown[0]["id"].as_str().unwrap().to_string();
    let refused = invoke(&op, &["unknown", "resend", &send]).await.unwrap_err();
    assert!(refused.contains("--yes-i-accept-a-possible-duplicate") && !refused.contains('\n'), "{refused}");
    invoke(
        &op,
        &["--operator", "oncall@example.com", "unknown", "resend", &send, "--yes-i-accept-a-possible-duplicate"],
    )
    .await
    .unwrap();
    let decided: String = db.scalar("SELECT decided_by FROM notification_resends").await;
    assert_eq!(decided, "oncall@example.com (operator function, request r-1)", "who said, and the invocation");
    invoke(&op, &["unknown", "resend", "--unconfirmed", "--dry-run"]).await.unwrap();

    // suppression list and remove.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute("INSERT INTO suppressed_addresses (email, mailbox, reason) VALUES ('dave@example.com', 'dave@example.com', 'complained')")
        .await
        .unwrap();
    assert_eq!(invoke(&op, &["suppression", "list", "--json"]).await.unwrap().as_array().unwrap().len(), 1);
    invoke(&op, &["suppression", "remove", "dave@example.com"]).await.unwrap();
    assert_eq!(db.count("suppressed_addresses").await, 0);

    // sweep, dry and real, on a row a dead poller left.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute(formatcp!(
            "UPDATE outbox_events SET status = {PROCESSING}, locked_by = 'dead-worker', attempts = 1, \
                    locked_at = now() - interval '1 hour' WHERE id = (SELECT id FROM outbox_events LIMIT 1)"
        ))
        .await
        .unwrap();
    let dry = invoke(&op, &["sweep", "--dry-run"]).await.unwrap();
    assert!(dry.to_string().contains("would move"), "{dry}");
    let swept = invoke(&op, &["sweep", "--json"]).await.unwrap();
    assert_eq!(swept[0]["to"], "PENDING", "{swept}");

    // Never a migration (a deploy migrates, as the owner); bad arguments
    // are one line; help is an answer.
    let before: i64 = db.scalar("SELECT count(*) FROM outbox_events").await;
    let migrate = invoke(&op, &["migrate"]).await.unwrap_err();
    assert!(migrate.contains("every deploy migrates"), "{migrate}");
    for bad in [&["frobnicate"][..], &["dead", "show", "not-a-uuid"], &["dead", "replay", "--all"]] {
        let e = invoke(&op, bad).await.unwrap_err();
        assert!(!e.contains('\n') && e.ends_with("(see --help)"), "{bad:?}: {e}");
    }
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM outbox_events").await, before);
    let help = invoke(&op, &["--help"]).await.unwrap();
    assert!(help.to_string().contains("status"), "{help}");
}
