//! Poller benchmark (`./scripts/bench.sh`): notifications per second with an
//! instant mailer for 1 and 4 pollers, and commit-to-send latency, each next
//! to a plain insert-and-commit baseline measured in the same run against
//! the same database; then `POST /bookings` through the real handler, which
//! the script compares with the same SQL run by pgbench. Machines here are
//! noisy; the ratios are what to read.
//!
//! Sizes: BENCH_EVENTS (default 150000) events × BENCH_RECIPIENTS (default
//! 3): 450,000 notifications, as many as graphile-worker's 450,000 jobs, so
//! both drains last 10 s and more and startup weighs little. BENCH_BATCH
//! events claimed per poll (default 256) and POLLER_CLAIM_GROUP sends
//! claimed per statement (default 256), POLLER_BATCHES_IN_FLIGHT (default
//! 4, as graphile-worker's batched preset runs 4 workers); one more drain
//! runs at the template's defaults (the settings' own, today the same
//! 256/256/4) unless BENCH_PRODUCTION_DRAIN=0. Each poller's pool is built
//! as the poller Lambda builds it. When the cluster preloads
//! pg_stat_statements (scripts/bench.sh's does), each drain also prints
//! what it cost the database per notification: statements, WAL records and
//! bytes, which perf.js measures the same way for graphile-worker's jobs.

use const_format::formatcp;
use shared::outbox::events::status::sql::PENDING;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::api::{gateway_event, test_config};
use outbox_tests::bench::{
    drain, drain_through, env_usize, ms, percentile, print_work_breakdown, record, work_by_statement, DbWork, Shape,
};
use outbox_tests::outbox::{create_booking_at, seed_events};
use outbox_tests::TestDb;
use shared::api::config::ApiConfig;
use shared::api::Api;
use shared::booking::limits::Limits;
use shared::db::DbConfig;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::relay::{Poller, PollerConfig, Wake};

