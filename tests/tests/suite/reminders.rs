//! Reminders that follow the meeting (docs/reminders.md): written with the
//! booking, due at start − offset in a lane of their own, superseded by any
//! later change, never sent after a cancel, never after the start, never
//! twice, and never an iTIP message. "Time passes" here by moving a
//! reminder's due time to now (`make_due`), the one thing a test cannot
//! wait for.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::{SENT, SUPERSEDED, UNKNOWN};
use shared::outbox::events::status::sql::{DEAD, DONE, PENDING};
use std::sync::Arc;

use chrono::{DateTime, DurationRound, Utc};
use outbox_tests::api::{TestApi, ALICE, BOB};
use outbox_tests::outbox::{killed, one_attempt, poller, refused, sweep_after_timeout, Worker};
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::booking::events::{EventType, Notice};
use shared::notify::deliver::FAULT_AFTER_SEND_CLAIM;
use shared::notify::mailer::recording::RecordingMailer;
use shared::relay::PollerConfig;

const CAROL: &str = "carol@example.com";
const DAVE: &str = "dave@example.com";

/// A whole minute `minutes` from now.
fn at(minutes: i64) -> DateTime<Utc> {
    (Utc::now() + chrono::Duration::minutes(minutes)).duration_trunc(chrono::Duration::minutes(1)).unwrap()
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn body(start: DateTime<Utc>, attendees: &[&str], reminders: Value) -> Value {
    let people: Vec<Value> = attendees.iter().map(|a| json!({"email": a, "name": "Someone"})).collect();
    json!({
        "title": "Planning", "start": stamp(start), "end": stamp(start + chrono::Duration::minutes(30)),
        "timezone": "Europe/Paris", "attendees": people, "location": "https://meet.example.com/planning",
        "reminders": reminders,
    })
}

async fn create(api: &TestApi, body: &Value) -> Value {
    let created = api.post("/bookings", BOB, body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    created.body
}

async fn patch(api: &TestApi, id: &str, version: i64, mut change: Value) -> Value {
    change["version"] = json!(version);
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&change.to_string())).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    resp.body
}

async fn cancel(api: &TestApi, id: &str) {
    let resp = api.send("POST", &format!("/bookings/{id}/cancel"), Some(BOB), &[], None).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
}

/// The reminder events: (version, due, status), by due time.
async fn reminder_events(db: &TestDb) -> Vec<(i32, DateTime<Utc>, String)> {
    let client = db.pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT aggregate_version, next_attempt_at, status FROM outbox_events \
              WHERE event_type = 'BOOKING_REMINDER' ORDER BY next_attempt_at, aggregate_version",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
}

/// Time passes: every PENDING reminder due before `until` is due now.
async fn make_due(db: &TestDb, until: DateTime<Utc>) {
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            formatcp!(
                "UPDATE outbox_events SET next_attempt_at = now() \
              WHERE event_type = 'BOOKING_REMINDER' AND status = {PENDING} AND next_attempt_at <= $1"
            ),
            &[&until],
        )
        .await
        .unwrap();
}

