//! The design story's failure scenarios, one test each, named after them.
//! Crashes are real process deaths: the poller runs as a child process and
//! SIGKILLs itself at a named fault point.

use const_format::formatcp;
use shared::outbox::events::status::sql::DEAD;
use std::sync::Arc;
use std::time::Duration;

use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use shared::notify::deliver::{FAULT_AFTER_SEND, FAULT_AFTER_SEND_CLAIM};
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::relay::batch::FAULT_BEFORE_DONE_COMMIT;
use shared::relay::poller::FAULT_AFTER_CLAIM;
use shared::relay::PollerConfig;

const ALICE: &str = "alice@example.com";
const CAROL: &str = "carol@example.com";
const DAVE: &str = "dave@example.com";

fn kill_at(point: &str) -> String {
    format!("{point}=kill")
}

#[tokio::test]
async fn crash_after_send_before_commit_sends_no_duplicate() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE, CAROL]).await;
    let event = only_event_id(&db).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));

    let status = worker.run(&db, &kill_at(FAULT_BEFORE_DONE_COMMIT), &[]).await;
    assert!(killed(status), "the worker died at the fault point: {status:?}");
    assert_eq!(worker.sent().len(), 2, "both emails went out before the crash");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Processing);
    assert_eq!(db.count("processed_events").await, 0, "processed_events rolled back with the crash");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Sent), (CAROL.into(), SendStatus::Sent)]);

    // Its lease ends unrenewed: the next claim takes the event over.
    end_leases(&db).await;
    let status = worker.run(&db, "", &[]).await;
    assert!(status.success());

    assert_eq!(worker.sent().len(), 2, "the take-over re-ran dispatch but the claims stopped both sends");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
    assert_eq!(db.count("processed_events").await, 1);
}

#[tokio::test]
async fn crash_after_send_before_recording_it_sends_no_duplicate() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));

    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_SEND), &[]).await));
    assert_eq!(worker.sent().len(), 1, "the provider accepted the email");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Claimed)]);

    end_leases(&db).await;
    assert!(worker.run(&db, "", &[]).await.success());
    assert_eq!(worker.sent().len(), 1, "no second email");
    // It was in fact delivered, but nothing recorded that: at-most-once keeps
    // it as UNKNOWN for an operator rather than risk a duplicate.
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test]
async fn crash_after_claim_before_send_is_missed_and_visible_as_unknown() {
    // A claim group of 1: one send is claimed at a time.
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE, CAROL]).await;
    let event = only_event_id(&db).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let one = [("POLLER_CLAIM_GROUP", "1")];

    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_SEND_CLAIM), &one).await));
    assert!(worker.sent().is_empty(), "the crash came before the mailer call");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Claimed)]);

    end_leases(&db).await;
    assert!(worker.run(&db, "", &one).await.success());
    let sent = worker.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].1, CAROL, "the unclaimed recipient is still delivered");
    assert_eq!(
        sends(&db, event).await,
        vec![(ALICE.into(), SendStatus::Unknown), (CAROL.into(), SendStatus::Sent)],
        "Alice's email is missed, and visible as UNKNOWN"
    );
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test]
async fn crash_after_claim_costs_only_the_sends_in_flight_not_the_claim_group() {
    // Three recipients, a claim group of 64, two sends in flight: a send is
    // claimed only once it may start, so the crash after the claim costs
    // the two in flight, and the third is never claimed.
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE, CAROL]).await;
    create_booking(&db, 10, &[DAVE]).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let shape = [("POLLER_CLAIM_GROUP", "64"), ("POLLER_CONCURRENCY", "2"), ("POLLER_BATCHES_IN_FLIGHT", "1")];

    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_SEND_CLAIM), &shape).await));
    assert!(worker.sent().is_empty(), "the crash came before any mailer call");
    let counts = send_counts(&db).await;
    assert_eq!(counts[&SendStatus::Claimed], 2, "only the sends in flight were claimed: {counts:?}");

    end_leases(&db).await;
    assert!(worker.run(&db, "", &shape).await.success());
    assert_eq!(worker.sent().len(), 1, "the recipient never claimed is sent, once");
    let counts = send_counts(&db).await;
    assert_eq!(
        (counts[&SendStatus::Unknown], counts[&SendStatus::Claimed], counts[&SendStatus::Sent]),
        (2, 0, 1),
        "{counts:?}"
    );
    // Not lost silently: an operator sees each of them.
    let listed = outbox_tests::ctl::ctl(&db, &["unknown", "list", "--json"]).await.json();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
}

