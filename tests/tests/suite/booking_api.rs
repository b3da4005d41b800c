//! The booking API on a real Postgres: one transaction for the booking and its
//! outbox event, idempotency keys, access rules, overlap and concurrency.

use outbox_tests::api::{booking_body, test_config, Caller, TestApi, ALICE, BOB, EVE};
use outbox_tests::outbox::{events_of, EventStatus};
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::fault::{FaultAction, Faults};

#[tokio::test]
async fn create_writes_booking_and_confirmed_event_in_one_transaction() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let resp = api.post("/bookings", BOB, &booking_body(9)).await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    let id = resp.body["id"].as_str().unwrap().to_string();
    assert_eq!(resp.header("location"), Some(format!("{}/bookings/{id}", outbox_tests::api::API_BASE).as_str()));
    assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 7, "ids are UUIDv7");
    assert_eq!(resp.body["organizer"], json!({"email": "bob@example.com", "name": "Bob Organizer"}));
    assert_eq!(resp.body["status"], "CONFIRMED");
    assert_eq!(resp.body["version"], 1);
    assert_eq!(resp.body["start"], "2026-12-01T09:00:00Z");

    assert_eq!(db.count("outbox_events").await, 1);
    let event = events_of(&db, id.parse().unwrap()).await.remove(0);
    assert_eq!(event.aggregate_id.to_string(), id);
    assert_eq!(event.aggregate_version, 1);
    assert_eq!(event.event_type, "BOOKING_CONFIRMED");
    assert_eq!(event.status, EventStatus::Pending);
    assert_eq!(event.attempts, 0);
    assert_eq!(event.payload["booking"], resp.body, "the event carries the booking as created");
    // Both rows were written by the same transaction.
    let same_tx: bool =
        db.scalar("SELECT (SELECT xmin::text FROM bookings) = (SELECT xmin::text FROM outbox_events)").await;
    assert!(same_tx, "booking and outbox event must commit in one transaction");
}

#[tokio::test]
async fn fault_between_the_two_inserts_leaves_neither_row() {
    let db = TestDb::create().await;
    let faults = Faults::none().with(shared::booking::service::FAULT_CREATE_BETWEEN_INSERTS, FaultAction::Error);
    let api = TestApi::with(&db, faults, test_config());
    let resp = api.post("/bookings", BOB, &booking_body(9)).await;
    assert_eq!(resp.status, 500);
    assert_eq!(db.count("bookings").await, 0, "booking rolled back with the failed event insert");
    assert_eq!(db.count("outbox_events").await, 0);
    // The same request succeeds once the fault is gone: nothing half-written blocks it.
    assert_eq!(TestApi::new(&db).post("/bookings", BOB, &booking_body(9)).await.status, 201);
}

#[tokio::test]
async fn fault_between_change_and_event_leaves_booking_unchanged() {
    let db = TestDb::create().await;
    let booking = TestApi::new(&db).create_as_bob(9).await;
    let id = booking["id"].as_str().unwrap();
    let faults = Faults::none().with(shared::booking::service::FAULT_CHANGE_BETWEEN_WRITES, FaultAction::Error);
    let api = TestApi::with(&db, faults, test_config());
    assert_eq!(api.post(&format!("/bookings/{id}/cancel"), BOB, &json!({})).await.status, 500);
    let after = TestApi::new(&db).get(&format!("/bookings/{id}"), BOB).await;
    assert_eq!(after.body["status"], "CONFIRMED");
    assert_eq!(after.body["version"], 1);
    assert_eq!(db.count("outbox_events").await, 1);
}