/// Drains; a reminder that waited for its booking's earlier events (due
/// again 5 s later) is let through at once.
async fn drain(db: &TestDb, mailer: &Arc<RecordingMailer>) {
    for _ in 0..3 {
        let summary = poller(db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
        if summary.waiting == 0 {
            return;
        }
        let client = db.pool.get().await.unwrap();
        client
            .execute(
                formatcp!(
                    "UPDATE outbox_events SET next_attempt_at = now() \
                  WHERE event_type = 'BOOKING_REMINDER' AND status = {PENDING} \
                    AND next_attempt_at <= now() + interval '10 seconds'"
                ),
                &[],
            )
            .await
            .unwrap();
    }
}

/// Who got a reminder, and the start it named, in order.
fn reminded(mailer: &RecordingMailer) -> Vec<(String, i32)> {
    mailer
        .deliveries()
        .iter()
        .filter(|d| d.event_type == EventType::BookingReminder)
        .inspect(|d| assert_eq!(d.notice, Notice::Reminder))
        .map(|d| (d.recipient.clone(), d.sequence))
        .collect()
}

fn sorted(mut v: Vec<(String, i32)>) -> Vec<(String, i32)> {
    v.sort();
    v
}

async fn superseded_reasons(db: &TestDb) -> Vec<String> {
    let client = db.pool.get().await.unwrap();
    let rows = client
        .query(
            formatcp!(
                "SELECT last_error FROM booking_notification_sends \
              WHERE event_type = 'BOOKING_REMINDER' AND status = {SUPERSEDED} ORDER BY recipient_email"
            ),
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn a_reminder_is_sent_at_its_time_to_every_attendee_once() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    let booking = create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT15M", "PT1H"]))).await;
    assert_eq!(booking["reminders"], json!(["PT1H", "PT15M"]), "earliest first, in one form");
    let due: Vec<DateTime<Utc>> = reminder_events(&db).await.iter().map(|e| e.1).collect();
    assert_eq!(due, vec![start - chrono::Duration::hours(1), start - chrono::Duration::minutes(15)]);

    drain(&db, &mailer).await;
    assert_eq!(mailer.count(), 2, "the invitations go at once; the reminders are not due");
    assert!(reminded(&mailer).is_empty());

    make_due(&db, start).await;
    drain(&db, &mailer).await;
    drain(&db, &mailer).await;
    let want = vec![(ALICE.email.to_string(), 1), (ALICE.email.to_string(), 1), (CAROL.into(), 1), (CAROL.into(), 1)];
    assert_eq!(sorted(reminded(&mailer)), want, "each reminder once to each attendee");
    assert!(reminder_events(&db).await.iter().all(|e| e.2 == "DONE"));
}

#[tokio::test]
async fn a_reminder_is_text_only_and_never_changes_the_calendar_entry() {
    let booking: shared::booking::domain::Booking = serde_json::from_value(json!({
        "id": "01937a4e-8f2b-7c3d-9a1e-5b6c7d8e9f01", "title": "Planning", "description": null,
        "location": "https://meet.example.com/planning",
        "start": "2027-03-01T09:00:00Z", "end": "2027-03-01T09:30:00Z", "timezone": "Europe/Paris",
        "organizer": {"email": "bob@example.com", "name": "Bob"},
        "attendees": [{"email": "alice@example.com", "name": "Alice"}], "reminders": ["PT15M"],
        "status": "CONFIRMED", "version": 1,
        "created_at": "2027-02-10T10:15:30Z", "updated_at": "2027-02-10T10:15:30Z"
    }))
    .unwrap();
    let payload = shared::booking::events::EventPayload {
        reminder: booking.reminders.iter().next(),
        ..shared::booking::events::EventPayload::of(booking.clone())
    };
    let event = shared::booking::events::BookingEvent {
        id: uuid::Uuid::now_v7(),
        event_type: EventType::BookingReminder,
        payload,
        trace_id: None,
    };
    let (person, notice) = event.audience().pop().unwrap();
    assert_eq!(notice, Notice::Reminder);
    let n = shared::notify::notification::Notification::new(&event, person, notice, false);
    let sender = shared::notify::render::invite::Sender::parse("Bookings <bookings@example.com>").unwrap();
    let raw = String::from_utf8(shared::notify::render::invite::build(&n, &sender)).unwrap();
    assert!(!raw.contains("text/calendar") && !raw.contains("METHOD"), "no iTIP part: {raw}");
    assert!(raw.contains("Subject: Reminder: Planning @ Mon 1 Mar 2027 10:00 (CET)"), "{raw}");
    let card = shared::notify::render::card::Card::of(&n);
    let text = shared::notify::render::page::text(&card);
    assert!(text.contains("starts in 15 minutes"), "{text}");
    assert!(text.contains("Where: https://meet.example.com/planning"), "{text}");
    let html = shared::notify::render::page::html(&card);
    assert!(html.contains("<a href=\"https://meet.example.com/planning\""), "a link: {html}");
    assert!(shared::notify::render::calendar::ics(&n).is_none());
}

#[tokio::test]
async fn a_reschedule_before_the_reminder_supersedes_it_and_the_new_one_goes_at_the_new_time() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let (start, moved) = (at(120), at(240));
    let booking = create(&api, &body(start, &[ALICE.email], json!(["PT30M"]))).await;
    let id = booking["id"].as_str().unwrap();
    drain(&db, &mailer).await;
    patch(&api, id, 1, json!({"start": stamp(moved), "end": stamp(moved + chrono::Duration::minutes(30))})).await;
    let events = reminder_events(&db).await;
    assert_eq!(
        events.iter().map(|e| (e.0, e.1)).collect::<Vec<_>>(),
        vec![(1, start - chrono::Duration::minutes(30)), (2, moved - chrono::Duration::minutes(30))]
    );
    drain(&db, &mailer).await;
    assert_eq!(mailer.count(), 2, "the update went at once, no reminder yet");

    // The old time comes: its reminder is superseded, not sent.
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert!(reminded(&mailer).is_empty());
    let reasons = superseded_reasons(&db).await;
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].contains("the meeting moved (version 2): the reminders of its new time replace this one"),
        "{reasons:?}"
    );

    // The new time comes: one reminder, about the meeting as it now stands.
    make_due(&db, moved).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer), vec![(ALICE.email.to_string(), 2)]);
    let sent = mailer.deliveries().into_iter().find(|d| d.event_type == EventType::BookingReminder).unwrap();
    let event = shared::outbox::events::get(&db.pool.get().await.unwrap(), sent.event_id).await.unwrap().unwrap();
    assert_eq!(event.payload["booking"]["start"], stamp(moved));
}

