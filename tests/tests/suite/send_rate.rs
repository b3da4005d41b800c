//! One send rate for the fleet: pollers take every send from the shared
//! bucket in `send_rate`, whose rate is the account's (`GetAccount`) or the
//! operator's lower cap. Measured from the SES stand-in's own acceptance
//! times, in front of moto: the total holds with 1, 2 and 4 pollers, a
//! throttling answer slows the fleet down, and nothing is sent twice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::{event_counts, seed_events, EventStatus};
use outbox_tests::ses::{moto_endpoint, ses_config, ses_mailer, unique_sender, verify_sender};
use outbox_tests::ses_standin::{Accepted, Limits, SesStandIn};
use outbox_tests::TestDb;
use shared::fault::Faults;
use shared::notify::mailer::ses::SesMailer;
use shared::notify::pace::Pacer;
use shared::notify::send_rate;
use shared::relay::{Poller, PollerConfig};

fn paced_poller(db: &TestDb, endpoint: &str, sender: &str, name: &str, cap: Option<f64>) -> Poller<SesMailer> {
    let mut config = PollerConfig::for_tests(name);
    // Small batches, so every poller of a few has events to claim.
    config.batch_size = 4;
    config.concurrency = 16;
    let pool = TestDb::pool_for(&db.url, PollerConfig::min_pool_size(config.batches_in_flight) + 2);
    let pacer = Pacer::new(pool.clone(), send_rate::SES, config.concurrency);
    let mailer = ses_mailer(ses_config(endpoint, sender));
    Poller::new(pool, Arc::new(mailer), Faults::none(), config).with_pace(pacer, cap)
}

/// Drains with every poller at once until every event is DONE (throttled
/// events come back a little later), within `limit`.
async fn drain_all(db: &TestDb, pollers: &[Poller<SesMailer>], limit: Duration) {
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
        reported,
        latency: Duration::from_millis(30),
        jitter: Duration::from_millis(10),
        upstream: Some(moto),
    };
    (SesStandIn::start(limits).await, sender)
}

#[tokio::test]
async fn the_fleet_rate_holds_with_1_2_and_4_pollers() {
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
        // The bucket's burst is a fifth of a second; each poller may hold a
        // twentieth of a second's tokens for a tenth of a second.
        assert!(most as f64 <= RATE * (1.0 + 0.2 + 0.05 * n as f64) + 1.0, "{n} poller(s): {most} in one second");
        assert!(rate <= RATE * 1.1, "{n} poller(s) together stayed at the account's rate: {rate:.1}/s");
        assert!(rate >= RATE * 0.7, "{n} poller(s) used the account's rate: {rate:.1}/s");
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
    assert!(rate <= 11.0, "the cap held: {rate:.1}/s");
    let stored: f64 = db.scalar("SELECT rate FROM send_rate WHERE provider = 'ses'").await;
    assert_eq!(stored, 10.0);
}

#[tokio::test]
async fn a_throttling_answer_slows_the_fleet_and_sends_nothing_twice() {
    // GetAccount says 60/s, but only 40/s are left to us: another sender
    // on the account uses the rest, so the fleet is throttled.
    let db = TestDb::create().await;
    let (ses, sender) = standin(40.0, Some(60.0)).await;
    seed_events(&db.pool, 150, 2).await;
    let pollers: Vec<_> = (0..2).map(|i| paced_poller(&db, &ses.endpoint, &sender, &format!("th-{i}"), None)).collect();
    drain_all(&db, &pollers, Duration::from_secs(60)).await;
    let accepted = ses.accepted();
    each_once(&accepted, 300);
    let throttled = ses.throttled();
    assert!(throttled >= 1, "the stand-in throttled the fleet at least once");
    // After the first throttling answer, the fleet sends at half the
    // account's 60/s for 10 s: 30/s, under what the stand-in allows.
    let first = ses.throttle_times()[0];
    let (from, to) = (first + Duration::from_secs(1), first + Duration::from_secs(3));
    let slowed = accepted.iter().filter(|a| a.at >= from && a.at < to).count() as f64 / 2.0;
    let before = SesStandIn::most_in(&accepted, Duration::from_secs(1));
    println!(
        "throttled {throttled} times of {} sends; {slowed:.1}/s in the two seconds after the first, \
         at most {before} in one second before",
        accepted.len()
    );
    assert!(throttled <= 10, "no retry storm: {throttled} throttled calls");
    assert!(slowed <= 30.0 * 1.15 + 1.0, "the fleet slowed down to half its rate: {slowed:.1}/s");
}

/// A take writes no row version: a snapshot held for hours, which keeps
/// every version of an updated row, cannot make the fleet's takes walk
/// them. The bucket is a sequence (`send_rate_ses_next`); the row changes
/// only with the rate. Taken as the functions' role, with its privileges.
#[tokio::test]
async fn taking_tokens_under_a_held_snapshot_writes_no_row_version() {
    let db = TestDb::create().await;
    // As the functions' role: the poller's privileges suffice.
    let app = db.app_role_pool().await;
    let client = app.get().await.unwrap();
    send_rate::configure(&client, send_rate::SES, 1_000_000.0, None).await.unwrap();
    let (_report, _) = db.held_snapshot("nightly-report").await;
    let version = "SELECT ctid::text || ':' || xmin::text FROM send_rate WHERE provider = 'ses'";
    let before: String = db.scalar(version).await;
    let mut granted = 0;
    for _ in 0..2000 {
        granted += send_rate::take(&client, send_rate::SES, 4).await.unwrap().unwrap().granted;
    }
    // An unchanged rate, configured again (every minute by every poller).
    send_rate::configure(&client, send_rate::SES, 1_000_000.0, None).await.unwrap();
    assert_eq!(db.scalar::<String>(version).await, before, "the row is the same version");
    assert!(granted > 0, "tokens were granted");
}

/// The bucket holds a fifth of a second of sends: at 100/s, 20 tokens at
/// once, then one every 10 ms, with the wait until the next one.
#[tokio::test]
async fn the_bucket_holds_a_fifth_of_a_second_and_says_how_long_to_wait() {
    let db = TestDb::create().await;
    let client = db.pool.get().await.unwrap();
    send_rate::configure(&client, send_rate::SES, 100.0, None).await.unwrap();
    let first = send_rate::take(&client, send_rate::SES, 50).await.unwrap().unwrap();
    assert_eq!(first.granted, 20, "{first:?}");
    let empty = send_rate::take(&client, send_rate::SES, 50).await.unwrap().unwrap();
    assert!(empty.granted <= 1, "{empty:?}");
    if empty.granted == 0 {
        assert!(empty.wait > Duration::ZERO && empty.wait <= Duration::from_millis(10), "{empty:?}");
    }
    assert_eq!(empty.rate, 100.0);
    send_rate::slow_down(&client, send_rate::SES, Duration::from_secs(10)).await.unwrap();
    let slowed = send_rate::take(&client, send_rate::SES, 50).await.unwrap().unwrap();
    assert_eq!((slowed.granted, slowed.rate), (0, 50.0), "in debt, at half the rate: {slowed:?}");
    assert!(slowed.wait >= Duration::from_millis(400), "half a second of debt: {slowed:?}");
}
