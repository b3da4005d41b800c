//! `GET /bookings` at scale, for the listing benchmark
//! (`tests/benches/listing.rs`) and the suite's plan test
//! (`tests/suite/listing.rs`): bookings seeded in one set-based INSERT, the
//! callers who own them, and the listing statements exactly as the handler
//! prepared them, with their plans.

use serde_json::{json, Value};
use shared::api::Api;
use shared::fault::Faults;

use crate::api::{test_config, TestApi};
use crate::TestDb;

/// Bookings per organizer, spread over a year.
pub const PER_ORGANIZER: usize = 100;
/// Bookings per attendee address, on average (each booking invites 1 to 5,
/// 3 on average).
pub const PER_ATTENDEE: usize = 60;

/// What [`seed_bookings`] wrote: organizers `0..organizers` and attendee
/// addresses `0..attendees`, each a caller with JWT claims.
#[derive(Clone, Copy, Debug)]
pub struct Seeded {
    pub bookings: usize,
    pub organizers: usize,
    pub attendees: usize,
}

impl Seeded {
    /// The claims of organizer `i`: their subject keys their bookings.
    pub fn organizer(&self, i: usize) -> Value {
        json!({"sub": format!("sub-org-{i}"), "email": format!("organizer-{i}@example.com"),
               "name": format!("Organizer {i}"), "email_verified": "true"})
    }

    /// The claims of attendee `i`: their verified address is on their
    /// invitations.
    pub fn attendee(&self, i: usize) -> Value {
        json!({"sub": format!("sub-attendee-{i}"), "email": format!("attendee-{i}@example.com"),
               "name": format!("Attendee {i}"), "email_verified": "true"})
    }
}

/// Inserts `bookings` bookings in one statement: `PER_ORGANIZER` (to
/// twice that) per organizer (organizer_sub `sub-org-N`), each organizer's spaced evenly
/// over 2031 (30 to 75 minutes long, so their CONFIRMED ones never
/// overlap), each with 1 to 5 distinct attendees from a pool of
/// `3 × bookings / PER_ATTENDEE` addresses; one in ten CANCELLED (version
/// 2). Statistics are left to the caller (`ANALYZE`).
pub async fn seed_bookings(pool: &deadpool_postgres::Pool, bookings: usize) -> Seeded {
    assert!(bookings > 0, "at least one booking");
    // At least PER_ORGANIZER each (fewer only with fewer bookings in all).
    let organizers = (bookings / PER_ORGANIZER).max(1);
    // At least 5, so each booking's attendees are distinct.
    let attendees = (3 * bookings / PER_ATTENDEE).max(5);
    let per_organizer = bookings.div_ceil(organizers);
    // A year between each organizer's first and last booking; the longest
    // booking is 75 minutes.
    let spacing_minutes = (365 * 24 * 60 / per_organizer) as i32;
    assert!(spacing_minutes > 75, "an organizer's bookings must not overlap");
    // n: the booking; o: its organizer; slot: its place in the organizer's
    // year; h: a hash of n for everything else. Attendee k of a booking is
    // (h / 5 + k × attendees / 5) mod attendees: distinct for k < 5.
    let sql = "INSERT INTO bookings (id, organizer_email, organizer_name, organizer_sub, title, description, \
                                     location, timezone, starts_at, ends_at, attendees, status, version) \
               SELECT gen_random_uuid(), 'organizer-' || o || '@example.com', 'Organizer ' || o, 'sub-org-' || o, \
                      'Meeting ' || n, CASE WHEN h % 3 = 0 THEN 'Agenda: item ' || n END, \
                      CASE WHEN h % 2 = 0 THEN 'Room ' || h % 40 END, \
                      (ARRAY['UTC', 'Europe/Paris', 'America/New_York', 'Asia/Tokyo'])[1 + h % 4], \
                      starts, starts + make_interval(mins => 30 + 15 * (h % 4)::int), \
                      (SELECT jsonb_agg(jsonb_build_object('email', 'attendee-' || a || '@example.com', \
                                                           'name', 'Attendee ' || a) ORDER BY k) \
                         FROM generate_series(0, (h % 5)::int) k, \
                              LATERAL (SELECT (h / 5 + k * ($3::bigint / 5)) % $3::bigint AS a) pick), \
                      CASE WHEN h % 10 = 0 THEN 'CANCELLED' ELSE 'CONFIRMED' END, \
                      CASE WHEN h % 10 = 0 THEN 2 ELSE 1 END \
                 FROM (SELECT n, n % $2::bigint AS o, n / $2::bigint AS slot, abs(hashint8(n)::bigint) AS h \
                         FROM generate_series(0, $1::bigint - 1) n) s, \
                      LATERAL (SELECT timestamptz '2031-01-05 00:00:00+00' \
                                      + make_interval(mins => (slot * $4::bigint + 30 * (o * 7 % 48))::int) AS starts) t";
    let client = pool.get().await.unwrap();
    let written = client
        .execute(sql, &[&(bookings as i64), &(organizers as i64), &(attendees as i64), &(spacing_minutes as i64)])
        .await
        .unwrap_or_else(|e| panic!("seeding {bookings} bookings: {e}"));
    assert_eq!(written, bookings as u64);
    Seeded { bookings, organizers, attendees }
}

