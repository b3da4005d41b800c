//! The operator console (shared::console, functions/operator-console): what
//! it shows and does, as the deployed function answers API Gateway, logged
//! in as the operator role (`outbox_operator`): its grants are enough, only
//! members of the operators group get anything, its actions are
//! `outboxctl`'s and record who did them. The page itself is driven in a
//! real browser by scripts/console-browser.sh.

use lambda_http::Body;
use outbox_tests::api::gateway_event;
use outbox_tests::console::{console, operator};
use outbox_tests::ctl::seed_dead_and_unknown;
use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::booking::limits::Limits;
use shared::booking::service::BookingService;
use shared::console::Console;
use shared::fault::Faults;
use shared::outbox::EventStatus;
use shared::relay::PollerConfig;
use uuid::Uuid;

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn ask(c: &Console, method: &str, path: &str, claims: Option<Value>, body: Option<Value>) -> Answer {
    ask_with(c, method, path, claims, &[("content-type", "application/json")], body.map(|b| b.to_string())).await
}

async fn ask_with(
    c: &Console,
    method: &str,
    path: &str,
    claims: Option<Value>,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Answer {
    let headers: serde_json::Map<String, Value> = headers.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    let event = gateway_event(method, path, "", headers, body.as_deref(), claims);
    let resp = c.handle(lambda_http::request::from_str(&event.to_string()).unwrap()).await;
    let content_type = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body = match resp.body() {
        Body::Text(t) => t.clone(),
        Body::Binary(b) => String::from_utf8(b.clone()).unwrap(),
        Body::Empty => String::new(),
        _ => unreachable!(),
    };
    if resp.status().as_u16() >= 400 {
        assert_eq!(content_type, "application/problem+json", "errors are problem+json: {body}");
    }
    Answer { status: resp.status().as_u16(), content_type, body }
}

async fn dead_event(db: &TestDb) -> Uuid {
    db.scalar("SELECT id FROM outbox_events WHERE status = 'DEAD'").await
}

#[tokio::test]
async fn a_request_without_the_operators_group_gets_nothing() {
    let db = TestDb::create().await;
    seed_dead_and_unknown(&db, (1, 2)).await;
    let c = console(db.operator_pool().await);
    let dead = dead_event(&db).await;
    let booking: Uuid = db.scalar("SELECT aggregate_id FROM outbox_events WHERE status = 'DEAD'").await;
    let requests: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", "/api/overview".into(), None),
        ("GET", format!("/api/bookings/{booking}"), None),
        ("POST", "/api/search".into(), Some(json!({"q": "carol@example.com"}))),
        ("POST", "/api/actions/preview".into(), Some(json!({"action": "replay", "event_id": dead}))),
        ("POST", "/api/actions/run".into(), Some(json!({"action": "replay", "event_id": dead}))),
    ];
    let mut outsider = operator();
    outsider["cognito:groups"] = json!("[staff operators-readonly]");
    let mut access_token = operator();
    access_token["token_use"] = json!("access");
    let mut no_groups = operator();
    no_groups.as_object_mut().unwrap().remove("cognito:groups");
    for (method, path, body) in &requests {
        for (claims, status) in [
            (None, 401),
            (Some(access_token.clone()), 401),
            (Some(outsider.clone()), 403),
            (Some(no_groups.clone()), 403),
        ] {
            let a = ask(&c, method, path, claims.clone(), body.clone()).await;
            assert_eq!(a.status, status, "{method} {path} as {claims:?}: {}", a.body);
            for secret in ["carol", "alice", "Meeting", &booking.to_string(), &dead.to_string(), "DEAD"] {
                assert!(!a.body.contains(secret), "{method} {path} told an outsider {secret:?}: {}", a.body);
            }
        }
    }
    assert_eq!(event_status(&db, dead).await.0, EventStatus::Dead, "nothing was replayed");
    // The page holds nothing but where to sign in; under /console/ too.
    for path in ["/", "/console/"] {
        let page = ask(&c, "GET", path, None, None).await;
        assert_eq!(page.status, 200);
        assert!(page.content_type.starts_with("text/html") && page.body.contains("assets/console.js"), "{}", page.body);
        assert!(!page.body.contains("carol") && !page.body.contains(&booking.to_string()));
    }
    // An operator gets it all, deployed under /console/ as locally at /.
    let a = ask(&c, "GET", "/console/api/overview", Some(operator()), None).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains(&booking.to_string()), "the dead event's booking is listed: {}", a.body);
}

