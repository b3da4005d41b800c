//! `GET /bookings`: the caller's bookings, as organizer or attendee, in
//! start order, a page at a time behind a signed cursor.

use std::collections::HashSet;

use outbox_tests::api::{problem_type, test_config, Caller, TestApi, ALICE, BOB, EVE};
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::api::config::ApiConfig;

fn at(day: u32, hour: u32) -> Value {
    json!({
        "title": format!("Meeting {day}/{hour}"),
        "start": format!("2031-03-{day:02}T{hour:02}:00:00Z"),
        "end": format!("2031-03-{day:02}T{hour:02}:30:00Z"),
        "timezone": "UTC",
        "attendees": [{"email": "alice@example.com", "name": "Alice"}]
    })
}

fn ids(page: &Value) -> Vec<String> {
    page["bookings"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_string()).collect()
}

/// Every page in turn, following `next_cursor`.
async fn all_pages(api: &TestApi, caller: Caller<'_>, query: &str) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/bookings?{query}&cursor={c}"),
            None => format!("/bookings?{query}"),
        };
        let page = api.get(&path, caller).await;
        assert_eq!(page.status, 200, "{}", page.body);
        cursor = page.body["next_cursor"].as_str().map(str::to_string);
        pages.push(page.body);
        if cursor.is_none() {
            return pages;
        }
    }
}

/// Pages in (start, id) order, with bookings created concurrently at times
/// both before and after the pages already read: no booking appears twice,
/// none that existed before the listing began is missed, and the order
/// holds across pages.
#[tokio::test]
async fn listing_pages_have_no_duplicates_or_gaps_while_bookings_are_inserted_concurrently() {
    let db = TestDb::create().await;
    let limits = shared::booking::limits::Limits::UNLIMITED;
    let api = TestApi::with(&db, shared::fault::Faults::none(), ApiConfig { limits, ..test_config() });
    let mut before = HashSet::new();
    for i in 0..24 {
        let b = api.post("/bookings", BOB, &at(1 + i / 8, 8 + i % 8)).await;
        assert_eq!(b.status, 201, "{}", b.body);
        before.insert(b.body["id"].as_str().unwrap().to_string());
    }
    let writer = async {
        for i in 0..24 {
            // After what the reader has seen, and before it, and between.
            let b = api.post("/bookings", BOB, &at(10 + i / 8, 8 + i % 8)).await;
            assert_eq!(b.status, 201, "{}", b.body);
            let b = api.post("/bookings", BOB, &at(1 + i / 8, 17 + i % 6)).await;
            assert!(b.status == 201 || b.status == 409, "{}", b.body);
        }
    };
    let (pages, ()) = tokio::join!(all_pages(&api, BOB, "role=organizer&limit=5"), writer);
    let seen: Vec<String> = pages.iter().flat_map(ids).collect();
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no booking on two pages");
    assert!(before.iter().all(|id| unique.contains(id)), "every booking that existed before is listed");
    let starts: Vec<(String, String)> = pages
        .iter()
        .flat_map(|p| p["bookings"].as_array().unwrap().clone())
        .map(|b| (b["start"].as_str().unwrap().to_string(), b["id"].as_str().unwrap().to_string()))
        .collect();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "start, then id, across pages");
}

