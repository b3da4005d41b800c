//! The operator console's pages on a large history (`BENCH_ONLY=console
//! ./scripts/bench.sh`; part of `make bench`): BENCH_CONSOLE_EVENTS
//! (default 1,000,000) finished events, four per booking (a quarter as
//! many bookings, seeded as the listing benchmark seeds them), each with
//! three sends (3,000,000), SENT over the last week with SES's Delivery for
//! each; then the last hour at an SES account's default rate (14 a second:
//! 50,400 sends), 100 dead events and 50 unknown sends. VACUUM ANALYZE.
//!
//! Through the real handler in process (`shared::console::Console::handle`
//! on API Gateway v2 events, as an operator, logged in as the operators'
//! role), one request at a time, BENCH_CONSOLE_REQUESTS (default 300) of
//! each: the overview (`GET /api/overview`) and a booking's timeline
//! (`GET /api/bookings/{id}`, a booking drawn at random). Beside each: the
//! same page on an empty history, measured first in the same run (what the
//! page costs when there is nothing to read), and the target, p99 50 ms.
//! A new container's first overview reads the whole last hour; it is
//! printed apart (median of 5), with each of the overview's reads.

use std::time::{Duration, Instant};

use lambda_http::request::from_str;
use outbox_tests::api::gateway_event;
use outbox_tests::bench::{env_usize, ms, percentile, record};
use outbox_tests::console::{console, operator};
use outbox_tests::listing::seed_bookings;
use outbox_tests::{Rng, TestDb};
use shared::console::Console;
use shared::relay::SweeperConfig;
use uuid::Uuid;

const TARGET_P99_MS: f64 = 50.0;

async fn get(c: &Console, path: &str) -> Duration {
    let event = gateway_event("GET", path, "", serde_json::Map::new(), None, Some(operator())).to_string();
    let started = Instant::now();
    let resp = c.handle(from_str(&event).expect("an API Gateway v2 event")).await;
    let elapsed = started.elapsed();
    assert_eq!(resp.status().as_u16(), 200, "GET {path}: {:?}", resp.body());
    elapsed
}

fn p50_p99(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    (ms(percentile(samples, 0.5)), ms(percentile(samples, 0.99)))
}