/// The statements of `GET /bookings?role=organizer` and `?role=attendee`,
/// verbatim as the handler prepared them (`shared::booking::store::list`
/// keeps its SQL private): read back from `pg_prepared_statements` after
/// one request of each through the real handler, on a pool of one
/// connection. Fails unless both answer 200 with bookings, which also
/// checks that the seeded rows pass the reader's parsers.
pub struct ListingSql {
    pub organizer: String,
    pub attendee: String,
}

pub async fn handler_statements(db: &TestDb, seeded: &Seeded) -> ListingSql {
    let pool = TestDb::pool_for(&db.url, 1);
    let api = TestApi { api: Api::new(pool.clone(), Faults::none(), test_config()) };
    for (query, claims) in [("role=organizer", seeded.organizer(0)), ("role=attendee", seeded.attendee(0))] {
        let r = api.send_claims("GET", &format!("/bookings?{query}"), Some(claims), &[], None).await;
        assert_eq!(r.status, 200, "{query}: {}", r.body);
        let found = r.body["bookings"].as_array().map_or(0, Vec::len);
        assert!(found > 0, "{query}: the seeded bookings are listed: {}", r.body);
    }
    let client = pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT statement FROM pg_prepared_statements \
              WHERE statement LIKE 'SELECT % FROM booking% ORDER BY %' AND statement NOT LIKE '% UNION %'",
            &[],
        )
        .await
        .unwrap();
    // The query above is a prepared statement too, and lists itself.
    let statements: Vec<String> =
        rows.iter().map(|r| r.get::<_, String>(0)).filter(|s| !s.contains("pg_prepared_statements")).collect();
    let one = |attendee: bool| {
        let found: Vec<&String> = statements.iter().filter(|s| s.contains("booking_attendees") == attendee).collect();
        assert_eq!(
            found.len(),
            1,
            "one listing statement as {}: {statements:#?}",
            ["organizer", "attendee"][attendee as usize]
        );
        found[0].clone()
    };
    ListingSql { organizer: one(false), attendee: one(true) }
}

/// Who a plan lists for: the organizer key or attendee address bound as `$1`.
pub enum Whose {
    Organizer(usize),
    Attendee(usize),
    /// Any address (one [`seed_invitations_of`] lists).
    Address(String),
}

/// The claims of whoever verified `address`.
pub fn claims_of(address: &str) -> Value {
    json!({"sub": format!("sub-{address}"), "email": address, "name": "Invited", "email_verified": "true"})
}

