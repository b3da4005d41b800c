//! The production shape (`make bench-production`, `scripts/bench-production.sh`):
//! the real release poller (`bootstrap` from its Lambda zip) invoked by
//! scripts/lib/lambda-schedule.py on the template's schedule, with the
//! template's timeout, safety margin and SES timeouts, against the SES
//! stand-in (tests/src/ses_standin.rs), which enforces an account's
//! `MaxSendRate`, reports it through `GetAccount`, and adds 80 ms ± 20 ms
//! of network to every call (half before SES accepts the message). This
//! driver is not what is measured (a debug build does); the poller is.
//!
//! Time is scaled down by BENCH_SCALE (default 5): the period, the timeout,
//! the margin and the SES timeouts all divide by it, so every ratio is the
//! template's. The SES latency and the send rates are not scaled: they are
//! the physical limits.
//!
//! - (a) steady trickle: 5 bookings a second (2 attendees each, their
//!   own) for five periods, SES counting the rate in any sliding second:
//!   commit-to-send latency, to SES's acceptance;
//! - (b) burst: recipients committed at once, for each shape of SES's
//!   limiter of BENCH_LIMITERS (bucket, sliding, calendar: a token bucket
//!   of one second, at most the rate in any sliding second, or in each
//!   calendar second), at each quota of BENCH_QUOTAS (14,200,1000) with
//!   each count of schedules of BENCH_STREAMS (2,4): the delivered rate
//!   beside the account's (target ≥ 0.9), the time to drain, throttled
//!   calls (target ≤ 0.1 %); a table of all of them at the end. A burst
//!   drains in about a minute at each quota (BENCH_FULL=1: 20,000
//!   recipients at every quota; 24 minutes at 14/s).
//!
//! - (c) a burst of reminders (BENCH_ONLY=reminders): every meeting at
//!   09:00 has its 15-minute reminder at 08:45. BENCH_REMINDER_QUOTA
//!   (default 200) × 20 recipients' invitations go out first; then as many
//!   reminders, written due at one instant 5 s ahead, fall due together:
//!   their delivered rate beside the account's (target ≥ 0.9), from the
//!   instant they fell due, for each shape of SES's limiter, 2 schedules.
//!
//! - (d) a crash mid-burst (BENCH_ONLY=crash): at BENCH_CRASH_QUOTA (default
//!   200)/s, 2 attendees each of BENCH_CRASH_SECONDS (default 5) seconds of
//!   the rate, committed at once, one schedule (the template's: two runs
//!   claim at every moment; the burst waits until two do); twice, the
//!   second time SIGKILLing the poller that holds the most events once a
//!   third were accepted. Commit → SES
//!   acceptance p50/p99 of each run side by side (target with the crash:
//!   p99 ≤ 10 s), and what the crash cost: the time until its events were
//!   claimed again, and the sends it left ambiguous (its sends in flight;
//!   SES's evidence settles them later). The lease is the template's,
//!   unscaled: a take-over's seconds are physical, like SES's latency.
//!
//! - (e) fair turns (BENCH_ONLY=fairness): one organizer's
//!   BENCH_FAIR_RECIPIENTS (default 20,000) recipients fall due at one
//!   instant (10,000 bookings written ahead, due together, as reminders
//!   are) at BENCH_FAIR_QUOTA (default 200)/s, sliding second, 2
//!   schedules; while they go out, 20 other organizers book at 5 a second
//!   (one attendee each). Their commit → SES p50/p99 during the burst
//!   (target p99 ≤ 2 s), the whole fleet's rate beside the account's
//!   (target ≥ 0.9), 0 duplicates; then the same with the others taking
//!   no turn (claimed oldest-due first, as before V45): the baseline.
//!
//! Every run checks from the stand-in's own log that no claim, and no
//! (event, recipient), was accepted twice, and reports the largest gap in
//! which no poller was claiming.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::UNKNOWN;
use shared::outbox::events::status::sql::{PENDING, PROCESSING};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use outbox_tests::outbox::{confirmed_event, seed_events};
use outbox_tests::ses_standin::{Accepted, Limiter, Limits, SesStandIn};
use outbox_tests::TestDb;
use serde_json::Value;
use shared::config::settings as S;
use uuid::Uuid;

/// What the template deploys, read from it (and the SES timeouts from the
/// settings' defaults, which the template does not change).
#[derive(Debug, Clone, Copy)]
struct Shape {
    period: f64,
    timeout: f64,
    margin: f64,
    connect_ms: f64,
    read_ms: f64,
    reserved: usize,
}

fn after<'a>(text: &'a str, key: &str) -> &'a str {
    let at = text.find(key).unwrap_or_else(|| panic!("template.yaml has no {key}"));
    &text[at + key.len()..]
}

fn number(text: &str) -> f64 {
    let digits: String = text.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    digits.parse().unwrap_or_else(|_| panic!("not a number: {:?}", &text[..text.len().min(40)]))
}

