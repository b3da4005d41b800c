//! The outbox when vacuum cannot keep up (`BENCH_ONLY=stress
//! ./scripts/bench.sh`; part of `make bench`): one poller at the production
//! defaults drains BENCH_STRESS_EVENTS (default 20,000) events × 3
//! recipients
//!
//! - on a fresh database;
//! - after BENCH_STRESS_HISTORY (default 1,000,000) events × 3 worked
//!   through by the poller, then vacuumed: the history retention keeps for
//!   a while;
//! - while a REPEATABLE READ snapshot is held open in the same database
//!   (a report, `pg_dump`, a session idle in transaction) from before
//!   BENCH_STRESS_CHURN (default 200,000) events × 3 are worked through by
//!   the poller until the measured drain ends: vacuum can remove none of
//!   the row versions the churn and the measure leave behind.
//!
//! `scripts/bench.sh` runs graphile-worker under the same stress in the same
//! run (`node bench/peers/perf.js stress`). With BENCH_STATEMENTS=1 and a
//! cluster that preloads pg_stat_statements (bench.sh's does), each measured
//! drain also prints what each statement cost per call: time, and the
//! buffers it touched; and the claim's EXPLAIN (ANALYZE, BUFFERS) before the
//! drain.

use std::time::Instant;

use outbox_tests::bench::{drain, env_usize, record, Shape};
use outbox_tests::outbox::{newest_claimed, seed_events};
use outbox_tests::TestDb;
use shared::outbox::events::claim::{CLAIM_DUE, CLAIM_DUE_AFTER};

const RECIPIENTS: usize = 3;

/// Seeds `events` × 3, vacuums, and drains them at the production
/// defaults; returns notifications/s.
async fn measure(db: &TestDb, label: &str, events: usize) -> f64 {
    seed_events(&db.pool, events, RECIPIENTS).await;
    db.pool.get().await.unwrap().batch_execute("VACUUM ANALYZE").await.unwrap();
    let profile = Profile::start(db, label).await;
    let secs = drain(db, Shape::production(), events * RECIPIENTS).await;
    if let Some(profile) = profile {
        profile.print(db).await;
    }
    (events * RECIPIENTS) as f64 / secs
}

/// Per-statement costs of one drain, from pg_stat_statements
/// (BENCH_STATEMENTS=1, when the cluster preloads it).
struct Profile {
    label: String,
}

impl Profile {
    async fn start(db: &TestDb, label: &str) -> Option<Self> {
        if std::env::var("BENCH_STATEMENTS").as_deref() != Ok("1") {
            return None;
        }
        let client = db.pool.get().await.unwrap();
        if let Err(e) = client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await {
            eprintln!("BENCH_STATEMENTS: {e} (the cluster must preload pg_stat_statements)");
            return None;
        }
        // The claim's plans with due events waiting, rolled back: from the
        // start of the due index (a full pass), and from after the newest
        // event already claimed (where a poller's claims start).
        let mut plans = vec![("from the start", CLAIM_DUE.to_string())];
        if let Some((at, id)) = newest_claimed(&client).await {
            let sql = CLAIM_DUE_AFTER
                .replace("$5", &format!("'{}'::timestamptz", at.to_rfc3339()))
                .replace("$6", &format!("'{id}'::uuid"));
            plans.push(("from after the newest claimed event", sql));
        }
        for (from, sql) in plans {
            let sql = sql
                .replace("$1", "32")
                .replace("$2", "'explain'")
                .replace("$3", &format!("'{}'::uuid", uuid::Uuid::nil()))
                .replace("$4", "8");
            client.batch_execute("BEGIN").await.unwrap();
            let plan = client.query(&format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}"), &[]).await;
            client.batch_execute("ROLLBACK").await.unwrap();
            println!("\n-- {label}: the claim of 32 events {from}, EXPLAIN (ANALYZE, BUFFERS)");
            match plan {
                Ok(rows) => rows.iter().for_each(|r| println!("   {}", r.get::<_, String>(0))),
                Err(e) => println!("   {e}"),
            }
        }
        if client.query_opt("SELECT pg_stat_statements_reset()", &[]).await.is_err() {
            return None;
        }
        Some(Self { label: label.to_string() })
    }

