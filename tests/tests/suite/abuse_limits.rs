//! Abuse limits, counted in the database: per organizer and day, per
//! booking and day; 429 with Retry-After, nothing written, and they hold
//! under concurrent requests.

use const_format::formatcp;
use outbox_tests::api::{booking_body, test_config, TestApi, ALICE, BOB};
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::api::config::ApiConfig;
use shared::fault::Faults;
use shared::notify::sends::status::send_sql::CAPPED;
use shared::outbox::events::status::sql::DONE;

fn limited(db: &TestDb, bookings: i32, recipients: i32, changes: i32) -> TestApi {
    let limits = shared::booking::limits::Limits {
        bookings_per_day: bookings,
        recipients_per_day: recipients,
        changes_per_booking_per_day: changes,
        new_accounts_recipients_per_day: i32::MAX,
    };
    TestApi::with(db, Faults::none(), ApiConfig { limits, ..test_config() })
}

fn assert_limited(resp: &outbox_tests::api::TestResponse, what: &str) {
    assert_eq!(resp.status, 429, "{}", resp.body);
    assert_eq!(resp.body["type"], outbox_tests::api::problem_type("limit-exceeded"));
    assert!(resp.body["detail"].as_str().unwrap().contains(what), "{}", resp.body);
    let retry: u64 = resp.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=86_400).contains(&retry), "retry after the UTC day ends: {retry}");
}

