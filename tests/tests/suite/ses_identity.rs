//! Issue 53: from an empty account to the first invitation. SES checks the
//! sender's identity on every send and, while the account is in the
//! sandbox, each recipient's too (the mailbox simulator's addresses
//! excepted). A sender SES does not know as verified (never verified, or
//! verified in another region) is the whole stack's configuration: sending
//! stops, alarmed, and nothing is failed or dead-lettered. A recipient the
//! sandbox refuses fails alone. The real SES v2 client, against moto and
//! against the stand-in in front of it in its sandbox mode.

use std::sync::Arc;
use std::time::Duration;

use outbox_tests::outbox::{create_booking, event_status, events_of, sweeper_config, EventStatus};
use outbox_tests::ses::{moto_endpoint, ses_config, ses_mailer, unique_sender, verify_sender};
use outbox_tests::ses_standin::{Identities, Limiter, Limits, SesStandIn, SANDBOX_DAILY_QUOTA, SIMULATOR};
use outbox_tests::TestDb;
use shared::fault::Faults;
use shared::notify::mailer::ses::identity::Verdict;
use shared::notify::mailer::ses::SesMailer;
use shared::notify::mailer::SendOutcome;
use shared::relay::{status, Poller, PollerConfig};

fn ses_poller(db: &TestDb, mailer: SesMailer) -> Poller {
    Poller::new(db.pool.clone(), Arc::new(mailer), Faults::none(), PollerConfig::for_tests("identity"))
}

/// `(recipient, status, last_error)` of each send, by recipient.
async fn sends_of(db: &TestDb, event: uuid::Uuid) -> Vec<(String, String, Option<String>)> {
    let client = db.pool.get().await.unwrap();
    let sql = "SELECT recipient_email, status, last_error FROM booking_notification_sends \
                WHERE outbox_event_id = $1 ORDER BY recipient_email";
    client.query(sql, &[&event]).await.unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
}

#[tokio::test]
async fn an_unverified_sender_stops_sending_stack_wide_and_every_invitation_goes_once_it_is_verified() {
    let endpoint = moto_endpoint();
    let sender = unique_sender(); // not verified in moto
    let db = TestDb::create().await;
    let first = create_booking(&db, 1, &["alice@example.com", "carol@example.com"]).await;
    let second = create_booking(&db, 2, &["dave@example.com"]).await;
    let poller = ses_poller(&db, ses_mailer(ses_config(&endpoint, &sender)));
    let summary = poller.drain().await.unwrap();
    // The first send's refusal stops the run: no recipient is FAILED, no
    // event is dead, no attempt is used, and the run says so.
    assert!(summary.paused, "{summary:?}");
    assert_eq!((summary.sent, summary.failed, summary.dead_lettered), (0, 0, 0), "{summary:?}");
    assert!(summary.misconfigured >= 1, "(those already in flight refused too) {summary:?}");
    let metrics: Vec<(&str, f64)> = summary.metrics().into_iter().map(|m| (m.0, m.1)).collect();
    assert!(metrics.contains(&("SendingStopped", 1.0)), "alarmed (SendingStoppedAlarm): {metrics:?}");
    let mut why = Vec::new();
    for booking in [&first, &second] {
        let event = events_of(&db, booking.id).await.remove(0);
        let (status, attempts, last_error) = event_status(&db, event.id).await;
        assert_eq!((status, attempts), (EventStatus::Pending, 0), "{last_error:?}");
        assert!(sends_of(&db, event.id).await.is_empty(), "nothing sent, nothing FAILED");
        why.extend(last_error);
    }
    assert!(
        why.iter().any(|w| w.starts_with("mailer misconfigured:") && w.contains("MessageRejected")),
        "the reason is SES's: {why:?}"
    );
    // `outboxctl status` says so, and why (the operator's role reads it).
    let operator = db.operator_pool().await;
    let status = status::fetch(&operator.get().await.unwrap(), &sweeper_config(8)).await.unwrap();
    let stopped = status.sending_stopped.expect("status names the stop");
    assert!(stopped.events >= 1 && stopped.reason.contains("MessageRejected"), "{stopped:?}");
    // The operator verifies the identity: the events go as they come due,
    // with no replay.
    verify_sender(&endpoint, &sender).await;
    db.pool.get().await.unwrap().execute("UPDATE outbox_events SET next_attempt_at = now()", &[]).await.unwrap();
    let summary = poller.drain().await.unwrap();
    assert_eq!((summary.sent, summary.paused), (3, false), "{summary:?}");
    let status = status::fetch(&operator.get().await.unwrap(), &sweeper_config(8)).await.unwrap();
    assert_eq!(status.sending_stopped, None);
}