/// Seeds the history: `events` DONE events over `events / 4` bookings,
/// three SENT sends each with SES's Delivery, spread over the last week.
async fn seed_history(db: &TestDb, events: usize) -> Vec<Uuid> {
    let bookings = (events / 4).max(100);
    seed_bookings(&db.pool, bookings).await;
    let client = db.pool.get().await.unwrap();
    // A UUIDv7-like id for a time: the sends' ids order them by claim time.
    client
        .batch_execute(
            "CREATE TEMP TABLE seeded AS SELECT id, row_number() OVER (ORDER BY id) AS n FROM bookings; \
             CREATE FUNCTION pg_temp.v7(at timestamptz) RETURNS uuid LANGUAGE sql AS \
               $$ SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') \
                          || substr(md5(random()::text), 1, 20))::uuid $$",
        )
        .await
        .unwrap();
    let week = "now() - interval '7 days' - interval '1 hour'";
    client
        .execute(
            &format!(
                "INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload, status, attempts, \
                                            created_at, updated_at, completed_at) \
                 SELECT pg_temp.v7(at), s.id, v, (ARRAY['BOOKING_CONFIRMED','BOOKING_UPDATED','BOOKING_RESCHEDULED',\
                        'BOOKING_CANCELLED'])[v], jsonb_build_object('booking', jsonb_build_object('id', s.id)), \
                        'DONE', 1, at, at + interval '50 ms', at + interval '50 ms' \
                   FROM seeded s, generate_series(1, 4) v, \
                        LATERAL (SELECT {week} + make_interval(secs => (s.n * 4 + v) * 604800.0 / $1::float8) AS at) t"
            ),
            &[&((bookings * 4) as f64)],
        )
        .await
        .unwrap();
    client
        .batch_execute(
            "INSERT INTO booking_notification_sends (id, outbox_event_id, booking_id, recipient_email, event_type, \
                                                     status, claimed_by, claimed_at, completed_at, updated_at, \
                                                     provider_message_id) \
             SELECT pg_temp.v7(e.created_at + interval '10 ms'), e.id, e.aggregate_id, \
                    'r' || r || '.' || left(e.aggregate_id::text, 8) || '@example.com', e.event_type, 'SENT', \
                    'poller:seed', e.created_at + interval '10 ms', e.created_at + interval '40 ms', \
                    e.created_at + interval '40 ms', 'm-' || e.id || '-' || r \
               FROM outbox_events e, generate_series(0, 2) r; \
             INSERT INTO send_feedback (send_id, kind, occurred_at, provider_message_id, received_at) \
             SELECT id, 'Delivery', completed_at + interval '1 s', provider_message_id, completed_at + interval '2 s' \
               FROM booking_notification_sends",
        )
        .await
        .unwrap();
    // The last hour at 14 sends a second: 16,800 events of three recipients.
    client
        .batch_execute(
            "WITH e AS ( \
               INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload, status, attempts, \
                                          created_at, updated_at, completed_at) \
               SELECT pg_temp.v7(at), s.id, 5, 'BOOKING_UPDATED', jsonb_build_object('booking', jsonb_build_object('id', s.id)), \
                      'DONE', 1, at, at + interval '60 ms', at + interval '60 ms' \
                 FROM (SELECT id, n FROM seeded ORDER BY n LIMIT 16800) s, \
                      LATERAL (SELECT now() - interval '1 hour' + make_interval(secs => s.n * 3600.0 / 16800) AS at) t \
               RETURNING id, aggregate_id, event_type, created_at) \
             INSERT INTO booking_notification_sends (id, outbox_event_id, booking_id, recipient_email, event_type, \
                                                     status, claimed_by, claimed_at, completed_at, updated_at) \
             SELECT pg_temp.v7(e.created_at + interval '10 ms'), e.id, e.aggregate_id, \
                    'r' || r || '.' || left(e.aggregate_id::text, 8) || '@example.com', e.event_type, 'SENT', \
                    'poller:seed', e.created_at + interval '10 ms', e.created_at + make_interval(secs => 0.03 + r * 0.02), \
                    e.created_at + interval '50 ms' \
               FROM e, generate_series(0, 2) r; \
             UPDATE outbox_events SET status = 'DEAD', last_error = 'Throttling: rate exceeded (attempt ' || attempts || ')', \
                    attempts = 8 \
              WHERE id IN (SELECT id FROM outbox_events WHERE aggregate_version = 5 ORDER BY id LIMIT 100); \
             UPDATE booking_notification_sends SET status = 'UNKNOWN', last_error = 'read timeout' \
              WHERE id IN (SELECT s.id FROM booking_notification_sends s JOIN outbox_events e ON e.id = s.outbox_event_id \
                            WHERE e.aggregate_version = 5 AND e.status = 'DONE' ORDER BY s.id DESC LIMIT 50); \
             INSERT INTO send_rate (provider, account_rate, rate) VALUES ('ses', 14, 14) ON CONFLICT DO NOTHING",
        )
        .await
        .unwrap();
    client.batch_execute("VACUUM ANALYZE").await.unwrap();
    let rows = client.query("SELECT id FROM seeded", &[]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

async fn measure(c: &Console, bookings: &[Uuid], requests: usize, rng: &mut Rng) -> [(f64, f64); 2] {
    let warmup = (requests / 10).max(10);
    let (mut overview, mut timeline) = (Vec::new(), Vec::new());
    for i in 0..warmup + requests {
        let o = get(c, "/api/overview").await;
        let b = bookings[rng.below(bookings.len() as u64) as usize];
        let t = get(c, &format!("/api/bookings/{b}")).await;
        if i >= warmup {
            overview.push(o);
            timeline.push(t);
        }
    }
    [p50_p99(&mut overview), p50_p99(&mut timeline)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let events = env_usize("BENCH_CONSOLE_EVENTS", 1_000_000);
    let requests = env_usize("BENCH_CONSOLE_REQUESTS", 300);
    let mut rng = Rng::new(0xC0C0);

    // The empty history first: one booking, its events and sends.
    let empty = TestDb::create().await;
    let few = seed_history(&empty, 4).await;
    let c = console(empty.operator_pool().await);
    let baseline = measure(&c, &few, requests, &mut rng).await;

    let db = TestDb::create().await;
    let started = Instant::now();
    let bookings = seed_history(&db, events).await;
    let sends: i64 = db.scalar("SELECT count(*) FROM booking_notification_sends").await;
    let finished: i64 = db.scalar("SELECT count(*) FROM outbox_events").await;
    eprintln!("seeded {finished} events and {sends} sends in {:.0}s", started.elapsed().as_secs_f64());
    if std::env::var("BENCH_CONSOLE_KEEP").is_ok() {
        // To look at plans by hand: the seeded database stays.
        println!("kept: {}", db.url);
        std::mem::forget(db);
        return;
    }
    let c = console(db.operator_pool().await);
    // A new container's first overview reads the whole hour; later ones
    // only what has settled since (console::overview::Minutes).
    let mut cold = Vec::new();
    for _ in 0..5 {
        let fresh = console(db.operator_pool().await);
        cold.push(get(&fresh, "/api/overview").await);
    }
    cold.sort();
    let [overview, timeline] = measure(&c, &bookings, requests, &mut rng).await;

    println!(
        "console benchmark: {finished} events, {sends} sends (50,400 in the last hour, 14/s), {requests} requests of \
         each after a warm-up, one at a time, through Console::handle as the operators' role"
    );
    // Where the overview's time goes: each of its reads, p50 of 20.
    let client = db.operator_pool().await.get().await.unwrap();
    let sweeper = SweeperConfig::from_env().unwrap();
    let mut parts = Vec::new();
    macro_rules! part {
        ($name:literal, $call:expr) => {{
            let mut t = Vec::new();
            for _ in 0..20 {
                let at = Instant::now();
                $call.await.unwrap();
                t.push(at.elapsed());
            }
            t.sort();
            parts.push(format!("{} {:.1}", $name, ms(percentile(&t, 0.5))));
        }};
    }
    use shared::notify::{evidence, pacing, sends as s};
    use shared::outbox::events as e;
    part!("backlog", e::standing::backlog(&client));
    part!("stuck", e::standing::count_stuck(&client, sweeper.stuck_after));
    part!("stopped", e::standing::stopped(&client));
    let hour_ago = chrono::Utc::now() - shared::console::overview::WINDOW;
    let settled = chrono::Utc::now() - std::time::Duration::from_secs(180);
    part!("the hour's minutes (a new container)", s::read::minutes(&client, hour_ago));
    part!("the minutes since the last settled one", s::read::minutes(&client, settled));
    part!("rates", pacing::send_rate::standing(&client));
    part!("unknown counts", evidence::resend::counts(&client, sweeper.feedback.grace));
    part!("left for an operator", s::unknown::left_for_operator(&client, sweeper.feedback.grace, 10));
    part!("dead reasons", e::standing::dead_reasons(&client, 5));
    part!("dead", e::list_dead(&client, 10));
    part!("suppressed", evidence::suppression::count(&client));
    part!("suppressions", evidence::suppression::suppressions(&client, 10));
    part!("watermark", evidence::watermark::watermark(&client));
    part!("leases", e::lease::held(&client));
    println!("the overview's reads, p50 ms: {}", parts.join(", "));
    println!(
        "a new container's first overview (the whole hour read): median of 5 {:.1} ms (the page refreshes every 5 s: \
         every later one reads only the minutes since)",
        ms(cold[2])
    );
    record("console.overview_cold_ms", ms(cold[2]));
    for (what, key, (p50, p99), (b50, b99)) in [
        ("overview (GET /api/overview)", "console.overview", overview, baseline[0]),
        ("a booking's timeline (GET /api/bookings/{id})", "console.timeline", timeline, baseline[1]),
    ] {
        println!(
            "{what}: p50 {p50:.2} ms, p99 {p99:.2} ms (empty history: p50 {b50:.2} ms, p99 {b99:.2} ms; target p99 \
             {TARGET_P99_MS} ms: {})",
            if p99 <= TARGET_P99_MS { "met" } else { "MISSED" }
        );
        record(&format!("{key}.p50_ms"), p50);
        record(&format!("{key}.p99_ms"), p99);
    }
}
