//! Settling what stays unknown on SES's own evidence: an UNKNOWN send is
//! resent automatically only once SES's event stream has moved past it
//! (an event arrived about a message SES accepted after the send could
//! last have reached it), the grace has passed since, and no event names
//! it; each resend is a recorded decision with its evidence, bounded per
//! recipient; what no evidence can settle is left for an operator, loudly;
//! and with no event stream nothing is ever resent.

use std::sync::Arc;
use std::time::Duration;

use outbox_tests::ctl::*;
use outbox_tests::outbox::*;
use outbox_tests::ses_events::*;
use outbox_tests::TestDb;
use shared::notify::evidence::feedback::Recorded;
use shared::notify::evidence::intake;
use shared::notify::evidence::intake::Handled;
use shared::notify::evidence::resend::{self, Confirmation, EVIDENCE_DECIDER};
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::relay::sweeper;
use shared::relay::{FeedbackConfig, PollerConfig, SweeperConfig};
use uuid::Uuid;

const CAROL: &str = "carol@example.com";
const DAVE: &str = "dave@example.com";
const GRACE: Duration = Duration::from_secs(900);

fn timed_out() -> SendOutcome {
    SendOutcome::Unknown { reason: "read timeout".into() }
}

async fn claim_of(db: &TestDb, recipient: &str) -> Uuid {
    let client = db.pool.get().await.unwrap();
    client
        .query_one("SELECT id FROM booking_notification_sends WHERE recipient_email = $1", &[&recipient])
        .await
        .unwrap()
        .get(0)
}

fn resends_max(max: u32) -> SweeperConfig {
    let mut config = sweeper_config(8);
    config.feedback = FeedbackConfig::new(GRACE, max).unwrap();
    config
}

async fn confirm(db: &TestDb, claim: Uuid) {
    let handled = intake::handle(&db.pool, &origin(), &send_event(claim)).await.unwrap();
    assert!(matches!(handled, Handled::Recorded(Recorded::Recorded { confirmed: true, .. })), "{handled:?}");
}

#[tokio::test]
async fn an_ambiguous_send_is_resent_once_ses_events_moved_past_it_by_the_grace_and_none_named_it() {
    let db = TestDb::create().await;
    let (claim, mailer) = one_send(&db, ALICE, Some(timed_out())).await;
    assert_eq!(mailer.count(), 0, "SES never accepted it (the stand-in's answer was lost)");

    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!((run.feedback.resent_on_evidence, run.feedback.counts.awaiting_evidence), (0, 1), "no evidence yet");

    // The stream moved past it, but only just: SES may still publish its event.
    stream_moved_past(&db, 0).await;
    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 0, "within the grace its own event may still come");

    // The grace passed since, the stream alive throughout, and still no
    // event named it.
    stream_moved_past(&db, GRACE.as_secs() as i64 + 1).await;
    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 1);
    assert!(run.metrics().iter().any(|(name, value, _)| *name == "ResentOnEvidence" && *value == 1.0));
    let client = db.pool.get().await.unwrap();
    let row = client
        .query_one(
            "SELECT send_id, decided_by, evidence_mail_second IS NOT NULL, evidence_received_at IS NOT NULL, \
                    evidence_grace_secs FROM notification_resends",
            &[],
        )
        .await
        .unwrap();
    let decision: (Uuid, String, bool, bool, f64) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(decision, (claim, EVIDENCE_DECIDER.to_string(), true, true, 900.0), "who decided, on what evidence");

    poller(&db, mailer.clone(), PollerConfig::for_tests("w2")).drain().await.unwrap();
    assert_eq!(mailer.count(), 1, "delivered, once");
    let again = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!((again.feedback.resent_on_evidence, again.feedback.counts.awaiting_evidence), (0, 0));
    assert_eq!(again.feedback.counts.resent_on_evidence, 1);
    let listed = resend::list(&client, GRACE, false, 10).await.unwrap();
    assert_eq!((listed[0].id, listed[0].confirmation), (claim, Confirmation::ResentOnEvidence));
    assert!(listed[0].evidence.is_some() && listed[0].resent.is_some(), "{:?}", listed[0]);
}