#[tokio::test]
async fn a_cancel_before_the_reminder_sends_no_reminder() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    let booking = create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT1H", "PT15M"]))).await;
    drain(&db, &mailer).await;
    cancel(&api, booking["id"].as_str().unwrap()).await;
    assert_eq!(reminder_events(&db).await.len(), 2, "a cancel writes no reminder");
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert!(reminded(&mailer).is_empty());
    let reasons = superseded_reasons(&db).await;
    assert_eq!(reasons.len(), 4, "each reminder of each attendee recorded, not sent: {reasons:?}");
    assert!(reasons.iter().all(|r| r.contains("the booking was cancelled (version 2): no reminder")), "{reasons:?}");
}

#[tokio::test]
async fn an_attendee_removed_gets_no_reminder_and_one_added_gets_those_still_ahead() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    // In 90 minutes: the 2-hour reminder's time has passed already.
    let start = at(90);
    let booking = create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT2H", "PT15M"]))).await;
    let id = booking["id"].as_str().unwrap();
    assert_eq!(reminder_events(&db).await.len(), 1, "only the reminder still ahead is written");
    drain(&db, &mailer).await;
    let people = json!([{"email": ALICE.email, "name": "Alice"}, {"email": DAVE, "name": "Dave"}]);
    patch(&api, id, 1, json!({"attendees": people})).await;
    drain(&db, &mailer).await;
    let pending: Vec<(i32, DateTime<Utc>)> =
        reminder_events(&db).await.into_iter().filter(|e| e.2 == "PENDING").map(|e| (e.0, e.1)).collect();
    assert_eq!(
        pending,
        vec![(1, start - chrono::Duration::minutes(15))],
        "the start and the offset are the same: the reminder already written answers for the new list too"
    );
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert_eq!(sorted(reminded(&mailer)), vec![(ALICE.email.to_string(), 2), (DAVE.into(), 2)], "Carol gets none");
}

#[tokio::test]
async fn a_reminder_picked_up_after_the_start_is_too_late_and_not_sent() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let booking = create(&api, &body(at(60), &[ALICE.email], json!(["PT15M"]))).await;
    drain(&db, &mailer).await;
    // A backlog: the poller reaches the reminder once the meeting started.
    let client = db.pool.get().await.unwrap();
    let (started, ends) = (stamp(at(-1)), stamp(at(29)));
    client
        .execute(
            "UPDATE outbox_events SET next_attempt_at = now(), \
                    payload = jsonb_set(jsonb_set(payload, '{booking,start}', to_jsonb($1::text)), \
                                        '{booking,end}', to_jsonb($2::text)) \
              WHERE event_type = 'BOOKING_REMINDER'",
            &[&started, &ends],
        )
        .await
        .unwrap();
    drain(&db, &mailer).await;
    assert!(reminded(&mailer).is_empty());
    let seen = api.get(&format!("/bookings/{}/notifications", booking["id"].as_str().unwrap()), BOB).await;
    let reminder: Vec<&Value> = seen.body["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["event_type"] == "BOOKING_REMINDER")
        .collect();
    assert_eq!(reminder.len(), 1, "{}", seen.body);
    assert_eq!(reminder[0]["state"], "too_late", "{}", seen.body);
    assert!(reminder[0]["detail"].as_str().unwrap().contains("the meeting started at"));
}

#[tokio::test]
async fn a_crash_after_the_reminders_claim_never_sends_it_twice() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let start = at(120);
    create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT30M"]))).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    assert!(worker.run(&db, "", &[]).await.success(), "the invitations");
    make_due(&db, start).await;
    let died = killed(worker.run(&db, &format!("{FAULT_AFTER_SEND_CLAIM}=kill"), &[]).await);
    assert!(died, "a real death after a reminder's claim committed");
    sweep_after_timeout(&db, 8).await;
    for _ in 0..3 {
        assert!(worker.run(&db, "", &[]).await.success());
        sweep_after_timeout(&db, 8).await;
    }
    let reminders: Vec<(String, String, String)> =
        worker.sent().into_iter().filter(|(_, _, t)| t == "BOOKING_REMINDER").collect();
    let mut recipients: Vec<String> = reminders.iter().map(|r| r.1.clone()).collect();
    recipients.sort();
    let before = recipients.len();
    recipients.dedup();
    assert_eq!(before, recipients.len(), "no recipient reminded twice: {reminders:?}");
    let claims: i64 =
        db.scalar("SELECT count(*) FROM booking_notification_sends WHERE event_type = 'BOOKING_REMINDER'").await;
    assert_eq!(claims, 2, "one claim per recipient, whatever the crash");
    // What the crash cost: only the sends in flight at the death are left
    // for SES's evidence (UNKNOWN); every other reminder went.
    let unknown: i64 = db
        .scalar(formatcp!("SELECT count(*) FROM booking_notification_sends WHERE event_type = 'BOOKING_REMINDER' AND status = {UNKNOWN}"))
        .await;
    let sent: i64 = db
        .scalar(formatcp!(
            "SELECT count(*) FROM booking_notification_sends WHERE event_type = 'BOOKING_REMINDER' AND status = {SENT}"
        ))
        .await;
    assert_eq!((unknown, sent), (1, 1), "the crash cost one reminder, the one claimed as it died");
}

