//! Where each notification stands, as the API shows it: `GET
//! /bookings/{id}/notifications` (the organizer sees every recipient, an
//! attendee their own, anyone else 404) and the `notifications` of `GET
//! /bookings/{id}` for the organizer. Driven through every state by the
//! real poller, a real crash, the sweeper and SES's own events.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::FAILED;
use std::sync::Arc;

use outbox_tests::api::{Caller, TestApi, ALICE, BOB, EVE};
use outbox_tests::outbox::{killed, message_id_of, one_attempt, poller, refused, sweep_after_timeout, Worker};
use outbox_tests::ses_events::*;
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::notify::deliver::FAULT_AFTER_SEND_CLAIM;
use shared::notify::evidence::intake;
use shared::notify::evidence::intake::Handled;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::relay::PollerConfig;
use uuid::Uuid;

const DAVE: Caller<'static> = Caller { email: "dave@example.com", name: "Dave Attendee", sub: "sub-dave" };

fn person(email: &str) -> Value {
    json!({"email": email, "name": email.split('@').next().unwrap()})
}

async fn create(api: &TestApi, hour: u32, attendees: &[&str]) -> String {
    let mut body = outbox_tests::api::booking_body(hour);
    body["attendees"] = attendees.iter().map(|a| person(a)).collect();
    let resp = api.post("/bookings", BOB, &body).await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    resp.body["id"].as_str().unwrap().to_string()
}

async fn notifications(api: &TestApi, booking: &str, caller: Caller<'_>) -> Vec<Value> {
    let resp = api.get(&format!("/bookings/{booking}/notifications"), caller).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.body["booking_id"], json!(booking));
    resp.body["notifications"].as_array().unwrap().clone()
}

