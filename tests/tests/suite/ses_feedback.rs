//! SES's own event stream, fed to the feedback handler in the shapes AWS
//! documents for SES event publishing (EventBridge envelope around the SES
//! event record), on a real Postgres.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::FAILED;
use std::sync::Arc;

use outbox_tests::outbox::*;
use outbox_tests::ses_events::*;
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::booking::events::Notice;
use shared::notify::evidence::feedback::{self, Recorded};
use shared::notify::evidence::intake;
use shared::notify::evidence::intake::Handled;
use shared::notify::evidence::ses_event::Refusal;
use shared::notify::evidence::suppression;
use shared::notify::mailer::SendOutcome;
use shared::notify::sends::ConfirmedBy;
use shared::relay::PollerConfig;
use uuid::Uuid;

const CAROL: &str = "carol@example.com";

async fn handle(db: &TestDb, event: &Value) -> Handled {
    intake::handle(&db.pool, &origin(), event).await.unwrap()
}

async fn send_state(db: &TestDb, claim: Uuid) -> (SendStatus, Option<ConfirmedBy>) {
    let client = db.pool.get().await.unwrap();
    let row = client
        .query_one("SELECT status, confirmed_by FROM booking_notification_sends WHERE id = $1", &[&claim])
        .await
        .unwrap();
    let confirmed_by = row.get::<_, Option<&str>>(1).map(|c| c.parse().unwrap());
    (SendStatus::from_row(&row, "status").unwrap(), confirmed_by)
}

async fn feedback_kinds(db: &TestDb, claim: Uuid) -> Vec<String> {
    let client = db.pool.get().await.unwrap();
    feedback::of_send(&client, claim)
        .await
        .unwrap()
        .into_iter()
        .map(|(k, s, _)| format!("{k}{}", s.map(|s| format!(" {s}")).unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn dropped_connection_send_is_confirmed_by_its_ses_send_event() {
    let db = TestDb::create().await;
    let (claim, _) =
        one_send(&db, ALICE, Some(SendOutcome::Unknown { reason: "connection dropped after the request".into() }))
            .await;
    assert_eq!(send_state(&db, claim).await, (SendStatus::Unknown, None));
    let handled = handle(&db, &send_event(claim)).await;
    assert_eq!(handled, Handled::Recorded(Recorded::Recorded { confirmed: true, suppressed: 0 }));
    assert_eq!(send_state(&db, claim).await, (SendStatus::Sent, Some(ConfirmedBy::SesEvent)));
    let client = db.pool.get().await.unwrap();
    assert!(
        shared::notify::evidence::resend::list(&client, std::time::Duration::from_secs(900), false, 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing left for an operator to judge"
    );
}

#[tokio::test]
async fn a_delivery_before_its_send_confirms_and_the_late_send_changes_nothing() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, Some(SendOutcome::Unknown { reason: "read timeout".into() })).await;
    assert_eq!(
        handle(&db, &delivery_event(claim)).await,
        Handled::Recorded(Recorded::Recorded { confirmed: true, suppressed: 0 })
    );
    assert_eq!(
        handle(&db, &send_event(claim)).await,
        Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 0 })
    );
    assert_eq!(handle(&db, &delivery_event(claim)).await, Handled::Recorded(Recorded::Duplicate), "at least once");
    assert_eq!(send_state(&db, claim).await, (SendStatus::Sent, Some(ConfirmedBy::SesEvent)));
    assert_eq!(feedback_kinds(&db, claim).await, vec!["Send", "Delivery"]);
}

#[tokio::test]
async fn a_confirmed_send_keeps_the_message_id_the_poller_recorded() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    assert_eq!(send_state(&db, claim).await, (SendStatus::Sent, None));
    let send = with_message_id(send_event(claim), &message_id_of(&db, claim).await);
    assert_eq!(handle(&db, &send).await, Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 0 }));
    assert_eq!(send_state(&db, claim).await, (SendStatus::Sent, None), "already settled by the poller");
}