/// The backlog alarm's metric counts a reminder from its due time, not from
/// when it was written days before.
#[tokio::test]
async fn a_reminder_due_now_is_not_an_old_backlog() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    create(&api, &body(at(3 * 24 * 60), &[ALICE.email], json!(["PT1H"]))).await;
    drain(&db, &mailer).await;
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            "UPDATE outbox_events SET created_at = now() - interval '3 days', \
                    next_attempt_at = now() - interval '10 seconds', due_at = now() - interval '10 seconds' \
              WHERE event_type = 'BOOKING_REMINDER'",
            &[],
        )
        .await
        .unwrap();
    let age = shared::outbox::events::standing::oldest_due_age(&client).await.unwrap().unwrap();
    assert!((10.0..60.0).contains(&age), "due 10 s ago, written 3 days ago: {age}");
}

#[tokio::test]
async fn an_update_committed_while_a_reminder_is_pending_goes_out_at_once() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let booking = create(&api, &body(at(3 * 24 * 60), &[ALICE.email], json!(["P1D", "PT1H"]))).await;
    drain(&db, &mailer).await;
    patch(&api, booking["id"].as_str().unwrap(), 1, json!({"title": "Planning, with slides"})).await;
    drain(&db, &mailer).await;
    let told: Vec<(EventType, i32)> = mailer.deliveries().iter().map(|d| (d.event_type, d.sequence)).collect();
    assert_eq!(told, vec![(EventType::BookingConfirmed, 1), (EventType::BookingUpdated, 2)]);
    assert_eq!(
        reminder_events(&db).await.iter().filter(|e| e.2 == "PENDING").count(),
        2,
        "one set waits: the title changed, not the start"
    );
}

#[tokio::test]
async fn a_reminder_due_before_its_invitation_went_waits_for_it() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    create(&api, &body(start, &[ALICE.email], json!(["PT1H"]))).await;
    // The invitation is held back (a retry); the reminder falls due.
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            "UPDATE outbox_events SET next_attempt_at = now() + interval '1 hour' \
              WHERE event_type = 'BOOKING_CONFIRMED'",
            &[],
        )
        .await
        .unwrap();
    make_due(&db, start).await;
    let summary = poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailer.count(), 0, "no reminder before its invitation");
    assert_eq!(summary.waiting, 1, "{summary:?}");
    // It is due again seconds later; by then the invitation went.
    for _ in 0..3 {
        client
            .execute(formatcp!("UPDATE outbox_events SET next_attempt_at = now() WHERE status = {PENDING}"), &[])
            .await
            .unwrap();
        drain(&db, &mailer).await;
    }
    let told: Vec<EventType> = mailer.deliveries().iter().map(|d| d.event_type).collect();
    assert_eq!(told, vec![EventType::BookingConfirmed, EventType::BookingReminder], "the invitation first");
}

#[tokio::test]
async fn a_reminder_never_reaches_an_attendee_whose_invitation_was_never_sent() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT1H"]))).await;
    mailer.script(CAROL, shared::notify::mailer::SendOutcome::Rejected { reason: "mailbox unavailable".into() }, 1);
    drain(&db, &mailer).await;
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer), vec![(ALICE.email.to_string(), 1)]);
    assert_eq!(superseded_reasons(&db).await, vec!["never told of this meeting: no reminder".to_string()]);
}

/// Cal.com #6973: reminders sent for a booking cancelled since.
#[tokio::test]
async fn calcom_6973_no_reminder_for_a_cancelled_booking() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(90);
    let booking = create(&api, &body(start, &[ALICE.email], json!(["PT1H"]))).await;
    cancel(&api, booking["id"].as_str().unwrap()).await;
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    drain(&db, &mailer).await;
    assert!(reminded(&mailer).is_empty());
}

/// Cal.com #7225: a reminder for the old time after a reschedule.
#[tokio::test]
async fn calcom_7225_no_reminder_for_the_old_time_after_a_reschedule() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let (start, earlier) = (at(300), at(100));
    let booking = create(&api, &body(start, &[ALICE.email], json!(["PT1H"]))).await;
    patch(
        &api,
        booking["id"].as_str().unwrap(),
        1,
        json!({"start": stamp(earlier), "end": stamp(earlier + chrono::Duration::minutes(30))}),
    )
    .await;
    // Moved earlier: the new reminder is due first and is not held back by
    // the old one (each in its own lane).
    make_due(&db, earlier).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer), vec![(ALICE.email.to_string(), 2)]);
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer), vec![(ALICE.email.to_string(), 2)], "none for the old time");
}

