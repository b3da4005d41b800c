//! `outboxctl` as an operator runs it: a real process against a real
//! database seeded into each state. Output and exit codes are asserted.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::{SENT, UNKNOWN};
use shared::outbox::events::status::sql::{DEAD, DONE, PENDING, PROCESSING};
use std::sync::Arc;

use outbox_tests::ctl::*;
use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::relay::PollerConfig;

/// Three bookings: one delivered, one dead (Carol refused until attempts
/// ran out, after Alice got hers), one with an UNKNOWN send; plus one row
/// stuck in PROCESSING.
async fn seeded() -> (TestDb, Arc<RecordingMailer>) {
    let db = TestDb::create().await;
    create_booking(&db, 1, &["dave@example.com"]).await;
    let mailer = seed_dead_and_unknown(&db, (2, 3)).await;
    create_booking(&db, 4, &["frank@example.com"]).await;
    let client = db.pool.get().await.unwrap();
    client
        .batch_execute(formatcp!(
            "UPDATE outbox_events SET status = {PROCESSING}, locked_by = 'dead-worker', attempts = 1, \
                    locked_at = now() - interval '1 hour' WHERE status = {PENDING}"
        ))
        .await
        .unwrap();
    (db, mailer)
}

async fn dead_id(db: &TestDb) -> String {
    db.scalar::<uuid::Uuid>(formatcp!("SELECT id FROM outbox_events WHERE status = {DEAD}")).await.to_string()
}

#[tokio::test]
async fn status_reports_lag_stuck_rows_dead_letters_and_send_outcomes() {
    let (db, _) = seeded().await;
    let out = ctl(&db, &["status", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let s = out.json();
    assert_eq!(s["events"]["DONE"], 2);
    assert_eq!(s["events"]["DEAD"], 1);
    assert_eq!(s["events"]["PROCESSING"], 1);
    assert_eq!(s["events"]["PENDING"], 0);
    assert_eq!(s["dead"], 1);
    assert_eq!(s["processing_past_sweep_timeout"], 1);
    assert!(s["oldest_due_pending_age_secs"].is_null());
    assert_eq!(s["sends"]["SENT"], 2);
    assert_eq!(s["sends"]["UNKNOWN"], 1);
    assert_eq!(s["sends"]["FAILED"], 0);

    let human = ctl(&db, &["status"]).await;
    assert_eq!(human.code, 0);
    assert!(human.stdout.contains("events:  PENDING 0  PROCESSING 1  DONE 2  DEAD 1"), "{}", human.stdout);
    assert!(human.stdout.contains("PROCESSING past the sweep timeout (300s): 1"));
    assert!(human.stdout.contains("sends:   SENT 2  FAILED 0  UNKNOWN 1  CLAIMED 0"));

    // A due PENDING event shows up as lag.
    create_booking(&db, 9, &["gus@example.com"]).await;
    let s = ctl(&db, &["status", "--json"]).await.json();
    assert!(s["oldest_due_pending_age_secs"].as_f64().unwrap() >= 0.0);
}

#[tokio::test]
async fn dead_list_and_show_explain_what_died_and_why() {
    let (db, _) = seeded().await;
    let id = dead_id(&db).await;
    let list = ctl(&db, &["dead", "list", "--json"]).await.json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], id);
    assert_eq!(list[0]["last_error"], "attempts exhausted (2): Throttling");
    let human = ctl(&db, &["dead", "list"]).await;
    assert!(human.stdout.contains(&id) && human.stdout.contains("attempts exhausted (2): Throttling"));

    let show = ctl(&db, &["dead", "show", &id, "--json"]).await.json();
    assert_eq!(show["event_type"], "BOOKING_CONFIRMED");
    assert_eq!(show["sends"], serde_json::json!([["alice@example.com", "SENT"]]));
    assert_eq!(show["payload"]["booking"]["title"], "Meeting 2");
    let missing = ctl(&db, &["dead", "show", &uuid::Uuid::now_v7().to_string()]).await;
    assert_one_line_error(&missing, 1, "no DEAD event with id");
}

