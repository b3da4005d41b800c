//! A poller in its own process, for crash tests: the tests start it, let a
//! fault point SIGKILL it, and check what survived. It runs the same
//! `shared::relay::Poller` as the poller Lambda, with a recording
//! mailer that journals every accepted send to a file.
//!
//! Usage: `outbox-worker drain|invoke JOURNAL` (env: DATABASE_URL,
//! OUTBOX_FAULT_POINTS, OUTBOX_MAX_ATTEMPTS). `invoke` runs one scheduled
//! invocation with a 2 s deadline, as the poller Lambda does (EMF metrics
//! and the health summary on stdout).

use std::sync::Arc;
use std::time::Duration;

use shared::db::DbConfig;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
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
    let mailer = Arc::new(RecordingMailer::with_journal(journal).expect("journal file"));
    let mut config = PollerConfig::for_tests(&format!("child-{}", std::process::id()));
    config.concurrency = 1; // deterministic: the first send hits the fault point
    if let Ok(max) = std::env::var("OUTBOX_MAX_ATTEMPTS") {
        config.max_attempts = max.parse().expect("OUTBOX_MAX_ATTEMPTS");
    }
    let poller = Poller::new(pool, mailer, Faults::from_env().expect("fault spec"), config);
    match cmd.as_str() {
        "drain" => {
            let summary = poller.drain().await.expect("drain");
            println!("{}", serde_json::to_string(&summary).unwrap());
        }
        "invoke" => {
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            let health = poller.invoke(deadline).await.expect("invoke");
            println!("{}", serde_json::to_string(&health).unwrap());
        }
        other => panic!("unknown command {other}"),
    }
}
