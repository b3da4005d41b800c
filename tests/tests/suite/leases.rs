//! Leases and fencing (issue 51): a poller that dies, freezes or loses the
//! database has its events taken over by the next claim once its lease
//! ends, in seconds, and can change nothing of them afterwards. Each test
//! is a real process death (SIGKILL at a named fault point) or stop
//! (SIGSTOP, SIGCONT), or a real cut of a database connection, at the
//! template's lease (`POLLER_LEASE_SECS`, 4 s) unless it says otherwise,
//! and counts what the failure cost in sends and in seconds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use shared::config::settings as S;
use shared::notify::deliver::FAULT_AFTER_SEND;
use shared::notify::mailer::recording::RecordingMailer;
use shared::relay::poller::FAULT_AFTER_CLAIM;
use shared::relay::{PollerConfig, RunSummary};

/// The template's lease.
fn template_lease() -> Duration {
    Duration::from_secs_f64(S::POLLER_LEASE_SECS.default_value())
}

fn kill_at(point: &str) -> String {
    format!("{point}=kill")
}

/// Polls with `poller` (a claim a batch, as a run's batches do) until
/// one claim takes events over; returns when, and what the polls did.
async fn poll_until_taken_over(poller: &shared::relay::Poller, within: Duration) -> (Instant, RunSummary) {
    let started = Instant::now();
    let mut total = RunSummary::default();
    loop {
        let one = poller.poll_once().await.unwrap();
        let taken = one.taken_over > 0;
        add(&mut total, &one);
        if taken {
            return (Instant::now(), total);
        }
        assert!(started.elapsed() < within, "nothing was taken over within {within:?}: {total:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn add(total: &mut RunSummary, one: &RunSummary) {
    total.claimed += one.claimed;
    total.taken_over += one.taken_over;
    total.sent += one.sent;
    total.unknown += one.unknown;
    total.done += one.done;
    total.fenced += one.fenced;
}

/// Every `(event, recipient)` sent, from the child's journal and the
/// in-process mailer, with how often.
fn sent_counts(worker: &Worker, mailer: &RecordingMailer) -> HashMap<(String, String), u32> {
    let mut counts = HashMap::new();
    for (event, recipient, _) in worker.sent() {
        *counts.entry((event, recipient)).or_default() += 1;
    }
    for d in mailer.deliveries() {
        *counts.entry((d.event_id.to_string(), d.recipient)).or_default() += 1;
    }
    counts
}

fn recipients(n: usize, tag: &str) -> Vec<String> {
    (0..n).map(|i| format!("{tag}{i}@example.com")).collect()
}

/// A booking at `slot` for `n` attendees of its own (`{tag}0@example.com`
/// ...); returns its event.
async fn booking_for(db: &TestDb, slot: u32, n: usize, tag: &str) -> uuid::Uuid {
    let people = recipients(n, tag);
    let people: Vec<&str> = people.iter().map(String::as_str).collect();
    create_booking(db, slot, &people).await;
    db.scalar("SELECT id FROM outbox_events ORDER BY id DESC LIMIT 1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_claiming_before_any_send_its_events_are_taken_over_within_the_lease() {
    let db = TestDb::create().await;
    for slot in 0..3 {
        booking_for(&db, slot, 2, "k").await;
    }
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_CLAIM), &[]).await));
    let killed_at = Instant::now();
    assert_eq!(event_counts(&db).await[&EventStatus::Processing], 3, "the dead poller held all three");

    let mailer = Arc::new(RecordingMailer::new());
    let next = poller(&db, mailer.clone(), PollerConfig::for_tests("next"));
    let (at, first) = poll_until_taken_over(&next, Duration::from_secs(15)).await;
    let took = at.duration_since(killed_at);
    println!("kill -> take-over: {:.2} s (lease {:?})", took.as_secs_f64(), template_lease());
    // Not before its lease could have ended (its last renewal was its
    // take, just before the kill), and within the lease plus a few polls.
    assert!(took >= template_lease() - Duration::from_millis(500), "taken over while its lease lasted: {took:?}");
    assert!(took <= template_lease() + Duration::from_secs(1), "the take-over took {took:?}");
    assert_eq!(first.taken_over, 3, "{first:?}");
    next.drain().await.unwrap();

    assert!(worker.sent().is_empty(), "the dead poller sent nothing");
    let counts = sent_counts(&worker, &mailer);
    assert_eq!(counts.len(), 6, "every recipient reached: {counts:?}");
    assert!(counts.values().all(|n| *n == 1), "none twice: {counts:?}");
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 3);
    let (_, attempts, last_error) = event_status(&db, only_event_of_slot(&db, 0).await).await;
    assert_eq!(attempts, 2, "the take-over counts as an attempt");
    assert!(last_error.is_none(), "DONE clears the take-over's note");
}

