//! Who the caller is: the token's subject and verified email, and the local
//! identity headers of dev builds.

use outbox_tests::api::{booking_body, Caller, TestApi, ALICE, BOB};
use outbox_tests::TestDb;
use serde_json::{json, Value};

#[tokio::test]
async fn dev_mode_prefers_present_jwt_claims_over_dev_headers() {
    let db = TestDb::create().await;
    let dev = TestApi::dev_mode(&db);
    let headers = [("X-Dev-User-Email", "bob@example.com")];
    let resp = dev.send("POST", "/bookings", Some(ALICE), &headers, Some(&booking_body(9).to_string())).await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    assert_eq!(resp.body["organizer"]["email"], "alice@example.com", "the token's owner, not the header's");
}

#[tokio::test]
async fn an_unverified_email_is_not_an_identity() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let body = booking_body(9).to_string();
    for verified in [json!("false"), json!("False"), json!(""), Value::Null] {
        let mut claims = BOB.claims();
        match verified {
            Value::Null => drop(claims.as_object_mut().unwrap().remove("email_verified")),
            v => claims["email_verified"] = v,
        }
        let resp = api.send_claims("POST", "/bookings", Some(claims.clone()), &[], Some(&body)).await;
        assert_eq!(resp.status, 401, "{claims} → {}", resp.body);
        assert!(resp.body["detail"].as_str().unwrap().contains("email_verified"), "{}", resp.body);
    }
    // "true" in any case is accepted (API Gateway passes claims as strings).
    let mut claims = BOB.claims();
    claims["email_verified"] = json!("TRUE");
    assert_eq!(api.send_claims("POST", "/bookings", Some(claims), &[], Some(&body)).await.status, 201);
    assert_eq!(db.count("bookings").await, 1, "the refused requests wrote nothing");
}

/// Low 8 of issue 37: someone signs up with the victim's address, never
/// verifies it, and reads the victim's bookings. There is no setting that
/// lets them: the API reads none.
#[tokio::test]
async fn an_unverified_address_reads_nothing_whatever_the_environment_says() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mut body = booking_body(9);
    body["attendees"] = json!([{"email": "victim@example.com", "name": "Victim"}]);
    assert_eq!(api.post("/bookings", BOB, &body).await.status, 201);
    // The old switch is no setting any more: nothing reads it.
    assert!(shared::config::settings::ALL.iter().all(|s| !s.name.contains("EMAIL_VERIFIED")));
    let impostor = outbox_tests::api::Caller { email: "victim@example.com", name: "Not the victim", sub: "sub-imp" };
    for verified in [None, Some("false")] {
        let mut claims = impostor.claims();
        match verified {
            None => drop(claims.as_object_mut().unwrap().remove("email_verified")),
            Some(v) => claims["email_verified"] = json!(v),
        }
        let resp = api.send_claims("GET", "/bookings", Some(claims), &[], None).await;
        assert_eq!(resp.status, 401, "{}", resp.body);
    }
}

#[tokio::test]
async fn a_token_without_a_subject_is_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    for sub in [Value::Null, json!(""), json!("   ")] {
        let mut claims = BOB.claims();
        match sub {
            Value::Null => drop(claims.as_object_mut().unwrap().remove("sub")),
            v => claims["sub"] = v,
        }
        let resp = api.send_claims("POST", "/bookings", Some(claims), &[], Some(&booking_body(9).to_string())).await;
        assert_eq!(resp.status, 401, "{}", resp.body);
        assert!(resp.body["detail"].as_str().unwrap().contains("sub"), "{}", resp.body);
    }
    assert_eq!(db.written_rows().await, 0);
}

