//! The SMTP mailer against a real SMTP server (aiosmtpd, a process per
//! test, with TLS and AUTH): one test per row of its classification, named
//! after it, the design story's crashes as real SIGKILLs of a poller
//! process sending through it, and a fault run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use outbox_tests::api::{Caller, TestApi};
use outbox_tests::outbox::*;
use outbox_tests::publisher::{Delivery, EventStream};
use outbox_tests::smtp::{Options, SmtpServer, PASSWORD};
use outbox_tests::{wait_until, Rng, TestDb};
use serde_json::json;
use shared::fault::Faults;
use shared::notify::deliver::{FAULT_AFTER_SEND, FAULT_AFTER_SEND_CLAIM};
use shared::notify::mailer::smtp::{Login, SmtpConfig, SmtpMailer};
use shared::notify::mailer::{Mailer, SendOutcome};
use shared::notify::pacing::pace::Pacer;
use shared::notify::pacing::send_rate;
use shared::relay::batch::FAULT_BEFORE_DONE_COMMIT;
use shared::relay::{Poller, PollerConfig};
use uuid::Uuid;

const ALICE: &str = "alice@example.com";
const CAROL: &str = "carol@example.com";

fn smtp_poller(db: &TestDb, config: SmtpConfig) -> Poller {
    smtp_poller_with(db, config, PollerConfig::for_tests("smtp-test"))
}

fn smtp_poller_with(db: &TestDb, smtp: SmtpConfig, config: PollerConfig) -> Poller {
    Poller::new(db.pool.clone(), Arc::new(SmtpMailer::new(smtp).unwrap()), Faults::none(), config)
}

fn server_with(faults: serde_json::Value) -> SmtpServer {
    SmtpServer::start(Options { faults, ..Options::default() })
}

/// `(id, recipient, status, provider_message_id)` of every send.
async fn claims(db: &TestDb) -> Vec<(Uuid, String, String, Option<String>)> {
    let client = db.pool.get().await.unwrap();
    let rows = client
        .query(
            "SELECT id, recipient_email, status, provider_message_id FROM booking_notification_sends \
             ORDER BY recipient_email",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
}

/// One booking for Alice, drained through `server` as configured.
async fn drain_one(server: &SmtpServer, config: SmtpConfig) -> (TestDb, Uuid) {
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    smtp_poller(&db, config).drain().await.unwrap();
    let _ = server;
    (db, event)
}

/// A known failure, `fault` once: the claim is released, the retry sends
/// the invitation, and it is in the mailbox once.
async fn released_then_sent_once(fault: serde_json::Value) {
    let server = server_with(json!([fault.clone()]));
    let (db, event) = drain_one(&server, server.config()).await;
    assert_eq!(server.messages().len(), 1, "{fault}: sent once, by the retry");
    let (status, attempts, _) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Done, 2), "{fault}: released, then retried");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Sent)]);
}

#[tokio::test]
async fn an_invitation_over_smtp_is_the_ses_paths_message_with_a_message_id_from_the_claim() {
    for tls in ["starttls", "implicit"] {
        let server = SmtpServer::start(Options { tls, ..Options::default() });
        let db = TestDb::create().await;
        create_booking(&db, 9, &[ALICE, CAROL]).await;
        let summary = smtp_poller(&db, server.config()).drain().await.unwrap();
        assert_eq!(summary.sent, 2, "{tls}: {summary:?}");

        let stored = server.messages();
        let parsed = server.parsed();
        assert_eq!(stored.len(), 2, "{tls}: one message per attendee");
        let claims = claims(&db).await;
        for (claim, recipient, status, message_id) in &claims {
            assert_eq!(status, "SENT");
            let (s, m) =
                stored.iter().zip(&parsed).find(|(s, _)| s.rcpt_tos == [recipient.clone()]).expect("delivered");
            assert_eq!(s.mail_from, "bookings@example.com", "the envelope sender");
            assert!(!s.data.contains("X-Outbox-Claim") && !s.data.contains(&claim.to_string()), "no claim id in it");
            assert_eq!(
                message_id.as_deref(),
                Some(s.message_id.trim_matches(['<', '>'])),
                "the row keeps the Message-ID"
            );
            assert!(s.message_id.ends_with("@example.com>"), "{}", s.message_id);
            // The same builder as SES's: the checks of ses_mailer.rs.
            assert_eq!(m["defects"], json!([]));
            assert_eq!(m["parts"], json!(["text/plain", "text/html", "text/calendar"]));
            assert_eq!(m["calendar"]["METHOD"], "REQUEST");
            assert_eq!(m["to_addresses"], json!([recipient]));
        }
        // A resend of the same (event, recipient) carries the same Message-ID.
        let ids: BTreeSet<_> = stored.iter().map(|s| s.message_id.clone()).collect();
        assert_eq!(ids.len(), 2);
    }
}

