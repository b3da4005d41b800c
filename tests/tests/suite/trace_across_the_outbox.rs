//! One trace per booking, across the outbox: the request's W3C trace
//! context is stored with its event in the same transaction, each
//! recipient's send span links to it, SES's events about the message name
//! it, and a crash and a retry in another process change none of that.
//! Spans are read with an in-process exporter (`outbox_tests::spans`), and
//! from a worker process's own JSON logs.

use std::sync::Arc;

use outbox_tests::api::{booking_body, TestApi, BOB};
use outbox_tests::outbox::{killed, poller, sweep_after_timeout, Worker};
use outbox_tests::ses_events::{origin, send_event};
use outbox_tests::{spans, TestDb};
use serde_json::{json, Value};
use shared::notify::evidence::intake;
use shared::notify::mailer::recording::RecordingMailer;
use shared::relay::poller::FAULT_AFTER_CLAIM;
use shared::relay::PollerConfig;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

fn two_attendees() -> String {
    let mut body = booking_body(9);
    body["attendees"] =
        json!([{"email": "alice@example.com", "name": "Alice"}, {"email": "carol@example.com", "name": "Carol"}]);
    body.to_string()
}

#[tokio::test]
async fn a_bookings_request_and_each_recipients_send_share_one_trace_and_the_callers_is_a_link() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let (exported, _guard) = spans::export();
    let created =
        api.send("POST", "/bookings", Some(BOB), &[("traceparent", TRACEPARENT)], Some(&two_attendees())).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let request = exported.named("request");
    assert_eq!(request.len(), 1);
    let ours = request[0].fields["trace_id"].clone();
    assert_ne!(ours, TRACE_ID, "our own trace, not the caller's");
    assert_eq!(request[0].fields["link_trace_id"], TRACE_ID, "the caller's, as a link");
    let stored: String = db.scalar("SELECT traceparent FROM outbox_events").await;
    assert!(stored.starts_with(&format!("00-{ours}-")), "stored with the event, in its transaction: {stored}");

    poller(&db, Arc::new(RecordingMailer::new()), PollerConfig::for_tests("w")).drain().await.unwrap();
    let sends = exported.named("send");
    assert_eq!(sends.len(), 2, "one span per recipient: {sends:?}");
    for send in &sends {
        assert_eq!(send.fields["link_trace_id"], ours, "a link to the request's trace: {send:?}");
    }
}

/// Low 8 of issue 37, as the attack: Mallory sends Bob's trace id as her
/// `traceparent`, to file her bookings' requests and sends under Bob's
/// trace. Each request gets a trace of its own.
#[tokio::test]
async fn a_caller_cannot_choose_the_trace_its_booking_is_filed_under() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mallory = outbox_tests::api::Caller { email: "mallory@example.com", name: "Mallory", sub: "sub-mallory" };
    for (who, hour) in [(BOB, 9), (mallory, 10)] {
        let mut body: Value = serde_json::from_str(&two_attendees()).unwrap();
        body["start"] = json!(format!("2026-12-01T{hour:02}:00:00Z"));
        body["end"] = json!(format!("2026-12-01T{hour:02}:30:00Z"));
        let created =
            api.send("POST", "/bookings", Some(who), &[("traceparent", TRACEPARENT)], Some(&body.to_string())).await;
        assert_eq!(created.status, 201, "{}", created.body);
    }
    let distinct: i64 = db.scalar("SELECT count(DISTINCT substr(traceparent, 4, 32)) FROM outbox_events").await;
    assert_eq!(distinct, 2, "one trace per request");
    let adopted: i64 =
        db.scalar(&format!("SELECT count(*) FROM outbox_events WHERE traceparent LIKE '00-{TRACE_ID}-%'")).await;
    assert_eq!(adopted, 0, "the caller's trace is never adopted");
}

