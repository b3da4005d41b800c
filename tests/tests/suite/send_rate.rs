//! One send rate for the fleet: every send takes its own start time from
//! the shared schedule in `send_rate` (each 1 / rate after the one before,
//! no burst), whose rate is the account's (`GetAccount`) or the operator's
//! lower cap. Measured from the SES stand-in's own acceptance times, in
//! front of moto, against its strictest limiter (at most the rate in any
//! sliding second): the total holds with 1, 2 and 4 pollers, a throttling
//! answer costs a little of the rate, not half, and nothing is sent twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::{event_counts, seed_events, EventStatus};
use outbox_tests::ses::{moto_endpoint, ses_config, ses_mailer, unique_sender, verify_sender};
use outbox_tests::ses_standin::{Accepted, Limiter, Limits, SesStandIn};
use outbox_tests::TestDb;
use shared::fault::Faults;
use shared::notify::pacing::pace::{Pacer, HORIZON, THROTTLE};
use shared::notify::pacing::send_rate;
use shared::relay::{Poller, PollerConfig};

fn paced_poller(db: &TestDb, endpoint: &str, sender: &str, name: &str, cap: Option<f64>) -> Poller {
    let mut config = PollerConfig::for_tests(name);
    // Small batches, so every poller of a few has events to claim.
    config.batch_size = 4;
    config.concurrency = 16;
    // As deployed (POLLER_BATCHES_IN_FLIGHT's default): the first loop
    // takes turns between organizers and claims nothing while one alone
    // has due work (here), the other three keep the rate fed.
    config.batches_in_flight = 4;
    let pool = TestDb::pool_for(&db.url, PollerConfig::min_pool_size(config.batches_in_flight) + 2);
    let pacer = Pacer::new(pool.clone(), send_rate::SES, config.concurrency, config.send_rate_headroom);
    let mailer = ses_mailer(ses_config(endpoint, sender));
    Poller::new(pool, Arc::new(mailer), Faults::none(), config).with_pace(pacer, cap)
}