#[tokio::test]
async fn the_same_permanent_bounce_twice_is_recorded_once_and_the_address_is_never_mailed_again() {
    let db = TestDb::create().await;
    let (claim, mailer) = one_send(&db, ALICE, None).await;
    let bounce = with_message_id(bounce_event(claim, "Permanent", "General"), &message_id_of(&db, claim).await);
    assert_eq!(handle(&db, &bounce).await, Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 }));
    assert_eq!(handle(&db, &bounce).await, Handled::Recorded(Recorded::Duplicate));
    assert_eq!(feedback_kinds(&db, claim).await, vec!["Bounce Permanent/General"]);
    // A later invitation to Alice (and Carol) on another booking.
    let before = mailer.count();
    create_booking(&db, 2, &[ALICE, CAROL]).await;
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let new: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(new, vec![CAROL], "no call to SES for the suppressed address");
    let client = db.pool.get().await.unwrap();
    let failed: String = client
        .query_one(
            formatcp!(
                "SELECT last_error FROM booking_notification_sends WHERE recipient_email = $1 AND status = {FAILED}"
            ),
            &[&ALICE],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(failed, "suppressed: the address bounced (Permanent/General) earlier");
}

#[tokio::test]
async fn a_complaint_suppresses_the_address_and_a_transient_bounce_does_not() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    let id = message_id_of(&db, claim).await;
    let transient = with_message_id(bounce_event(claim, "Transient", "MailboxFull"), &id);
    assert_eq!(
        handle(&db, &transient).await,
        Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 0 })
    );
    let client = db.pool.get().await.unwrap();
    assert_eq!(suppression::suppression(&client, ALICE).await.unwrap(), None);
    let complaint = complaint_event(claim, &[ALICE]);
    let complaint = with_message_id(complaint, &id);
    assert_eq!(
        handle(&db, &complaint).await,
        Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 })
    );
    assert_eq!(suppression::suppression(&client, ALICE).await.unwrap().as_deref(), Some("complained"));
    assert_eq!(feedback_kinds(&db, claim).await, vec!["Bounce Transient/MailboxFull", "Complaint abuse"]);
}

#[tokio::test]
async fn delivery_delay_reject_and_rendering_failure_are_recorded_per_send() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, Some(SendOutcome::Unknown { reason: "read timeout".into() })).await;
    let delay = ses_event(
        "DeliveryDelay",
        Some(claim),
        Some(json!({"timestamp": "2026-11-30T12:05:00.000Z", "delayType": "TransientCommunicationFailure",
                   "expirationTime": "2026-12-01T12:00:00.000Z",
                   "delayedRecipients": [{"emailAddress": ALICE, "status": "4.4.1", "diagnosticCode": "smtp; 421 4.4.1 Unable to connect"}]})),
    );
    assert_eq!(handle(&db, &delay).await, Handled::Recorded(Recorded::Recorded { confirmed: true, suppressed: 0 }));
    assert_eq!(
        send_state(&db, claim).await,
        (SendStatus::Sent, Some(ConfirmedBy::SesEvent)),
        "a delay proves acceptance"
    );
    // A rejection after that is recorded, and changes nothing the send is
    // (a rejection of an ambiguous send settles it FAILED:
    // unknown_reconciliation covers it).
    let reject = ses_event("Reject", Some(claim), Some(json!({"reason": "Bad content"})));
    assert_eq!(handle(&db, &reject).await, Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 0 }));
    let failure = ses_event(
        "Rendering Failure",
        Some(claim),
        Some(json!({"errorMessage": "Attribute 'name' is not present", "templateName": "T"})),
    );
    assert!(matches!(handle(&db, &failure).await, Handled::Recorded(Recorded::Recorded { confirmed: false, .. })));
    assert_eq!(send_state(&db, claim).await.0, SendStatus::Sent);
    let mut kinds = feedback_kinds(&db, claim).await;
    kinds.sort();
    assert_eq!(kinds, vec!["DeliveryDelay", "Reject", "RenderingFailure"]);
}

