//! SES's evidence end to end: the real SES v2 client sends through a fault
//! proxy to the local publisher (scripts/ses-publisher.py) in front of
//! moto; the publisher plays SES's event publishing for every message moto
//! accepted (Send, Delivery, stamped with when it accepted it), and an
//! [`EventStream`] hands its events to the feedback handler on a real
//! Postgres as EventBridge and the ses-events function would: promptly,
//! late, with some lost, or stopped. The sweeper resends an ambiguous send
//! only on that evidence; canaries move it when traffic does not. Crashes
//! in the fault runs are real SIGKILLs of poller processes, paced as the
//! poller Lambda is.

use const_format::formatcp;
use shared::outbox::events::status::sql::PROCESSING;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use outbox_tests::outbox::*;
use outbox_tests::publisher::{claim_of, kind_of, Delivery, EventStream, Publisher};
use outbox_tests::ses::*;
use outbox_tests::{wait_until, Rng, TestDb};
use serde_json::Value;
use shared::fault::Faults;
use shared::notify::evidence::feedback;
use shared::notify::evidence::intake;
use shared::notify::mailer::ses::SesConfig;
use shared::notify::sends::ConfirmedBy;
use shared::relay::{sweeper, FeedbackConfig, Poller, PollerConfig, SweeperConfig};
use uuid::Uuid;

const ALICE: &str = "alice@example.com";
const CANARY_TO: &str = "success@simulator.amazonses.com";

struct Stack {
    db: TestDb,
    sender: String,
    config_set: String,
    publisher: Publisher,
}

async fn stack() -> Stack {
    let sender = unique_sender();
    verify_sender(&moto_endpoint(), &sender).await;
    // The set ses-events is configured with (`origin()`): only its events are read.
    let config_set = outbox_tests::ses_events::CONFIGURATION_SET.to_string();
    Stack { db: TestDb::create().await, publisher: Publisher::start(&moto_endpoint()), sender, config_set }
}

impl Stack {
    /// The poller's SES settings through `endpoint`: the configuration set
    /// (so SES publishes events) and the canary.
    fn ses(&self, endpoint: &str) -> SesConfig {
        SesConfig {
            configuration_set: Some(self.config_set.clone()),
            canary_to: Some(CANARY_TO.into()),
            ..ses_config(endpoint, &self.sender)
        }
    }

    fn poller(&self, endpoint: &str) -> Poller {
        let mut config = PollerConfig::for_tests("e2e");
        config.canary_every = Duration::from_millis(500);
        Poller::new(self.db.pool.clone(), Arc::new(ses_mailer(self.ses(endpoint))), Faults::none(), config)
    }

    /// Drains the outbox through `endpoint` with the real SES client.
    async fn drain_through(&self, endpoint: &str) {
        self.poller(endpoint).drain().await.unwrap();
    }

    /// Hands every published event to the feedback handler, as the
    /// ses-events function does, once there are at least `at_least`;
    /// returns how many sends they confirmed.
    async fn deliver_events(&self, at_least: usize) -> usize {
        let mut confirmed = 0;
        for event in self.publisher.settled_events(at_least, Duration::from_millis(500)).await {
            if let intake::Handled::Recorded(feedback::Recorded::Recorded { confirmed: true, .. }) =
                intake::handle(&self.db.pool, &outbox_tests::ses_events::origin(), &event).await.unwrap()
            {
                confirmed += 1;
            }
        }
        confirmed
    }

    /// Invitations moto accepted (raw messages: a canary is a simple one).
    fn invitations_at_moto(&self) -> usize {
        sent_mail(&moto_endpoint(), &self.sender).len()
    }