#[tokio::test]
async fn the_overview_shows_the_backlog_the_last_hour_and_what_needs_a_person() {
    let db = TestDb::create().await;
    seed_dead_and_unknown(&db, (1, 2)).await;
    // One more booking, not yet sent: due now.
    create_booking(&db, 3, &["frank@example.com"]).await;
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute(
            "INSERT INTO suppressed_addresses (email, mailbox, reason) VALUES ('dave@example.com', 'dave@example.com', 'complained'); \
             INSERT INTO send_rate (provider, account_rate, rate) VALUES ('ses', 14, 14)",
        )
        .await
        .unwrap();
    let c = console(db.operator_pool().await);
    let a = ask(&c, "GET", "/api/overview", Some(operator()), None).await;
    assert_eq!((a.status, a.content_type.as_str()), (200, "text/html; charset=utf-8"), "{}", a.body);
    let o = &a.body;
    let tile = |name: &str| -> String {
        let at = o.find(&format!("<h3>{name}</h3>")).unwrap_or_else(|| panic!("no {name} tile: {o}"));
        let n = &o[at..];
        let start = n.find("class=\"n\"").unwrap();
        let v = &n[start..];
        v[v.find('>').unwrap() + 1..v.find("</p>").unwrap()].to_string()
    };
    assert_eq!(tile("Due now"), "1", "frank's invitation is due");
    assert_eq!(tile("Dead"), "1", "carol's invitation died");
    assert_eq!(tile("In flight"), "0");
    // The last hour: alice's invitation was accepted; erin's is unknown.
    assert!(o.contains("Accepted <strong id=\"sent-hour\">1</strong>"), "{o}");
    assert!(o.contains("unknown 1"), "{o}");
    assert!(o.contains("The account's rate (ses): 14/s"), "{o}");
    assert!(o.contains("<svg class=\"chart\"") && o.contains("class=\"bar\""), "a bar for the minute alice's was sent");
    assert!(o.contains("<title id=\"sends-t\">") && o.contains("<desc"), "each chart says what it shows, in text");
    assert!(o.contains("dave@example.com") && o.contains("complained"), "the suppression and why");
    assert!(o.contains("awaiting SES&#39;s evidence") || o.contains("awaiting SES's evidence"), "{o}");
    assert!(o.contains("\"action\":\"replay\"") && o.contains("Replay…"), "the dead event can be replayed");
    assert!(o.contains("No poller holds a lease now."), "{o}");
}

