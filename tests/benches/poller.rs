//! Poller benchmark (`./scripts/bench.sh`): notifications per second with an
//! instant mailer for 1 and 4 pollers, and commit-to-send latency, each next
//! to a plain insert-and-commit baseline measured in the same run against
//! the same database. Machines here are noisy; the ratios are what to read.
//!
//! Sizes: BENCH_EVENTS (default 10000) events × BENCH_RECIPIENTS (default 3);
//! BENCH_BATCH events claimed per poll (default 64); POLLER_CLAIM_GROUP
//! sends claimed per statement (default 64).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::{create_booking_at, seed_events};
use outbox_tests::TestDb;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::db::DbConfig;
use shared::relay::{Poller, PollerConfig, Wake};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

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

async fn throughput(pollers: usize, events: usize, recipients: usize) -> (f64, f64) {
    let db = TestDb::create().await;
    let base = baseline(&db, 5000, pollers).await;
    seed_events(&db.pool, events, recipients).await;
    let client = db.pool.get().await.unwrap();
    client.batch_execute("VACUUM ANALYZE outbox_events").await.unwrap();
    let mailer = Arc::new(RecordingMailer::new());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..pollers {
        let pool = TestDb::pool_for(&db.url, 9);
        let mut config = PollerConfig::for_tests(&format!("bench-{i}"));
        config.batch_size = env_usize("BENCH_BATCH", 64) as i64;
        config.concurrency = 4;
        let p = Poller::new(pool, mailer.clone(), Faults::none(), config);
        tasks.push(tokio::spawn(async move { p.drain().await.unwrap() }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(mailer.count(), events * recipients, "every notification sent exactly once");
    ((events * recipients) as f64 / elapsed, base)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
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
    let mut lat: Vec<Duration> = mailer
        .deliveries()
        .iter()
        .map(|d| d.at.saturating_duration_since(committed[&d.booking_id]))
        .collect();
    assert_eq!(lat.len(), bookings, "every booking's invite was sent");
    lat.sort();
    (percentile(&lat, 0.5), percentile(&lat, 0.99), base)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes harness=false benches
    }
    let events = env_usize("BENCH_EVENTS", 10_000);
    let recipients = env_usize("BENCH_RECIPIENTS", 3);
    println!("poller benchmark: {events} events x {recipients} recipients, instant mailer");
    println!("{:<34} {:>14} {:>18} {:>8}", "measure", "value", "baseline ins+commit/s", "ratio");
    for pollers in [1, 4] {
        let (rate, base) = throughput(pollers, events, recipients).await;
        println!(
            "{:<34} {:>12.0}/s {:>18.0}/s {:>8.2}",
            format!("notifications/s, {pollers} poller(s)"),
            rate,
            base,
            rate / base
        );
        record(&format!("project.poller{pollers}"), rate);
        record(&format!("baseline.insert{pollers}"), base);
    }
    let bookings = env_usize("BENCH_LATENCY_BOOKINGS", 200);
    for listen in [false, true] {
        let (p50, p99, base) = latency(bookings, 20, listen).await;
        let how = if listen { "LISTEN/NOTIFY" } else { "timed polls, idle wait 200ms" };
        println!("{:<34} {:>12.1}ms {:>18.0}/s", format!("commit-to-send p50 ({how})"), ms(p50), base);
        println!("{:<34} {:>12.1}ms", format!("commit-to-send p99 ({how})"), ms(p99));
        let key = if listen { "project.latency" } else { "project.latency_timed" };
        record(&format!("{key}.p50_ms"), ms(p50));
        record(&format!("{key}.p99_ms"), ms(p99));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Appends `key<TAB>value` to `$BENCH_RESULTS` (when set), for
/// `scripts/bench.sh`'s table beside the peers measured in the same run.
fn record(key: &str, value: f64) {
    use std::io::Write;
    let Ok(path) = std::env::var("BENCH_RESULTS") else { return };
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("BENCH_RESULTS is writable");
    writeln!(file, "{key}\t{value:.2}").expect("BENCH_RESULTS is writable");
}