/// Cal.com #10166: a reminder to a seat (attendee) cancelled since.
#[tokio::test]
async fn calcom_10166_no_reminder_to_an_attendee_removed_since() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    let booking = create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT1H"]))).await;
    drain(&db, &mailer).await;
    patch(&api, booking["id"].as_str().unwrap(), 1, json!({"attendees": [{"email": ALICE.email, "name": "A"}]})).await;
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer), vec![(ALICE.email.to_string(), 2)]);
    let carol: Vec<Notice> = mailer.deliveries().iter().filter(|d| d.recipient == CAROL).map(|d| d.notice).collect();
    assert_eq!(carol, vec![Notice::Request, Notice::Removed], "her invitation, then her removal; no reminder");
}

/// Cal.com #26417: a cancellation mailed twice (a workflow and the
/// built-in mail). Here a cancel is one event: one message per attendee,
/// and its pending reminders send nothing.
#[tokio::test]
async fn calcom_26417_a_cancel_is_mailed_once_and_its_reminders_not_at_all() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    let booking = create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT1H", "PT30M"]))).await;
    drain(&db, &mailer).await;
    cancel(&api, booking["id"].as_str().unwrap()).await;
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    drain(&db, &mailer).await;
    let mut cancels: Vec<String> =
        mailer.deliveries().iter().filter(|d| d.notice == Notice::Cancel).map(|d| d.recipient.clone()).collect();
    cancels.sort();
    assert_eq!(cancels, vec![ALICE.email.to_string(), CAROL.to_string()]);
    assert!(reminded(&mailer).is_empty());
}

#[tokio::test]
async fn bad_reminders_are_refused_with_the_field_named_and_nothing_written() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let cases = [
        (json!(["15 minutes"]), "reminders[0]"),
        (json!(["-PT15M"]), "reminders[0]"),
        (json!(["PT0M"]), "reminders[0]"),
        (json!(["PT1M"]), "reminders[0]"),
        (json!(["P31D"]), "reminders[0]"),
        (json!(["P1M"]), "reminders[0]"),
        (json!([15]), "reminders[0]"),
        (json!(["PT1H", "PT60M"]), "reminders"),
        (json!(["PT5M", "PT6M", "PT7M", "PT8M", "PT9M", "PT10M"]), "reminders"),
        (json!("PT15M"), "reminders"),
        (Value::Null, "reminders"),
    ];
    for (reminders, field) in cases {
        let resp = api.post("/bookings", BOB, &body(at(600), &[ALICE.email], reminders.clone())).await;
        assert_eq!(resp.status, 422, "{reminders}: {}", resp.body);
        let names: Vec<&str> =
            resp.body["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(names.contains(&field), "{reminders}: {names:?}");
    }
    assert_eq!(db.count("bookings").await, 0);
    assert_eq!(db.count("outbox_events").await, 0);
}

