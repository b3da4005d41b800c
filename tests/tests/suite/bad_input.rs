//! Every class of bad input gets a 4xx problem+json that names the field,
//! writes nothing, and never produces a 500.

use outbox_tests::api::{booking_body, TestApi, BOB};
use outbox_tests::TestDb;
use serde_json::{json, Value};

/// Sends `body` raw and checks the status, the named field and that nothing
/// was written.
async fn refused(api: &TestApi, db: &TestDb, body: &str, status: u16, field: Option<&str>) -> Value {
    let resp = api.send("POST", "/bookings", Some(BOB), &[], Some(body)).await;
    assert_eq!(resp.status, status, "body {body:.200} → {}", resp.body);
    if let Some(field) = field {
        let names: Vec<&str> =
            resp.body["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(names.contains(&field), "expected {field} in {names:?}");
    }
    assert!(resp.body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(db.written_rows().await, 0, "bad input wrote nothing");
    resp.body
}

fn with(field: &str, value: Value) -> String {
    let mut b = booking_body(9);
    b[field] = value;
    b.to_string()
}

#[tokio::test]
async fn malformed_json_is_400() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(&api, &db, "{\"title\": ", 400, None).await;
    refused(&api, &db, "not json at all", 400, None).await;
    refused(&api, &db, "", 400, None).await;
    refused(&api, &db, "[1,2]", 422, Some("body")).await;
}

#[tokio::test]
async fn wrong_types_name_the_field() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(&api, &db, &with("title", json!(42)), 422, Some("title")).await;
    refused(&api, &db, &with("attendees", json!("alice@example.com")), 422, Some("attendees")).await;
    refused(&api, &db, &with("attendees", json!([{"email": 1, "name": "A"}])), 422, Some("attendees[0].email")).await;
    let mut missing = booking_body(9);
    missing.as_object_mut().unwrap().remove("start");
    refused(&api, &db, &missing.to_string(), 422, Some("start")).await;
}

#[tokio::test]
async fn unknown_fields_are_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(&api, &db, &with("organizer", json!("mallory@example.com")), 422, Some("organizer")).await;
    refused(
        &api,
        &db,
        &with("attendees", json!([{"email": "a@example.com", "name": "A", "role": "x"}])),
        422,
        Some("attendees[0].role"),
    )
    .await;
}

#[tokio::test]
async fn end_not_after_start_is_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(&api, &db, &with("end", json!("2026-12-01T09:00:00Z")), 422, Some("end")).await;
    refused(&api, &db, &with("end", json!("2026-12-01T08:00:00Z")), 422, Some("end")).await;
    refused(&api, &db, &with("start", json!("tomorrow at nine")), 422, Some("start")).await;
    refused(&api, &db, &with("start", json!("2026-12-01T09:00:00")), 422, Some("start")).await;
}

#[tokio::test]
async fn empty_or_overlong_title_is_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(&api, &db, &with("title", json!("")), 422, Some("title")).await;
    refused(&api, &db, &with("title", json!("    ")), 422, Some("title")).await;
    refused(&api, &db, &with("title", json!("x".repeat(201))), 422, Some("title")).await;
}

#[tokio::test]
async fn invalid_email_is_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    for bad in ["alice", "alice@", "@example.com", "alice@@example.com", "Alice <alice@example.com>", "alice@localhost"]
    {
        refused(&api, &db, &with("attendees", json!([{"email": bad, "name": "A"}])), 422, Some("attendees[0].email"))
            .await;
    }
}

#[tokio::test]
async fn duplicate_attendees_are_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let attendees = json!([
        {"email": "alice@example.com", "name": "Alice"},
        {"email": "carol@example.com", "name": "Carol"},
        {"email": "ALICE@example.com", "name": "Alice again"}
    ]);
    refused(&api, &db, &with("attendees", attendees), 422, Some("attendees[2].email")).await;
}