#[tokio::test]
async fn a_bookings_timeline_shows_each_send_from_claim_to_outcome_with_ses_events() {
    let db = TestDb::create().await;
    seed_dead_and_unknown(&db, (1, 2)).await;
    let booking: Uuid = db.scalar("SELECT aggregate_id FROM outbox_events WHERE status = 'DEAD'").await;
    let alice: Uuid =
        db.scalar("SELECT id FROM booking_notification_sends WHERE recipient_email = 'alice@example.com'").await;
    db.pool
        .get()
        .await
        .unwrap()
        .execute(
            "INSERT INTO send_feedback (send_id, kind, occurred_at, provider_message_id) \
             VALUES ($1, 'Send', now(), 'm-1'), ($1, 'Delivery', now() + interval '1 second', 'm-1')",
            &[&alice],
        )
        .await
        .unwrap();
    let c = console(db.operator_pool().await);
    let t = ask(&c, "GET", &format!("/api/bookings/{booking}"), Some(operator()), None).await;
    assert_eq!(t.status, 200, "{}", t.body);
    let t = &t.body;
    assert!(t.contains("Meeting 1") && t.contains("BOOKING_CONFIRMED"), "{t}");
    assert!(t.contains("dead-lettered after 2 attempts"), "the event's state in words: {t}");
    let row = |who: &str| -> &str {
        let at = t.find(&format!("<td>{who}</td>")).unwrap_or_else(|| panic!("no row for {who}: {t}"));
        &t[at..at + t[at..].find("</tr>").unwrap()]
    };
    assert!(row("alice@example.com").contains("s-SENT") && row("alice@example.com").contains("accepted by"));
    assert!(row("alice@example.com").contains("h-Send") && row("alice@example.com").contains("h-Delivery"));
    // Carol's claim was released after each refusal (a known failure): no send names her.
    assert!(row("carol@example.com").contains("the event died before its send to them was accepted"), "{t}");
    assert!(t.contains("Replay this event…"));
    // Alice's message as she saw it: each part, rendered from the stored event.
    for (part, expected, content_type) in [
        ("html", "Meeting 1", "text/html; charset=utf-8"),
        ("text", "Meeting 1", "text/plain; charset=utf-8"),
        ("ics", "BEGIN:VCALENDAR", "text/calendar; charset=utf-8"),
    ] {
        let m = ask(&c, "GET", &format!("/api/sends/{alice}/message/{part}"), Some(operator()), None).await;
        assert_eq!((m.status, m.content_type.as_str()), (200, content_type), "{part}: {}", m.body);
        assert!(m.body.contains(expected), "{part}: {}", m.body);
    }
    let sent = ask(&c, "GET", &format!("/api/sends/{alice}/message/eml"), Some(operator()), None).await;
    assert_eq!(sent.status, 404);
    // The unknown send of the other booking says so, and offers a resend.
    let other: Uuid = db.scalar("SELECT booking_id FROM booking_notification_sends WHERE status = 'UNKNOWN'").await;
    let u = ask(&c, "GET", &format!("/api/bookings/{other}"), Some(operator()), None).await.body;
    assert!(u.contains("outcome unknown (read timeout)") && u.contains("Resend…"), "{u}");

    // Search by attendee, by organizer, by id; a stranger's address finds nothing.
    for q in ["carol@example.com", "organizer@example.com", &booking.to_string()] {
        let s = ask(&c, "POST", "/api/search", Some(operator()), Some(json!({"q": q}))).await;
        assert_eq!(s.status, 200, "{}", s.body);
        assert!(s.body.contains(&format!("#/bookings/{booking}")), "{q}: {}", s.body);
    }
    let none = ask(&c, "POST", "/api/search", Some(operator()), Some(json!({"q": "nobody@example.com"}))).await;
    assert!(none.body.contains("No booking matches"), "{}", none.body);
    let missing = ask(&c, "GET", &format!("/api/bookings/{}", Uuid::now_v7()), Some(operator()), None).await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn the_consoles_actions_are_outboxctls_and_record_who_did_them() {
    let db = TestDb::create().await;
    let mailer = seed_dead_and_unknown(&db, (1, 2)).await;
    let c = console(db.operator_pool().await);
    let dead = dead_event(&db).await;
    let act = |path: &'static str, action: Value| {
        let c = &c;
        async move { ask(c, "POST", path, Some(operator()), Some(action)).await.json() }
    };

    // Replay: shown, then done, recorded as the operator; carol gets one.
    let preview = act("/api/actions/preview", json!({"action": "replay", "event_id": dead})).await;
    assert_eq!(preview["ok"], true, "{preview}");
    assert!(preview["text"].as_str().unwrap().contains("goes back to PENDING"), "{preview}");
    assert_eq!(event_status(&db, dead).await.0, EventStatus::Dead, "a preview changes nothing");
    let done = act("/api/actions/run", json!({"action": "replay", "event_id": dead})).await;
    assert_eq!(done["ok"], true, "{done}");
    let by: String = db.scalar("SELECT replayed_by FROM outbox_replays").await;
    assert_eq!(by, "console: oncall@example.com");
    poller(&db, mailer.clone(), PollerConfig::for_tests("after-replay")).drain().await.unwrap();
    let carol = mailer.deliveries().iter().filter(|d| d.recipient == "carol@example.com").count();
    assert_eq!(carol, 1, "the replay reached carol once");
    let again = act("/api/actions/run", json!({"action": "replay", "event_id": dead})).await;
    assert_eq!(again["ok"], false);
    assert!(again["text"].as_str().unwrap().contains("is DONE, not DEAD"), "outboxctl's words: {again}");

    // Resend the unknown send: shown (with the duplicate it risks), done, recorded.
    let send: Uuid = db.scalar("SELECT id FROM booking_notification_sends WHERE status = 'UNKNOWN'").await;
    let preview = act("/api/actions/preview", json!({"action": "resend", "send_id": send})).await;
    assert!(preview["text"].as_str().unwrap().contains("they will have two"), "{preview}");
    let done = act("/api/actions/run", json!({"action": "resend", "send_id": send})).await;
    assert_eq!(done["ok"], true, "{done}");
    let decided: String = db.scalar("SELECT decided_by FROM notification_resends").await;
    assert_eq!(decided, "console: oncall@example.com");
    poller(&db, mailer.clone(), PollerConfig::for_tests("after-resend")).drain().await.unwrap();
    let erin = mailer.deliveries().iter().filter(|d| d.recipient == "erin@example.com").count();
    assert_eq!(erin, 1, "resent once (the first attempt's outcome was unknown, not delivered here)");

    // Lift a suppression.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute("INSERT INTO suppressed_addresses (email, mailbox, reason) VALUES ('dave@example.com', 'dave@example.com', 'complained')")
        .await
        .unwrap();
    let preview = act("/api/actions/preview", json!({"action": "unsuppress", "email": "dave@example.com"})).await;
    assert!(preview["text"].as_str().unwrap().contains("complained"), "{preview}");
    let done = act("/api/actions/run", json!({"action": "unsuppress", "email": "dave@example.com"})).await;
    assert_eq!(done["ok"], true, "{done}");
    assert_eq!(db.count("suppressed_addresses").await, 0);
    let gone = act("/api/actions/run", json!({"action": "unsuppress", "email": "dave@example.com"})).await;
    assert_eq!(gone, json!({"ok": false, "text": "dave@example.com is not suppressed"}));
}