#[tokio::test]
async fn a_send_ses_confirmed_is_never_resent_and_only_the_one_it_never_saw_is() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &[ALICE, CAROL]).await;
    let mailer = Arc::new(RecordingMailer::new());
    for who in [ALICE, CAROL] {
        mailer.script(who, timed_out(), 1);
    }
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    // SES's event came for Alice's message only: Carol's never reached SES.
    confirm(&db, claim_of(&db, ALICE).await).await;
    stream_moved_past(&db, 1000).await;

    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 1);
    let decided: String = db.scalar("SELECT recipient_email FROM notification_resends").await;
    assert_eq!(decided, CAROL);
    poller(&db, mailer.clone(), PollerConfig::for_tests("w2")).drain().await.unwrap();
    let resent: Vec<String> = mailer.deliveries().iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(resent, vec![CAROL.to_string()], "Carol once; Alice, confirmed by SES, never twice");
    assert_eq!(send_counts(&db).await[&SendStatus::Sent], 2);
}

#[tokio::test]
async fn resends_are_bounded_then_the_send_is_left_for_an_operator_loudly() {
    let db = TestDb::create().await;
    let (claim, mailer) = one_send(&db, ALICE, Some(timed_out())).await;
    stream_moved_past(&db, 1000).await;
    assert_eq!(sweeper::run(&db.pool, &resends_max(1)).await.unwrap().feedback.resent_on_evidence, 1);

    // The resend ends ambiguous too.
    mailer.script(ALICE, timed_out(), 1);
    poller(&db, mailer.clone(), PollerConfig::for_tests("w2")).drain().await.unwrap();
    let second = claim_of(&db, ALICE).await;
    assert_ne!(second, claim);
    stream_moved_past(&db, 1000).await;
    let run = sweeper::run(&db.pool, &resends_max(1)).await.unwrap();
    assert_eq!((run.feedback.resent_on_evidence, run.feedback.left_for_operator), (0, 1));
    assert!(run.metrics().iter().any(|(name, value, _)| *name == "UnknownLeftForOperator" && *value == 1.0));
    let why: String = db.scalar("SELECT left_for_operator FROM booking_notification_sends").await;
    assert!(why.contains("resent 1 times") && why.contains("UNKNOWN_RESENDS_MAX"), "{why}");

    let text = ctl(&db, &["unknown", "list"]).await.stdout;
    assert!(text.contains("left for an operator") && text.contains("resent 1 times"), "{text}");
    assert!(text.contains("resent on SES's evidence"), "the first attempt's resend is listed too: {text}");
    // Left once: the next run changes nothing.
    let again = sweeper::run(&db.pool, &resends_max(1)).await.unwrap();
    assert_eq!((again.feedback.resent_on_evidence, again.feedback.left_for_operator), (0, 0));
    assert_eq!(again.feedback.counts.left_for_operator, 1);
}

#[tokio::test]
async fn with_resends_off_an_ambiguous_send_is_left_for_an_operator_once_the_stream_moved_past_it() {
    let db = TestDb::create().await;
    one_send(&db, ALICE, Some(timed_out())).await;
    stream_moved_past(&db, 1000).await;
    let run = sweeper::run(&db.pool, &resends_max(0)).await.unwrap();
    assert_eq!((run.feedback.resent_on_evidence, run.feedback.left_for_operator), (0, 1));
    assert_eq!(db.count("notification_resends").await, 0);
    let why: String = db.scalar("SELECT left_for_operator FROM booking_notification_sends").await;
    assert!(why.contains("UNKNOWN_RESENDS_MAX=0"), "{why}");
}