#[tokio::test]
async fn a_patch_with_no_reminders_removes_them_and_a_booking_without_any_takes_the_default() {
    let db = TestDb::create().await;
    let config = shared::api::config::ApiConfig {
        default_reminders: "PT24H,PT10M".parse().unwrap(),
        ..outbox_tests::api::test_config()
    };
    let api = TestApi::with(&db, shared::fault::Faults::none(), config);
    let mut without = body(at(3 * 24 * 60), &[ALICE.email], json!([]));
    without.as_object_mut().unwrap().remove("reminders");
    let booking = create(&api, &without).await;
    assert_eq!(booking["reminders"], json!(["PT24H", "PT10M"]), "the default");
    assert_eq!(reminder_events(&db).await.len(), 2);
    let id = booking["id"].as_str().unwrap();
    let changed = patch(&api, id, 1, json!({"reminders": []})).await;
    assert_eq!(changed["reminders"], json!([]));
    assert_eq!(reminder_events(&db).await.len(), 2, "none written for version 2");
    let resp = api
        .send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(r#"{"version": 2, "reminders": null}"#))
        .await;
    assert_eq!(resp.status, 422, "{}", resp.body);
    let shown = api.get(&format!("/bookings/{id}"), ALICE).await;
    assert_eq!(shown.body["reminders"], json!([]), "{}", shown.body);
}

#[tokio::test]
async fn the_notifications_list_each_reminder_per_recipient_with_its_due_time_and_state() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let (start, moved) = (at(180), at(300));
    let booking = create(&api, &body(start, &[ALICE.email], json!(["PT2H", "PT15M"]))).await;
    let id = booking["id"].as_str().unwrap();
    drain(&db, &mailer).await;
    make_due(&db, start - chrono::Duration::minutes(90)).await;
    drain(&db, &mailer).await;
    patch(&api, id, 1, json!({"start": stamp(moved), "end": stamp(moved + chrono::Duration::minutes(30))})).await;
    make_due(&db, start - chrono::Duration::minutes(1)).await;
    drain(&db, &mailer).await;
    let seen = api.get(&format!("/bookings/{id}/notifications"), BOB).await;
    let reminders: Vec<(String, i64, String)> = seen.body["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["event_type"] == "BOOKING_REMINDER")
        .map(|n| (n["due"].as_str().unwrap().to_string(), n["version"].as_i64().unwrap(), n["state"].to_string()))
        .collect();
    let due = |t: DateTime<Utc>, minutes: i64| stamp(t - chrono::Duration::minutes(minutes));
    let want = vec![
        (due(start, 120), 1, "\"sent\"".to_string()),
        (due(start, 15), 1, "\"superseded\"".to_string()),
        (due(moved, 120), 2, "\"scheduled\"".to_string()),
        (due(moved, 15), 2, "\"scheduled\"".to_string()),
    ];
    let mut got = reminders.clone();
    got.iter_mut().for_each(|r| r.0 = stamp(DateTime::parse_from_rfc3339(&r.0).unwrap().with_timezone(&Utc)));
    assert_eq!(got, want, "{}", seen.body);
    let alice = api.get(&format!("/bookings/{id}/notifications"), ALICE).await;
    assert_eq!(alice.status, 200);
}

/// Each reminder mails every attendee: it counts toward the organizer's
/// daily emails (`LIMIT_RECIPIENTS_PER_DAY`) like the invitation does, so
/// five reminders cannot multiply what one organizer may send.
#[tokio::test]
async fn each_reminder_counts_toward_the_organizers_daily_emails() {
    let db = TestDb::create().await;
    let limits = shared::booking::limits::Limits { recipients_per_day: 6, ..Default::default() };
    let config = shared::api::config::ApiConfig { limits, ..outbox_tests::api::test_config() };
    let api = TestApi::with(&db, shared::fault::Faults::none(), config);
    // Reminders count on the UTC day they are sent: tomorrow, whatever
    // the time the test runs (a start a few hours ahead would put them on
    // today or tomorrow by the clock).
    let tomorrow =
        |hour: u32| (Utc::now() + chrono::Duration::days(1)).date_naive().and_hms_opt(hour, 0, 0).unwrap().and_utc();
    create(&api, &body(tomorrow(12), &[ALICE.email, CAROL], json!(["PT2H", "PT1H", "PT30M"]))).await;
    let over = api.post("/bookings", BOB, &body(tomorrow(14), &[DAVE], json!(["PT1H"]))).await;
    assert_eq!(over.status, 429, "2 attendees x 3 reminders = 6 already tomorrow: {}", over.body);
    assert_eq!(db.count("bookings").await, 1);
    // Without a reminder, Dave's invitation fits today (2 of 6 so far).
    let fits = api.post("/bookings", BOB, &body(tomorrow(14), &[DAVE], json!([]))).await;
    assert_eq!(fits.status, 201, "{}", fits.body);
}

/// Retention deletes a week-old booking's events and sends, but a reminder
/// due in a month still needs them to know who was told: they stay while
/// it waits. Else Carol, whose invitation was refused, would be reminded
/// of a meeting she never heard of once retention ran (a way around every
/// limit that caps an invitation). Once the reminder is done, they go.
#[tokio::test]
async fn retention_keeps_a_bookings_history_while_a_reminder_waits_so_the_never_told_stay_unreminded() {
    use outbox_tests::outbox::AGE_SENDS_30_DAYS;
    use shared::relay::{retention, RetentionConfig};
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(40 * 24 * 60);
    create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT24H"]))).await;
    mailer.script(CAROL, shared::notify::mailer::SendOutcome::Rejected { reason: "mailbox unavailable".into() }, 1);
    drain(&db, &mailer).await;
    let age = format!(
        "UPDATE outbox_events SET completed_at = now() - interval '30 days' WHERE status = {DONE}; \
         UPDATE processed_events SET processed_at = now() - interval '30 days'; {AGE_SENDS_30_DAYS};"
    );
    let client = db.pool.get().await.unwrap();
    client.batch_execute(&age).await.unwrap();
    let purged = retention::run(&client, &RetentionConfig::default()).await.unwrap();
    assert_eq!((purged.events, purged.sends), (0, 0), "kept while the reminder waits: {purged:?}");

    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer), vec![(ALICE.email.to_string(), 1)], "Carol was never told");
    client.batch_execute(&age).await.unwrap();
    let purged = retention::run(&client, &RetentionConfig::default()).await.unwrap();
    assert_eq!((purged.events, purged.sends), (2, 4), "then all of it goes: {purged:?}");
}

/// Defence in depth: a reminder of an older version never goes, even if
/// the event that changed the booking is gone (deleted by hand; retention
/// keeps it). The booking's own version says it changed since.
#[tokio::test]
async fn a_reminder_of_an_older_version_never_goes_even_if_the_later_event_is_gone() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    let booking = create(&api, &body(start, &[ALICE.email], json!(["PT1H"]))).await;
    drain(&db, &mailer).await;
    patch(&api, booking["id"].as_str().unwrap(), 1, json!({"title": "Planning (moved room)", "reminders": []})).await;
    drain(&db, &mailer).await;
    let client = db.pool.get().await.unwrap();
    client.execute("DELETE FROM outbox_events WHERE event_type = 'BOOKING_UPDATED'", &[]).await.unwrap();
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert!(reminded(&mailer).is_empty());
    let reasons = superseded_reasons(&db).await;
    assert_eq!(
        reasons,
        vec!["the booking changed since and the events that changed it are gone: no reminder of this version"
            .to_string()]
    );
}

