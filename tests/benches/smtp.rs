//! Sending through SMTP (`BENCH_ONLY=smtp ./scripts/bench.sh`): invitations
//! per second from the poller with the SMTP mailer, at the poller Lambda's
//! defaults (`SMTP_MAX_CONNECTIONS` 8, 2 batches in flight, claim groups of
//! 64), to the local test SMTP server (aiosmtpd, STARTTLS + AUTH, the
//! mailbox written to disk); beside a bare SMTP client (Python's smtplib,
//! `tests/tools/smtp_blast.py`) sending the same message as many times over
//! as many kept connections to the same server: what the server takes, the
//! limit here, without an outbox in front of it.
//!
//! BENCH_SMTP_NOTIFICATIONS (default 2,000) invitations a round, 2 per
//! event; BENCH_ROUNDS (default 2) rounds, the two sides interleaved, each
//! side's best round counting.

use std::sync::Arc;
use std::time::Instant;

use outbox_tests::bench::{env_usize, record};
use outbox_tests::outbox::seed_events;
use outbox_tests::smtp::{Options, SmtpServer, PASSWORD, USER};
use outbox_tests::TestDb;
use shared::fault::Faults;
use shared::notify::mailer::smtp::SmtpMailer;
use shared::relay::{Poller, PollerConfig};

const CONNECTIONS: usize = 8;

/// One drain of `n` invitations through the SMTP mailer; per second.
async fn poller_round(server: &SmtpServer, n: usize) -> f64 {
    let db = TestDb::create().await;
    seed_events(&db.pool, n / 2, 2).await;
    let mut smtp = server.config();
    smtp.max_connections = CONNECTIONS;
    smtp.send_timeout = std::time::Duration::from_secs(30);
    let mut config = PollerConfig::for_tests("bench-smtp");
    config.batch_size = shared::config::settings::POLLER_BATCH_SIZE.default_value();
    config.batches_in_flight = shared::config::settings::POLLER_BATCHES_IN_FLIGHT.default_value();
    let concurrency = shared::config::settings::POLLER_CONCURRENCY.default_value();
    config.concurrency = smtp.sends_in_flight(concurrency);
    let poller = Poller::new(db.pool.clone(), Arc::new(SmtpMailer::new(smtp).unwrap()), Faults::none(), config);
    let before = server.messages().len();
    let started = Instant::now();
    let summary = poller.drain().await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(summary.sent as usize, n, "{summary:?}");
    assert_eq!(server.messages().len() - before, n, "every invitation in the mailbox");
    n as f64 / secs
}

/// The bare client sending `n` copies of `message`; per second.
fn peer_round(server: &SmtpServer, message: &std::path::Path, n: usize) -> f64 {
    let python = std::env::var("OUTBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/smtp_blast.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["127.0.0.1", &server.port.to_string()])
        .arg(server.ca_file())
        .args([USER, PASSWORD])
        .arg(message)
        .args([n.to_string(), CONNECTIONS.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "smtp_blast.py: {}", String::from_utf8_lossy(&out.stderr));
    let secs: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    n as f64 / secs
}

#[tokio::main]
async fn main() {
    let n = env_usize("BENCH_SMTP_NOTIFICATIONS", 2000);
    let rounds = env_usize("BENCH_ROUNDS", 2);
    let server = SmtpServer::start(Options::default());
    // Warm-up: the first invitations, whose bytes the peer then sends.
    poller_round(&server, 2).await;
    let message = server.dir.join("message.eml");
    std::fs::write(&message, &server.messages()[0].data).unwrap();
    let (mut ours, mut peer) = (0f64, 0f64);
    for round in 1..=rounds {
        let (a, b) = if round % 2 == 1 {
            let a = poller_round(&server, n).await;
            (a, peer_round(&server, &message, n))
        } else {
            let b = peer_round(&server, &message, n);
            (poller_round(&server, n).await, b)
        };
        println!("round {round}: poller {a:.0}/s, bare smtplib client {b:.0}/s");
        ours = ours.max(a);
        peer = peer.max(b);
    }
    record("smtp.poller_per_s", ours);
    record("smtp.peer_per_s", peer);
    println!(
        "\nSMTP, {n} invitations a round, {CONNECTIONS} kept connections each side, best of {rounds}:\n\
         | the poller, SMTP mailer | {ours:.0}/s |\n\
         | a bare smtplib client, same server | {peer:.0}/s |\n\
         | ratio | {:.2} |",
        ours / peer
    );
}
