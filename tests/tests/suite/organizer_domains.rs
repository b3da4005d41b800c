//! Who may organize (issue 52, Medium 5): with the user pool's sign-up
//! open (`SelfSignUpDomains`), only addresses at the stack's
//! `ORGANIZER_DOMAINS` may create and change bookings. An account made at
//! any other domain (a catch-all yields thousands) mails nothing from the
//! stack's; a booking of its own made before can still be cancelled.

use outbox_tests::api::{booking_body, test_config, Caller, TestApi, BOB};
use outbox_tests::TestDb;
use serde_json::json;
use shared::api::config::OrganizerDomains;
use shared::api::Api;
use shared::fault::Faults;

#[tokio::test]
async fn an_address_outside_the_organizer_domains_creates_and_changes_nothing() {
    let db = TestDb::create().await;
    // Bob's booking, made before the stack's organizers were narrowed.
    let made = TestApi::new(&db).post("/bookings", BOB, &booking_body(9)).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let path = format!("/bookings/{}", made.body["id"].as_str().unwrap());

    let mut config = test_config();
    config.organizer_domains = OrganizerDomains::parse(" corp.example, Corp.Example.org ").unwrap();
    let api = TestApi { api: Api::new(db.pool.clone(), Faults::none(), config) };
    let written = || db.scalar::<i64>("SELECT (SELECT count(*) FROM bookings) + (SELECT count(*) FROM outbox_events)");
    let before = written().await;
    let refused = api.post("/bookings", BOB, &booking_body(10)).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body["type"].as_str().unwrap().ends_with("/organizer-domain"), "{}", refused.body);
    assert_eq!(
        refused.body["detail"],
        "only addresses at corp.example, corp.example.org may create or change bookings here"
    );
    let body = json!({"title": "Renamed", "version": 1}).to_string();
    assert_eq!(api.send("PATCH", &path, Some(BOB), &[], Some(&body)).await.status, 403);
    assert_eq!(written().await, before, "nothing written");
    // Listing and cancelling are never refused by it.
    assert_eq!(api.get("/bookings?role=organizer", BOB).await.status, 200);
    assert_eq!(api.post(&format!("{path}/cancel"), BOB, &json!({})).await.status, 200);

    let carol = Caller { email: "carol@CORP.example.org", name: "Carol", sub: "sub-carol" };
    assert_eq!(api.post("/bookings", carol, &booking_body(11)).await.status, 201);
    // A subdomain is not its parent: list it to admit it.
    let eve = Caller { email: "eve@eu.corp.example", name: "Eve", sub: "sub-eve" };
    assert_eq!(api.post("/bookings", eve, &booking_body(12)).await.status, 403);
}

#[test]
fn organizer_domains_that_are_not_domains_are_refused_in_one_line() {
    assert_eq!(OrganizerDomains::parse("").unwrap(), None, "empty: any verified address");
    assert_eq!(OrganizerDomains::parse(" , ").unwrap(), None);
    for bad in ["corp", "a@corp.example", "corp.example,exa mple.com"] {
        let err = OrganizerDomains::parse(bad).unwrap_err().to_string();
        assert!(err.contains("ORGANIZER_DOMAINS") && !err.contains('\n'), "{bad}: {err}");
    }
}