/// A reminder whose time came just as its booking changed (its title, not
/// its start) is neither lost nor sent twice: the event already written
/// answers for it, and it goes after the update, with the booking as the
/// update left it.
#[tokio::test]
async fn a_reminder_due_as_its_booking_changes_goes_once_after_the_update() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(60);
    let booking = create(&api, &body(start, &[ALICE.email, CAROL], json!(["PT15M"]))).await;
    drain(&db, &mailer).await;
    make_due(&db, start).await;
    patch(&api, booking["id"].as_str().unwrap(), 1, json!({"title": "Planning, room 4"})).await;
    assert_eq!(reminder_events(&db).await.len(), 1, "no new reminder for the same start and offset");
    drain(&db, &mailer).await;
    let told: Vec<(EventType, i32)> = mailer.deliveries().iter().map(|d| (d.event_type, d.sequence)).collect();
    assert_eq!(&told[2..4], [(EventType::BookingUpdated, 2); 2], "the update first: {told:?}");
    assert_eq!(
        sorted(reminded(&mailer)),
        vec![(ALICE.email.to_string(), 2), (CAROL.into(), 2)],
        "one reminder each, of the booking as it now stands"
    );
    assert!(superseded_reasons(&db).await.is_empty());
}

/// The API's clock and the poller's never make a reminder twice: once sent,
/// a change that keeps its start and offset writes none again.
#[tokio::test]
async fn a_reminder_already_sent_is_not_sent_again_after_a_change() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(60);
    let booking = create(&api, &body(start, &[ALICE.email], json!(["PT30M", "PT15M"]))).await;
    let id = booking["id"].as_str().unwrap();
    drain(&db, &mailer).await;
    make_due(&db, start - chrono::Duration::minutes(30)).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer).len(), 1, "the 30-minute reminder went");
    patch(&api, id, 1, json!({"title": "Planning, room 4", "reminders": ["PT30M", "PT15M", "PT5M"]})).await;
    assert_eq!(reminder_events(&db).await.len(), 3, "only the added offset is written");
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    let due: Vec<i32> = reminded(&mailer).iter().map(|r| r.1).collect();
    assert_eq!(due, vec![1, 2, 2], "the 30-minute one once; then the 15- and 5-minute ones");
}