    async fn print(self, db: &TestDb) {
        let client = db.pool.get().await.unwrap();
        let rows = client
            .query(
                "SELECT calls, total_exec_time, mean_exec_time, \
                        (shared_blks_hit + shared_blks_read)::float8 / calls AS blocks, \
                        shared_blks_read::float8 / calls, shared_blks_dirtied::float8 / calls, \
                        shared_blks_written::float8 / calls, \
                        regexp_replace(left(query, 110), '\\s+', ' ', 'g') AS query \
                   FROM pg_stat_statements \
                  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                    AND query !~* 'pg_stat_statements|^(BEGIN|COMMIT|ROLLBACK)' AND calls > 0 \
                  ORDER BY total_exec_time DESC LIMIT 12",
                &[],
            )
            .await
            .unwrap();
        println!("-- {}: statements by total time in the drain", self.label);
        println!(
            "   {:>7} {:>10} {:>9} {:>9} {:>7} {:>7} {:>7}  statement (pages per call: touched, read, dirtied, written)",
            "calls", "total ms", "mean ms", "pages", "read", "dirtied", "written"
        );
        for r in rows {
            println!(
                "   {:>7} {:>10.1} {:>9.3} {:>9.1} {:>7.1} {:>7.1} {:>7.1}  {}",
                r.get::<_, i64>(0),
                r.get::<_, f64>(1),
                r.get::<_, f64>(2),
                r.get::<_, f64>(3),
                r.get::<_, f64>(4),
                r.get::<_, f64>(5),
                r.get::<_, f64>(6),
                r.get::<_, String>(7)
            );
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes harness=false benches
    }
    let events = env_usize("BENCH_STRESS_EVENTS", 20_000);
    let history = env_usize("BENCH_STRESS_HISTORY", 1_000_000);
    let churn = env_usize("BENCH_STRESS_CHURN", 200_000);
    let shape = Shape::production();
    println!(
        "stress benchmark: 1 poller at the production defaults ({}), instant mailer; {events} events x \
         {RECIPIENTS} recipients measured fresh, after {history} finished events, and under a snapshot held \
         while {churn} events x {RECIPIENTS} are churned",
        shape.label()
    );

    let fresh = {
        let db = TestDb::create().await;
        measure(&db, "fresh", events).await
    };
    println!("{:<44} {:>10.0}/s", "fresh", fresh);
    record("project.stress.fresh", fresh);

    let after_history = {
        // Worked through by the real poller, as fast as it goes (256/256,
        // 4 in flight): the sends' pages end as outcomes and pruning leave
        // them, which a history written in SQL would not reproduce.
        let db = TestDb::create().await;
        let started = Instant::now();
        seed_events(&db.pool, history, RECIPIENTS).await;
        let fast = Shape { pollers: 1, batch: 256, group: 256, in_flight: 4 };
        drain(&db, fast, history * RECIPIENTS).await;
        eprintln!("history of {history} events worked through in {:.1}s", started.elapsed().as_secs_f64());
        measure(&db, "after history", events).await
    };
    println!(
        "{:<44} {:>10.0}/s {:>6.2}x fresh",
        format!("after {history} finished events"),
        after_history,
        after_history / fresh
    );
    record("project.stress.history", after_history);
    record("project.stress.history_events", history as f64);

    let (churned, held) = {
        let db = TestDb::create().await;
        // The snapshot: a REPEATABLE READ transaction that has read once,
        // held on its own connection until the measure ends.
        let (holder, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
        let conn = tokio::spawn(connection);
        holder
            .batch_execute(
                "SET application_name = 'bench-held-snapshot'; BEGIN ISOLATION LEVEL REPEATABLE READ; \
                 SELECT count(*) FROM outbox_events",
            )
            .await
            .unwrap();
        seed_events(&db.pool, churn, RECIPIENTS).await;
        let secs = drain(&db, shape, churn * RECIPIENTS).await;
        let churned = (churn * RECIPIENTS) as f64 / secs;
        let held = measure(&db, "snapshot held", events).await;
        holder.batch_execute("ROLLBACK").await.unwrap();
        drop(holder);
        conn.await.unwrap().unwrap();
        (churned, held)
    };
    println!("{:<44} {:>10.0}/s", format!("churning {churn} events, snapshot held"), churned);
    println!("{:<44} {:>10.0}/s {:>6.2}x fresh", "then, snapshot still held", held, held / fresh);
    record("project.stress.held_churn", churned);
    record("project.stress.held", held);
    record("project.stress.churn_events", churn as f64);
}
