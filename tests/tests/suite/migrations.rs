//! The migrate command: history table, idempotent re-runs, and an advisory
//! lock so concurrent runs do not race.

use outbox_tests::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_apply_once_under_the_advisory_lock() {
    let db = TestDb::create_unmigrated().await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let pool = db.pool.clone();
            tokio::spawn(async move { shared::db::migrate(&pool).await })
        })
        .collect();
    let mut applied = Vec::new();
    for r in runs {
        applied.extend(r.await.unwrap().expect("every concurrent run succeeds"));
    }
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations")).unwrap().count();
    assert!(files >= 3);
    assert_eq!(applied.len(), files, "exactly one run applied each migration once: {applied:?}");
    assert_eq!(db.count("refinery_schema_history").await, files as i64);
    assert!(shared::db::migrate(&db.pool).await.unwrap().is_empty(), "a re-run applies nothing");
    let locks: i64 = db.scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").await;
    assert_eq!(locks, 0, "the lock is released");
}