#[tokio::test]
async fn events_for_untagged_mail_or_a_deleted_claim_are_acknowledged() {
    let db = TestDb::create().await;
    let untagged = ses_event("Send", None, Some(json!({})));
    assert_eq!(handle(&db, &untagged).await, Handled::Recorded(Recorded::Unmatched));
    assert_eq!(handle(&db, &send_event(Uuid::now_v7())).await, Handled::Recorded(Recorded::Unmatched));
    assert_eq!(db.count("send_feedback").await, 0);
}

/// `detail` in the envelope of this account's SES.
fn from_ses(detail: Value) -> Value {
    let o = origin();
    json!({"version": "0", "source": "aws.ses", "account": o.account, "region": o.region, "detail": detail})
}

#[tokio::test]
async fn malformed_events_are_dropped_with_a_reason_and_never_retried() {
    let db = TestDb::create().await;
    let set = json!({"ses:configuration-set": [CONFIGURATION_SET]});
    let mail = json!({"messageId": "m", "timestamp": "2026-11-30T12:00:00Z", "destination": [ALICE], "tags": set});
    let mut bad_tag = mail.clone();
    bad_tag["tags"]["claim"] = json!(["not-a-uuid"]);
    let mut mixed = from_ses(json!({"eventType": "Send", "mail": mail}));
    mixed["detail-type"] = json!("Email Bounced");
    for (event, why) in [
        (from_ses(json!({"hello": "world"})), "no mail object"),
        (from_ses(json!({"mail": mail})), "no eventType and no detail-type"),
        (from_ses(json!({"eventType": "Open", "mail": mail})), "unhandled eventType"),
        (
            from_ses(json!({"eventType": "Send", "mail": {"messageId": "m", "timestamp": "yesterday", "tags": set}})),
            "timestamp",
        ),
        (from_ses(json!({"eventType": "Send", "mail": bad_tag})), "claim tag"),
        (mixed, "under detail-type of Bounce"),
    ] {
        match handle(&db, &event).await {
            Handled::Refused(Refusal::Malformed(reason)) => {
                assert!(reason.contains(why), "{reason} should mention {why}")
            }
            other => panic!("{event} → {other:?}"),
        }
    }
}

#[tokio::test]
async fn forged_complaint_from_another_account_suppresses_no_one() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    let genuine = with_message_id(complaint_event(claim, &[ALICE]), &message_id_of(&db, claim).await);
    let forged = |field: &str, value: Value| {
        let mut event = genuine.clone();
        event[field] = value;
        event
    };
    let mut other_sender = genuine.clone();
    other_sender["detail"]["mail"]["sendingAccountId"] = json!("999999999999");
    let bare = genuine["detail"].clone();
    refused_as_foreign(
        &db,
        vec![
            (forged("account", json!("999999999999")), "account \"999999999999\""),
            (forged("region", json!("eu-west-1")), "region \"eu-west-1\""),
            (forged("source", json!("my.app")), "source \"my.app\""),
            (other_sender, "mail.sendingAccountId"),
            (bare, "source (none)"),
        ],
    )
    .await;
    // The genuine one still works.
    assert_eq!(handle(&db, &genuine).await, Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 }));
}

/// Each event is refused as not this stack's SES's, naming why, and
/// nothing is recorded or suppressed.
async fn refused_as_foreign(db: &TestDb, cases: Vec<(Value, &str)>) {
    for (event, why) in cases {
        match handle(db, &event).await {
            Handled::Refused(Refusal::Foreign(reason)) => assert!(reason.contains(why), "{reason} should name {why}"),
            other => panic!("{event} → {other:?}"),
        }
    }
    assert_eq!(db.count("suppressed_addresses").await, 0, "no one suppressed");
    assert_eq!(db.count("send_feedback").await, 0, "nothing recorded");
}