    /// A poller process (`outbox-worker CMD`) sending through `endpoint`
    /// with the real SES client, paced as the poller Lambda is, with
    /// [`IN_FLIGHT`] sends in flight and canaries every second.
    fn worker(&self, endpoint: &str, cmd: &str) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-worker"));
        c.args([cmd, "/dev/null"])
            .env("DATABASE_URL", &self.db.url)
            .env("OUTBOX_WORKER_MAILER", "ses")
            .env("SES_ENDPOINT_URL", endpoint)
            .env("SES_FROM_ADDRESS", format!("Bookings <{}>", self.sender))
            .env("SES_CONFIGURATION_SET", &self.config_set)
            .env("SES_CANARY_ADDRESS", CANARY_TO)
            .env("SES_CANARY_EVERY_SECS", "1")
            .env("SES_MAX_SEND_RATE", "1000")
            .env("POLLER_CONCURRENCY", IN_FLIGHT.to_string())
            .env("SES_CONNECT_TIMEOUT_MS", "1000")
            .env("SES_READ_TIMEOUT_MS", "1500")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("RUST_LOG", "error")
            .kill_on_drop(true);
        c
    }

    /// The Send events the publisher wrote for claims (not canaries).
    fn accepted_sends(&self) -> Vec<Value> {
        self.publisher.events().into_iter().filter(|e| kind_of(e) == "Send" && claim_of(e).is_some()).collect()
    }

    /// From SES's own log (the Send events of claims): asserts that no
    /// claim and no recipient of an event was accepted twice, and returns
    /// how often each claim was (once).
    fn accepted_once(&self) -> BTreeMap<Uuid, usize> {
        let mut by_claim: BTreeMap<Uuid, usize> = BTreeMap::new();
        let mut by_recipient: BTreeMap<(String, String), usize> = BTreeMap::new();
        for e in &self.accepted_sends() {
            *by_claim.entry(claim_of(e).unwrap()).or_default() += 1;
            *by_recipient.entry((event_of(e), recipient_of(e))).or_default() += 1;
        }
        let dup_claims: Vec<_> = by_claim.iter().filter(|(_, n)| **n > 1).collect();
        let dup_recipients: Vec<_> = by_recipient.iter().filter(|(_, n)| **n > 1).collect();
        assert!(dup_claims.is_empty(), "a claim accepted twice: {dup_claims:?}");
        assert!(dup_recipients.is_empty(), "a recipient of an event got it twice: {dup_recipients:?}");
        by_claim
    }

    /// How many `(event, recipient)` SES accepted.
    fn recipients_reached(&self) -> usize {
        self.accepted_sends().iter().map(|e| (event_of(e), recipient_of(e))).collect::<BTreeSet<_>>().len()
    }
}

fn event_of(send: &Value) -> String {
    send["detail"]["mail"]["tags"]["event_id"][0].as_str().unwrap().to_string()
}

fn recipient_of(send: &Value) -> String {
    send["detail"]["mail"]["destination"][0].as_str().unwrap().to_string()
}

async fn send_row(db: &TestDb) -> (Uuid, SendStatus, Option<ConfirmedBy>) {
    let client = db.pool.get().await.unwrap();
    let row = client.query_one("SELECT id, status, confirmed_by FROM booking_notification_sends", &[]).await.unwrap();
    let confirmed_by = row.get::<_, Option<&str>>(2).map(|c| c.parse().unwrap());
    (row.get(0), SendStatus::from_row(&row, "status").unwrap(), confirmed_by)
}

fn sweeper_with_grace(grace: Duration) -> SweeperConfig {
    let mut config = sweeper_config(8);
    config.feedback = FeedbackConfig::new(grace, 3).unwrap();
    config
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
    assert_eq!(s.invitations_at_moto(), 1);
    let kinds: Vec<String> =
        feedback::of_send(&s.db.pool.get().await.unwrap(), claim).await.unwrap().into_iter().map(|f| f.0).collect();
    assert_eq!(kinds, vec!["Send", "Delivery"]);
}