#[tokio::test]
async fn a_resend_of_a_notification_a_later_change_superseded_is_refused() {
    let db = TestDb::create().await;
    let mailer = seed_dead_and_unknown(&db, (1, 2)).await;
    let send: Uuid = db.scalar("SELECT id FROM booking_notification_sends WHERE status = 'UNKNOWN'").await;
    let booking: Uuid = db.scalar("SELECT booking_id FROM booking_notification_sends WHERE status = 'UNKNOWN'").await;
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::UNLIMITED);
    service.cancel(&organizer(), booking, None).await.unwrap();
    poller(&db, mailer.clone(), PollerConfig::for_tests("cancel")).drain().await.unwrap();
    let c = console(db.operator_pool().await);
    for path in ["/api/actions/preview", "/api/actions/run"] {
        let a =
            ask(&c, "POST", path, Some(operator()), Some(json!({"action": "resend", "send_id": send}))).await.json();
        assert_eq!(a["ok"], false, "{a}");
        assert!(a["text"].as_str().unwrap().contains("BOOKING_CANCELLED"), "says what superseded it: {a}");
    }
    assert_eq!(db.count("notification_resends").await, 0, "nothing recorded, nothing reopened");
}

#[tokio::test]
async fn bad_requests_get_a_problem_and_change_nothing() {
    let db = TestDb::create().await;
    seed_dead_and_unknown(&db, (1, 2)).await;
    let c = console(db.operator_pool().await);
    let dead = dead_event(&db).await;
    let op = || Some(operator());
    let cases: Vec<(Answer, u16)> = vec![
        (ask(&c, "GET", "/api/nowhere", op(), None).await, 404),
        (ask(&c, "GET", "/api/bookings/not-a-uuid", op(), None).await, 404),
        (ask(&c, "DELETE", "/api/overview", op(), None).await, 405),
        (ask(&c, "POST", "/api/search", op(), Some(json!({"q": "not an address"}))).await, 422),
        (ask(&c, "POST", "/api/search", op(), Some(json!({"query": "x@example.com"}))).await, 400),
        (ask(&c, "POST", "/api/actions/run", op(), Some(json!({"action": "drop_table"}))).await, 422),
        (ask(&c, "POST", "/api/actions/run", op(), Some(json!({"action": "replay", "event_id": "x"}))).await, 422),
        (
            ask_with(&c, "POST", "/api/search", op(), &[("content-type", "application/json")], Some("x".repeat(5000)))
                .await,
            413,
        ),
        // A form another site could post, and a request another site's script sent.
        (
            ask_with(
                &c,
                "POST",
                "/api/actions/run",
                op(),
                &[("content-type", "text/plain")],
                Some(json!({"action": "replay", "event_id": dead}).to_string()),
            )
            .await,
            403,
        ),
        (
            ask_with(
                &c,
                "POST",
                "/api/actions/run",
                op(),
                &[("content-type", "application/json"), ("sec-fetch-site", "cross-site")],
                Some(json!({"action": "replay", "event_id": dead}).to_string()),
            )
            .await,
            403,
        ),
    ];
    for (answer, status) in cases {
        assert_eq!(answer.status, status, "{}", answer.body);
        assert!(!answer.body.contains('\n'), "one line: {}", answer.body);
    }
    assert_eq!(event_status(&db, dead).await.0, EventStatus::Dead, "nothing was replayed");
}