#[tokio::test]
async fn in_the_sandbox_an_unverified_recipient_fails_alone_and_the_mailbox_simulator_is_delivered() {
    let moto = moto_endpoint();
    let sender = unique_sender();
    verify_sender(&moto, &sender).await;
    // The sandbox's 1 a second is not the point here (this poller is not paced).
    let standin = SesStandIn::start(Limits {
        rate: 100.0,
        limiter: Limiter::Sliding,
        reported: None,
        latency: Duration::from_millis(5),
        jitter: Duration::ZERO,
        upstream: Some(moto),
        identities: Some(Identities {
            verified: vec![sender.clone(), "carol@example.com".into()],
            sandbox: true,
            ..Default::default()
        }),
    })
    .await;
    let db = TestDb::create().await;
    let simulator = format!("success@{SIMULATOR}");
    let booking = create_booking(&db, 1, &["alice@example.com", "carol@example.com", &simulator]).await;
    let summary = ses_poller(&db, ses_mailer(ses_config(&standin.endpoint, &sender))).drain().await.unwrap();
    assert!(!summary.paused, "a recipient's refusal does not stop the stack: {summary:?}");
    assert_eq!((summary.sent, summary.failed, summary.misconfigured), (2, 1, 0), "{summary:?}");
    let event = events_of(&db, booking.id).await.remove(0).id;
    let sends = sends_of(&db, event).await;
    let status: Vec<(&str, &str)> = sends.iter().map(|(r, s, _)| (r.as_str(), s.as_str())).collect();
    assert_eq!(
        status,
        vec![("alice@example.com", "FAILED"), ("carol@example.com", "SENT"), (simulator.as_str(), "SENT")]
    );
    let alice = sends[0].2.as_deref().unwrap_or_default();
    assert!(alice.contains("SES sandbox sends only to verified addresses"), "{alice}");
    assert!(!alice.contains("alice@example.com"), "masked: {alice}");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
    let accepted: Vec<String> = standin.accepted().into_iter().map(|a| a.recipient).collect();
    assert_eq!(accepted.len(), 2, "{accepted:?}");
}

fn standin_limits(identities: Identities) -> Limits {
    Limits {
        rate: 1000.0,
        limiter: Limiter::Sliding,
        reported: None,
        latency: Duration::from_millis(2),
        jitter: Duration::ZERO,
        upstream: None,
        identities: Some(identities),
    }
}

/// Issue 65: the poller asks SES at cold start whether it sends from the
/// From address (`GetEmailIdentity`). An identity created but not verified
/// yet (the click, or the DNS records, still awaited) stops sending
/// stack-wide before any booking's send reaches SES: nothing FAILED, no
/// attempt used, the stop named with SES's answer. Once verified, the next
/// question (every minute while stopped) resumes sending.
#[tokio::test]
async fn a_from_identity_ses_will_not_send_from_stops_sending_before_any_send() {
    let sender = unique_sender();
    let standin =
        SesStandIn::start(standin_limits(Identities { pending: vec![sender.clone()], ..Default::default() })).await;
    let db = TestDb::create().await;
    let booking = create_booking(&db, 1, &["alice@example.com", "carol@example.com"]).await;
    let mailer = Arc::new(ses_mailer(ses_config(&standin.endpoint, &sender)));
    let verdict = mailer.check_identity().await;
    let Verdict::Refuses(reason) = &verdict else { panic!("{verdict:?}") };
    assert!(reason.contains("is not verified for sending (verification PENDING"), "{reason}");
    assert!(
        reason.contains("example.com is no identity of this account in us-east-1"),
        "its domain asked too: {reason}"
    );

    let poller = Poller::new(db.pool.clone(), mailer.clone(), Faults::none(), PollerConfig::for_tests("identity"));
    let summary = poller.drain().await.unwrap();
    assert!(summary.paused, "{summary:?}");
    assert_eq!((summary.sent, summary.failed, summary.dead_lettered), (0, 0, 0), "{summary:?}");
    assert_eq!(standin.send_calls(), 0, "no send reached SES");
    let event = events_of(&db, booking.id).await.remove(0);
    let (status, attempts, last_error) = event_status(&db, event.id).await;
    assert_eq!((status, attempts), (EventStatus::Pending, 0), "{last_error:?}");
    let operator = db.operator_pool().await;
    let stopped = status::fetch(&operator.get().await.unwrap(), &sweeper_config(8)).await.unwrap().sending_stopped;
    let stopped = stopped.expect("status names the stop");
    assert!(stopped.reason.contains("SES will not send from") && stopped.reason.contains("PENDING"), "{stopped:?}");

    // The identity's verification completes: the next question resumes
    // sending, and the invitations go with no replay.
    standin.verify(&sender);
    assert!(matches!(mailer.check_identity().await, Verdict::Sends { .. }));
    db.pool.get().await.unwrap().execute("UPDATE outbox_events SET next_attempt_at = now()", &[]).await.unwrap();
    let summary = poller.drain().await.unwrap();
    assert_eq!((summary.sent, summary.paused), (2, false), "{summary:?}");
    assert_eq!(standin.send_calls(), 2);
}