#[tokio::test]
async fn daily_limits_refuse_with_429_and_retry_after_and_write_nothing() {
    let db = TestDb::create().await;
    let api = limited(&db, 3, 5, 2);
    let mut first = Value::Null;
    for hour in 9..12 {
        let resp = api.post("/bookings", BOB, &booking_body(hour)).await;
        assert_eq!(resp.status, 201, "{}", resp.body);
        if hour == 9 {
            first = resp.body;
        }
    }
    assert_limited(&api.post("/bookings", BOB, &booking_body(13)).await, "3 bookings per day");
    assert_eq!((db.count("bookings").await, db.count("outbox_events").await), (3, 3), "the refused one wrote nothing");
    // Each organizer has their own count; recipients count too.
    let mut crowd = booking_body(9);
    crowd["attendees"] =
        json!((0..6).map(|i| json!({"email": format!("p{i}@example.com"), "name": "P"})).collect::<Vec<_>>());
    assert_limited(&api.post("/bookings", ALICE, &crowd).await, "5 recipients per day");
    assert_eq!(db.count("bookings").await, 3);
    // Changes per booking: every reschedule or cancel mails everyone again.
    let path = format!("/bookings/{}", first["id"].as_str().unwrap());
    for (version, hour) in [(1, 14), (2, 15)] {
        let body = json!({"start": format!("2026-12-01T{hour}:00:00Z"), "end": format!("2026-12-01T{hour}:30:00Z"), "version": version});
        let r = api.send("PATCH", &path, Some(BOB), &[], Some(&body.to_string())).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let body = json!({"start": "2026-12-01T16:00:00Z", "end": "2026-12-01T16:30:00Z", "version": 3});
    let refused = api.send("PATCH", &path, Some(BOB), &[], Some(&body.to_string())).await;
    assert_limited(&refused, "2 times per day");
    assert_eq!(api.get(&path, BOB).await.body["version"], 3, "the refused change changed nothing");
    assert_eq!(db.count("outbox_events").await, 5);
}

#[tokio::test]
async fn cancel_at_a_limit_still_cancels_and_its_cancel_mails_go_out() {
    let db = TestDb::create().await;
    // One booking whose two attendees use up the day's recipients.
    let api = limited(&db, 1, 2, 1);
    let mut two = booking_body(9);
    two["attendees"] =
        json!([{"email": "carol@example.com", "name": "Carol"}, {"email": "dave@example.com", "name": "Dave"}]);
    let created = api.post("/bookings", BOB, &two).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let path = format!("/bookings/{}", created.body["id"].as_str().unwrap());
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let config = shared::relay::PollerConfig::for_tests("w");
    outbox_tests::outbox::poller(&db, mailer.clone(), config.clone()).drain().await.unwrap();
    let body = json!({"start": "2026-12-01T14:00:00Z", "end": "2026-12-01T14:30:00Z", "version": 1});
    let refused = api.send("PATCH", &path, Some(BOB), &[], Some(&body.to_string())).await;
    assert_limited(&refused, "2 recipients per day");
    // At both limits, the cancel still goes through, and is mailed.
    let cancelled = api.post(&format!("{path}/cancel"), BOB, &json!({})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert_eq!(cancelled.body["status"], "CANCELLED");
    outbox_tests::outbox::poller(&db, mailer.clone(), config).drain().await.unwrap();
    let cancels: Vec<String> = mailer
        .deliveries()
        .iter()
        .filter(|d| d.event_type == shared::booking::events::EventType::BookingCancelled)
        .map(|d| d.recipient.clone())
        .collect();
    assert_eq!(cancels, vec!["carol@example.com", "dave@example.com"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn daily_limits_hold_under_concurrent_requests() {
    let db = TestDb::create().await;
    let api = std::sync::Arc::new(limited(&db, 5, 1000, 10));
    let mut tasks = Vec::new();
    for hour in 0..20 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = booking_body(0);
            body["start"] = json!(format!("2026-12-{:02}T09:00:00Z", hour + 1));
            body["end"] = json!(format!("2026-12-{:02}T09:30:00Z", hour + 1));
            api.post("/bookings", BOB, &body).await.status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|&&s| s == 201).count(), 5, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&s| s == 429).count(), 15, "{statuses:?}");
    assert_eq!(db.count("bookings").await, 5);
    assert_eq!(db.count("outbox_events").await, 5);
}

/// The recipient limits as the template deploys them.
fn deployed_limits() -> shared::notify::pacing::recipient_limit::RecipientLimits {
    use shared::config::settings as S;
    shared::notify::pacing::recipient_limit::RecipientLimits {
        invitations_per_organizer: S::LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY.default_value(),
        new_organizers: S::LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY.default_value(),
    }
}

fn deployed_poller_config() -> shared::relay::PollerConfig {
    let mut config = shared::relay::PollerConfig::for_tests("w");
    config.recipient_limits = deployed_limits();
    config
}

const VICTIM: &str = "victim@corp.example";

/// A booking body for `slot` hours after 2027-01-04T00:00Z, inviting `attendees`.
fn invitation(slot: i64, attendees: &[&str]) -> Value {
    let start = chrono::DateTime::parse_from_rfc3339("2027-01-04T00:00:00Z").unwrap() + chrono::Duration::hours(slot);
    let end = start + chrono::Duration::minutes(30);
    json!({
        "title": "Sync",
        "start": start.to_rfc3339(),
        "end": end.to_rfc3339(),
        "timezone": "UTC",
        "attendees": attendees.iter().map(|a| json!({"email": a, "name": "Someone"})).collect::<Vec<_>>(),
    })
}

/// `n` accounts made today at a catch-all domain (`mallory{i}@`), each
/// inviting the victim to one booking at 00:00 UTC.
async fn throwaway_accounts_invite_the_victim(api: &TestApi, n: i32) {
    for i in 0..n {
        let (email, sub) = (format!("mallory{i}@catchall.example"), format!("sub-throwaway-{i}"));
        let attacker = outbox_tests::api::Caller { email: &email, name: "Mallory", sub: &sub };
        let made = api.post("/bookings", attacker, &invitation(i as i64, &[VICTIM])).await;
        assert_eq!(made.status, 201, "{}", made.body);
    }
}

/// One attacker account lists the victim in as many bookings as the API
/// lets it create today. Returns how many it created.
async fn fill_the_victims_day(api: &TestApi, attacker: outbox_tests::api::Caller<'_>, slot0: i64) -> usize {
    let mut created = 0;
    for slot in 0.. {
        let made = api.post("/bookings", attacker, &invitation(slot0 + slot, &[VICTIM])).await;
        if made.status == 429 {
            break;
        }
        assert_eq!(made.status, 201, "{}", made.body);
        created += 1;
    }
    created
}

/// A legitimate organizer invites the victim, reschedules, and cancels,
/// the poller draining after each: returns what reached the victim about
/// that booking.
async fn invite_update_cancel(
    db: &TestDb,
    api: &TestApi,
    organizer: outbox_tests::api::Caller<'_>,
    mailer: &std::sync::Arc<shared::notify::mailer::recording::RecordingMailer>,
    slot: i64,
) -> Vec<(shared::booking::events::Notice, i32)> {
    let drain = || outbox_tests::outbox::poller(db, mailer.clone(), deployed_poller_config());
    let created = api.post("/bookings", organizer, &invitation(slot, &[VICTIM, "carol@example.com"])).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    let path = format!("/bookings/{id}");
    drain().drain().await.unwrap();
    let moved = invitation(slot + 1, &[VICTIM, "carol@example.com"]);
    let body = json!({"start": moved["start"], "end": moved["end"], "version": 1});
    let updated = api.send("PATCH", &path, Some(organizer), &[], Some(&body.to_string())).await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    drain().drain().await.unwrap();
    let cancelled = api.post(&format!("{path}/cancel"), organizer, &json!({})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    drain().drain().await.unwrap();
    mailer
        .deliveries()
        .iter()
        .filter(|d| d.booking_id.to_string() == id && d.recipient == VICTIM)
        .map(|d| (d.notice, d.sequence))
        .collect()
}

/// The Medium of issue 37, as the attack: an attacker's account lists the
/// victim in every booking it may create today, at 00:00. Another
/// organizer then invites the victim, reschedules, and cancels: all three
/// mails arrive, exactly once each. The attacker's own invitations stop at
/// its budget for this mailbox.
#[tokio::test]
async fn an_attacker_filling_a_victims_day_blocks_no_other_organizers_mail() {
    use shared::booking::events::Notice;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let mallory = outbox_tests::api::Caller { email: "mallory@example.com", name: "Mallory", sub: "sub-mallory" };
    let filled = fill_the_victims_day(&api, mallory, 0).await;
    assert_eq!(filled, 50, "LimitBookingsPerDay");
    outbox_tests::outbox::poller(&db, mailer.clone(), deployed_poller_config()).drain().await.unwrap();
    let from_mallory = mailer.count();
    assert_eq!(from_mallory as i32, deployed_limits().invitations_per_organizer, "the attacker's own budget");

    let got = invite_update_cancel(&db, &api, BOB, &mailer, 1000).await;
    assert_eq!(got, vec![(Notice::Request, 1), (Notice::Request, 2), (Notice::Cancel, 3)], "each exactly once");
    assert_eq!(mailer.count(), from_mallory + 6, "and Carol's three");
    let capped: i64 =
        db.scalar(formatcp!("SELECT count(*) FROM booking_notification_sends WHERE status = {CAPPED}")).await;
    assert_eq!(capped, 40, "the attacker's invitations over its budget, no one else's");
    let why: String =
        db.scalar(formatcp!("SELECT last_error FROM booking_notification_sends WHERE status = {CAPPED} LIMIT 1")).await;
    assert!(why.contains("LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY"), "{why}");
}

/// The same with 20 attacker accounts: together they take the day's first
/// contacts of the victim's mailbox, and still cannot touch an organizer
/// the victim already has a booking with. A newcomer after them is capped,
/// and sees so.
#[tokio::test]
async fn twenty_attacker_accounts_block_no_organizer_the_victim_already_knows() {
    use shared::booking::events::Notice;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let limits = deployed_limits();
    // Yesterday: Bob and the victim had a meeting.
    let earlier = api.post("/bookings", BOB, &invitation(5000, &[VICTIM])).await;
    assert_eq!(earlier.status, 201, "{}", earlier.body);
    outbox_tests::outbox::poller(&db, mailer.clone(), deployed_poller_config()).drain().await.unwrap();
    assert_eq!(mailer.count(), 1);
    outbox_tests::outbox::a_day_passes_for_the_recipient_limits(&db).await;

    let accounts: Vec<(String, String)> =
        (0..20).map(|i| (format!("mallory{i}@attacker{i}.example"), format!("sub-mallory-{i}"))).collect();
    for (i, (email, sub)) in accounts.iter().enumerate() {
        let attacker = outbox_tests::api::Caller { email, name: "Mallory", sub };
        // Two over the attacker's own budget.
        for slot in 0..(limits.invitations_per_organizer as i64 + 2) {
            let made = api.post("/bookings", attacker, &invitation(i as i64 * 100 + slot, &[VICTIM])).await;
            assert_eq!(made.status, 201, "{}", made.body);
        }
    }
    outbox_tests::outbox::poller(&db, mailer.clone(), deployed_poller_config()).drain().await.unwrap();
    let from_attackers = mailer.count() - 1;
    assert_eq!(from_attackers as i32, limits.new_organizers * limits.invitations_per_organizer);

    let got = invite_update_cancel(&db, &api, BOB, &mailer, 3000).await;
    assert_eq!(got, vec![(Notice::Request, 1), (Notice::Request, 2), (Notice::Cancel, 3)], "each exactly once");

    // A newcomer today, after the attackers: capped, and told so.
    let eve = outbox_tests::api::EVE;
    let late = api.post("/bookings", eve, &invitation(4000, &[VICTIM])).await;
    assert_eq!(late.status, 201, "{}", late.body);
    outbox_tests::outbox::poller(&db, mailer.clone(), deployed_poller_config()).drain().await.unwrap();
    let path = format!("/bookings/{}/notifications", late.body["id"].as_str().unwrap());
    let shown = api.get(&path, eve).await;
    assert_eq!(shown.body["notifications"][0]["state"], "capped", "{}", shown.body);
    let client = db.pool.get().await.unwrap();
    let newcomers = shared::notify::pacing::recipient_limit::newcomers_today(&client, VICTIM).await.unwrap();
    assert_eq!(newcomers, limits.new_organizers as i64, "only the first ten accounts got through");
}

/// Medium 3 of issue 52: throwaway accounts made today mail a person at
/// 00:00 UTC and take the day's first contacts of their mailbox (more than
/// the ten a day allows; twice as many). Before V40 every genuine
/// newcomer's invitation that day ended CAPPED, every day the attack ran.
/// Now an organizer with standing, whose invitation first reached someone
/// a week ago or more, is admitted from a pool of its own: its invitation
/// is sent. An account without standing still waits for the next day
/// (the test above), and nothing tells it who else wrote.
#[tokio::test]
async fn throwaway_accounts_at_midnight_cannot_take_an_established_organizers_first_contact() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let limits = deployed_limits();
    let poller = || outbox_tests::outbox::poller(&db, mailer.clone(), deployed_poller_config());
    // Bob has mailed Alice's mailbox for eight days: he has standing.
    assert_eq!(api.post("/bookings", BOB, &invitation(5000, &["alice@example.com"])).await.status, 201);
    poller().drain().await.unwrap();
    for _ in 0..shared::notify::pacing::recipient_limit::STANDING_AFTER_DAYS + 1 {
        outbox_tests::outbox::a_day_passes_for_the_recipient_limits(&db).await;
    }

    // Midnight: twenty accounts made today write to the victim.
    throwaway_accounts_invite_the_victim(&api, limits.new_organizers * 2).await;
    poller().drain().await.unwrap();
    let reached = |to: &str| mailer.deliveries().iter().filter(|d| d.recipient == to).count();
    assert_eq!(reached(VICTIM) as i32, limits.new_organizers, "the throwaway accounts' own pool");

    // Bob's first invitation to the victim is sent; Eve's (no standing) is capped.
    let bob = api.post("/bookings", BOB, &invitation(4000, &[VICTIM])).await;
    let eve = api.post("/bookings", outbox_tests::api::EVE, &invitation(4100, &[VICTIM])).await;
    poller().drain().await.unwrap();
    let path = |made: &outbox_tests::api::TestResponse| {
        format!("/bookings/{}/notifications", made.body["id"].as_str().unwrap())
    };
    let sent = api.get(&path(&bob), BOB).await.body["notifications"][0].clone();
    assert_eq!(sent["state"], "sent", "{sent}");
    let capped = api.get(&path(&eve), outbox_tests::api::EVE).await.body["notifications"][0].clone();
    assert_eq!(capped["state"], "capped", "{capped}");
    assert_eq!(reached(VICTIM) as i32, limits.new_organizers + 1);
    let why: String =
        db.scalar(formatcp!("SELECT last_error FROM booking_notification_sends WHERE status = {CAPPED} LIMIT 1")).await;
    assert!(!why.chars().any(|c| c.is_ascii_digit()), "no count of who else wrote: {why}");
}

/// Medium 2 of issue 52, played for real: once retention had deleted a
/// booking's events, the plan presumed everyone had been told, so a person
/// added to an aged booking was never counted as a first contact, and an
/// aged booking passed every per-person limit. A booking is mailed; a week
/// on, the sweeper's retention (as its role) deletes its events; other
/// accounts take the victim's first contacts of the day; its organizer
/// PATCHes the victim in. The victim's invitation is a first contact like
/// any other, and capped; the attendee told at the start still hears of
/// the change.
#[tokio::test]
async fn people_added_to_a_booking_retention_aged_are_first_contacts_like_any_other() {
    use outbox_tests::outbox::{sweeper_config, AGE_SENDS_30_DAYS};
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let limits = deployed_limits();
    let poller = || outbox_tests::outbox::poller(&db, mailer.clone(), deployed_poller_config());
    let mallory = outbox_tests::api::Caller { email: "mallory@attacker.example", name: "Mallory", sub: "sub-mallory" };
    let made = api.post("/bookings", mallory, &invitation(7000, &["alice@example.com"])).await;
    assert_eq!(made.status, 201, "{}", made.body);
    let id = made.body["id"].as_str().unwrap().to_string();
    poller().drain().await.unwrap();
    assert_eq!(mailer.count(), 1);

    // A week and more later, retention deletes the booking's events.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute(&format!(
            "UPDATE outbox_events SET completed_at = now() - interval '30 days' WHERE status = {DONE}; \
             UPDATE processed_events SET processed_at = now() - interval '30 days'; {AGE_SENDS_30_DAYS};"
        ))
        .await
        .unwrap();
    let run = shared::relay::sweeper::run(&db.role_pool("outbox_sweeper").await, &sweeper_config(8)).await.unwrap();
    assert_eq!(run.retention.events, 1, "{:?}", run.retention);
    let left: i64 = db.scalar(&format!("SELECT count(*) FROM outbox_events WHERE aggregate_id = '{id}'")).await;
    assert_eq!(left, 0, "the booking's history is gone");

    // Today's first contacts of the victim, taken by other accounts.
    throwaway_accounts_invite_the_victim(&api, limits.new_organizers).await;
    poller().drain().await.unwrap();

    let body = json!({"attendees": [{"email": "alice@example.com", "name": "Alice"}, {"email": VICTIM, "name": "V"}],
                      "version": 1});
    let patched = api.send("PATCH", &format!("/bookings/{id}"), Some(mallory), &[], Some(&body.to_string())).await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    poller().drain().await.unwrap();
    let shown = api.get(&format!("/bookings/{id}/notifications"), mallory).await.body["notifications"].clone();
    let state = |to: &str| {
        shown.as_array().unwrap().iter().find(|n| n["recipient"] == to && n["version"] == 2).map(|n| n["state"].clone())
    };
    assert_eq!(state(VICTIM), Some(json!("capped")), "a first contact, over the day's: {shown}");
    assert_eq!(state("alice@example.com"), Some(json!("sent")), "told at the start, told of the change: {shown}");
}