/// `(version, recipient, state)` of each row.
fn states(rows: &[Value]) -> Vec<(i64, String, String)> {
    rows.iter()
        .map(|r| {
            (
                r["version"].as_i64().unwrap(),
                r["recipient"].as_str().unwrap().into(),
                r["state"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn row<'a>(rows: &'a [Value], recipient: &str) -> &'a Value {
    rows.iter().find(|r| r["recipient"] == recipient).unwrap_or_else(|| panic!("no row for {recipient}: {rows:?}"))
}

async fn claim_of(db: &TestDb, booking: &str, recipient: &str) -> Uuid {
    let client = db.pool.get().await.unwrap();
    let booking = Uuid::parse_str(booking).unwrap();
    client
        .query_one(
            "SELECT id FROM booking_notification_sends WHERE booking_id = $1 AND recipient_email = $2",
            &[&booking, &recipient],
        )
        .await
        .unwrap()
        .get(0)
}

async fn ses(db: &TestDb, event: Value) {
    let handled = intake::handle(&db.pool, &origin(), &event).await.unwrap();
    assert!(matches!(handled, Handled::Recorded(_)), "{handled:?}");
}

#[tokio::test]
async fn an_unknown_send_reads_pending_sending_unknown_then_sent_and_delivered_as_ses_confirms_it() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let id = create(&api, 9, &[ALICE.email]).await;
    let alice = ALICE.email;
    assert_eq!(states(&notifications(&api, &id, BOB).await), vec![(1, alice.into(), "pending".into())]);

    // A real crash between the committed claim and the SES call.
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let kill = format!("{FAULT_AFTER_SEND_CLAIM}=kill");
    assert!(killed(worker.run(&db, &kill, &[]).await));
    assert_eq!(states(&notifications(&api, &id, BOB).await), vec![(1, alice.into(), "sending".into())]);

    // The sweeper returns the event; the next run finds the orphaned claim
    // and keeps it, unknown, rather than risk a second email.
    sweep_after_timeout(&db, 8).await;
    assert!(worker.run(&db, "", &[]).await.success());
    assert!(worker.sent().is_empty());
    let rows = notifications(&api, &id, BOB).await;
    assert_eq!(states(&rows), vec![(1, alice.into(), "unknown".into())]);
    assert_eq!(rows[0]["confirmed_by_ses"], json!(false));
    assert!(rows[0]["detail"].as_str().unwrap().contains("awaiting SES's evidence"), "{}", rows[0]);

    // SES's Send event proves it accepted the message, then it delivers.
    let claim = claim_of(&db, &id, alice).await;
    ses(&db, send_event(claim)).await;
    let rows = notifications(&api, &id, BOB).await;
    assert_eq!((rows[0]["state"].as_str(), &rows[0]["confirmed_by_ses"]), (Some("sent"), &json!(true)));
    ses(&db, delivery_event(claim)).await;
    let rows = notifications(&api, &id, BOB).await;
    assert_eq!(states(&rows), vec![(1, alice.into(), "delivered".into())]);
    assert_eq!(rows[0]["confirmed_by_ses"], json!(true));
    assert_eq!(rows[0]["at"], json!("2026-11-30T12:00:02.345Z"), "the time SES delivered it");

    // The organizer sees the same in the booking itself; the attendee sees
    // her own row only through the notifications; anyone else 404.
    let read = api.get(&format!("/bookings/{id}"), BOB).await;
    assert_eq!(read.body["notifications"], json!(rows));
    let as_alice = api.get(&format!("/bookings/{id}"), ALICE).await;
    assert_eq!(as_alice.status, 200);
    assert!(as_alice.body.get("notifications").is_none(), "{}", as_alice.body);
    assert_eq!(notifications(&api, &id, ALICE).await, rows);
    let as_eve = api.get(&format!("/bookings/{id}/notifications"), EVE).await;
    assert_eq!(as_eve.status, 404, "{}", as_eve.body);
}

#[tokio::test]
async fn each_recipient_is_shown_where_their_notification_ended() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mut config = PollerConfig::for_tests("w");
    config.recipient_limits =
        shared::notify::pacing::recipient_limit::RecipientLimits { invitations_per_organizer: 1, new_organizers: 10 };
    let mailer = Arc::new(RecordingMailer::new());
    // Earlier today: Ivan was mailed his one mail, and Heidi complained.
    let earlier = create(&api, 8, &["heidi@example.com", "ivan@example.com"]).await;
    poller(&db, mailer.clone(), config.clone()).drain().await.unwrap();
    let heidi = claim_of(&db, &earlier, "heidi@example.com").await;
    let complaint = to_recipient(complaint_event(heidi, &[ALICE.email]), "heidi@example.com");
    ses(&db, with_message_id(complaint, &message_id_of(&db, heidi).await)).await;

    let everyone = [
        "alice@example.com",
        "carol@example.com",
        "dave@example.com",
        "erin@example.com",
        "frank@example.com",
        "grace@example.com",
        "heidi@example.com",
        "ivan@example.com",
        "judy@example.com",
    ];
    let id = create(&api, 9, &everyone).await;
    let pending = notifications(&api, &id, BOB).await;
    assert!(pending.iter().all(|r| r["state"] == "pending" && r["version"] == 1), "{pending:?}");
    assert_eq!(pending.len(), everyone.len());

    mailer.script("erin@example.com", SendOutcome::Unknown { reason: "read timeout".into() }, 1);
    mailer.script("frank@example.com", SendOutcome::Rejected { reason: "MessageRejected: bad address".into() }, 1);
    poller(&db, mailer.clone(), config).drain().await.unwrap();
    for (who, event) in [
        ("alice@example.com", delivery_event as fn(Uuid) -> Value),
        ("grace@example.com", |c| complaint_event(c, &[ALICE.email])),
        ("carol@example.com", |c| bounce_event(c, "Permanent", "General")),
        ("dave@example.com", |c| ses_event("Reject", Some(c), Some(json!({"reason": "Bad content"})))),
    ] {
        let claim = claim_of(&db, &id, who).await;
        ses(&db, with_message_id(to_recipient(event(claim), who), &message_id_of(&db, claim).await)).await;
    }

    let rows = notifications(&api, &id, BOB).await;
    let got: Vec<(&str, &str)> =
        rows.iter().map(|r| (r["recipient"].as_str().unwrap(), r["state"].as_str().unwrap())).collect();
    assert_eq!(
        got,
        vec![
            ("alice@example.com", "delivered"),
            ("carol@example.com", "not_delivered"),
            ("dave@example.com", "failed"),
            ("erin@example.com", "unknown"),
            ("frank@example.com", "failed"),
            ("grace@example.com", "delivered"),
            ("heidi@example.com", "not_delivered"),
            ("ivan@example.com", "capped"),
            ("judy@example.com", "sent"),
        ]
    );
    // What the organizer sees of each attendee's history: nothing.
    assert_eq!(row(&rows, "carol@example.com")["detail"], json!("not delivered to this address"));
    assert_eq!(row(&rows, "grace@example.com")["detail"], json!(null));
    assert_eq!(row(&rows, "dave@example.com")["detail"], json!("SES rejected the message"));
    assert_eq!(row(&rows, "judy@example.com")["confirmed_by_ses"], json!(false), "the provider's own answer");
    assert_eq!(row(&rows, "heidi@example.com")["detail"], json!("not delivered to this address"));
    // Low 10 of issue 52: a bounce (Carol: SES had the message, then its
    // event said so) reads as a suppression (Heidi: never sent), down to
    // whether SES's event settled it.
    for key in ["state", "detail", "confirmed_by_ses"] {
        assert_eq!(row(&rows, "carol@example.com")[key], row(&rows, "heidi@example.com")[key], "{key}");
    }
    let frank = row(&rows, "frank@example.com")["detail"].as_str().unwrap().to_string();
    assert!(!frank.contains("MessageRejected"), "the provider's words stay in the logs: {frank}");
    for r in &rows {
        assert!(r["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{r}");
        assert_eq!(r["event_type"], json!("BOOKING_CONFIRMED"));
    }
}

#[tokio::test]
async fn a_superseded_notification_is_shown_and_each_attendee_sees_only_their_own() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let id = create(&api, 9, &[ALICE.email, "carol@example.com"]).await;
    // Before any poller runs: Carol is replaced by Dave.
    let patch = json!({"version": 1, "attendees": [person(ALICE.email), person(DAVE.email)]});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&patch.to_string())).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    let before = notifications(&api, &id, BOB).await;
    assert_eq!(before.len(), 5, "two recipients of version 1, three of version 2: {before:?}");
    poller(&db, Arc::new(RecordingMailer::new()), PollerConfig::for_tests("w")).drain().await.unwrap();

    let all = notifications(&api, &id, BOB).await;
    assert_eq!(
        states(&all),
        vec![
            (1, ALICE.email.into(), "superseded".into()),
            (1, "carol@example.com".into(), "superseded".into()),
            (2, ALICE.email.into(), "sent".into()),
            (2, "carol@example.com".into(), "superseded".into()),
            (2, DAVE.email.into(), "sent".into()),
        ]
    );
    assert!(all[0]["detail"].as_str().unwrap().contains("superseded by the later BOOKING_UPDATED"), "{}", all[0]);
    assert!(all[3]["detail"].as_str().unwrap().contains("nothing to cancel"), "{}", all[3]);
    let alice: Vec<Value> = all.iter().filter(|r| r["recipient"] == ALICE.email).cloned().collect();
    assert_eq!(notifications(&api, &id, ALICE).await, alice);
    let dave: Vec<Value> = all.iter().filter(|r| r["recipient"] == DAVE.email).cloned().collect();
    assert_eq!(notifications(&api, &id, DAVE).await, dave);
    let carol = Caller { email: "carol@example.com", name: "Carol", sub: "sub-carol" };
    assert_eq!(api.get(&format!("/bookings/{id}/notifications"), carol).await.status, 404, "no longer an attendee");
}