#[tokio::test]
async fn send_failure_releases_claim_then_retry_delivers_once() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(ALICE, SendOutcome::NotSent { reason: "Throttling: rate exceeded".into() }, 1);
    let mut config = PollerConfig::for_tests("w1");
    config.backoff_base = Duration::from_secs(60);
    config.backoff_cap = Duration::from_secs(600);
    let poller = poller(&db, mailer.clone(), config);

    let first = poller.poll_once().await.unwrap();
    assert_eq!((first.released, first.retried, first.sent), (1, 1, 0));
    let (status, attempts, last_error) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Pending, 1));
    assert_eq!(last_error.as_deref(), Some("Throttling: rate exceeded"));
    assert!(sends(&db, event).await.is_empty(), "the claim was released");
    assert_eq!(db.count("processed_events").await, 0);
    let wait: f64 = db.scalar("SELECT extract(epoch FROM next_attempt_at - now())::float8 FROM outbox_events").await;
    assert!((55.0..=600.0).contains(&wait), "backoff applied: retry in {wait}s");
    assert_eq!(poller.poll_once().await.unwrap().claimed, 0, "not due before its backoff");

    db.scalar::<i64>("WITH u AS (UPDATE outbox_events SET next_attempt_at = now() RETURNING 1) SELECT count(*) FROM u")
        .await;
    let second = poller.drain().await.unwrap();
    assert_eq!(second.sent, 1);
    assert_eq!(mailer.count(), 1, "delivered exactly once");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Sent)]);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_on_the_same_events_send_no_duplicate() {
    let db = TestDb::create().await;
    seed_events(&db.pool, 300, 2).await;
    let mailer = Arc::new(RecordingMailer::new().with_delay(Duration::from_millis(1)));
    let a = poller(&db, mailer.clone(), PollerConfig::for_tests("worker-a"));
    let b = poller(&db, mailer.clone(), PollerConfig::for_tests("worker-b"));
    let (ra, rb) = tokio::join!(a.drain(), b.drain());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra.sent > 0 && rb.sent > 0, "both workers did work: {ra:?} {rb:?}");
    let mut keys: Vec<_> = mailer.deliveries().iter().map(|d| (d.event_id, d.recipient.clone())).collect();
    assert_eq!(keys.len(), 600);
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 600, "no (event, recipient) was sent twice");
    assert_eq!(event_counts(&db).await[&EventStatus::Done], 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_holder_whose_lease_ended_is_fenced_and_its_event_is_sent_once() {
    // a's lease ends while it is inside the mailer call (a stall, a clock
    // jump: a live holder, not a dead one), and b takes the event over.
    // processed_events makes b wait for a's transaction; the fence makes
    // every later write of a (the outcome, DONE) change nothing; b finds
    // Alice's claim, which a may have sent, and does not send it again.
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let slow = Arc::new(RecordingMailer::new().with_delay(Duration::from_millis(800)));
    let a = poller(&db, slow.clone(), PollerConfig::for_tests("slow-a"));
    let first = tokio::spawn(async move { a.poll_once().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await; // a is inside the mailer call
    end_leases(&db).await;
    let fast = Arc::new(RecordingMailer::new());
    let b = poller(&db, fast.clone(), PollerConfig::for_tests("fast-b"));
    let second = b.poll_once().await.unwrap();
    let first = first.await.unwrap();
    assert_eq!((first.sent, first.done, first.fenced), (1, 0, 1), "a sent, then learnt it lost the event: {first:?}");
    assert_eq!((second.taken_over, second.unknown, second.done), (1, 1, 1), "b took it over: {second:?}");
    assert_eq!(slow.count() + fast.count(), 1, "one email");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
    // a's SENT was fenced: the claim is UNKNOWN until SES's own events
    // confirm it (they name the claim).
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
}

#[tokio::test]
async fn stuck_processing_row_is_swept_and_then_delivered() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    // Leases of a minute: no claim takes the event over within this test.
    let long = [("POLLER_LEASE_SECS", "60")];
    assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_CLAIM), &long).await));
    assert_eq!(event_status(&db, event).await.0, EventStatus::Processing);

    // Not yet past the timeout: a sweep leaves it alone (it could be live).
    let client = db.pool.get().await.unwrap();
    assert!(shared::relay::sweeper::sweep_once(&client, &sweeper_config(8), false).await.unwrap().is_empty());
    // A poll does not see it either while its lease lasts.
    assert!(worker.run(&db, "", &long).await.success());
    assert!(worker.sent().is_empty());

    let swept = sweep_after_timeout(&db, 8).await;
    assert_eq!((swept.len(), swept[0].to, swept[0].attempts), (1, EventStatus::Pending, 1));
    let (status, _, last_error) = event_status(&db, event).await;
    assert_eq!(status, EventStatus::Pending);
    assert!(last_error.unwrap().starts_with("swept: stuck in PROCESSING"));

    assert!(worker.run(&db, "", &[]).await.success());
    assert_eq!(worker.sent().len(), 1);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test]