#[tokio::test]
async fn idempotency_key_replay_returns_original_response_and_creates_nothing() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let body = booking_body(9).to_string();
    let first = api.send("POST", "/bookings", Some(BOB), &[("Idempotency-Key", "k-1")], Some(&body)).await;
    assert_eq!(first.status, 201);
    // Same JSON, reformatted and with keys reordered: still the same request.
    let reordered: Value = serde_json::from_str(&body).unwrap();
    let pretty = serde_json::to_string_pretty(&reordered).unwrap();
    let replay = api.send("POST", "/bookings", Some(BOB), &[("Idempotency-Key", "k-1")], Some(&pretty)).await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("location"), first.header("location"));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(db.count("bookings").await, 1);
    assert_eq!(db.count("outbox_events").await, 1);
}

#[tokio::test]
async fn idempotency_key_with_a_different_body_is_rejected() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let first = api
        .send("POST", "/bookings", Some(BOB), &[("Idempotency-Key", "k-1")], Some(&booking_body(9).to_string()))
        .await;
    assert_eq!(first.status, 201);
    let other = api
        .send("POST", "/bookings", Some(BOB), &[("Idempotency-Key", "k-1")], Some(&booking_body(11).to_string()))
        .await;
    assert_eq!(other.status, 422, "{}", other.body);
    assert_eq!(other.body["type"], outbox_tests::api::problem_type("idempotency-key-mismatch"));
    assert_eq!(db.count("bookings").await, 1);
    // Keys are per caller: Alice's "k-1" is her own.
    let alice = api
        .send("POST", "/bookings", Some(ALICE), &[("Idempotency-Key", "k-1")], Some(&booking_body(11).to_string()))
        .await;
    assert_eq!(alice.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_with_one_idempotency_key_create_exactly_one_booking() {
    let db = TestDb::create().await;
    let api = std::sync::Arc::new(TestApi::new(&db));
    let body = booking_body(9).to_string();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (api, body) = (api.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            api.send("POST", "/bookings", Some(BOB), &[("Idempotency-Key", "same")], Some(&body)).await
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let resp = t.await.unwrap();
        assert_eq!(resp.status, 201, "{}", resp.body);
        ids.insert(resp.body["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 1, "every response names the same booking");
    assert_eq!(db.count("bookings").await, 1);
    assert_eq!(db.count("outbox_events").await, 1);
}

#[tokio::test]
async fn a_failed_request_does_not_burn_its_idempotency_key() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    api.create_as_bob(9).await; // occupies 09:00-09:30
    let body = booking_body(9).to_string();
    let clash = api.send("POST", "/bookings", Some(BOB), &[("Idempotency-Key", "k")], Some(&body)).await;
    assert_eq!(clash.status, 409);
    assert_eq!(db.count("idempotency_keys").await, 0, "the key rolled back with the booking");
}

#[tokio::test]
async fn organizer_and_attendees_may_read_a_booking_and_nobody_else() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let booking = api.create_as_bob(9).await;
    let path = format!("/bookings/{}", booking["id"].as_str().unwrap());
    // The organizer also sees where each notification stands.
    let mut read = api.get(&path, BOB).await.body;
    let notifications = read.as_object_mut().unwrap().remove("notifications").expect("the organizer's notifications");
    assert_eq!(read, booking);
    assert_eq!(notifications[0]["state"], "pending", "{notifications}");
    assert_eq!(api.get(&path, ALICE).await.body, booking, "an attendee reads the booking without them");
    // Attendee addresses match whatever case the token uses.
    let alice_upper = Caller { email: "ALICE@example.com", name: "Alice", sub: "sub-alice" };
    assert_eq!(api.get(&path, alice_upper).await.status, 200);
    let stranger = api.get(&path, EVE).await;
    assert_eq!(stranger.status, 404, "a stranger cannot learn the booking exists");
    assert_eq!(api.get(&format!("/bookings/{}", uuid::Uuid::now_v7()), BOB).await.status, 404);
    assert_eq!(api.get("/bookings/not-a-uuid", BOB).await.status, 404);
    // Only the organizer changes it: an attendee is refused, a stranger sees nothing.
    assert_eq!(api.post(&format!("{path}/cancel"), ALICE, &json!({})).await.status, 403);
    assert_eq!(api.post(&format!("{path}/cancel"), EVE, &json!({})).await.status, 404);
    let patch = json!({"start": "2026-12-02T09:00:00Z", "end": "2026-12-02T10:00:00Z", "version": 1}).to_string();
    assert_eq!(api.send("PATCH", &path, Some(ALICE), &[], Some(&patch)).await.status, 403);
    assert_eq!(db.count("outbox_events").await, 1, "refused changes write no event");
}

#[tokio::test]
async fn requests_without_identity_are_unauthorized() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let resp = api.send("POST", "/bookings", None, &[], Some(&booking_body(9).to_string())).await;
    assert_eq!(resp.status, 401);
    // The dev headers are ignored unless the insecure mode is switched on.
    let headers = [("X-Dev-User-Email", "bob@example.com")];
    let resp = api.send("POST", "/bookings", None, &headers, Some(&booking_body(9).to_string())).await;
    assert_eq!(resp.status, 401);
    let dev = TestApi::dev_mode(&db);
    let resp = dev.send("POST", "/bookings", None, &headers, Some(&booking_body(9).to_string())).await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert_eq!(resp.body["organizer"]["email"], "bob@example.com");
    let long_name = "B".repeat(101);
    let bad = [("X-Dev-User-Email", "bob@example.com"), ("X-Dev-User-Name", long_name.as_str())];
    assert_eq!(dev.send("POST", "/bookings", None, &bad, Some(&booking_body(11).to_string())).await.status, 401);
    assert_eq!(db.count("bookings").await, 1);
}

#[tokio::test]
async fn cancel_writes_cancelled_event_and_is_idempotent() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let booking = api.create_as_bob(9).await;
    let path = format!("/bookings/{}/cancel", booking["id"].as_str().unwrap());
    let first = api.post(&path, BOB, &json!({})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["status"], "CANCELLED");
    assert_eq!(first.body["version"], 2);
    let again = api.send("POST", &path, Some(BOB), &[], None).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body, "cancelling twice changes nothing");
    let id = first.body["id"].as_str().unwrap().parse().unwrap();
    let events: Vec<(String, i32)> =
        events_of(&db, id).await.into_iter().map(|e| (e.event_type, e.aggregate_version)).collect();
    assert_eq!(events, vec![("BOOKING_CONFIRMED".into(), 1), ("BOOKING_CANCELLED".into(), 2)]);
    // A cancelled booking no longer blocks the slot.
    assert_eq!(api.post("/bookings", BOB, &booking_body(9)).await.status, 201);
}

