//! The SES v2 mailer against moto: real invitations, checked by an
//! independent parser (Python's email + icalendar), and sends that can never
//! be repeated behind the poller's back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::api::{Caller, TestApi};
use outbox_tests::outbox::{event_status, sends, EventStatus, SendStatus};
use outbox_tests::ses::*;
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::fault::Faults;
use shared::notify::mailer::ses::SesMailer;
use shared::relay::{Poller, PollerConfig};

const BOB: Caller<'static> = Caller { email: "bob@example.com", name: "Bob Organizer", sub: "sub-bob" };

fn ses_poller(db: &TestDb, mailer: SesMailer) -> Poller {
    Poller::new(db.pool.clone(), Arc::new(mailer), Faults::none(), PollerConfig::for_tests("ses-test"))
}

fn for_recipient<'a>(mail: &'a [Value], to: &str) -> Vec<&'a Value> {
    mail.iter().filter(|m| m["to_addresses"] == json!([to])).collect()
}

#[tokio::test]
async fn booking_to_poller_to_moto_sends_one_valid_invite_per_attendee_and_updates_replace_it() {
    let endpoint = moto_endpoint();
    let sender = unique_sender();
    verify_sender(&endpoint, &sender).await;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let poller = ses_poller(&db, ses_mailer(ses_config(&endpoint, &sender)));

    let body = json!({
        "title": "Revue de conception — été",
        "start": "2026-12-01T09:00:00Z",
        "end": "2026-12-01T09:45:00Z",
        "timezone": "Europe/Paris",
        "attendees": [
            {"email": "alice@example.com", "name": "Alice Attendee"},
            {"email": "zoe@example.com", "name": "Zoë Ünïcode"}
        ],
        "location": "Salle 4; étage 2",
        "description": "Agenda:\n1. outbox\n2. questions"
    });
    let created = api.post("/bookings", BOB, &body).await;
    assert_eq!(created.status, 201);
    let id = created.body["id"].as_str().unwrap().to_string();
    let summary = poller.drain().await.unwrap();
    assert_eq!(summary.sent, 2, "{summary:?}");

    let mail = sent_mail(&endpoint, &sender);
    assert_eq!(mail.len(), 2, "exactly one message per attendee");
    for (to, name) in [("alice@example.com", "Alice Attendee"), ("zoe@example.com", "Zoë Ünïcode")] {
        let msgs = for_recipient(&mail, to);
        assert_eq!(msgs.len(), 1, "{to}");
        let m = msgs[0];
        assert!(m["to"].as_str().unwrap().contains(name), "display name decoded: {}", m["to"]);
        assert_eq!(m["defects"], json!([]));
        assert_eq!(m["content_type"], "multipart/alternative");
        assert_eq!(m["parts"], json!(["text/plain", "text/html", "text/calendar"]));
        assert_eq!(m["subject"], "Invitation: Revue de conception — été @ Tue 1 Dec 2026 10:00 (CET)");
        assert!(m["reply_to"].as_str().unwrap().contains("bob@example.com"));
        let cal = &m["calendar"];
        assert_eq!(cal["mime_method"], "REQUEST");
        assert_eq!(cal["METHOD"], "REQUEST", "METHOD matches the MIME parameter");
        assert_eq!(cal["VERSION"], "2.0");
        assert_eq!(cal["events"], 1);
        assert_eq!(cal["UID"], format!("{id}@booking-outbox"));
        assert_eq!(cal["SEQUENCE"], 0);
        assert_eq!(cal["STATUS"], "CONFIRMED");
        assert_eq!(cal["SUMMARY"], "Revue de conception — été");
        assert_eq!(cal["LOCATION"], "Salle 4; étage 2");
        assert_eq!(cal["DESCRIPTION"], "Agenda:\n1. outbox\n2. questions");
        assert_eq!(cal["DTSTART"], "2026-12-01T09:00:00+00:00");
        assert_eq!(cal["DTEND"], "2026-12-01T09:45:00+00:00");
        assert_eq!(cal["ORGANIZER"], "mailto:bob@example.com");
        assert_eq!(cal["ORGANIZER_CN"], "Bob Organizer");
        let attendees = cal["ATTENDEES"].as_array().unwrap();
        assert_eq!(attendees.len(), 2);
        assert!(attendees.iter().all(|a| a["RSVP"] == "TRUE" && a["PARTSTAT"] == "NEEDS-ACTION"));
        assert!(attendees.iter().any(|a| a["value"] == "mailto:zoe@example.com" && a["CN"] == "Zoë Ünïcode"));
        assert!(m["text"].as_str().unwrap().contains("Bob Organizer <bob@example.com> invited you"));
    }

    // Reschedule: same UID, higher SEQUENCE, still a REQUEST.
    let patch = json!({"start": "2026-12-02T13:00:00Z", "end": "2026-12-02T14:00:00Z", "version": 1}).to_string();
    assert_eq!(api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&patch)).await.status, 200);
    poller.drain().await.unwrap();
    // Cancel: same UID, higher again, a CANCEL.
    assert_eq!(api.post(&format!("/bookings/{id}/cancel"), BOB, &json!({})).await.status, 200);
    poller.drain().await.unwrap();

    let mail = sent_mail(&endpoint, &sender);
    assert_eq!(mail.len(), 6);
    for to in ["alice@example.com", "zoe@example.com"] {
        let cals: Vec<&Value> = for_recipient(&mail, to).iter().map(|m| &m["calendar"]).collect();
        let seqs: Vec<(i64, &str, &str)> = cals
            .iter()
            .map(|c| {
                (c["SEQUENCE"].as_i64().unwrap(), c["METHOD"].as_str().unwrap(), c["mime_method"].as_str().unwrap())
            })
            .collect();
        assert_eq!(seqs, vec![(0, "REQUEST", "REQUEST"), (1, "REQUEST", "REQUEST"), (2, "CANCEL", "CANCEL")], "{to}");
        assert!(cals.iter().all(|c| c["UID"] == format!("{id}@booking-outbox")), "one calendar entry per booking");
        assert_eq!(cals[1]["DTSTART"], "2026-12-02T13:00:00+00:00");
        assert_eq!(cals[2]["STATUS"], "CANCELLED");
        assert!(cals[2]["ATTENDEES"].as_array().unwrap().iter().all(|a| a["RSVP"].is_null()));
    }
    let subjects: Vec<String> =
        for_recipient(&mail, "alice@example.com").iter().map(|m| m["subject"].as_str().unwrap().to_string()).collect();
    assert!(subjects[1].starts_with("Updated invitation:") && subjects[2].starts_with("Cancelled:"), "{subjects:?}");
}

