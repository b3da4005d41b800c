//! `outboxctl` as an operator runs it: a real process (`OUTBOXCTL_BIN`,
//! built by scripts/test.sh) against a test database, as an operator's login.

use std::sync::Arc;

use serde_json::Value;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::relay::PollerConfig;

use crate::outbox::{create_booking, poller};
use crate::TestDb;

/// What operators act on: a booking at `slots.0` whose invitation to Carol
/// died (refused until its 2 attempts ran out, after Alice got hers), and
/// one at `slots.1` whose send to Erin is UNKNOWN; drained, with every
/// booking made before. Returns the mailer, to drain again.
pub async fn seed_dead_and_unknown(db: &TestDb, slots: (u32, u32)) -> Arc<RecordingMailer> {
    create_booking(db, slots.0, &["alice@example.com", "carol@example.com"]).await;
    create_booking(db, slots.1, &["erin@example.com"]).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("carol@example.com", SendOutcome::NotSent { reason: "Throttling".into() }, 2);
    mailer.script("erin@example.com", SendOutcome::Unknown { reason: "read timeout".into() }, 1);
    let mut config = PollerConfig::for_tests("seed");
    config.max_attempts = 2;
    poller(db, mailer.clone(), config).drain().await.unwrap();
    mailer
}

/// What one run printed and returned.
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

pub fn ctl_with_url(url: &str, args: &[&str]) -> Out {
    let bin = std::env::var("OUTBOXCTL_BIN").expect("OUTBOXCTL_BIN is not set: run ./scripts/test.sh");
    let out = std::process::Command::new(bin)
        .args(args)
        .env("DATABASE_URL", url)
        .env("OUTBOXCTL_OPERATOR", "oncall@example.com")
        .env("RUST_LOG", "off")
        .output()
        .expect("run outboxctl");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// outboxctl as operators run it: logged in as a member of
/// `outbox_operator` (V31), so that every command the suite runs proves the
/// role's grants are enough. `migrate` needs the owner: [`ctl_with_url`].
pub async fn ctl(db: &TestDb, args: &[&str]) -> Out {
    ctl_with_url(&db.role_url("outbox_operator").await, args)
}

pub fn assert_one_line_error(out: &Out, code: i32, needle: &str) {
    assert_eq!(out.code, code, "stderr: {}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "one line: {:?}", out.stderr);
    assert!(out.stderr.starts_with("outboxctl: error: "), "{}", out.stderr);
    assert!(out.stderr.contains(needle), "{needle:?} not in {}", out.stderr);
}
