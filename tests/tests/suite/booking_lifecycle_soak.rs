//! Superseding under load: random updates and cancellations race 8
//! pollers, and every recipient's calendar must end in the booking's final
//! state; and what superseding saves, measured.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox_tests::outbox::*;
use outbox_tests::{Rng, TestDb};
use shared::booking::domain::{Booking, BookingChanges, BookingStatus, TimeRange, Title};
use shared::booking::events::Notice;
use shared::booking::limits::Limits;
use shared::booking::service::BookingService;
use shared::booking::BookingError;
use shared::fault::Faults;
use shared::notify::mailer::recording::{Delivery, RecordingMailer};
use shared::relay::PollerConfig;
use uuid::Uuid;

const PEOPLE: [&str; 6] = [
    "alice@example.com",
    "carol@example.com",
    "dave@example.com",
    "erin@example.com",
    "frank@example.com",
    "grace@example.com",
];

/// A random non-empty set of attendees.
fn random_attendees(rng: &mut Rng) -> Vec<&'static str> {
    let mut picked: Vec<&str> = PEOPLE.iter().copied().filter(|_| rng.below(2) == 0).collect();
    if picked.is_empty() {
        picked.push(PEOPLE[rng.below(6) as usize]);
    }
    picked
}

fn service(db: &TestDb) -> BookingService {
    BookingService::new(db.pool.clone(), Faults::none(), Limits::UNLIMITED)
}