#[tokio::test]
async fn the_organizer_is_the_token_subject_even_when_the_email_changes_hands() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let booking = api.create_as_bob(9).await;
    let path = format!("/bookings/{}", booking["id"].as_str().unwrap());
    // Bob changes his address at the identity provider: same subject, he
    // still organizes the booking.
    let bob_renamed = Caller { email: "robert@example.com", name: "Bob Organizer", sub: BOB.sub };
    assert_eq!(api.get(&path, bob_renamed).await.status, 200);
    // Someone else now holds bob@example.com (another subject): they are a
    // stranger to Bob's booking and can neither see nor change it.
    let new_bob = Caller { email: "bob@example.com", name: "Not Bob", sub: "sub-someone-else" };
    assert_eq!(api.get(&path, new_bob).await.status, 404);
    assert_eq!(api.post(&format!("{path}/cancel"), new_bob, &json!({})).await.status, 404);
    let patch = json!({"start": "2026-12-02T09:00:00Z", "end": "2026-12-02T10:00:00Z", "version": 1}).to_string();
    assert_eq!(api.send("PATCH", &path, Some(new_bob), &[], Some(&patch)).await.status, 404);
    assert_eq!(db.count("outbox_events").await, 1, "nothing was changed");
    let cancelled = api.post(&format!("{path}/cancel"), bob_renamed, &json!({})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert!(cancelled.body.get("organizer_sub").is_none(), "the subject is never shown");
}

/// The address bob@example.com passes to someone else (another subject).
/// The new holder's Idempotency-Key is theirs alone: the same key and body
/// book afresh instead of replaying Bob's booking, and a meeting at Bob's
/// time is theirs to hold: no 409 tells them Bob has one then. Bob, under
/// a new address, still cannot double-book himself.
#[tokio::test]
async fn a_new_holder_of_an_address_shares_no_idempotency_key_and_learns_nothing_through_the_overlap_rule() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let key = [("idempotency-key", "meeting-9")];
    let body = booking_body(9).to_string();
    let bobs = api.send("POST", "/bookings", Some(BOB), &key, Some(&body)).await;
    assert_eq!(bobs.status, 201, "{}", bobs.body);
    let new_bob = Caller { email: "bob@example.com", name: "Not Bob", sub: "sub-someone-else" };
    let theirs = api.send("POST", "/bookings", Some(new_bob), &key, Some(&body)).await;
    assert_eq!(theirs.status, 201, "{}", theirs.body);
    assert!(theirs.header("idempotent-replayed").is_none(), "not Bob's stored response");
    assert_ne!(theirs.body["id"], bobs.body["id"], "a booking of their own");
    assert_eq!(db.count("bookings").await, 2);
    // Bob, renamed, is still one organizer: his own overlap is refused.
    let bob_renamed = Caller { email: "robert@example.com", name: "Bob Organizer", sub: BOB.sub };
    assert_eq!(api.post("/bookings", bob_renamed, &booking_body(9)).await.status, 409);
}

/// Names as people write them: Persian and Hindi need the zero-width
/// non-joiner and joiner between letters; Arabic and Thai have their own
/// letters. Accepted as the caller's name (the token's claim) and as an
/// attendee's. A bidi override, or a joiner that joins no letters, is
/// still refused: it would make a name read other than it is.
#[tokio::test]
async fn names_in_persian_hindi_arabic_and_thai_are_accepted_and_bidi_overrides_refused() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let names = [
        ("fa", "نرگس\u{200C}ها"),
        ("hi", "क्\u{200D}षमा"),
        ("hi2", "श्री\u{200C}मती"),
        ("ar", "محمد عبد الله"),
        ("th", "สมชาย ใจดี"),
    ];
    for (i, (tag, name)) in names.iter().enumerate() {
        let email = format!("{tag}@example.com");
        let sub = format!("sub-{tag}");
        let caller = Caller { email: &email, name, sub: &sub };
        let mut body = booking_body(9 + i as u32);
        body["attendees"] = json!([{"email": "alice@example.com", "name": name}]);
        let resp = api.post("/bookings", caller, &body).await;
        assert_eq!(resp.status, 201, "{tag} {name}: {}", resp.body);
        assert_eq!(resp.body["organizer"]["name"], *name);
        assert_eq!(resp.body["attendees"][0]["name"], *name);
    }
    for bad in ["Alice\u{202E}moc.live", "\u{200C}Alice", "Alice\u{200D}", "Ali\u{2066}ce", "A\u{200D} B"] {
        let mut body = booking_body(20);
        body["attendees"] = json!([{"email": "alice@example.com", "name": bad}]);
        let resp = api.post("/bookings", BOB, &body).await;
        assert_eq!(resp.status, 422, "{bad:?}: {}", resp.body);
        let caller = Caller { email: "eve2@example.com", name: bad, sub: "sub-eve2" };
        assert_eq!(api.post("/bookings", caller, &booking_body(21)).await.status, 401, "{bad:?} as the caller's name");
    }
}