#[tokio::test]
async fn update_uses_optimistic_concurrency_and_writes_one_updated_event() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let booking = api.create_as_bob(9).await;
    let path = format!("/bookings/{}", booking["id"].as_str().unwrap());
    let body = |version: i32| {
        json!({"start": "2026-12-01T14:00:00+01:00", "end": "2026-12-01T15:00:00+01:00", "version": version})
            .to_string()
    };
    let moved = api.send("PATCH", &path, Some(BOB), &[], Some(&body(1))).await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.body["start"], "2026-12-01T13:00:00Z");
    assert_eq!(moved.body["version"], 2);
    let stale = api.send("PATCH", &path, Some(BOB), &[], Some(&body(1))).await;
    assert_eq!(stale.status, 409);
    assert_eq!(stale.body["type"], outbox_tests::api::problem_type("version-conflict"));
    assert_eq!(stale.body["current_version"], 2);

    let events = events_of(&db, booking["id"].as_str().unwrap().parse().unwrap()).await;
    let payload = &events.iter().find(|e| e.event_type == "BOOKING_UPDATED").unwrap().payload;
    assert_eq!(payload["booking"]["version"], 2);
    assert_eq!(payload["previous_start"], "2026-12-01T09:00:00Z");
    assert_eq!(payload["previous_attendees"], payload["booking"]["attendees"], "the attendees did not change");
    assert_eq!(db.count("outbox_events").await, 2, "the stale attempt wrote nothing");

    // A cancelled booking cannot be moved.
    assert_eq!(api.post(&format!("{path}/cancel"), BOB, &json!({})).await.status, 200);
    let resp = api.send("PATCH", &path, Some(BOB), &[], Some(&body(3))).await;
    assert_eq!(resp.status, 409);
    assert_eq!(resp.body["type"], outbox_tests::api::problem_type("cancelled"));
}