/// An offset removed and added again for the same start is a new reminder:
/// the removal ended the first, so it goes once.
#[tokio::test]
async fn an_offset_removed_and_added_again_is_reminded_once() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    let booking = create(&api, &body(start, &[ALICE.email], json!(["PT1H"]))).await;
    let id = booking["id"].as_str().unwrap();
    drain(&db, &mailer).await;
    patch(&api, id, 1, json!({"reminders": []})).await;
    patch(&api, id, 2, json!({"reminders": ["PT60M"]})).await;
    assert_eq!(reminder_events(&db).await.len(), 2);
    // The notifications say what the plan will do: the first one ended.
    let seen = api.get(&format!("/bookings/{id}/notifications"), BOB).await;
    let states: Vec<(i64, String)> = seen.body["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["event_type"] == "BOOKING_REMINDER")
        .map(|n| (n["version"].as_i64().unwrap(), n["state"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(states, vec![(1, "superseded".to_string()), (3, "scheduled".to_string())], "{}", seen.body);
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert_eq!(reminded(&mailer), vec![(ALICE.email.to_string(), 3)]);
    assert_eq!(
        superseded_reasons(&db).await,
        vec!["the reminder PT1H was removed (version 2): no reminder".to_string()]
    );
}

/// A reminder never goes before an earlier event of its booking that was
/// dead-lettered: it waits (a minute at a time) for the operator's replay,
/// then goes after it.
#[tokio::test]
async fn a_reminder_waits_while_its_invitation_is_dead_lettered_and_goes_after_the_replay() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    create(&api, &body(start, &[ALICE.email], json!(["PT1H"]))).await;
    mailer.script(ALICE.email, refused(), 1);
    poller(&db, mailer.clone(), one_attempt("w")).drain().await.unwrap();
    let client = db.pool.get().await.unwrap();
    let dead: i64 = db.scalar(formatcp!("SELECT count(*) FROM outbox_events WHERE status = {DEAD}")).await;
    assert_eq!(dead, 1, "the invitation is dead-lettered");
    make_due(&db, start).await;
    drain(&db, &mailer).await;
    assert_eq!(mailer.count(), 0, "no reminder before its invitation");
    let wait: f64 = db
        .scalar::<f64>(formatcp!(
            "SELECT extract(epoch FROM next_attempt_at - now())::float8 FROM outbox_events \
              WHERE event_type = 'BOOKING_REMINDER' AND status = {PENDING}"
        ))
        .await;
    assert!((50.0..=61.0).contains(&wait), "it waits a minute at a time: {wait}");
    assert!(superseded_reasons(&db).await.is_empty(), "not superseded as never told");

    let mut owned = db.pool.get().await.unwrap();
    let selection = shared::outbox::events::transitions::ReplaySelection::All { event_type: None, since: None };
    shared::outbox::events::transitions::replay(&mut owned, selection, "test", 10, false).await.unwrap();
    drain(&db, &mailer).await;
    client
        .execute(formatcp!("UPDATE outbox_events SET next_attempt_at = now() WHERE status = {PENDING}"), &[])
        .await
        .unwrap();
    drain(&db, &mailer).await;
    let told: Vec<EventType> = mailer.deliveries().iter().map(|d| d.event_type).collect();
    assert_eq!(told, vec![EventType::BookingConfirmed, EventType::BookingReminder], "the invitation first");
}

/// The claim checks the booking again: a cancel committed while a
/// reminder's sends wait for the pacer stops every send not yet claimed
/// (one place in flight, each send 1.5 s), and they are recorded as
/// superseded by the cancel.
#[tokio::test]
async fn a_cancel_committed_while_a_reminder_waits_for_the_pacer_stops_the_sends_not_yet_claimed() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let start = at(120);
    let booking = create(&api, &body(start, &[ALICE.email, CAROL, DAVE], json!(["PT1H"]))).await;
    drain(&db, &Arc::new(RecordingMailer::new())).await;
    make_due(&db, start).await;
    let slow = Arc::new(RecordingMailer::new().with_delay(std::time::Duration::from_millis(1500)));
    let config = PollerConfig { concurrency: 1, claim_group: 1, ..PollerConfig::for_tests("w") };
    let run = tokio::spawn({
        let p = poller(&db, slow.clone(), config);
        async move { p.drain().await.unwrap() }
    });
    // The first reminder is in flight (claimed): the meeting is cancelled.
    let mut claimed = 0i64;
    for _ in 0..200 {
        claimed =
            db.scalar("SELECT count(*) FROM booking_notification_sends WHERE event_type = 'BOOKING_REMINDER'").await;
        if claimed > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(claimed, 1, "one reminder claimed first");
    cancel(&api, booking["id"].as_str().unwrap()).await;
    let summary = run.await.unwrap();
    assert!(summary.waiting >= 1, "planned again: {summary:?}");
    make_due(&db, start).await;
    drain(&db, &slow).await;
    assert_eq!(reminded(&slow).len(), 1, "only the send in flight before the cancel went");
    let reasons = superseded_reasons(&db).await;
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons.iter().all(|r| r.contains("the booking was cancelled (version 2)")), "{reasons:?}");
    let cancelled = slow.deliveries().iter().filter(|d| d.notice == Notice::Cancel).count();
    assert_eq!(cancelled, 3, "every attendee hears of the cancel");
}

/// Upgrading from the build that wrote a fresh set of reminders on every
/// change (V33): a newer pending reminder that repeats an unfinished older
/// one (same start and offset, nothing between that ended it) is deleted,
/// so it is reminded once; those of a moved start stay.
#[tokio::test]
async fn reminders_written_twice_by_the_older_build_are_sent_once_after_the_upgrade() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(RecordingMailer::new());
    let start = at(120);
    let retitled = create(&api, &body(start, &[ALICE.email], json!(["PT1H"]))).await;
    let moved = create(&api, &body(start + chrono::Duration::hours(1), &[CAROL], json!(["PT1H"]))).await;
    drain(&db, &mailer).await;
    let id: uuid::Uuid = retitled["id"].as_str().unwrap().parse().unwrap();
    patch(&api, &id.to_string(), 1, json!({"title": "Planning, room 4"})).await;
    // What the older build wrote for that change: the whole set again.
    let client = db.pool.get().await.unwrap();
    let v2 = shared::booking::store::get(&client, id).await.unwrap().unwrap();
    for event in shared::booking::reminder_events::events(&v2, None, Utc::now(), 1) {
        shared::outbox::events::insert(&client, &event).await.unwrap();
    }
    let later = start + chrono::Duration::hours(2);
    let to = json!({"start": stamp(later), "end": stamp(later + chrono::Duration::minutes(30))});
    patch(&api, moved["id"].as_str().unwrap(), 1, to).await;
    assert_eq!(reminder_events(&db).await.len(), 4);

    client.batch_execute(include_str!("../../../migrations/V33__one_reminder_per_start_and_offset.sql")).await.unwrap();
    assert_eq!(reminder_events(&db).await.len(), 3, "the repeat is gone; the moved start's stays");
    make_due(&db, later).await;
    drain(&db, &mailer).await;
    assert_eq!(
        sorted(reminded(&mailer)),
        vec![(ALICE.email.to_string(), 2), (CAROL.to_string(), 2)],
        "each once: Alice of the booking as retitled, Carol at the new time"
    );
}