impl Shape {
    fn template(root: &Path) -> Self {
        let t = std::fs::read_to_string(root.join("template.yaml")).expect("template.yaml");
        let schedule = after(&t, "ScheduleExpression: rate(1 minute)");
        assert!(!schedule.is_empty());
        Shape {
            period: number(after(&t, "POLLER_SCHEDULE_SECS:")),
            timeout: number(after(after(&t, "  PollerTimeoutSeconds:"), "Default:")),
            margin: number(after(&t, "POLLER_SAFETY_MARGIN_SECS:")),
            connect_ms: S::SES_CONNECT_TIMEOUT_MS.default_value::<u64>() as f64,
            read_ms: S::SES_READ_TIMEOUT_MS.default_value::<u64>() as f64,
            reserved: number(after(after(&t, "  PollerReservedConcurrency:"), "Default:")) as usize,
        }
    }

    fn scaled(self, by: f64) -> Self {
        Shape {
            period: self.period / by,
            timeout: self.timeout / by,
            margin: self.margin / by,
            connect_ms: self.connect_ms / by,
            read_ms: self.read_ms / by,
            reserved: self.reserved,
        }
    }
}

/// One invocation, as the fleet emulator logged it.
#[derive(Debug)]
struct Invocation {
    start: f64,
    end: f64,
    /// When it last tried to claim (Unix seconds).
    claiming_until: f64,
    cold: bool,
    outcome: String,
}

struct Fleet {
    child: tokio::process::Child,
    log: PathBuf,
    dir: PathBuf,
}

impl Fleet {
    async fn start(root: &Path, db: &TestDb, ses: &SesStandIn, shape: Shape, streams: usize) -> Fleet {
        let dir = std::env::temp_dir().join(format!("bench-production-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let env = [
            ("DATABASE_URL", db.url.clone()),
            ("SES_ENDPOINT_URL", ses.endpoint.clone()),
            ("SES_REGION", "us-east-1".into()),
            ("SES_FROM_ADDRESS", "Bookings <bookings@example.com>".into()),
            ("AWS_ACCESS_KEY_ID", "bench".into()),
            ("AWS_SECRET_ACCESS_KEY", "bench".into()),
            ("POLLER_TIMEOUT_SECS", format!("{:.0}", shape.timeout)),
            ("POLLER_SAFETY_MARGIN_SECS", format!("{:.0}", shape.margin)),
            ("POLLER_SCHEDULE_SECS", format!("{:.0}", shape.period)),
            ("SES_CONNECT_TIMEOUT_MS", format!("{:.0}", shape.connect_ms)),
            ("SES_READ_TIMEOUT_MS", format!("{:.0}", shape.read_ms)),
            ("RUST_LOG", std::env::var("BENCH_POLLER_LOG").unwrap_or_else(|_| "warn".into())),
        ];
        let env_file = dir.join("poller.env");
        let lines: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        std::fs::write(&env_file, lines.join("\n") + "\n").unwrap();
        let log = dir.join("fleet.jsonl");
        let zip = std::env::var("POLLER_ZIP").expect("POLLER_ZIP: run ./scripts/bench-production.sh");
        let child = tokio::process::Command::new("python3")
            .arg(root.join("scripts/lib/lambda-schedule.py"))
            .args(["--function", "outbox-poller", "--zip", &zip, "--quiet"])
            .arg("--env-file")
            .arg(&env_file)
            .args(["--period", &shape.period.to_string(), "--streams", &streams.to_string()])
            .args(["--timeout", &shape.timeout.to_string()])
            .args(["--concurrency", &(shape.reserved * streams).to_string(), "--duration", "3600"])
            .arg("--log")
            .arg(&log)
            .arg("--output")
            .arg(dir.join("poller.log"))
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the fleet emulator");
        let fleet = Fleet { child, log, dir };
        // Running once a poller has configured the fleet's rate.
        let started = Instant::now();
        loop {
            let n: i64 = db.scalar("SELECT count(*) FROM send_rate").await;
            if n > 0 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "no poller started; see {}", fleet.dir.display());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        fleet
    }

    async fn stop(mut self) -> Vec<Invocation> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let runs = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["kind"] == "invocation")
            .map(|v| {
                let start = v["start"].as_f64().unwrap_or_default();
                let end = v["end"].as_f64().unwrap_or(start);
                let claiming = v["response"]["claiming_until_ms"].as_f64().map(|ms| start + ms / 1000.0);
                Invocation {
                    start,
                    end,
                    claiming_until: claiming.unwrap_or(end),
                    cold: v["cold"].as_bool().unwrap_or_default(),
                    outcome: v["outcome"].as_str().unwrap_or_default().to_string(),
                }
            })
            .collect();
        if std::env::var("BENCH_KEEP").is_err() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            println!("    (fleet logs kept in {})", self.dir.display());
        }
        runs
    }
}