#[tokio::test]
async fn replay_of_a_dead_event_delivers_once_to_each_recipient_not_yet_delivered() {
    let (db, mailer) = seeded().await;
    let id = dead_id(&db).await;
    let before = mailer.count();
    let out = ctl(&db, &["dead", "replay", &id]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("replayed 1 event(s)"));
    let (status, attempts, last_error) = event_status(&db, id.parse().unwrap()).await;
    assert_eq!((status, attempts), (EventStatus::Pending, 0), "fresh attempts");
    assert!(last_error.unwrap().starts_with("replayed by oncall@example.com"));
    let recorded: String = db.scalar("SELECT replayed_by FROM outbox_replays").await;
    assert_eq!(recorded, "oncall@example.com");

    poller(&db, mailer.clone(), PollerConfig::for_tests("after-replay")).drain().await.unwrap();
    let new: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(new, vec!["carol@example.com"], "Carol once; Alice already had hers");
    assert_eq!(event_status(&db, id.parse().unwrap()).await.0, EventStatus::Done);
}

#[tokio::test]
async fn replay_never_touches_an_event_that_is_not_dead() {
    let (db, _) = seeded().await;
    let done: uuid::Uuid = db.scalar(formatcp!("SELECT id FROM outbox_events WHERE status = {DONE} LIMIT 1")).await;
    let unknown = uuid::Uuid::now_v7();
    let out = ctl(&db, &["dead", "replay", &done.to_string(), &unknown.to_string()]).await;
    assert_one_line_error(&out, 1, &format!("{done} is DONE, not DEAD"));
    assert!(out.stderr.contains(&format!("{unknown} does not exist")));
    assert_eq!(event_status(&db, done).await.0, EventStatus::Done);
    assert_eq!(db.count("outbox_replays").await, 0);
}

#[tokio::test]
async fn replay_all_filters_by_type_and_time() {
    let (db, _) = seeded().await;
    let none = ctl(&db, &["dead", "replay", "--all", "--yes", "--type", "BOOKING_CANCELLED", "--json"]).await;
    assert_eq!(none.code, 0, "{}", none.stderr);
    assert_eq!(none.json(), serde_json::json!([]));
    let later = ctl(&db, &["dead", "replay", "--all", "--yes", "--since", "2099-01-01T00:00:00Z", "--json"]).await;
    assert_eq!(later.json(), serde_json::json!([]));
    let all = ctl(&db, &["dead", "replay", "--all", "--yes", "--type", "BOOKING_CONFIRMED", "--json"]).await;
    assert_eq!(all.json().as_array().unwrap().len(), 1);
    assert_eq!(event_counts(&db).await[&EventStatus::Dead], 0);
}

#[tokio::test]
async fn unknown_list_shows_possibly_lost_emails_and_resend_needs_the_explicit_flag() {
    let (db, mailer) = seeded().await;
    let list = ctl(&db, &["unknown", "list", "--json"]).await.json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["recipient"], "erin@example.com");
    assert_eq!(list[0]["status"], "UNKNOWN");
    let send_id = list[0]["id"].as_str().unwrap().to_string();

    let refused = ctl(&db, &["unknown", "resend", &send_id]).await;
    assert_one_line_error(&refused, 2, "--yes-i-accept-a-possible-duplicate");
    assert_eq!(db.count("notification_resends").await, 0, "nothing changed");

    let before = mailer.count();
    let ok = ctl(&db, &["unknown", "resend", &send_id, "--yes-i-accept-a-possible-duplicate"]).await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("will be re-sent"));
    let decided: String = db.scalar("SELECT decided_by FROM notification_resends").await;
    assert_eq!(decided, "oncall@example.com");
    poller(&db, mailer.clone(), PollerConfig::for_tests("after-resend")).drain().await.unwrap();
    let new: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(new, vec!["erin@example.com"]);
    assert!(ctl(&db, &["unknown", "list", "--json"]).await.json().as_array().unwrap().is_empty());

    // Resending a send that is SENT is refused.
    let sent: uuid::Uuid =
        db.scalar(formatcp!("SELECT id FROM booking_notification_sends WHERE status = {SENT} LIMIT 1")).await;
    let out = ctl(&db, &["unknown", "resend", &sent.to_string(), "--yes-i-accept-a-possible-duplicate"]).await;
    assert_one_line_error(&out, 1, "is SENT; only UNKNOWN");
}