#[tokio::test]
async fn a_complaint_listing_other_addresses_suppresses_only_the_claims_recipient() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    let event = complaint_event(claim, &[ALICE, CAROL, "dave@example.com"]);
    let event = with_message_id(event, &message_id_of(&db, claim).await);
    assert_eq!(handle(&db, &event).await, Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 }));
    let client = db.pool.get().await.unwrap();
    let suppressed: Vec<String> =
        suppression::suppressions(&client, 10).await.unwrap().into_iter().map(|s| s.email).collect();
    assert_eq!(suppressed, vec![ALICE]);
}

#[tokio::test]
async fn an_event_about_another_message_confirms_nothing_and_suppresses_no_one() {
    let db = TestDb::create().await;
    // A send that answered: the event must carry the id SES gave it.
    let (sent, _) = one_send(&db, ALICE, None).await;
    let other_message = complaint_event(sent, &[ALICE]);
    assert_eq!(handle(&db, &other_message).await, Handled::Recorded(Recorded::Mismatched));
    // A send that never answered (UNKNOWN): matched on the claim and its
    // recipient; a Send event for a message to someone else proves nothing.
    let db = TestDb::create().await;
    let (unknown, _) = one_send(&db, ALICE, Some(SendOutcome::Unknown { reason: "read timeout".into() })).await;
    let mut elsewhere = send_event(unknown);
    elsewhere["detail"]["mail"]["destination"] = json!([CAROL]);
    assert_eq!(handle(&db, &elsewhere).await, Handled::Recorded(Recorded::Mismatched));
    let mut also_elsewhere = send_event(unknown);
    also_elsewhere["detail"]["mail"]["destination"] = json!([ALICE, CAROL]);
    assert_eq!(handle(&db, &also_elsewhere).await, Handled::Recorded(Recorded::Mismatched));
    assert_eq!(send_state(&db, unknown).await, (SendStatus::Unknown, None), "still for an operator to judge");
    assert_eq!(db.count("send_feedback").await, 0);
    // Its own Send event (display name and case as SES may write them) confirms it.
    let mut own = send_event(unknown);
    own["detail"]["mail"]["destination"] = json!(["Alice <ALICE@example.com>"]);
    assert_eq!(handle(&db, &own).await, Handled::Recorded(Recorded::Recorded { confirmed: true, suppressed: 0 }));
}

#[tokio::test]
async fn an_event_without_an_event_type_is_read_from_its_detail_type() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, Some(SendOutcome::Unknown { reason: "read timeout".into() })).await;
    let mut event = delivery_event(claim);
    event["detail"].as_object_mut().unwrap().remove("eventType");
    assert_eq!(handle(&db, &event).await, Handled::Recorded(Recorded::Recorded { confirmed: true, suppressed: 0 }));
    assert_eq!(feedback_kinds(&db, claim).await, vec!["Delivery"]);
}

/// A mailer whose answer is lost, while SES's Send event arrives first.
struct ConfirmedWhileWaiting {
    pool: deadpool_postgres::Pool,
}

#[async_trait::async_trait]
impl shared::notify::mailer::Mailer for ConfirmedWhileWaiting {
    async fn send(&self, n: &shared::notify::notification::Notification) -> SendOutcome {
        let claim = n.claim.expect("the claim is committed before the call");
        intake::handle(&self.pool, &origin(), &send_event(claim)).await.unwrap();
        SendOutcome::Unknown { reason: "read timeout".into() }
    }

    fn provider(&self) -> shared::notify::sends::SentVia {
        shared::notify::sends::SentVia::Ses
    }
}

