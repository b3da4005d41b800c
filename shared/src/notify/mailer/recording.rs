//! An in-process mailer that records what it "sent", with fault controls:
//! the test double for the SES adapter. Optionally it appends each accepted
//! send to a journal file, so a test can see what a child process sent
//! before it was killed.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{Mailer, SendOutcome};
use crate::booking::events::{EventType, Notice};
use crate::notify::notification::Notification;
use crate::notify::sends::SentVia;

/// One accepted send.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_id: Uuid,
    pub event_type: EventType,
    pub recipient: String,
    pub booking_id: Uuid,
    /// The booking version the message carries (iCalendar SEQUENCE + 1).
    pub sequence: i32,
    /// REQUEST, CANCEL, or this recipient's removal.
    pub notice: Notice,
    pub message_id: String,
    pub at: Instant,
}

#[derive(Default)]
pub struct RecordingMailer {
    delivered: Mutex<Vec<Delivery>>,
    /// Outcomes to return instead of sending, per recipient, in order.
    scripted: Mutex<HashMap<String, VecDeque<SendOutcome>>>,
    journal: Option<Mutex<std::fs::File>>,
    delay: Option<Duration>,
    /// Renders each message as the SES mailer does before its call.
    render: Option<crate::notify::render::invite::Sender>,
    /// The canaries sent, by id.
    canaries: Mutex<Vec<Uuid>>,
}

impl RecordingMailer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Also append `event_id recipient event_type` lines to `path`.
    pub fn with_journal(path: impl Into<PathBuf>) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path.into())?;
        Ok(Self { journal: Some(Mutex::new(file)), ..Self::default() })
    }

    /// Each send renders its real message first, from `sender` (what the
    /// SES and SMTP mailers do before their call), so a benchmark counts
    /// each recipient's rendering in their language.
    pub fn rendering(mut self, sender: crate::notify::render::invite::Sender) -> Self {
        self.render = Some(sender);
        self
    }

    /// Each send takes this long (to widen race windows in tests).
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// The next `times` sends to `recipient` return `outcome` instead.
    pub fn script(&self, recipient: &str, outcome: SendOutcome, times: usize) {
        let mut s = self.scripted.lock().unwrap();
        let queue = s.entry(recipient.to_lowercase()).or_default();
        queue.extend(std::iter::repeat_n(outcome, times));
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.delivered.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.delivered.lock().unwrap().len()
    }

    /// The canaries sent ([`Mailer::canary`]), in order.
    pub fn canaries(&self) -> Vec<Uuid> {
        self.canaries.lock().unwrap().clone()
    }

    /// Parses a journal written by [`RecordingMailer::with_journal`]:
    /// `(event_id, recipient, event_type)` per accepted send.
    pub fn read_journal(path: &std::path::Path) -> Vec<(String, String, String)> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut p = l.split(' ');
                Some((p.next()?.to_string(), p.next()?.to_string(), p.next()?.to_string()))
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl Mailer for RecordingMailer {
    fn worst_case(&self) -> Duration {
        self.delay.unwrap_or_default()
    }

    /// It stands in for SES: its UNKNOWN sends are SES's, which SES's
    /// events (the tests publish them) may confirm.
    fn provider(&self) -> SentVia {
        SentVia::Ses
    }

    /// Like SES's mailbox simulator: accepted, never delivered anywhere.
    async fn canary(&self, id: Uuid) -> Option<SendOutcome> {
        self.canaries.lock().unwrap().push(id);
        Some(SendOutcome::Sent { message_id: format!("canary-{id}") })
    }

    async fn send(&self, n: &Notification) -> SendOutcome {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        let scripted = self.scripted.lock().unwrap().get_mut(n.recipient.email.as_str()).and_then(VecDeque::pop_front);
        if let Some(outcome) = scripted {
            return outcome;
        }
        if let Some(sender) = &self.render {
            std::hint::black_box(crate::notify::render::invite::build(n, sender));
        }
        let message_id = format!("rec-{}", Uuid::now_v7());
        if let Some(journal) = &self.journal {
            let mut f = journal.lock().unwrap();
            // One write per line: O_APPEND keeps lines from several processes whole.
            let line = format!("{} {} {}\n", n.event_id, n.recipient.email, n.event_type);
            if f.write_all(line.as_bytes()).and_then(|_| f.sync_data()).is_err() {
                return SendOutcome::Unknown { reason: "journal write failed".into() };
            }
        }
        self.delivered.lock().unwrap().push(Delivery {
            event_id: n.event_id,
            event_type: n.event_type,
            recipient: n.recipient.email.as_str().to_string(),
            booking_id: n.payload.booking.id,
            sequence: n.payload.booking.version,
            notice: n.notice,
            message_id: message_id.clone(),
            at: Instant::now(),
        });
        SendOutcome::Sent { message_id }
    }
}
