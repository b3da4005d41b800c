//! No path mails old news: an operator's resend of one recipient and a
//! replay of a dead letter run an event again after later ones of its
//! booking settled. The plan decides from every later event, whatever its
//! status, and from the booking as it stands now, so an invitation never
//! follows its meeting's cancellation.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::UNKNOWN;
use shared::outbox::events::status::sql::{DEAD, DONE};
use std::sync::Arc;

use outbox_tests::outbox::*;
use outbox_tests::TestDb;
use shared::booking::events::{EventType, Notice};
use shared::booking::limits::Limits;
use shared::booking::service::BookingService;
use shared::fault::Faults;
use shared::notify::evidence::resend;
use shared::notify::mailer::recording::RecordingMailer;
use shared::notify::mailer::SendOutcome;
use shared::outbox::events::transitions::{self, ReplaySelection};
use shared::outbox::events::EventStatus;
use shared::relay::{sweeper, PollerConfig};
use uuid::Uuid;

const ALICE: &str = "alice@example.com";
const CAROL: &str = "carol@example.com";

fn unknown_outcome() -> SendOutcome {
    SendOutcome::Unknown { reason: "read timeout".into() }
}

async fn cancel(db: &TestDb, booking: Uuid) {
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::UNLIMITED);
    service.cancel(&organizer(), booking, None).await.unwrap();
}

/// Alice's invitation went UNKNOWN; the booking was cancelled and the
/// CANCEL delivered to her (she may have been told). Returns the booking
/// and the UNKNOWN invitation's send.
async fn unknown_invite_then_delivered_cancel(db: &TestDb, mailer: &Arc<RecordingMailer>) -> (Uuid, Uuid) {
    let booking = create_booking(db, 1, &[ALICE]).await;
    mailer.script(ALICE, unknown_outcome(), 1);
    poller(db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let invite: Uuid = db.scalar(formatcp!("SELECT id FROM booking_notification_sends WHERE status = {UNKNOWN}")).await;
    cancel(db, booking.id).await;
    poller(db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let told: Vec<Notice> = mailer.deliveries().iter().filter(|d| d.recipient == ALICE).map(|d| d.notice).collect();
    assert_eq!(told, vec![Notice::Cancel], "the cancellation reached her");
    (booking.id, invite)
}

/// What was mailed to anyone after `before` deliveries.
fn mailed_since(mailer: &RecordingMailer, before: usize) -> Vec<(String, EventType)> {
    mailer.deliveries()[before..].iter().map(|d| (d.recipient.clone(), d.event_type)).collect()
}

#[tokio::test]
async fn resend_after_cancel_sends_nothing() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let (_, invite) = unknown_invite_then_delivered_cancel(&db, &mailer).await;
    let before = mailer.count();
    let mut client = db.pool.get().await.unwrap();
    // An operator's resend is refused at once, recorded nowhere: the
    // cancellation superseded the invitation.
    let refused = resend::resend(&mut client, invite, resend::Decision::Operator("operator")).await.unwrap_err();
    assert!(refused.to_string().contains("BOOKING_CANCELLED"), "{refused}");
    assert_eq!(db.count("notification_resends").await, 0);
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailed_since(&mailer, before), vec![], "no invitation to a cancelled meeting");
    assert_eq!(event_counts(&db).await.get(&EventStatus::Done), Some(&2), "nothing reopened");
    // The plan holds the same rule for whatever reopens the event (SES's
    // evidence, a replay): `resend_on_evidence_after_cancel_sends_nothing`.
}

#[tokio::test]
async fn resend_on_evidence_after_cancel_sends_nothing() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    unknown_invite_then_delivered_cancel(&db, &mailer).await;
    let before = mailer.count();
    // SES's events moved past the invitation and none named it: the
    // sweeper resends it, and the poller's plan finds the cancel.
    stream_moved_past(&db, 1000).await;
    let run = sweeper::run(&db.pool, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.feedback.resent_on_evidence, 1, "{:?}", run.feedback);
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailed_since(&mailer, before), vec![], "no invitation to a cancelled meeting");
}

#[tokio::test]
async fn replay_of_an_invite_whose_cancel_is_dead_sends_nothing() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let booking = create_booking(&db, 1, &[ALICE, CAROL]).await;
    // The invitation reaches Alice; Carol's send is refused on its one
    // attempt: the event is dead-lettered.
    mailer.script(CAROL, refused(), 1);
    poller(&db, mailer.clone(), one_attempt("w")).drain().await.unwrap();
    cancel(&db, booking.id).await;
    // The CANCEL to Alice dies the same way (Carol was never told: nothing
    // to cancel for her).
    mailer.script(ALICE, refused(), 1);
    poller(&db, mailer.clone(), one_attempt("w")).drain().await.unwrap();
    let statuses: Vec<EventStatus> = events_of(&db, booking.id).await.iter().map(|e| e.status).collect();
    assert_eq!(statuses, vec![EventStatus::Dead, EventStatus::Dead]);
    let invite = events_of(&db, booking.id).await[0].id;

    let before = mailer.count();
    let mut client = db.pool.get().await.unwrap();
    let report =
        transitions::replay(&mut client, ReplaySelection::Ids(&[invite]), "operator", 10, false).await.unwrap();
    assert_eq!(report.replayed, vec![invite]);
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailed_since(&mailer, before), vec![], "Carol is not invited to a meeting that no longer exists");

    // Replaying the cancellation then tells Alice, the one who was told.
    let cancel_event = events_of(&db, booking.id).await[1].id;
    let mut client = db.pool.get().await.unwrap();
    transitions::replay(&mut client, ReplaySelection::Ids(&[cancel_event]), "operator", 10, false).await.unwrap();
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailed_since(&mailer, before), vec![(ALICE.to_string(), EventType::BookingCancelled)]);
}