/// Low 11 of issue 52: a booking whose invitation the victim's limits
/// refused (CAPPED) was still in the victim's own listing: the attacker's
/// bookings filled the listing the limits kept out of their inbox. It is
/// not listed now, until a change of the booking reaches them.
#[tokio::test]
async fn a_booking_whose_invitation_was_capped_is_not_in_its_recipients_listing() {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = std::sync::Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let limits = deployed_limits();
    let poller = || outbox_tests::outbox::poller(&db, mailer.clone(), deployed_poller_config());
    throwaway_accounts_invite_the_victim(&api, limits.new_organizers + 1).await;
    poller().drain().await.unwrap();
    let victim = outbox_tests::api::Caller { email: VICTIM, name: "Victim", sub: "sub-victim" };
    let listed = |body: &Value| body["bookings"].as_array().unwrap().len() as i32;
    let page = api.get("/bookings?role=attendee", victim).await;
    assert_eq!(listed(&page.body), limits.new_organizers, "the one capped is not listed: {}", page.body);

    // The next day the capped one's organizer (whichever the pollers
    // admitted last) changes it: it reaches the victim, and is listed.
    outbox_tests::outbox::a_day_passes_for_the_recipient_limits(&db).await;
    let (theirs, sub, email): (String, String, String) = {
        let client = db.pool.get().await.unwrap();
        let row = client
            .query_one(
                formatcp!(
                    "SELECT b.id::text, b.organizer_sub, b.organizer_email FROM booking_notification_sends s \
                   JOIN bookings b ON b.id = s.booking_id WHERE s.status = {CAPPED}"
                ),
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let organizer = outbox_tests::api::Caller { email: &email, name: "Mallory", sub: &sub };
    let body = json!({"title": "Sync, again", "version": 1}).to_string();
    let path = format!("/bookings/{theirs}");
    assert_eq!(api.send("PATCH", &path, Some(organizer), &[], Some(&body)).await.status, 200);
    poller().drain().await.unwrap();
    let page = api.get("/bookings?role=attendee", victim).await;
    assert_eq!(listed(&page.body), limits.new_organizers + 1, "{}", page.body);
}

/// Medium 5 of issue 52: every limit was per account, so accounts made by
/// the dozen each mailed their own daily allowance from the stack's
/// domain. Together, accounts in their first week now share one daily
/// allowance (here 5 recipients): the third new account's booking is
/// refused (429, nothing written), and an established account, or a
/// cancellation, is never refused by it.
#[tokio::test]
async fn new_accounts_together_stay_within_the_stacks_daily_allowance() {
    let db = TestDb::create().await;
    let limits = shared::booking::limits::Limits { new_accounts_recipients_per_day: 5, ..Default::default() };
    let api = TestApi::with(&db, Faults::none(), ApiConfig { limits, ..test_config() });
    let two = ["a@example.com", "b@example.com"];
    let mut made = Vec::new();
    for i in 0..3 {
        let (email, sub) = (format!("new{i}@catchall.example"), format!("sub-new-{i}"));
        let new = outbox_tests::api::Caller { email: &email, name: "New", sub: &sub };
        made.push(api.post("/bookings", new, &invitation(i as i64, &two)).await);
    }
    assert_eq!((made[0].status, made[1].status), (201, 201));
    assert_limited(&made[2], "accounts less than 7 days old may together notify 5 recipients per day here");
    let bookings: i64 = db.scalar("SELECT count(*) FROM bookings").await;
    assert_eq!(bookings, 2, "the refused wrote nothing");

    // Bob's first booking was a week ago: established, never counted.
    db.pool
        .get()
        .await
        .unwrap()
        .batch_execute("INSERT INTO organizer_accounts VALUES ('sub:sub-bob', current_date - 8)")
        .await
        .unwrap();
    assert_eq!(api.post("/bookings", BOB, &invitation(10, &two)).await.status, 201);
    // A new account can still call its meeting off.
    let new0 = outbox_tests::api::Caller { email: "new0@catchall.example", name: "New", sub: "sub-new-0" };
    let path = format!("/bookings/{}/cancel", made[0].body["id"].as_str().unwrap());
    assert_eq!(api.post(&path, new0, &json!({})).await.status, 200);
}

/// One organizer invites one person six times under six spellings of one
/// Gmail mailbox, from two spellings of their own: one organizer, one
/// mailbox. The pair's budget is mailed; the rest are recorded CAPPED (not
/// sent, not retried: their events are DONE), and everyone else invited
/// beside them is mailed.
#[tokio::test]
async fn one_organizer_under_many_spellings_has_one_budget_per_mailbox() {
    use outbox_tests::outbox::{event_counts, person, poller, send_counts, EventStatus, SendStatus};
    use shared::booking::domain::{Caller, NewBooking, TimeRange, Timezone, Title};
    use shared::booking::limits::Limits;
    use shared::booking::service::BookingService;
    use shared::notify::mailer::recording::RecordingMailer;
    use shared::notify::pacing::recipient_limit::{self, RecipientLimits};
    use std::sync::Arc;

    let db = TestDb::create().await;
    let service = BookingService::new(db.pool.clone(), Faults::none(), Limits::default());
    let spellings = [
        "victim@gmail.com",
        "Victim+1@gmail.com",
        "v.ictim@gmail.com",
        "victim@googlemail.com",
        "vic.tim+x@gmail.com",
        "VICTIM@gmail.com",
    ];
    for (i, spelling) in spellings.iter().enumerate() {
        let organizer = Caller {
            person: person(if i % 2 == 0 { "bob.smith@gmail.com" } else { "bobsmith+work@gmail.com" }),
            subject: Some(format!("sub-{}", i % 2)),
        };
        let start =
            shared::booking::domain::parse_instant("2031-03-03T09:00:00Z").unwrap() + chrono::Duration::hours(i as i64);
        let new = NewBooking {
            title: Title::parse("Sync").unwrap(),
            description: None,
            location: None,
            timezone: Timezone::parse("UTC").unwrap(),
            range: TimeRange::new(start, start + chrono::Duration::minutes(30)).unwrap(),
            attendees: vec![person(spelling), person(&format!("bystander{i}@example.com"))],
            reminders: Default::default(),
            organizer_locale: None,
            guest_list: Default::default(),
        };
        service.create(&organizer, new, None).await.unwrap();
    }
    let mailer = Arc::new(RecordingMailer::new());
    let mut config = shared::relay::PollerConfig::for_tests("w");
    config.recipient_limits = RecipientLimits { invitations_per_organizer: 4, new_organizers: 10 };
    poller(&db, mailer.clone(), config).drain().await.unwrap();

    let to_victim = mailer.deliveries().iter().filter(|d| !d.recipient.starts_with("bystander")).count();
    assert_eq!(to_victim, 4, "the pair's budget, whatever the spellings");
    let to_bystanders = mailer.deliveries().iter().filter(|d| d.recipient.starts_with("bystander")).count();
    assert_eq!(to_bystanders, 6, "everyone else is mailed");
    assert_eq!(send_counts(&db).await[&SendStatus::Capped], 2);
    assert!(event_counts(&db).await.iter().all(|(s, n)| *s == EventStatus::Done || *n == 0), "nothing is retried");
    let client = db.pool.get().await.unwrap();
    let counted = recipient_limit::today(&client, "victim@gmail.com", "bobsmith@gmail.com").await.unwrap();
    assert_eq!(counted, 6, "the refused count too");
    assert_eq!(recipient_limit::newcomers_today(&client, "victim@gmail.com").await.unwrap(), 1);
}

/// An invitation that is certainly not made (a known failure releases its
/// claim) gives its count back: a retry is not a second invitation.
#[tokio::test]
async fn a_released_send_gives_its_count_back() {
    use outbox_tests::outbox::{create_booking, poller};
    use shared::notify::mailer::recording::RecordingMailer;
    use shared::notify::mailer::SendOutcome;
    use shared::notify::pacing::recipient_limit::{self, RecipientLimits};
    use shared::relay::PollerConfig;
    use std::sync::Arc;

    let db = TestDb::create().await;
    let booking = create_booking(&db, 1, &["carol@example.com"]).await;
    let mailer = Arc::new(RecordingMailer::new());
    mailer.script("carol@example.com", SendOutcome::NotSent { reason: "connection refused".into() }, 3);
    let mut config = PollerConfig::for_tests("w");
    config.recipient_limits = RecipientLimits { invitations_per_organizer: 1, new_organizers: 1 };
    let p = poller(&db, mailer.clone(), config);
    for _ in 0..4 {
        p.drain().await.unwrap();
    }
    assert_eq!(mailer.count(), 1, "three refusals, then the one invitation the limit allows");
    let client = db.pool.get().await.unwrap();
    let organizer = booking.organizer.email.mailbox();
    assert_eq!(recipient_limit::today(&client, "carol@example.com", &organizer).await.unwrap(), 1);
}

/// Twenty pollers take twenty first contacts of one mailbox at once, and
/// one organizer's invitations from ten at once: exactly the limits pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pollers_never_pass_a_recipient_limit() {
    use shared::notify::pacing::recipient_limit::{take, Invitation, RecipientLimits, Verdict};
    let db = TestDb::create().await;
    let limits = RecipientLimits { invitations_per_organizer: 3, new_organizers: 5 };
    let mut tasks = Vec::new();
    for i in 0..30 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            // 0..20: twenty newcomers; 20..30: one organizer (after its first contact below).
            let organizer = if i < 20 { format!("o{i}@example.com") } else { "known@example.com".into() };
            let invitation = Invitation { mailbox: VICTIM.into(), organizer };
            take(&pool.get().await.unwrap(), &[invitation], limits).await.unwrap()[0]
        }));
        if i == 19 {
            // The known organizer met the victim yesterday.
            let client = db.pool.get().await.unwrap();
            client
                .execute(
                    "INSERT INTO mailbox_organizers SELECT $1, 'known@example.com', d - 2, d - 1, 9 \
                       FROM (SELECT (now() AT TIME ZONE 'UTC')::date AS d) t",
                    &[&VICTIM],
                )
                .await
                .unwrap();
        }
    }
    let mut verdicts = Vec::new();
    for t in tasks {
        verdicts.push(t.await.unwrap());
    }
    let sent = |range: std::ops::Range<usize>| verdicts[range].iter().filter(|v| **v == Verdict::Send).count();
    assert_eq!(sent(0..20), 5, "{verdicts:?}");
    assert_eq!(sent(20..30), 3, "{verdicts:?}");
    assert!(verdicts[20..].iter().all(|v| *v != Verdict::TooManyNewcomers), "a known organizer is never a newcomer");
}