async fn only_event_of_slot(db: &TestDb, slot: usize) -> uuid::Uuid {
    db.scalar::<Vec<uuid::Uuid>>("SELECT array_agg(id ORDER BY id) FROM outbox_events").await[slot]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_batch_with_sends_in_flight_costs_only_those_sends_and_seconds() {
    let db = TestDb::create().await;
    booking_for(&db, 1, 3, "m").await;
    booking_for(&db, 2, 3, "m").await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let shape = [("POLLER_CONCURRENCY", "2"), ("POLLER_BATCHES_IN_FLIGHT", "1")];
    // The first send accepted kills it: its outcome unrecorded, the send
    // beside it in flight.
    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_SEND), &shape).await));
    let killed_at = Instant::now();
    let in_flight = send_counts(&db).await[&SendStatus::Claimed];
    assert!((1..=2).contains(&in_flight), "at most the sends in flight were claimed: {in_flight}");

    let mailer = Arc::new(RecordingMailer::new());
    let next = poller(&db, mailer.clone(), PollerConfig::for_tests("next"));
    let (at, _) = poll_until_taken_over(&next, Duration::from_secs(15)).await;
    let took = at.duration_since(killed_at);
    println!("kill -> take-over: {:.2} s; sends in flight at the kill: {in_flight}", took.as_secs_f64());
    assert!(took <= template_lease() + Duration::from_secs(1), "the take-over took {took:?}");
    next.drain().await.unwrap();

    let counts = sent_counts(&worker, &mailer);
    assert!(counts.values().all(|n| *n == 1), "none twice: {counts:?}");
    let sends = send_counts(&db).await;
    assert_eq!(sends[&SendStatus::Unknown], in_flight, "the crash cost exactly the sends in flight: {sends:?}");
    assert_eq!(sends[&SendStatus::Sent] + in_flight, 6, "every other recipient sent: {sends:?}");
    assert_eq!(sends[&SendStatus::Claimed], 0);
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 2);
}

/// Sends, by status and in full, and the event: what a zombie must not
/// change.
async fn snapshot(db: &TestDb) -> Vec<String> {
    db.scalar::<Vec<String>>(
        "SELECT array_agg(x ORDER BY x) FROM ( \
           SELECT concat_ws(' ', id, status, last_error, provider_message_id, completed_at, updated_at) AS x \
             FROM booking_notification_sends \
           UNION ALL SELECT concat_ws(' ', id, status, attempts, lease_id, completed_at, updated_at) \
             FROM outbox_events) t",
    )
    .await
}