#[tokio::test]
async fn a_send_confirmed_by_ses_while_the_mailer_waits_stays_sent() {
    let db = TestDb::create().await;
    create_booking(&db, 1, &[ALICE]).await;
    let mailer = Arc::new(ConfirmedWhileWaiting { pool: db.pool.clone() });
    let p = shared::relay::Poller::new(
        db.pool.clone(),
        mailer,
        shared::fault::Faults::none(),
        PollerConfig::for_tests("w"),
    );
    p.drain().await.unwrap();
    let claim: Uuid = db.scalar("SELECT id FROM booking_notification_sends").await;
    assert_eq!(
        send_state(&db, claim).await,
        (SendStatus::Sent, Some(ConfirmedBy::SesEvent)),
        "the late timeout does not undo it"
    );
}

#[tokio::test]
async fn retention_deletes_what_ses_said_about_a_send_only_once_the_send_is_gone() {
    use outbox_tests::outbox::AGE_SENDS_30_DAYS;
    use shared::relay::{retention, RetentionConfig};
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    let delivered = with_message_id(delivery_event(claim), &message_id_of(&db, claim).await);
    handle(&db, &delivered).await;
    let client = db.pool.get().await.unwrap();
    client.batch_execute("UPDATE send_feedback SET received_at = now() - interval '30 days'").await.unwrap();
    let kept = retention::run(&client, &RetentionConfig::default()).await.unwrap();
    assert_eq!((kept.sends, kept.feedback), (0, 0), "the send still exists: the API shows what SES said");
    assert_eq!(db.count("send_feedback").await, 1);
    client
        .batch_execute(&format!(
            "UPDATE outbox_events SET completed_at = now() - interval '30 days'; \
             UPDATE processed_events SET processed_at = now() - interval '30 days'; {AGE_SENDS_30_DAYS};"
        ))
        .await
        .unwrap();
    let gone = retention::run(&client, &RetentionConfig::default()).await.unwrap();
    assert_eq!((gone.events, gone.sends, gone.feedback), (1, 1, 1), "{gone:?}");
    assert_eq!(db.count("send_feedback").await, 0);
}

/// Low 5 of issue 37: a complaint from one spelling of a mailbox stops
/// every spelling of it (a sub-address, Gmail's dots and googlemail.com),
/// and an operator lifting it lifts them all.
#[tokio::test]
async fn a_complaint_from_one_spelling_suppresses_every_spelling_of_the_mailbox() {
    let db = TestDb::create().await;
    let (claim, mailer) = one_send(&db, "vic.tim@gmail.com", None).await;
    let id = message_id_of(&db, claim).await;
    let complaint = with_message_id(complaint_event(claim, &["vic.tim@gmail.com"]), &id);
    let complaint = to_recipient(complaint, "vic.tim@gmail.com");
    assert_eq!(
        handle(&db, &complaint).await,
        Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 })
    );
    let respelled = ["victim@gmail.com", "victim+news@gmail.com", "v.i.c.t.i.m@googlemail.com"];
    create_booking(&db, 2, &[respelled[0], respelled[1], respelled[2], CAROL]).await;
    let before = mailer.count();
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    let new: Vec<String> = mailer.deliveries()[before..].iter().map(|d| d.recipient.clone()).collect();
    assert_eq!(new, vec![CAROL], "no spelling of the mailbox is mailed");
    let client = db.pool.get().await.unwrap();
    for spelling in respelled {
        assert_eq!(suppression::suppression(&client, spelling).await.unwrap().as_deref(), Some("complained"));
    }
    let lifted = suppression::unsuppress(&client, "VICTIM+x@googlemail.com", "operator").await.unwrap();
    assert_eq!(lifted.map(|s| s.email).as_deref(), Some("vic.tim@gmail.com"));
    assert_eq!(suppression::suppression(&client, "vic.tim@gmail.com").await.unwrap(), None);
}