/// Eight pollers each count a batch of first contacts with the same five
/// mailboxes, listed in a different order by each: none waits on another
/// in turn (no deadlock), and each mailbox admits exactly its limit of
/// newcomers, each with both of its invitations.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_over_shared_mailboxes_admit_exactly_the_limit() {
    use shared::notify::pacing::recipient_limit::{newcomers_today, take, Invitation, RecipientLimits, Verdict};
    let db = TestDb::create().await;
    let limits = RecipientLimits { invitations_per_organizer: 5, new_organizers: 3 };
    let mailbox = |m: usize| format!("m{m}@example.com");
    let mut tasks = Vec::new();
    for poller in 0..8 {
        let pool = db.pool.clone();
        tasks.push(tokio::spawn(async move {
            let organizer = format!("o{poller}@example.com");
            let batch: Vec<Invitation> = (0..10)
                .map(|k| Invitation { mailbox: mailbox((k + poller) % 5), organizer: organizer.clone() })
                .collect();
            take(&pool.get().await.unwrap(), &batch, limits).await.unwrap()
        }));
    }
    let mut sent = vec![0; 5];
    for (poller, t) in tasks.into_iter().enumerate() {
        for (k, verdict) in t.await.unwrap().into_iter().enumerate() {
            assert_ne!(verdict, Verdict::OverOrganizerBudget, "two invitations are within a budget of 5");
            if verdict == Verdict::Send {
                sent[(k + poller) % 5] += 1;
            }
        }
    }
    let client = db.pool.get().await.unwrap();
    for (m, sent) in sent.into_iter().enumerate() {
        assert_eq!(sent, 6, "three newcomers of mailbox {m}, two invitations each");
        assert_eq!(newcomers_today(&client, &mailbox(m)).await.unwrap(), 3);
    }
}