/// Drains with every poller at once until every event is DONE (throttled
/// events come back a little later), within `limit`.
async fn drain_all(db: &TestDb, pollers: &[Poller], limit: Duration) {
    let started = Instant::now();
    for p in pollers {
        p.refresh_rate().await.unwrap();
    }
    loop {
        let mut runs = tokio::task::JoinSet::new();
        for p in pollers {
            let p = p.clone();
            runs.spawn(async move { p.drain().await.unwrap() });
        }
        while runs.join_next().await.is_some() {}
        let counts = event_counts(db).await;
        if counts.iter().all(|(s, n)| *s == EventStatus::Done || *n == 0) {
            return;
        }
        assert!(started.elapsed() < limit, "not all events done within {limit:?}: {counts:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every accepted message names a distinct claim, and there are `expected`.
fn each_once(accepted: &[Accepted], expected: usize) {
    let claims: HashSet<&str> = accepted.iter().filter_map(|a| a.claim.as_deref()).collect();
    assert_eq!(accepted.len(), expected, "every send accepted");
    assert_eq!(claims.len(), expected, "no claim accepted twice (no duplicate email)");
}

/// Accepted messages a second between the first and the last.
fn delivered_rate(accepted: &[Accepted]) -> f64 {
    let span = accepted.last().unwrap().at - accepted.first().unwrap().at;
    (accepted.len() - 1) as f64 / span.as_secs_f64()
}

async fn standin(rate: f64, reported: Option<f64>) -> (SesStandIn, String) {
    let moto = moto_endpoint();
    let sender = unique_sender();
    verify_sender(&moto, &sender).await;
    let limits = Limits {
        rate,
        limiter: Limiter::Sliding,
        reported,
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        upstream: Some(moto),
        identities: None,
    };
    (SesStandIn::start(limits).await, sender)
}

#[tokio::test]
async fn the_fleet_rate_holds_with_1_2_and_4_pollers_in_any_sliding_second() {
    const RATE: f64 = 40.0;
    for n in [1, 2, 4] {
        let db = TestDb::create().await;
        let (ses, sender) = standin(RATE, None).await;
        seed_events(&db.pool, 60, 2).await;
        let pollers: Vec<_> =
            (0..n).map(|i| paced_poller(&db, &ses.endpoint, &sender, &format!("fleet-{n}-{i}"), None)).collect();
        drain_all(&db, &pollers, Duration::from_secs(30)).await;
        let accepted = ses.accepted();
        each_once(&accepted, 120);
        let most = SesStandIn::most_in(&accepted, Duration::from_secs(1));
        let rate = delivered_rate(&accepted);
        println!("{n} poller(s): {rate:.1}/s delivered, at most {most} in one second, account {RATE}/s");
        assert_eq!(ses.throttled(), 0, "{n} poller(s) never went over the account's rate");
        // Each send at its own time, 1 / (0.97 × 40) s apart: no burst, so
        // no sliding second holds more than the rate.
        assert!(most as f64 <= RATE, "{n} poller(s): {most} in one second");
        assert!(rate <= RATE, "{n} poller(s) together stayed at the account's rate: {rate:.1}/s");
        assert!(rate >= RATE * 0.85, "{n} poller(s) used the account's rate: {rate:.1}/s");
    }
}

#[tokio::test]
async fn the_operators_cap_holds_the_fleet_below_the_accounts_rate() {
    let db = TestDb::create().await;
    let (ses, sender) = standin(200.0, None).await;
    seed_events(&db.pool, 15, 2).await;
    let pollers: Vec<_> =
        (0..2).map(|i| paced_poller(&db, &ses.endpoint, &sender, &format!("cap-{i}"), Some(10.0))).collect();
    drain_all(&db, &pollers, Duration::from_secs(30)).await;
    let accepted = ses.accepted();
    each_once(&accepted, 30);
    let rate = delivered_rate(&accepted);
    println!("capped at 10/s of an account's 200/s: {rate:.1}/s delivered");
    assert!(rate <= 10.0, "the cap held: {rate:.1}/s");
    let stored: f64 = db.scalar("SELECT rate FROM send_rate WHERE provider = 'ses'").await;
    assert_eq!(stored, 10.0);
}

#[tokio::test]
async fn a_throttling_answer_costs_a_little_of_the_rate_not_half_and_sends_nothing_twice() {
    // GetAccount says 60/s, but only 40/s are left to us: another sender
    // on the account uses the rest, so the fleet is throttled until its
    // throttle factor finds the 40/s.
    let db = TestDb::create().await;
    let (ses, sender) = standin(40.0, Some(60.0)).await;
    seed_events(&db.pool, 200, 2).await;
    let pollers: Vec<_> = (0..2).map(|i| paced_poller(&db, &ses.endpoint, &sender, &format!("th-{i}"), None)).collect();
    drain_all(&db, &pollers, Duration::from_secs(60)).await;
    let accepted = ses.accepted();
    each_once(&accepted, 400);
    let throttled = ses.throttled();
    assert!(throttled >= 1, "the stand-in throttled the fleet at least once");
    // After the first answer, the factor steps down by a tenth at most once
    // a second: the fleet soon sends at about what is left, not at half.
    let first = ses.throttle_times()[0];
    let after: Vec<Accepted> = accepted.iter().filter(|a| a.at >= first + Duration::from_secs(2)).cloned().collect();
    let kept = delivered_rate(&after);
    let factor: f64 = db.scalar("SELECT factor FROM send_rate WHERE provider = 'ses'").await;
    println!(
        "throttled {throttled} times of {} sends; {kept:.1}/s delivered from 2 s after the first (40/s left); \
         throttle factor {factor:.2}",
        accepted.len()
    );
    // Each answer is released and its event retried 2 s later, taking a
    // time of its own like any send: the fleet never retries faster than
    // its rate. A tenth lower once a second finds 40/s of 58/s in about
    // four seconds.
    assert!(throttled * 100 <= accepted.len() * 15, "no retry storm: {throttled} throttled calls");
    assert!(kept >= 40.0 * 0.75, "most of what is left is used, not half: {kept:.1}/s");
    assert!(kept <= 40.0 * 1.05, "{kept:.1}/s");
}

/// A reservation writes no row version: a snapshot held for hours, which
/// keeps every version of an updated row, cannot make the fleet's
/// reservations walk them. The schedule is a sequence
/// (`send_rate_ses_next`); the row changes only with the rate or a
/// throttling answer. Reserved as the poller's role, with its privileges.
#[tokio::test]
async fn reserving_start_times_under_a_held_snapshot_writes_no_row_version() {
    let db = TestDb::create().await;
    let poller = db.role_pool("outbox_poller").await;
    let client = poller.get().await.unwrap();
    send_rate::configure(&client, send_rate::SES, 1_000_000.0, None).await.unwrap();
    let (_report, _) = db.held_snapshot("nightly-report").await;
    let version = "SELECT ctid::text || ':' || xmin::text FROM send_rate WHERE provider = 'ses'";
    let before: String = db.scalar(version).await;
    let mut granted = 0;
    for _ in 0..2000 {
        let r = send_rate::reserve(&client, send_rate::SES, 4, Duration::ZERO, HORIZON, &THROTTLE).await;
        granted += r.unwrap().unwrap().granted;
    }
    // An unchanged rate, configured again (every minute by every poller).
    send_rate::configure(&client, send_rate::SES, 1_000_000.0, None).await.unwrap();
    assert_eq!(db.scalar::<String>(version).await, before, "the row is the same version");
    assert!(granted > 0, "start times were reserved");
}

/// The schedule has no burst: at 100/s, times exactly 10 ms apart, at most
/// a horizon ahead, then the wait until the next one; a throttling answer
/// widens the gap by a tenth, once however many answers come in a second.
#[tokio::test]
async fn the_schedule_spaces_every_send_and_a_throttle_widens_it_by_a_tenth_once() {
    let db = TestDb::create().await;
    let client = db.pool.get().await.unwrap();
    send_rate::configure(&client, send_rate::SES, 100.0, None).await.unwrap();
    let reserve = |want| send_rate::reserve(&client, send_rate::SES, want, Duration::ZERO, HORIZON, &THROTTLE);
    let first = reserve(50).await.unwrap().unwrap();
    assert_eq!(first.gap, Duration::from_millis(10), "{first:?}");
    assert!(first.granted >= 5 && first.granted <= 6, "a horizon of 50 ms at 100/s, not a burst: {first:?}");
    assert!(first.first_in <= Duration::from_millis(1), "an idle fleet starts at once: {first:?}");
    let next = reserve(50).await.unwrap().unwrap();
    assert!(next.granted <= 1, "the horizon is taken: {next:?}");
    if next.granted == 0 {
        assert!(next.wait > Duration::ZERO && next.wait <= Duration::from_millis(10), "{next:?}");
    }
    assert_eq!(first.rate, 100.0);
    let factor = send_rate::throttled(&client, send_rate::SES, &THROTTLE).await.unwrap();
    assert!((factor - 0.9).abs() < 0.01, "lowered by a tenth: {factor}");
    let again = send_rate::throttled(&client, send_rate::SES, &THROTTLE).await.unwrap();
    assert!((again - 0.9).abs() < 0.01, "once in a second, however many answers: {again}");
    tokio::time::sleep(HORIZON * 2).await;
    let slowed = reserve(1).await.unwrap().unwrap();
    assert!((slowed.rate - 90.0).abs() < 1.0, "{slowed:?}");
    assert!((slowed.gap.as_secs_f64() - 1.0 / 90.0).abs() < 0.0005, "{slowed:?}");
}

/// Two pollers start at once on a fresh database, each writing the
/// account's rate. The second's insert waits for the first's, then changes
/// nothing, and its statement's snapshot, taken before that commit, saw no
/// row: it returned none, and that poller's run failed at cold start (seen
/// in a fault run). It now reads the row the first wrote.
#[tokio::test]
async fn two_pollers_configuring_the_first_rate_at_once_both_read_it() {
    let db = TestDb::create().await;
    let mut first = db.pool.get().await.unwrap();
    let tx = first.transaction().await.unwrap();
    send_rate::configure(&tx, send_rate::SES, 14.0, None).await.unwrap();
    let second = db.pool.get().await.unwrap();
    let waiting = tokio::spawn(async move { send_rate::configure(&second, send_rate::SES, 14.0, None).await });
    // The second waits on the first's uncommitted row.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the second insert waits for the first");
    tx.commit().await.unwrap();
    let read = waiting.await.unwrap().expect("the second poller reads the rate the first wrote");
    assert_eq!(read.rate, 14.0);
}