/// One random change to `b`: new attendees, a new title, a new time, or
/// a cancellation. A refused change (an overlap) is skipped.
async fn random_change(service: &BookingService, rng: &mut Rng, b: &Booking) {
    let organizer = organizer();
    let result = match rng.below(10) {
        0..=4 => {
            let attendees = random_attendees(rng).iter().map(|e| person(e)).collect();
            service
                .update(
                    &organizer,
                    b.id,
                    &BookingChanges { attendees: Some(attendees), ..Default::default() },
                    b.version,
                )
                .await
        }
        5..=6 => {
            let title = Title::parse(&format!("Meeting v{}", b.version + 1)).unwrap();
            service
                .update(&organizer, b.id, &BookingChanges { title: Some(title), ..Default::default() }, b.version)
                .await
        }
        7..=8 => {
            let shift = chrono::Duration::minutes(rng.below(3) as i64 * 10);
            let range =
                TimeRange::new(b.range.start() + shift, b.range.start() + shift + chrono::Duration::minutes(20))
                    .unwrap();
            service
                .update(&organizer, b.id, &BookingChanges { range: Some(range), ..Default::default() }, b.version)
                .await
        }
        _ => service.cancel(&organizer, b.id, None).await,
    };
    match result {
        Ok(_) | Err(BookingError::Overlap) => {}
        Err(e) => panic!("change refused: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_updates_and_cancels_racing_8_pollers_leave_every_calendar_in_the_final_state() {
    let db = TestDb::create().await;
    let (mut rng, seed) = Rng::from_clock();
    println!("soak seed {seed}");
    let (bookings, changes) = (40, 400);
    let mut ids = Vec::new();
    for slot in 0..bookings {
        ids.push(create_booking(&db, slot, &random_attendees(&mut rng)).await.id);
    }

    let mailer = Arc::new(RecordingMailer::new().with_delay(Duration::from_millis(1)));
    let writing = Arc::new(AtomicBool::new(true));
    let pollers: Vec<_> = (0..8)
        .map(|i| {
            let p = poller(&db, mailer.clone(), PollerConfig::for_tests(&format!("soak-{i}")));
            let writing = writing.clone();
            tokio::spawn(async move {
                loop {
                    let still_writing = writing.load(Ordering::SeqCst);
                    let s = p.poll_once().await.unwrap();
                    if s.claimed == 0 {
                        if !still_writing {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            })
        })
        .collect();
    let service = service(&db);
    let mut made = 0;
    while made < changes {
        // Bursts of 1 to 3 changes to one booking, so pollers meet events
        // that later ones have already made moot.
        let id = ids[rng.below(ids.len() as u64) as usize];
        for _ in 0..=rng.below(3) {
            let b = service.get(&organizer(), id).await.unwrap();
            if b.status == BookingStatus::Confirmed {
                random_change(&service, &mut rng, &b).await;
            }
            made += 1;
        }
        if rng.below(4) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    writing.store(false, Ordering::SeqCst);
    for p in pollers {
        tokio::time::timeout(Duration::from_secs(120), p).await.expect("pollers finish").unwrap();
    }
    // A last drain, in case a poller stopped just before the last event.
    poller(&db, mailer.clone(), PollerConfig::for_tests("final")).drain().await.unwrap();

    let deliveries = mailer.deliveries();
    let mut seen = HashSet::new();
    for d in &deliveries {
        assert!(seen.insert((d.event_id, d.recipient.clone())), "duplicate: {d:?}");
    }
    let mut last: BTreeMap<(Uuid, String), &Delivery> = BTreeMap::new();
    for d in &deliveries {
        let entry = last.entry((d.booking_id, d.recipient.clone())).or_insert(d);
        if d.sequence > entry.sequence {
            *entry = d;
        }
    }
    let mut checked = 0;
    for id in &ids {
        let b = service.get(&organizer(), *id).await.unwrap();
        for who in PEOPLE {
            let got = last.get(&(*id, who.to_string())).map(|d| (d.notice, d.sequence));
            let attendee = b.attendees.iter().any(|a| a.email.as_str() == who);
            match (b.status, attendee, got) {
                (BookingStatus::Confirmed, true, got) => {
                    assert_eq!(got, Some((Notice::Request, b.version)), "{who} of {id}: the final REQUEST")
                }
                (BookingStatus::Confirmed, false, Some((notice, _))) => {
                    assert_eq!(notice, Notice::Removed, "{who} of {id}: told of their removal last")
                }
                (BookingStatus::Cancelled, _, Some((notice, _))) => {
                    assert!(
                        matches!(notice, Notice::Cancel | Notice::Removed),
                        "{who} of {id}: a CANCEL last, got {notice:?}"
                    )
                }
                (_, _, None) => {} // never heard of it, and it is not theirs now
            }
            checked += 1;
        }
    }
    let counts = send_counts(&db).await;
    assert_eq!(counts[&SendStatus::Sent] as usize, deliveries.len(), "every SENT claim is one delivery");
    assert_eq!(counts[&SendStatus::Claimed] + counts[&SendStatus::Unknown], 0);
    println!(
        "soak: {bookings} bookings, {} events, 8 pollers: {} emails sent, {} superseded; {checked} calendars checked",
        event_counts(&db).await[&EventStatus::Done],
        deliveries.len(),
        counts[&SendStatus::Superseded]
    );
}

/// Emails per attendee for a burst of changes committed within one poll
/// interval, with superseding off (every event mails everyone, as before)
/// and on.
async fn emails_per_attendee(skip_superseded: bool, changes: i32, cancel: bool) -> f64 {
    let db = TestDb::create().await;
    let attendees = ["alice@example.com", "carol@example.com", "dave@example.com"];
    let b = create_booking(&db, 9, &attendees).await;
    let service = service(&db);
    for v in 1..=changes {
        let title = Title::parse(&format!("Design review, take {v}")).unwrap();
        service
            .update(&organizer(), b.id, &BookingChanges { title: Some(title), ..Default::default() }, v)
            .await
            .unwrap();
    }
    if cancel {
        service.cancel(&organizer(), b.id, None).await.unwrap();
    }
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = PollerConfig::for_tests("burst");
    config.skip_superseded = skip_superseded;
    poller(&db, mailer.clone(), config).drain().await.unwrap();
    mailer.count() as f64 / attendees.len() as f64
}

#[tokio::test]
async fn a_burst_of_changes_within_one_poll_interval_mails_each_attendee_once() {
    let (before, after) = (emails_per_attendee(false, 5, false).await, emails_per_attendee(true, 5, false).await);
    println!("burst of 5 updates after the booking, within one poll interval: {before} emails per attendee before, {after} after");
    assert_eq!((before, after), (6.0, 1.0));
    let (before, after) = (emails_per_attendee(false, 0, true).await, emails_per_attendee(true, 0, true).await);
    println!("booking then cancellation within one poll interval: {before} emails per attendee before, {after} after");
    assert_eq!((before, after), (2.0, 0.0));
}
