//! `PATCH /bookings/{id}` as a client sees it: any field and the attendee
//! list change in one request, at the version last seen, with the same
//! validation as a create; one transaction writes the booking and one
//! BOOKING_UPDATED event.

use outbox_tests::api::{booking_body, test_config, Caller, TestApi, BOB};
use outbox_tests::outbox::events_of;
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::api::config::ApiConfig;
use shared::fault::Faults;

const ALICE: Caller<'static> = Caller { email: "alice@example.com", name: "Alice Attendee", sub: "sub-alice" };

async fn patch(api: &TestApi, path: &str, who: Caller<'_>, body: Value) -> outbox_tests::api::TestResponse {
    api.send("PATCH", path, Some(who), &[], Some(&body.to_string())).await
}

#[tokio::test]
async fn one_patch_changes_every_field_and_the_attendees_in_one_event() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let created = api.create_as_bob(9).await;
    let id = created["id"].as_str().unwrap();
    let path = format!("/bookings/{id}");
    let changes = json!({
        "version": 1,
        "title": "Architecture review",
        "description": null,
        "location": "Room 7",
        "start": "2026-12-01T13:00:00Z",
        "end": "2026-12-01T14:00:00Z",
        "timezone": "America/New_York",
        "attendees": [{"email": "carol@example.com", "name": "Carol"}, {"email": "dave@example.com", "name": "Dave"}]
    });
    let resp = patch(&api, &path, BOB, changes).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    let b = &resp.body;
    assert_eq!(
        (b["title"].as_str(), b["location"].as_str(), b["timezone"].as_str()),
        (Some("Architecture review"), Some("Room 7"), Some("America/New_York"))
    );
    assert_eq!(b["description"], Value::Null, "null clears it");
    assert_eq!((b["start"].as_str(), b["version"].as_i64()), (Some("2026-12-01T13:00:00Z"), Some(2)));
    assert_eq!(b["attendees"].as_array().unwrap().len(), 2);

    let events = events_of(&db, id.parse().unwrap()).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].event_type, "BOOKING_UPDATED");
    let payload = &events[1].payload;
    assert_eq!(payload["previous_attendees"][0]["email"], "alice@example.com");
    assert_eq!(payload["booking"]["attendees"][0]["email"], "carol@example.com");
    assert_eq!(payload["previous_start"], "2026-12-01T09:00:00Z");
    // Alice was removed: she no longer sees the booking.
    assert_eq!(api.get(&path, ALICE).await.status, 404);
}

#[tokio::test]
async fn an_update_to_the_values_it_already_has_writes_nothing() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let created = api.create_as_bob(9).await;
    let path = format!("/bookings/{}", created["id"].as_str().unwrap());
    let same = json!({"version": 1, "title": created["title"], "attendees": created["attendees"]});
    let resp = patch(&api, &path, BOB, same).await;
    assert_eq!((resp.status, resp.body["version"].as_i64()), (200, Some(1)));
    assert_eq!(db.count("outbox_events").await, 1, "no event, no mail");
}

#[tokio::test]
async fn updates_get_409_on_a_stale_version_an_overlap_or_a_cancelled_booking_and_write_nothing() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let first = api.create_as_bob(9).await;
    api.create_as_bob(11).await;
    let path = format!("/bookings/{}", first["id"].as_str().unwrap());
    let onto_the_other = json!({"version": 1, "start": "2026-12-01T11:15:00Z", "end": "2026-12-01T11:45:00Z"});
    let resp = patch(&api, &path, BOB, onto_the_other).await;
    assert_eq!(
        (resp.status, resp.body["type"].as_str()),
        (409, Some(outbox_tests::api::problem_type("overlap").as_str()))
    );
    let stale = patch(&api, &path, BOB, json!({"version": 7, "title": "x"})).await;
    assert_eq!(
        (stale.status, stale.body["type"].as_str()),
        (409, Some(outbox_tests::api::problem_type("version-conflict").as_str()))
    );
    // An attendee may read it but not change it.
    let attendee = patch(&api, &path, ALICE, json!({"version": 1, "title": "Mine now"})).await;
    assert_eq!(attendee.status, 403, "{}", attendee.body);
    assert_eq!(db.count("outbox_events").await, 2, "nothing was written");
    assert_eq!(api.post(&format!("{path}/cancel"), BOB, &json!({})).await.status, 200);
    let resp = patch(&api, &path, BOB, json!({"version": 2, "title": "Revived?"})).await;
    assert_eq!(
        (resp.status, resp.body["type"].as_str()),
        (409, Some(outbox_tests::api::problem_type("cancelled").as_str()))
    );
}

#[tokio::test]
async fn each_update_counts_against_the_limits_with_removed_attendees_mailed_too() {
    let db = TestDb::create().await;
    let limits = shared::booking::limits::Limits {
        bookings_per_day: 10,
        recipients_per_day: 6,
        changes_per_booking_per_day: 10,
        new_accounts_recipients_per_day: i32::MAX,
    };
    let api = TestApi::with(&db, Faults::none(), ApiConfig { limits, ..test_config() });
    let created = api.post("/bookings", BOB, &booking_body(9)).await.body; // 1 recipient
    let path = format!("/bookings/{}", created["id"].as_str().unwrap());
    let three = json!([{"email": "alice@example.com", "name": "A"}, {"email": "c@example.com", "name": "C"}, {"email": "d@example.com", "name": "D"}]);
    assert_eq!(patch(&api, &path, BOB, json!({"version": 1, "attendees": three})).await.status, 200); // 4 so far
                                                                                                      // Down to one attendee mails 3: the one left, and the two removed.
    let one = json!([{"email": "alice@example.com", "name": "A"}]);
    let refused = patch(&api, &path, BOB, json!({"version": 2, "attendees": one})).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(api.get(&path, BOB).await.body["version"], 2, "the refused update changed nothing");
}