#[tokio::test]
async fn overlapping_active_bookings_for_one_organizer_get_409() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    api.create_as_bob(9).await;
    let mut overlapping = booking_body(9);
    overlapping["start"] = json!("2026-12-01T09:15:00Z");
    overlapping["end"] = json!("2026-12-01T10:00:00Z");
    let resp = api.post("/bookings", BOB, &overlapping).await;
    assert_eq!(resp.status, 409);
    assert_eq!(resp.body["type"], outbox_tests::api::problem_type("overlap"));
    // Back-to-back is fine, and other organizers are unaffected.
    let mut adjacent = booking_body(9);
    adjacent["start"] = json!("2026-12-01T09:30:00Z");
    adjacent["end"] = json!("2026-12-01T10:00:00Z");
    assert_eq!(api.post("/bookings", BOB, &adjacent).await.status, 201);
    assert_eq!(api.post("/bookings", ALICE, &overlapping).await.status, 201);
    // Rescheduling into an occupied slot is refused too.
    let second = api.create_as_bob(12).await;
    let path = format!("/bookings/{}", second["id"].as_str().unwrap());
    let patch = json!({"start": "2026-12-01T09:00:00Z", "end": "2026-12-01T09:45:00Z", "version": 1}).to_string();
    let resp = api.send("PATCH", &path, Some(BOB), &[], Some(&patch)).await;
    assert_eq!(resp.status, 409);
    assert_eq!(resp.body["type"], outbox_tests::api::problem_type("overlap"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_race_two_concurrent_requests_exactly_one_wins() {
    let db = TestDb::create().await;
    let api = std::sync::Arc::new(TestApi::new(&db));
    for round in 0..10u32 {
        let hour = round; // a fresh slot per round
        let mut a = booking_body(hour);
        a["title"] = json!(format!("A {round}"));
        let mut b = booking_body(hour);
        b["title"] = json!(format!("B {round}"));
        b["start"] = json!(format!("2026-12-01T{hour:02}:10:00Z"));
        let (api_a, api_b) = (api.clone(), api.clone());
        let (ra, rb) = tokio::join!(
            tokio::spawn(async move { api_a.post("/bookings", BOB, &a).await.status }),
            tokio::spawn(async move { api_b.post("/bookings", BOB, &b).await.status })
        );
        let mut statuses = vec![ra.unwrap(), rb.unwrap()];
        statuses.sort();
        assert_eq!(statuses, vec![201, 409], "round {round}");
    }
    assert_eq!(db.count("bookings").await, 10);
    assert_eq!(db.count("outbox_events").await, 10);
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problems_not_500s() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    assert_eq!(api.get("/nope", BOB).await.status, 404);
    let resp = api.send("DELETE", "/bookings", Some(BOB), &[], None).await;
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow"), Some("GET, POST"));
    let resp =
        api.send("POST", "/bookings/01937a4e-8f2b-7c3d-9a1e-5b6c7d8e9f01/notifications", Some(BOB), &[], None).await;
    assert_eq!((resp.status, resp.header("allow")), (405, Some("GET")));
}

#[tokio::test]
async fn database_outage_is_503_not_500() {
    let db = TestDb::create().await;
    // A pool pointed at a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dead = TestDb::pool_for(&format!("postgres://postgres@127.0.0.1:{port}/x"), 1);
    let api = shared::api::Api::new(dead, Faults::none(), test_config());
    let api = TestApi { api };
    let resp = api.post("/bookings", BOB, &booking_body(9)).await;
    assert_eq!(resp.status, 503, "{}", resp.body);
    assert_eq!(resp.header("retry-after"), Some("1"));
    drop(db);
}

#[tokio::test]
async fn an_idempotency_key_past_its_ttl_is_forgotten_on_read() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let key = [("Idempotency-Key", "k-ttl")];
    let first = api.send("POST", "/bookings", Some(BOB), &key, Some(&booking_body(9).to_string())).await;
    assert_eq!(first.status, 201);
    // Within the TTL a different body is a mismatch...
    let early = api.send("POST", "/bookings", Some(BOB), &key, Some(&booking_body(11).to_string())).await;
    assert_eq!(early.status, 422);
    // ...but once the key is older than its TTL (24 h), retention or not,
    // the key is free again and the request runs afresh.
    db.scalar::<i64>(
        "WITH u AS (UPDATE idempotency_keys SET created_at = now() - interval '25 hours' RETURNING 1) \
         SELECT count(*) FROM u",
    )
    .await;
    let later = api.send("POST", "/bookings", Some(BOB), &key, Some(&booking_body(11).to_string())).await;
    assert_eq!(later.status, 201, "{}", later.body);
    assert!(later.header("idempotent-replayed").is_none());
    assert_ne!(later.body["id"], first.body["id"]);
    let replay = api.send("POST", "/bookings", Some(BOB), &key, Some(&booking_body(11).to_string())).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body["id"], later.body["id"]);
    assert_eq!(db.count("bookings").await, 2);
}

