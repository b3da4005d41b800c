//! `outboxctl` as an operator runs it: a real process (`OUTBOXCTL_BIN`,
//! built by scripts/test.sh) against a test database, as an operator's login.

use serde_json::Value;

use crate::TestDb;

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