/// Non-ASCII everywhere a person can type it: the message the server
/// stores parses back to the same text (as SES's does in ses_mailer.rs).
#[tokio::test]
async fn an_invitation_with_unicode_names_and_title_arrives_intact_over_smtp() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let bob = Caller { email: "bob@example.com", name: "Bob Organizer", sub: "sub-bob" };
    let body = json!({
        "title": "Revue de conception — été",
        "start": "2026-12-01T09:00:00Z",
        "end": "2026-12-01T09:45:00Z",
        "timezone": "Europe/Paris",
        "attendees": [{"email": "zoe@example.com", "name": "Zoë Ünïcode"}],
        "location": "Salle 4; étage 2"
    });
    assert_eq!(api.post("/bookings", bob, &body).await.status, 201);
    assert_eq!(smtp_poller(&db, server.config()).drain().await.unwrap().sent, 1);
    let parsed = server.parsed();
    assert_eq!(parsed.len(), 1);
    let m = &parsed[0];
    assert_eq!(m["defects"], json!([]));
    assert!(m["to"].as_str().unwrap().contains("Zoë Ünïcode"), "{}", m["to"]);
    assert_eq!(m["subject"], "Invitation: Revue de conception — été @ Tue 1 Dec 2026 10:00 (CET)");
    assert_eq!(m["calendar"]["SUMMARY"], "Revue de conception — été");
    assert_eq!(m["calendar"]["LOCATION"], "Salle 4; étage 2");
}

/// `SMTP_MAX_SEND_RATE`: the fleet's sends through SMTP are paced by their
/// own row of the shared bucket (V22), taken as the poller's own role.
#[tokio::test]
async fn smtp_max_send_rate_paces_the_fleet_through_its_own_bucket_as_the_pollers_role() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    for slot in 0..6 {
        create_booking(&db, slot, &[&format!("guest{slot}@example.com")]).await;
    }
    let pool = db.role_pool("outbox_poller").await;
    let config = PollerConfig::for_tests("smtp-paced");
    let pacer = Pacer::new(pool.clone(), send_rate::SMTP, config.concurrency, config.send_rate_headroom);
    let mailer = Arc::new(SmtpMailer::new(server.config()).unwrap());
    let poller = Poller::new(pool, mailer, Faults::none(), config).with_pace(pacer, Some(20.0));
    assert_eq!(poller.refresh_rate().await.unwrap(), Some(20.0), "no account rate: the cap is the rate");
    assert_eq!(poller.drain().await.unwrap().sent, 6);
    assert_eq!(server.messages().len(), 6);
    let (provider, rate): (String, f64) = {
        let client = db.pool.get().await.unwrap();
        let row = client.query_one("SELECT provider, rate FROM send_rate", &[]).await.unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((provider.as_str(), rate), ("smtp", 20.0));
}

#[tokio::test]
async fn transient_reply_at_mail_rcpt_or_data_releases_the_claim_and_retries() {
    for at in ["MAIL", "RCPT", "DATA"] {
        released_then_sent_once(json!({"at": at, "reply": "451 4.3.0 Try again later", "times": 1})).await;
    }
}