fn signal(child: &tokio::process::Child, sig: &str) {
    let pid = child.id().expect("the child runs").to_string();
    assert!(std::process::Command::new("kill").args([sig, &pid]).status().unwrap().success(), "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_past_its_lease_and_resumed_it_changes_nothing_it_no_longer_holds() {
    let db = TestDb::create().await;
    let event = booking_for(&db, 1, 4, "z").await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    // Two sends of 1.5 s in flight at a time, under the shortest lease.
    let shape = [
        ("POLLER_LEASE_SECS", "2"),
        ("POLLER_CONCURRENCY", "2"),
        ("POLLER_BATCHES_IN_FLIGHT", "1"),
        ("OUTBOX_WORKER_SEND_DELAY_MS", "1500"),
    ];
    let mut zombie = worker.spawn(&db, "", &shape);
    let started = Instant::now();
    while send_counts(&db).await[&SendStatus::Claimed] < 2 {
        assert!(started.elapsed() < Duration::from_secs(15), "the worker never claimed its sends");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Both sends are inside the mailer's 1.5 s.
    tokio::time::sleep(Duration::from_millis(200)).await;
    signal(&zombie, "-STOP");
    let stopped_at = Instant::now();

    // The next poller takes the event over once the lease ends; it waits
    // for the frozen poller's transaction only until the server ends it (a
    // lease's length idle), then finds the two claims in flight and sends
    // the other two recipients.
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("next");
    config.lease = Duration::from_secs(2);
    let next = poller(&db, mailer.clone(), config);
    let (at, mut total) = poll_until_taken_over(&next, Duration::from_secs(20)).await;
    add(&mut total, &next.drain().await.unwrap());
    let done_at = Instant::now();
    println!(
        "stop -> take-over {:.2} s, -> event done {:.2} s",
        at.duration_since(stopped_at).as_secs_f64(),
        done_at.duration_since(stopped_at).as_secs_f64()
    );
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
    assert!(done_at.duration_since(stopped_at) < Duration::from_secs(10), "a frozen poller held its event up");
    assert_eq!((total.unknown, total.sent), (2, 2), "the two in flight are UNKNOWN, the rest sent: {total:?}");
    let before = snapshot(&db).await;

    signal(&zombie, "-CONT");
    let out = tokio::time::timeout(Duration::from_secs(30), zombie.wait()).await.expect("the zombie ended").unwrap();
    assert!(out.success(), "{out:?}");
    let mut printed = String::new();
    tokio::io::AsyncReadExt::read_to_string(zombie.stdout.as_mut().unwrap(), &mut printed).await.unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(printed.lines().last().expect("its summary")).expect("the zombie's summary");
    assert_eq!(summary["lease_lost"], true, "it knew it lost its lease: {summary}");
    assert_eq!(summary["done"], 0, "{summary}");

    assert_eq!(snapshot(&db).await, before, "the resumed poller changed nothing");
    // What it can still do: the sends it had in flight, no more.
    assert_eq!(worker.sent().len(), 2, "its two sends in flight went out when it resumed");
    let counts = sent_counts(&worker, &mailer);
    assert_eq!(counts.len(), 4, "every recipient reached: {counts:?}");
    assert!(counts.values().all(|n| *n == 1), "none twice: {counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_racing_for_one_expired_lease_take_each_event_once() {
    let db = TestDb::create().await;
    let people = ["r1@example.com", "r2@example.com"];
    for slot in 0..20 {
        create_booking(&db, slot, &people).await;
    }
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let one = [("POLLER_BATCHES_IN_FLIGHT", "1"), ("POLLER_LEASE_SECS", "2")];
    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_CLAIM), &one).await));
    assert_eq!(event_counts(&db).await[&EventStatus::Processing], 20);
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let mailer = Arc::new(RecordingMailer::new().with_delay(Duration::from_millis(5)));
    // Claims of 4: the two take the 20 events over between them.
    let racer = |name: &str| {
        let mut config = PollerConfig::for_tests(name);
        config.batch_size = 4;
        poller(&db, mailer.clone(), config)
    };
    let (a, b) = (racer("racer-a"), racer("racer-b"));
    let (ra, rb) = tokio::join!(a.drain(), b.drain());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    println!("racer a took over {}, racer b {}", ra.taken_over, rb.taken_over);
    assert_eq!(ra.taken_over + rb.taken_over, 20, "each event taken over once: {ra:?} {rb:?}");
    assert!(ra.taken_over > 0 && rb.taken_over > 0, "both took some over: {ra:?} {rb:?}");
    assert_eq!((ra.fenced, rb.fenced), (0, 0));
    let counts = sent_counts(&worker, &mailer);
    assert_eq!(counts.len(), 40);
    assert!(counts.values().all(|n| *n == 1), "none twice");
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 20);
}

