//! What the benchmarks (`tests/benches/`) share: the shape of a drain, a
//! drain by pollers built as the poller Lambda builds them, what a drain
//! cost the database (statements, WAL), and the results file
//! `scripts/bench.sh` prints its table from.

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

/// What the statements run in one database have cost so far, from
/// pg_stat_statements: statements, WAL records, WAL bytes. A statement's
/// WAL counts what it wrote itself, a function's statements and index
/// entries included; autovacuum and checkpoints are not counted (nor
/// are they for the peer). Counted as each statement ends, so a drain's
/// cost is the difference across it, exactly.
#[derive(Clone, Copy, Debug, Default)]
pub struct DbWork {
    pub statements: f64,
    pub wal_records: f64,
    pub wal_bytes: f64,
}

impl DbWork {
    /// None when the cluster does not preload pg_stat_statements (as
    /// `scripts/bench.sh`'s own cluster does unless BENCH_DURABLE=1).
    pub async fn so_far(db: &TestDb) -> Option<DbWork> {
        let client = db.pool.get().await.unwrap();
        client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await.ok()?;
        let row = client
            .query_one(
                "SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(wal_records), 0)::float8, \
                        coalesce(sum(wal_bytes), 0)::float8 \
                   FROM pg_stat_statements \
                  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND toplevel",
                &[],
            )
            .await
            .ok()?;
        Some(DbWork { statements: row.get(0), wal_records: row.get(1), wal_bytes: row.get(2) })
    }

    /// Each figure from `before` to `self`, per one of `units`.
    pub fn per(self, before: DbWork, units: usize) -> DbWork {
        let n = units as f64;
        DbWork {
            statements: (self.statements - before.statements) / n,
            wal_records: (self.wal_records - before.wal_records) / n,
            wal_bytes: (self.wal_bytes - before.wal_bytes) / n,
        }
    }

    /// Writes `{key}.statements_each`, `.wal_records_each` and
    /// `.wal_bytes_each` to the results file.
    pub fn record(self, key: &str) {
        record(&format!("{key}.statements_each"), self.statements);
        record(&format!("{key}.wal_records_each"), self.wal_records);
        record(&format!("{key}.wal_bytes_each"), self.wal_bytes);
    }
}

/// Each statement's cost so far (pg_stat_statements, this database), by
/// query id: `(the query's first words, WAL records, milliseconds run)`.
pub async fn work_by_statement(db: &TestDb) -> Option<std::collections::HashMap<i64, (String, f64, f64)>> {
    let client = db.pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT queryid, left(regexp_replace(query, '\\s+', ' ', 'g'), 80), wal_records::float8, total_exec_time \
               FROM pg_stat_statements \
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND toplevel",
            &[],
        )
        .await
        .ok()?;
    Some(rows.iter().map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3)))).collect())
}

/// Prints where a drain's WAL records and database time went, per one of
/// `units`, by statement, the most WAL first (statements of under 0.05
/// records and 1 µs a unit together).
pub fn print_work_breakdown(
    before: &std::collections::HashMap<i64, (String, f64, f64)>,
    after: &std::collections::HashMap<i64, (String, f64, f64)>,
    units: usize,
) {
    let n = units as f64;
    let mut rows: Vec<(f64, f64, &str)> = after
        .iter()
        .map(|(id, (query, wal, ms))| {
            let (wal0, ms0) = before.get(id).map_or((0.0, 0.0), |b| (b.1, b.2));
            ((wal - wal0) / n, (ms - ms0) * 1000.0 / n, query.as_str())
        })
        .filter(|(wal, us, _)| *wal > 0.0 || *us > 0.0)
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
    let (wal, us): (f64, f64) = rows.iter().fold((0.0, 0.0), |t, r| (t.0 + r.0, t.1 + r.1));
    println!("    per notification, by statement: WAL records ({wal:.2} in all), µs run ({us:.1} in all)");
    let (mut rest_wal, mut rest_us) = (0.0, 0.0);
    for (w, u, query) in rows {
        if w < 0.05 && u < 1.0 {
            (rest_wal, rest_us) = (rest_wal + w, rest_us + u);
        } else {
            println!("      {w:>6.2} {u:>7.1}  {query}");
        }
    }
    println!("      {rest_wal:>6.2} {rest_us:>7.1}  (the others)");
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
    writeln!(file, "{key}\t{value:.3}").expect("BENCH_RESULTS is writable");
}