#[tokio::test]
async fn connection_dropped_before_the_final_dot_releases_the_claim_and_retries() {
    for at in ["MAIL", "RCPT", "DATA"] {
        released_then_sent_once(json!({"at": at, "do": "drop", "times": 1})).await;
    }
}

#[tokio::test]
async fn connection_refused_releases_the_claim_and_retries() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    // A port nothing listens on: bind one, then let it go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut refused = server.config();
    refused.port = closed;
    let mut config = PollerConfig::for_tests("smtp-refused");
    config.backoff_base = Duration::from_secs(60);
    config.backoff_cap = Duration::from_secs(60);
    smtp_poller_with(&db, refused, config).drain().await.unwrap();
    let (status, attempts, last_error) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Pending, 1), "retried later: {last_error:?}");
    assert!(last_error.unwrap().contains("connecting"));
    assert!(sends(&db, event).await.is_empty(), "the claim was released");

    // Due again, and the server is there: sent once.
    let client = db.pool.get().await.unwrap();
    client.execute("UPDATE outbox_events SET next_attempt_at = now()", &[]).await.unwrap();
    smtp_poller(&db, server.config()).drain().await.unwrap();
    assert_eq!(server.messages().len(), 1);
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Sent)]);
}

#[tokio::test]
async fn permanent_reply_at_rcpt_fails_only_that_recipient() {
    let server = server_with(json!([{"at": "RCPT", "reply": "550 5.1.1 No such user", "rcpt": CAROL}]));
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE, CAROL]).await;
    let event = only_event_id(&db).await;
    smtp_poller(&db, server.config()).drain().await.unwrap();
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Sent), (CAROL.into(), SendStatus::Failed)]);
    let stored = server.messages();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].rcpt_tos, [ALICE]);
    let (status, attempts, _) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Done, 1), "the others are unaffected");
    let failed = claims(&db).await.into_iter().find(|c| c.1 == CAROL).unwrap();
    let client = db.pool.get().await.unwrap();
    let error: Option<String> = client
        .query_one("SELECT last_error FROM booking_notification_sends WHERE id = $1", &[&failed.0])
        .await
        .unwrap()
        .get(0);
    assert!(error.unwrap().contains("550"), "the reply is the reason");
}

#[tokio::test]
async fn permanent_reply_after_the_final_dot_fails_that_recipient() {
    let server = server_with(json!([{"at": "EOM", "reply": "554 5.7.1 Message refused"}]));
    let (db, event) = drain_one(&server, server.config()).await;
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Failed)]);
    assert!(server.messages().is_empty());
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test]
async fn service_unavailable_421_pauses_the_run_without_burning_an_attempt() {
    for at in ["MAIL", "RCPT", "DATA", "EOM"] {
        let server = server_with(json!([{"at": at, "reply": "421 4.3.2 Service not available", "times": 1}]));
        let db = TestDb::create().await;
        create_booking(&db, 9, &[ALICE]).await;
        let event = only_event_id(&db).await;
        let summary = smtp_poller(&db, server.config()).drain().await.unwrap();
        assert!(summary.paused, "{at}: {summary:?}");
        let (status, attempts, last_error) = event_status(&db, event).await;
        assert_eq!((status, attempts), (EventStatus::Pending, 0), "{at}: requeued, no attempt used");
        assert!(last_error.unwrap_or_default().contains("421"), "{at}");
        assert!(sends(&db, event).await.is_empty(), "{at}: claim released");
        assert!(server.messages().is_empty(), "{at}");
    }
}

#[tokio::test]
async fn connection_lost_after_the_final_dot_is_unknown_and_never_resent() {
    let server = server_with(json!([{"at": "EOM", "do": "store-then-drop", "times": 1}]));
    let (db, event) = drain_one(&server, server.config()).await;
    assert_eq!(server.messages().len(), 1, "the server has the mail");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)], "the claim is kept");
    force_run_again(&db, event).await;
    smtp_poller(&db, server.config()).drain().await.unwrap();
    assert_eq!(server.messages().len(), 1, "never sent again");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
}

