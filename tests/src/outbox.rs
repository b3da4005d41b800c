//! Helpers for outbox tests: seeding events, pollers with a recording
//! mailer, a child-process worker that can be killed at fault points, and
//! moving time forward for the sweeper.

use const_format::formatcp;
use shared::outbox::events::status::sql::{PENDING, PROCESSING};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use shared::booking::domain::{
    parse_instant, Booking, BookingStatus, Caller, DisplayName, EmailAddress, NewBooking, Person, TimeRange, Timezone,
    Title,
};
use shared::booking::events::{EventPayload, EventType};
use shared::booking::limits::Limits;
use shared::booking::service::{BookingService, CreateOutcome};
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::notify::sends as send_claims;
pub use shared::notify::sends::SendStatus;
use shared::outbox::events::{self, transitions::Reset};
pub use shared::outbox::EventStatus;
use shared::relay::{sweeper, Poller, PollerConfig, RetentionConfig, SweeperConfig};
use uuid::Uuid;

use crate::TestDb;

/// The organizer of the bookings the helpers create (no token subject: the
/// service is called directly, as with the local identity headers).
pub fn organizer() -> Caller {
    Caller { person: person("organizer@example.com"), subject: None }
}

pub fn person(email: &str) -> Person {
    let name = email.split('@').next().unwrap();
    Person::new(EmailAddress::parse(email).unwrap(), DisplayName::parse(name).unwrap())
}

/// Creates a booking through the real service (booking + outbox event in
/// one transaction) with the given attendees; `slot` picks a distinct hour.
pub async fn create_booking(db: &TestDb, slot: u32, attendees: &[&str]) -> Booking {
    create_booking_at(db, slot as i64, attendees).await
}

/// As [`create_booking`], for any number of slots.
pub async fn create_booking_at(db: &TestDb, slot: i64, attendees: &[&str]) -> Booking {
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::UNLIMITED);
    let start = parse_instant("2026-12-01T00:00:00Z").unwrap() + chrono::Duration::hours(slot);
    let new = NewBooking {
        title: Title::parse(&format!("Meeting {slot}")).unwrap(),
        description: None,
        location: None,
        timezone: Timezone::parse("Europe/Paris").unwrap(),
        range: TimeRange::new(start, start + chrono::Duration::minutes(30)).unwrap(),
        attendees: attendees.iter().map(|a| person(a)).collect(),
        reminders: Default::default(),
        organizer_locale: None,
        guest_list: Default::default(),
    };
    match service.create(&organizer(), new, None).await.unwrap() {
        CreateOutcome::Created(b) => b,
        CreateOutcome::Replayed(_) => unreachable!(),
    }
}

/// A BOOKING_CONFIRMED event of a new booking (the `i`th seeded one) with
/// `recipients` attendees, to write with [`events::insert`] or in bulk.
pub fn confirmed_event(i: usize, recipients: usize) -> events::NewEvent {
    let start = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap() + chrono::Duration::minutes(i as i64);
    let booking = Booking {
        id: Uuid::now_v7(),
        title: Title::parse(&format!("Seeded {i}")).unwrap(),
        description: None,
        location: None,
        range: TimeRange::new(start, start + chrono::Duration::minutes(30)).unwrap(),
        timezone: Timezone::parse("UTC").unwrap(),
        organizer: person("organizer@example.com"),
        organizer_sub: None,
        attendees: (0..recipients).map(|r| person(&format!("r{r}.e{i}@example.com"))).collect(),
        guest_list: Default::default(),
        reminders: Default::default(),
        status: BookingStatus::Confirmed,
        version: 1,
        created_at: start,
        updated_at: start,
    };
    EventPayload::of(booking).to_outbox(EventType::BookingConfirmed)
}

/// Writes the booking rows of `events` (from [`confirmed_event`]), as the
/// API would have with them: what a reminder's plan and claim read. Each
/// has an organizer of its own (the seeded meetings overlap in time).
pub async fn insert_bookings_of(client: &impl deadpool_postgres::GenericClient, events: &[events::NewEvent]) {
    let bookings: Vec<Booking> =
        events.iter().map(|e| serde_json::from_str::<EventPayload>(e.payload.get()).unwrap().booking).collect();
    let ids: Vec<Uuid> = bookings.iter().map(|b| b.id).collect();
    let titles: Vec<&str> = bookings.iter().map(|b| b.title.as_str()).collect();
    let starts: Vec<chrono::DateTime<Utc>> = bookings.iter().map(|b| b.range.start()).collect();
    let ends: Vec<chrono::DateTime<Utc>> = bookings.iter().map(|b| b.range.end()).collect();
    let attendees: Vec<serde_json::Value> =
        bookings.iter().map(|b| serde_json::to_value(&b.attendees).unwrap()).collect();
    let sql =
        "INSERT INTO bookings (id, organizer_email, organizer_name, title, timezone, starts_at, ends_at, attendees) \
               SELECT id, 'o-' || id || '@example.com', 'Organizer', title, 'UTC', s, e, a \
                 FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::jsonb[]) \
                      AS b(id, title, s, e, a)";
    client.execute(sql, &[&ids, &titles, &starts, &ends, &attendees]).await.unwrap();
}

