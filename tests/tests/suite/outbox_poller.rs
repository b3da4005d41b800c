//! The poller's behaviour beyond the crash scenarios: per-booking ordering,
//! deadlines, configuration checks, and an 8-poller soak.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::SENT;
use shared::outbox::events::status::sql::{DONE, PENDING, PROCESSING};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use shared::booking::events::EventType;
use shared::booking::limits::Limits;
use shared::booking::service::BookingService;
use shared::db::DbConfig;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::relay::{Poller, PollerConfig, Wake};

#[tokio::test]
async fn per_booking_ordering_cancel_never_overtakes_its_invitation_and_others_are_not_stalled() {
    let db = TestDb::create().await;
    let a = create_booking(&db, 1, &["alice@example.com"]).await;
    let b = create_booking(&db, 2, &["carol@example.com"]).await;
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::UNLIMITED);
    let organizer = organizer();
    service.cancel(&organizer, a.id, None).await.unwrap();
    service.cancel(&organizer, b.id, None).await.unwrap();

    let mailer = Arc::new(RecordingMailer::new());
    // Booking A's invitation keeps failing for a while.
    mailer.script("alice@example.com", SendOutcome::NotSent { reason: "Throttling".into() }, 2);
    // Ordering alone: superseding would (rightly) mail nobody about a
    // booking cancelled before its invitation went out.
    let mut config = PollerConfig::for_tests("w");
    config.skip_superseded = false;
    let p = poller(&db, mailer.clone(), config);

    p.poll_once().await.unwrap(); // A's confirm fails; B's confirm is sent
    p.poll_once().await.unwrap(); // A's confirm fails again; B's cancel is sent
    let sent: Vec<(String, EventType)> =
        mailer.deliveries().iter().map(|d| (d.recipient.clone(), d.event_type)).collect();
    assert_eq!(
        sent,
        vec![
            ("carol@example.com".into(), EventType::BookingConfirmed),
            ("carol@example.com".into(), EventType::BookingCancelled)
        ],
        "booking B went through both its events while A was stuck"
    );
    let a_events = events_of(&db, a.id).await;
    let a_cancel = a_events.iter().find(|e| e.event_type == "BOOKING_CANCELLED").unwrap();
    assert_eq!(a_cancel.status, EventStatus::Pending, "A's cancel waits behind its unfinished invitation");
    assert_eq!(a_cancel.attempts, 0, "and was never claimed");

    p.drain().await.unwrap();
    let alice: Vec<(EventType, i32)> = mailer
        .deliveries()
        .iter()
        .filter(|d| d.recipient == "alice@example.com")
        .map(|d| (d.event_type, d.sequence))
        .collect();
    assert_eq!(alice, vec![(EventType::BookingConfirmed, 1), (EventType::BookingCancelled, 2)]);
}

#[tokio::test]
async fn a_dead_event_does_not_block_later_events_of_its_booking_forever() {
    let db = TestDb::create().await;
    let a = create_booking(&db, 1, &["alice@example.com"]).await;
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::UNLIMITED);
    service.cancel(&organizer(), a.id, None).await.unwrap();
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("alice@example.com", refused(), 1);
    let mut config = one_attempt("w");
    config.skip_superseded = false; // the invitation must be tried, and die
    poller(&db, mailer.clone(), config).drain().await.unwrap();
    let statuses: Vec<String> = events_of(&db, a.id).await.iter().map(|e| e.status.to_string()).collect();
    assert_eq!(statuses, vec!["DEAD", "DONE"]);
}

#[tokio::test]
async fn poller_stops_claiming_when_less_than_the_safety_margin_remains() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &["alice@example.com"]).await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("w");
    config.safety_margin = Duration::from_secs(10);
    let p = poller(&db, mailer.clone(), config);
    // 5 s left, under the 10 s margin: nothing is claimed, and it returns at once.
    let started = Instant::now();
    let summary = p.run_until(Instant::now() + Duration::from_secs(5)).await.unwrap();
    assert_eq!(summary.claimed, 0);
    assert!(started.elapsed() < Duration::from_secs(1));
    // With time to spare it keeps polling until the margin, picking up new work.
    let summary = p.run_until(Instant::now() + Duration::from_millis(10_600)).await.unwrap();
    assert_eq!(summary.sent, 1);
    assert!(summary.batches > 3, "kept polling within the invocation: {summary:?}");
}