async fn exhausted_attempts_go_dead_with_no_sweep_ping_pong() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let max = [("OUTBOX_MAX_ATTEMPTS", "2")];
    // Two attempts, each dies after claiming.
    for attempt in 1..=2 {
        assert!(killed(worker.run(&db, &kill_at(FAULT_AFTER_CLAIM), &max).await));
        assert_eq!(event_status(&db, event).await.1, attempt);
        let swept = sweep_after_timeout(&db, 2).await;
        let expected = if attempt < 2 { EventStatus::Pending } else { EventStatus::Dead };
        assert_eq!(swept[0].to, expected, "attempt {attempt}");
    }
    let (status, attempts, last_error) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Dead, 2));
    assert!(last_error.unwrap().starts_with("attempts exhausted (2)"));
    // Nothing picks it up again: no poll, no sweep.
    assert!(worker.run(&db, "", &max).await.success());
    assert!(sweep_after_timeout(&db, 2).await.is_empty());
    assert_eq!(event_status(&db, event).await, (EventStatus::Dead, 2, event_status(&db, event).await.2));
    assert!(worker.sent().is_empty());
}

#[tokio::test]
async fn repeated_known_failures_end_in_the_dead_letter_state() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(ALICE, SendOutcome::NotSent { reason: "Throttling".into() }, 10);
    let mut config = PollerConfig::for_tests("w");
    config.max_attempts = 3;
    let summary = poller(&db, mailer.clone(), config).drain().await.unwrap();
    assert_eq!((summary.retried, summary.dead_lettered), (2, 1));
    let (status, attempts, last_error) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Dead, 3));
    assert_eq!(last_error.as_deref(), Some("attempts exhausted (3): Throttling"));
    assert!(sends(&db, event).await.is_empty(), "released claims let a replay send it");
    assert!(sweep_after_timeout(&db, 3).await.is_empty());
}

#[tokio::test]
async fn multi_recipient_event_with_one_failing_recipient_is_retried_for_that_one_only() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE, CAROL, DAVE]).await;
    let event = only_event_id(&db).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(CAROL, SendOutcome::NotSent { reason: "TooManyRequests".into() }, 1);
    let poller = poller(&db, mailer.clone(), PollerConfig::for_tests("w"));

    let first = poller.poll_once().await.unwrap();
    assert_eq!((first.sent, first.released, first.retried), (2, 1, 1));
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Sent), (DAVE.into(), SendStatus::Sent)]);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Pending);

    let second = poller.drain().await.unwrap();
    assert_eq!((second.sent, second.skipped), (1, 2), "only Carol is sent on the retry");
    let mut to: Vec<String> = mailer.deliveries().iter().map(|d| d.recipient.clone()).collect();
    to.sort();
    assert_eq!(to, vec![ALICE, CAROL, DAVE], "each recipient exactly once");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test]
async fn permanently_rejected_recipient_is_failed_and_does_not_hold_back_others() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE, CAROL]).await;
    let event = only_event_id(&db).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(ALICE, SendOutcome::Rejected { reason: "MessageRejected: address invalid".into() }, 1);
    let summary = poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!((summary.sent, summary.failed, summary.retried), (1, 1, 0));
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Failed), (CAROL.into(), SendStatus::Sent)]);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done, "never retried forever");
}

#[tokio::test]
async fn unknown_outcome_keeps_the_claim_and_is_never_resent() {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(ALICE, SendOutcome::Unknown { reason: "read timeout after request was sent".into() }, 1);
    let p = poller(&db, mailer.clone(), PollerConfig::for_tests("w"));
    let summary = p.drain().await.unwrap();
    assert_eq!((summary.unknown, summary.done), (1, 1));
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
    // Even if the event is forced to run again, the kept claim stops a resend.
    force_run_again(&db, event).await;
    p.drain().await.unwrap();
    assert_eq!(mailer.count(), 0);
}

