//! `GET /bookings` with a full table (`BENCH_ONLY=listing
//! ./scripts/bench.sh`; part of `make bench`): BENCH_LISTING_BOOKINGS
//! (default 100,000) bookings seeded in SQL, 100 per organizer over a year,
//! each inviting 1 to 5 of a pool of addresses (about 60 bookings per
//! address), one in ten cancelled; then VACUUM ANALYZE.
//!
//! Through the real handler in process (`shared::api::Api::handle` on API
//! Gateway v2 events, the production configuration), one request at a
//! time, BENCH_LISTING_REQUESTS (default 2,000) of each, each by a caller
//! drawn at random from the seeded organizers or addresses:
//!
//! - `GET /bookings?role=organizer`, the first page of 50;
//! - the next page, through that page's `next_cursor`;
//! - `GET /bookings?role=attendee`, the first page of 50;
//! - the same for an address 100 accounts list in 10,000 bookings
//!   (BENCH_LISTING_FLOOD), beside the organizer's page: what several
//!   accounts listing one person can make that person's page cost;
//! - baselines: `GET /bookings/{id}` of one of the organizer's bookings (a
//!   primary-key read through the same handler; for the organizer it also
//!   reads where the booking's notifications stand, none here), and the
//!   organizer page's statement alone through tokio-postgres, prepared once,
//!   no handler.
//!
//! Each iteration runs the five in turn, so a slow second of the machine
//! weighs on all of them. A request's time runs from the event's JSON to
//! the response with its body (what the Lambda adapter does per request);
//! logging is off. Before measuring, the organizer and attendee statements,
//! read back verbatim from the handler's connection, are EXPLAINed (custom
//! and generic plan), and the bench fails unless they read
//! `bookings_by_organizer` and `booking_attendees_pkey` (the latter with no
//! sort, also for the flooded address).

use std::time::{Duration, Instant};

use lambda_http::request::from_str;
use outbox_tests::api::{gateway_event, TestApi};
use outbox_tests::bench::{env_usize, ms, percentile, record};
use outbox_tests::listing::{
    claims_of, explain, handler_statements, reads_index, seed_bookings, seed_invitations_of, sorts, Seeded, Whose,
};
use outbox_tests::{Rng, TestDb};
use serde_json::Value;
use shared::api::Api;
use uuid::Uuid;

/// One request through the handler: its time and its JSON body (200 or
/// the bench fails).
async fn handle(api: &Api, path: &str, query: &str, claims: &Value) -> (Duration, Value) {
    let event = gateway_event("GET", path, query, serde_json::Map::new(), None, Some(claims.clone())).to_string();
    let started = Instant::now();
    let resp = api.handle(from_str(&event).expect("valid API Gateway v2 event")).await;
    let elapsed = started.elapsed();
    let body: Value = serde_json::from_slice(resp.body().as_ref()).expect("a JSON body");
    assert_eq!(resp.status().as_u16(), 200, "GET {path}?{query}: {body}");
    (elapsed, body)
}

fn page_len(page: &Value) -> usize {
    page["bookings"].as_array().map_or(0, Vec::len)
}

/// p50 and p99 of `samples`, in ms.
fn p50_p99(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    (ms(percentile(samples, 0.5)), ms(percentile(samples, 0.99)))
}

/// 100000 as "100,000".
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let groups: Vec<&str> = digits.as_bytes().rchunks(3).rev().map(|g| std::str::from_utf8(g).unwrap()).collect();
    groups.join(",")
}