#[tokio::test]
async fn with_no_event_stream_nothing_is_resent_and_the_stall_is_reported() {
    let db = TestDb::create().await;
    one_send(&db, ALICE, Some(timed_out())).await;
    // Long past any grace, and no SES event has ever arrived.
    age_claims(&db, 3600).await;
    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 0, "nothing is resent on age alone");
    assert_eq!(run.feedback.counts.evidence_stalled, 1);
    assert!(run.metrics().iter().any(|(name, value, _)| *name == "EvidenceStalled" && *value == 1.0));
    assert_eq!(run.feedback.watermark_age_secs, None, "no watermark at all");
    // An event about a message SES accepted before the send moves nothing.
    let client = db.pool.get().await.unwrap();
    let before = chrono::Utc::now() - chrono::Duration::hours(2);
    shared::notify::evidence::watermark::observe(&client, before).await.unwrap();
    client.execute("UPDATE ses_event_watermarks SET received_at = now() - interval '1 hour'", &[]).await.unwrap();
    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!((run.feedback.resent_on_evidence, run.feedback.counts.evidence_stalled), (0, 1));
    assert!(run.feedback.watermark_age_secs.unwrap() > 7000.0);
}

#[tokio::test]
async fn an_event_arriving_after_a_resend_on_evidence_is_reported_as_a_likely_duplicate() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, Some(timed_out())).await;
    stream_moved_past(&db, 1000).await;
    assert_eq!(sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap().feedback.resent_on_evidence, 1);
    // SES had accepted it after all, and its event was held back past the grace.
    let handled = intake::handle(&db.pool, &origin(), &send_event(claim)).await.unwrap();
    assert_eq!(handled, Handled::Recorded(Recorded::AfterResend));
    let metrics = intake::metrics(&shared::notify::evidence::ses_event::Kind::Send, &Recorded::AfterResend);
    assert_eq!(metrics[0].0, "EventsAfterResend");
}

#[tokio::test]
async fn a_rejection_settles_an_ambiguous_send_as_failed_and_it_is_never_resent() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, Some(timed_out())).await;
    let reject = ses_event("Reject", Some(claim), Some(serde_json::json!({"reason": "Bad content"})));
    intake::handle(&db.pool, &origin(), &reject).await.unwrap();
    assert_eq!(send_counts(&db).await[&SendStatus::Failed], 1);
    stream_moved_past(&db, 1000).await;
    assert_eq!(sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap().feedback.resent_on_evidence, 0);
}

/// Shifts the canaries' and the events' arrivals `secs` into the past.
async fn quiet_for(db: &TestDb, secs: i64) {
    let client = db.pool.get().await.unwrap();
    for table in
        ["UPDATE ses_canaries SET sent_at = sent_at", "UPDATE ses_event_watermarks SET received_at = received_at"]
    {
        client.execute(&format!("{table} - make_interval(secs => $1)"), &[&(secs as f64)]).await.unwrap();
    }
}

#[tokio::test]
async fn a_canary_goes_out_when_sends_await_evidence_and_no_event_came_for_a_minute() {
    let db = TestDb::create().await;
    let (claim, mailer) = one_send(&db, ALICE, Some(timed_out())).await;
    let p = poller(&db, mailer.clone(), PollerConfig::for_tests("canary"));
    assert!(matches!(p.canary().await.unwrap(), Some(SendOutcome::Sent { .. })), "a send awaits, the stream is quiet");
    assert!(p.canary().await.unwrap().is_none(), "at most one a minute");
    assert_eq!((mailer.canaries().len(), db.count("ses_canaries").await), (1, 1));

    // Its event arrives: the watermark moves, the canary is seen.
    let mut event = ses_event("Send", None, Some(serde_json::json!({})));
    event["detail"]["mail"]["tags"]["canary"] = serde_json::json!([mailer.canaries()[0].to_string()]);
    event["detail"]["mail"]["timestamp"] = serde_json::json!(chrono::Utc::now().to_rfc3339());
    assert_eq!(intake::handle(&db.pool, &origin(), &event).await.unwrap(), Handled::Recorded(Recorded::Canary));
    let seen: Option<chrono::DateTime<chrono::Utc>> = db.scalar("SELECT seen_at FROM ses_canaries").await;
    assert!(seen.is_some());
    assert_eq!(db.count("ses_event_watermarks").await, 1);

    // A minute on, no canary went out, but an event came: still none.
    quiet_for(&db, 61).await;
    let client = db.pool.get().await.unwrap();
    client.execute("UPDATE ses_event_watermarks SET received_at = now()", &[]).await.unwrap();
    assert!(p.canary().await.unwrap().is_none(), "traffic shows the stream alive");
    // Quiet for a minute, and the send still awaits: another.
    quiet_for(&db, 61).await;
    assert!(p.canary().await.unwrap().is_some());
    // Once nothing awaits evidence, none.
    confirm(&db, claim).await;
    quiet_for(&db, 61).await;
    assert!(p.canary().await.unwrap().is_none(), "nothing awaits SES's evidence");
    assert_eq!(mailer.canaries().len(), 2);
}