#[tokio::test]
async fn attendee_count_outside_1_to_50_is_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(&api, &db, &with("attendees", json!([])), 422, Some("attendees")).await;
    let many: Vec<Value> =
        (0..51).map(|i| json!({"email": format!("p{i}@example.com"), "name": format!("P {i}")})).collect();
    refused(&api, &db, &with("attendees", Value::Array(many.clone())), 422, Some("attendees")).await;
    // Exactly 50 is allowed.
    let resp = api
        .send("POST", "/bookings", Some(BOB), &[], Some(&with("attendees", Value::Array(many[..50].to_vec()))))
        .await;
    assert_eq!(resp.status, 201);
}

#[tokio::test]
async fn nonexistent_timezone_is_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(&api, &db, &with("timezone", json!("Mars/Olympus_Mons")), 422, Some("timezone")).await;
    refused(&api, &db, &with("timezone", json!("")), 422, Some("timezone")).await;
}

#[tokio::test]
async fn control_characters_in_header_bound_fields_are_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let injection = "Standup\r\nBcc: eve@evil.example";
    refused(&api, &db, &with("title", json!(injection)), 422, Some("title")).await;
    refused(&api, &db, &with("title", json!("Standup\nX")), 422, Some("title")).await;
    refused(&api, &db, &with("title", json!("null\u{0}byte")), 422, Some("title")).await;
    refused(&api, &db, &with("location", json!("Room 4\r\nX-Evil: 1")), 422, Some("location")).await;
    refused(
        &api,
        &db,
        &with("attendees", json!([{"email": "alice@example.com\r\nBcc: eve@evil.example", "name": "A"}])),
        422,
        Some("attendees[0].email"),
    )
    .await;
    refused(
        &api,
        &db,
        &with("attendees", json!([{"email": "alice@example.com", "name": "Alice\r\nBcc: eve@evil.example"}])),
        422,
        Some("attendees[0].name"),
    )
    .await;
    refused(&api, &db, &with("description", json!("bell \u{7}")), 422, Some("description")).await;
    // Line breaks are fine in the description, which never reaches a header.
    let resp =
        api.send("POST", "/bookings", Some(BOB), &[], Some(&with("description", json!("line 1\r\nline 2")))).await;
    assert_eq!(resp.status, 201);
    assert_eq!(resp.body["description"], "line 1\nline 2");
}

#[tokio::test]
async fn body_over_the_size_limit_is_413() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let big =
        with("description", json!("x".repeat(shared::config::settings::API_MAX_BODY_BYTES.default_value::<usize>())));
    refused(&api, &db, &big, 413, None).await;
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let resp = api
        .send("POST", "/bookings", Some(BOB), &[("Content-Type", "text/plain")], Some(&booking_body(9).to_string()))
        .await;
    assert_eq!(resp.status, 415);
    assert_eq!(db.written_rows().await, 0);
}

#[tokio::test]
async fn bad_idempotency_key_is_400() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let long = "k".repeat(256);
    for key in ["", "has space", long.as_str()] {
        let resp = api
            .send("POST", "/bookings", Some(BOB), &[("Idempotency-Key", key)], Some(&booking_body(9).to_string()))
            .await;
        assert_eq!(resp.status, 400, "key {key:?}");
    }
    assert_eq!(db.written_rows().await, 0);
}

