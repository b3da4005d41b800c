//! The booking lifecycle real calendars expect: full updates through PATCH,
//! iTIP per recipient (RFC 5546), and no mail for news a later event has
//! already made moot. Through the API, the poller and the real SES v2
//! client to moto; every message is read back by the independent MIME and
//! iCalendar parser (tests/tools/inspect_mail.py).

use const_format::formatcp;
use shared::notify::sends::status::send_sql::{SENT, SUPERSEDED};
use shared::outbox::events::status::sql::{DONE, PENDING};
use std::sync::Arc;

use outbox_tests::api::{Caller, TestApi};
use outbox_tests::outbox::*;
use outbox_tests::ses::*;
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::fault::Faults;
use shared::relay::{Poller, PollerConfig};
use uuid::Uuid;

const BOB: Caller<'static> = Caller { email: "bob@example.com", name: "Bob Organizer", sub: "sub-bob" };
const ALICE: &str = "alice@example.com";
const CAROL: &str = "carol@example.com";
const DAVE: &str = "dave@example.com";

/// One message as the recipient's calendar sees it.
#[derive(Debug, Clone, PartialEq)]
struct Mail {
    to: String,
    method: String,
    sequence: i64,
    attendees: Vec<String>,
    subject: String,
    summary: String,
}

struct Stack {
    db: TestDb,
    api: TestApi,
    sender: String,
}

async fn stack() -> Stack {
    let sender = unique_sender();
    verify_sender(&moto_endpoint(), &sender).await;
    let db = TestDb::create().await;
    Stack { api: TestApi::new(&db), db, sender }
}

fn people(emails: &[&str]) -> Value {
    json!(emails.iter().map(|e| json!({"email": e, "name": e.split('@').next().unwrap()})).collect::<Vec<_>>())
}

impl Stack {
    /// Bob's booking at `hour` for `attendees`; returns its path and id.
    async fn create(&self, hour: u32, attendees: &[&str]) -> (String, Uuid) {
        let mut body = outbox_tests::api::booking_body(hour);
        body["attendees"] = people(attendees);
        let resp = self.api.post("/bookings", BOB, &body).await;
        assert_eq!(resp.status, 201, "{}", resp.body);
        let id = resp.body["id"].as_str().unwrap().to_string();
        (format!("/bookings/{id}"), id.parse().unwrap())
    }

    /// PATCHes `changes` at the current version; returns the new version.
    async fn patch(&self, path: &str, mut changes: Value) -> i64 {
        changes["version"] = self.api.get(path, BOB).await.body["version"].clone();
        let resp = self.api.send("PATCH", path, Some(BOB), &[], Some(&changes.to_string())).await;
        assert_eq!(resp.status, 200, "{}", resp.body);
        resp.body["version"].as_i64().unwrap()
    }

    async fn cancel(&self, path: &str) {
        assert_eq!(self.api.post(&format!("{path}/cancel"), BOB, &json!({})).await.status, 200);
    }

    async fn drain(&self) {
        let mailer = ses_mailer(ses_config(&moto_endpoint(), &self.sender));
        let poller = Poller::new(self.db.pool.clone(), Arc::new(mailer), Faults::none(), PollerConfig::for_tests("lc"));
        poller.drain().await.unwrap();
    }

    /// Every message moto received from this test's sender, parsed.
    fn mail(&self) -> Vec<Mail> {
        sent_mail(&moto_endpoint(), &self.sender)
            .iter()
            .map(|m| {
                let cal = &m["calendar"];
                assert_eq!(cal["METHOD"], cal["mime_method"], "the MIME method matches the calendar's");
                let mut attendees: Vec<String> = cal["ATTENDEES"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a["value"].as_str().unwrap().trim_start_matches("mailto:").to_string())
                    .collect();
                attendees.sort();
                Mail {
                    to: m["to_addresses"][0].as_str().unwrap().to_string(),
                    method: cal["METHOD"].as_str().unwrap().to_string(),
                    sequence: cal["SEQUENCE"].as_i64().unwrap(),
                    attendees,
                    subject: m["subject"].as_str().unwrap().to_string(),
                    summary: cal["SUMMARY"].as_str().unwrap().to_string(),
                }
            })
            .collect()
    }

