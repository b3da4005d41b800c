//! The invocation's deadline is a hard bound: a send starts only when its
//! worst case (the mailer's connect + read timeout) and the safety margin
//! still fit before the deadline. What does not fit is left unclaimed (or,
//! in a claim group, its claim is released unsent), and the event goes back
//! to PENDING at once, without using an attempt.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use shared::notify::mailer::recording::RecordingMailer;
use shared::relay::PollerConfig;

#[tokio::test]
async fn a_short_deadline_a_slow_mailer_and_50_recipients_end_in_time_with_nothing_claimed_or_unknown() {
    // One send at a time (each 100 ms), and four at a time (each 400 ms):
    // about 5 s of sending either way, against a 2 s deadline; at the
    // default claim group, and at groups of one send.
    for group in [1, shared::config::settings::POLLER_CLAIM_GROUP.default_value()] {
        for (concurrency, delay) in [(1, 100), (4, 400)] {
            short_deadline_run(group, concurrency, Duration::from_millis(delay)).await;
        }
    }
}

async fn short_deadline_run(group: usize, concurrency: usize, delay: Duration) {
    let db = TestDb::create().await;
    let recipients: Vec<String> = (0..50).map(|i| format!("guest{i}@example.com")).collect();
    let booking = create_booking(&db, 1, &recipients.iter().map(String::as_str).collect::<Vec<_>>()).await;
    // Each send takes (and may take at worst) `delay`.
    let mailer = Arc::new(RecordingMailer::new().with_delay(delay));
    let mut config = PollerConfig::for_tests("deadline");
    config.safety_margin = Duration::from_millis(300);
    config.concurrency = concurrency;
    config.claim_group = group;
    let p = poller(&db, mailer.clone(), config);

    let started = Instant::now();
    let deadline = started + Duration::from_secs(2);
    let summary = p.run_until(deadline).await.unwrap();
    assert!(Instant::now() < deadline, "ended {:?} after the deadline", Instant::now() - deadline);
    let sent = mailer.count();
    assert!((1..50).contains(&sent), "some were sent, not all: {sent}");
    assert_eq!(summary.deadline_requeued, 1, "{summary:?}");
    let counts = send_counts(&db).await;
    assert_eq!(
        (counts[&SendStatus::Claimed], counts[&SendStatus::Unknown]),
        (0, 0),
        "nothing left claimed or unknown: {counts:?}"
    );
    assert_eq!(
        counts[&SendStatus::Sent] as usize,
        sent,
        "the rest were never claimed, or their claims released unsent"
    );
    let event = &events_of(&db, booking.id).await[0];
    assert_eq!(event.status, EventStatus::Pending);
    assert_eq!(event.attempts, 0, "the deadline used no attempt");
    assert!(event.next_attempt_at <= chrono::Utc::now(), "due again at once");

    // The next invocations finish it: every guest once.
    p.drain().await.unwrap();
    let mut got: Vec<String> = mailer.deliveries().into_iter().map(|d| d.recipient).collect();
    got.sort();
    let mut want = recipients.clone();
    want.sort();
    assert_eq!(got, want, "each guest exactly once");
    assert_eq!(events_of(&db, booking.id).await[0].status, EventStatus::Done);
}

const SES_TIMEOUTS: &str = "SES_CONNECT_TIMEOUT_MS + SES_READ_TIMEOUT_MS";

#[test]
fn a_send_that_cannot_fit_in_the_function_timeout_is_refused_at_cold_start() {
    let mut config = PollerConfig::for_tests("cold");
    config.safety_margin = Duration::from_secs(15);
    config.function_timeout = Some(Duration::from_secs(20));
    let err = config.check_send_fits(Duration::from_secs(13), SES_TIMEOUTS).unwrap_err().to_string();
    assert!(err.contains("POLLER_TIMEOUT_SECS") && err.contains("SES_READ_TIMEOUT_MS"), "{err}");
    config.function_timeout = Some(Duration::from_secs(60));
    assert!(config.check_send_fits(Duration::from_secs(13), SES_TIMEOUTS).is_ok());
    // A local run capped at 15 s (make dev) must leave room for a send too.
    config.max_run = Some(Duration::from_secs(15));
    let err = config.check_send_fits(Duration::from_secs(13), SES_TIMEOUTS).unwrap_err().to_string();
    assert!(err.contains("POLLER_MAX_RUN_SECS"), "{err}");
    assert!(config.check_send_fits(Duration::from_secs(6), SES_TIMEOUTS).is_err(), "6 + 15 margin");
    config.safety_margin = Duration::from_secs(3);
    assert!(
        config.check_send_fits(Duration::from_secs(6), SES_TIMEOUTS).is_ok(),
        "1 s connect + 5 s read + 3 s margin < 15 s"
    );
}
