//! What the benchmarks (`tests/benches/`) share: the shape of a drain, a
//! drain by pollers built as the poller Lambda builds them, and the
//! results file `scripts/bench.sh` prints its table from.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::db::DbConfig;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::relay::{Poller, PollerConfig};

use crate::TestDb;

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The drain's shape: pollers, events claimed per poll, sends per claim
/// group, batches each poller has in flight.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub pollers: usize,
    pub batch: usize,
    pub group: usize,
    pub in_flight: usize,
}

impl Shape {
    /// The poller Lambda's defaults (the settings' own).
    pub fn production() -> Self {
        use shared::config::settings as S;
        Shape {
            pollers: 1,
            batch: S::POLLER_BATCH_SIZE.default_value(),
            group: S::POLLER_CLAIM_GROUP.default_value(),
            in_flight: S::POLLER_BATCHES_IN_FLIGHT.default_value(),
        }
    }

    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.batch, self.group, self.in_flight)
    }
}

/// Drains what is due in `db` with `shape.pollers` pollers and an instant
/// mailer, each poller's pool built as the poller Lambda builds it. Returns
/// the drain's seconds; fails unless exactly `expected` notifications were
/// sent.
pub async fn drain(db: &TestDb, shape: Shape, expected: usize) -> f64 {
    drain_through(db, shape, expected, Arc::new(RecordingMailer::new())).await
}

/// As [`drain`], through `mailer`.
pub async fn drain_through(db: &TestDb, shape: Shape, expected: usize, mailer: Arc<RecordingMailer>) -> f64 {
    let Shape { pollers, batch, group, in_flight } = shape;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..pollers {
        let size = PollerConfig::min_pool_size(in_flight);
        let pool = DbConfig::from_url(&db.url, size, Duration::from_secs(5))
            .unwrap()
            .with_custom_plans()
            .build_pool()
            .unwrap();
        let mut config = PollerConfig::for_tests(&format!("bench-{i}"));
        config.batch_size = batch as i64;
        config.claim_group = group;
        config.batches_in_flight = in_flight;
        // The poller's own ceiling on sends in flight (the template's).
        config.concurrency = shared::config::settings::POLLER_CONCURRENCY.default_value();
        let p = Poller::new(pool, mailer.clone(), Faults::none(), config);
        tasks.push(tokio::spawn(async move { p.drain().await.unwrap() }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(mailer.count(), expected, "every notification sent exactly once");
    elapsed
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Appends `key<TAB>value` to `$BENCH_RESULTS` (when set), for
/// `scripts/bench.sh`'s table beside the peers measured in the same run.
pub fn record(key: &str, value: f64) {
    use std::io::Write;
    let Ok(path) = std::env::var("BENCH_RESULTS") else { return };
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("BENCH_RESULTS is writable");
    writeln!(file, "{key}\t{value:.2}").expect("BENCH_RESULTS is writable");
}
