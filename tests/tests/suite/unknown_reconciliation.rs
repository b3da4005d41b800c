//! Reconciling what stays unknown: an UNKNOWN send that no SES event has
//! confirmed within `FEEDBACK_GRACE_SECS` is reported "not confirmed by SES"
//! (once), operators see confirmed vs not confirmed and resend only the
//! latter, and the opt-in `UNKNOWN_AUTO_RESEND_AFTER_SECS` does the same by
//! itself. By default nothing is ever resent: at-most-once.

use std::time::Duration;

use outbox_tests::ctl::*;
use outbox_tests::outbox::*;
use outbox_tests::ses_events::*;
use outbox_tests::TestDb;
use shared::notify::feedback::{self, Handled, Recorded};
use shared::notify::mailer::SendOutcome;
use shared::notify::unknown::{self, Confirmation, UnknownCounts};
use shared::relay::sweeper::{self, AUTO_RESEND_DECIDER};
use shared::relay::{FeedbackConfig, PollerConfig, SweeperConfig};
use uuid::Uuid;

const CAROL: &str = "carol@example.com";
const DAVE: &str = "dave@example.com";

fn timed_out() -> Option<SendOutcome> {
    Some(SendOutcome::Unknown { reason: "read timeout".into() })
}

/// Makes every claim look `secs` older, as if time had passed.
async fn age_claims(db: &TestDb, secs: i64) {
    let client = db.pool.get().await.unwrap();
    client
        .execute(
            "UPDATE booking_notification_sends SET claimed_at = claimed_at - make_interval(secs => $1)",
            &[&(secs as f64)],
        )
        .await
        .unwrap();
}

async fn claim_of(db: &TestDb, recipient: &str) -> Uuid {
    let client = db.pool.get().await.unwrap();
    client
        .query_one("SELECT id FROM booking_notification_sends WHERE recipient_email = $1", &[&recipient])
        .await
        .unwrap()
        .get(0)
}

fn auto_resend_after(secs: u64) -> SweeperConfig {
    let mut config = sweeper_config(8);
    config.feedback = FeedbackConfig::new(Duration::from_secs(900), Some(Duration::from_secs(secs))).unwrap();
    config
}

async fn confirm(db: &TestDb, claim: Uuid) {
    let handled = feedback::handle(&db.pool, &origin(), &send_event(claim)).await.unwrap();
    assert!(matches!(handled, Handled::Recorded(Recorded::Recorded { confirmed: true, .. })), "{handled:?}");
}

#[tokio::test]
async fn unknown_send_with_no_ses_event_is_reported_not_confirmed_once_after_the_grace() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, timed_out()).await;

    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.newly_unconfirmed, 0, "within the grace SES may still confirm it");
    assert_eq!(run.feedback.counts, UnknownCounts { awaiting_feedback: 1, not_confirmed: 0, confirmed_by_ses: 0 });

    age_claims(&db, 901).await;
    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.newly_unconfirmed, 1);
    assert_eq!(run.feedback.counts.not_confirmed, 1);
    assert!(run.metrics().iter().any(|(name, value, _)| *name == "UnconfirmedSends" && *value == 1.0));
    let stamped: Option<chrono::DateTime<chrono::Utc>> =
        db.scalar("SELECT unconfirmed_at FROM booking_notification_sends").await;
    assert!(stamped.is_some());

    let again = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(again.feedback.newly_unconfirmed, 0, "reported once");
    assert_eq!(again.feedback.counts.not_confirmed, 1, "and still counted");
    assert_eq!(again.feedback.auto_resent, 0, "never resent by default: at-most-once");
    assert_eq!(db.count("notification_resends").await, 0);

    let client = db.pool.get().await.unwrap();
    let listed = unknown::list(&client, Duration::from_secs(900), false, 10).await.unwrap();
    assert_eq!((listed[0].id, listed[0].confirmation), (claim, Confirmation::NotConfirmed));
}

#[tokio::test]
async fn send_event_arriving_after_the_grace_still_confirms_the_send() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, timed_out()).await;
    age_claims(&db, 901).await;
    assert_eq!(sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap().feedback.newly_unconfirmed, 1);

    confirm(&db, claim).await;
    let client = db.pool.get().await.unwrap();
    let grace = Duration::from_secs(900);
    assert_eq!(
        unknown::counts(&client, grace).await.unwrap(),
        UnknownCounts { awaiting_feedback: 0, not_confirmed: 0, confirmed_by_ses: 1 }
    );
    assert!(unknown::list(&client, grace, false, 10).await.unwrap().is_empty(), "nothing left to judge");
    let with_confirmed = unknown::list(&client, grace, true, 10).await.unwrap();
    assert_eq!(with_confirmed[0].confirmation, Confirmation::ConfirmedBySes);
}