/// The lease row of the run `holder` is renewing, locked by another
/// session for as long as the returned transaction is open: its renewal
/// waits on it, in flight.
async fn hold_the_lease_row(db: &TestDb, holder: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let started = Instant::now();
    loop {
        client.batch_execute("BEGIN").await.unwrap();
        let locked = client
            .query("SELECT 1 FROM outbox_leases WHERE holder = $1 AND expires_at > now() FOR UPDATE", &[&holder])
            .await
            .unwrap();
        if !locked.is_empty() {
            return client;
        }
        client.batch_execute("ROLLBACK").await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(10), "{holder} took no lease");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for a renewal blocked on the lease row, and returns its backend.
async fn renewal_in_flight(db: &TestDb) -> i32 {
    let started = Instant::now();
    loop {
        let pid: Option<i32> = db
            .scalar(
                "SELECT max(pid) FROM pg_stat_activity \
                  WHERE datname = current_database() \
                    AND query LIKE 'UPDATE outbox_leases SET expires_at%' AND wait_event_type = 'Lock'",
            )
            .await;
        if let Some(pid) = pid {
            return pid;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no renewal waited on the lease row");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A run under a 2 s lease that sends one at a time, 400 ms each.
fn slow_run(db: &TestDb, holder: &str) -> (shared::relay::Poller, Arc<RecordingMailer>) {
    let mut config = PollerConfig::for_tests(holder);
    config.lease = Duration::from_secs(2);
    config.concurrency = 1;
    config.batches_in_flight = 1;
    let mailer = Arc::new(RecordingMailer::new().with_delay(Duration::from_millis(400)));
    (poller(db, mailer.clone(), config), mailer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_while_renewing_is_renewed_on_a_fresh_one_and_nothing_is_taken_over() {
    let db = TestDb::create().await;
    booking_for(&db, 1, 8, "c").await;
    let (run, mailer) = slow_run(&db, "cut");
    let drained = tokio::spawn(async move { run.drain().await.unwrap() });
    let lock = hold_the_lease_row(&db, "cut").await;
    let pid = renewal_in_flight(&db).await;
    assert!(db.scalar::<bool>(&format!("SELECT pg_terminate_backend({pid})")).await, "the renewal's connection cut");
    lock.batch_execute("COMMIT").await.unwrap();

    let summary = drained.await.unwrap();
    assert!(!summary.lease_lost, "the next renewal, on a fresh connection, kept the lease: {summary:?}");
    assert_eq!((summary.sent, summary.fenced, summary.taken_over), (8, 0, 0), "{summary:?}");
    assert_eq!(mailer.count(), 8);
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_stalled_past_the_lease_stops_the_run_and_its_events_are_taken_over() {
    let db = TestDb::create().await;
    let event = booking_for(&db, 1, 8, "s").await;
    let (run, first_mailer) = slow_run(&db, "stalled");
    let drained = tokio::spawn(async move { run.drain().await.unwrap() });
    // Its renewals wait on the row (a database that stopped answering
    // them) past the lease, and its connection is cut meanwhile.
    let lock = hold_the_lease_row(&db, "stalled").await;
    let pid = renewal_in_flight(&db).await;
    db.scalar::<bool>(&format!("SELECT pg_terminate_backend({pid})")).await;
    let stalled_at = Instant::now();

    let mailer = Arc::new(RecordingMailer::new());
    let next = poller(&db, mailer.clone(), PollerConfig::for_tests("next"));
    let (at, _) = poll_until_taken_over(&next, Duration::from_secs(15)).await;
    println!("renewal stalled -> take-over: {:.2} s", at.duration_since(stalled_at).as_secs_f64());
    next.drain().await.unwrap();
    let sent_before_the_database_answered = first_mailer.count();
    // The database answers again: the stalled renewal is refused (the
    // lease had ended), and the run sends nothing more.
    lock.batch_execute("COMMIT").await.unwrap();
    let first = drained.await.unwrap();

    assert!(first.lease_lost, "it stopped on its own: {first:?}");
    assert_eq!(first_mailer.count(), sent_before_the_database_answered, "nothing sent after it lost its lease");
    let sends = send_counts(&db).await;
    let mut counts: HashMap<String, u32> = HashMap::new();
    for d in first_mailer.deliveries().into_iter().chain(mailer.deliveries()) {
        *counts.entry(d.recipient).or_default() += 1;
    }
    assert!(counts.values().all(|n| *n == 1), "none twice: {counts:?}");
    assert!(sends[&SendStatus::Unknown] <= 1, "at most its one send in flight is UNKNOWN: {sends:?}");
    assert_eq!(sends[&SendStatus::Sent] + sends[&SendStatus::Unknown], 8, "every recipient: {sends:?}");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_over_never_lets_a_later_event_of_the_booking_overtake_the_held_one() {
    let db = TestDb::create().await;
    let booking = create_booking(&db, 3, &["alice@example.com"]).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let short = [("POLLER_LEASE_SECS", "2")];
    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_CLAIM), &short).await));
    // The booking is cancelled while its invitation is held by the dead poller.
    let service = shared::booking::service::BookingService::new(
        db.pool.clone(),
        shared::fault::Faults::none(),
        shared::booking::limits::Limits::UNLIMITED,
    );
    service.cancel(&organizer(), booking.id, None).await.unwrap();
    let events = events_of(&db, booking.id).await;
    let (invite, cancel) = (events[0].id, events[1].id);

    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("next");
    // Both mails go, so their order shows.
    config.skip_superseded = false;
    let next = poller(&db, mailer.clone(), config);
    let early = next.poll_once().await.unwrap();
    assert_eq!(early.claimed, 0, "the cancel waits behind its invitation, held while the lease lasts: {early:?}");
    let (_, taken) = poll_until_taken_over(&next, Duration::from_secs(10)).await;
    assert_eq!(taken.claimed, 1, "the take-over claims the invitation alone, not the cancel behind it: {taken:?}");
    assert_eq!(event_status(&db, invite).await.0, EventStatus::Done);
    next.drain().await.unwrap();
    assert_eq!(event_status(&db, cancel).await.0, EventStatus::Done);
    let order: Vec<uuid::Uuid> = mailer.deliveries().iter().map(|d| d.event_id).collect();
    assert_eq!(order, vec![invite, cancel], "the invitation, then its cancellation");
}

#[tokio::test]
async fn a_poison_event_that_kills_every_poller_ends_dead_at_its_take_over() {
    let db = TestDb::create().await;
    create_booking(&db, 4, &["alice@example.com"]).await;
    let event = only_event_id(&db).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    // The test ends each lease itself: a long one, so a worker starved of
    // CPU for a few seconds on a loaded machine does not lose its lease
    // (and stop on its own, claiming nothing) before it reaches the fault.
    let max = [("OUTBOX_MAX_ATTEMPTS", "2"), ("POLLER_LEASE_SECS", "30")];
    for attempt in 1..=2 {
        assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_CLAIM), &max).await));
        assert_eq!(
            event_status(&db, event).await,
            (EventStatus::Processing, attempt, event_status(&db, event).await.2)
        );
        end_leases(&db).await;
    }
    // The third claim finds it out of attempts: the dead letter, not a third run.
    assert!(worker.run(&db, &kill_at(FAULT_AFTER_CLAIM), &max).await.success(), "nothing was claimed to die on");
    let (status, attempts, last_error) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Dead, 2));
    let last_error = last_error.unwrap();
    assert!(
        last_error.starts_with("attempts exhausted (2): its lease ended while child-")
            && last_error.ends_with("held it"),
        "{last_error}"
    );
    assert!(worker.sent().is_empty());
}