    fn mail_to(&self, to: &str) -> Vec<Mail> {
        self.mail().into_iter().filter(|m| m.to == to).collect()
    }

    /// `(recipient, event type, superseded_by)` of every SUPERSEDED claim.
    async fn superseded(&self) -> Vec<(String, String, Uuid)> {
        let client = self.db.pool.get().await.unwrap();
        let rows = client
            .query(
                formatcp!(
                    "SELECT recipient_email, event_type, superseded_by FROM booking_notification_sends \
                  WHERE status = {SUPERSEDED} ORDER BY recipient_email, event_type"
                ),
                &[],
            )
            .await
            .unwrap();
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
    }
}

fn sorted(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[tokio::test]
async fn rapid_reschedules_send_only_the_latest_invitation() {
    let s = stack().await;
    let (path, id) = s.create(9, &[ALICE]).await;
    s.patch(&path, json!({"start": "2026-12-01T10:00:00Z", "end": "2026-12-01T10:30:00Z"})).await;
    assert_eq!(s.patch(&path, json!({"start": "2026-12-01T11:00:00Z", "end": "2026-12-01T11:30:00Z"})).await, 3);
    s.drain().await;

    let mail = s.mail_to(ALICE);
    assert_eq!(mail.len(), 1, "one invitation, not three: {mail:?}");
    assert_eq!((mail[0].method.as_str(), mail[0].sequence), ("REQUEST", 2));
    assert!(mail[0].subject.starts_with("Invitation: "), "it is her first word of the meeting: {}", mail[0].subject);
    let latest = events_of(&s.db, id).await.last().unwrap().id;
    let superseded = s.superseded().await;
    assert_eq!(superseded.len(), 2, "both earlier messages are recorded, not silently dropped");
    assert!(superseded.iter().all(|(to, _, by)| to == ALICE && *by == latest), "{superseded:?}");
    let counts = send_counts(&s.db).await;
    assert_eq!((counts[&SendStatus::Sent], counts[&SendStatus::Superseded]), (1, 2));
}

#[tokio::test]
async fn booking_cancelled_before_any_send_mails_no_one() {
    let s = stack().await;
    let (path, id) = s.create(9, &[ALICE, CAROL]).await;
    s.cancel(&path).await;
    s.drain().await;

    assert!(s.mail().is_empty(), "nobody heard of it, so nobody hears of its cancellation");
    let events = events_of(&s.db, id).await;
    assert!(events.iter().all(|e| e.status == EventStatus::Done));
    let superseded = s.superseded().await;
    assert_eq!(superseded.len(), 4, "two invitations and two cancellations, each recorded: {superseded:?}");
    let (confirm, cancel) = (events[0].id, events[1].id);
    for to in [ALICE, CAROL] {
        assert!(superseded.contains(&(to.into(), "BOOKING_CONFIRMED".into(), cancel)));
        assert!(superseded.contains(&(to.into(), "BOOKING_CANCELLED".into(), cancel)), "nothing to cancel");
    }
    assert_ne!(confirm, cancel);
}

#[tokio::test]
async fn cancellation_after_an_invitation_went_out_is_always_sent() {
    let s = stack().await;
    let (path, _) = s.create(9, &[ALICE]).await;
    s.drain().await;
    s.patch(
        &path,
        json!({"title": "Design review (moved)", "start": "2026-12-01T10:00:00Z", "end": "2026-12-01T10:30:00Z"}),
    )
    .await;
    s.cancel(&path).await;
    s.drain().await;

    let mail = s.mail_to(ALICE);
    let seen: Vec<(&str, i64)> = mail.iter().map(|m| (m.method.as_str(), m.sequence)).collect();
    assert_eq!(seen, vec![("REQUEST", 0), ("CANCEL", 2)], "the update is moot, the final CANCEL is not");
}

#[tokio::test]
async fn attendee_removed_after_invitation_gets_a_cancel_for_themselves_only() {
    let s = stack().await;
    let (path, _) = s.create(9, &[ALICE, CAROL]).await;
    s.drain().await;
    s.patch(&path, json!({"attendees": people(&[ALICE])})).await;
    s.drain().await;

    let carol = s.mail_to(CAROL);
    assert_eq!(carol.len(), 2);
    assert_eq!((carol[1].method.as_str(), carol[1].sequence), ("CANCEL", 1));
    assert_eq!(carol[1].attendees, sorted(&[CAROL]), "her CANCEL lists only her");
    assert!(carol[1].subject.starts_with("Removed: "), "{}", carol[1].subject);
    let alice = s.mail_to(ALICE);
    assert_eq!((alice[1].method.as_str(), alice[1].sequence), ("REQUEST", 1));
    assert_eq!(alice[1].attendees, sorted(&[ALICE]), "the update shows who is left");
}

#[tokio::test]
async fn added_attendee_gets_a_request_and_the_others_an_update() {
    let s = stack().await;
    let (path, _) = s.create(9, &[ALICE]).await;
    s.drain().await;
    s.patch(&path, json!({"attendees": people(&[ALICE, DAVE])})).await;
    s.drain().await;

    let dave = s.mail_to(DAVE);
    assert_eq!(dave.len(), 1);
    assert_eq!((dave[0].method.as_str(), dave[0].sequence), ("REQUEST", 1));
    assert!(dave[0].subject.starts_with("Invitation: "), "{}", dave[0].subject);
    assert_eq!(dave[0].attendees, sorted(&[ALICE, DAVE]));
    let alice = s.mail_to(ALICE);
    assert_eq!(alice.len(), 2);
    assert_eq!((alice[1].method.as_str(), alice[1].sequence), ("REQUEST", 1));
    assert!(alice[1].subject.starts_with("Updated invitation: "), "{}", alice[1].subject);
    assert_eq!(alice[1].attendees, sorted(&[ALICE, DAVE]));
}

#[tokio::test]
async fn title_only_change_still_updates_every_calendar() {
    let s = stack().await;
    let (path, _) = s.create(9, &[ALICE, CAROL]).await;
    s.drain().await;
    s.patch(&path, json!({"title": "Architecture review"})).await;
    s.drain().await;
    for to in [ALICE, CAROL] {
        let last = s.mail_to(to).pop().unwrap();
        assert_eq!((last.method.as_str(), last.sequence, last.summary.as_str()), ("REQUEST", 1, "Architecture review"));
    }
}

#[tokio::test]
async fn a_rescheduled_event_written_before_the_upgrade_is_still_dispatched() {
    // A database at the schema before BOOKING_UPDATED (V8), holding a booking
    // whose invitation went out and whose BOOKING_RESCHEDULED, in the old
    // shape (no previous_attendees), is still PENDING.
    let sender = unique_sender();
    verify_sender(&moto_endpoint(), &sender).await;
    let db = TestDb::create_unmigrated().await;
    shared::db::migrate_to(&db.pool, shared::db::MigrationTarget::Version(8)).await.unwrap();
    let (booking, confirm, reschedule) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let attendees = people(&[ALICE, CAROL]);
    let booking_json = |version: i32, start: &str, end: &str| {
        json!({"id": booking, "title": "Design review", "description": null, "location": null,
               "start": start, "end": end, "timezone": "Europe/Paris",
               "organizer": {"email": BOB.email, "name": BOB.name}, "attendees": attendees,
               "status": "CONFIRMED", "version": version,
               "created_at": "2026-11-30T08:00:00Z", "updated_at": "2026-11-30T08:05:00Z"})
    };
    let old_payload = json!({"booking": booking_json(2, "2026-12-01T10:00:00Z", "2026-12-01T10:30:00Z"),
                             "previous_start": "2026-12-01T09:00:00Z", "previous_end": "2026-12-01T09:30:00Z"});
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            "INSERT INTO bookings (id, organizer_email, organizer_name, organizer_sub, title, timezone, starts_at, \
                                   ends_at, attendees, version) \
             VALUES ($1, $2, $3, $4, 'Design review', 'Europe/Paris', '2026-12-01T10:00:00Z', '2026-12-01T10:30:00Z', $5, 2)",
            &[&booking, &BOB.email, &BOB.name, &BOB.sub, &attendees],
        )
        .await
        .unwrap();
    let confirmed = json!({"booking": booking_json(1, "2026-12-01T09:00:00Z", "2026-12-01T09:30:00Z")});
    client
        .execute(
            formatcp!("INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload, status, completed_at) \
             VALUES ($1, $3, 1, 'BOOKING_CONFIRMED', $4, {DONE}, now()), \
                    ($2, $3, 2, 'BOOKING_RESCHEDULED', $5, {PENDING}, NULL)"),
            &[&confirm, &reschedule, &booking, &confirmed, &old_payload],
        )
        .await
        .unwrap();
    for to in [ALICE, CAROL] {
        client
            .execute(
                formatcp!("INSERT INTO booking_notification_sends (id, outbox_event_id, booking_id, recipient_email, event_type, \
                                                         status, completed_at) \
                 VALUES ($1, $2, $3, $4, 'BOOKING_CONFIRMED', {SENT}, now())"),
                &[&Uuid::now_v7(), &confirm, &booking, &to],
            )
            .await
            .unwrap();
    }
    drop(client);

    shared::db::migrate(&db.pool).await.unwrap();
    let mailer = ses_mailer(ses_config(&moto_endpoint(), &sender));
    let poller = Poller::new(db.pool.clone(), Arc::new(mailer), Faults::none(), PollerConfig::for_tests("upgrade"));
    assert_eq!(poller.drain().await.unwrap().sent, 2);
    for to in [ALICE, CAROL] {
        let mail: Vec<Value> =
            sent_mail(&moto_endpoint(), &sender).into_iter().filter(|m| m["to_addresses"] == json!([to])).collect();
        assert_eq!(mail.len(), 1);
        assert_eq!(
            (mail[0]["calendar"]["METHOD"].as_str(), mail[0]["calendar"]["SEQUENCE"].as_i64()),
            (Some("REQUEST"), Some(1))
        );
        assert!(mail[0]["subject"].as_str().unwrap().starts_with("Updated invitation: "), "{}", mail[0]["subject"]);
        assert!(mail[0]["text"].as_str().unwrap().contains("moved"), "{}", mail[0]["text"]);
        assert_eq!(mail[0]["calendar"]["ATTENDEES"].as_array().unwrap().len(), 2);
    }
}

