//! A poller in its own process, for crash tests: the tests start it, let a
//! fault point SIGKILL it, and check what survived. It runs the same
//! `shared::relay::Poller` as the poller Lambda, with a recording
//! mailer that journals every accepted send to a file.
//!
//! Usage: `outbox-worker drain|invoke JOURNAL` (env: DATABASE_URL,
//! OUTBOX_FAULT_POINTS, OUTBOX_MAX_ATTEMPTS, POLLER_CLAIM_GROUP,
//! POLLER_BATCHES_IN_FLIGHT, POLLER_LEASE_SECS, POLLER_IDLE_WAIT_MS,
//! OUTBOX_WORKER_SEND_DELAY_MS: how long each recording send takes, and
//! OUTBOX_WORKER_RUN_SECS: how long `invoke` runs, 2 by default). `invoke` runs one scheduled
//! invocation with a 2 s deadline, as the poller Lambda does (EMF metrics
//! and the health summary on stdout).
//!
//! With `OUTBOX_WORKER_MAILER=ses` it sends through the real SES v2 client
//! instead (configured like the poller Lambda: `SES_ENDPOINT_URL`,
//! `SES_FROM_ADDRESS`, `SES_MAX_SEND_RATE`, ...), paced by the fleet's rate
//! as the Lambda is, with at most `POLLER_CONCURRENCY` sends in flight: the
//! fault run kills such workers at random while a proxy injects faults.
//! With `OUTBOX_WORKER_MAILER=smtp` it sends through the SMTP mailer
//! (`SMTP_URL`, `SMTP_FROM_ADDRESS`, `SMTP_CA_FILE`, ...) to a real SMTP
//! server, the same way.

use std::sync::Arc;
use std::time::Duration;

use shared::db::DbConfig;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::ses::{SesConfig, SesMailer};
use shared::notify::mailer::smtp::{SmtpConfig, SmtpMailer};
use shared::notify::pacing::pace::Pacer;
use shared::notify::pacing::send_rate;
use shared::relay::{Poller, PollerConfig};

#[tokio::main]
async fn main() {
    shared::telemetry::init();
    let args: Vec<String> = std::env::args().collect();
    let [_, cmd, journal] = args.as_slice() else {
        eprintln!("usage: outbox-worker drain|invoke JOURNAL");
        std::process::exit(2);
    };
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let pool = DbConfig::from_url(&url, 16, Duration::from_secs(5)).unwrap().build_pool().unwrap();
    let mut config = PollerConfig::for_tests(&format!("child-{}", std::process::id()));
    // Deterministic: the first send hits the fault point (a crash test may
    // ask for more sends in flight).
    config.concurrency = match std::env::var("POLLER_CONCURRENCY") {
        Ok(n) => n.parse().expect("POLLER_CONCURRENCY"),
        Err(_) => 1,
    };
    if let Ok(max) = std::env::var("OUTBOX_MAX_ATTEMPTS") {
        config.max_attempts = max.parse().expect("OUTBOX_MAX_ATTEMPTS");
    }
    // The crash tests choose the claim group (1, or the default) per scenario.
    if let Ok(group) = std::env::var("POLLER_CLAIM_GROUP") {
        config.claim_group = group.parse().expect("POLLER_CLAIM_GROUP");
    }
    if let Ok(secs) = std::env::var("SES_CANARY_EVERY_SECS") {
        config.canary_every = Duration::from_secs(secs.parse().expect("SES_CANARY_EVERY_SECS"));
    }
    if let Ok(batches) = std::env::var("POLLER_BATCHES_IN_FLIGHT") {
        config.batches_in_flight = batches.parse().expect("POLLER_BATCHES_IN_FLIGHT");
    }
    if let Ok(ms) = std::env::var("POLLER_IDLE_WAIT_MS") {
        config.idle_wait = Duration::from_millis(ms.parse().expect("POLLER_IDLE_WAIT_MS"));
    }
    if let Ok(secs) = std::env::var("POLLER_LEASE_SECS") {
        config.lease = Duration::from_secs_f64(secs.parse().expect("POLLER_LEASE_SECS"));
    }
    let faults = Faults::from_env().expect("fault spec");
    let mailer = std::env::var("OUTBOX_WORKER_MAILER").unwrap_or_default();
    if mailer == "ses" {
        // Paced by the fleet's rate, as the poller Lambda is.
        config.concurrency = PollerConfig::concurrency_from_env().expect("POLLER_CONCURRENCY");
        let ses = SesConfig::from_env().expect("SES settings");
        let pacer = Pacer::new(pool.clone(), send_rate::SES, config.concurrency, config.send_rate_headroom);
        let cap = ses.max_send_rate;
        let mailer = SesMailer::from_env(ses).await;
        run(Poller::new(pool, Arc::new(mailer), faults, config).with_pace(pacer, cap), cmd).await;
    } else if mailer == "smtp" {
        // A setting refused as the poller's cold start refuses it: one line.
        let refused = |e: shared::config::ConfigError| -> ! {
            eprintln!("{e}");
            std::process::exit(2)
        };
        let smtp = SmtpConfig::from_env().await.unwrap_or_else(|e| refused(e));
        let concurrency = PollerConfig::concurrency_from_env().expect("POLLER_CONCURRENCY");
        config.concurrency = smtp.sends_in_flight(concurrency);
        let mailer = SmtpMailer::new(smtp).unwrap_or_else(|e| refused(e));
        run(Poller::new(pool, Arc::new(mailer), faults, config), cmd).await;
    } else {
        let mut mailer = RecordingMailer::with_journal(journal).expect("journal file");
        if let Ok(ms) = std::env::var("OUTBOX_WORKER_SEND_DELAY_MS") {
            mailer = mailer.with_delay(Duration::from_millis(ms.parse().expect("OUTBOX_WORKER_SEND_DELAY_MS")));
        }
        run(Poller::new(pool, Arc::new(mailer), faults, config), cmd).await;
    }
}

async fn run(poller: Poller, cmd: &str) {
    match cmd {
        "drain" => {
            // As each Lambda run starts: the rate, then a canary if one is due.
            poller.refresh_rate().await.expect("the fleet's rate");
            poller.canary().await.expect("the canary");
            let summary = poller.drain().await.expect("drain");
            println!("{}", serde_json::to_string(&summary).unwrap());
        }
        "invoke" => {
            let secs =
                std::env::var("OUTBOX_WORKER_RUN_SECS").map_or(2.0, |s| s.parse().expect("OUTBOX_WORKER_RUN_SECS"));
            let deadline = std::time::Instant::now() + Duration::from_secs_f64(secs);
            let health = poller.invoke(deadline).await.expect("invoke");
            println!("{}", serde_json::to_string(&health).unwrap());
        }
        other => panic!("unknown command {other}"),
    }
}