/// Plain INSERT + COMMIT of a row like an outbox event, `conns` connections
/// in parallel. Returns rows per second.
async fn baseline(db: &TestDb, rows: usize, conns: usize) -> f64 {
    let client = db.pool.get().await.unwrap();
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS bench_baseline (id uuid PRIMARY KEY, payload jsonb NOT NULL)")
        .await
        .unwrap();
    drop(client);
    let payload = serde_json::json!({"booking": {"title": "x".repeat(200), "attendees": ["a", "b", "c"]}});
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let pool = db.pool.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let client = pool.get().await.unwrap();
            let stmt = client.prepare("INSERT INTO bench_baseline (id, payload) VALUES ($1, $2)").await.unwrap();
            for _ in 0..rows / conns {
                client.execute(&stmt, &[&uuid::Uuid::now_v7(), &payload]).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    rows as f64 / started.elapsed().as_secs_f64()
}

/// Drains `events` × `recipients` seeded notifications; returns
/// notifications/s, the drain's seconds, the insert baseline, and what
/// the drain cost the database per notification (when measurable).
async fn throughput(shape: Shape, events: usize, recipients: usize) -> (f64, f64, f64, Option<DbWork>) {
    let db = TestDb::create().await;
    let base = baseline(&db, 5000, shape.pollers).await;
    seed_events(&db.pool, events, recipients).await;
    let client = db.pool.get().await.unwrap();
    client.batch_execute("VACUUM ANALYZE outbox_events").await.unwrap();
    let before = DbWork::so_far(&db).await;
    let statements = work_by_statement(&db).await;
    let elapsed = drain(&db, shape, events * recipients).await;
    let work = match (before, DbWork::so_far(&db).await) {
        (Some(before), Some(after)) => Some(after.per(before, events * recipients)),
        _ => None,
    };
    if let (Some(before), Some(after)) = (statements, work_by_statement(&db).await) {
        print_work_breakdown(&before, &after, events * recipients);
    }
    ((events * recipients) as f64 / elapsed, elapsed, base, work)
}

/// Writes `n` reminders due from tomorrow on, as bookings made long ahead
/// leave them in `outbox_events`: each its own lane, with a real reminder's
/// payload (one statement per 100,000; then VACUUM ANALYZE).
async fn seed_future_reminders(db: &TestDb, n: usize) {
    let mut event = outbox_tests::outbox::confirmed_event(0, 3);
    let mut payload: serde_json::Value = serde_json::from_str(event.payload.get()).unwrap();
    payload["reminder"] = serde_json::json!("PT15M");
    event.payload = serde_json::value::to_raw_value(&payload).unwrap();
    let client = db.pool.get().await.unwrap();
    let sql = "INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload, next_attempt_at) \
               SELECT gen_random_uuid(), gen_random_uuid(), 1, 'BOOKING_REMINDER', $1::jsonb, \
                      now() + interval '1 day' + make_interval(secs => g) \
                 FROM generate_series($2::bigint, $3::bigint) g";
    let payload = tokio_postgres::types::Json(&*event.payload);
    for from in (0..n as i64).step_by(100_000) {
        let to = (from + 100_000).min(n as i64) - 1;
        client.execute(sql, &[&payload, &from, &to]).await.unwrap();
    }
    client.batch_execute("VACUUM ANALYZE outbox_events").await.unwrap();
}

/// The same drain with and without `future` reminders due later in the
/// table, each on a fresh database: notifications/s without, then with.
async fn with_future_reminders(shape: Shape, events: usize, recipients: usize, future: usize) -> (f64, f64) {
    let mut rates = Vec::new();
    for n in [0, future] {
        let db = TestDb::create().await;
        if n > 0 {
            seed_future_reminders(&db, n).await;
        }
        seed_events(&db.pool, events, recipients).await;
        db.pool.get().await.unwrap().batch_execute("VACUUM ANALYZE outbox_events").await.unwrap();
        let elapsed = drain(&db, shape, events * recipients).await;
        let pending: i64 = db.scalar(formatcp!("SELECT count(*) FROM outbox_events WHERE status = {PENDING}")).await;
        assert_eq!(pending as usize, n, "the future reminders wait, untouched");
        rates.push((events * recipients) as f64 / elapsed);
    }
    (rates[0], rates[1])
}

/// The languages of a drain's three recipients: each their own (French,
/// Japanese, American English: ICU4X's long forms through Fluent), or none
/// (the compact English of a deployment nobody named a language in).
const THREE_LANGUAGES: [(&str, &str); 3] = [("fr", "fr"), ("ja-JP", "ja"), ("en-US", "en")];

/// Seeds `events` invitations of `recipients` each, the r-th recipient
/// reading `languages[r % len]` (none when empty), as the API writes them.
async fn seed_in_languages(db: &TestDb, events: usize, recipients: usize, languages: &[(&str, &str)]) {
    let client = db.pool.get().await.unwrap();
    for chunk in (0..events).collect::<Vec<_>>().chunks(1000) {
        let new: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let mut event = outbox_tests::outbox::confirmed_event(i, recipients);
                let mut payload: serde_json::Value = serde_json::from_str(event.payload.get()).unwrap();
                payload["booking"]["timezone"] = serde_json::json!("Europe/Paris");
                for (r, a) in payload["booking"]["attendees"].as_array_mut().unwrap().iter_mut().enumerate() {
                    if let Some((tag, language)) = languages.get(r % languages.len().max(1)) {
                        a["locale"] = serde_json::json!(tag);
                        a["language"] = serde_json::json!(language);
                    }
                }
                event.payload = serde_json::value::to_raw_value(&payload).unwrap();
                event
            })
            .collect();
        shared::outbox::events::insert_many(&client, &new).await.unwrap();
    }
    client.batch_execute("VACUUM ANALYZE outbox_events").await.unwrap();
}