/// High 1 of issue 52: anyone with a token can invite `victim+x@` at a
/// domain that refuses sub-addresses, and the hard bounce comes back. It
/// suppresses `victim+x@` alone: `victim@`'s invitations, and the
/// cancellation of a meeting she was invited to before, still reach her.
#[tokio::test]
async fn a_bounce_of_a_sub_address_suppresses_that_address_alone() {
    const VICTIM: &str = "victim@example.org";
    const TAGGED: &str = "victim+x@example.org";
    let db = TestDb::create().await;
    let mailer = Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let drain = || async { poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap() };
    let earlier = create_booking(&db, 3, &[VICTIM]).await;
    drain().await;
    // The attack: an invitation to the sub-address, which her domain bounces.
    create_booking(&db, 1, &[TAGGED]).await;
    drain().await;
    let claim: Uuid =
        db.scalar(&format!("SELECT id FROM booking_notification_sends WHERE recipient_email = '{TAGGED}'")).await;
    let bounce = with_message_id(bounce_event(claim, "Permanent", "General"), &message_id_of(&db, claim).await);
    assert_eq!(
        handle(&db, &to_recipient(bounce, TAGGED)).await,
        Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 })
    );
    // A new invitation to both spellings, and the earlier meeting cancelled.
    let before = mailer.count();
    create_booking(&db, 2, &[VICTIM, TAGGED]).await;
    shared::booking::service::BookingService::new(
        db.pool.clone(),
        shared::fault::Faults::none(),
        shared::booking::limits::Limits::UNLIMITED,
    )
    .cancel(&organizer(), earlier.id, None)
    .await
    .unwrap();
    drain().await;
    let mut new: Vec<(String, Notice)> =
        mailer.deliveries()[before..].iter().map(|d| (d.recipient.clone(), d.notice)).collect();
    new.sort_by_key(|(_, notice)| *notice == Notice::Cancel);
    assert_eq!(
        new,
        vec![(VICTIM.to_string(), Notice::Request), (VICTIM.to_string(), Notice::Cancel)],
        "the person is still told; only the address that bounced is not mailed"
    );
    let client = db.pool.get().await.unwrap();
    assert_eq!(suppression::suppression(&client, VICTIM).await.unwrap(), None);
    assert_eq!(
        suppression::suppression(&client, TAGGED).await.unwrap().as_deref(),
        Some("bounced (Permanent/General)")
    );
    // Lifting the person's own address lifts nothing of another's spelling.
    assert!(suppression::unsuppress(&client, VICTIM, "operator").await.unwrap().is_none());
    assert!(suppression::suppression(&client, TAGGED).await.unwrap().is_some());
}

/// A complaint after a bounce of the same address widens its suppression
/// to the person's mailbox: the complaint is the person's own word.
#[tokio::test]
async fn a_complaint_after_a_bounce_of_the_same_address_suppresses_the_mailbox() {
    const SPELLED: &str = "vic.tim+cal@gmail.com";
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, SPELLED, None).await;
    let id = message_id_of(&db, claim).await;
    let bounce = to_recipient(with_message_id(bounce_event(claim, "Permanent", "General"), &id), SPELLED);
    assert_eq!(handle(&db, &bounce).await, Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 }));
    let client = db.pool.get().await.unwrap();
    assert_eq!(
        suppression::suppression(&client, "victim@gmail.com").await.unwrap(),
        None,
        "a bounce: that spelling alone"
    );
    let complaint = to_recipient(with_message_id(complaint_event(claim, &[SPELLED]), &id), SPELLED);
    assert_eq!(
        handle(&db, &complaint).await,
        Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 })
    );
    assert_eq!(
        suppression::suppression(&client, "victim@googlemail.com").await.unwrap().as_deref(),
        Some("complained")
    );
}