/// The organizer lists what they organize, an attendee what they are
/// invited to (by their verified address), and a stranger neither; the
/// window, the status and the role filter; cancelled bookings stay
/// listable.
#[tokio::test]
async fn organizer_and_attendee_views_filter_by_window_status_and_role() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let bob: Vec<Value> = [(3, 9), (3, 14), (4, 9), (5, 9)].iter().map(|(d, h)| at(*d, *h)).collect();
    let mut made = Vec::new();
    for b in &bob {
        made.push(api.post("/bookings", BOB, b).await.body);
    }
    let alices_own = api
        .post("/bookings", ALICE, &{
            let mut b = at(4, 11);
            b["attendees"] = json!([{"email": "carol@example.com", "name": "Carol"}]);
            b
        })
        .await;
    assert_eq!(alices_own.status, 201, "{}", alices_own.body);
    let cancelled = made[1]["id"].as_str().unwrap();
    assert_eq!(api.post(&format!("/bookings/{cancelled}/cancel"), BOB, &json!({})).await.status, 200);

    let list = |caller, q: &'static str| {
        let api = &api;
        async move {
            let r = api.get(&format!("/bookings?{q}"), caller).await;
            assert_eq!(r.status, 200, "{q}: {}", r.body);
            r.body["bookings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b["title"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(BOB, "role=organizer").await, ["Meeting 3/9", "Meeting 3/14", "Meeting 4/9", "Meeting 5/9"]);
    assert_eq!(list(BOB, "role=attendee").await, Vec::<String>::new());
    assert_eq!(list(ALICE, "role=attendee").await, ["Meeting 3/9", "Meeting 3/14", "Meeting 4/9", "Meeting 5/9"]);
    assert_eq!(list(ALICE, "role=organizer").await, ["Meeting 4/11"]);
    assert_eq!(list(ALICE, "").await, ["Meeting 3/9", "Meeting 3/14", "Meeting 4/9", "Meeting 4/11", "Meeting 5/9"]);
    assert_eq!(list(EVE, "").await, Vec::<String>::new(), "a stranger sees nothing");
    assert_eq!(list(BOB, "status=CONFIRMED").await, ["Meeting 3/9", "Meeting 4/9", "Meeting 5/9"]);
    assert_eq!(list(BOB, "status=CANCELLED").await, ["Meeting 3/14"]);
    // Those overlapping [from, to): 9:15 is inside the 9:00 meeting.
    assert_eq!(list(BOB, "from=2031-03-03T09:15:00Z&to=2031-03-04T09:00:00Z").await, ["Meeting 3/9", "Meeting 3/14"]);
}

/// A cursor is the API's own, for one caller and one query: altered, used
/// with other filters or by someone else, it gets 400; bad parameters are
/// 422, each named.
#[tokio::test]
async fn a_tampered_or_borrowed_cursor_gets_400_and_bad_parameters_422() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    for h in 8..12 {
        api.post("/bookings", BOB, &at(3, h)).await;
    }
    let first = api.get("/bookings?role=organizer&limit=2", BOB).await;
    let cursor = first.body["next_cursor"].as_str().unwrap().to_string();
    let next = api.get(&format!("/bookings?role=organizer&limit=2&cursor={cursor}"), BOB).await;
    assert_eq!(next.status, 200, "{}", next.body);
    let mut tampered = cursor.clone().into_bytes();
    tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for (who, path) in [
        (BOB, format!("/bookings?role=organizer&limit=2&cursor={tampered}")),
        (BOB, format!("/bookings?role=organizer&limit=2&cursor={}", &cursor[..cursor.len() - 2])),
        (BOB, format!("/bookings?role=attendee&limit=2&cursor={cursor}")),
        (BOB, format!("/bookings?role=organizer&status=CONFIRMED&limit=2&cursor={cursor}")),
        (EVE, format!("/bookings?role=organizer&limit=2&cursor={cursor}")),
        (BOB, "/bookings?cursor=not-a-cursor".to_string()),
    ] {
        let r = api.get(&path, who).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert_eq!(r.body["type"], problem_type("invalid-cursor"));
    }
    let bad = api.get("/bookings?role=boss&limit=500&from=yesterday&status=DONE&sort=title", BOB).await;
    assert_eq!(bad.status, 422, "{}", bad.body);
    let mut names: Vec<&str> =
        bad.body["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["from", "limit", "role", "sort", "status"]);
    assert_eq!(api.get("/bookings?limit=1&limit=2", BOB).await.status, 422, "a parameter given twice");
}

/// Both listings read their index, with the statistics of a table of a few
/// thousand bookings, vacuumed (no planner setting forced): the organizer's page
/// `bookings_by_organizer` (key, start, id) and the attendee's
/// `bookings_by_attendee` (GIN), in the custom plan and in the generic plan
/// a prepared statement may switch to. The statements are the handler's
/// own, read back from its connection.
#[tokio::test]
async fn listing_reads_the_organizer_and_attendee_indexes() {
    use outbox_tests::listing::{explain, handler_statements, reads_index, seed_bookings, Whose};
    let db = TestDb::create().await;
    let seeded = seed_bookings(&db.pool, 5_000).await;
    // VACUUM too, as autovacuum would after such a burst: it moves the GIN
    // index's pending list (fastupdate) into the index proper. Until then
    // the planner prices the attendee index with the whole list to scan,
    // and a table this small is read whole instead.
    db.pool.get().await.unwrap().batch_execute("VACUUM ANALYZE bookings").await.unwrap();
    let sql = handler_statements(&db, &seeded).await;
    for (statement, whose, index) in [
        (&sql.organizer, Whose::Organizer(seeded.organizers / 2), "bookings_by_organizer"),
        (&sql.attendee, Whose::Attendee(seeded.attendees / 2), "booking_attendees_pkey"),
    ] {
        let (custom, generic) = explain(&db, statement, whose).await;
        assert!(reads_index(&custom, index), "the custom plan reads {index}:\n{}", custom.join("\n"));
        assert!(reads_index(&generic, index), "the generic plan reads {index}:\n{}", generic.join("\n"));
    }
}

/// Low 7 of issue 37, as the attack: 20 accounts list Victor in 3,000
/// bookings. His page is still one range of his index read in order, with
/// no sort, that stops after the page (one more row than it), and paging
/// through all of them with the cursor lists each exactly once, in order.
#[tokio::test]
async fn an_attendee_listed_in_thousands_of_bookings_by_others_reads_one_page() {
    use outbox_tests::listing::{
        claims_of, explain, handler_statements, reads_index, seed_bookings, seed_invitations_of, sorts, Whose,
    };
    let db = TestDb::create().await;
    let seeded = seed_bookings(&db.pool, 500).await;
    let victor = "victor@example.com";
    seed_invitations_of(&db.pool, victor, 3_000, 20).await;
    db.pool.get().await.unwrap().batch_execute("VACUUM ANALYZE bookings, booking_attendees").await.unwrap();
    let sql = handler_statements(&db, &seeded).await;
    let (custom, generic) = explain(&db, &sql.attendee, Whose::Address(victor.into())).await;
    for (kind, plan) in [("custom", &custom), ("generic", &generic)] {
        let shown = plan.join("\n");
        assert!(reads_index(plan, "booking_attendees_pkey"), "the {kind} plan reads his index:\n{shown}");
        assert!(!sorts(plan), "the {kind} plan reads in order, no sort:\n{shown}");
        let read = plan.iter().find(|l| l.contains("booking_attendees_pkey")).unwrap();
        assert!(read.contains("rows=51 "), "the {kind} plan stops after the page and one row: {read}");
    }

    let api = TestApi::new(&db);
    let (mut listed, mut cursor): (Vec<(String, String)>, Option<String>) = (Vec::new(), None);
    loop {
        let query = match &cursor {
            Some(c) => format!("role=attendee&limit=100&cursor={c}"),
            None => "role=attendee&limit=100".to_string(),
        };
        let page = api.send_claims("GET", &format!("/bookings?{query}"), Some(claims_of(victor)), &[], None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        for b in page.body["bookings"].as_array().unwrap() {
            listed.push((b["start"].as_str().unwrap().to_string(), b["id"].as_str().unwrap().to_string()));
        }
        match page.body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(listed.len(), 3_000, "each once");
    let mut sorted = listed.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(listed, sorted, "in (start, id) order, none twice");
}

/// Low 11 of issue 52, as the attack: 20 accounts list Victor in 3,000
/// bookings and cancel all but 29, among 20,000 other bookings. His page
/// of confirmed bookings reads his index range and filters status and end
/// there (V42): only the 29 still on visit their booking's row; before,
/// every cancelled one did, on every page.
#[tokio::test]
async fn cancelled_bookings_listing_an_attendee_never_visit_their_rows_on_his_page() {
    use outbox_tests::listing::{handler_statements, seed_bookings, seed_invitations_of};
    let db = TestDb::create().await;
    let seeded = seed_bookings(&db.pool, 20_000).await;
    let victor = "victor@example.com";
    seed_invitations_of(&db.pool, victor, 3_000, 20).await;
    let client = db.pool.get().await.unwrap();
    client
        .batch_execute(
            "UPDATE bookings SET status = 'CANCELLED' WHERE attendees @> '[{\"email\": \"victor@example.com\"}]' \
                AND title NOT LIKE '%00'",
        )
        .await
        .unwrap();
    client.batch_execute("VACUUM ANALYZE bookings, booking_attendees").await.unwrap();
    let sql = handler_statements(&db, &seeded).await;
    client.batch_execute(&format!("PREPARE page AS {}", sql.attendee)).await.unwrap();
    let plan: Vec<String> = client
        .query(
            "EXPLAIN (ANALYZE) EXECUTE page('victor@example.com', '0001-01-01 00:00:00+00', \
             '9999-12-31 23:59:59+00', '{CONFIRMED}', '0001-01-01 00:00:00+00', \
             '00000000-0000-0000-0000-000000000000', 51)",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let shown = plan.join("\n");
    assert!(outbox_tests::listing::reads_index(&plan, "booking_attendees_pkey"), "his range:\n{shown}");
    let visits = plan
        .iter()
        .find(|l| l.contains("on bookings"))
        .and_then(|l| l.split("loops=").nth(1))
        .and_then(|n| n.trim_end_matches(')').parse::<u32>().ok())
        .unwrap_or_else(|| panic!("a visit of each listed booking's row:\n{shown}"));
    assert_eq!(visits, 29, "only the confirmed bookings visit their row:\n{shown}");
}