/// How long one message takes to render in each language: the first (its
/// formatters built from ICU4X's compiled data, its Fluent bundle parsed:
/// what a cold poller pays once per language, in its first invocation, not
/// its init) and the next. Run before anything else renders in this process.
fn first_renders() -> Vec<(&'static str, Duration, Duration)> {
    use shared::booking::events::{BookingEvent, EventPayload, EventType, Notice};
    use shared::notify::notification::Notification;
    let sender = shared::notify::render::invite::Sender::parse("Bookings <bookings@example.com>").unwrap();
    let mut booking: serde_json::Value =
        serde_json::from_str(outbox_tests::outbox::confirmed_event(0, 1).payload.get()).unwrap();
    booking["booking"]["timezone"] = serde_json::json!("Europe/Paris");
    let mut out = Vec::new();
    for (tag, language) in THREE_LANGUAGES {
        let mut payload = booking.clone();
        payload["booking"]["attendees"][0]["locale"] = serde_json::json!(tag);
        payload["booking"]["attendees"][0]["language"] = serde_json::json!(language);
        let payload: EventPayload = serde_json::from_value(payload).unwrap();
        let recipient = payload.booking.attendees[0].clone();
        let event =
            BookingEvent { id: uuid::Uuid::now_v7(), event_type: EventType::BookingConfirmed, payload, trace_id: None };
        let n = Notification {
            claim: Some(uuid::Uuid::now_v7()),
            ..Notification::new(&event, recipient, Notice::Request, true)
        };
        let timed = || {
            let started = Instant::now();
            std::hint::black_box(shared::notify::render::invite::build(&n, &sender));
            started.elapsed()
        };
        let first = timed();
        out.push((tag, first, timed()));
    }
    out
}

/// Messages rendered per second, one thread, each kind to a recipient in
/// en-US, fr and ja (outbox_tests::mail_samples: a 90-minute meeting with
/// a place, a link, a description and four guests), the whole MIME message
/// as the mailers send it: (kind, messages/s over the three languages).
fn render_rates() -> Vec<(&'static str, f64)> {
    use outbox_tests::mail_samples::{notification, KINDS, LANGUAGES};
    let sender = shared::notify::render::invite::Sender::parse("Bookings <bookings@example.com>").unwrap();
    let rounds = env_usize("BENCH_RENDERS", 3_000);
    KINDS
        .iter()
        .map(|kind| {
            let messages: Vec<_> = LANGUAGES.iter().map(|l| notification(kind, *l)).collect();
            for n in &messages {
                std::hint::black_box(shared::notify::render::invite::build(n, &sender));
                // formatters built
            }
            let started = Instant::now();
            for _ in 0..rounds {
                for n in &messages {
                    std::hint::black_box(shared::notify::render::invite::build(n, &sender));
                }
            }
            (*kind, (rounds * messages.len()) as f64 / started.elapsed().as_secs_f64())
        })
        .collect()
}

/// The drain, each message rendered as the SES mailer renders it, with
/// every recipient in one language (none named), then each in their own
/// (three languages): `rounds` of each, interleaved (one, three, three,
/// one, ...), each on a fresh database; the best round of each.
async fn languages(shape: Shape, events: usize, recipients: usize, rounds: usize) -> (f64, f64) {
    let sender = shared::notify::render::invite::Sender::parse("Bookings <bookings@example.com>").unwrap();
    let (mut one, mut three) = (0f64, 0f64);
    for round in 0..rounds * 2 {
        let many = (round % 4 == 1) || (round % 4 == 2);
        let db = TestDb::create().await;
        seed_in_languages(&db, events, recipients, if many { &THREE_LANGUAGES[..] } else { &[] }).await;
        let mailer = Arc::new(RecordingMailer::new().rendering(sender.clone()));
        let rate = (events * recipients) as f64 / drain_through(&db, shape, events * recipients, mailer).await;
        if many {
            three = three.max(rate);
        } else {
            one = one.max(rate);
        }
    }
    (one, three)
}