/// The `(next_attempt_at, id)` of the newest event already claimed: where
/// the claims of a poller that claimed them all now start.
pub async fn newest_claimed(client: &impl deadpool_postgres::GenericClient) -> Option<(chrono::DateTime<Utc>, Uuid)> {
    let sql = formatcp!(
        "SELECT next_attempt_at, id FROM outbox_events WHERE status <> {PENDING} \
                ORDER BY next_attempt_at DESC, id DESC LIMIT 1"
    );
    client.query_opt(sql, &[]).await.unwrap().map(|r| (r.get(0), r.get(1)))
}

/// Inserts `events` BOOKING_CONFIRMED events with `recipients` attendees
/// each, in bulk (for soak tests and benchmarks). Returns their ids.
pub async fn seed_events(pool: &deadpool_postgres::Pool, events: usize, recipients: usize) -> Vec<Uuid> {
    let mut ids = Vec::with_capacity(events);
    let client = pool.get().await.unwrap();
    for chunk in (0..events).collect::<Vec<_>>().chunks(1000) {
        let new: Vec<_> = chunk.iter().map(|&i| confirmed_event(i, recipients)).collect();
        ids.extend(events::insert_many(&client, &new).await.unwrap());
    }
    ids
}

/// Makes every send look claimed and completed 30 days ago, its id
/// included: a send's id is a UUIDv7 whose first 48 bits are its claim's
/// time, and retention finds old sends by it.
pub const AGE_SENDS_30_DAYS: &str = "UPDATE booking_notification_sends \
     SET claimed_at = now() - interval '30 days', completed_at = now() - interval '30 days', \
         id = (lpad(to_hex(floor(extract(epoch FROM now() - interval '30 days') * 1000)::bigint), 12, '0') \
               || substr(replace(id::text, '-', ''), 13))::uuid";

pub fn poller(db: &TestDb, mailer: Arc<RecordingMailer>, config: PollerConfig) -> Poller {
    Poller::new(db.pool.clone(), mailer, Faults::none(), config)
}

/// A poller's settings for a test that needs an event dead-lettered: one
/// attempt, so the first send the mailer refuses ([`refused`]) ends its
/// event DEAD (a stack's misconfiguration no longer does: it waits).
pub fn one_attempt(worker: &str) -> PollerConfig {
    let mut config = PollerConfig::for_tests(worker);
    config.max_attempts = 1;
    config
}

/// A send certainly not made (a known failure): released and, under
/// [`one_attempt`], its event dead-lettered.
pub fn refused() -> SendOutcome {
    SendOutcome::NotSent { reason: "refused".into() }
}

pub fn sweeper_config(max_attempts: i32) -> SweeperConfig {
    SweeperConfig::new(Duration::from_secs(300), Duration::from_secs(60), max_attempts, 500, RetentionConfig::default())
        .unwrap()
}

/// Makes every PROCESSING row look `secs` older, as if time had passed.
pub async fn age_processing_rows(db: &TestDb, secs: i64) {
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            formatcp!("UPDATE outbox_events SET locked_at = locked_at - make_interval(secs => $1) WHERE status = {PROCESSING}"),
            &[&(secs as f64)],
        )
        .await
        .unwrap();
    end_leases(db).await;
}

/// Every lease's length passes: each has ended unrenewed (its holder is
/// dead), so the next claim takes over what it holds.
pub async fn end_leases(db: &TestDb) {
    let client = db.pool.get().await.unwrap();
    client.execute("UPDATE outbox_leases SET expires_at = now() - interval '1 second'", &[]).await.unwrap();
}

/// The sweep as the sweeper Lambda runs it, after the stuck timeout passed.
pub async fn sweep_after_timeout(db: &TestDb, max_attempts: i32) -> Vec<Reset> {
    age_processing_rows(db, 301).await;
    let client = db.pool.get().await.unwrap();
    sweeper::sweep_once(&client, &sweeper_config(max_attempts), false).await.unwrap()
}

