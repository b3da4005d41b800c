//! Each attendee's own time zone (issue 40, its first part): the subject
//! and the text of their messages show the meeting's time where they are,
//! the iCalendar part is the same for everyone, and a change of an
//! attendee's zone alone is no news (no mail). Messages go through the real
//! SMTP mailer to aiosmtpd and are read back by Python's email parser.

use std::sync::Arc;

use outbox_tests::api::{TestApi, BOB};
use outbox_tests::smtp::{Options, SmtpServer};
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::fault::Faults;
use shared::notify::mailer::smtp::SmtpMailer;
use shared::relay::{Poller, PollerConfig};

async fn drain(db: &TestDb, server: &SmtpServer) {
    let mailer = Arc::new(SmtpMailer::new(server.config()).unwrap());
    Poller::new(db.pool.clone(), mailer, Faults::none(), PollerConfig::for_tests("zones")).drain().await.unwrap();
}

/// The parsed messages to `to`, in order.
fn to(server: &SmtpServer, to: &str) -> Vec<Value> {
    server.parsed().into_iter().filter(|m| m["to_addresses"][0] == to).collect()
}

/// A booking in Paris for an hour from `start`, with [`attendees`] unless
/// given others.
fn booking(title: &str, start: &str, people: Value) -> Value {
    let end = (chrono::DateTime::parse_from_rfc3339(start).unwrap() + chrono::Duration::hours(1)).to_rfc3339();
    json!({"title": title, "start": start, "end": end, "timezone": "Europe/Paris", "attendees": people})
}

fn attendees() -> Value {
    json!([
        {"email": "paris@example.com", "name": "Amélie"},
        {"email": "tokyo@example.com", "name": "山田 太郎", "timezone": "Asia/Tokyo"},
        {"email": "newyork@example.com", "name": "سارة", "timezone": "America/New_York"},
    ])
}

#[tokio::test]
async fn each_attendee_reads_the_time_in_their_own_zone_and_the_calendar_part_is_the_same() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    // 7 January 2030, 09:00 UTC: 10:00 in Paris, 18:00 in Tokyo, 04:00 in New York.
    let body = booking("設計レビュー · مراجعة", "2030-01-07T09:00:00Z", attendees());
    let created = api.post("/bookings", BOB, &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["attendees"][1]["timezone"], "Asia/Tokyo");
    assert!(created.body["attendees"][0].get("timezone").is_none(), "none asked: none shown");
    drain(&db, &server).await;
    let (paris, tokyo, newyork) =
        (to(&server, "paris@example.com"), to(&server, "tokyo@example.com"), to(&server, "newyork@example.com"));
    assert!(paris[0]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 10:00 (CET)"), "{}", paris[0]["subject"]);
    assert!(tokyo[0]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 18:00 (JST)"), "{}", tokyo[0]["subject"]);
    assert!(
        newyork[0]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 04:00 (EST)"),
        "{}",
        newyork[0]["subject"]
    );
    assert!(tokyo[0]["text"]
        .as_str()
        .unwrap()
        .contains("When:  Mon 7 Jan 2030 18:00 (JST) – Mon 7 Jan 2030 19:00 (JST)"));
    for m in [&paris[0], &tokyo[0], &newyork[0]] {
        assert!(m["subject"].as_str().unwrap().contains("設計レビュー · مراجعة"), "{}", m["subject"]);
        assert_eq!(m["calendar"], paris[0]["calendar"], "one calendar object for everyone");
        assert_eq!(m["defects"], json!([]));
    }
    let names: Vec<&str> =
        paris[0]["calendar"]["ATTENDEES"].as_array().unwrap().iter().map(|a| a["CN"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["Amélie", "山田 太郎", "سارة"], "names survive whole");
}

/// Paris moves its clocks on 31 March 2030, New York on 10 March: between
/// them a meeting at 13:00 UTC is 09:00 in New York (EDT) and 14:00 in
/// Paris (still CET), five hours apart instead of six.
#[tokio::test]
async fn a_daylight_saving_boundary_between_the_organizers_zone_and_an_attendees() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let body = json!({
        "title": "Planning", "start": "2030-03-20T13:00:00Z", "end": "2030-03-20T13:30:00Z",
        "timezone": "Europe/Paris", "attendees": attendees(),
    });
    assert_eq!(api.post("/bookings", BOB, &body).await.status, 201);
    drain(&db, &server).await;
    let subject = |who: &str| to(&server, who)[0]["subject"].as_str().unwrap().to_string();
    assert!(subject("paris@example.com").ends_with("Wed 20 Mar 2030 14:00 (CET)"), "{}", subject("paris@example.com"));
    assert!(
        subject("newyork@example.com").ends_with("Wed 20 Mar 2030 09:00 (EDT)"),
        "{}",
        subject("newyork@example.com")
    );
}

/// A change of an attendee's own zone alone is no news: a new version, no
/// mail; their next message reads in the new zone.
#[tokio::test]
async fn changing_only_an_attendees_zone_mails_no_one_and_their_next_message_uses_it() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let body = booking("Planning", "2030-01-07T09:00:00Z", attendees());
    let created = api.post("/bookings", BOB, &body).await;
    let id = created.body["id"].as_str().unwrap().to_string();
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), 3);
    let mut people = attendees();
    people[0]["timezone"] = json!("Asia/Kolkata");
    let change = json!({"version": 1, "attendees": people});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&change.to_string())).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.body["version"], 2);
    assert_eq!(resp.body["attendees"][0]["timezone"], "Asia/Kolkata");
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), 3, "no news, no mail");
    let change = json!({"version": 2, "title": "Planning, room 4"});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&change.to_string())).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    drain(&db, &server).await;
    let paris = to(&server, "paris@example.com");
    assert_eq!(paris.len(), 2);
    assert!(paris[1]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 14:30 (IST)"), "{}", paris[1]["subject"]);
}

#[tokio::test]
async fn an_unknown_attendee_zone_is_refused_with_the_field_named_and_nothing_written() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    for zone in [json!("Mars/Olympus_Mons"), json!(""), json!(9), json!("Europe/Paris\u{0}")] {
        let mut people = attendees();
        people[2]["timezone"] = zone.clone();
        let body = booking("Planning", "2030-01-07T09:00:00Z", people);
        let resp = api.post("/bookings", BOB, &body).await;
        assert_eq!(resp.status, 422, "{zone}: {}", resp.body);
        let fields: Vec<&str> =
            resp.body["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(fields, vec!["attendees[2].timezone"], "{zone}: {}", resp.body);
    }
    let written: i64 = db.scalar("SELECT count(*) FROM bookings").await;
    assert_eq!(written, 0);
}