/// Low 7 of issue 52: an event is this stack's only if SES tagged it with
/// the stack's configuration set. Another set's mail (another application
/// of the account reusing the `claim` tag, say) confirms, refuses and
/// suppresses nothing here.
#[tokio::test]
async fn an_event_of_another_configuration_set_changes_nothing() {
    let db = TestDb::create().await;
    let (claim, _) = one_send(&db, ALICE, None).await;
    let genuine = with_message_id(complaint_event(claim, &[ALICE]), &message_id_of(&db, claim).await);
    let mut other_set = genuine.clone();
    other_set["detail"]["mail"]["tags"]["ses:configuration-set"] = json!(["another-app"]);
    let mut no_set = genuine.clone();
    no_set["detail"]["mail"]["tags"].as_object_mut().unwrap().remove("ses:configuration-set");
    refused_as_foreign(
        &db,
        vec![(other_set, "configuration set \"another-app\""), (no_set, "configuration set (none)")],
    )
    .await;
    assert_eq!(handle(&db, &genuine).await, Handled::Recorded(Recorded::Recorded { confirmed: false, suppressed: 1 }));
}

/// Medium 5 of issue 52: an account whose mail draws complaints kept
/// mailing from the stack's verified domain until SES suspended it for
/// everyone. Now the third complaint (about distinct sends) pauses its
/// sending: an invitation it had queued is not sent (CAPPED, saying why),
/// its new bookings and changes are refused, and its cancellation still
/// reaches the person. An operator sees why and lifts it.
#[tokio::test]
async fn three_complaints_pause_an_organizers_sending_but_never_their_cancellations() {
    use outbox_tests::api::{Caller, TestApi};
    use shared::notify::pacing::pauses;
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let drain = || poller(&db, mailer.clone(), PollerConfig::for_tests("w"));
    let mallory = Caller { email: "mallory@example.net", name: "Mallory", sub: "sub-mallory" };
    let booking = |day: u32, to: &str| {
        json!({"title": "Sync", "start": format!("2030-01-{day:02}T09:00:00Z"),
               "end": format!("2030-01-{day:02}T09:30:00Z"), "timezone": "UTC",
               "attendees": [{"email": to, "name": "Someone"}]})
    };
    let people = ["p1@example.com", "p2@example.com", "p3@example.com", "p4@example.com"];
    let mut paths = Vec::new();
    for (day, to) in people.iter().enumerate() {
        let made = api.post("/bookings", mallory, &booking(day as u32 + 1, to)).await;
        assert_eq!(made.status, 201, "{}", made.body);
        paths.push(format!("/bookings/{}", made.body["id"].as_str().unwrap()));
    }
    drain().drain().await.unwrap();
    complain(&db, people[0]).await;
    complain(&db, people[0]).await; // the same complaint, twice: one
    complain(&db, people[1]).await;
    let client = db.pool.get().await.unwrap();
    assert!(pauses::paused(&client).await.unwrap().is_empty(), "two complaints: not yet");
    // Queued before the third complaint, sent after it.
    let queued = api.post("/bookings", mallory, &booking(20, "p5@example.com")).await;
    assert_eq!(queued.status, 201, "{}", queued.body);
    complain(&db, people[2]).await;
    let paused = pauses::paused(&client).await.unwrap();
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!((paused[0].organizer_email.as_str(), paused[0].complaints), ("mallory@example.net", 3));

    drain().drain().await.unwrap();
    let why: String = db
        .scalar(
            "SELECT status || ' ' || coalesce(last_error, '-') FROM booking_notification_sends \
                  WHERE recipient_email = 'p5@example.com'",
        )
        .await;
    assert!(why.starts_with("CAPPED paused: 3 complaints"), "{why}");
    let refused = api.post("/bookings", mallory, &booking(21, "p6@example.com")).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body["type"].as_str().unwrap().ends_with("/organizer-paused"), "{}", refused.body);
    let body = json!({"title": "Renamed", "version": 1}).to_string();
    assert_eq!(api.send("PATCH", &paths[3], Some(mallory), &[], Some(&body)).await.status, 403);
    assert_eq!(api.post(&format!("{}/cancel", paths[3]), mallory, &json!({})).await.status, 200);
    drain().drain().await.unwrap();
    let to_p4: Vec<Notice> =
        mailer.deliveries().iter().filter(|d| d.recipient == people[3]).map(|d| d.notice).collect();
    assert_eq!(to_p4, vec![Notice::Request, Notice::Cancel], "the cancellation still reaches them");

    assert!(pauses::lift(&client, "mallory@example.net", "operator").await.unwrap());
    assert!(pauses::paused(&client).await.unwrap().is_empty());
    assert_eq!(api.post("/bookings", mallory, &booking(22, "p6@example.com")).await.status, 201);
}