#[tokio::test]
async fn a_dead_lettered_notification_reads_failed() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let id = create(&api, 9, &[ALICE.email]).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(ALICE.email, refused(), 1);
    poller(&db, mailer, one_attempt("w")).drain().await.unwrap();
    let rows = notifications(&api, &id, BOB).await;
    assert_eq!(states(&rows), vec![(1, ALICE.email.into(), "failed".into())]);
    assert_eq!(rows[0]["detail"], json!("the event was dead-lettered"));
}

/// Low 6 of issue 37, as the attack: Eve invites Dave to learn what he did
/// with other people's mail. Dave complained about Bob's invitation; Eve's
/// is suppressed, and she is told only that it was not delivered. Dave
/// sees why on his own row, and operators keep the reason.
#[tokio::test]
async fn an_organizer_learns_nothing_of_an_attendees_history_with_other_organizers() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let bobs = create(&api, 8, &[DAVE.email]).await;
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let claim = claim_of(&db, &bobs, DAVE.email).await;
    let complaint = to_recipient(complaint_event(claim, &[DAVE.email]), DAVE.email);
    ses(&db, with_message_id(complaint, &message_id_of(&db, claim).await)).await;

    let mut body = outbox_tests::api::booking_body(11);
    body["attendees"] = json!([person(DAVE.email)]);
    let eves = api.post("/bookings", EVE, &body).await;
    assert_eq!(eves.status, 201, "{}", eves.body);
    let eves = eves.body["id"].as_str().unwrap().to_string();
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();

    let seen_by_eve = notifications(&api, &eves, EVE).await;
    assert_eq!(states(&seen_by_eve), vec![(1, DAVE.email.to_string(), "not_delivered".to_string())]);
    let shown = seen_by_eve[0].to_string();
    for word in ["complain", "bounce", "suppress", "spam"] {
        assert!(!shown.contains(word), "the organizer is told nothing of why: {shown}");
    }
    let seen_by_dave = notifications(&api, &eves, DAVE).await;
    assert_eq!(seen_by_dave[0]["state"], "suppressed", "{seen_by_dave:?}");
    assert_eq!(seen_by_dave[0]["detail"], "suppressed: the address complained earlier");
    // Bob's own invitation: delivered, as far as Bob is told.
    assert_eq!(notifications(&api, &bobs, BOB).await[0]["state"], "delivered");
    let kept: String =
        db.scalar(formatcp!("SELECT last_error FROM booking_notification_sends WHERE status = {FAILED}")).await;
    assert_eq!(kept, "suppressed: the address complained earlier", "operators keep the reason");
}
