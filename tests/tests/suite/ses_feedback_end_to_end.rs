//! SES feedback end to end: the real SES v2 client sends through a fault
//! proxy to the local publisher (scripts/ses-publisher.py) in front of
//! moto; the publisher plays SES's event publishing for every message moto
//! accepted, and its events go through the feedback handler on a real
//! Postgres. Crashes in the fault run are real SIGKILLs of poller processes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use outbox_tests::outbox::*;
use outbox_tests::publisher::{claim_of, kind_of, Publisher};
use outbox_tests::ses::*;
use outbox_tests::{Rng, TestDb};
use shared::fault::Faults;
use shared::notify::feedback;
use shared::notify::sends::ConfirmedBy;
use shared::relay::{sweeper, FeedbackConfig, Poller, PollerConfig};
use uuid::Uuid;

const ALICE: &str = "alice@example.com";

struct Stack {
    db: TestDb,
    sender: String,
    publisher: Publisher,
}

async fn stack() -> Stack {
    let sender = unique_sender();
    verify_sender(&moto_endpoint(), &sender).await;
    Stack { db: TestDb::create().await, publisher: Publisher::start(&moto_endpoint()), sender }
}

impl Stack {
    /// Drains the outbox through `endpoint` with the real SES client.
    async fn drain_through(&self, endpoint: &str) {
        let mailer = ses_mailer(ses_config(endpoint, &self.sender));
        let poller =
            Poller::new(self.db.pool.clone(), Arc::new(mailer), Faults::none(), PollerConfig::for_tests("e2e"));
        poller.drain().await.unwrap();
    }

    /// Hands every published event to the feedback handler, as the
    /// ses-events function does, once there are at least `at_least`;
    /// returns how many sends they confirmed.
    async fn deliver_events(&self, at_least: usize) -> usize {
        let mut confirmed = 0;
        for event in self.publisher.settled_events(at_least, Duration::from_millis(500)).await {
            if let feedback::Handled::Recorded(feedback::Recorded::Recorded { confirmed: true, .. }) =
                feedback::handle(&self.db.pool, &outbox_tests::ses_events::origin(), &event).await.unwrap()
            {
                confirmed += 1;
            }
        }
        confirmed
    }

    fn messages_at_moto(&self) -> usize {
        sent_mail(&moto_endpoint(), &self.sender).len()
    }
}

async fn send_row(db: &TestDb) -> (Uuid, SendStatus, Option<ConfirmedBy>) {
    let client = db.pool.get().await.unwrap();
    let row = client.query_one("SELECT id, status, confirmed_by FROM booking_notification_sends", &[]).await.unwrap();
    let confirmed_by = row.get::<_, Option<&str>>(2).map(|c| c.parse().unwrap());
    (row.get(0), SendStatus::from_row(&row, "status").unwrap(), confirmed_by)
}

#[tokio::test]
async fn dropped_connection_send_is_confirmed_end_to_end_by_the_local_publisher() {
    let s = stack().await;
    let proxy = FaultProxy::start(&s.publisher.endpoint, vec![Fault::DropAfterForward]).await;
    create_booking(&s.db, 1, &[ALICE]).await;
    s.drain_through(&proxy.endpoint).await;
    let (claim, status, _) = send_row(&s.db).await;
    assert_eq!(status, SendStatus::Unknown, "the connection dropped after SES accepted the message");

    // Send and Delivery of the one message moto accepted.
    assert_eq!(s.deliver_events(2).await, 1);
    let events = s.publisher.events();
    assert_eq!(events.iter().map(kind_of).collect::<Vec<_>>(), vec!["Send", "Delivery"]);
    assert!(events.iter().all(|e| claim_of(e) == Some(claim)), "tagged with the claim");
    assert_eq!(send_row(&s.db).await, (claim, SendStatus::Sent, Some(ConfirmedBy::SesEvent)));
    assert_eq!(s.messages_at_moto(), 1);
    let kinds: Vec<String> =
        feedback::of_send(&s.db.pool.get().await.unwrap(), claim).await.unwrap().into_iter().map(|f| f.0).collect();
    assert_eq!(kinds, vec!["Send", "Delivery"]);
}

#[tokio::test]
async fn send_that_never_reached_ses_stays_not_confirmed_until_resent_once() {
    let s = stack().await;
    let proxy = FaultProxy::start(&s.publisher.endpoint, vec![Fault::Hang]).await;
    create_booking(&s.db, 1, &[ALICE]).await;
    s.drain_through(&proxy.endpoint).await;
    assert_eq!(send_row(&s.db).await.1, SendStatus::Unknown);
    assert_eq!(s.deliver_events(0).await, 0, "SES never saw it, so no event came");
    assert_eq!(s.messages_at_moto(), 0);

    // After the grace, the sweeper reports it; an operator resends it.
    let mut config = sweeper_config(8);
    config.feedback = FeedbackConfig::new(Duration::from_secs(1), None).unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let run = sweeper::run(&s.db.pool, &config).await.unwrap();
    assert_eq!((run.feedback.newly_unconfirmed, run.feedback.counts.not_confirmed), (1, 1));
    let mut client = s.db.pool.get().await.unwrap();
    let report = shared::notify::unknown::resend_unconfirmed(&mut client, config.feedback.grace, "oncall", 10, false)
        .await
        .unwrap();
    assert_eq!(report.resent.len(), 1);
    s.drain_through(&proxy.endpoint).await;
    s.deliver_events(2).await;
    assert_eq!(send_row(&s.db).await.1, SendStatus::Sent);
    assert_eq!(s.messages_at_moto(), 1, "delivered exactly once");
}