#[tokio::test]
async fn bad_update_bodies_are_refused_and_change_nothing() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let created = api.post("/bookings", BOB, &booking_body(9)).await;
    let path = format!("/bookings/{}", created.body["id"].as_str().unwrap());
    for (body, status) in [
        (json!({"start": "2026-12-02T10:00:00Z", "end": "2026-12-02T09:00:00Z", "version": 1}).to_string(), 422),
        (json!({"start": "2026-12-02T10:00:00Z", "end": "2026-12-02T11:00:00Z"}).to_string(), 422),
        (json!({"start": "2026-12-02T10:00:00Z", "end": "2026-12-02T11:00:00Z", "version": "1"}).to_string(), 422),
        (json!({"start": "2026-12-02T10:00:00Z", "end": "2026-12-02T11:00:00Z", "version": 1, "organizer": "x"}).to_string(), 422),
        (json!({"version": 1}).to_string(), 422),
        (json!({"version": 1, "start": "2026-12-02T10:00:00Z"}).to_string(), 422),
        (json!({"version": 1, "attendees": []}).to_string(), 422),
        (json!({"version": 1, "attendees": [{"email": "a@example.com", "name": "A"}, {"email": "A@example.com", "name": "B"}]}).to_string(), 422),
        (json!({"version": 1, "attendees": (0..51).map(|i| json!({"email": format!("p{i}@example.com"), "name": "P"})).collect::<Vec<_>>()}).to_string(), 422),
        (json!({"version": 1, "title": "Pay\u{202E}ment"}).to_string(), 422),
        (json!({"version": 1, "title": ""}).to_string(), 422),
        (json!({"version": 1, "title": null}).to_string(), 422),
        (json!({"version": 1, "description": "x".repeat(5001)}).to_string(), 422),
        (json!({"version": 1, "location": "a\nb"}).to_string(), 422),
        (json!({"start": "2026-12-02T10:00:00Z", "end": "2026-12-02T11:00:00Z", "version": 1, "timezone": "Nowhere/City"}).to_string(), 422),
        ("{".to_string(), 400),
    ] {
        let resp = api.send("PATCH", &path, Some(BOB), &[], Some(&body)).await;
        assert_eq!(resp.status, status, "{body} → {}", resp.body);
    }
    assert_eq!(api.get(&path, BOB).await.body["version"], 1);
    assert_eq!(db.count("outbox_events").await, 1);
}

#[tokio::test]
async fn invisible_and_separator_characters_are_refused_where_they_reach_a_header() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    // Bidi override, isolate, zero-width space, BOM, soft hyphen (Cf) and
    // the line and paragraph separators (Zl, Zp).
    for c in ['\u{202E}', '\u{2066}', '\u{2069}', '\u{200B}', '\u{FEFF}', '\u{00AD}', '\u{2028}', '\u{2029}'] {
        let text = format!("Pay{c}ment due");
        let body = refused(&api, &db, &with("title", json!(text)), 422, Some("title")).await;
        assert!(body["detail"].as_str().unwrap().contains(&format!("U+{:04X}", c as u32)), "{body}");
        refused(&api, &db, &with("location", json!(text)), 422, Some("location")).await;
        let attendee = json!([{"email": "alice@example.com", "name": text}]);
        refused(&api, &db, &with("attendees", attendee), 422, Some("attendees[0].name")).await;
        let attendee = json!([{"email": format!("al{c}ice@example.com"), "name": "Alice"}]);
        refused(&api, &db, &with("attendees", attendee), 422, Some("attendees[0].email")).await;
    }
    // Ordinary non-ASCII text is fine.
    let ok = api
        .post("/bookings", BOB, &{
            let mut b = booking_body(9);
            b["title"] = json!("Réunion — 会議 ✓");
            b
        })
        .await;
    assert_eq!(ok.status, 201, "{}", ok.body);
}

#[tokio::test]
async fn a_lone_cr_in_the_description_is_stored_as_a_line_break_and_never_reaches_the_ics() {
    use shared::booking::events::{EventPayload, EventType};
    use shared::notify::notification::Notification;
    use shared::notify::render::calendar;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let created = api
        .post("/bookings", BOB, &{
            let mut b = booking_body(9);
            b["description"] = json!("line one\rline two\r\nline three");
            b
        })
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["description"], "line one\nline two\nline three");
    let booking: shared::booking::domain::Booking = serde_json::from_value(created.body.clone()).unwrap();
    let recipient = booking.attendees[0].clone();
    let n = Notification {
        event_id: uuid::Uuid::now_v7(),
        event_type: EventType::BookingConfirmed,
        payload: EventPayload::of(booking),
        recipient,
        notice: shared::booking::events::Notice::Request,
        introduces: true,
        claim: None,
        trace_id: None,
    };
    let ics = calendar::ics(&n).expect("an update carries its calendar object");
    assert!(ics.contains("DESCRIPTION:line one\\nline two\\nline three"), "{ics}");
    assert!(!ics.replace("\r\n", "").contains('\r'), "no CR but the line endings");
}

