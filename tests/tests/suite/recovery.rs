//! A poller whose database connections are cut mid-batch recovers in
//! place: it records the outcomes it has on fresh connections and processes
//! the batch again itself, so its events finish within moments of the
//! reconnect, not after the sweeper's stuck timeout, and nothing is sent
//! twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::{event_counts, seed_events, send_counts, EventStatus, SendStatus};
use outbox_tests::TestDb;
use shared::db::DbConfig;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::relay::{Poller, PollerConfig};

const APP: &str = "recovery-poller";

/// Terminates every backend of the poller's pool (its `application_name`),
/// as an operator's `pg_terminate_backend` or a failover would.
async fn terminate_the_pollers_backends(db: &TestDb) -> i64 {
    db.pool
        .get()
        .await
        .unwrap()
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = $1) t",
            &[&APP],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn killed_connections_mid_batch_are_recovered_in_place_with_no_duplicate() {
    let db = TestDb::create().await;
    seed_events(&db.pool, 20, 2).await;
    let mut cfg = DbConfig::from_url(&db.url, 8, Duration::from_secs(5)).unwrap();
    cfg.pg.application_name(APP);
    let mailer = Arc::new(RecordingMailer::new().with_delay(Duration::from_millis(300)));
    let mut config = PollerConfig::for_tests("recovery");
    config.batch_size = 10;
    let poller = Poller::new(cfg.build_pool().unwrap(), mailer.clone(), Faults::none(), config);
    let started = Instant::now();
    let run = tokio::spawn(async move { poller.drain().await });
    // Mid-batch: the batches' transactions are open and their sends in flight.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let killed = terminate_the_pollers_backends(&db).await;
    assert!(killed >= 2, "the batches' connections were cut: {killed}");
    let summary = run.await.unwrap().expect("the run goes on after the reconnect");
    let took = started.elapsed();
    println!("killed {killed} backends; recovered {} batch(es) in place; drained in {took:?}", summary.recovered);

    assert!(summary.recovered >= 1, "a batch failed and was processed again in place: {summary:?}");
    assert_eq!(summary.errors, 0, "nothing left for the sweeper: {summary:?}");
    let events = event_counts(&db).await;
    assert_eq!((events[&EventStatus::Done], events[&EventStatus::Processing]), (20, 0), "{events:?}");
    let sends = send_counts(&db).await;
    assert_eq!((sends[&SendStatus::Sent], sends[&SendStatus::Unknown]), (40, 0), "every outcome recorded: {sends:?}");
    let deliveries = mailer.deliveries();
    let distinct: HashSet<_> = deliveries.iter().map(|d| (d.event_id, d.recipient.clone())).collect();
    assert_eq!((deliveries.len(), distinct.len()), (40, 40), "each recipient mailed exactly once");
    // Moments after the reconnect, not the sweeper's stuck timeout (300 s).
    assert!(took < Duration::from_secs(15), "drained in {took:?}");
}

/// The group's claim statement committed, then the next statement of the
/// same step failed on the database (here: the suppression list is briefly
/// missing). Nothing of the group was sent, so the poller releases the
/// claims it made itself and its in-place retry sends them; before, the
/// retry found them CLAIMED and marked them UNKNOWN, and those emails were
/// lost though nobody had sent them.
#[tokio::test]
async fn a_group_claimed_before_a_database_error_is_released_and_sent_by_the_retry() {
    let db = TestDb::create().await;
    seed_events(&db.pool, 6, 2).await;
    let admin = db.pool.get().await.unwrap();
    admin.batch_execute("ALTER TABLE suppressed_addresses RENAME TO suppressed_addresses_away").await.unwrap();
    let mailer = Arc::new(RecordingMailer::new());
    let poller = Poller::new(db.pool.clone(), mailer.clone(), Faults::none(), PollerConfig::for_tests("release"));
    let run = tokio::spawn(async move { poller.drain().await });
    // The first attempt claims and fails; the retries come 100 ms and
    // 600 ms after it (BATCH_RETRIES): the table is back for the second.
    tokio::time::sleep(Duration::from_millis(300)).await;
    admin.batch_execute("ALTER TABLE suppressed_addresses_away RENAME TO suppressed_addresses").await.unwrap();
    let summary = run.await.unwrap().expect("the run goes on after the retry");

    assert!(summary.recovered >= 1, "the batch failed and was processed again in place: {summary:?}");
    let events = event_counts(&db).await;
    assert_eq!((events[&EventStatus::Done], events[&EventStatus::Processing]), (6, 0), "{events:?}");
    let sends = send_counts(&db).await;
    assert_eq!(
        (sends[&SendStatus::Sent], sends.get(&SendStatus::Unknown).copied().unwrap_or(0)),
        (12, 0),
        "every claim was released and sent, none left UNKNOWN: {sends:?}"
    );
    let deliveries = mailer.deliveries();
    let distinct: HashSet<_> = deliveries.iter().map(|d| (d.event_id, d.recipient.clone())).collect();
    assert_eq!((deliveries.len(), distinct.len()), (12, 12), "each recipient mailed exactly once");
}