/// The fault run of the SES feedback issue, bounded: 150 bookings of 3
/// recipients, SES calls through a proxy that throttles 5 %, answers 500
/// for 2 %, drops 2 % after forwarding and delays 2 % past the read
/// timeout, and pollers (real processes) SIGKILLed at random.
#[tokio::test]
async fn fault_run_confirms_every_unknown_that_reached_ses_and_sends_no_duplicate() {
    let s = stack().await;
    let mix = [
        (Fault::Throttle, 50),
        (Fault::ServerError, 20),
        (Fault::DropAfterForward, 20),
        (Fault::DelayAfterForward, 20),
    ];
    let (mut rng, seed) = Rng::from_clock();
    println!("fault run seed {seed}");
    let proxy = FaultProxy::start_random(&s.publisher.endpoint, &mix, seed).await;
    let recipients = ["alice@example.com", "carol@example.com", "dave@example.com"];
    let bookings = 150;
    for slot in 0..bookings {
        create_booking(&s.db, slot, &recipients).await;
    }

    let worker_bin = env!("CARGO_BIN_EXE_outbox-worker");
    let worker = |endpoint: &str| {
        let mut cmd = tokio::process::Command::new(worker_bin);
        cmd.args(["drain", "/dev/null"])
            .env("DATABASE_URL", &s.db.url)
            .env("OUTBOX_WORKER_MAILER", "ses")
            .env("POLLER_CONCURRENCY", "4")
            .env("SES_ENDPOINT_URL", endpoint)
            .env("SES_FROM_ADDRESS", format!("Bookings <{}>", s.sender))
            .env("SES_MAX_SEND_RATE", "1000")
            .env("SES_CONNECT_TIMEOUT_MS", "1000")
            .env("SES_READ_TIMEOUT_MS", "1500")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "error")
            .kill_on_drop(true);
        cmd
    };
    let kills = kill_then_drain(&s.db, &mut rng, || worker(&proxy.endpoint)).await;

    let unknown_before: i64 = send_counts(&s.db).await[&SendStatus::Unknown];
    // Two events (Send, Delivery) for each message moto accepted.
    let confirmed = s.deliver_events(2 * s.messages_at_moto()).await;
    let after = send_counts(&s.db).await;
    let events = s.publisher.events();

    // Every message SES (moto) accepted was published once, and no
    // recipient of an event got it twice.
    let sends: Vec<&serde_json::Value> = events.iter().filter(|e| kind_of(e) == "Send").collect();
    assert_eq!(sends.len(), s.messages_at_moto(), "the publisher saw every accepted message");
    let mut per_recipient: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &sends {
        let event_id = e["detail"]["mail"]["tags"]["event_id"][0].as_str().unwrap().to_string();
        let to = e["detail"]["mail"]["destination"][0].as_str().unwrap().to_string();
        *per_recipient.entry((event_id, to)).or_default() += 1;
    }
    let duplicates: Vec<_> = per_recipient.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicates.is_empty(), "duplicates: {duplicates:?}");

    // Every claim SES accepted is SENT; what stays UNKNOWN never reached SES.
    let accepted: BTreeSet<Uuid> = sends.iter().filter_map(|e| claim_of(e)).collect();
    let client = s.db.pool.get().await.unwrap();
    let rows = client.query("SELECT id, status FROM booking_notification_sends", &[]).await.unwrap();
    for row in &rows {
        let (id, status): (Uuid, String) = (row.get(0), row.get(1));
        if accepted.contains(&id) {
            assert_eq!(status, "SENT", "claim {id} reached SES");
        } else {
            assert_ne!(status, "SENT", "claim {id} is SENT but SES never saw it");
        }
    }

    // No silent loss: every recipient of every event is accounted for.
    assert_eq!(rows.len(), bookings as usize * recipients.len(), "one claim per recipient");
    assert_eq!(event_counts(&s.db).await[&EventStatus::Done], bookings as i64);
    assert_eq!(after[&SendStatus::Sent] + after[&SendStatus::Unknown] + after[&SendStatus::Failed], rows.len() as i64);

    let applied = proxy.applied.lock().unwrap().clone();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    applied.iter().for_each(|f| *faults.entry(format!("{f:?}")).or_default() += 1);
    println!(
        "fault run: {} sends, {} SES calls ({faults:?}), {kills} pollers killed; UNKNOWN before feedback {unknown_before}, \
         confirmed by SES events {confirmed}, left not confirmed {} (every one never reached SES); duplicates 0",
        rows.len(),
        applied.len(),
        after[&SendStatus::Unknown],
    );
    assert_eq!(unknown_before - confirmed as i64, after[&SendStatus::Unknown]);
}