/// The worker decides the invitation is moot (a later update will tell both
/// attendees) and records it, then dies by SIGKILL before its event commits
/// and before the update's sends. The decision stands on the retry.
#[tokio::test]
async fn superseded_decision_survives_a_crash_between_claim_and_send() {
    use shared::booking::domain::{BookingChanges, Title};
    let db = TestDb::create().await;
    let booking = create_booking(&db, 9, &[ALICE, CAROL]).await;
    let service = shared::booking::service::BookingService::new(
        db.pool.clone(),
        Faults::none(),
        shared::booking::limits::Limits::UNLIMITED,
    );
    let retitle = BookingChanges { title: Some(Title::parse("Moved").unwrap()), ..Default::default() };
    service.update(&organizer(), booking.id, &retitle, 1).await.unwrap();
    let (confirm, update) = {
        let events = events_of(&db, booking.id).await;
        (events[0].id, events[1].id)
    };
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));

    let crash = format!("{}=kill", shared::relay::batch::FAULT_BEFORE_DONE_COMMIT);
    assert!(killed(worker.run(&db, &crash, &[]).await), "the worker died at the fault point");
    assert!(worker.sent().is_empty(), "nothing was sent before the crash");
    assert_eq!(event_status(&db, confirm).await.0, EventStatus::Processing);
    let decided = |db: &TestDb| {
        let pool = db.pool.clone();
        async move {
            let client = pool.get().await.unwrap();
            let rows = client
                .query(
                    formatcp!("SELECT outbox_event_id, superseded_by FROM booking_notification_sends WHERE status = {SUPERSEDED}"),
                    &[],
                )
                .await
                .unwrap();
            rows.iter().map(|r| (r.get::<_, Uuid>(0), r.get::<_, Uuid>(1))).collect::<Vec<_>>()
        }
    };
    assert_eq!(decided(&db).await, vec![(confirm, update), (confirm, update)], "the decisions were committed");

    sweep_after_timeout(&db, 8).await;
    assert!(worker.run(&db, "", &[]).await.success());
    let sent = worker.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.iter().all(|(event, _, _)| *event == update.to_string()), "only the update was sent: {sent:?}");
    assert_eq!(decided(&db).await.len(), 2, "the invitation stayed superseded");
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 2);
}