/// The largest stretch of [from, to] (Unix seconds) in which no
/// invocation was claiming, and the mean number of live invocations.
fn coverage(runs: &[Invocation], from: f64, to: f64) -> (f64, f64) {
    let mut windows: Vec<(f64, f64)> = runs.iter().map(|r| (r.start, r.claiming_until)).collect();
    windows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut covered_to, mut gap) = (from, 0.0f64);
    for (s, e) in windows {
        if e < from || s > to {
            continue;
        }
        gap = gap.max(s.min(to) - covered_to);
        covered_to = covered_to.max(e);
    }
    gap = gap.max(to - covered_to);
    let alive: f64 = runs.iter().map(|r| (r.end.min(to) - r.start.max(from)).max(0.0)).sum();
    (gap.max(0.0), alive / (to - from).max(1e-9))
}

fn unix(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Waits until `expected` messages were accepted, or `limit`.
async fn until_accepted(ses: &SesStandIn, expected: usize, limit: Duration) -> Vec<Accepted> {
    let started = Instant::now();
    loop {
        let accepted = ses.accepted();
        if accepted.len() >= expected || started.elapsed() > limit {
            return accepted;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each accepted message's commit → SES acceptance, in ms, sorted: its
/// claim's event's commit time (`committed`) to the stand-in's log.
fn commit_to_acceptance_ms(
    accepted: &[Accepted],
    events: &HashMap<String, Uuid>,
    committed: &HashMap<Uuid, Duration>,
) -> Vec<f64> {
    let mut latencies: Vec<f64> = accepted
        .iter()
        .filter_map(|a| {
            let event = events.get(a.claim.as_deref()?)?;
            Some((a.at.saturating_sub(*committed.get(event)?)).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    latencies
}

/// Claims → their events, and the duplicates in the stand-in's log.
async fn duplicates(db: &TestDb, accepted: &[Accepted]) -> (HashMap<String, Uuid>, usize) {
    let client = db.pool.get().await.unwrap();
    let rows = client.query("SELECT id::text, outbox_event_id FROM booking_notification_sends", &[]).await.unwrap();
    let events: HashMap<String, Uuid> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut claims = HashSet::new();
    let mut told = HashSet::new();
    let mut dups = 0;
    for a in accepted {
        let claim = a.claim.clone().unwrap_or_default();
        let event = events.get(&claim).copied();
        if !claims.insert(claim) || !told.insert((event, a.recipient.clone())) {
            dups += 1;
        }
    }
    (events, dups)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn standin_limits(rate: f64, limiter: Limiter) -> Limits {
    Limits {
        rate,
        limiter,
        reported: None,
        latency: Duration::from_millis(env_u64("BENCH_SES_LATENCY_MS", 80)),
        jitter: Duration::from_millis(env_u64("BENCH_SES_JITTER_MS", 20)),
        upstream: None,
        identities: None,
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn env_list(name: &str, default: &str) -> Vec<f64> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{name}: not a number list")))
        .collect()
}

/// Appends `key<TAB>value` to `$BENCH_RESULTS` when set.
fn record(key: &str, value: f64) {
    use std::io::Write;
    let Ok(path) = std::env::var("BENCH_RESULTS") else { return };
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("BENCH_RESULTS is writable");
    writeln!(file, "{key}\t{value:.3}").expect("BENCH_RESULTS is writable");
}

async fn trickle(root: &Path, shape: Shape, scale: f64) {
    const RATE: f64 = 200.0;
    let db = TestDb::create().await;
    let ses = SesStandIn::start(standin_limits(RATE, Limiter::Sliding)).await;
    let fleet = Fleet::start(root, &db, &ses, shape, 1).await;
    let periods = 5.0;
    let bookings = (5.0 * shape.period * periods) as usize;
    let from = unix(std::time::SystemTime::now());
    let mut committed: HashMap<Uuid, Duration> = HashMap::new();
    let started = Instant::now();
    let client = db.pool.get().await.unwrap();
    for i in 0..bookings {
        let due = started + Duration::from_millis(200 * i as u64);
        tokio::time::sleep_until(due.into()).await;
        // Each booking its own two attendees: nobody reaches the daily
        // limit per mailbox (LIMIT_MAILS_PER_RECIPIENT_PER_DAY).
        let ids = shared::outbox::events::insert_many(&client, &[confirmed_event(i, 2)]).await.unwrap();
        let at = ses.since_start(Instant::now());
        committed.insert(ids[0], at);
    }
    let accepted = until_accepted(&ses, bookings * 2, Duration::from_secs_f64(shape.timeout * 3.0)).await;
    let to = unix(std::time::SystemTime::now());
    let runs = fleet.stop().await;
    let (events, dups) = duplicates(&db, &accepted).await;
    let latencies = commit_to_acceptance_ms(&accepted, &events, &committed);
    let (gap, alive) = coverage(&runs, from, to);
    let (p50, p90, p99, max) = (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(f64::NAN),
    );
    let cold = runs.iter().filter(|r| r.cold).count();
    println!(
        "(a) steady trickle: {bookings} bookings (5/s, 2 attendees) over {periods} periods, account {RATE}/s, 1 schedule"
    );
    println!(
        "    commit-to-send: p50 {p50:.0} ms, p90 {p90:.0} ms, p99 {p99:.0} ms, max {max:.0} ms ({} of {} sent)",
        latencies.len(),
        bookings * 2
    );
    println!(
        "    largest gap with no poller claiming {:.2} s (×{scale} in the template's time: {:.1} s); \
         {alive:.2} pollers alive on average; {} runs, {cold} cold, {} timed out; {} throttled; {dups} duplicates",
        gap,
        gap * scale,
        runs.len(),
        timeouts(&runs),
        ses.throttled()
    );
    for (k, v) in [("p50_ms", p50), ("p90_ms", p90), ("p99_ms", p99), ("max_ms", max), ("gap_s", gap)] {
        record(&format!("production.trickle.{k}"), v);
    }
    record("production.trickle.duplicates", dups as f64);
    record("production.trickle.throttled", ses.throttled() as f64);
    check(dups == 0, format!("trickle: {dups} duplicate emails in the stand-in's log"));
    check(
        latencies.len() == bookings * 2,
        format!("trickle: {} of {} invitations sent", latencies.len(), bookings * 2),
    );
    check(timeouts(&runs) == 0, format!("trickle: {} runs outlived their timeout", timeouts(&runs)));
}

static FAILED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A check of the run: reported at the end (the other runs still go on).
fn check(ok: bool, what: String) {
    if !ok {
        println!("    FAILED: {what}");
        FAILED.lock().unwrap().push(what);
    }
}

/// Runs the emulator ended at their timeout (killed, as Lambda does).
fn timeouts(runs: &[Invocation]) -> usize {
    runs.iter().filter(|r| r.outcome == "timeout").count()
}

/// One burst's figures, for the table at the end.
struct BurstRow {
    limiter: Limiter,
    rate: f64,
    streams: usize,
    ratio: f64,
    throttled_pct: f64,
    dups: usize,
    alive: f64,
}

static ROWS: std::sync::Mutex<Vec<BurstRow>> = std::sync::Mutex::new(Vec::new());

async fn burst(root: &Path, shape: Shape, limiter: Limiter, rate: f64, streams: usize, full: bool) {
    let db = TestDb::create().await;
    let ses = SesStandIn::start(standin_limits(rate, limiter)).await;
    let recipients = if full { 20_000 } else { ((rate * 60.0) as usize).clamp(200, 20_000) } / 2 * 2;
    let fleet = Fleet::start(root, &db, &ses, shape, streams).await;
    let from = unix(std::time::SystemTime::now());
    // The burst is committed in chunks of 1,000 events, and the first go
    // out while the rest commit: the drain is timed from the first commit.
    let committing = ses.since_start(Instant::now());
    seed_events(&db.pool, recipients / 2, 2).await;
    let committed = ses.since_start(Instant::now()).saturating_sub(committing);
    let limit = Duration::from_secs_f64(recipients as f64 / rate * 3.0 + shape.timeout * 3.0);
    let accepted = until_accepted(&ses, recipients, limit).await;
    let to = unix(std::time::SystemTime::now());
    let runs = fleet.stop().await;
    let (_, dups) = duplicates(&db, &accepted).await;
    let drain = accepted.last().map(|a| a.at.saturating_sub(committing)).unwrap_or_default().as_secs_f64();
    // The delivered rate is SES's own view: accepted messages a second from
    // the first acceptance to the last (the stand-in's log).
    let sending = match (accepted.first(), accepted.last()) {
        (Some(a), Some(b)) if accepted.len() > 1 => (b.at - a.at).as_secs_f64(),
        _ => f64::NAN,
    };
    let delivered = (accepted.len() - 1) as f64 / sending;
    // (While a burst drains every poller is busy with its batches: the
    // gap in claiming only says something in the trickle.)
    let (_, alive) = coverage(&runs, from, to);
    let throttled = ses.throttled();
    let throttled_pct = throttled as f64 * 100.0 / accepted.len().max(1) as f64;
    println!(
        "(b) burst of {recipients} at {rate}/s ({}), {streams} schedules: {delivered:.1}/s delivered = {:.3} × MaxSendRate; \
         drained in {drain:.1} s from the first commit (committed over {:.1} s); {throttled} throttled ({:.3} %); \
         {dups} duplicates; \
         {alive:.1} pollers alive on average; {} runs, {} timed out",
        limiter.describe(),
        delivered / rate,
        committed.as_secs_f64(),
        throttled_pct,
        runs.len(),
        timeouts(&runs)
    );
    let key = format!("production.burst.{}.{rate}.{streams}", limiter.name());
    record(&format!("{key}.recipients"), recipients as f64);
    record(&format!("{key}.ratio"), delivered / rate);
    record(&format!("{key}.drain_s"), drain);
    record(&format!("{key}.throttled"), throttled as f64);
    record(&format!("{key}.duplicates"), dups as f64);
    record(&format!("{key}.alive"), alive);
    let what = format!("burst at {rate}/s ({}), {streams} schedules", limiter.describe());
    check(dups == 0, format!("{what}: {dups} duplicate emails in the stand-in's log"));
    check(delivered / rate >= 0.9, format!("{what}: {:.3} × MaxSendRate, below 0.9", delivered / rate));
    check(throttled_pct <= 0.1, format!("{what}: {throttled_pct:.3} % of calls throttled, above 0.1 %"));
    ROWS.lock().unwrap().push(BurstRow { limiter, rate, streams, ratio: delivered / rate, throttled_pct, dups, alive });
    check(accepted.len() == recipients, format!("{what}: {} of {recipients} sent", accepted.len()));
    check(timeouts(&runs) == 0, format!("{what}: {} runs outlived their timeout", timeouts(&runs)));
}

/// (c): `recipients` invitations sent, then their reminders due at one
/// instant; the reminders' delivered rate, drain and duplicates.
async fn reminder_burst(root: &Path, shape: Shape, limiter: Limiter, rate: f64, streams: usize) {
    use shared::booking::events::{EventPayload, EventType};
    let db = TestDb::create().await;
    let ses = SesStandIn::start(standin_limits(rate, limiter)).await;
    let recipients = ((rate * 20.0) as usize).clamp(200, 20_000) / 2 * 2;
    let fleet = Fleet::start(root, &db, &ses, shape, streams).await;
    let invitations: Vec<_> = (0..recipients / 2).map(|i| confirmed_event(i, 2)).collect();
    let client = db.pool.get().await.unwrap();
    for chunk in invitations.chunks(1000) {
        outbox_tests::outbox::insert_bookings_of(&client, chunk).await;
        shared::outbox::events::insert_many(&client, chunk).await.unwrap();
    }
    let limit = Duration::from_secs_f64(recipients as f64 / rate * 3.0 + shape.timeout * 3.0);
    let invited = until_accepted(&ses, recipients, limit).await.len();
    // Each booking's 15-minute reminder, all due at one instant: written
    // now, as the API wrote them with their bookings, due 5 s from now.
    let due = chrono::Utc::now() + chrono::Duration::seconds(5);
    let reminders: Vec<_> = invitations
        .iter()
        .map(|e| {
            let mut payload: EventPayload = serde_json::from_str(e.payload.get()).unwrap();
            payload.reminder = Some(shared::booking::domain::Reminder::parse("PT15M").unwrap());
            shared::outbox::NewEvent {
                aggregate_id: uuid::Uuid::now_v7(),
                lane_of: Some(payload.booking.id),
                due_at: Some(due),
                ..payload.to_outbox(EventType::BookingReminder)
            }
        })
        .collect();
    for chunk in reminders.chunks(1000) {
        shared::outbox::events::insert_many(&client, chunk).await.unwrap();
    }
    let due_at = ses.since_start(Instant::now()) + Duration::from_secs(5);
    let accepted = until_accepted(&ses, recipients * 2, limit + Duration::from_secs(5)).await;
    let runs = fleet.stop().await;
    let (events, dups) = duplicates(&db, &accepted).await;
    let kinds: HashMap<Uuid, String> = client
        .query("SELECT id, event_type FROM outbox_events", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let reminded: Vec<&Accepted> = accepted
        .iter()
        .filter(|a| {
            let event = a.claim.as_ref().and_then(|c| events.get(c));
            event.and_then(|e| kinds.get(e)).is_some_and(|k| k == "BOOKING_REMINDER")
        })
        .collect();
    let drain = reminded.last().map(|a| a.at.saturating_sub(due_at)).unwrap_or_default().as_secs_f64();
    let sending = match (reminded.first(), reminded.last()) {
        (Some(a), Some(b)) if reminded.len() > 1 => (b.at - a.at).as_secs_f64(),
        _ => f64::NAN,
    };
    let delivered = (reminded.len().max(1) - 1) as f64 / sending;
    let throttled = ses.throttled();
    println!(
        "(c) {} reminders due at one instant at {rate}/s ({}), {streams} schedules, after {invited} invitations: \
         {delivered:.1}/s delivered = {:.3} × MaxSendRate; the last {drain:.1} s after they fell due; \
         {throttled} throttled in the whole run; {dups} duplicates; {} runs, {} timed out",
        reminded.len(),
        limiter.describe(),
        delivered / rate,
        runs.len(),
        timeouts(&runs)
    );
    let key = format!("production.reminders.{}.{rate}.{streams}", limiter.name());
    record(&format!("{key}.ratio"), delivered / rate);
    record(&format!("{key}.drain_s"), drain);
    record(&format!("{key}.duplicates"), dups as f64);
    let what = format!("reminder burst at {rate}/s ({}), {streams} schedules", limiter.describe());
    check(dups == 0, format!("{what}: {dups} duplicate emails in the stand-in's log"));
    check(reminded.len() == recipients, format!("{what}: {} of {recipients} reminders sent", reminded.len()));
    check(delivered / rate >= 0.9, format!("{what}: {:.3} × MaxSendRate, below 0.9", delivered / rate));
    check(timeouts(&runs) == 0, format!("{what}: {} runs outlived their timeout", timeouts(&runs)));
}

/// (e): one organizer's burst due at one instant, and others' bookings at
/// a trickle while it goes out; `turns`: the others take turns (as every
/// booking does), or none (oldest-due first, the baseline). Returns the
/// others' p99 in ms.
async fn fair_burst(root: &Path, shape: Shape, rate: f64, recipients: usize, turns: bool) -> f64 {
    let db = TestDb::create().await;
    let ses = SesStandIn::start(standin_limits(rate, Limiter::Sliding)).await;
    let fleet = Fleet::start(root, &db, &ses, shape, 2).await;
    let client = db.pool.get().await.unwrap();
    // The bulk: written ahead, due together 5 s from now.
    let due = chrono::Utc::now() + chrono::Duration::seconds(5);
    let bulk: Vec<_> =
        (0..recipients / 2).map(|i| shared::outbox::NewEvent { due_at: Some(due), ..confirmed_event(i, 2) }).collect();
    for chunk in bulk.chunks(1000) {
        outbox_tests::outbox::insert_bookings_of(&client, chunk).await;
        shared::outbox::events::insert_many(&client, chunk).await.unwrap();
    }
    let due_at = ses.since_start(Instant::now()) + Duration::from_secs(5);
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The others, at 5 a second while the bulk goes out (its length at the
    // account's rate, less a few seconds).
    let others = ((recipients as f64 / rate - 5.0).max(5.0) * 5.0) as usize;
    let mut committed: HashMap<Uuid, Duration> = HashMap::new();
    let started = Instant::now();
    for i in 0..others {
        tokio::time::sleep_until((started + Duration::from_millis(200 * i as u64)).into()).await;
        let e = shared::outbox::NewEvent {
            turn: turns.then(|| format!("other{}@example.com", i % 20)),
            ..confirmed_event(1_000_000 + i, 1)
        };
        outbox_tests::outbox::insert_bookings_of(&client, std::slice::from_ref(&e)).await;
        let ids = shared::outbox::events::insert_many(&client, &[e]).await.unwrap();
        committed.insert(ids[0], ses.since_start(Instant::now()));
    }
    let all = recipients + others;
    let limit = Duration::from_secs_f64(all as f64 / rate * 2.0 + shape.timeout * 3.0);
    let accepted = until_accepted(&ses, all, limit).await;
    let runs = fleet.stop().await;
    let (events, dups) = duplicates(&db, &accepted).await;
    let latencies = commit_to_acceptance_ms(&accepted, &events, &committed);
    let sent: Vec<Duration> = accepted.iter().map(|a| a.at).filter(|at| *at >= due_at).collect();
    let span = match (sent.first(), sent.last()) {
        (Some(a), Some(b)) if sent.len() > 1 => (*b - *a).as_secs_f64(),
        _ => f64::NAN,
    };
    let delivered = (sent.len().max(1) - 1) as f64 / span;
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    let label = if turns { "taking turns" } else { "taking no turn (the baseline: oldest-due first)" };
    println!(
        "(e) {recipients} recipients of one organizer due at one instant at {rate}/s (sliding second), 2 schedules; \
         {others} other organizers' bookings at 5/s meanwhile, {label}: their commit-to-send p50 {p50:.0} ms, \
         p99 {p99:.0} ms ({} of {others} sent); the fleet {delivered:.1}/s = {:.3} × MaxSendRate; {} throttled; \
         {dups} duplicates; {} runs, {} timed out",
        latencies.len(),
        delivered / rate,
        ses.throttled(),
        runs.len(),
        timeouts(&runs)
    );
    let key = format!("production.fairness.{}", if turns { "turns" } else { "baseline" });
    record(&format!("{key}.p50_ms"), p50);
    record(&format!("{key}.p99_ms"), p99);
    record(&format!("{key}.ratio"), delivered / rate);
    record(&format!("{key}.duplicates"), dups as f64);
    let what = format!("fairness ({label})");
    check(dups == 0, format!("{what}: {dups} duplicate emails in the stand-in's log"));
    check(accepted.len() == all, format!("{what}: {} of {all} sent", accepted.len()));
    check(timeouts(&runs) == 0, format!("{what}: {} runs outlived their timeout", timeouts(&runs)));
    if turns {
        check(p99 <= 2000.0, format!("{what}: the others' p99 {p99:.0} ms, above 2 s"));
        check(delivered / rate >= 0.9, format!("{what}: {:.3} × MaxSendRate, below 0.9", delivered / rate));
    }
    p99
}

/// The poller process (its pid, from `locked_by`: `host:pid:suffix`) that
/// holds the most PROCESSING events, and the events it holds.
async fn busiest_holder(db: &TestDb) -> Option<(u32, String, Vec<Uuid>)> {
    let client = db.pool.get().await.unwrap();
    let rows = client
        .query(
            formatcp!(
                "SELECT locked_by, array_agg(id) FROM outbox_events WHERE status = {PROCESSING} \
              GROUP BY locked_by ORDER BY count(*) DESC LIMIT 1"
            ),
            &[],
        )
        .await
        .unwrap();
    let row = rows.first()?;
    let worker: String = row.get(0);
    let pid = worker.split(':').nth(1)?.parse().ok()?;
    Some((pid, worker, row.get(1)))
}

/// (d): one burst, with or without a poller SIGKILLed mid-burst; returns
/// commit → acceptance p99 (ms).
async fn crash_burst(root: &Path, shape: Shape, rate: f64, seconds: f64, kill: bool) -> f64 {
    let db = TestDb::create().await;
    let ses = SesStandIn::start(standin_limits(rate, Limiter::Sliding)).await;
    let recipients = ((rate * seconds) as usize).max(200) / 2 * 2;
    let fleet = Fleet::start(root, &db, &ses, shape, 1).await;
    // The deployed steady state: the schedule's runs overlap, so two claim
    // at every moment (each holds a live lease). Right after the first
    // invocation only one does, which is not the shape users run.
    let started = Instant::now();
    loop {
        let live: i64 = db.scalar("SELECT count(*) FROM outbox_leases WHERE expires_at >= now()").await;
        if live >= 2 {
            break;
        }
        assert!(started.elapsed().as_secs_f64() < shape.period * 3.0, "two runs never overlapped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let committed = ses.since_start(Instant::now());
    seed_events(&db.pool, recipients / 2, 2).await;
    let mut killed: Option<(Instant, String, Vec<Uuid>)> = None;
    let mut taken_over: Option<Duration> = None;
    let limit = Instant::now() + Duration::from_secs_f64(seconds * 4.0 + shape.timeout * 3.0);
    loop {
        let accepted = ses.accepted().len();
        if kill && killed.is_none() && accepted >= recipients / 3 {
            if let Some((pid, worker, held)) = busiest_holder(&db).await {
                let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                killed = Some((Instant::now(), worker, held));
            }
        }
        if let (Some((at, worker, held)), None) = (&killed, taken_over) {
            let still: i64 = db
                .pool
                .get()
                .await
                .unwrap()
                .query_one(
                    formatcp!(
                        "SELECT count(*) FROM outbox_events WHERE id = ANY($1) AND status = {PROCESSING} \
                       AND locked_by = $2"
                    ),
                    &[held, worker],
                )
                .await
                .unwrap()
                .get(0);
            if still == 0 {
                taken_over = Some(at.elapsed());
            }
        }
        let open: i64 =
            db.scalar(formatcp!("SELECT count(*) FROM outbox_events WHERE status IN ({PENDING}, {PROCESSING})")).await;
        if (open == 0 && (!kill || taken_over.is_some())) || Instant::now() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last outcomes of the run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let accepted = ses.accepted();
    let runs = fleet.stop().await;
    let (_, dups) = duplicates(&db, &accepted).await;
    let mut latencies: Vec<f64> =
        accepted.iter().map(|a| a.at.saturating_sub(committed).as_secs_f64() * 1000.0).collect();
    latencies.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    let unknown: i64 =
        db.scalar(formatcp!("SELECT count(*) FROM booking_notification_sends WHERE status = {UNKNOWN}")).await;
    let what = if kill { "with a poller SIGKILLed mid-burst" } else { "without a crash" };
    println!(
        "(d) burst of {recipients} at {rate}/s, 1 schedule, {what}: commit-to-send p50 {p50:.0} ms, p99 {p99:.0} ms \
         ({} of {recipients} accepted); {dups} duplicates; {} runs",
        accepted.len(),
        runs.len()
    );
    let key = format!("production.crash.{}", if kill { "killed" } else { "none" });
    record(&format!("{key}.p50_ms"), p50);
    record(&format!("{key}.p99_ms"), p99);
    record(&format!("{key}.duplicates"), dups as f64);
    check(dups == 0, format!("crash burst {what}: {dups} duplicate emails in the stand-in's log"));
    if kill {
        let (_, worker, held) = killed.as_ref().expect("a poller held events mid-burst");
        let took = taken_over.expect("its events were taken over").as_secs_f64();
        println!(
            "    the crash: {worker} held {} events; claimed again {took:.2} s after the kill; it cost {unknown} sends \
             left ambiguous (its sends in flight: SES's evidence settles them), every other recipient sent",
            held.len()
        );
        record(&format!("{key}.takeover_s"), took);
        record(&format!("{key}.ambiguous"), unknown as f64);
        check(p99 <= 10_000.0, format!("crash burst: commit-to-send p99 {p99:.0} ms, above 10 s"));
        check(
            accepted.len() as i64 + unknown >= recipients as i64,
            format!("crash burst: {} accepted + {unknown} ambiguous of {recipients}", accepted.len()),
        );
    } else {
        check(accepted.len() == recipients, format!("crash burst {what}: {} of {recipients} sent", accepted.len()));
    }
    p99
}

/// The bursts side by side: each limiter's shape, quota and schedules,
/// then the worst of each column.
fn print_table() {
    let rows = ROWS.lock().unwrap();
    if rows.is_empty() {
        return;
    }
    println!("\nthe bursts: delivered ÷ MaxSendRate, throttled calls, duplicates (targets ≥ 0.9, ≤ 0.1 %, 0)");
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>10} {:>6} {:>7}",
        "SES's limiter", "quota/s", "schedules", "ratio", "throttled", "dups", "alive"
    );
    for r in rows.iter() {
        println!(
            "{:<27} {:>9} {:>9} {:>9.3} {:>9.3}% {:>6} {:>7.1}",
            r.limiter.describe(),
            r.rate,
            r.streams,
            r.ratio,
            r.throttled_pct,
            r.dups,
            r.alive
        );
    }
    let worst = rows.iter().map(|r| r.ratio).fold(f64::INFINITY, f64::min);
    let most = rows.iter().map(|r| r.throttled_pct).fold(0.0, f64::max);
    println!(
        "worst: {worst:.3} × MaxSendRate, {most:.3} % throttled, {} duplicates",
        rows.iter().map(|r| r.dups).sum::<usize>()
    );
    record("production.burst.worst_ratio", worst);
    record("production.burst.worst_throttled_pct", most);
}

#[tokio::main]
async fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf();
    let scale = env_u64("BENCH_SCALE", 5) as f64;
    let template = Shape::template(&root);
    let shape = template.scaled(scale);
    println!(
        "the template's shape: rate(1 minute) = every {}s, timeout {}s, safety margin {}s, SES timeouts {} + {} ms, \
         reserved concurrency {}; scaled by 1/{scale}: every {}s, timeout {}s, margin {}s, SES {} + {} ms; \
         SES latency {} ms ± {} ms (not scaled)",
        template.period,
        template.timeout,
        template.margin,
        template.connect_ms,
        template.read_ms,
        template.reserved,
        shape.period,
        shape.timeout,
        shape.margin,
        shape.connect_ms,
        shape.read_ms,
        env_u64("BENCH_SES_LATENCY_MS", 80),
        env_u64("BENCH_SES_JITTER_MS", 20),
    );
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "trickle" {
        trickle(&root, shape, scale).await;
    }
    if only.is_empty() || only == "burst" {
        let full = std::env::var("BENCH_FULL").is_ok_and(|v| v == "1");
        let limiters: Vec<Limiter> = std::env::var("BENCH_LIMITERS")
            .unwrap_or_else(|_| "bucket,sliding,calendar".into())
            .split(',')
            .map(|l| Limiter::parse(l.trim()).unwrap_or_else(|| panic!("BENCH_LIMITERS: no limiter {l:?}")))
            .collect();
        for limiter in limiters {
            for rate in env_list("BENCH_QUOTAS", "14,200,1000") {
                for streams in env_list("BENCH_STREAMS", "2,4") {
                    burst(&root, shape, limiter, rate, streams as usize, full).await;
                }
            }
        }
        print_table();
    }
    if only.is_empty() || only == "reminders" {
        let rate = env_u64("BENCH_REMINDER_QUOTA", 200) as f64;
        for limiter in ["bucket", "sliding", "calendar"] {
            reminder_burst(&root, shape, Limiter::parse(limiter).unwrap(), rate, 2).await;
        }
    }
    if only.is_empty() || only == "crash" {
        let rate = env_u64("BENCH_CRASH_QUOTA", 200) as f64;
        let seconds = env_u64("BENCH_CRASH_SECONDS", 5) as f64;
        let calm = crash_burst(&root, shape, rate, seconds, false).await;
        let crashed = crash_burst(&root, shape, rate, seconds, true).await;
        println!(
            "(d) commit-to-send p99: {:.2} s with a poller SIGKILLed mid-burst, beside {:.2} s without (target ≤ 10 s)",
            crashed / 1000.0,
            calm / 1000.0
        );
    }
    if only.is_empty() || only == "fairness" {
        let rate = env_u64("BENCH_FAIR_QUOTA", 200) as f64;
        let recipients = env_u64("BENCH_FAIR_RECIPIENTS", 20_000) as usize;
        let fair = fair_burst(&root, shape, rate, recipients, true).await;
        let oldest_first = fair_burst(&root, shape, rate, recipients, false).await;
        println!(
            "(e) the others' commit-to-send p99 during one organizer's burst: {:.2} s taking turns, beside {:.2} s \
             oldest-due first (target ≤ 2 s)",
            fair / 1000.0,
            oldest_first / 1000.0
        );
    }
    let failed = FAILED.lock().unwrap().clone();
    if !failed.is_empty() {
        eprintln!("bench-production: {} check(s) failed:\n  {}", failed.len(), failed.join("\n  "));
        std::process::exit(1);
    }
}