/// The send never reached SES (the call hung until the read timeout). No
/// operator: canaries to SES's mailbox simulator move the watermark past
/// it and show the stream alive a grace later, the sweeper resends it, and
/// it arrives once.
#[tokio::test]
async fn send_that_never_reached_ses_is_resent_once_on_ses_evidence_with_no_operator() {
    let s = stack().await;
    let proxy = FaultProxy::start(&s.publisher.endpoint, vec![Fault::Hang]).await;
    create_booking(&s.db, 1, &[ALICE]).await;
    s.drain_through(&proxy.endpoint).await;
    assert_eq!(send_row(&s.db).await.1, SendStatus::Unknown);
    let stream = EventStream::start(s.publisher.events_path(), s.db.pool.clone(), Delivery::default());
    let grace = Duration::from_secs(30);

    // Quiet: a canary goes out, and its events move the watermark past it.
    a_minute_passes(&s.db).await;
    let poller = s.poller(&proxy.endpoint);
    assert!(poller.canary().await.unwrap().is_some());
    assert!(wait_until(Duration::from_secs(10), async || stream.handed() >= 2).await, "the canary's events came");
    let run = sweeper::run(&s.db.pool, &sweeper_with_grace(grace)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 0, "within the grace its own event may still come");

    // A minute later, still quiet: a second canary shows the stream alive
    // past the grace; no event named the send: it is resent.
    a_minute_passes(&s.db).await;
    assert!(poller.canary().await.unwrap().is_some());
    assert!(wait_until(Duration::from_secs(10), async || stream.handed() >= 4).await);
    let run = sweeper::run(&s.db.pool, &sweeper_with_grace(grace)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 1, "{:?}", run.feedback);
    s.drain_through(&proxy.endpoint).await;
    assert!(wait_until(Duration::from_secs(10), async || send_row(&s.db).await.1 == SendStatus::Sent).await);
    assert_eq!(s.invitations_at_moto(), 1, "delivered exactly once");
}

/// One message SES accepted (the connection dropped after), whose Send
/// event is lost on the way: its Delivery event still names the claim,
/// confirms it, and nothing is resent.
#[tokio::test]
async fn accepted_send_whose_send_event_alone_is_lost_is_confirmed_by_its_delivery_event() {
    let s = stack().await;
    let proxy = FaultProxy::start(&s.publisher.endpoint, vec![Fault::DropAfterForward]).await;
    create_booking(&s.db, 1, &[ALICE]).await;
    s.drain_through(&proxy.endpoint).await;
    let (claim, ..) = send_row(&s.db).await;
    let lost = Delivery { lost_claims: vec![claim], lost_kind: Some("Send"), ..Delivery::default() };
    let _stream = EventStream::start(s.publisher.events_path(), s.db.pool.clone(), lost);
    assert!(wait_until(Duration::from_secs(10), async || send_row(&s.db).await.1 == SendStatus::Sent).await);
    a_minute_passes(&s.db).await;
    let run = sweeper::run(&s.db.pool, &sweeper_with_grace(Duration::from_secs(30))).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 0);
    assert_eq!(s.invitations_at_moto(), 1);
}

/// The residual risk, stated by the test: SES accepted the message (the
/// connection dropped after), and every event about it is lost on the way
/// (EventBridge delivers "on a best-effort basis"). The stream moved past
/// it and named it nowhere, so it is resent: the recipient gets it twice.
/// The watermark cannot see a message whose every event is lost.
#[tokio::test]
async fn accepted_send_whose_every_event_is_lost_is_resent_and_arrives_twice_the_risk_no_evidence_removes() {
    let s = stack().await;
    let proxy = FaultProxy::start(&s.publisher.endpoint, vec![Fault::DropAfterForward]).await;
    create_booking(&s.db, 1, &[ALICE]).await;
    s.drain_through(&proxy.endpoint).await;
    let (claim, ..) = send_row(&s.db).await;
    let stream = EventStream::start(
        s.publisher.events_path(),
        s.db.pool.clone(),
        Delivery { lost_claims: vec![claim], ..Delivery::default() },
    );
    let poller = s.poller(&proxy.endpoint);
    for round in 1..=2 {
        a_minute_passes(&s.db).await;
        assert!(poller.canary().await.unwrap().is_some());
        assert!(wait_until(Duration::from_secs(10), async || stream.handed() >= 2 * round).await);
    }
    let run = sweeper::run(&s.db.pool, &sweeper_with_grace(Duration::from_secs(30))).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 1, "{:?}", run.feedback);
    s.drain_through(&proxy.endpoint).await;
    assert_eq!(s.invitations_at_moto(), 2, "a duplicate: the one case evidence cannot rule out");
}