#[tokio::test]
async fn start_times_outside_the_configured_window_are_refused() {
    let db = TestDb::create().await;
    let mut config = outbox_tests::api::test_config();
    config.start_window = shared::booking::domain::StartWindow {
        max_past: chrono::Duration::days(1),
        max_future: chrono::Duration::days(365),
    };
    let api = TestApi::with(&db, shared::fault::Faults::none(), config);
    let at = |start: chrono::DateTime<chrono::Utc>| {
        let mut b = booking_body(9);
        b["start"] = json!(start.to_rfc3339());
        b["end"] = json!((start + chrono::Duration::minutes(30)).to_rfc3339());
        b.to_string()
    };
    let now = chrono::Utc::now();
    for bad in [
        "9999-12-31T23:30:00-01:00".to_string(),
        "0000-01-01T00:10:00+01:00".to_string(),
        (now - chrono::Duration::days(2)).to_rfc3339(),
        (now + chrono::Duration::days(400)).to_rfc3339(),
    ] {
        let mut b = booking_body(9);
        b["start"] = json!(bad);
        b["end"] = json!("9999-12-31T23:59:00Z");
        let body = refused(&api, &db, &b.to_string(), 422, Some("start")).await;
        assert!(body["detail"].as_str().unwrap().contains("start:"), "{body}");
    }
    let ok = api.send("POST", "/bookings", Some(BOB), &[], Some(&at(now + chrono::Duration::days(30)))).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    // A reschedule is held to the same window.
    let path = format!("/bookings/{}", ok.body["id"].as_str().unwrap());
    let far = json!({"start": "9999-12-31T23:30:00-01:00", "end": "9999-12-31T23:45:00-01:00", "version": 1});
    let moved = api.send("PATCH", &path, Some(BOB), &[], Some(&far.to_string())).await;
    assert_eq!(moved.status, 422, "{}", moved.body);
    assert_eq!(moved.body["invalid_params"][0]["name"], "start");
    assert_eq!(db.count("outbox_events").await, 1, "the refused reschedule wrote nothing");
}