/// Inserts `bookings` bookings that each list `address` (and nobody else),
/// made by `accounts` organizers (`sub-flood-N`) over 2032, none
/// overlapping another of its organizer's: what several accounts listing
/// one person thousands of times leave in the table.
pub async fn seed_invitations_of(pool: &deadpool_postgres::Pool, address: &str, bookings: usize, accounts: usize) {
    let per = bookings.div_ceil(accounts) as i64;
    let spacing_minutes = 365 * 24 * 60 / per;
    assert!(spacing_minutes > 30, "an organizer's bookings must not overlap");
    let sql = "INSERT INTO bookings (id, organizer_email, organizer_name, organizer_sub, title, timezone, \
                                     starts_at, ends_at, attendees) \
               SELECT gen_random_uuid(), 'flood-' || o || '@example.com', 'Flood ' || o, 'sub-flood-' || o, \
                      'Meeting ' || n, 'UTC', starts, starts + interval '30 minutes', \
                      jsonb_build_array(jsonb_build_object('email', $4::text, 'name', 'Invited')) \
                 FROM (SELECT n, n % $2::bigint AS o, n / $2::bigint AS slot FROM generate_series(0, $1::bigint - 1) n) s, \
                      LATERAL (SELECT timestamptz '2032-01-05 00:00:00+00' \
                                      + make_interval(mins => (slot * $3::bigint + o)::int) AS starts) t";
    let client = pool.get().await.unwrap();
    let written = client
        .execute(sql, &[&(bookings as i64), &(accounts as i64), &spacing_minutes, &address])
        .await
        .unwrap_or_else(|e| panic!("seeding {bookings} invitations: {e}"));
    assert_eq!(written, bookings as u64);
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of a listing statement for a first page
/// of 50 as the handler binds it (no window, both statuses, one more row
/// than the page), planned as a custom plan for these values and as the
/// generic plan a prepared statement may switch to after five runs
/// (`plan_cache_mode = auto`). Returns (custom, generic), a line each row.
pub async fn explain(db: &TestDb, sql: &str, whose: Whose) -> (Vec<String>, Vec<String>) {
    let first = match whose {
        Whose::Organizer(i) => format!("sub:sub-org-{i}"),
        Whose::Attendee(i) => format!("attendee-{i}@example.com"),
        Whose::Address(a) => a,
    };
    let client = db.pool.get().await.unwrap();
    client.batch_execute(&format!("PREPARE listing_plan AS {sql}")).await.unwrap();
    let execute = format!(
        "EXPLAIN (ANALYZE, BUFFERS) EXECUTE listing_plan('{first}', '0001-01-01 00:00:00+00', \
         '9999-12-31 23:59:59+00', '{{CONFIRMED,CANCELLED}}', '0001-01-01 00:00:00+00', \
         '00000000-0000-0000-0000-000000000000', 51)"
    );
    let mut plans = Vec::new();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        client.batch_execute(&format!("SET plan_cache_mode = {mode}")).await.unwrap();
        let rows = client.query(&execute, &[]).await.unwrap_or_else(|e| panic!("{execute}: {e}"));
        plans.push(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>());
    }
    client.batch_execute("RESET plan_cache_mode; DEALLOCATE listing_plan").await.unwrap();
    let generic = plans.pop().unwrap();
    (plans.pop().unwrap(), generic)
}

/// Whether a plan reads `index` ("Index Scan using bookings_by_organizer
/// on bookings", "Index Scan using booking_attendees_pkey on ...").
pub fn reads_index(plan: &[String], index: &str) -> bool {
    plan.iter().any(|line| line.split_whitespace().any(|word| word == index))
}

/// Whether a plan sorts (a page read in index order never does).
pub fn sorts(plan: &[String]) -> bool {
    plan.iter().any(|line| line.trim_start().trim_start_matches("->").trim_start().starts_with("Sort"))
}