/// What one fault run did.
#[derive(Debug, Default)]
struct FaultRun {
    kills: usize,
    /// Claims a killed poller left CLAIMED, found by the next attempt.
    orphans: i64,
    /// Orphans whose message never reached SES.
    orphans_never_sent: usize,
    confirmed_by_ses: i64,
    resent_on_evidence: i64,
    left_for_operator: i64,
    /// SES calls, by the fault each got.
    faults: BTreeMap<String, usize>,
    /// Resends decided after the stream stopped (plus one sweeper period).
    resent_after_stop: i64,
    /// The most `EvidenceStalled` + `SesEventsBehind` the sweeper reported.
    alarm: i64,
}

/// How a fault run's event stream behaves.
#[derive(Clone, Copy)]
enum Stream {
    Prompt,
    /// Every event arrives this late.
    Late(Duration),
    /// Held from when the publisher has written half of what the run will
    /// have it write, for this long, then resumed.
    StoppedHalfway(Duration),
}

const GRACE: Duration = Duration::from_secs(2);
/// Each poller's sends in flight (`POLLER_CONCURRENCY`): the most one
/// crash may leave UNKNOWN.
const IN_FLIGHT: usize = 4;

/// The fault runs' proxy in front of the publisher: it throttles 5 % of the
/// SES calls, answers 500 without forwarding for 2 %, forwards then drops
/// the connection for 2 % and forwards then answers past the read timeout
/// for 2 %, by a seed from the clock (printed), which also seeds the run.
async fn faulty_proxy(s: &Stack, run: &str) -> (FaultProxy, Rng) {
    let mix = [
        (Fault::Throttle, 50),
        (Fault::ServerError, 20),
        (Fault::DropAfterForward, 20),
        (Fault::DelayAfterForward, 20),
    ];
    let (rng, seed) = Rng::from_clock();
    println!("{run} seed {seed}");
    (FaultProxy::start_random(&s.publisher.endpoint, &mix, seed).await, rng)
}