#[tokio::test]
async fn outboxctl_shows_where_each_ambiguous_send_stands_and_resends_those_left_by_hand() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &[ALICE, CAROL]).await;
    let mailer = Arc::new(RecordingMailer::new());
    for who in [ALICE, CAROL, DAVE] {
        mailer.script(who, timed_out(), 1);
    }
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    confirm(&db, claim_of(&db, ALICE).await).await;
    stream_moved_past(&db, 1000).await;
    // Automatic resends off: Carol's is left for an operator.
    sweeper::run(&db.pool, &resends_max(0)).await.unwrap();
    // Dave's send is recent: SES may still report it.
    create_booking(&db, 2, &[DAVE]).await;
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();

    let list = ctl(&db, &["unknown", "list", "--json"]).await.json();
    let standing: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["recipient"].as_str().unwrap(), s["confirmation"].as_str().unwrap()))
        .collect();
    assert_eq!(standing, vec![(DAVE, "awaiting_evidence"), (CAROL, "left_for_operator")]);
    let all = ctl(&db, &["unknown", "list", "--confirmed", "--json"]).await.json();
    assert!(all.as_array().unwrap().iter().any(|s| s["recipient"] == ALICE && s["confirmation"] == "confirmed_by_ses"));
    let text = ctl(&db, &["unknown", "list"]).await.stdout;
    assert!(text.contains("left for an operator") && text.contains("unknown resend --unconfirmed"), "{text}");

    assert_one_line_error(
        &ctl(&db, &["unknown", "resend", "--unconfirmed"]).await,
        2,
        "--yes-i-accept-a-possible-duplicate",
    );
    let dry = ctl(&db, &["unknown", "resend", "--unconfirmed", "--dry-run", "--json"]).await.json();
    assert_eq!(dry["resent"].as_array().unwrap().len(), 1);
    assert_eq!(db.count("notification_resends").await, 0, "a dry run changes nothing");

    let before = mailer.count();
    let ok = ctl(&db, &["unknown", "resend", "--unconfirmed", "--yes-i-accept-a-possible-duplicate"]).await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("resending 1 send(s) left for an operator"), "{}", ok.stdout);
    let decided: String = db.scalar("SELECT decided_by FROM notification_resends").await;
    assert_eq!(decided, "oncall@example.com");
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let resent: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(resent, vec![CAROL.to_string()]);

    let status = ctl(&db, &["status", "--json"]).await.json();
    assert_eq!(
        status["unknown"],
        serde_json::json!({"awaiting_evidence": 1, "evidence_stalled": 0, "left_for_operator": 0,
                           "confirmed_by_ses": 1, "resent_on_evidence": 0})
    );
}

#[tokio::test]
async fn outboxctl_lists_and_removes_suppressions() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    let bounce = with_message_id(bounce_event(claim, "Permanent", "General"), &message_id_of(&db, claim).await);
    intake::handle(&db.pool, &origin(), &bounce).await.unwrap();

    let list = ctl(&db, &["suppression", "list", "--json"]).await.json();
    assert_eq!(list[0]["email"], ALICE);
    assert_eq!(list[0]["reason"], "bounced (Permanent/General)");
    assert_eq!(list[0]["send_id"], claim.to_string());
    let removed = ctl(&db, &["suppression", "remove", "Alice@Example.com"]).await;
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert!(removed.stdout.contains("may be mailed again"), "{}", removed.stdout);
    assert_one_line_error(&ctl(&db, &["suppression", "remove", ALICE]).await, 1, "is not suppressed");
    assert!(ctl(&db, &["suppression", "list"]).await.stdout.contains("no suppressed addresses"));

    create_booking(&db, 2, &[ALICE]).await;
    let mailer = Arc::new(RecordingMailer::new());
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailer.count(), 1, "the address is mailed again");
}