/// `POST /bookings` through the real handler (an API Gateway v2 event in,
/// the response out), `clients` at once on one pool of that size, for
/// `secs`: each client is an organizer booking its next 30-minute slot
/// with two attendees and an Idempotency-Key. Returns bookings/s and p99.
async fn api_write(clients: usize, secs: u64) -> (f64, Duration) {
    let db = TestDb::create().await;
    let config = ApiConfig { limits: Limits::UNLIMITED, ..test_config() };
    let api = Arc::new(Api::new(TestDb::pool_for(&db.url, clients), Faults::none(), config));
    let started = Instant::now();
    let stop = started + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            // The request as API Gateway would hand it over, built once:
            // each request only fills in its slot and its key, so the
            // client's own work stays out of the handler's figure.
            let claims = serde_json::json!({
                "sub": format!("organizer-{c}"), "email": format!("organizer-{c}@example.com"),
                "name": "Bench Organizer", "email_verified": "true"
            });
            let body = serde_json::json!({
                "title": "Quarterly planning", "description": "Agenda and notes in the shared folder.",
                "location": "Room 4.12", "timezone": "Europe/Berlin", "start": "@START@", "end": "@END@",
                "attendees": [{"email": "alice@example.com", "name": "Alice Example"},
                              {"email": "bob@example.com", "name": "Bob Example"}]
            })
            .to_string();
            let mut headers = serde_json::Map::new();
            headers.insert("content-type".into(), "application/json".into());
            headers.insert("idempotency-key".into(), "@KEY@".into());
            let template = gateway_event("POST", "/bookings", "", headers, Some(&body), Some(claims)).to_string();
            // The template cut at its three blanks, once; each request
            // writes the pieces and the blanks into one reused buffer, as
            // pgbench fills in its variables.
            let mut blanks: Vec<(usize, &str)> =
                ["@KEY@", "@START@", "@END@"].map(|b| (template.find(b).expect("blank in template"), b)).to_vec();
            blanks.sort();
            let mut pieces = Vec::new();
            let mut from = 0;
            for (at, blank) in &blanks {
                pieces.push(&template[from..*at]);
                from = at + blank.len();
            }
            pieces.push(&template[from..]);
            let first = chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap();
            let mut event = String::with_capacity(template.len() + 64);
            let mut took = Vec::new();
            for slot in 0.. {
                if Instant::now() >= stop {
                    break;
                }
                use std::fmt::Write;
                let start = first + chrono::Duration::minutes(30 * slot);
                let end = start + chrono::Duration::minutes(30);
                event.clear();
                for (piece, (_, blank)) in pieces.iter().zip(&blanks) {
                    event.push_str(piece);
                    match *blank {
                        "@KEY@" => write!(event, "{}", uuid::Uuid::new_v4()),
                        "@START@" => write!(event, "{}", start.to_rfc3339()),
                        _ => write!(event, "{}", end.to_rfc3339()),
                    }
                    .unwrap();
                }
                event.push_str(pieces[blanks.len()]);
                let sent = Instant::now();
                let req = lambda_http::request::from_str(&event).unwrap();
                let resp = api.handle(req).await;
                assert_eq!(resp.status().as_u16(), 201, "{:?}", resp.body());
                took.push(sent.elapsed());
            }
            took
        }));
    }
    let mut took = Vec::new();
    for t in tasks {
        took.extend(t.await.unwrap());
    }
    let rate = took.len() as f64 / started.elapsed().as_secs_f64();
    took.sort();
    (rate, percentile(&took, 0.99))
}

