//! Staying fast while vacuum cannot run. A claimed event's entry stays in
//! the due index while a snapshot that may still see its old version is
//! held, so a claim from the index's start reads every such entry. A
//! poller's claims start after the last event it claimed instead
//! (`claim::ClaimPosition`), and a full pass from the start, now and then,
//! finds what sits behind that position: nothing is left behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::outbox::{confirmed_event, event_status, newest_claimed, poller, seed_events, EventStatus};
use outbox_tests::TestDb;
use shared::booking::limits::Limits;
use shared::fault::Faults;
use shared::notify::mailer::recording::RecordingMailer;
use shared::outbox::events::{self, claim};
use shared::relay::PollerConfig;

/// Entries of the due index the claim of 32 events reads (rolled back),
/// from this transaction's own statistics: from the start of the index,
/// or after the newest event already claimed. An entry counts whether or
/// not its row version turns out to be visible, so this is the work a
/// held snapshot adds.
async fn claim_reads(db: &TestDb, from_position: bool) -> i64 {
    let mut client = db.pool.get().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let (at, id) = newest_claimed(&tx).await.expect("events were claimed");
    let read = "SELECT pg_stat_get_xact_tuples_returned('outbox_events_due'::regclass)";
    let before: i64 = tx.query_one(read, &[]).await.unwrap().get(0);
    let claimed = if from_position {
        tx.query(claim::CLAIM_DUE_AFTER, &[&32i64, &"w", &uuid::Uuid::nil(), &8i32, &at, &id]).await.unwrap()
    } else {
        tx.query(claim::CLAIM_DUE, &[&32i64, &"w", &uuid::Uuid::nil(), &8i32]).await.unwrap()
    };
    let after: i64 = tx.query_one(read, &[]).await.unwrap().get(0);
    tx.rollback().await.unwrap();
    assert_eq!(claimed.len(), 32, "the claim took a full batch");
    after - before
}

#[tokio::test]
async fn under_a_held_snapshot_a_claim_from_its_position_reads_none_of_the_entries_vacuum_cannot_remove() {
    let db = TestDb::create().await;
    let (_report, _) = db.held_snapshot("nightly-report").await;
    // 3,000 events worked through while the report holds its snapshot:
    // each leaves an entry in the due index that vacuum may not remove.
    seed_events(&db.pool, 3000, 1).await;
    poller(&db, Arc::new(RecordingMailer::new()), PollerConfig::for_tests("w")).drain().await.unwrap();
    db.pool.get().await.unwrap().batch_execute("VACUUM outbox_events").await.unwrap();
    seed_events(&db.pool, 50, 1).await;
    let from_start = claim_reads(&db, false).await;
    let from_position = claim_reads(&db, true).await;
    assert!(from_start >= 3000 + 32, "a claim from the start reads every kept entry: {from_start}");
    assert!(from_position <= 32 + 1, "a claim from the position reads the 32 it claims: {from_position}");
}

/// An API transaction that began before a later booking's, and commits
/// after the poller claimed that later booking: its event sorts behind the
/// claim position.
#[tokio::test]
async fn an_event_that_commits_behind_the_claim_position_is_still_sent() {
    let db = TestDb::create().await;
    let mailer = Arc::new(RecordingMailer::new());
    let p = poller(&db, mailer.clone(), PollerConfig::for_tests("w"));
    let mut slow = db.pool.get().await.unwrap();
    let tx = slow.transaction().await.unwrap();
    // Its organizer's own (an open transaction holds its turn's row until
    // it commits, as the API's holds its organizer's daily counters).
    let early = events::NewEvent { turn: Some("early@example.com".into()), ..confirmed_event(1, 1) };
    let early = events::insert(&tx, &early).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    seed_events(&db.pool, 1, 1).await;
    let first = p.poll_once().await.unwrap();
    assert_eq!(first.sent, 1, "the later booking went out: {first:?}");
    tx.commit().await.unwrap();
    // The deployed shape: a run until its deadline, not a drain.
    p.run_until(Instant::now() + Duration::from_secs(2)).await.unwrap();
    assert_eq!(event_status(&db, early).await.0, EventStatus::Done);
    assert_eq!(mailer.count(), 2, "both bookings' invitations, once each");
}

/// Behind the position too: an update held back while its booking's
/// invitation was PROCESSING, and claimed past by later bookings.
#[tokio::test]
async fn an_update_held_back_by_its_invitation_is_sent_under_a_held_snapshot() {
    use outbox_tests::outbox::{create_booking, events_of, organizer};
    use shared::booking::domain::{BookingChanges, Title};
    use shared::booking::service::BookingService;
    let db = TestDb::create().await;
    let (_report, _) = db.held_snapshot("nightly-report").await;
    let booking = create_booking(&db, 1, &["alice@example.com"]).await;
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::UNLIMITED);
    let retitle = BookingChanges { title: Some(Title::parse("Moved").unwrap()), ..Default::default() };
    service.update(&organizer(), booking.id, &retitle, 1).await.unwrap();
    // Later bookings: claims go past the update while it waits.
    seed_events(&db.pool, 200, 1).await;
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("w");
    config.batch_size = 16;
    poller(&db, mailer.clone(), config).run_until(Instant::now() + Duration::from_secs(3)).await.unwrap();
    let stored = events_of(&db, booking.id).await;
    assert!(stored.iter().all(|e| e.status == EventStatus::Done), "{stored:?}");
    let to_alice: Vec<_> = mailer.deliveries().into_iter().filter(|d| d.booking_id == booking.id).collect();
    assert_eq!(to_alice.last().map(|d| d.sequence), Some(2), "Alice's last word is the update: {to_alice:?}");
    assert_eq!(mailer.count(), 201, "every booking's invitation, once");
}