#[tokio::test]
async fn a_request_without_a_valid_traceparent_starts_a_trace_its_event_keeps() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let (exported, _guard) = spans::export();
    for header in [None, Some("00-zz-bad")] {
        let headers: Vec<(&str, &str)> = header.map(|h| ("traceparent", h)).into_iter().collect();
        let mut body: Value = serde_json::from_str(&two_attendees()).unwrap();
        body["start"] = json!(if header.is_none() { "2026-12-01T10:00:00Z" } else { "2026-12-01T11:00:00Z" });
        body["end"] = json!(if header.is_none() { "2026-12-01T10:30:00Z" } else { "2026-12-01T11:30:00Z" });
        let created = api.send("POST", "/bookings", Some(BOB), &headers, Some(&body.to_string())).await;
        assert_eq!(created.status, 201, "{}", created.body);
        let trace_id = exported.named("request").last().unwrap().fields["trace_id"].clone();
        assert_eq!(trace_id.len(), 32);
        let id = uuid::Uuid::parse_str(created.body["id"].as_str().unwrap()).unwrap();
        let client = db.pool.get().await.unwrap();
        let stored: String = client
            .query_one("SELECT traceparent FROM outbox_events WHERE aggregate_id = $1", &[&id])
            .await
            .unwrap()
            .get(0);
        assert!(stored.starts_with(&format!("00-{trace_id}-")), "{stored} keeps {trace_id}");
    }
}

#[tokio::test]
async fn the_trace_survives_a_crash_and_the_retry_in_another_process() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let created =
        api.send("POST", "/bookings", Some(BOB), &[("traceparent", TRACEPARENT)], Some(&two_attendees())).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let stored: String = db.scalar("SELECT traceparent FROM outbox_events").await;
    let ours = shared::telemetry::trace::trace_id_of(&stored).unwrap();
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    assert!(killed(worker.run(&db, &format!("{FAULT_AFTER_CLAIM}=kill"), &[]).await), "a real death after the claim");
    sweep_after_timeout(&db, 8).await;
    let (status, stdout) = worker.run_logged(&db, "").await;
    assert!(status.success());
    let linked: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["span"]["name"] == "send" && l["fields"]["message"] == "accepted by the provider")
        .collect();
    assert_eq!(linked.len(), 2, "each recipient's send logged once, by the retry:\n{stdout}");
    for line in &linked {
        assert_eq!(line["span"]["link_trace_id"], ours.as_str(), "{line}");
    }
    assert!(!stdout.contains("alice@example.com"), "addresses stay masked");
}

#[tokio::test]
async fn ses_feedback_names_the_trace_its_message_carried_and_ignores_a_bad_one() {
    let db = TestDb::create().await;
    let (exported, _guard) = spans::export();
    for (tag, want) in [(TRACE_ID, TRACE_ID), ("not-a-trace-id; DROP", "-")] {
        let mut event = send_event(uuid::Uuid::now_v7());
        event["detail"]["mail"]["tags"][shared::notify::mailer::tags::TRACE] = json!([tag]);
        intake::handle(&db.pool, &origin(), &event).await.unwrap();
        let span = exported.named("ses_event").pop().unwrap();
        assert_eq!(span.fields["link_trace_id"], want, "{span:?}");
    }
}

#[test]
fn a_send_carries_its_trace_to_ses_as_a_message_tag() {
    let booking: shared::booking::domain::Booking = serde_json::from_value(json!({
        "id": "01937a4e-8f2b-7c3d-9a1e-5b6c7d8e9f01", "title": "t", "description": null, "location": null,
        "start": "2027-03-01T09:00:00Z", "end": "2027-03-01T09:30:00Z", "timezone": "UTC",
        "organizer": {"email": "bob@example.com", "name": "Bob"},
        "attendees": [{"email": "alice@example.com", "name": "Alice"}],
        "status": "CONFIRMED", "version": 1,
        "created_at": "2027-02-10T10:15:30Z", "updated_at": "2027-02-10T10:15:30Z"
    }))
    .unwrap();
    let event = shared::booking::events::BookingEvent {
        id: uuid::Uuid::now_v7(),
        event_type: shared::booking::events::EventType::BookingConfirmed,
        payload: shared::booking::events::EventPayload::of(booking.clone()),
        trace_id: Some(TRACE_ID.into()),
    };
    let n = shared::notify::notification::Notification::new(
        &event,
        booking.attendees[0].clone(),
        shared::booking::events::Notice::Request,
        true,
    );
    let tags = shared::notify::mailer::ses::tags(&n);
    assert!(tags.iter().any(|t| t.name() == shared::notify::mailer::tags::TRACE && t.value() == TRACE_ID), "{tags:?}");
}