/// Nothing reports back from a plain SMTP server: an UNKNOWN send there is
/// left for an operator at once, and never resent on evidence, however far
/// SES's own stream moves (the server has this one); operators see why.
#[tokio::test]
async fn an_unknown_smtp_send_is_never_resent_and_is_left_for_an_operator() {
    let server = server_with(json!([{"at": "EOM", "do": "store-then-drop", "times": 1}]));
    let (db, event) = drain_one(&server, server.config()).await;
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
    let client = db.pool.get().await.unwrap();
    stream_moved_past(&db, 3600).await;
    let run = shared::relay::sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 0, "{run:?}");
    smtp_poller(&db, server.config()).drain().await.unwrap();
    assert_eq!(server.messages().len(), 1, "never sent again");

    let listed = outbox_tests::ctl::ctl(&db, &["unknown", "list", "--json"]).await.json();
    assert_eq!(listed[0]["confirmation"], "left_for_operator", "{listed}");
    assert!(listed[0]["left_for_operator"].as_str().unwrap().contains("SMTP"), "{listed}");
    let counts = shared::notify::evidence::resend::counts(&client, Duration::from_secs(900)).await.unwrap();
    assert_eq!((counts.awaiting_evidence, counts.left_for_operator), (0, 1), "it counts toward the alarm");
}

/// SES's own SMTP interface with a configuration set: the message names
/// the set and carries the claim's tags; SES answers with its message id
/// and publishes the events of what it accepted. The answer to the final
/// `.` is lost after SES stored the message: UNKNOWN, then its `Send`
/// event confirms it, and nothing is sent again.
#[tokio::test]
async fn an_ambiguous_send_through_ses_smtp_is_confirmed_by_the_events_ses_publishes() {
    let server = SmtpServer::start(Options {
        faults: json!([{"at": "EOM", "do": "store-then-drop", "times": 1}]),
        ses_events: true,
        ..Options::default()
    });
    let (db, event) = drain_one(&server, server.config()).await;
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
    let provider: String = db.scalar("SELECT provider FROM booking_notification_sends").await;
    assert_eq!(provider, "ses-smtp", "SES's events can settle it");
    let stored = &server.messages()[0];
    assert!(!stored.data.contains("X-SES-"), "SES strips its headers before delivery");
    let _stream = EventStream::start(server.ses_events(), db.pool.clone(), Delivery::default());
    let confirmed = async || sends(&db, event).await == vec![(ALICE.into(), SendStatus::Sent)];
    assert!(wait_until(Duration::from_secs(10), confirmed).await, "SES's event confirmed it");
    let run = shared::relay::sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 0);
    assert_eq!(server.messages().len(), 1, "once");
}

/// Through SES's SMTP interface, the connection is dropped at the final
/// `.` before SES stored the message: UNKNOWN, no event names it. A canary
/// through the same interface moves the watermark past it, a minute later
/// another shows the stream alive: it is resent, and arrives once.
#[tokio::test]
async fn an_ambiguous_send_through_ses_smtp_that_never_arrived_is_resent_once_on_ses_evidence() {
    let server = SmtpServer::start(Options {
        faults: json!([{"at": "EOM", "do": "drop", "times": 1}]),
        ses_events: true,
        ..Options::default()
    });
    let (db, event) = drain_one(&server, server.config()).await;
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
    assert!(server.messages().is_empty());
    let stream = EventStream::start(server.ses_events(), db.pool.clone(), Delivery::default());
    let mut config = PollerConfig::for_tests("ses-smtp");
    config.canary_every = Duration::from_millis(500);
    let poller = smtp_poller_with(&db, server.config(), config);
    for round in 1..=2 {
        a_minute_passes(&db).await;
        assert!(matches!(poller.canary().await.unwrap(), Some(SendOutcome::Sent { .. })));
        assert!(wait_until(Duration::from_secs(10), async || stream.handed() >= 2 * round).await);
    }
    let mut sweeper = sweeper_config(8);
    sweeper.feedback = shared::relay::FeedbackConfig::new(Duration::from_secs(30), 3).unwrap();
    let run = shared::relay::sweeper::run(&db.pool, &sweeper).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 1, "{:?}", run.feedback);
    poller.drain().await.unwrap();
    let invitations: Vec<_> = server.messages().into_iter().filter(|m| m.rcpt_tos == vec![ALICE.to_string()]).collect();
    assert_eq!(invitations.len(), 1, "delivered once");
}

