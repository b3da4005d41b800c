//! Seeing a held snapshot coming: while a session keeps an old snapshot,
//! vacuum cannot remove the row versions the outbox leaves behind. The
//! sweeper reports its age (`OldestXminAgeSeconds`) and `outboxctl status`
//! names it, both as the functions' role, which holds no monitoring
//! privilege.

use std::time::Duration;

use outbox_tests::ctl::ctl;
use outbox_tests::outbox::sweeper_config;
use outbox_tests::TestDb;
use shared::relay::{status, sweeper};

fn metric(run: &shared::relay::SweepRun, name: &str) -> f64 {
    run.metrics().iter().find(|(n, _, _)| *n == name).unwrap_or_else(|| panic!("no metric {name}")).1
}

#[tokio::test]
async fn a_held_snapshot_raises_the_oldest_xmin_metric_and_status_names_its_session() {
    let db = TestDb::create().await;
    let app = db.role_pool("outbox_sweeper").await;
    let config = sweeper_config(8);
    let before = sweeper::run(&app, &config).await.unwrap();
    assert!(metric(&before, "OldestXminAgeSeconds") < 1.0, "nothing held yet: {:?}", before.vacuum_horizon);

    let (report, pid) = db.held_snapshot("nightly-report").await;
    // Transactions go on beside it; the snapshot falls behind them.
    for _ in 0..5 {
        db.pool.get().await.unwrap().batch_execute("SELECT txid_current()").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let first = sweeper::run(&app, &config).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let second = sweeper::run(&app, &config).await.unwrap();
    let (a, b) = (metric(&first, "OldestXminAgeSeconds"), metric(&second, "OldestXminAgeSeconds"));
    assert!(a >= 1.0 && b >= a + 0.9, "the metric rises while the snapshot is held: {a} then {b}");
    assert!(metric(&second, "OldestXminAgeTransactions") >= 5.0, "{:?}", second.vacuum_horizon);
    let holder = second.vacuum_horizon.holder.clone().expect("a holder");
    assert_eq!(
        (holder.kind.as_str(), holder.pid, holder.name.as_deref()),
        ("session", Some(pid), Some("nightly-report"))
    );
    assert_eq!(holder.state.as_deref(), Some("idle in transaction"));

    // The operator's view names it too, as the app role.
    let s = status::fetch(&app.get().await.unwrap(), &config).await.unwrap();
    assert_eq!(s.vacuum_horizon.holder.as_ref().and_then(|h| h.pid), Some(pid));
    let out = ctl(&db, &["status"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("session \"nightly-report\" pid {pid} (idle in transaction)")),
        "outboxctl status names the session: {}",
        out.stdout
    );

    // Once it ends, the horizon moves on.
    report.batch_execute("COMMIT").await.unwrap();
    let after = sweeper::run(&app, &config).await.unwrap();
    assert!(metric(&after, "OldestXminAgeSeconds") < 1.0, "{:?}", after.vacuum_horizon);
}