/// Optimistic concurrency in HTTP terms: the ETag is the booking's
/// version; an update or a cancel with a stale If-Match gets 412 (naming
/// the current version) and changes nothing; the body's `version` works
/// as before, and the two must agree when both are sent.
#[tokio::test]
async fn if_match_with_a_stale_etag_gets_412_and_changes_nothing() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let booking = api.create_as_bob(9).await;
    let path = format!("/bookings/{}", booking["id"].as_str().unwrap());
    let read = api.get(&path, BOB).await;
    assert_eq!(read.header("etag"), Some("\"1\""));
    let retitle = |title: &str| json!({"title": title}).to_string();
    let moved = api.send("PATCH", &path, Some(BOB), &[("if-match", "\"1\"")], Some(&retitle("Moved"))).await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.header("etag"), Some("\"2\""));
    let stale = api.send("PATCH", &path, Some(BOB), &[("if-match", "\"1\"")], Some(&retitle("Again"))).await;
    assert_eq!(stale.status, 412, "{}", stale.body);
    assert_eq!(stale.body["type"], outbox_tests::api::problem_type("precondition-failed"));
    assert_eq!(stale.body["current_version"], 2);
    let cancel = api.send("POST", &format!("{path}/cancel"), Some(BOB), &[("if-match", "W/\"1\"")], None).await;
    assert_eq!(cancel.status, 412, "{}", cancel.body);
    let disagree = json!({"version": 1, "title": "X"}).to_string();
    let both = api.send("PATCH", &path, Some(BOB), &[("if-match", "\"2\"")], Some(&disagree)).await;
    assert_eq!(both.status, 422, "{}", both.body);
    let garbled = api.send("PATCH", &path, Some(BOB), &[("if-match", "2")], Some(&retitle("X"))).await;
    assert_eq!(
        (garbled.status, garbled.body["type"].clone()),
        (400, json!(outbox_tests::api::problem_type("invalid-if-match")))
    );
    let none = api.send("PATCH", &path, Some(BOB), &[], Some(&retitle("X"))).await;
    assert_eq!(none.status, 422, "a change names the version it saw: {}", none.body);
    assert_eq!(db.count("outbox_events").await, 2, "only the first update wrote");
    let cancelled = api.send("POST", &format!("{path}/cancel"), Some(BOB), &[("if-match", "\"2\"")], None).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
}