/// Under an isolation whose snapshot predates the mailbox's lock, a count
/// could miss a contact committed meanwhile: the function refuses it, and
/// counts nothing.
#[tokio::test]
async fn counting_invitations_is_refused_outside_read_committed() {
    use shared::notify::pacing::recipient_limit::{newcomers_today, take, Invitation, RecipientLimits};
    let db = TestDb::create().await;
    let mut client = db.pool.get().await.unwrap();
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    let invitation = Invitation { mailbox: VICTIM.into(), organizer: "o@example.com".into() };
    let err = take(&tx, &[invitation], RecipientLimits { invitations_per_organizer: 3, new_organizers: 5 })
        .await
        .expect_err("a snapshot older than the lock is refused");
    assert!(err.to_string().contains("READ COMMITTED"), "{err}");
    drop(tx);
    assert_eq!(newcomers_today(&client, VICTIM).await.unwrap(), 0);
}

/// A meeting at `hour`:00 UTC `days` ahead, for one attendee, with
/// reminders one and two hours ahead (both due that same day).
fn reminded(days: i64, hour: u32) -> Value {
    let day = (chrono::Utc::now() + chrono::Duration::days(days)).date_naive();
    let start = day.and_hms_opt(hour, 0, 0).unwrap().and_utc();
    json!({
        "title": "Sync",
        "start": start.to_rfc3339(),
        "end": (start + chrono::Duration::minutes(30)).to_rfc3339(),
        "timezone": "UTC",
        "attendees": [{"email": "pat@example.com", "name": "Pat"}],
        "reminders": ["PT1H", "PT2H"],
    })
}

