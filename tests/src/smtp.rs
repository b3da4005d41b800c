//! A real SMTP server for the SMTP mailer's tests: `scripts/smtp-server.py`
//! (aiosmtpd, pinned in scripts/lib/moto.sh) in a child process of its own
//! per test, with TLS from a CA it makes, AUTH, a mailbox file, and the
//! faults the test asks for.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use shared::notify::mailer::smtp::{Login, Security, SmtpConfig};
use shared::notify::render::invite::Sender;
use uuid::Uuid;

pub const USER: &str = "outbox";
pub const PASSWORD: &str = "s3cret-smtp-password";
pub const SENDER: &str = "Bookings <bookings@example.com>";

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// `implicit`, `starttls` or `none` (no TLS offered).
    pub tls: &'static str,
    /// Require AUTH with [`USER`] / [`PASSWORD`].
    pub auth: bool,
    /// The scripted faults (see the script's doc), as JSON.
    pub faults: Value,
    /// Random faults: probability and seed.
    pub random: Option<(f64, u64)>,
    /// How long a stall lasts.
    pub stall_secs: f64,
    /// Play SES's own SMTP interface with a configuration set: publish the
    /// events SES would for each message naming one ([`SmtpServer::ses_events`]).
    pub ses_events: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            tls: "starttls",
            auth: true,
            faults: Value::Array(vec![]),
            random: None,
            stall_secs: 30.0,
            ses_events: false,
        }
    }
}

pub struct SmtpServer {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
    pub options: Options,
}

/// One message the server accepted.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Stored {
    pub mail_from: String,
    pub rcpt_tos: Vec<String>,
    pub message_id: String,
    pub subject: String,
    /// Which connection (1, 2, ...) carried it.
    pub connection: u64,
    pub data: String,
}

impl SmtpServer {
    pub fn start(options: Options) -> Self {
        let dir = std::env::temp_dir().join(format!("outbox-smtp-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let python = std::env::var("OUTBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/smtp-server.py");
        let mut cmd = Command::new(python);
        cmd.arg(script)
            .args(["--listen", "127.0.0.1:0", "--tls", options.tls])
            .arg("--tls-dir")
            .arg(dir.join("tls"))
            .arg("--mailbox")
            .arg(dir.join("mailbox.jsonl"))
            .args(["--faults", &options.faults.to_string()])
            .args(["--stall-secs", &options.stall_secs.to_string()]);
        if options.auth {
            cmd.args(["--auth", &format!("{USER}:{PASSWORD}")]);
        }
        if options.ses_events {
            cmd.arg("--ses-events").arg(dir.join("ses-events.jsonl"));
        }
        if let Some((p, seed)) = options.random {
            cmd.args(["--random", &p.to_string(), "--seed", &seed.to_string()]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("server.log")).unwrap())
            .spawn()
            .expect("start scripts/smtp-server.py (run the tests with ./scripts/test.sh, which installs aiosmtpd)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let Some(port) = line.trim().strip_prefix("ready ").and_then(|p| p.parse().ok()) else {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            panic!("the SMTP server did not start: {line:?}\n{log}");
        };
        Self { child, port, dir, options }
    }

    pub fn url(&self) -> String {
        let scheme = if self.options.tls == "implicit" { "smtps" } else { "smtp" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The CA the server's certificate comes from (`SMTP_CA_FILE`).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("tls").join("ca.crt")
    }

    pub fn mailbox(&self) -> PathBuf {
        self.dir.join("mailbox.jsonl")
    }

    /// Where SES's events for what it accepted are written (with
    /// [`Options::ses_events`]), one JSON line each.
    pub fn ses_events(&self) -> PathBuf {
        self.dir.join("ses-events.jsonl")
    }

    /// Every message accepted so far, in order.
    pub fn messages(&self) -> Vec<Stored> {
        std::fs::read_to_string(self.mailbox())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a mailbox line"))
            .collect()
    }

    /// The messages, parsed by Python's email + icalendar (as the SES
    /// tests read moto's).
    pub fn parsed(&self) -> Vec<Value> {
        crate::inspect_mail(&[std::ffi::OsStr::new("--mailbox"), self.mailbox().as_os_str()])
    }

    /// A mailer configuration for this server, trusting its CA, with AUTH
    /// when the server wants it.
    pub fn config(&self) -> SmtpConfig {
        let security = if self.options.tls == "implicit" { Security::Implicit } else { Security::StartTls };
        SmtpConfig {
            from: Sender::parse(SENDER).unwrap(),
            host: "127.0.0.1".into(),
            port: self.port,
            security,
            login: self.options.auth.then(|| Login { username: USER.into(), password: PASSWORD.into() }),
            extra_roots_pem: std::fs::read(self.ca_file()).ok(),
            connect_timeout: Duration::from_secs(2),
            send_timeout: Duration::from_secs(3),
            max_connections: 4,
            max_send_rate: None,
            ses_configuration_set: self.options.ses_events.then(|| crate::ses_events::CONFIGURATION_SET.to_string()),
            canary_to: self.options.ses_events.then(|| "success@simulator.amazonses.com".to_string()),
        }
    }

    /// The environment of a process configured for this server
    /// (`MAILER=smtp`, the poller's way).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("MAILER", "smtp".to_string()),
            ("SMTP_URL", self.url()),
            ("SMTP_FROM_ADDRESS", SENDER.to_string()),
            ("SMTP_CA_FILE", self.ca_file().display().to_string()),
            ("SMTP_CONNECT_TIMEOUT_MS", "2000".into()),
            ("SMTP_SEND_TIMEOUT_MS", "3000".into()),
        ];
        if self.options.auth {
            env.push(("SMTP_USERNAME", USER.into()));
            env.push(("SMTP_PASSWORD", PASSWORD.into()));
        }
        env
    }

    /// What the server said it applied and how many connections it took
    /// (stops it: the script prints them at exit).
    pub fn stop(&mut self) -> String {
        sigterm(self.child.id());
        let _ = self.child.wait();
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        log.lines().rfind(|l| l.starts_with("faults applied")).unwrap_or("(no report)").to_string()
    }
}

fn sigterm(pid: u32) {
    let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