#[tokio::test]
async fn sweep_dry_run_shows_what_the_sweeper_would_do_without_doing_it() {
    let (db, _) = seeded().await;
    let stuck: uuid::Uuid = db.scalar(formatcp!("SELECT id FROM outbox_events WHERE status = {PROCESSING}")).await;
    let dry = ctl(&db, &["sweep", "--dry-run"]).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains(&format!("would move {stuck} to PENDING (attempts 1, worker dead-worker)")),
        "{}",
        dry.stdout
    );
    assert_eq!(event_status(&db, stuck).await.0, EventStatus::Processing, "dry run changed nothing");
    let real = ctl(&db, &["sweep", "--json"]).await.json();
    assert_eq!(real[0]["to"], "PENDING");
    assert_eq!(event_status(&db, stuck).await.0, EventStatus::Pending);
}

#[tokio::test]
async fn migrate_applies_once_then_reports_up_to_date() {
    let db = TestDb::create_unmigrated().await;
    let first = ctl_with_url(&db.url, &["migrate"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.stdout.contains("applied V1__bookings_and_outbox"), "{}", first.stdout);
    assert_eq!(ctl_with_url(&db.url, &["migrate"]).stdout.trim(), "schema is up to date");
}

#[tokio::test]
async fn wrong_arguments_and_an_unreachable_database_give_one_line_errors() {
    let db = TestDb::create().await;
    assert_one_line_error(&ctl(&db, &["frobnicate"]).await, 2, "unrecognized subcommand");
    assert_one_line_error(&ctl(&db, &["dead", "show", "not-a-uuid"]).await, 2, "invalid value 'not-a-uuid'");
    assert_one_line_error(&ctl(&db, &["dead", "replay"]).await, 2, "required");
    assert_one_line_error(&ctl(&db, &["dead", "replay", "--all", "--type", "NOPE"]).await, 2, "unknown event type");
    assert_one_line_error(&ctl(&db, &["dead", "replay", "--all", "--since", "yesterday"]).await, 2, "RFC 3339");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = ctl_with_url(&format!("postgres://postgres@127.0.0.1:{port}/x"), &["status"]);
    assert_one_line_error(&out, 1, "cannot connect to the database");
    let out = ctl_with_url("not a url at all", &["status"]);
    assert_one_line_error(&out, 1, "DATABASE_URL cannot be parsed");
    let help = ctl(&db, &["--help"]).await;
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("dead") && help.stdout.contains("unknown") && help.stdout.contains("sweep"));
}

#[tokio::test]
async fn replay_all_needs_confirmation_shows_a_dry_run_and_has_a_cap() {
    let (db, _) = seeded().await;
    let id = dead_id(&db).await;
    assert_one_line_error(&ctl(&db, &["dead", "replay", "--all"]).await, 2, "needs --yes");
    let dry = ctl(&db, &["dead", "replay", "--all", "--dry-run", "--json"]).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert_eq!(dry.json()["replayed"], serde_json::json!([id]));
    let human = ctl(&db, &["dead", "replay", "--all", "--dry-run"]).await;
    assert!(human.stdout.contains("would replay 1 event(s)") && human.stdout.contains(&id), "{}", human.stdout);
    assert_eq!(event_status(&db, id.parse().unwrap()).await.0, EventStatus::Dead, "a dry run changes nothing");
    assert_eq!(db.count("outbox_replays").await, 0);
    let capped = ctl(&db, &["dead", "replay", "--all", "--yes", "--max", "0"]).await;
    assert_one_line_error(&capped, 1, "1 DEAD events match, more than the cap of 0");
    assert_eq!(event_status(&db, id.parse().unwrap()).await.0, EventStatus::Dead, "refused whole");
    let ok = ctl(&db, &["dead", "replay", "--all", "--yes"]).await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert_eq!(event_status(&db, id.parse().unwrap()).await.0, EventStatus::Pending);
}