#[tokio::test]
async fn paused_provider_stops_the_run_without_burning_attempts() {
    let db = TestDb::create().await;
    let a = create_booking(&db, 1, &[ALICE]).await;
    let c = create_booking(&db, 2, &[CAROL]).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script(ALICE, SendOutcome::Paused { reason: "SendingPausedException".into() }, 1);
    mailer.script(CAROL, SendOutcome::Paused { reason: "SendingPausedException".into() }, 1);
    let mut config = PollerConfig::for_tests("w");
    config.concurrency = 1;
    let summary = poller(&db, mailer.clone(), config).drain().await.unwrap();
    assert!(summary.paused);
    assert_eq!(mailer.count(), 0);
    let client = db.pool.get().await.unwrap();
    let mut rows: Vec<(String, i32)> = Vec::new();
    for booking in [&a, &c] {
        for e in shared::outbox::events::of_aggregate(&client, booking.id).await.unwrap() {
            rows.push((e.status.to_string(), e.attempts));
        }
    }
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|(s, a)| s == "PENDING" && *a == 0), "requeued, no attempt used: {rows:?}");
    assert_eq!(db.count("booking_notification_sends").await, 0, "claims released");
}

/// Issue 53, blocker 2: the provider refusing the stack's own
/// configuration (here the sender's identity) is not one recipient's
/// failure. Sending stops at once, stack-wide; nothing is failed or
/// dead-lettered, no attempt is used, the run says why (SendingStopped,
/// alarmed), and once it is fixed every invitation goes.
#[tokio::test]
async fn a_misconfigured_mailer_stops_sending_and_every_event_waits_for_the_fix_without_an_attempt() {
    let db = TestDb::create().await;
    let a = create_booking(&db, 1, &[ALICE]).await;
    let c = create_booking(&db, 2, &[CAROL]).await;
    let mailer = Arc::new(RecordingMailer::new());
    let refused = SendOutcome::Misconfigured { reason: "MailFromDomainNotVerified".into() };
    mailer.script(ALICE, refused.clone(), 1);
    mailer.script(CAROL, refused, 1);
    let mut config = PollerConfig::for_tests("w");
    config.concurrency = 1;
    let summary = poller(&db, mailer.clone(), config.clone()).drain().await.unwrap();
    assert!(summary.paused, "the run stopped sending: {summary:?}");
    assert_eq!((summary.misconfigured, summary.failed, summary.dead_lettered), (1, 0, 0), "{summary:?}");
    let metrics: Vec<(&str, f64)> = summary.metrics().into_iter().map(|m| (m.0, m.1)).collect();
    assert!(metrics.contains(&("SendingStopped", 1.0)) && metrics.contains(&("Misconfigured", 1.0)), "{metrics:?}");
    assert_eq!(mailer.count(), 0);
    let mut reasons = Vec::new();
    for booking in [&a, &c] {
        let event = events_of(&db, booking.id).await.remove(0);
        let (status, attempts, last_error) = event_status(&db, event.id).await;
        assert_eq!((status, attempts), (EventStatus::Pending, 0), "waits, no attempt used");
        assert!(sends(&db, event.id).await.is_empty(), "claims released");
        reasons.push(last_error);
    }
    let why = Some("mailer misconfigured: MailFromDomainNotVerified");
    assert!(reasons.iter().any(|r| r.as_deref() == why), "{reasons:?}");
    assert_eq!(db.count("processed_events").await, 0);
    // Fixed (the identity verified): the next run, once they are due, sends both.
    db.pool.get().await.unwrap().execute("UPDATE outbox_events SET next_attempt_at = now()", &[]).await.unwrap();
    let fixed = Arc::new(RecordingMailer::new());
    let summary = poller(&db, fixed.clone(), config).drain().await.unwrap();
    assert_eq!((summary.sent, summary.paused), (2, false), "{summary:?}");
}

#[tokio::test]
async fn unreadable_event_is_dead_lettered_not_retried_forever() {
    let db = TestDb::create().await;
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            "INSERT INTO outbox_events (id, aggregate_id, aggregate_version, event_type, payload) \
             VALUES (gen_random_uuid(), gen_random_uuid(), 1, 'BOOKING_CONFIRMED', '{\"nope\": 1}')",
            &[],
        )
        .await
        .unwrap();
    let summary = poller(&db, Arc::new(RecordingMailer::new()), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(summary.dead_lettered, 1);
    let last_error: String = db.scalar(formatcp!("SELECT last_error FROM outbox_events WHERE status = {DEAD}")).await;
    assert!(last_error.starts_with("unreadable payload"), "{last_error}");
}