#[tokio::test]
async fn commit_to_send_latency_is_the_idle_wait_not_the_schedule() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("w");
    config.idle_wait = Duration::from_millis(200);
    let p = poller(&db, mailer.clone(), config);
    let run = tokio::spawn(async move { p.run_until(Instant::now() + Duration::from_secs(3)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let committed = Instant::now();
    create_booking(&db, 1, &["alice@example.com"]).await;
    run.await.unwrap();
    let delivered = mailer.deliveries()[0].at;
    assert!(delivered.duration_since(committed) < Duration::from_secs(2), "sent within the same invocation");
}

#[test]
fn pool_too_small_for_the_batches_in_flight_is_a_clear_config_error() {
    let mut config = PollerConfig::for_tests("w");
    // Each batch in flight holds two connections, whatever the claim group.
    config.claim_group = 1;
    config.batches_in_flight = 4;
    let err = config.validate(8).unwrap_err().to_string();
    assert!(err.contains("POLLER_BATCHES_IN_FLIGHT (4)") && err.contains("at least 10"), "{err}");
    config.claim_group = 64;
    let err = config.validate(8).unwrap_err().to_string();
    assert!(err.contains("POLLER_BATCHES_IN_FLIGHT (4)") && err.contains("at least 10"), "{err}");
    assert!(config.validate(10).is_ok());
}

fn listening(db: &TestDb, p: Poller) -> Poller {
    let connector = DbConfig::from_url(&db.url, 1, Duration::from_secs(5)).unwrap().connector().unwrap();
    p.with_wake(Wake::new(connector))
}

#[tokio::test]
async fn an_idle_poller_is_woken_by_the_commit_not_by_its_timer() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("w");
    // Far longer than the run: only the notification can bring the event in.
    config.idle_wait = Duration::from_secs(60);
    let p = listening(&db, poller(&db, mailer.clone(), config));
    let run = tokio::spawn(async move { p.run_until(Instant::now() + Duration::from_secs(3)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    create_booking(&db, 1, &["alice@example.com"]).await;
    let summary = run.await.unwrap();
    assert_eq!(mailer.count(), 1, "woken by the booking's commit: {summary:?}");
}

/// `what` (an aggregate) over this database's LISTEN connections.
async fn listeners(client: &shared::db::Client, what: &str) -> i64 {
    let sql =
        format!("SELECT {what} FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%'");
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_lost_notification_or_a_dropped_listen_connection_falls_back_to_timed_polls() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("w");
    config.idle_wait = Duration::from_millis(200);
    let p = listening(&db, poller(&db, mailer.clone(), config));
    let run = tokio::spawn(async move { p.run_until(Instant::now() + Duration::from_secs(4)).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The server drops the LISTEN connection, then an event commits with no
    // one listening: the timed poll still finds it.
    let client = db.pool.get().await.unwrap();
    let killed = listeners(&client, "count(pg_terminate_backend(pid))").await;
    assert_eq!(killed, 1, "the poller was listening");
    create_booking(&db, 1, &["alice@example.com"]).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(mailer.count(), 1, "sent by a timed poll");
    // And it listens again.
    assert_eq!(listeners(&client, "count(*)").await, 1, "the LISTEN connection was opened again");
    create_booking(&db, 2, &["carol@example.com"]).await;
    run.await.unwrap();
    assert_eq!(mailer.count(), 2);
}

#[test]
fn backoff_grows_exponentially_with_jitter_and_is_capped() {
    let mut config = PollerConfig::for_tests("w");
    config.backoff_base = Duration::from_secs(2);
    config.backoff_cap = Duration::from_secs(60);
    for attempt in 1..=10 {
        let d = config.backoff(attempt);
        let floor = Duration::from_secs(2u64 << (attempt - 1)).min(config.backoff_cap);
        assert!(d >= floor && d <= (floor * 2).min(config.backoff_cap), "attempt {attempt}: {d:?}");
    }
}

#[test]
fn sweeper_timeout_must_exceed_the_poller_timeout() {
    use shared::relay::RetentionConfig;
    use shared::relay::SweeperConfig;
    let err = SweeperConfig::new(Duration::from_secs(30), Duration::from_secs(60), 8, 100, RetentionConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("sweeper timeout (30s) must exceed the poller timeout (60s)"), "{err}");
    assert!(err.contains("SWEEP_STUCK_AFTER_SECS"));
}

#[tokio::test]
async fn retention_deletes_only_finished_rows_in_bounded_batches() {
    use shared::relay::{retention, RetentionConfig};
    let db = TestDb::create().await;
    for slot in 0..5 {
        create_booking(&db, slot, &["alice@example.com"]).await;
    }
    let mailer = Arc::new(RecordingMailer::new());
    poller(&db, mailer, PollerConfig::for_tests("w")).drain().await.unwrap();
    // One more event that is still pending retry, with an old SENT claim.
    let pending = create_booking(&db, 10, &["carol@example.com", "dave@example.com"]).await;
    let client = db.pool.get().await.unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO booking_notification_sends (id, outbox_event_id, booking_id, recipient_email, event_type, status, completed_at) \
             SELECT gen_random_uuid(), id, aggregate_id, 'carol@example.com', event_type, {SENT}, now() FROM outbox_events \
              WHERE aggregate_id = '{}'; \
             UPDATE outbox_events SET completed_at = now() - interval '30 days' WHERE status = {DONE}; \
             UPDATE processed_events SET processed_at = now() - interval '30 days'; \
             {AGE_SENDS_30_DAYS};",
            pending.id
        ))
        .await
        .unwrap();
    let cfg = RetentionConfig { batch_size: 2, max_batches: 2, ..RetentionConfig::default() };
    let first = retention::run(&client, &cfg).await.unwrap();
    assert_eq!((first.events, first.processed_events, first.sends), (4, 4, 4), "bounded: 2 batches of 2");
    let second = retention::run(&client, &cfg).await.unwrap();
    assert_eq!((second.events, second.processed_events, second.sends), (1, 1, 1));
    assert_eq!(db.count("outbox_events").await, 1, "the pending event stays");
    let kept: String = db.scalar("SELECT recipient_email FROM booking_notification_sends").await;
    assert_eq!(kept, "carol@example.com", "its SENT claim stays, or a retry would send it twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_eight_pollers_5000_events_3_recipients_each_delivered_exactly_once() {
    let db = TestDb::create().await;
    let events = seed_events(&db.pool, 5000, 3).await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut handles = Vec::new();
    for i in 0..8 {
        // Each poller has its own pool, like separate Lambda containers.
        let pool = TestDb::pool_for(&db.url, 6);
        let mut config = PollerConfig::for_tests(&format!("soak-{i}"));
        config.concurrency = 2;
        let p = shared::relay::Poller::new(pool, mailer.clone(), Faults::none(), config);
        handles.push(tokio::spawn(async move { p.drain().await.unwrap() }));
    }
    let mut per_worker = Vec::new();
    for h in handles {
        per_worker.push(h.await.unwrap().sent);
    }
    let mut counts: HashMap<(uuid::Uuid, String, EventType), u32> = HashMap::new();
    for d in mailer.deliveries() {
        *counts.entry((d.event_id, d.recipient, d.event_type)).or_default() += 1;
    }
    assert_eq!(counts.len(), 15_000, "every (event, recipient, type) delivered");
    assert!(counts.values().all(|&c| c == 1), "and none twice");
    assert_eq!(mailer.count(), 15_000);
    assert!(per_worker.iter().filter(|&&s| s > 0).count() >= 4, "the work was shared: {per_worker:?}");
    assert_eq!(event_counts(&db).await[&EventStatus::Done], events.len() as i64);
    assert_eq!(send_counts(&db).await[&SendStatus::Sent], 15_000);
}

#[tokio::test]
async fn sweeper_run_resets_and_dead_letters_stuck_rows_then_applies_retention() {
    use shared::relay::sweeper;
    let db = TestDb::create().await;
    for slot in 0..3 {
        create_booking(&db, slot, &["alice@example.com"]).await;
    }
    let client = db.pool.get().await.unwrap();
    // Two rows stuck in PROCESSING (one out of attempts), one long DONE.
    client
        .batch_execute(formatcp!(
            "WITH ids AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM outbox_events) \
             UPDATE outbox_events o SET \
                status = CASE WHEN ids.n < 3 THEN {PROCESSING} ELSE {DONE} END, \
                locked_at = CASE WHEN ids.n < 3 THEN now() - interval '1 hour' END, \
                locked_by = CASE WHEN ids.n < 3 THEN 'dead-worker' END, \
                attempts = CASE WHEN ids.n = 2 THEN 8 ELSE 1 END, \
                completed_at = CASE WHEN ids.n = 3 THEN now() - interval '30 days' END \
             FROM ids WHERE o.id = ids.id"
        ))
        .await
        .unwrap();
    let report = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!((report.reset, report.dead_lettered, report.retention.events), (1, 1, 1));
    let statuses: Vec<String> = client
        .query("SELECT status FROM outbox_events ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(statuses, vec!["PENDING", "DEAD"]);
}

#[tokio::test]
async fn an_unusable_runtime_deadline_falls_back_to_the_max_run_time_instead_of_a_busy_loop() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("w");
    config.max_run = Some(Duration::from_millis(1500));
    config.safety_margin = Duration::from_millis(500);
    let p = poller(&db, mailer.clone(), config);
    let started = Instant::now();
    // A deadline already past, as `cargo lambda watch` reports.
    let health = p.invoke(Instant::now()).await.unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(5), "polled ~1 s: {took:?}");
    assert!(health.summary.batches >= 2, "{:?}", health.summary);
}

/// Pages the real claim of 32 events touches (in a transaction rolled
/// back), with `done` finished rows beside 50 due ones, and its plan. Pages
/// measure work, not time, so the figure is stable on a noisy machine.
async fn claim_cost(done: i64) -> (i64, String) {
    let db = TestDb::create().await;
    let mut conn = db.pool.get().await.unwrap();
    conn.execute(
        formatcp!("INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload, status, completed_at) \
         SELECT gen_random_uuid(), gen_random_uuid(), 1, 'BOOKING_CONFIRMED', '{{}}', {DONE}, now() \
           FROM generate_series(1, $1::bigint)"),
        &[&done],
    )
    .await
    .unwrap();
    // Statistics from before the due rows arrived: the stale case.
    conn.batch_execute("ANALYZE outbox_events").await.unwrap();
    seed_events(&db.pool, 50, 1).await;
    let tx = conn.transaction().await.unwrap();
    let plan: serde_json::Value = tx
        .query_one(
            &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}", shared::outbox::events::claim::CLAIM_DUE),
            &[&32i64, &"explain", &uuid::Uuid::nil(), &8i32],
        )
        .await
        .unwrap()
        .get(0);
    tx.rollback().await.unwrap();
    let root = &plan[0]["Plan"];
    assert_eq!(root["Actual Rows"], 32, "the claim took a full batch");
    let pages = root["Shared Hit Blocks"].as_i64().unwrap() + root["Shared Read Blocks"].as_i64().unwrap();
    (pages, plan.to_string())
}

/// The relations a plan (EXPLAIN's JSON) reads by sequential scan.
fn seq_scans(plan: &serde_json::Value) -> Vec<String> {
    let mut found = Vec::new();
    if plan["Node Type"] == "Seq Scan" {
        found.push(plan["Relation Name"].as_str().unwrap_or_default().to_string());
    }
    for child in plan.as_array().into_iter().flatten().chain(plan["Plans"].as_array().into_iter().flatten()) {
        found.extend(seq_scans(child));
    }
    if let Some(root) = plan.get("Plan") {
        found.extend(seq_scans(root));
    }
    found
}

#[tokio::test]
async fn claiming_reads_only_unfinished_rows_when_many_finished_rows_exist() {
    let (small, _) = claim_cost(0).await;
    let (large, plan) = claim_cost(200_000).await;
    assert!(plan.contains("outbox_events_due"), "the due partial index is used: {plan}");
    assert!(plan.contains("aggregate_id = e.aggregate_id"), "ordering check probes by booking: {plan}");
    // The ended leases (a few rows, one per poller run) are read whole.
    let scanned: Vec<String> = seq_scans(&serde_json::from_str(&plan).unwrap());
    assert_eq!(scanned, vec!["outbox_leases".to_string()], "no other sequential scan: {plan}");
    // Deeper b-trees (primary key, per-booking key) add a few pages per
    // claimed row; the 200,000 finished rows themselves are never read.
    assert!(
        large <= small + 32 * 6,
        "200,000 finished rows made the claim touch {large} pages instead of {small}: {plan}"
    );
}

#[tokio::test]
async fn retention_keeps_a_send_while_its_event_exists() {
    use shared::relay::{retention, RetentionConfig};
    let db = TestDb::create().await;
    create_booking(&db, 1, &["alice@example.com"]).await;
    let event = only_event_id(&db).await;
    poller(&db, Arc::new(RecordingMailer::new()), PollerConfig::for_tests("w")).drain().await.unwrap();
    let client = db.pool.get().await.unwrap();
    // The send is old, its event recent: the event could still be reopened
    // (a resend), so the claim that stops a second email must stay.
    client
        .batch_execute(&format!(
            "{AGE_SENDS_30_DAYS}; UPDATE outbox_events SET completed_at = now() - interval '1 day';"
        ))
        .await
        .unwrap();
    let report = retention::run(&client, &RetentionConfig::default()).await.unwrap();
    assert_eq!((report.events, report.sends), (0, 0));
    assert_eq!(sends(&db, event).await, vec![("alice@example.com".into(), SendStatus::Sent)]);
    // Once the event itself is old and gone, its send goes too.
    client.batch_execute("UPDATE outbox_events SET completed_at = now() - interval '30 days'").await.unwrap();
    let report = retention::run(&client, &RetentionConfig::default()).await.unwrap();
    assert_eq!((report.events, report.sends), (1, 1));
}

#[tokio::test]
async fn provider_errors_are_stored_and_logged_with_addresses_masked() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &["alice@example.com", "carol@example.com"]).await;
    let event = only_event_id(&db).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(
        "alice@example.com",
        SendOutcome::Unknown { reason: "timeout sending to alice@example.com".into() },
        1,
    );
    mailer.script("carol@example.com", SendOutcome::NotSent { reason: "Throttled: carol@example.com".into() }, 1);
    let p = poller(&db, mailer, PollerConfig::for_tests("w"));
    p.poll_once().await.unwrap();
    let client = db.pool.get().await.unwrap();
    let unknown =
        shared::notify::evidence::resend::list(&client, std::time::Duration::from_secs(900), false, 10).await.unwrap();
    assert_eq!(unknown[0].last_error.as_deref(), Some("timeout sending to a***@example.com"));
    let (_, _, last_error) = event_status(&db, event).await;
    assert_eq!(last_error.as_deref(), Some("Throttled: c***@example.com"));
}

/// Medium 4 of issue 52: claims went oldest-due first, so one organizer's
/// backlog (here 2,000 events due a minute ago) made every other
/// organizer's next event wait behind all of it, at the account's rate.
/// Each due turn now gets its share of every claim: the very first claim
/// of 64 takes each of the 20 other organizers' events (and, with the
/// rest, the backlog's oldest). Everything still goes out once.
#[tokio::test]
async fn one_organizers_backlog_never_buries_another_organizers_next_event() {
    use shared::outbox::events::{self, claim};
    let db = TestDb::create().await;
    let client = db.pool.get().await.unwrap();
    one_organizers_backlog(&client, 2_000).await;
    let mut others = Vec::new();
    for i in 0..20 {
        let e = events::NewEvent { turn: Some(format!("other{i}@example.com")), ..confirmed_event(10_000 + i, 1) };
        others.push(events::insert(&client, &e).await.unwrap());
    }
    let position = claim::ClaimPosition::default();
    let taken =
        claim::claim_due(&client, 64, claim::Turns::Shared, ("w", uuid::Uuid::now_v7()), 8, &position).await.unwrap();
    let ids: std::collections::HashSet<_> = taken.events.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), 64);
    let reached = others.iter().filter(|id| ids.contains(id)).count();
    assert_eq!(reached, 20, "every other organizer's event in the first claim");

    // The claimed ones go back (as a lease's end would), then all drain once.
    client
        .batch_execute(formatcp!(
            "UPDATE outbox_events SET status = {PENDING}, lease_id = NULL WHERE status = {PROCESSING}"
        ))
        .await
        .unwrap();
    let mailer = Arc::new(RecordingMailer::new());
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailer.count(), 2_020, "each event's recipient once");
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 2_020);
}