#[tokio::test]
async fn hostile_titles_and_names_cannot_add_or_split_headers() {
    let endpoint = moto_endpoint();
    let sender = unique_sender();
    verify_sender(&endpoint, &sender).await;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let hostile_title = "=?utf-8?q?Bcc=3A_eve=40evil.example?= \"quoted\" <b>; Bcc: eve@evil.example";
    let hostile_name = "Eve \"Bcc: eve@evil.example\" <eve@evil.example>, mallory@evil.example";
    let body = json!({
        "title": hostile_title,
        "start": "2026-12-01T09:00:00Z",
        "end": "2026-12-01T09:30:00Z",
        "timezone": "UTC",
        "attendees": [{"email": "alice@example.com", "name": hostile_name}]
    });
    assert_eq!(api.post("/bookings", BOB, &body).await.status, 201);
    ses_poller(&db, ses_mailer(ses_config(&endpoint, &sender))).drain().await.unwrap();
    let mail = sent_mail(&endpoint, &sender);
    assert_eq!(mail.len(), 1);
    let m = &mail[0];
    let mut headers: Vec<String> =
        m["header_names"].as_array().unwrap().iter().map(|h| h.as_str().unwrap().to_string()).collect();
    headers.sort();
    assert_eq!(
        headers,
        ["Content-Type", "Date", "From", "MIME-Version", "Message-ID", "Reply-To", "Subject", "To"],
        "no header was added"
    );
    assert_eq!(m["to_addresses"], json!(["alice@example.com"]), "the name could not add a recipient");
    assert!(m["subject"].as_str().unwrap().starts_with(&format!("Invitation: {hostile_title} @")), "{}", m["subject"]);
    assert_eq!(m["calendar"]["SUMMARY"], hostile_title);
    assert_eq!(m["defects"], json!([]));
    assert!(m["html"].as_str().unwrap().contains("&#60;b&#62;"), "HTML-escaped in the HTML part");
}

/// A connection that could not even be made (refused) wrote no request:
/// nothing reached SES, so the claim is released and the event retried
/// (here until its attempts run out), never left UNKNOWN.
#[tokio::test]
async fn send_to_a_closed_port_sent_nothing_so_it_is_retried_never_unknown() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    assert_eq!(api.post("/bookings", BOB, &outbox_tests::api::booking_body(9)).await.status, 201);
    let event = outbox_tests::outbox::only_event_id(&db).await;
    let poller = ses_poller(&db, ses_mailer(ses_config(&closed_port_endpoint(), "bookings@example.com")));
    let summary = poller.drain().await.unwrap();
    assert_eq!((summary.unknown, summary.sent), (0, 0), "{summary:?}");
    assert!(summary.released >= 1, "{summary:?}");
    assert!(sends(&db, event).await.is_empty(), "every claim released: nothing was sent");
    let (status, _, reason) = event_status(&db, event).await;
    assert_eq!(status, EventStatus::Dead, "retried until its attempts ran out");
    assert!(reason.unwrap_or_default().contains("Connect"), "the reason names the connection");
}