/// Bookings created at a steady rate through the real service while one
/// poller runs with the production idle wait (200 ms), woken by the
/// commit's notification when `listen`.
async fn latency(bookings: usize, per_second: u64, listen: bool) -> (Duration, Duration, f64) {
    let db = TestDb::create().await;
    let base = baseline(&db, 2000, 1).await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("latency");
    config.idle_wait = Duration::from_millis(200);
    let mut p = Poller::new(db.pool.clone(), mailer.clone(), Faults::none(), config);
    if listen {
        let connector = DbConfig::from_url(&db.url, 1, Duration::from_secs(5)).unwrap().connector().unwrap();
        p = p.with_wake(Wake::new(connector));
    }
    let run_for = Duration::from_millis(bookings as u64 * 1000 / per_second) + Duration::from_secs(3);
    let poller = tokio::spawn(async move { p.run_until(Instant::now() + run_for).await.unwrap() });
    let mut committed = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
    for i in 0..bookings {
        tick.tick().await;
        let b = create_booking_at(&db, i as i64, &["alice@example.com"]).await;
        committed.insert(b.id, Instant::now());
    }
    poller.await.unwrap();
    let mut lat: Vec<Duration> =
        mailer.deliveries().iter().map(|d| d.at.saturating_duration_since(committed[&d.booking_id])).collect();
    assert_eq!(lat.len(), bookings, "every booking's invite was sent");
    lat.sort();
    (percentile(&lat, 0.5), percentile(&lat, 0.99), base)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes harness=false benches
    }
    // BENCH_ONLY=api runs the API write path alone (for profiling it);
    // BENCH_ONLY=throughput the drains alone.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let only_api = only == "api";
    let only_throughput = only == "throughput";
    let only_reminders = only == "reminders";
    let only_languages = only == "languages";
    let events = env_usize("BENCH_EVENTS", 150_000);
    let recipients = env_usize("BENCH_RECIPIENTS", 3);
    // As many batches in flight as graphile-worker's batched preset has
    // workers (concurrency 4).
    let (batch, group, in_flight) =
        (env_usize("BENCH_BATCH", 256), env_usize("POLLER_CLAIM_GROUP", 256), env_usize("POLLER_BATCHES_IN_FLIGHT", 4));
    let production = Shape::production();
    println!(
        "poller benchmark: {events} events x {recipients} recipients, instant mailer; batches of {batch} events, \
         claim groups of {group}, {in_flight} batches in flight; then 1 poller at the template's defaults \
         ({}/{}, {} in flight)",
        production.batch, production.group, production.in_flight
    );
    println!("{:<34} {:>14} {:>8} {:>18} {:>8}", "measure", "value", "drain", "baseline ins+commit/s", "ratio");
    // BENCH_POLLERS: the drains' poller counts (default 1,4).
    let counts: Vec<usize> = std::env::var("BENCH_POLLERS")
        .unwrap_or_else(|_| "1,4".into())
        .split(',')
        .map(|n| n.trim().parse().expect("BENCH_POLLERS is a comma list of counts"))
        .collect();
    let mut shapes: Vec<(Shape, String)> = counts
        .iter()
        .map(|&pollers| (Shape { pollers, batch, group, in_flight }, format!("project.poller{pollers}")))
        .collect();
    if std::env::var("BENCH_PRODUCTION_DRAIN").as_deref() != Ok("0") {
        shapes.push((production, "project.poller1.defaults".into()));
    }
    // Each recipient's message in their own language: the template's
    // defaults, rendering every message as the SES mailer does.
    if !only_api && !only_reminders && !only_throughput {
        for (tag, first, next) in first_renders() {
            println!(
                "{:<34} {:>12.2}ms {:>8} {:>16.3}ms",
                format!("first message in {tag} (then the next)"),
                ms(first),
                "",
                ms(next)
            );
            record(&format!("project.render.first_ms.{tag}"), ms(first));
        }
        for (kind, rate) in render_rates() {
            println!(
                "{:<34} {rate:>12.0}/s {:>8} {:>16.1}µs",
                format!("rendered/s, {kind} (en-US, fr, ja)"),
                "",
                1e6 / rate
            );
            record(&format!("project.render.per_sec.{kind}"), rate);
        }
        let n = env_usize("BENCH_LANGUAGE_EVENTS", 30_000);
        let (one, three) = languages(production, n, 3, env_usize("BENCH_LANGUAGE_ROUNDS", 2)).await;
        println!(
            "{:<34} {three:>12.0}/s {:>8} {one:>16.0}/s {:>8.2}",
            "rendered, 3 recipients 3 languages",
            "",
            three / one
        );
        println!(
            "  ({n} invitations x 3 recipients, each message rendered, 1 poller at the template's defaults \
             {}; in fr, ja-JP and en-US, beside the same drain with nobody naming a language; best of {} rounds each, interleaved)",
            production.label(),
            env_usize("BENCH_LANGUAGE_ROUNDS", 2)
        );
        record("project.languages.one", one);
        record("project.languages.three", three);
        record("project.languages.ratio", three / one);
        if only_languages {
            return;
        }
    }
    for (shape, key) in if only_api || only_reminders { &[][..] } else { &shapes[..] } {
        let (rate, drain, base, work) = throughput(*shape, events, recipients).await;
        let what = format!(
            "notifications/s, {} poller(s), {}/{}/{}",
            shape.pollers, shape.batch, shape.group, shape.in_flight
        );
        println!("{what:<34} {rate:>12.0}/s {drain:>7.1}s {base:>16.0}/s {:>8.2}", rate / base);
        if let Some(w) = work {
            println!(
                "  (per notification: {:.3} statements, {:.2} WAL records, {:.0} WAL bytes)",
                w.statements, w.wal_records, w.wal_bytes
            );
            w.record(key);
        }
        record(key, rate);
        record(&format!("{key}.drain_s"), drain);
        record(&format!("baseline.insert{}", shape.pollers), base);
    }
    if only_throughput {
        return;
    }
    // Reminders are written long before they are due: the claim of due
    // events must not slow down with a million of them waiting.
    if !only_api {
        let future = env_usize("BENCH_FUTURE_REMINDERS", 1_000_000);
        let shape = Shape { pollers: 1, batch, group, in_flight };
        let (without, with) = with_future_reminders(shape, events, recipients, future).await;
        println!("{:<34} {with:>12.0}/s {:>8} {without:>16.0}/s {:>8.2}", "with future reminders", "", with / without);
        println!(
            "  ({future} reminders due from tomorrow in the table; the baseline column is the same drain without)"
        );
        record("project.future_reminders.without", without);
        record("project.future_reminders.with", with);
        record("project.future_reminders.ratio", with / without);
        if only_reminders {
            return;
        }
    }
    let bookings = env_usize("BENCH_LATENCY_BOOKINGS", 200);
    for listen in if only_api { &[][..] } else { &[false, true][..] } {
        let listen = *listen;
        let (p50, p99, base) = latency(bookings, 20, listen).await;
        let how = if listen { "LISTEN/NOTIFY" } else { "timed polls, idle wait 200ms" };
        println!("{:<34} {:>12.1}ms {:>18.0}/s", format!("commit-to-send p50 ({how})"), ms(p50), base);
        println!("{:<34} {:>12.1}ms", format!("commit-to-send p99 ({how})"), ms(p99));
        let key = if listen { "project.latency" } else { "project.latency_timed" };
        record(&format!("{key}.p50_ms"), ms(p50));
        record(&format!("{key}.p99_ms"), ms(p99));
    }
    let (rate, p99) = api_write(8, env_usize("BENCH_API_SECS", 10) as u64).await;
    println!("{:<34} {:>12.0}/s", "POST /bookings, 8 clients", rate);
    println!("{:<34} {:>12.1}ms", "POST /bookings p99", ms(p99));
    record("project.api_write.c8", rate);
    record("project.api_write.p99_ms", ms(p99));
}
