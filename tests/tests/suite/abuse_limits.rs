//! Abuse limits, counted in the database: per organizer and day, per
//! booking and day; 429 with Retry-After, nothing written, and they hold
//! under concurrent requests.

use outbox_tests::api::{booking_body, test_config, TestApi, ALICE, BOB};
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::api::config::ApiConfig;
use shared::fault::Faults;

fn limited(db: &TestDb, bookings: i32, recipients: i32, changes: i32) -> TestApi {
    let limits = shared::booking::limits::Limits {
        bookings_per_day: bookings,
        recipients_per_day: recipients,
        changes_per_booking_per_day: changes,
    };
    TestApi::with(db, Faults::none(), ApiConfig { limits, ..test_config() })
}

fn assert_limited(resp: &outbox_tests::api::TestResponse, what: &str) {
    assert_eq!(resp.status, 429, "{}", resp.body);
    assert_eq!(resp.body["type"], outbox_tests::api::problem_type("limit-exceeded"));
    assert!(resp.body["detail"].as_str().unwrap().contains(what), "{}", resp.body);
    let retry: u64 = resp.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=86_400).contains(&retry), "retry after the UTC day ends: {retry}");
}

#[tokio::test]
async fn daily_limits_refuse_with_429_and_retry_after_and_write_nothing() {
    let db = TestDb::create().await;
    let api = limited(&db, 3, 5, 2);
    let mut first = Value::Null;
    for hour in 9..12 {
        let resp = api.post("/bookings", BOB, &booking_body(hour)).await;
        assert_eq!(resp.status, 201, "{}", resp.body);
        if hour == 9 {
            first = resp.body;
        }
    }
    assert_limited(&api.post("/bookings", BOB, &booking_body(13)).await, "3 bookings per day");
    assert_eq!((db.count("bookings").await, db.count("outbox_events").await), (3, 3), "the refused one wrote nothing");
    // Each organizer has their own count; recipients count too.
    let mut crowd = booking_body(9);
    crowd["attendees"] =
        json!((0..6).map(|i| json!({"email": format!("p{i}@example.com"), "name": "P"})).collect::<Vec<_>>());
    assert_limited(&api.post("/bookings", ALICE, &crowd).await, "5 recipients per day");
    assert_eq!(db.count("bookings").await, 3);
    // Changes per booking: every reschedule or cancel mails everyone again.
    let path = format!("/bookings/{}", first["id"].as_str().unwrap());
    for (version, hour) in [(1, 14), (2, 15)] {
        let body = json!({"start": format!("2026-12-01T{hour}:00:00Z"), "end": format!("2026-12-01T{hour}:30:00Z"), "version": version});
        let r = api.send("PATCH", &path, Some(BOB), &[], Some(&body.to_string())).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let body = json!({"start": "2026-12-01T16:00:00Z", "end": "2026-12-01T16:30:00Z", "version": 3});
    let refused = api.send("PATCH", &path, Some(BOB), &[], Some(&body.to_string())).await;
    assert_limited(&refused, "2 times per day");
    assert_eq!(api.get(&path, BOB).await.body["version"], 3, "the refused change changed nothing");
    assert_eq!(db.count("outbox_events").await, 5);
}

#[tokio::test]
async fn cancel_at_a_limit_still_cancels_and_its_cancel_mails_go_out() {
    let db = TestDb::create().await;
    // One booking whose two attendees use up the day's recipients.
    let api = limited(&db, 1, 2, 1);
    let mut two = booking_body(9);
    two["attendees"] =
        json!([{"email": "carol@example.com", "name": "Carol"}, {"email": "dave@example.com", "name": "Dave"}]);
    let created = api.post("/bookings", BOB, &two).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let path = format!("/bookings/{}", created.body["id"].as_str().unwrap());
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let config = shared::relay::PollerConfig::for_tests("w");
    outbox_tests::outbox::poller(&db, mailer.clone(), config.clone()).drain().await.unwrap();
    let body = json!({"start": "2026-12-01T14:00:00Z", "end": "2026-12-01T14:30:00Z", "version": 1});
    let refused = api.send("PATCH", &path, Some(BOB), &[], Some(&body.to_string())).await;
    assert_limited(&refused, "2 recipients per day");
    // At both limits, the cancel still goes through, and is mailed.
    let cancelled = api.post(&format!("{path}/cancel"), BOB, &json!({})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["status"], "CANCELLED");
    outbox_tests::outbox::poller(&db, mailer.clone(), config).drain().await.unwrap();
    let cancels: Vec<String> = mailer
        .deliveries()
        .iter()
        .filter(|d| d.event_type == shared::booking::events::EventType::BookingCancelled)
        .map(|d| d.recipient.clone())
        .collect();
    assert_eq!(cancels, vec!["carol@example.com", "dave@example.com"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn daily_limits_hold_under_concurrent_requests() {
    let db = TestDb::create().await;
    let api = std::sync::Arc::new(limited(&db, 5, 1000, 10));
    let mut tasks = Vec::new();
    for hour in 0..20 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = booking_body(0);
            body["start"] = json!(format!("2026-12-{:02}T09:00:00Z", hour + 1));
            body["end"] = json!(format!("2026-12-{:02}T09:30:00Z", hour + 1));
            api.post("/bookings", BOB, &body).await.status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|&&s| s == 201).count(), 5, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&s| s == 429).count(), 15, "{statuses:?}");
    assert_eq!(db.count("bookings").await, 5);
    assert_eq!(db.count("outbox_events").await, 5);
}

/// Three organizers, each well within their own limits, invite one person
/// six times under six spellings of one Gmail mailbox. The mailbox is mailed
/// LIMIT_MAILS_PER_RECIPIENT_PER_DAY times; the other invitations are
/// recorded CAPPED (not sent, not retried: their events are DONE), and
/// everyone else invited beside them is mailed.
#[tokio::test]
async fn one_recipient_is_capped_across_organizers() {
    use outbox_tests::outbox::{event_counts, person, poller, send_counts, EventStatus, SendStatus};
    use shared::booking::domain::{Caller, NewBooking, TimeRange, Timezone, Title};
    use shared::booking::limits::Limits;
    use shared::booking::service::BookingService;
    use shared::notify::mailer::recording::RecordingMailer;
    use shared::notify::recipient_limit;
    use shared::relay::PollerConfig;
    use std::sync::Arc;

    let db = TestDb::create().await;
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::default());
    let spellings = [
        "victim@gmail.com",
        "Victim+1@gmail.com",
        "v.ictim@gmail.com",
        "victim@googlemail.com",
        "vic.tim+x@gmail.com",
        "VICTIM@gmail.com",
    ];
    for (i, spelling) in spellings.iter().enumerate() {
        let organizer = Caller {
            person: person(&format!("organizer{}@example.com", i % 3)),
            subject: Some(format!("sub-{}", i % 3)),
        };
        let start =
            shared::booking::domain::parse_instant("2031-03-03T09:00:00Z").unwrap() + chrono::Duration::hours(i as i64);
        let new = NewBooking {
            title: Title::parse("Sync").unwrap(),
            description: None,
            location: None,
            timezone: Timezone::parse("UTC").unwrap(),
            range: TimeRange::new(start, start + chrono::Duration::minutes(30)).unwrap(),
            attendees: vec![person(spelling), person(&format!("bystander{i}@example.com"))],
        };
        service.create(&organizer, new, None).await.unwrap();
    }
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("w");
    config.mails_per_recipient_per_day = 4;
    poller(&db, mailer.clone(), config).drain().await.unwrap();

    let to_victim = mailer.deliveries().iter().filter(|d| !d.recipient.starts_with("bystander")).count();
    assert_eq!(to_victim, 4, "the mailbox is mailed its limit, whatever the spelling");
    let to_bystanders = mailer.deliveries().iter().filter(|d| d.recipient.starts_with("bystander")).count();
    assert_eq!(to_bystanders, 6, "everyone else is mailed");
    assert_eq!(send_counts(&db).await[&SendStatus::Capped], 2);
    assert!(event_counts(&db).await.iter().all(|(s, n)| *s == EventStatus::Done || *n == 0), "nothing is retried");
    let client = db.pool.get().await.unwrap();
    assert_eq!(recipient_limit::today(&client, "victim@gmail.com").await.unwrap(), 6, "the refused count too");
    let why: String =
        db.scalar("SELECT last_error FROM booking_notification_sends WHERE status = 'CAPPED' LIMIT 1").await;
    assert!(why.contains("4 mails a day"), "{why}");
}

/// A send that is certainly not made (a known failure releases its claim)
/// gives its count back: a retry is not a second mail.
#[tokio::test]
async fn a_released_send_gives_its_count_back() {
    use outbox_tests::outbox::{create_booking, poller};
    use shared::notify::mailer::recording::RecordingMailer;
    use shared::notify::mailer::SendOutcome;
    use shared::notify::recipient_limit;
    use shared::relay::PollerConfig;
    use std::sync::Arc;

    let db = TestDb::create().await;
    create_booking(&db, 1, &["carol@example.com"]).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("carol@example.com", SendOutcome::NotSent { reason: "connection refused".into() }, 3);
    let mut config = PollerConfig::for_tests("w");
    config.mails_per_recipient_per_day = 1;
    let p = poller(&db, mailer.clone(), config);
    for _ in 0..4 {
        p.drain().await.unwrap();
    }
    assert_eq!(mailer.count(), 1, "three refusals, then the one mail the limit allows");
    let client = db.pool.get().await.unwrap();
    assert_eq!(recipient_limit::today(&client, "carol@example.com").await.unwrap(), 1);
}