#[tokio::test]
async fn send_to_a_hanging_server_is_unknown_and_sent_exactly_once() {
    let endpoint = moto_endpoint();
    let proxy = FaultProxy::start(&endpoint, vec![Fault::Hang, Fault::Hang, Fault::Hang]).await;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    assert_eq!(api.post("/bookings", BOB, &outbox_tests::api::booking_body(9)).await.status, 201);
    let event = outbox_tests::outbox::only_event_id(&db).await;
    let started = Instant::now();
    let summary =
        ses_poller(&db, ses_mailer(ses_config(&proxy.endpoint, "bookings@example.com"))).drain().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "bounded by the explicit timeouts");
    assert_eq!(summary.unknown, 1);
    assert_eq!(proxy.request_count(), 1, "the SDK did not retry a send that may have been accepted");
    assert_eq!(sends(&db, event).await, vec![("alice@example.com".into(), SendStatus::Unknown)]);
}

#[tokio::test]
async fn throttled_send_is_released_and_later_delivered_once() {
    let endpoint = moto_endpoint();
    let sender = unique_sender();
    verify_sender(&endpoint, &sender).await;
    let proxy = FaultProxy::start(&endpoint, vec![Fault::Throttle]).await;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    assert_eq!(api.post("/bookings", BOB, &outbox_tests::api::booking_body(9)).await.status, 201);
    let event = outbox_tests::outbox::only_event_id(&db).await;
    let poller = ses_poller(&db, ses_mailer(ses_config(&proxy.endpoint, &sender)));

    let first = poller.poll_once().await.unwrap();
    assert_eq!((first.released, first.throttled, first.retried, first.sent), (1, 1, 0, 0));
    assert!(sends(&db, event).await.is_empty(), "claim released");
    assert!(sent_mail(&endpoint, &sender).is_empty());
    assert_eq!(proxy.request_count(), 1, "no SDK retry");
    let (status, attempts, _) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Pending, 0), "due again soon, without using an attempt");

    tokio::time::sleep(shared::relay::batch::THROTTLED_RETRY).await;
    let second = poller.drain().await.unwrap();
    assert_eq!(second.sent, 1);
    let mail = sent_mail(&endpoint, &sender);
    assert_eq!(mail.len(), 1, "delivered once");
    assert_eq!(sends(&db, event).await, vec![("alice@example.com".into(), SendStatus::Sent)]);
    let requests = proxy.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let body = &requests[1];
    assert!(body.contains(r#""Name":"event_id""#) && body.contains(&event.to_string()), "EmailTags carry the event id");
    assert!(body.contains(r#""Name":"event_type""#) && body.contains("BOOKING_CONFIRMED"));
    let claim: uuid::Uuid = db.scalar("SELECT id FROM booking_notification_sends").await;
    assert!(body.contains(r#""Name":"claim""#) && body.contains(&claim.to_string()), "and the claim, for SES's events");
}

#[tokio::test]
async fn the_sender_name_is_fixed_and_the_organizer_is_named_in_reply_to_and_the_body() {
    let endpoint = moto_endpoint();
    let sender = unique_sender();
    verify_sender(&endpoint, &sender).await;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    // An organizer who calls themselves something official.
    let spoofer = Caller { email: "bob@example.com", name: "Your Bank Security", sub: "sub-bob" };
    let body = json!({
        "title": "Account review",
        "start": "2026-12-01T09:00:00Z",
        "end": "2026-12-01T09:30:00Z",
        "timezone": "UTC",
        "attendees": [{"email": "alice@example.com", "name": "Alice"}]
    });
    assert_eq!(api.post("/bookings", spoofer, &body).await.status, 201);
    ses_poller(&db, ses_mailer(ses_config(&endpoint, &sender))).drain().await.unwrap();
    let mail = sent_mail(&endpoint, &sender);
    assert_eq!(mail.len(), 1);
    let m = &mail[0];
    assert_eq!(m["from"], format!("Bookings <{sender}>"), "the From name comes from configuration only");
    assert!(m["reply_to"].as_str().unwrap().contains("bob@example.com"), "{}", m["reply_to"]);
    assert!(
        m["text"].as_str().unwrap().contains("Your Bank Security <bob@example.com> invited you"),
        "the body says who organizes it: {}",
        m["text"]
    );
}