/// Issue 52, Medium 4: reminders were charged to the day they were
/// written, so an organizer writing its allowance every day for weeks could
/// point all of it at one instant. Each reminder is now charged to the day
/// it is sent: that day's allowance bounds them, whenever they were written,
/// and today's holds only today's mail.
#[tokio::test]
async fn reminders_pointed_at_one_day_are_charged_to_that_day_not_the_day_written() {
    let db = TestDb::create().await;
    let api = limited(&db, 50, 6, 10);
    // Three bookings three days ahead: today 3 invitations, that day 6
    // reminders (charged to today, the second booking would be refused).
    for hour in 9..12 {
        let resp = api.post("/bookings", BOB, &reminded(3, hour)).await;
        assert_eq!(resp.status, 201, "{}", resp.body);
    }
    let usage = |day: i64| {
        format!(
            "SELECT coalesce(sum(recipients), 0)::bigint FROM organizer_daily_usage \
             WHERE day = (now() AT TIME ZONE 'UTC')::date + {day}"
        )
    };
    assert_eq!(db.scalar::<i64>(&usage(0)).await, 3, "today: the invitations");
    assert_eq!(db.scalar::<i64>(&usage(3)).await, 6, "the day they are sent: the reminders");
    // A fourth aimed at that day: refused, nothing written, and no
    // Retry-After (waiting does not empty a day ahead).
    let events = db.count("outbox_events").await;
    let refused = api.post("/bookings", BOB, &reminded(3, 12)).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.body["type"], outbox_tests::api::problem_type("limit-exceeded"));
    let detail = refused.body["detail"].as_str().unwrap();
    assert!(detail.contains("each reminder on the day it is sent"), "{detail}");
    assert!(refused.header("retry-after").is_none(), "a day ahead is not emptied by waiting");
    assert_eq!(db.count("outbox_events").await, events, "the refused one wrote nothing");
    assert_eq!(db.scalar::<i64>(&usage(3)).await, 6);
    // The same request a day later fits: today has room, and so has that day.
    let resp = api.post("/bookings", BOB, &reminded(4, 9)).await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    // Moving a meeting onto the full day charges its reminders there.
    let path = format!("/bookings/{}", resp.body["id"].as_str().unwrap());
    let moved = reminded(3, 13);
    let body = json!({"start": moved["start"], "end": moved["end"], "version": 1});
    let refused = api.send("PATCH", &path, Some(BOB), &[], Some(&body.to_string())).await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(api.get(&path, BOB).await.body["version"], 1, "the refused change changed nothing");
}
