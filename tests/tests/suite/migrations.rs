//! The migrate command (history table, idempotent re-runs, an advisory
//! lock so concurrent runs do not race), and what the schema promises the
//! hot path.

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
    let locks: i64 = db
        .scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .await;
    assert_eq!(locks, 0, "the lock is released");
}

/// A SENT outcome must stay a HOT update (no new index entry, its old
/// version pruned in the page): no index of the sends table may read a
/// column it writes, in its keys, its expressions or its predicate, and the
/// table's pages keep room for the outcomes.
#[tokio::test]
async fn a_send_outcome_writes_no_indexed_column() {
    let db = TestDb::create().await;
    let indexed: Vec<String> = db
        .pool
        .get()
        .await
        .unwrap()
        .query(
            "SELECT DISTINCT i.indexrelid::regclass::text || '.' || a.attname \
               FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum > 0 \
              WHERE i.indrelid = 'booking_notification_sends'::regclass \
                AND (a.attnum = ANY (i.indkey) \
                     OR coalesce(pg_get_expr(i.indpred, i.indrelid), '') ~ ('\\m' || a.attname || '\\M') \
                     OR coalesce(pg_get_expr(i.indexprs, i.indrelid), '') ~ ('\\m' || a.attname || '\\M'))",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(indexed.iter().any(|c| c.ends_with(".claimed_at")), "the query reads the indexes: {indexed:?}");
    for written in ["status", "provider_message_id", "completed_at", "updated_at"] {
        let hit: Vec<_> = indexed.iter().filter(|c| c.ends_with(&format!(".{written}"))).collect();
        assert!(hit.is_empty(), "an outcome writes {written}, which {hit:?} reads: outcomes are no longer HOT");
    }
    let options: Option<Vec<String>> =
        db.scalar("SELECT reloptions FROM pg_class WHERE oid = 'booking_notification_sends'::regclass").await;
    assert_eq!(options, Some(vec!["fillfactor=50".to_string()]), "pages keep room for the outcomes");
}

/// Each index of the delivery path's tables costs every claim (and every
/// non-HOT transition) a write: these are the ones something reads. A new
/// index here is a cost on every event and every send; add it to this list
/// with what reads it.
#[tokio::test]
async fn the_delivery_path_writes_only_the_indexes_something_reads() {
    let db = TestDb::create().await;
    let client = db.pool.get().await.unwrap();
    let indexes = |table: &'static str| {
        let client = &client;
        async move {
            let rows = client
                .query(
                    "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::text::regclass ORDER BY 1",
                    &[&table],
                )
                .await
                .unwrap();
            rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        indexes("outbox_events").await,
        [
            "outbox_events_dead",            // outboxctl's dead letters
            "outbox_events_done",            // retention
            "outbox_events_due",             // the claim
            "outbox_events_lanes", // retention keeps an aggregate's events while its lanes run; a booking's reminders (only events in a lane have an entry)
            "outbox_events_one_per_version", // uniqueness; the claim's ordering probe; a booking's events
            "outbox_events_pkey",  // every transition by id
            "outbox_events_processing", // the stuck-row sweep
            "outbox_events_turns", // the claim's share of each due turn
        ]
    );
    assert_eq!(
        indexes("booking_notification_sends").await,
        [
            // the sends SES's own events confirmed (outboxctl status, the console's overview); written only by
            // a confirmation, which sets confirmed_by: no claim and no outcome writes it
            "booking_notification_sends_confirmed",
            "booking_notification_sends_one_per_recipient", // the claim's conflict; an event's sends
            "booking_notification_sends_pkey",              // outcomes by id; retention (UUIDv7 ids)
            "booking_notification_sends_with_error",        // unconfirmed UNKNOWN sends
        ]
    );
}