/// The fault run, bounded: 150 bookings of 3 recipients, SES calls through
/// a proxy that throttles 5 %, answers 500 without forwarding for 2 %,
/// forwards then drops the connection for 2 % and forwards then answers
/// past the read timeout for 2 %; poller processes (paced as the Lambda
/// is, sending canaries at each start) SIGKILLed at random; the sweeper
/// every 200 ms with a grace of 2 s, then on until every recipient is
/// settled. Asserts 0 duplicates and every recipient delivered exactly once.
async fn fault_run(s: &Stack, stream: Stream) -> FaultRun {
    let (proxy, mut rng) = faulty_proxy(s, "fault run").await;
    let recipients = ["alice@example.com", "carol@example.com", "dave@example.com"];
    let bookings = 150;
    for slot in 0..bookings {
        create_booking(&s.db, slot, &recipients).await;
    }
    let delivery =
        Delivery { delay: if let Stream::Late(d) = stream { d } else { Duration::ZERO }, ..Default::default() };
    let events = Arc::new(EventStream::start(s.publisher.events_path(), s.db.pool.clone(), delivery));
    let stopped_at: Arc<std::sync::Mutex<Option<chrono::DateTime<chrono::Utc>>>> = Default::default();
    let mut run = FaultRun::default();

    // The sweeper, on its own schedule (scaled down), and the stop.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeping = {
        let (pool, events, stopped_at, done) = (s.db.pool.clone(), events.clone(), stopped_at.clone(), done.clone());
        let half = bookings as usize * recipients.len();
        let published = s.publisher.events_path();
        tokio::spawn(async move {
            let mut alarm = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Stream::StoppedHalfway(hold) = stream {
                    let written = std::fs::read_to_string(&published).unwrap_or_default().lines().count();
                    let stop = *stopped_at.lock().unwrap();
                    match stop {
                        None if written >= half => {
                            events.stop();
                            *stopped_at.lock().unwrap() = Some(chrono::Utc::now());
                        }
                        Some(at) if chrono::Utc::now() - at > chrono::Duration::from_std(hold).unwrap() => {
                            events.resume()
                        }
                        _ => {}
                    }
                }
                let r = sweeper::run(&pool, &sweeper_with_grace(GRACE)).await.unwrap();
                alarm = alarm.max(r.feedback.counts.evidence_stalled + r.feedback.events_behind);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            alarm
        })
    };

    let worker = |endpoint: &str| s.worker(endpoint, "drain");
    run.kills = kill_then_drain(&s.db, &mut rng, || worker(&proxy.endpoint)).await;

    // Then until every recipient is settled: resends run, canaries go out.
    let all = bookings as i64 * recipients.len() as i64;
    let settled = wait_until(Duration::from_secs(120), async || {
        let status = worker(&proxy.endpoint).status().await.unwrap();
        assert!(status.success());
        let counts = send_counts(&s.db).await;
        let events = event_counts(&s.db).await;
        counts[&SendStatus::Sent] == all && events[&EventStatus::Done] == bookings as i64
    })
    .await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    run.alarm = sweeping.await.unwrap();

    let by_claim = s.accepted_once();
    assert!(
        settled,
        "every recipient settled: sends {:?}, events {:?}",
        send_counts(&s.db).await,
        event_counts(&s.db).await
    );
    assert_eq!(s.recipients_reached(), all as usize, "every recipient of every event reached SES, exactly once");

    let client = s.db.pool.get().await.unwrap();
    let orphaned = shared::notify::sends::outcome::ORPHANED;
    let orphan_ids: Vec<Uuid> = client
        .query(
            "SELECT id FROM booking_notification_sends WHERE last_error = $1 \
             UNION ALL SELECT send_id FROM notification_resends WHERE previous_error = $1",
            &[&orphaned],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let reached: BTreeSet<Uuid> = by_claim.keys().copied().collect();
    run.orphans = orphan_ids.len() as i64;
    run.orphans_never_sent = orphan_ids.iter().filter(|id| !reached.contains(id)).count();
    let counts = shared::notify::evidence::resend::counts(&client, GRACE).await.unwrap();
    (run.confirmed_by_ses, run.resent_on_evidence, run.left_for_operator) =
        (counts.confirmed_by_ses, counts.resent_on_evidence, counts.left_for_operator);
    assert_eq!(run.left_for_operator, 0, "nothing left for an operator");
    // A crash costs the sends in flight and those that ended while the
    // write of earlier outcomes was in flight (one write at a time: at most
    // the places again), never a claim group waiting for the rate (before
    // claims were made just in time: 2.0 to 21.2 a kill, at these settings).
    assert!(
        run.orphans <= (run.kills * 2 * IN_FLIGHT) as i64,
        "{} orphans from {} kills of pollers with {IN_FLIGHT} sends in flight",
        run.orphans,
        run.kills
    );
    let stopped = *stopped_at.lock().unwrap();
    if let Some(at) = stopped {
        run.resent_after_stop = client
            .query_one(
                "SELECT count(*) FROM notification_resends WHERE decided_at > $1::timestamptz + interval '500 ms' \
                   AND decided_at < $1::timestamptz + make_interval(secs => $2)",
                &[&at, &hold_of(stream).as_secs_f64()],
            )
            .await
            .unwrap()
            .get(0);
    }
    for f in proxy.applied.lock().unwrap().iter() {
        *run.faults.entry(format!("{f:?}")).or_default() += 1;
    }
    println!(
        "fault run: {all} sends, SES calls {:?}; {} pollers killed, orphans {} ({:.1} a kill, {} never reached SES); \
         confirmed by SES's events {}, resent on SES's evidence {}, left for an operator {}; duplicates 0; \
         every recipient exactly once",
        run.faults,
        run.kills,
        run.orphans,
        run.orphans as f64 / run.kills.max(1) as f64,
        run.orphans_never_sent,
        run.confirmed_by_ses,
        run.resent_on_evidence,
        run.left_for_operator,
    );
    run
}

