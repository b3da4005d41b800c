//! Test harness: a fresh database per test on a real Postgres server, and a
//! client that drives the booking API through real API Gateway v2 events.
//!
//! `DATABASE_URL` names a server where the harness may create databases;
//! `scripts/test.sh` starts a throwaway cluster and sets it.

pub mod api;
pub mod bench;
pub mod console;
pub mod ctl;
pub mod http;
pub mod listing;
pub mod mail_samples;
pub mod outbox;
pub mod publisher;
pub mod ses;
pub mod ses_events;
pub mod ses_standin;
pub mod smtp;
pub mod spans;

use std::ffi::OsStr;
use std::time::Duration;

use deadpool_postgres::Pool;
use shared::db::DbConfig;
use tokio_postgres::NoTls;

/// Messages as Python's `email` and `icalendar` read them, one JSON value
/// each (tests/tools/inspect_mail.py, run with `args`: moto's endpoint and
/// a sender, or `--mailbox FILE`): packages that share no code with the
/// builder.
pub fn inspect_mail<A: AsRef<OsStr>>(args: &[A]) -> Vec<serde_json::Value> {
    let python = std::env::var("OUTBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/inspect_mail.py");
    let out = std::process::Command::new(python).arg(script).args(args).output().expect("run python");
    assert!(out.status.success(), "inspect_mail.py failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A small reproducible random generator (xorshift64) for fault runs and
/// soaks: they print the seed, so a failing run can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// Seeded from the clock; returns the seed too.
    pub fn from_clock() -> (Self, u64) {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
        (Self::new(seed), seed)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A database created for one test and dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
    pub pool: Pool,
    admin_url: String,
}

fn admin_url() -> String {
    std::env::var("DATABASE_URL")
        .expect("DATABASE_URL is not set: run the tests with ./scripts/test.sh, which starts a throwaway Postgres")
}

/// Replaces the database name of a postgres:// URL.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

async fn admin_exec(admin_url: &str, sql: &str) {
    let (client, conn) = tokio_postgres::connect(admin_url, NoTls).await.expect("connect to DATABASE_URL");
    let task = tokio::spawn(conn);
    client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    drop(client);
    let _ = task.await;
}

impl TestDb {
    /// Creates an empty, migrated database.
    pub async fn create() -> Self {
        let db = Self::create_unmigrated().await;
        shared::db::migrate(&db.pool).await.expect("migrations apply");
        db
    }

    pub async fn create_unmigrated() -> Self {
        let admin_url = admin_url();
        let name = format!("outbox_test_{}", uuid::Uuid::new_v4().simple());
        admin_exec(&admin_url, &format!("CREATE DATABASE {name}")).await;
        let url = with_database(&admin_url, &name);
        let pool = Self::pool_for(&url, 16);
        Self { name, url, pool, admin_url }
    }

    /// A pool of a fresh login role that is a member of `outbox_operator`,
    /// the operators' role (outboxctl, the operator function), not the
    /// schema owner.
    pub async fn operator_pool(&self) -> Pool {
        self.role_pool("outbox_operator").await
    }

    /// A pool of a fresh login role that is a member of `role` (a
    /// function's own: `booking_api`, `outbox_poller`, `outbox_sweeper`,
    /// `ses_events`), as that function connects in production.
    pub async fn role_pool(&self, role: &str) -> Pool {
        let login = self.login_in(role).await;
        let mut cfg = DbConfig::from_url(&self.url, 16, Duration::from_secs(5)).unwrap();
        cfg.pg.user(&login);
        cfg.build_pool().unwrap()
    }

    /// A URL of this database that logs in as a fresh login in `role`
    /// (for a process: outboxctl as an operator runs it).
    pub async fn role_url(&self, role: &str) -> String {
        let login = self.login_in(role).await;
        let scheme_end = self.url.find("://").map(|i| i + 3).expect("a postgres:// URL");
        let rest = &self.url[scheme_end..];
        let host = rest
            .find('@')
            .filter(|at| rest.find('/').is_none_or(|slash| at < &slash))
            .map_or(rest, |at| &rest[at + 1..]);
        format!("{}{login}@{host}", &self.url[..scheme_end])
    }

    async fn login_in(&self, role: &str) -> String {
        let login = format!("app_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let admin = self.pool.get().await.unwrap();
        admin.batch_execute(&format!("CREATE ROLE {login} LOGIN IN ROLE {role}")).await.unwrap();
        login
    }

    pub fn pool_for(url: &str, size: usize) -> Pool {
        DbConfig::from_url(url, size, Duration::from_secs(5)).unwrap().build_pool().unwrap()
    }

    /// One value from a query (`SELECT count(*) ...`).
    pub async fn scalar<T>(&self, sql: &str) -> T
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        let client = self.pool.get().await.unwrap();
        client.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
    }

    /// A report left open in the middle of its work: a REPEATABLE READ
    /// transaction that read something, then went idle, holding back
    /// vacuum in this database until the client is dropped. Returns its
    /// client and backend pid.
    pub async fn held_snapshot(&self, name: &str) -> (tokio_postgres::Client, i32) {
        let (client, conn) =
            tokio_postgres::connect(&format!("{}?application_name={name}", self.url), NoTls).await.unwrap();
        tokio::spawn(conn);
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox_events")
            .await
            .unwrap();
        let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
        (client, pid)
    }

    pub async fn count(&self, table: &str) -> i64 {
        self.scalar(&format!("SELECT count(*) FROM {table}")).await
    }

    /// Row counts of every table a request could write to.
    pub async fn written_rows(&self) -> i64 {
        self.scalar(
            "SELECT (SELECT count(*) FROM bookings) + (SELECT count(*) FROM outbox_events) \
                  + (SELECT count(*) FROM idempotency_keys)",
        )
        .await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        self.pool.close();
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop runs inside the test's runtime; use a thread with its own.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(admin_exec(&admin_url, &sql))
        })
        .join();
    }
}

/// Polls `done` every 100 ms until it holds (true), or `limit` (false).
pub async fn wait_until(limit: std::time::Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if done().await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_database_in_urls() {
        use super::with_database;
        assert_eq!(with_database("postgres://u@h:1/postgres", "x"), "postgres://u@h:1/x");
        assert_eq!(with_database("postgres://u@h:1", "x"), "postgres://u@h:1/x");
        assert_eq!(with_database("postgres://u@h:1/p?sslmode=disable", "x"), "postgres://u@h:1/x?sslmode=disable");
    }
}