#[tokio::test]
async fn no_reply_after_the_final_dot_is_unknown_and_never_resent() {
    // The server stores the mail, then answers after the send timeout (3 s).
    let server = SmtpServer::start(Options {
        faults: json!([{"at": "EOM", "do": "stall", "secs": 6, "times": 1}]),
        ..Options::default()
    });
    let (db, event) = drain_one(&server, server.config()).await;
    assert_eq!(server.messages().len(), 1);
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
    force_run_again(&db, event).await;
    smtp_poller(&db, server.config()).drain().await.unwrap();
    assert_eq!(server.messages().len(), 1, "never sent again");
}

#[tokio::test]
async fn a_stalled_command_before_the_final_dot_releases_the_claim_and_retries() {
    released_then_sent_once(json!({"at": "RCPT", "do": "stall", "secs": 6, "times": 1})).await;
}

/// The stack's configuration (issue 53): sending stops, and the event
/// waits for the fix with the reason, no attempt used, nothing sent.
async fn waits_for_the_fix(db: &TestDb, event: uuid::Uuid, why: &str) -> String {
    let (status, attempts, last_error) = event_status(db, event).await;
    assert_eq!((status, attempts), (EventStatus::Pending, 0), "{last_error:?}");
    let last_error = last_error.unwrap();
    assert!(last_error.starts_with("mailer misconfigured: ") && last_error.contains(why), "{last_error}");
    assert!(sends(db, event).await.is_empty(), "released: it goes once fixed");
    last_error
}

#[tokio::test]
async fn wrong_credentials_stop_sending_and_the_event_waits_with_the_reason() {
    let server = SmtpServer::start(Options::default());
    let mut config = server.config();
    config.login = Some(Login { username: "outbox".into(), password: format!("not-{PASSWORD}") });
    let (db, event) = drain_one(&server, config).await;
    let last_error = waits_for_the_fix(&db, event, "AUTH").await;
    assert!(!last_error.contains(PASSWORD), "no secret in the reason");
    assert!(server.messages().is_empty());
}

#[tokio::test]
async fn an_untrusted_certificate_stops_sending_and_the_event_waits_with_the_reason() {
    for tls in ["starttls", "implicit"] {
        let server = SmtpServer::start(Options { tls, ..Options::default() });
        let mut config = server.config();
        config.extra_roots_pem = None; // the public roots only
        let (db, event) = drain_one(&server, config).await;
        waits_for_the_fix(&db, event, "TLS").await;
        assert!(server.messages().is_empty(), "{tls}");
    }
}

#[tokio::test]
async fn a_server_without_starttls_is_never_sent_to_in_the_clear() {
    let server = SmtpServer::start(Options { tls: "none", auth: false, ..Options::default() });
    let (db, event) = drain_one(&server, server.config()).await;
    waits_for_the_fix(&db, event, "STARTTLS").await;
    assert!(server.messages().is_empty(), "nothing went out in the clear");
}

#[tokio::test]
async fn one_connection_carries_the_sends_and_one_closed_while_kept_is_replaced_without_an_attempt() {
    // The second MAIL (the first on the kept connection) is dropped, as a
    // server closing an idle connection does.
    let server = server_with(json!([{"at": "MAIL", "do": "drop", "skip": 1, "times": 1}]));
    let db = TestDb::create().await;
    for slot in 0..4 {
        create_booking(&db, slot, &[&format!("guest{slot}@example.com")]).await;
    }
    let mut config = PollerConfig::for_tests("smtp-pool");
    config.concurrency = 1;
    let mailer = Arc::new(SmtpMailer::new(server.config()).unwrap());
    let poller = Poller::new(db.pool.clone(), mailer.clone(), Faults::none(), config);
    assert_eq!(poller.drain().await.unwrap().sent, 4);
    let connections: Vec<u64> = server.messages().iter().map(|m| m.connection).collect();
    assert_eq!(connections, [1, 2, 2, 2], "kept and reused; the dropped one replaced at once");
    let attempts: i64 = db.scalar("SELECT sum(attempts)::bigint FROM outbox_events").await;
    assert_eq!(attempts, 4, "no attempt was spent on the closed connection");
    assert_eq!(mailer.idle_connections(), 1);
}