/// SES sends from an address whose domain is verified (with DKIM), and
/// from none of an identity this account does not have in the region.
#[tokio::test]
async fn the_from_addresss_domain_verifies_it_and_an_identity_of_another_region_does_not() {
    let domain = format!("{}.example.org", uuid::Uuid::now_v7().simple());
    let from = format!("bookings@{domain}");
    let standin =
        SesStandIn::start(standin_limits(Identities { verified: vec![domain.clone()], ..Default::default() })).await;
    let verdict = ses_mailer(ses_config(&standin.endpoint, &from)).check_identity().await;
    assert_eq!(verdict, Verdict::Sends { identity: domain, dkim: Some("SUCCESS".into()) });
    let verdict = ses_mailer(ses_config(&standin.endpoint, "bookings@elsewhere.example.net")).check_identity().await;
    let Verdict::Refuses(reason) = verdict else { panic!("{verdict:?}") };
    assert!(
        reason.contains("bookings@elsewhere.example.net is no identity of this account in us-east-1")
            && reason.contains("verify the address or its domain in SES in us-east-1"),
        "{reason}"
    );
}

/// The SES sandbox sends at most 200 messages in 24 hours; the 201st is
/// SES's throttling error (docs: "Daily message quota exceeded"), which the
/// poller reads as sending paused (released, nothing FAILED, no attempt
/// used, the run stops and the next tries one send after the pause), not a
/// throttle retried at once all day; `GetAccount` says the account is in
/// the sandbox with that quota.
#[tokio::test]
async fn the_sandbox_sends_200_messages_a_day_and_the_201st_pauses_sending_as_ses_advises() {
    let sender = unique_sender();
    let standin = SesStandIn::start(standin_limits(Identities {
        verified: vec![sender.clone()],
        sandbox: true,
        ..Default::default()
    }))
    .await;
    let client = aws_sdk_sesv2::Client::new(&outbox_tests::ses::sdk_config_for(&standin.endpoint));
    let account = client.get_account().send().await.unwrap();
    assert!(!account.production_access_enabled());
    assert_eq!(account.send_quota().map(|q| q.max24_hour_send()), Some(SANDBOX_DAILY_QUOTA as f64));
    let send = || {
        let text = aws_sdk_sesv2::types::Content::builder().data("x").build().unwrap();
        let message = aws_sdk_sesv2::types::Message::builder()
            .subject(text.clone())
            .body(aws_sdk_sesv2::types::Body::builder().text(text).build())
            .build();
        client
            .send_email()
            .from_email_address(&sender)
            .destination(
                aws_sdk_sesv2::types::Destination::builder().to_addresses(format!("success@{SIMULATOR}")).build(),
            )
            .content(aws_sdk_sesv2::types::EmailContent::builder().simple(message).build())
            .send()
    };
    for i in 0..SANDBOX_DAILY_QUOTA {
        send().await.unwrap_or_else(|e| panic!("message {}: {e:?}", i + 1));
    }
    let refused = send().await.expect_err("the 201st message of the day");
    let outcome = shared::notify::mailer::ses::classify(&refused, &sender);
    assert!(
        matches!(&outcome, SendOutcome::Paused { reason } if reason.contains("Daily message quota exceeded")),
        "{outcome:?}"
    );
    assert_eq!(standin.accepted().len(), SANDBOX_DAILY_QUOTA);
}

/// The question runs in the cold start, which Lambda cuts at 10 s: an SES
/// that does not answer within the budget (here 5 s late, past the SDK's
/// own read timeout too) gives no verdict, and stops nothing: a send's own
/// answer still classifies a refusal.
#[tokio::test]
async fn a_from_identity_question_ses_does_not_answer_in_time_stops_nothing() {
    let sender = unique_sender();
    let mut limits = standin_limits(Identities { pending: vec![sender.clone()], ..Default::default() });
    limits.latency = Duration::from_secs(10);
    let standin = SesStandIn::start(limits).await;
    let mut config = ses_config(&standin.endpoint, &sender);
    config.read_timeout = Duration::from_secs(30);
    let started = std::time::Instant::now();
    let verdict = ses_mailer(config).check_identity().await;
    assert!(matches!(&verdict, Verdict::Unknown(why) if why.contains("did not answer within 3s")), "{verdict:?}");
    println!("no verdict after {:?} (budget {:?})", started.elapsed(), shared::notify::mailer::ses::identity::BUDGET);
}