#[tokio::test]
async fn duplicate_json_keys_are_400_naming_the_key_and_write_nothing() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let body = booking_body(9).to_string();
    let twice = body.replacen('{', r#"{"title":"Decoy","#, 1);
    let resp = refused(&api, &db, &twice, 400, Some("title")).await;
    assert_eq!(resp["type"], outbox_tests::api::problem_type("duplicate-key"));
    let nested =
        body.replacen(r#""email":"alice@example.com""#, r#""email":"alice@example.com","email":"eve@evil.test""#, 1);
    assert_ne!(nested, body);
    refused(&api, &db, &nested, 400, Some("attendees[0].email")).await;
    // PATCH too.
    let created = api.create_as_bob(9).await;
    let path = format!("/bookings/{}", created["id"].as_str().unwrap());
    let resp = api.send("PATCH", &path, Some(BOB), &[], Some(r#"{"version":1,"title":"A","title":"B"}"#)).await;
    assert_eq!((resp.status, resp.body["invalid_params"][0]["name"].as_str()), (400, Some("title")));
    assert_eq!(api.get(&path, BOB).await.body["title"], "Design review");
}

#[tokio::test]
async fn timestamps_whose_utc_form_leaves_four_digit_years_are_refused() {
    let db = TestDb::create().await;
    let mut config = outbox_tests::api::test_config();
    config.start_window = shared::booking::domain::StartWindow {
        max_past: chrono::Duration::days(3_000_000),
        max_future: chrono::Duration::days(3_000_000),
    };
    let api = TestApi::with(&db, shared::fault::Faults::none(), config);
    for (start, end) in [
        ("9999-12-31T23:30:00-01:00", "9999-12-31T23:45:00-01:00"),
        ("0000-01-01T00:10:00+01:00", "0000-01-01T00:20:00+01:00"),
    ] {
        let mut b = booking_body(9);
        b["start"] = json!(start);
        b["end"] = json!(end);
        let body = refused(&api, &db, &b.to_string(), 422, Some("start")).await;
        assert!(body.to_string().contains("between the years 0001 and 9999"), "{body}");
    }
}

/// `{"title": "x"}` names every missing field, not only the first; wrong
/// types, unknown fields and values that do not parse are named beside
/// them, in one response.
#[tokio::test]
async fn every_invalid_field_is_named_in_one_response() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let body = refused(&api, &db, r#"{"title": "x"}"#, 422, None).await;
    let names = |b: &Value| -> Vec<String> {
        let mut n: Vec<String> =
            b["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap().to_string()).collect();
        n.sort();
        n
    };
    assert_eq!(names(&body), ["attendees", "end", "start", "timezone"]);
    let mixed = json!({
        "title": 42, "start": "tomorrow", "end": "2031-03-03T10:00:00Z", "timezone": "Mars/Olympus",
        "attendees": [{"email": "alice@example.com"}, {"email": "bob", "name": "Bob", "role": "x"}],
        "organizer": "mallory@example.com"
    });
    let body = refused(&api, &db, &mixed.to_string(), 422, None).await;
    assert_eq!(
        names(&body),
        ["attendees[0].name", "attendees[1].email", "attendees[1].role", "organizer", "start", "timezone", "title"]
    );
}

/// SES cannot deliver to an internationalised local part: refused, naming
/// the attendee. An internationalised domain is stored in its ASCII form.
#[tokio::test]
async fn an_address_must_be_deliverable_and_its_domain_is_stored_in_ascii() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    refused(
        &api,
        &db,
        &with("attendees", json!([{"email": "üser@exämple.com", "name": "U"}])),
        422,
        Some("attendees[0].email"),
    )
    .await;
    let resp = api
        .post("/bookings", BOB, &{
            let mut b = booking_body(9);
            b["attendees"] = json!([{"email": "user@Exämple.com", "name": "U"}]);
            b
        })
        .await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert_eq!(resp.body["attendees"][0]["email"], "user@xn--exmple-cua.com");
}

/// A leap second is refused, not stored one second later.
#[tokio::test]
async fn a_leap_second_is_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let body = json!({"title": "T", "start": "2031-06-30T23:59:60Z", "end": "2031-07-01T00:30:00Z", "timezone": "UTC",
        "attendees": [{"email": "alice@example.com", "name": "Alice"}]});
    let problem = refused(&api, &db, &body.to_string(), 422, Some("start")).await;
    assert!(problem["detail"].as_str().unwrap().contains("leap second"), "{problem}");
}

/// One rule for every optional text field: an empty value is no value. A
/// create stores none; an update clears it, as null does.
#[tokio::test]
async fn an_empty_optional_text_is_no_value_everywhere() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mut body = booking_body(9);
    body["description"] = json!("");
    body["location"] = json!("   ");
    let created = api.post("/bookings", BOB, &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert!(created.body["description"].is_null() && created.body["location"].is_null(), "{}", created.body);
    let path = format!("/bookings/{}", created.body["id"].as_str().unwrap());
    let full = api.post("/bookings", BOB, &booking_body(11)).await;
    let full_path = format!("/bookings/{}", full.body["id"].as_str().unwrap());
    let patch = json!({"version": 1, "description": "", "location": ""}).to_string();
    let cleared = api.send("PATCH", &full_path, Some(BOB), &[], Some(&patch)).await;
    assert_eq!(cleared.status, 200, "{}", cleared.body);
    assert!(cleared.body["description"].is_null() && cleared.body["location"].is_null(), "{}", cleared.body);
    assert_eq!(api.get(&path, BOB).await.status, 200);
}