#[tokio::test]
async fn a_send_never_outlasts_the_mailers_worst_case() {
    // MAIL stalls 10 s every time; one send must give up by the worst case
    // (2 s connect + 3 s send), as the poller's deadline check assumes.
    let server = server_with(json!([{"at": "MAIL", "do": "stall", "secs": 10}]));
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let event = only_event_id(&db).await;
    let mut config = PollerConfig::for_tests("smtp-slow");
    config.backoff_base = Duration::from_secs(60);
    config.backoff_cap = Duration::from_secs(60);
    let worst = SmtpMailer::new(server.config()).unwrap().worst_case();
    let started = std::time::Instant::now();
    smtp_poller_with(&db, server.config(), config).drain().await.unwrap();
    assert!(started.elapsed() < worst + Duration::from_secs(1), "{:?} against {worst:?}", started.elapsed());
    let (status, attempts, last_error) = event_status(&db, event).await;
    assert_eq!((status, attempts), (EventStatus::Pending, 1), "a known failure: {last_error:?}");
    assert!(sends(&db, event).await.is_empty());
}

/// A crash scene: a server, a booking for `recipients`, its event, and a
/// poller process (`outbox-worker`) that sends through the server with
/// `extra` settings.
async fn crash_scene(recipients: &[&str], extra: &[(&'static str, &str)]) -> (SmtpServer, TestDb, Uuid, Worker, Env) {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    create_booking(&db, 9, recipients).await;
    let event = only_event_id(&db).await;
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let mut env = server.env();
    env.push(("OUTBOX_WORKER_MAILER", "smtp".into()));
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    (server, db, event, worker, Env(env))
}

/// A worker's environment, owned.
struct Env(Vec<(&'static str, String)>);

impl Env {
    fn pairs(&self) -> Vec<(&str, &str)> {
        self.0.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
}

/// The design story's crash between the claim and the send, against a
/// real SMTP server: the poller process dies; the claim stays, becomes
/// UNKNOWN, and nothing is sent for it.
#[tokio::test]
async fn smtp_crash_after_claim_before_send_is_missed_and_visible_as_unknown() {
    let one_at_a_time = [("POLLER_CLAIM_GROUP", "1"), ("POLLER_CONCURRENCY", "1")];
    let (server, db, event, worker, env) = crash_scene(&[ALICE, CAROL], &one_at_a_time).await;
    let env = env.pairs();

    assert!(killed(worker.run(&db, &format!("{FAULT_AFTER_SEND_CLAIM}=kill"), &env).await));
    assert!(server.messages().is_empty(), "the crash came before the SMTP transaction");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Claimed)]);

    sweep_after_timeout(&db, 8).await;
    assert!(worker.run(&db, "", &env).await.success());
    let stored = server.messages();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].rcpt_tos, [CAROL], "the unclaimed recipient is still delivered");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown), (CAROL.into(), SendStatus::Sent)]);
}

/// The design story's hardest case: the server accepted the final `.`, and
/// the poller died before recording it. The mail is in the mailbox once,
/// the claim ends UNKNOWN, and the retry sends nothing.
#[tokio::test]
async fn smtp_crash_after_the_accepted_dot_before_recording_sends_no_duplicate() {
    let (server, db, event, worker, env) = crash_scene(&[ALICE], &[("POLLER_CONCURRENCY", "1")]).await;
    let env = env.pairs();

    assert!(killed(worker.run(&db, &format!("{FAULT_AFTER_SEND}=kill"), &env).await));
    assert_eq!(server.messages().len(), 1, "the server took responsibility for the mail");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Claimed)]);

    sweep_after_timeout(&db, 8).await;
    assert!(worker.run(&db, "", &env).await.success());
    assert_eq!(server.messages().len(), 1, "no second email");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Unknown)]);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

