//! The local SES event publisher (scripts/ses-publisher.py) in tests: a
//! loopback proxy in front of moto that, for every message moto accepts,
//! writes the Send and Delivery events SES would publish (with the
//! message's tags) to a file the test reads.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub struct Publisher {
    pub endpoint: String,
    events_file: PathBuf,
    child: Child,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.events_file);
    }
}

impl Publisher {
    /// Starts the publisher in front of `upstream` (moto) on a free
    /// loopback port and waits until it answers.
    pub fn start(upstream: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let events_file = std::env::temp_dir().join(format!("ses-events-{}.jsonl", uuid::Uuid::now_v7().simple()));
        let python = std::env::var("OUTBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/ses-publisher.py");
        let child = Command::new(python)
            .arg(script)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--upstream", upstream])
            // moto has no GetAccount: the publisher answers for it. A rate
            // above any test's SES_MAX_SEND_RATE, so each test's cap paces.
            .args(["--max-send-rate", "1000"])
            .arg("--events-file")
            .arg(&events_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start scripts/ses-publisher.py");
        let endpoint = format!("http://127.0.0.1:{port}");
        let publisher = Self { endpoint, events_file, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "ses-publisher.py did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        publisher
    }

    /// The file the events are written to, one JSON line each.
    pub fn events_path(&self) -> PathBuf {
        self.events_file.clone()
    }

    /// Every event published so far.
    pub fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.events_file).unwrap_or_default();
        text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// The events, once there are at least `at_least` and no new one came
    /// for `quiet` (bounded by 30 s). A client whose connection dropped
    /// can give up before moto answers the publisher (a slow moto under a
    /// parallel test run), so a test that knows what SES accepted waits
    /// for those events rather than only for a quiet spell.
    pub async fn settled_events(&self, at_least: usize, quiet: Duration) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = self.events().len();
        loop {
            tokio::time::sleep(quiet).await;
            let now = self.events().len();
            if (now == last && now >= at_least) || Instant::now() > deadline {
                return self.events();
            }
            last = now;
        }
    }
}

/// The `claim` tag of an SES event.
pub fn claim_of(event: &Value) -> Option<uuid::Uuid> {
    event["detail"]["mail"]["tags"]["claim"][0].as_str().and_then(|c| c.parse().ok())
}

/// The SES event type (`Send`, `Delivery`, ...).
pub fn kind_of(event: &Value) -> &str {
    event["detail"]["eventType"].as_str().unwrap_or("")
}

/// How an [`EventStream`] delivers what the publisher wrote.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    /// Each event is handed over this long after it was published (an
    /// event stream running late).
    pub delay: Duration,
    /// Events of these claims are never handed over (lost on the way).
    pub lost_claims: Vec<uuid::Uuid>,
    /// Only this kind of event of `lost_claims` is lost (None: every kind).
    pub lost_kind: Option<&'static str>,
}

/// SES's events on their way to the ses-events function, as EventBridge
/// and Lambda deliver them: a task tails an events file (the publisher's,
/// or the SMTP test server's as SES's SMTP interface) and
/// hands each event to the feedback handler (`shared::notify::evidence::intake::handle`)
/// on a real Postgres, as the function does, `delivery.delay` after it was
/// published, unless it is lost, or the stream is stopped (held events are
/// handed over once it resumes). It stops with the test.
pub struct EventStream {
    stopped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handed: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EventStream {
    pub fn start(events_file: PathBuf, pool: deadpool_postgres::Pool, delivery: Delivery) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let stopped = std::sync::Arc::new(AtomicBool::new(false));
        let handed = std::sync::Arc::new(AtomicUsize::new(0));
        let file = events_file;
        let (stop, count) = (stopped.clone(), handed.clone());
        let task = tokio::spawn(async move {
            let origin = crate::ses_events::origin();
            let mut seen: Vec<(Instant, Value)> = Vec::new();
            let mut next = 0;
            loop {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                // Only whole lines: the publisher may be writing the last one.
                let whole = &text[..text.rfind('\n').map_or(0, |at| at + 1)];
                let lines: Vec<&str> = whole.lines().filter(|l| !l.trim().is_empty()).collect();
                for line in lines.iter().skip(seen.len()) {
                    seen.push((Instant::now(), serde_json::from_str(line).unwrap()));
                }
                while next < seen.len()
                    && !stop.load(Ordering::SeqCst)
                    && seen[next].0 + delivery.delay <= Instant::now()
                {
                    let event = &seen[next].1;
                    let lost = claim_of(event).is_some_and(|c| delivery.lost_claims.contains(&c))
                        && delivery.lost_kind.is_none_or(|k| k == kind_of(event));
                    if !lost {
                        // As the function does; a failure would be retried by
                        // Lambda, and is retried here on the next round.
                        if shared::notify::evidence::intake::handle(&pool, &origin, event).await.is_err() {
                            break;
                        }
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    next += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self { stopped, handed, task }
    }

    /// Stops handing events over (they are held, not lost).
    pub fn stop(&self) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Hands the held events over again.
    pub fn resume(&self) {
        self.stopped.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Events handed to the handler so far.
    pub fn handed(&self) -> usize {
        self.handed.load(std::sync::atomic::Ordering::SeqCst)
    }
}