/// Every problem's type is an absolute URI that resolves: the API serves
/// each type's page without a token, and every type the code can answer
/// with is in the catalog.
#[tokio::test]
async fn problem_types_are_absolute_uris_that_resolve_to_their_page() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let overlap = {
        api.create_as_bob(9).await;
        api.post("/bookings", BOB, &booking_body(9)).await
    };
    let url = overlap.body["type"].as_str().unwrap().to_string();
    assert_eq!(url, outbox_tests::api::problem_type("overlap"));
    let path = url.strip_prefix(outbox_tests::api::API_BASE).unwrap();
    let page = api.send("GET", path, None, &[], None).await;
    assert_eq!(page.status, 200, "served without a token");
    assert_eq!(page.header("content-type"), Some("text/html; charset=utf-8"));
    for t in shared::api::problem::PROBLEM_TYPES {
        let page = api.send("GET", &format!("/problems/{}", t.slug), None, &[], None).await;
        assert_eq!(page.status, 200, "{}", t.slug);
    }
    assert_eq!(api.send("GET", "/problems/no-such-type", None, &[], None).await.status, 404);
}

/// Issue 55: the organizer may hide the guest list. Each attendee then
/// reads the booking with themselves as its only attendee (here; their
/// message and its calendar part: `mail_card`); the organizer reads it
/// whole. Visible unless asked; a value that is neither is refused and
/// writes nothing.
#[tokio::test]
async fn an_organizer_may_hide_the_guest_list_from_each_attendee() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mut body = outbox_tests::api::booking_body(9);
    body["attendees"] =
        json!([{"email": "alice@example.com", "name": "Alice"}, {"email": "carol@example.com", "name": "Carol"}]);
    assert_eq!(api.post("/bookings", BOB, &body).await.body["guest_list"], "visible", "the default");

    body["guest_list"] = json!("secret");
    let refused = api.post("/bookings", BOB, &body).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.body["invalid_params"][0]["name"], "guest_list", "{}", refused.body);
    assert_eq!(db.count("bookings").await, 1, "the refused request wrote nothing");

    body["guest_list"] = json!("hidden");
    body["start"] = json!("2026-12-01T11:00:00Z");
    body["end"] = json!("2026-12-01T11:30:00Z");
    let created = api.post("/bookings", BOB, &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["guest_list"], "hidden");
    assert_eq!(created.body["attendees"].as_array().unwrap().len(), 2, "the organizer sees everyone");
    let path = format!("/bookings/{}", created.body["id"].as_str().unwrap());
    let emails = |b: &Value| -> Vec<String> {
        b["attendees"].as_array().unwrap().iter().map(|a| a["email"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(emails(&api.get(&path, ALICE).await.body), ["alice@example.com"], "Alice sees only herself");
    let listed = api.get("/bookings?role=attendee", ALICE).await.body;
    let mine = listed["bookings"].as_array().unwrap().iter().find(|b| b["id"] == created.body["id"]).unwrap();
    assert_eq!(emails(mine), ["alice@example.com"], "in a listing too");
    assert_eq!(emails(&api.get(&path, BOB).await.body).len(), 2);

    let null = json!({"version": 1, "guest_list": null}).to_string();
    assert_eq!(api.send("PATCH", &path, Some(BOB), &[], Some(&null)).await.status, 422);
    let shown = json!({"version": 1, "guest_list": "visible"}).to_string();
    let changed = api.send("PATCH", &path, Some(BOB), &[], Some(&shown)).await;
    assert_eq!((changed.status, changed.body["version"].as_i64()), (200, Some(2)), "{}", changed.body);
    assert_eq!(emails(&api.get(&path, ALICE).await.body).len(), 2, "shown again");
}