/// `n` events of one organizer (`bulk@`), all due a minute ago.
async fn one_organizers_backlog(client: &deadpool_postgres::Object, n: usize) {
    use shared::outbox::events;
    let minute_ago = chrono::Utc::now() - chrono::Duration::minutes(1);
    let backlog: Vec<_> = (0..n)
        .map(|i| events::NewEvent {
            due_at: Some(minute_ago),
            turn: Some("bulk@example.com".into()),
            ..confirmed_event(i, 1)
        })
        .collect();
    for chunk in backlog.chunks(1_000) {
        events::insert_many(client, chunk).await.unwrap();
    }
}

/// The loop that takes turns costs nothing while there is nobody to be
/// fair to: with one organizer's events alone due, its claim takes none
/// (the oldest-due loops take them); once another organizer's event is
/// due, it takes a share of each, the other's first.
#[tokio::test]
async fn the_loop_that_takes_turns_claims_nothing_while_one_organizer_alone_has_due_work() {
    use shared::outbox::events::{self, claim};
    let db = TestDb::create().await;
    let client = db.pool.get().await.unwrap();
    one_organizers_backlog(&client, 200).await;
    let position = claim::ClaimPosition::default();
    let claim = |turns| {
        let (client, position) = (&client, &position);
        async move { claim::claim_due(client, 16, turns, ("w", uuid::Uuid::now_v7()), 8, position).await.unwrap() }
    };
    assert!(claim(claim::Turns::Contended).await.events.is_empty(), "one organizer alone: nothing to be fair about");
    let other = events::NewEvent { turn: Some("other@example.com".into()), ..confirmed_event(10_000, 1) };
    let other = events::insert(&client, &other).await.unwrap();
    let taken = claim(claim::Turns::Contended).await;
    assert_eq!(taken.events.len(), 16, "a share of each turn, the rest oldest-due first");
    assert!(taken.events.iter().any(|e| e.id == other), "the other organizer's event in it");
    // The oldest-due claim takes the rest whatever the turns say.
    let mut left = 200 + 1 - 16;
    while left > 0 {
        let n = claim(claim::Turns::Skipped).await.events.len();
        assert!(n > 0, "{left} left unclaimed");
        left -= n;
    }
}

/// The turns are a fairness, never a condition of delivery: with
/// `outbox_turns` emptied (or wrong), every due event is still claimed,
/// oldest first, by the rest of each claim.
#[tokio::test]
async fn events_are_claimed_whatever_the_turns_table_says() {
    let db = TestDb::create().await;
    seed_events(&db.pool, 300, 1).await;
    let client = db.pool.get().await.unwrap();
    client.batch_execute("DELETE FROM outbox_turns").await.unwrap();
    let mailer = Arc::new(RecordingMailer::new());
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailer.count(), 300);
    client
        .batch_execute(formatcp!(
            "UPDATE outbox_turns SET next_turn = 'infinity'; UPDATE outbox_events SET status = {PENDING}"
        ))
        .await
        .unwrap();
    seed_events(&db.pool, 50, 1).await;
    client.batch_execute("UPDATE outbox_turns SET next_turn = 'infinity'").await.unwrap();
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 350, "the rest of each claim took them");
}