#[tokio::test]
async fn replay_skips_an_event_superseded_by_a_later_delivered_one() {
    let db = TestDb::create().await;
    let booking = create_booking(&db, 1, &["alice@example.com"]).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("alice@example.com", refused(), 1);
    let p = poller(&db, mailer.clone(), one_attempt("w"));
    p.drain().await.unwrap();
    // The booking is cancelled, and the cancellation is delivered.
    let service = shared::booking::service::BookingService::new(
        db.pool.clone(),
        shared::fault::Faults::none(),
        shared::booking::limits::Limits::UNLIMITED,
    );
    service.cancel(&organizer(), booking.id, None).await.unwrap();
    p.drain().await.unwrap();
    let events = events_of(&db, booking.id).await;
    let (invite, cancel) = (&events[0], &events[1]);
    assert_eq!((invite.status, cancel.status), (EventStatus::Dead, EventStatus::Done));
    // Replaying the invitation now would invite Alice to a cancelled meeting.
    let all = ctl(&db, &["dead", "replay", "--all", "--yes", "--json"]).await;
    assert_eq!(all.code, 0, "{}", all.stderr);
    assert_eq!(all.json(), serde_json::json!([]));
    assert!(
        all.stderr.contains("skipped 1 superseded") && all.stderr.contains(&invite.id.to_string()),
        "{}",
        all.stderr
    );
    let one = ctl(&db, &["dead", "replay", &invite.id.to_string()]).await;
    assert_one_line_error(&one, 1, "is superseded by a later delivered event of its aggregate");
    assert_eq!(event_status(&db, invite.id).await.0, EventStatus::Dead);
    let before = mailer.count();
    p.drain().await.unwrap();
    assert_eq!(mailer.count(), before, "nothing stale was sent");
}

#[tokio::test]
async fn unknown_resend_sends_only_the_named_recipient() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &["alice@example.com", "carol@example.com"]).await;
    let event = only_event_id(&db).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("alice@example.com", SendOutcome::Unknown { reason: "read timeout".into() }, 1);
    let p = poller(&db, mailer.clone(), PollerConfig::for_tests("w"));
    p.drain().await.unwrap();
    // Carol's claim is gone (say, removed by hand): a resend of Alice's must
    // still not reach Carol again.
    db.scalar::<i64>(
        "WITH d AS (DELETE FROM booking_notification_sends WHERE recipient_email = 'carol@example.com' RETURNING 1) \
         SELECT count(*) FROM d",
    )
    .await;
    let send_id = ctl(&db, &["unknown", "list", "--json"]).await.json()[0]["id"].as_str().unwrap().to_string();
    let ok = ctl(&db, &["unknown", "resend", &send_id, "--yes-i-accept-a-possible-duplicate"]).await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let before = mailer.count();
    p.drain().await.unwrap();
    let new: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(new, vec!["alice@example.com"], "exactly the one recipient named");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
    let pending: i64 = db.scalar("SELECT count(*) FROM notification_resends WHERE resent_at IS NULL").await;
    assert_eq!(pending, 0, "the decision is carried out once");
    p.drain().await.unwrap();
    assert_eq!(mailer.count(), before + 1, "and only once");
}

#[tokio::test]
async fn unknown_resend_of_a_dead_event_asks_for_a_replay_first() {
    let (db, _) = seeded().await;
    // Carol's event is DEAD; mark Alice's send on it UNKNOWN to ask for it.
    let dead = dead_id(&db).await;
    db.scalar::<i64>(&format!(
        "WITH u AS (UPDATE booking_notification_sends SET status = {UNKNOWN}, last_error = 'the mailer timed out' WHERE outbox_event_id = '{dead}' RETURNING 1) \
         SELECT count(*) FROM u"
    ))
    .await;
    let send = ctl(&db, &["unknown", "list", "--json"])
        .await
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["event_id"] == dead.as_str())
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = ctl(&db, &["unknown", "resend", &send, "--yes-i-accept-a-possible-duplicate"]).await;
    assert_one_line_error(&out, 1, "is DEAD: replay it first");
    assert_eq!(db.count("notification_resends").await, 0);
}