fn hold_of(stream: Stream) -> Duration {
    match stream {
        Stream::StoppedHalfway(hold) => hold,
        _ => Duration::ZERO,
    }
}

#[tokio::test]
async fn fault_run_delivers_every_recipient_exactly_once_with_no_operator() {
    let s = stack().await;
    let run = fault_run(&s, Stream::Prompt).await;
    assert!(run.faults.get("ServerError").is_some_and(|n| *n > 0), "faults applied: {:?}", run.faults);
}

/// The event stream stops once half of the run's events are published:
/// nothing is resent while it is stopped (its silence proves nothing), the
/// alarm fires, and once it resumes every recipient is settled exactly once.
#[tokio::test]
async fn fault_run_with_the_event_stream_stopped_halfway_resends_nothing_while_stopped() {
    let s = stack().await;
    let run = fault_run(&s, Stream::StoppedHalfway(Duration::from_secs(8))).await;
    assert_eq!(run.resent_after_stop, 0, "nothing resent while the stream was stopped");
    assert!(run.alarm > 0, "the alarm fired (EvidenceStalled or SesEventsBehind)");
}

/// Every event arrives three graces late: the stream moves, but behind,
/// so nothing is resent on its evidence until it catches up, and no
/// recipient gets two.
#[tokio::test]
async fn fault_run_with_a_late_event_stream_sends_no_duplicate() {
    let s = stack().await;
    let run = fault_run(&s, Stream::Late(GRACE * 3)).await;
    assert!(run.alarm > 0, "the stream's lag was reported (SesEventsBehind)");
}

/// What one kill in the take-over fault run cost.
#[derive(Debug)]
struct Kill {
    worker: String,
    at: std::time::Instant,
    /// The events it held (PROCESSING under its lease) when it died.
    held: Vec<Uuid>,
    /// When the last of them was claimed again (or settled) since.
    next_claim: Option<std::time::Instant>,
}

/// Records, for each kill, when every event the dead poller held has been
/// claimed by another (it left the dead one's hands).
async fn watch_take_overs(db: &TestDb, kills: &mut [Kill]) {
    let client = db.pool.get().await.unwrap();
    for k in kills.iter_mut().filter(|k| k.next_claim.is_none()) {
        let still: i64 = client
            .query_one(
                formatcp!("SELECT count(*) FROM outbox_events WHERE id = ANY($1) AND status = {PROCESSING} AND locked_by = $2"),
                &[&k.held, &k.worker],
            )
            .await
            .unwrap()
            .get(0);
        if still == 0 {
            k.next_claim = Some(std::time::Instant::now());
        }
    }
}