/// A complaint from `to` about their send.
async fn complain(db: &TestDb, to: &str) {
    complain_as(db, to, "abuse", None).await
}

/// A complaint event of `feedback` type (and SES's `subtype`) from `to`.
async fn complain_as(db: &TestDb, to: &str, feedback: &str, subtype: Option<&str>) {
    let claim: Uuid =
        db.scalar(&format!("SELECT id FROM booking_notification_sends WHERE recipient_email = '{to}'")).await;
    let id = message_id_of(db, claim).await;
    let mut event = with_message_id(to_recipient(complaint_event(claim, &[ALICE]), to), &id);
    event["detail"]["complaint"]["complaintFeedbackType"] = json!(feedback);
    if let Some(subtype) = subtype {
        event["detail"]["complaint"]["complaintSubType"] = json!(subtype);
    }
    assert!(matches!(handle(db, &event).await, Handled::Recorded(_)));
}

/// Issue 65: SES's complaint events carry a feedback type and a subtype. A
/// `not-spam` report is the person saying the opposite of a complaint: it
/// suppresses no one and counts toward no organizer's pause. A complaint
/// with the subtype `OnAccountSuppressionList` is about a message SES never
/// sent (the address was on the account's list): the address stays
/// suppressed here too, but no one complained of this organizer's mail.
#[tokio::test]
async fn a_not_spam_report_or_a_complaint_about_mail_ses_never_sent_pauses_no_organizer() {
    use outbox_tests::api::{Caller, TestApi};
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    let mailer = Arc::new(shared::notify::mailer::recording::RecordingMailer::new());
    let mallory = Caller { email: "mallory@example.net", name: "Mallory", sub: "sub-mallory" };
    for (day, to) in ["p1@example.com", "p2@example.com", "p3@example.com"].iter().enumerate() {
        let body = json!({"title": "Sync", "start": format!("2030-01-{:02}T09:00:00Z", day + 1),
                          "end": format!("2030-01-{:02}T09:30:00Z", day + 1), "timezone": "UTC",
                          "attendees": [{"email": to, "name": "Someone"}]});
        assert_eq!(api.post("/bookings", mallory, &body).await.status, 201);
    }
    poller(&db, mailer.clone(), PollerConfig::for_tests("w")).drain().await.unwrap();
    complain_as(&db, "p1@example.com", "not-spam", None).await;
    complain_as(&db, "p2@example.com", "abuse", Some("OnAccountSuppressionList")).await;
    complain_as(&db, "p3@example.com", "abuse", None).await;
    let counted: i32 =
        db.scalar("SELECT complaints FROM organizer_pauses WHERE organizer_email = 'mallory@example.net'").await;
    assert_eq!(counted, 1, "only p3's complaint counts");
    let suppressed: String = db.scalar("SELECT string_agg(email, ',' ORDER BY email) FROM suppressed_addresses").await;
    assert_eq!(suppressed, "p2@example.com,p3@example.com", "not-spam suppresses no one");
    let recorded: String = db
        .scalar("SELECT string_agg(coalesce(subtype, '-'), ',' ORDER BY subtype) FROM send_feedback WHERE kind = 'Complaint'")
        .await;
    assert_eq!(recorded, "OnAccountSuppressionList,abuse,not-spam");
}