#[tokio::test]
async fn auto_resend_resends_only_sends_ses_never_confirmed_and_records_each_decision() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &[ALICE, CAROL]).await;
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    for who in [ALICE, CAROL] {
        mailer.script(who, timed_out().unwrap(), 1);
    }
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    // SES's Send event came for Alice's message only: Carol's never reached SES.
    confirm(&db, claim_of(&db, ALICE).await).await;
    age_claims(&db, 1000).await;

    let before = mailer.count();
    let run = sweeper::run(&db.pool, &auto_resend_after(960)).await.unwrap();
    assert_eq!((run.feedback.newly_unconfirmed, run.feedback.auto_resent), (1, 1));
    let decided: (String, String) = {
        let client = db.pool.get().await.unwrap();
        let row = client.query_one("SELECT recipient_email, decided_by FROM notification_resends", &[]).await.unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(decided, (CAROL.to_string(), AUTO_RESEND_DECIDER.to_string()));

    poller(&db, mailer.clone(), PollerConfig::for_tests("w2")).drain().await.unwrap();
    let resent: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(resent, vec![CAROL.to_string()], "Carol once more; Alice, confirmed by SES, never twice");
    let again = sweeper::run(&db.pool, &auto_resend_after(960)).await.unwrap();
    assert_eq!(again.feedback.auto_resent, 0);
    assert_eq!(send_counts(&db).await[&SendStatus::Sent], 2);
}

#[tokio::test]
async fn auto_resend_waits_for_the_grace_and_a_shorter_setting_is_refused() {
    let err = FeedbackConfig::new(Duration::from_secs(900), Some(Duration::from_secs(60))).unwrap_err().to_string();
    assert!(err.contains("UNKNOWN_AUTO_RESEND_AFTER_SECS") && err.contains("FEEDBACK_GRACE_SECS"), "{err}");
    assert!(FeedbackConfig::new(Duration::ZERO, None).is_err());

    let db = TestDb::create().await;
    one_send(&db, ALICE, timed_out()).await;
    age_claims(&db, 930).await;
    let run = sweeper::run(&db.pool, &auto_resend_after(960)).await.unwrap();
    assert_eq!(
        (run.feedback.newly_unconfirmed, run.feedback.auto_resent),
        (1, 0),
        "past the grace, not the resend age"
    );
}

#[tokio::test]
async fn outboxctl_shows_confirmed_and_unconfirmed_and_resends_only_the_unconfirmed() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &[ALICE, CAROL]).await;
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    for who in [ALICE, CAROL, DAVE] {
        mailer.script(who, timed_out().unwrap(), 1);
    }
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    confirm(&db, claim_of(&db, ALICE).await).await;
    age_claims(&db, 1000).await;
    // Dave's send is recent: SES may still report it.
    create_booking(&db, 2, &[DAVE]).await;
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();

    let list = ctl(&db, &["unknown", "list", "--json"]).json();
    let standing: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["recipient"].as_str().unwrap(), s["confirmation"].as_str().unwrap()))
        .collect();
    assert_eq!(standing, vec![(DAVE, "awaiting_feedback"), (CAROL, "not_confirmed")]);
    let all = ctl(&db, &["unknown", "list", "--confirmed", "--json"]).json();
    assert!(all.as_array().unwrap().iter().any(|s| s["recipient"] == ALICE && s["confirmation"] == "confirmed_by_ses"));
    let text = ctl(&db, &["unknown", "list"]).stdout;
    assert!(text.contains("not confirmed by SES") && text.contains("unknown resend --unconfirmed"), "{text}");

    assert_one_line_error(&ctl(&db, &["unknown", "resend", "--unconfirmed"]), 2, "--yes-i-accept-a-possible-duplicate");
    let dry = ctl(&db, &["unknown", "resend", "--unconfirmed", "--dry-run", "--json"]).json();
    assert_eq!(dry["resent"].as_array().unwrap().len(), 1);
    assert_eq!(db.count("notification_resends").await, 0, "a dry run changes nothing");

    let before = mailer.count();
    let ok = ctl(&db, &["unknown", "resend", "--unconfirmed", "--yes-i-accept-a-possible-duplicate"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("resending 1 send(s) not confirmed by SES"), "{}", ok.stdout);
    let decided: String = db.scalar("SELECT decided_by FROM notification_resends").await;
    assert_eq!(decided, "oncall@example.com");
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let resent: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(resent, vec![CAROL.to_string()]);

    let status = ctl(&db, &["status", "--json"]).json();
    assert_eq!(
        status["unknown"],
        serde_json::json!({"awaiting_feedback": 1, "not_confirmed": 0, "confirmed_by_ses": 1})
    );
}

#[tokio::test]
async fn outboxctl_lists_and_removes_suppressions() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    let bounce = with_message_id(bounce_event(claim, "Permanent", "General"), &message_id_of(&db, claim).await);
    feedback::handle(&db.pool, &origin(), &bounce).await.unwrap();

    let list = ctl(&db, &["suppression", "list", "--json"]).json();
    assert_eq!(list[0]["email"], ALICE);
    assert_eq!(list[0]["reason"], "bounced (Permanent/General)");
    assert_eq!(list[0]["send_id"], claim.to_string());
    let removed = ctl(&db, &["suppression", "remove", "Alice@Example.com"]);
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert!(removed.stdout.contains("may be mailed again"), "{}", removed.stdout);
    assert_one_line_error(&ctl(&db, &["suppression", "remove", ALICE]), 1, "is not suppressed");
    assert!(ctl(&db, &["suppression", "list"]).stdout.contains("no suppressed addresses"));

    create_booking(&db, 2, &[ALICE]).await;
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailer.count(), 1, "the address is mailed again");
}