/// Low 1 of issue 37, as it would happen: the invitation (v1) goes DEAD,
/// the cancellation (v2) is DONE (nothing to cancel: she was never told).
/// Retention runs past RETENTION_DAYS and keeps v2 while v1 is DEAD; an
/// operator replays every dead letter: nothing is mailed. Then, as if an
/// older retention had deleted v2 all the same, a second replay still
/// mails nothing: the plan reads the booking's own status.
#[tokio::test]
async fn a_replay_after_retention_never_mails_a_cancelled_booking() {
    use shared::relay::{retention, RetentionConfig};
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let booking = create_booking(&db, 1, &[ALICE]).await;
    mailer.script(ALICE, refused(), 1);
    poller(&db, mailer.clone(), one_attempt("w")).drain().await.unwrap();
    cancel(&db, booking.id).await;
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let stored = events_of(&db, booking.id).await;
    let statuses: Vec<EventStatus> = stored.iter().map(|e| e.status).collect();
    assert_eq!(statuses, vec![EventStatus::Dead, EventStatus::Done]);
    assert_eq!(mailer.count(), 0, "she was never told: nothing to cancel");

    let client = db.pool.get().await.unwrap();
    client
        .batch_execute(&format!(
            "UPDATE outbox_events SET completed_at = now() - interval '30 days' WHERE status = {DONE}; \
             UPDATE processed_events SET processed_at = now() - interval '30 days'; {AGE_SENDS_30_DAYS};"
        ))
        .await
        .unwrap();
    let purged = retention::run(&client, &RetentionConfig::default()).await.unwrap();
    assert_eq!(purged.events, 0, "the cancellation stays while the invitation is DEAD");
    assert_eq!(events_of(&db, booking.id).await.len(), 2);

    let mut operator = db.pool.get().await.unwrap();
    let selection = ReplaySelection::All { event_type: None, since: None };
    let replayed = transitions::replay(&mut operator, selection, "operator", 100, false).await.unwrap();
    assert_eq!(replayed.superseded, vec![stored[0].id], "old news: its cancellation is still there to say so");
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailer.count(), 0, "no invitation to a cancelled meeting");

    // The cancellation gone all the same (retention before this fix), and
    // the invitation dead again: a replay still mails nothing.
    let v2 = stored[1].id;
    client.execute("DELETE FROM outbox_events WHERE id = $1", &[&v2]).await.unwrap();
    client
        .batch_execute(formatcp!(
            "DELETE FROM booking_notification_sends; DELETE FROM processed_events; \
             UPDATE outbox_events SET status = {DEAD}"
        ))
        .await
        .unwrap();
    let selection = ReplaySelection::All { event_type: None, since: None };
    let replayed = transitions::replay(&mut operator, selection, "operator", 100, false).await.unwrap();
    assert_eq!(replayed.replayed, vec![stored[0].id]);
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    assert_eq!(mailer.count(), 0, "the booking says it is cancelled");
    let why: String = db.scalar("SELECT last_error FROM booking_notification_sends").await;
    assert!(why.contains("cancelled"), "{why}");
}

/// Low 6 of issue 52: a resend removes the UNKNOWN claim it replaces. A
/// cancellation planned after the resend was decided, before it ran, must
/// still read the person as possibly told (the first invitation may have
/// reached her), and reach her.
#[tokio::test]
async fn a_cancellation_after_a_resend_still_reaches_a_person_who_may_have_been_told() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let booking = create_booking(&db, 1, &[ALICE]).await;
    mailer.script(ALICE, unknown_outcome(), 1);
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let invite: Uuid = db.scalar(formatcp!("SELECT id FROM booking_notification_sends WHERE status = {UNKNOWN}")).await;
    let mut client = db.pool.get().await.unwrap();
    resend::resend(&mut client, invite, resend::Decision::Operator("operator")).await.unwrap();
    cancel(&db, booking.id).await;
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let told: Vec<Notice> = mailer.deliveries().iter().filter(|d| d.recipient == ALICE).map(|d| d.notice).collect();
    assert_eq!(told, vec![Notice::Cancel], "the invitation is old news; the cancellation is hers");
}