fn print_plan(what: &str, plan: &[String]) {
    println!("\n-- {what}");
    plan.iter().for_each(|line| println!("   {line}"));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes harness=false benches
    }
    let bookings = env_usize("BENCH_LISTING_BOOKINGS", 100_000);
    let requests = env_usize("BENCH_LISTING_REQUESTS", 2_000);
    let warmup = (requests / 10).max(20);
    assert!(bookings >= 100, "BENCH_LISTING_BOOKINGS: at least 100, so that every organizer has two pages");

    let db = TestDb::create().await;
    let started = Instant::now();
    let seeded: Seeded = seed_bookings(&db.pool, bookings).await;
    let flood = env_usize("BENCH_LISTING_FLOOD", 10_000);
    const FLOODED: &str = "flooded@example.com";
    seed_invitations_of(&db.pool, FLOODED, flood, 100).await;
    db.pool.get().await.unwrap().batch_execute("VACUUM ANALYZE bookings, booking_attendees").await.unwrap();
    let Seeded { organizers, attendees, .. } = seeded;
    eprintln!("seeded {bookings} bookings and vacuumed in {:.1}s", started.elapsed().as_secs_f64());
    println!(
        "listing benchmark: {} bookings ({} organizers, {} attendee addresses, 1 to 5 attendees each), {} \
         requests of each kind after {warmup} to warm up, one at a time, through Api::handle",
        thousands(bookings),
        thousands(organizers),
        thousands(attendees),
        thousands(requests)
    );

    // The statements as the handler runs them (which also checks that the
    // seeded rows pass its reader), and their plans.
    let sql = handler_statements(&db, &seeded).await;
    let flooded_listing = format!("GET /bookings?role=attendee, listed in {} bookings", thousands(flood));
    for (what, statement, whose, index) in [
        ("GET /bookings?role=organizer", &sql.organizer, Whose::Organizer(organizers / 2), "bookings_by_organizer"),
        ("GET /bookings?role=attendee", &sql.attendee, Whose::Attendee(attendees / 2), "booking_attendees_pkey"),
        (flooded_listing.as_str(), &sql.attendee, Whose::Address(FLOODED.into()), "booking_attendees_pkey"),
    ] {
        let (custom, generic) = explain(&db, statement, whose).await;
        print_plan(&format!("{what}, first page: EXPLAIN (ANALYZE, BUFFERS), custom plan"), &custom);
        print_plan(&format!("{what}, first page: the generic plan (after 5 runs of the prepared statement)"), &generic);
        for (kind, plan) in [("custom", &custom), ("generic", &generic)] {
            assert!(reads_index(plan, index), "{what}: the {kind} plan does not read {index}");
            assert!(!sorts(plan), "{what}: the {kind} plan sorts");
        }
    }
    println!();

    // Each organizer's bookings, for GET /bookings/{id}.
    let mut owned: Vec<Vec<Uuid>> = vec![Vec::new(); organizers];
    let rows = db
        .pool
        .get()
        .await
        .unwrap()
        .query("SELECT organizer_sub, id FROM bookings WHERE organizer_sub LIKE 'sub-org-%'", &[])
        .await
        .unwrap();
    for row in rows {
        let sub: String = row.get(0);
        let i: usize = sub.trim_start_matches("sub-org-").parse().expect("a seeded organizer");
        owned[i].push(row.get(1));
    }

    // The bare statement, prepared once on a connection of its own, bound as
    // the handler binds a first page.
    let bare = db.pool.get().await.unwrap();
    let statement = bare.prepare(&sql.organizer).await.unwrap();
    let earliest = shared::booking::domain::parse_instant("0001-01-01T00:00:00Z").unwrap();
    let latest = shared::booking::domain::parse_instant("9999-12-31T23:59:59Z").unwrap();
    let statuses = vec!["CONFIRMED", "CANCELLED"];
    let (nil, limit) = (Uuid::nil(), 51i64);

    let api = TestApi::new(&db).api;
    let mut rng = Rng::new(0x11571);
    let [mut get_one, mut sql_page, mut first, mut next, mut invited, mut flooded] =
        std::array::from_fn(|_| Vec::new());
    let flooded_claims = claims_of(FLOODED);
    for i in 0..warmup + requests {
        let o = rng.below(organizers as u64) as usize;
        let organizer = seeded.organizer(o);
        let id = owned[o][rng.below(owned[o].len() as u64) as usize];
        let (one, booking) = handle(&api, &format!("/bookings/{id}"), "", &organizer).await;
        assert_eq!(booking["id"], id.to_string());

        let key = format!("sub:sub-org-{o}");
        let at = Instant::now();
        let rows =
            bare.query(&statement, &[&key, &earliest, &latest, &statuses, &earliest, &nil, &limit]).await.unwrap();
        let bare_sql = at.elapsed();
        assert_eq!(rows.len(), owned[o].len().min(51));

        let (page, body) = handle(&api, "/bookings", "role=organizer", &organizer).await;
        assert_eq!(page_len(&body), 50, "a full first page");
        let cursor = body["next_cursor"].as_str().expect("a next page").to_string();
        let (then, body) = handle(&api, "/bookings", &format!("role=organizer&cursor={cursor}"), &organizer).await;
        assert!(page_len(&body) > 0, "a next page: {body}");

        let a = rng.below(attendees as u64) as usize;
        let (listed, _) = handle(&api, "/bookings", "role=attendee", &seeded.attendee(a)).await;
        let (swamped, body) = handle(&api, "/bookings", "role=attendee", &flooded_claims).await;
        assert_eq!(page_len(&body), 50.min(flood), "a full first page");

        if i >= warmup {
            get_one.push(one);
            sql_page.push(bare_sql);
            first.push(page);
            next.push(then);
            invited.push(listed);
            flooded.push(swamped);
        }
    }

    let base = p50_p99(&mut get_one);
    let bare_sql = p50_p99(&mut sql_page);
    let versus = |(p50, p99): (f64, f64), (b50, b99): (f64, f64), baseline: &str| {
        format!("p50 {:.1} x, p99 {:.1} x {baseline}", p50 / b50, p99 / b99)
    };
    let line = |what: &str, figures: (f64, f64), also: &str| {
        println!(
            "{what}: p50 {:.2} ms, p99 {:.2} ms ({}{also})",
            figures.0,
            figures.1,
            versus(figures, base, "GET /bookings/{id}")
        );
    };
    let n = thousands(bookings);
    println!(
        "GET /bookings/{{id}} (baseline: a primary-key read, then the notifications' status read), {n} bookings: \
         p50 {:.2} ms, p99 {:.2} ms",
        base.0, base.1
    );
    line(&format!("organizer page, bare SQL (tokio-postgres, no handler), {n} bookings"), bare_sql, "");
    let organizer = p50_p99(&mut first);
    let next_page = p50_p99(&mut next);
    let attendee = p50_p99(&mut invited);
    let swamped = p50_p99(&mut flooded);
    for (what, figures) in [
        (format!("listing as organizer, {n} bookings"), organizer),
        (format!("listing as organizer, next page via the cursor, {n} bookings"), next_page),
        (format!("listing as attendee, {n} bookings"), attendee),
    ] {
        line(&what, figures, &format!("; {}", versus(figures, bare_sql, "the bare SQL")));
    }
    line(
        &format!("listing as attendee listed in {} bookings by 100 accounts", thousands(flood)),
        swamped,
        &format!("; {}", versus(swamped, organizer, "the organizer's page")),
    );

    record("listing.bookings", bookings as f64);
    for (key, (p50, p99)) in [
        ("organizer", organizer),
        ("next_page", next_page),
        ("attendee", attendee),
        ("flooded_attendee", swamped),
        ("get_one", base),
        ("sql", bare_sql),
    ] {
        record(&format!("listing.{key}.p50_ms"), p50);
        record(&format!("listing.{key}.p99_ms"), p99);
    }
}