/// `(status, attempts, last_error)` of an event.
pub async fn event_status(db: &TestDb, id: Uuid) -> (EventStatus, i32, Option<String>) {
    let client = db.pool.get().await.unwrap();
    let e = events::get(&client, id).await.unwrap().expect("the event exists");
    (e.status, e.attempts, e.last_error)
}

/// `(recipient, status)` of every send of an event, sorted.
pub async fn sends(db: &TestDb, event_id: Uuid) -> Vec<(String, SendStatus)> {
    let client = db.pool.get().await.unwrap();
    send_claims::of_event(&client, event_id).await.unwrap()
}

/// Events by status, zeros included.
pub async fn event_counts(db: &TestDb) -> std::collections::BTreeMap<EventStatus, i64> {
    let client = db.pool.get().await.unwrap();
    events::standing::counts(&client).await.unwrap()
}

/// Sends by status, zeros included.
pub async fn send_counts(db: &TestDb) -> std::collections::BTreeMap<SendStatus, i64> {
    let client = db.pool.get().await.unwrap();
    send_claims::counts(&client).await.unwrap()
}

/// Forces a finished event to run again, as the library's operator
/// transitions do (reopen + forget its `processed_events` row).
pub async fn force_run_again(db: &TestDb, event_id: Uuid) {
    let mut client = db.pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    shared::outbox::processed::forget(&tx, event_id).await.unwrap();
    assert!(shared::outbox::events::transitions::reopen(&tx, event_id, "test: run again").await.unwrap());
    tx.commit().await.unwrap();
}

/// Every outbox event of one booking, oldest version first.
pub async fn events_of(db: &TestDb, booking_id: Uuid) -> Vec<events::StoredEvent> {
    let client = db.pool.get().await.unwrap();
    events::of_aggregate(&client, booking_id).await.unwrap()
}

pub async fn only_event_id(db: &TestDb) -> Uuid {
    db.scalar("SELECT id FROM outbox_events").await
}

/// A poller in a child process (`outbox-worker`), which drains the outbox
/// with a recording mailer journaling to `journal`. `faults` goes to
/// `OUTBOX_FAULT_POINTS`: a `kill` fault makes the child SIGKILL itself.
pub struct Worker {
    pub journal: PathBuf,
    bin: PathBuf,
    _dir: TempDir,
}

pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Worker {
    /// `bin` is `env!("CARGO_BIN_EXE_outbox-worker")` (only integration
    /// tests see that variable).
    pub fn new(bin: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("outbox-worker-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Self { journal: dir.join("sent.journal"), bin: bin.into(), _dir: TempDir(dir) }
    }

    /// `drain` with `faults`, at `log_level`, on `db`.
    fn command(&self, db: &TestDb, faults: &str, log_level: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.arg("drain")
            .arg(&self.journal)
            .env("DATABASE_URL", &db.url)
            .env(shared::fault::ENV_VAR, faults)
            .env("RUST_LOG", log_level)
            .kill_on_drop(true);
        cmd
    }

    pub async fn run(&self, db: &TestDb, faults: &str, extra_env: &[(&str, &str)]) -> ExitStatus {
        let mut cmd = self.command(db, faults, "warn");
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        tokio::time::timeout(Duration::from_secs(60), cmd.status())
            .await
            .expect("worker finished within 60s")
            .expect("worker started")
    }

    /// Starts it (`drain`, as [`Worker::run`]) and returns the child, for a
    /// test that stops, resumes or kills it itself; its stdout is piped.
    pub fn spawn(&self, db: &TestDb, faults: &str, extra_env: &[(&str, &str)]) -> tokio::process::Child {
        let mut cmd = self.command(db, faults, "warn");
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.stdout(std::process::Stdio::piped()).spawn().expect("worker started")
    }

    /// As [`Worker::run`], at info level, returning what it printed on
    /// stdout (its JSON logs and EMF lines).
    pub async fn run_logged(&self, db: &TestDb, faults: &str) -> (ExitStatus, String) {
        let mut cmd = self.command(db, faults, "info");
        cmd.stdout(std::process::Stdio::piped());
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .expect("worker finished within 60s")
            .expect("worker started");
        (out.status, String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn sent(&self) -> Vec<(String, String, String)> {
        RecordingMailer::read_journal(Path::new(&self.journal))
    }
}

/// A fault run's pollers: six poller processes (each made by `worker`),
/// one after another, each SIGKILLed 0.3–1.5 s in if it still runs (what
/// the last one left PROCESSING swept first); then swept and drained to the
/// end, a throttled event given its retry delay. Returns how many were
/// killed.
pub async fn kill_then_drain(db: &TestDb, rng: &mut crate::Rng, worker: impl Fn() -> tokio::process::Command) -> usize {
    let mut kills = 0;
    for _ in 0..6 {
        sweep_after_timeout(db, 8).await;
        let mut child = worker().spawn().unwrap();
        let wait = Duration::from_millis(300 + rng.below(1200));
        if tokio::time::timeout(wait, child.wait()).await.is_err() {
            child.start_kill().unwrap(); // SIGKILL
            child.wait().await.unwrap();
            kills += 1;
        }
    }
    for round in 0.. {
        assert!(round < 20, "the outbox drains");
        sweep_after_timeout(db, 8).await;
        println!("round {round}: events {:?} sends {:?}", event_counts(db).await, send_counts(db).await);
        let status = tokio::time::timeout(Duration::from_secs(120), worker().status()).await.unwrap().unwrap();
        assert!(status.success());
        let counts = event_counts(db).await;
        if counts[&EventStatus::Pending] + counts[&EventStatus::Processing] == 0 {
            return kills;
        }
        tokio::time::sleep(shared::relay::batch::THROTTLED_RETRY).await;
    }
    unreachable!()
}

/// Makes every claim look `secs` older, as if time had passed: its claim,
/// and when it could last have reached the provider.
pub async fn age_claims(db: &TestDb, secs: i64) {
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            "UPDATE booking_notification_sends SET claimed_at = claimed_at - make_interval(secs => $1), \
                    reaches_provider_by = reaches_provider_by - make_interval(secs => $1)",
            &[&(secs as f64)],
        )
        .await
        .unwrap();
}

/// SES's event stream as the SES-events function records it: it moved
/// past every send claimed so far `ago_secs` ago (an event arrived then
/// about a message SES accepted then; the claims are aged to be older
/// still), and is alive now (an event arrived now). 0: just now.
pub async fn stream_moved_past(db: &TestDb, ago_secs: i64) {
    age_claims(db, ago_secs + 60).await;
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            "INSERT INTO ses_event_watermarks (mail_second, received_at) \
             VALUES (date_trunc('second', now() - make_interval(secs => $1)), now() - make_interval(secs => $1)), \
                    (date_trunc('second', now()), now()) \
             ON CONFLICT (mail_second) DO NOTHING",
            &[&(ago_secs as f64)],
        )
        .await
        .unwrap();
}

/// As if a minute passed for what the evidence rule reads: the claims,
/// the events (what they are about, and their arrivals) and the canaries
/// all look 61 s older.
pub async fn a_minute_passes(db: &TestDb) {
    age_claims(db, 61).await;
    let client = db.pool.get().await.unwrap();
    client
        .batch_execute(
            "UPDATE ses_event_watermarks SET mail_second = mail_second - interval '61 seconds', \
                    received_at = received_at - interval '61 seconds'; \
             UPDATE ses_canaries SET sent_at = sent_at - interval '61 seconds'",
        )
        .await
        .unwrap();
}

/// As if a UTC day passed for the recipient limits: every organizer's
/// contact with each mailbox, and what it counted, is a day older.
pub async fn a_day_passes_for_the_recipient_limits(db: &TestDb) {
    let client = db.pool.get().await.unwrap();
    client.batch_execute("UPDATE mailbox_organizers SET since = since - 1, day = day - 1").await.unwrap();
}

/// True when the child died of SIGKILL.
pub fn killed(status: ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(9)
}

/// One booking for `recipient` whose send ends with `outcome` (sent when
/// None), drained by one poller; returns the send's claim and the mailer.
/// The message id the mailer gave a send that answered.
pub async fn message_id_of(db: &TestDb, claim: Uuid) -> String {
    let client = db.pool.get().await.unwrap();
    let sql = "SELECT provider_message_id FROM booking_notification_sends WHERE id = $1";
    client.query_one(sql, &[&claim]).await.unwrap().get(0)
}

pub async fn one_send(db: &TestDb, recipient: &str, outcome: Option<SendOutcome>) -> (Uuid, Arc<RecordingMailer>) {
    create_booking(db, 1, &[recipient]).await;
    let mailer = Arc::new(RecordingMailer::new());
    if let Some(outcome) = outcome {
        mailer.script(recipient, outcome, 1);
    }
    poller(db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    (db.scalar("SELECT id FROM booking_notification_sends").await, mailer)
}