/// The fault run with **no sweeper at all** (issue 51), at the template's
/// lease (4 s, renewed every second) and idle wait (200 ms): 120 bookings
/// of 3 recipients, 40 of them rescheduled at once (a later event waits
/// behind each), through the same faulty SES proxy at 40 sends a second
/// (so the run lasts its kills); two poller processes
/// live at every moment (the deployed shape: each minute's run starts
/// while the two before it poll), one of them SIGKILLed every 0.4–1.6 s
/// and replaced at once, 12 kills. Every event must end DONE through
/// take-overs alone; then SES's evidence (the events the publisher writes,
/// and the resends it justifies, called directly: no sweep of stuck rows)
/// settles the sends the kills left ambiguous. Prints the time from each
/// kill to the next claim of the events it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_run_with_no_sweeper_takes_each_killed_pollers_events_over_within_seconds() {
    let s = stack().await;
    let (proxy, mut rng) = faulty_proxy(&s, "take-over fault run").await;
    let recipients = ["alice@example.com", "carol@example.com", "dave@example.com"];
    let service = shared::booking::service::BookingService::new(
        s.db.pool.clone(),
        Faults::none(),
        shared::booking::limits::Limits::UNLIMITED,
    );
    let moved = shared::booking::domain::BookingChanges {
        title: Some(shared::booking::domain::Title::parse("Moved").unwrap()),
        ..Default::default()
    };
    let bookings = 120;
    for slot in 0..bookings {
        let booking = create_booking(&s.db, slot, &recipients).await;
        if slot % 3 == 0 {
            service.update(&organizer(), booking.id, &moved, 1).await.unwrap();
        }
    }
    let events = EventStream::start(s.publisher.events_path(), s.db.pool.clone(), Delivery::default());
    let lease = shared::relay::PollerConfig::for_tests("-").lease;
    let run = |s: &Stack| {
        let mut c = s.worker(&proxy.endpoint, "invoke");
        // At 40 sends a second the run lasts the 12 kills, so each finds
        // work in flight.
        c.env("OUTBOX_WORKER_RUN_SECS", "8").env("POLLER_IDLE_WAIT_MS", "200").env("SES_MAX_SEND_RATE", "40");
        c.spawn().unwrap()
    };
    let mut live: Vec<(tokio::process::Child, std::time::Instant)> = Vec::new();
    let mut kills: Vec<Kill> = Vec::new();
    let started = std::time::Instant::now();
    let mut next_kill = started + Duration::from_millis(400 + rng.below(1200));
    loop {
        assert!(started.elapsed() < Duration::from_secs(150), "every event ends DONE through take-overs alone");
        // Two pollers live at every moment: one that ended is replaced.
        live.retain_mut(|(c, _)| c.try_wait().unwrap().is_none());
        while live.len() < 2 {
            live.push((run(&s), std::time::Instant::now()));
        }
        if kills.len() < 12 && std::time::Instant::now() >= next_kill {
            // The older of the two, so a kill always finds one at work.
            let (mut child, _) = live.remove(0);
            let worker = format!("child-{}", child.id().unwrap());
            child.start_kill().unwrap(); // SIGKILL
            child.wait().await.unwrap();
            let at = std::time::Instant::now();
            let held: Vec<Uuid> =
                s.db.pool
                    .get()
                    .await
                    .unwrap()
                    .query(
                        formatcp!("SELECT id FROM outbox_events WHERE status = {PROCESSING} AND locked_by = $1"),
                        &[&worker],
                    )
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
            kills.push(Kill { worker, at, held, next_claim: None });
            next_kill = at + Duration::from_millis(400 + rng.below(1200));
        }
        watch_take_overs(&s.db, &mut kills).await;
        let counts = event_counts(&s.db).await;
        if kills.len() == 12 && counts[&EventStatus::Pending] + counts[&EventStatus::Processing] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (mut c, _) in live {
        c.start_kill().unwrap();
        c.wait().await.unwrap();
    }
    let counts = event_counts(&s.db).await;
    assert_eq!(counts[&EventStatus::Done], bookings as i64 + 40, "every event DONE, none dead: {counts:?}");

    let mut worst = Duration::ZERO;
    let mut held = 0;
    for k in &kills {
        let took = k.next_claim.map(|t| t.duration_since(k.at));
        println!("kill of {}: held {} events, kill -> next claim {took:?}", k.worker, k.held.len());
        held += k.held.len();
        if !k.held.is_empty() {
            worst = worst.max(took.expect("taken over"));
        }
    }
    println!(
        "take-over fault run (no sweeper, lease {lease:?}): {} kills holding {held} events; kill -> next claim max \
         {:.2} s",
        kills.len(),
        worst.as_secs_f64()
    );
    assert!(held > 0, "the kills found pollers at work");
    // The lease, then the next claim of a live poller: seconds, not the
    // sweeper's minutes (there is none here). What the code controls is
    // that a live poller takes them over once the lease ends; the seconds
    // beyond it are this machine's load (two cores, the suite and CI's
    // release build beside it: 6.05 s and 7.12 s were seen), so the bound
    // only separates seconds from minutes, and the figure is printed above
    // (make bench-production measures it on a quiet machine).
    assert!(worst <= lease + Duration::from_secs(10), "a dead poller's events waited {worst:?} for a take-over");

    // SES's evidence settles what the kills left ambiguous: its events
    // confirm what it accepted, and what it never saw is resent once its
    // stream moved past it (the step the sweeper runs, called alone).
    let all = (bookings as usize + 40) * recipients.len();
    let settled = wait_until(Duration::from_secs(120), async || {
        let mut client = s.db.pool.get().await.unwrap();
        shared::notify::evidence::resend::settle_on_evidence(&mut client, GRACE, 3, 500).await.unwrap();
        assert!(s.worker(&proxy.endpoint, "drain").status().await.unwrap().success());
        let sends = send_counts(&s.db).await;
        sends[&SendStatus::Unknown] + sends[&SendStatus::Claimed] == 0
            && event_counts(&s.db).await[&EventStatus::Done] == bookings as i64 + 40
    })
    .await;
    drop(events);
    assert!(settled, "every send settled: {:?}", send_counts(&s.db).await);
    s.accepted_once();
    // Every recipient told of each booking's final state; an invitation a
    // later update superseded may never go (the update told them).
    let superseded = send_counts(&s.db).await[&SendStatus::Superseded] as usize;
    assert_eq!(s.recipients_reached() + superseded, all, "every recipient reached");

    // Order: per booking and recipient, what SES accepted, in the order it
    // accepted it, is in version order.
    let client = s.db.pool.get().await.unwrap();
    let versions: BTreeMap<String, (Uuid, i32)> = client
        .query("SELECT id::text, aggregate_id, aggregate_version FROM outbox_events", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let mut seen: BTreeMap<(Uuid, String), (chrono::DateTime<chrono::FixedOffset>, i32)> = BTreeMap::new();
    let accepted_at =
        |e: &Value| chrono::DateTime::parse_from_rfc3339(e["detail"]["mail"]["timestamp"].as_str().unwrap()).unwrap();
    let mut sends = s.accepted_sends();
    sends.sort_by_key(accepted_at);
    for e in &sends {
        let (booking, version) = versions[&event_of(e)];
        let at = accepted_at(e);
        if let Some((before, v)) = seen.insert((booking, recipient_of(e)), (at, version)) {
            assert!(v < version, "version {version} accepted at {at} after version {v} at {before}: order violated");
        }
    }
    let orphans: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM booking_notification_sends WHERE last_error = $1) \
                  + (SELECT count(*) FROM notification_resends WHERE previous_error = $1)",
            &[&shared::notify::sends::outcome::ORPHANED],
        )
        .await
        .unwrap()
        .get(0);
    let busy = kills.iter().filter(|k| !k.held.is_empty()).count();
    println!(
        "take-over fault run: {all} notifications, duplicates 0, order violations 0, every recipient reached; \
         the {busy} kills of busy pollers cost {orphans} sends left ambiguous ({:.1} a kill, at most {IN_FLIGHT} in \
         flight each), each settled by SES's evidence",
        orphans as f64 / busy.max(1) as f64
    );
    assert!(orphans as usize <= busy * 2 * IN_FLIGHT, "a kill cost at most its sends in flight: {orphans}");
}