/// Production's way: the AUTH credentials come from a Secrets Manager
/// secret (moto's), read at cold start, not from the environment.
#[tokio::test]
async fn smtp_auth_from_a_secrets_manager_secret_delivers() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    create_booking(&db, 9, &[ALICE]).await;
    let endpoint = outbox_tests::ses::moto_endpoint();
    let secret = json!({"username": outbox_tests::smtp::USER, "password": PASSWORD});
    let arn = outbox_tests::ses::create_secret(&endpoint, "smtp-auth", &secret.to_string()).await;
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-worker"));
    cmd.args(["drain", "/dev/null"]).env("DATABASE_URL", &db.url).env("OUTBOX_WORKER_MAILER", "smtp");
    for (k, v) in server.env() {
        if !k.starts_with("SMTP_USERNAME") && !k.starts_with("SMTP_PASSWORD") {
            cmd.env(k, v);
        }
    }
    cmd.env("SMTP_SECRET_ARN", &arn)
        .env("AWS_ENDPOINT_URL_SECRETS_MANAGER", &endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    let out = cmd.output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.messages().len(), 1, "authenticated with the secret's credentials");

    // Both sources at once is refused: one place for a credential.
    cmd.env("SMTP_USERNAME", "someone").env("SMTP_PASSWORD", "x");
    let out = cmd.output().await.unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("SMTP_SECRET_ARN is set, and so is SMTP_USERNAME"));
}

/// The crash after every send, before the event's DONE commit: the retry
/// finds each claim and sends nothing twice.
#[tokio::test]
async fn smtp_crash_after_the_sends_before_the_done_commit_sends_no_duplicate() {
    let (server, db, event, worker, env) = crash_scene(&[ALICE, CAROL], &[]).await;
    let env = env.pairs();

    assert!(killed(worker.run(&db, &format!("{FAULT_BEFORE_DONE_COMMIT}=kill"), &env).await));
    assert_eq!(server.messages().len(), 2, "both went out before the crash");
    assert_eq!(event_status(&db, event).await.0, EventStatus::Processing);

    sweep_after_timeout(&db, 8).await;
    assert!(worker.run(&db, "", &env).await.success());
    assert_eq!(server.messages().len(), 2, "the claims stopped both sends the second time");
    assert_eq!(sends(&db, event).await, vec![(ALICE.into(), SendStatus::Sent), (CAROL.into(), SendStatus::Sent)]);
    assert_eq!(event_status(&db, event).await.0, EventStatus::Done);
}

#[tokio::test]
async fn smtp_settings_are_refused_at_cold_start_with_the_fix() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let cases: [(&str, &str, &str); 5] = [
        ("SMTP_URL", "smtp://outbox:secret@127.0.0.1:25", "SMTP_URL holds credentials"),
        ("SMTP_URL", "http://127.0.0.1:25", "SMTP_URL has the scheme \"http\""),
        ("SMTP_FROM_ADDRESS", "not an address", "SMTP_FROM_ADDRESS is invalid"),
        ("SMTP_CA_FILE", "/nonexistent/ca.pem", "SMTP_CA_FILE (/nonexistent/ca.pem) cannot be read"),
        ("SMTP_PASSWORD", "", "SMTP_USERNAME and SMTP_PASSWORD must be set together"),
    ];
    for (var, value, want) in cases {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-worker"));
        cmd.args(["drain", "/dev/null"]).env("DATABASE_URL", &db.url).env("OUTBOX_WORKER_MAILER", "smtp");
        for (k, v) in server.env() {
            cmd.env(k, v);
        }
        cmd.env(var, value);
        let out = cmd.output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{var}={value}");
        assert!(stderr.contains(want), "{var}={value}: {stderr}");
        assert!(!stderr.contains("secret@"), "the credentials are not echoed");
    }
    assert!(server.messages().is_empty());
}

/// A bounded fault run: 150 bookings of 3 recipients through a server that
/// answers 451 / 550 / 554, drops the connection before the final `.`,
/// after it (mail stored), or stalls past the timeout after it, at random;
/// pollers (real processes) are SIGKILLed at random. The mailbox holds no
/// message twice, every SENT claim is in it, and every recipient is
/// accounted for.
#[tokio::test]
async fn smtp_fault_run_sends_no_duplicate_and_loses_nothing_silently() {
    let (mut rng, seed) = Rng::from_clock();
    println!("smtp fault run seed {seed}");
    let mut server = SmtpServer::start(Options { random: Some((0.06, seed)), stall_secs: 4.0, ..Options::default() });
    let db = TestDb::create().await;
    let recipients = ["alice@example.com", "carol@example.com", "dave@example.com"];
    let bookings = 150;
    for slot in 0..bookings {
        create_booking(&db, slot, &recipients).await;
    }
    let mut env = server.env();
    env.push(("OUTBOX_WORKER_MAILER", "smtp".into()));
    // Four sends in flight: a killed poller leaves at most 4 claims UNKNOWN.
    env.push(("POLLER_CONCURRENCY", "4".into()));
    env.push(("RUST_LOG", "error".into()));
    let worker = || {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_outbox-worker"));
        cmd.args(["drain", "/dev/null"]).env("DATABASE_URL", &db.url).kill_on_drop(true);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        cmd
    };
    let kills = kill_then_drain(&db, &mut rng, worker).await;

    // No recipient of an event got it twice.
    let stored = server.messages();
    let mut per_message: BTreeMap<String, usize> = BTreeMap::new();
    stored.iter().for_each(|m| *per_message.entry(m.message_id.clone()).or_default() += 1);
    let duplicates: Vec<_> = per_message.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicates.is_empty(), "duplicates: {duplicates:?}");

    // Every SENT claim is in the mailbox; what is in it is SENT or UNKNOWN
    // (the server kept a mail whose reply never came).
    // A message names its claim's key: its event (in its Message-ID) and
    // its recipient; each key has one claim here (asserted below).
    let in_mailbox: BTreeSet<String> = stored
        .iter()
        .map(|m| format!("{} {}", m.message_id.trim_start_matches('<').split('.').next().unwrap(), m.rcpt_tos[0]))
        .collect();
    let client = db.pool.get().await.unwrap();
    let keys: BTreeMap<Uuid, String> = client
        .query("SELECT id, outbox_event_id::text || ' ' || recipient_email FROM booking_notification_sends", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let rows = claims(&db).await;
    for (id, _, status, _) in &rows {
        let key = &keys[id];
        match status.as_str() {
            "SENT" => assert!(in_mailbox.contains(key), "claim {id} is SENT but not in the mailbox"),
            "FAILED" => assert!(!in_mailbox.contains(key), "claim {id} FAILED but delivered"),
            "UNKNOWN" => {}
            other => panic!("claim {id} left {other}"),
        }
    }
    // No silent loss: one claim per recipient, each settled, every event done.
    assert_eq!(rows.len(), bookings as usize * recipients.len());
    assert_eq!(event_counts(&db).await[&EventStatus::Done], bookings as i64);
    let counts = send_counts(&db).await;
    let unknown_delivered = rows.iter().filter(|r| r.2 == "UNKNOWN" && in_mailbox.contains(&keys[&r.0])).count();
    let log = server.stop();
    assert!(log.starts_with("faults applied: {'"), "the server faulted some commands: {log}");
    println!(
        "smtp fault run: {} sends, {} messages stored, {kills} pollers killed, {log}; SENT {}, FAILED {}, \
         UNKNOWN {} ({unknown_delivered} of them in the mailbox); duplicates 0",
        rows.len(),
        stored.len(),
        counts[&SendStatus::Sent],
        counts[&SendStatus::Failed],
        counts[&SendStatus::Unknown],
    );
}
