//! Each attendee's own time zone and language (issue 40): the subject and
//! the text of their messages show the meeting's time where they are, in
//! their language (theirs, else the organizer's, else `DEFAULT_LOCALE`), the
//! iCalendar part is the same for everyone, a change of people's own zone or
//! language alone is no news (no mail), and one recipient's message is the
//! same bytes for every claim but the claim's header. Messages go through
//! the real SMTP mailer to aiosmtpd and are read back by Python's email
//! parser.

use const_format::formatcp;
use shared::notify::sends::status::send_sql::UNKNOWN;
use std::sync::Arc;

use outbox_tests::api::{TestApi, BOB};
use outbox_tests::smtp::{Options, SmtpServer};
use outbox_tests::TestDb;
use serde_json::{json, Value};
use shared::api::config::ApiConfig;
use shared::booking::domain::Language;
use shared::fault::Faults;
use shared::notify::mailer::smtp::SmtpMailer;
use shared::relay::{Poller, PollerConfig};

async fn drain(db: &TestDb, server: &SmtpServer) {
    let mailer = Arc::new(SmtpMailer::new(server.config()).unwrap());
    Poller::new(db.pool.clone(), mailer, Faults::none(), PollerConfig::for_tests("zones")).drain().await.unwrap();
}

/// A mail server, a database and the API on it.
async fn scene() -> (SmtpServer, TestDb, TestApi) {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    (server, db, api)
}

/// Bob's "Planning" on 7 January 2030 at 10:00 in Paris for `people`:
/// its id.
async fn planning(api: &TestApi, people: Value) -> String {
    let created = api.post("/bookings", BOB, &booking("Planning", "2030-01-07T09:00:00Z", people)).await;
    assert_eq!(created.status, 201, "{}", created.body);
    created.body["id"].as_str().unwrap().to_string()
}

/// The parsed messages to `to`, in order.
fn to(server: &SmtpServer, to: &str) -> Vec<Value> {
    server.parsed().into_iter().filter(|m| m["to_addresses"][0] == to).collect()
}

/// A booking in Paris for an hour from `start`, with [`attendees`] unless
/// given others.
fn booking(title: &str, start: &str, people: Value) -> Value {
    let end = (chrono::DateTime::parse_from_rfc3339(start).unwrap() + chrono::Duration::hours(1)).to_rfc3339();
    json!({"title": title, "start": start, "end": end, "timezone": "Europe/Paris", "attendees": people})
}

fn attendees() -> Value {
    json!([
        {"email": "paris@example.com", "name": "Amélie"},
        {"email": "tokyo@example.com", "name": "山田 太郎", "timezone": "Asia/Tokyo"},
        {"email": "newyork@example.com", "name": "سارة", "timezone": "America/New_York"},
    ])
}

#[tokio::test]
async fn each_attendee_reads_the_time_in_their_own_zone_and_the_calendar_part_is_the_same() {
    let (server, db, api) = scene().await;
    // 7 January 2030, 09:00 UTC: 10:00 in Paris, 18:00 in Tokyo, 04:00 in New York.
    let body = booking("設計レビュー · مراجعة", "2030-01-07T09:00:00Z", attendees());
    let created = api.post("/bookings", BOB, &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["attendees"][1]["timezone"], "Asia/Tokyo");
    assert!(created.body["attendees"][0].get("timezone").is_none(), "none asked: none shown");
    drain(&db, &server).await;
    let (paris, tokyo, newyork) =
        (to(&server, "paris@example.com"), to(&server, "tokyo@example.com"), to(&server, "newyork@example.com"));
    assert!(paris[0]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 10:00 (CET)"), "{}", paris[0]["subject"]);
    assert!(tokyo[0]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 18:00 (JST)"), "{}", tokyo[0]["subject"]);
    assert!(
        newyork[0]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 04:00 (EST)"),
        "{}",
        newyork[0]["subject"]
    );
    assert!(
        tokyo[0]["text"]
            .as_str()
            .unwrap()
            .contains("When: Monday, January 7, 2030, 6:00\u{202f}PM – 7:00\u{202f}PM (GMT+9)"),
        "{}",
        tokyo[0]["text"]
    );
    for m in [&paris[0], &tokyo[0], &newyork[0]] {
        assert!(m["subject"].as_str().unwrap().contains("設計レビュー · مراجعة"), "{}", m["subject"]);
        assert_eq!(m["calendar"], paris[0]["calendar"], "one calendar object for everyone");
        assert_eq!(m["defects"], json!([]));
    }
    let names: Vec<&str> =
        paris[0]["calendar"]["ATTENDEES"].as_array().unwrap().iter().map(|a| a["CN"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["Amélie", "山田 太郎", "سارة"], "names survive whole");
}

/// Paris moves its clocks on 31 March 2030, New York on 10 March: between
/// them a meeting at 13:00 UTC is 09:00 in New York (EDT) and 14:00 in
/// Paris (still CET), five hours apart instead of six.
#[tokio::test]
async fn a_daylight_saving_boundary_between_the_organizers_zone_and_an_attendees() {
    let (server, db, api) = scene().await;
    let body = json!({
        "title": "Planning", "start": "2030-03-20T13:00:00Z", "end": "2030-03-20T13:30:00Z",
        "timezone": "Europe/Paris", "attendees": attendees(),
    });
    assert_eq!(api.post("/bookings", BOB, &body).await.status, 201);
    drain(&db, &server).await;
    let subject = |who: &str| to(&server, who)[0]["subject"].as_str().unwrap().to_string();
    assert!(subject("paris@example.com").ends_with("Wed 20 Mar 2030 14:00 (CET)"), "{}", subject("paris@example.com"));
    assert!(
        subject("newyork@example.com").ends_with("Wed 20 Mar 2030 09:00 (EDT)"),
        "{}",
        subject("newyork@example.com")
    );
}

/// A change of an attendee's own zone alone is no news: a new version, no
/// mail; their next message reads in the new zone.
#[tokio::test]
async fn changing_only_an_attendees_zone_mails_no_one_and_their_next_message_uses_it() {
    let (server, db, api) = scene().await;
    let body = booking("Planning", "2030-01-07T09:00:00Z", attendees());
    let created = api.post("/bookings", BOB, &body).await;
    let id = created.body["id"].as_str().unwrap().to_string();
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), 3);
    let mut people = attendees();
    people[0]["timezone"] = json!("Asia/Kolkata");
    let change = json!({"version": 1, "attendees": people});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&change.to_string())).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(resp.body["version"], 2);
    assert_eq!(resp.body["attendees"][0]["timezone"], "Asia/Kolkata");
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), 3, "no news, no mail");
    let change = json!({"version": 2, "title": "Planning, room 4"});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&change.to_string())).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    drain(&db, &server).await;
    let paris = to(&server, "paris@example.com");
    assert_eq!(paris.len(), 2);
    assert!(paris[1]["subject"].as_str().unwrap().ends_with("Mon 7 Jan 2030 14:30 (IST)"), "{}", paris[1]["subject"]);
}

/// Each of `values` as attendee `i`'s `key` gets 422 naming
/// `attendees[i].key`, and nothing is written.
async fn each_is_refused(i: usize, key: &str, values: &[Value]) {
    let db = TestDb::create().await;
    let api = TestApi::new(&db);
    for value in values {
        let mut people = attendees();
        people[i][key] = value.clone();
        let resp = api.post("/bookings", BOB, &booking("Planning", "2030-01-07T09:00:00Z", people)).await;
        assert_eq!(resp.status, 422, "{value}: {}", resp.body);
        let fields: Vec<&str> =
            resp.body["invalid_params"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(fields, vec![format!("attendees[{i}].{key}")], "{value}: {}", resp.body);
    }
    assert_eq!(db.count("bookings").await, 0);
}

#[tokio::test]
async fn an_unknown_attendee_zone_is_refused_with_the_field_named_and_nothing_written() {
    each_is_refused(2, "timezone", &[json!("Mars/Olympus_Mons"), json!(""), json!(9), json!("Europe/Paris\u{0}")])
        .await;
}

/// Each attendee's own language: the subject and text in it, with the date,
/// time and zone by its conventions; a tag we do not ship (`pt-BR`) falls
/// back to English; the calendar part is the same for all.
#[tokio::test]
async fn each_attendee_reads_their_own_language_and_an_unshipped_one_falls_back() {
    let (server, db, api) = scene().await;
    let body = json!({
        "title": "Design review", "start": "2030-01-07T09:00:00Z", "end": "2030-01-07T10:00:00Z",
        "timezone": "Europe/Paris", "location": "Room 4",
        "attendees": [
            {"email": "paris@example.com", "name": "Amélie", "locale": "fr"},
            {"email": "tokyo@example.com", "name": "山田 太郎", "timezone": "Asia/Tokyo", "locale": "ja-JP"},
            {"email": "rio@example.com", "name": "João", "timezone": "America/Sao_Paulo", "locale": "pt-br"},
            {"email": "newyork@example.com", "name": "Sam", "timezone": "America/New_York", "locale": "en-US"},
        ],
    });
    let created = api.post("/bookings", BOB, &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["attendees"][2]["locale"], "pt-BR", "kept in its canonical form");
    let languages: Vec<&Value> = created.body["attendees"].as_array().unwrap().iter().map(|a| &a["language"]).collect();
    assert_eq!(languages, [&json!("fr"), &json!("ja"), &json!("en"), &json!("en")], "the response says which");
    drain(&db, &server).await;
    let (paris, tokyo, rio) =
        (to(&server, "paris@example.com"), to(&server, "tokyo@example.com"), to(&server, "rio@example.com"));
    assert_eq!(
        paris[0]["subject"],
        "Invitation : Design review @ lundi 7 janvier 2030 à 10:00 (heure normale d’Europe centrale)"
    );
    assert!(paris[0]["text"].as_str().unwrap().contains("Où :"), "{}", paris[0]["text"]);
    assert_eq!(tokyo[0]["subject"], "招待: Design review @ 2030年1月7日月曜日 18:00 (日本標準時)");
    assert!(tokyo[0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Bob Organizer <bob@example.com>さんが「Design review」に招待しました。"));
    let subject = rio[0]["subject"].as_str().unwrap();
    assert!(subject.starts_with("Invitation: Design review @ Monday, January 7, 2030 at 6:00"), "{subject}");
    let newyork = to(&server, "newyork@example.com");
    assert_eq!(
        newyork[0]["subject"],
        "Invitation: Design review @ Monday, January 7, 2030 at 4:00\u{202f}AM (Eastern Standard Time)"
    );
    for m in [&paris[0], &tokyo[0], &rio[0], &newyork[0]] {
        assert_eq!(m["calendar"], paris[0]["calendar"], "one calendar object for everyone");
        assert_eq!(m["defects"], json!([]));
    }
}

#[tokio::test]
async fn a_malformed_attendee_locale_is_refused_with_the_field_named_and_nothing_written() {
    each_is_refused(1, "locale", &[json!("fr_FR"), json!("français"), json!(""), json!(7)]).await;
}

/// The organizer's own language: the body's `locale`, else the token's
/// `locale` claim (Cognito's `de_DE` spelling too; one that is no tag is
/// ignored). An attendee who names none reads it; one who names a language
/// we do not ship reads the default, not the organizer's.
#[tokio::test]
async fn the_organizers_language_comes_from_the_body_else_the_token_and_serves_attendees_who_name_none() {
    let (server, db, api) = scene().await;
    let people = json!([
        {"email": "anna@example.com", "name": "Anna"},
        {"email": "lucia@example.com", "name": "Lucía", "locale": "es"},
        {"email": "joao@example.com", "name": "João", "locale": "pt-BR"},
    ]);
    let post = |claims: Value, body: Value| {
        let api = &api;
        async move { api.send_claims("POST", "/bookings", Some(claims), &[], Some(&body.to_string())).await }
    };
    let mut claims = BOB.claims();
    claims["locale"] = json!("de_DE");
    let from_token = post(claims.clone(), booking("Planung", "2030-01-07T09:00:00Z", people.clone())).await;
    assert_eq!(from_token.status, 201, "{}", from_token.body);
    assert_eq!(from_token.body["organizer"]["locale"], "de-DE");
    let languages = |b: &Value| -> Vec<String> {
        b["attendees"].as_array().unwrap().iter().map(|a| a["language"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(languages(&from_token.body), ["de", "es", "en"]);

    let mut body = booking("Revue", "2030-01-08T09:00:00Z", people.clone());
    body["locale"] = json!("fr-CA");
    let from_body = post(claims.clone(), body).await;
    assert_eq!(from_body.status, 201, "{}", from_body.body);
    assert_eq!(from_body.body["organizer"]["locale"], "fr-CA", "the body's wins over the token's");
    assert_eq!(languages(&from_body.body), ["fr", "es", "en"]);

    claims["locale"] = json!("not a tag");
    let ignored = post(claims, booking("Sync", "2030-01-09T09:00:00Z", people)).await;
    assert_eq!(ignored.status, 201, "a bad claim is ignored, never a refusal: {}", ignored.body);
    assert!(ignored.body["organizer"].get("locale").is_none());
    assert_eq!(languages(&ignored.body), ["en", "es", "en"]);

    drain(&db, &server).await;
    let anna: Vec<String> =
        to(&server, "anna@example.com").iter().map(|m| m["subject"].as_str().unwrap().to_string()).collect();
    assert_eq!(anna.len(), 3);
    assert!(
        anna.contains(
            &"Einladung: Planung @ Montag, 7. Januar 2030 um 10:00 (Mitteleuropäische Normalzeit)".to_string()
        ),
        "{anna:?}"
    );
    assert!(anna.iter().any(|s| s.starts_with("Invitation : Revue @ mardi 8 janvier 2030")), "{anna:?}");
    assert!(anna.contains(&"Invitation: Sync @ Wed 9 Jan 2030 10:00 (CET)".to_string()), "nobody named one: {anna:?}");
    let got = client_booking(&api, from_body.body["id"].as_str().unwrap()).await;
    assert_eq!(got["organizer"]["locale"], "fr-CA", "GET returns it");
    assert_eq!(got["attendees"][0]["language"], "fr");
}

async fn client_booking(api: &TestApi, id: &str) -> Value {
    let got = api.send("GET", &format!("/bookings/{id}"), Some(BOB), &[], None).await;
    assert_eq!(got.status, 200, "{}", got.body);
    got.body
}

/// A change of only who reads what (an attendee's language, the
/// organizer's) is no news: a new version, no mail; the next message reads
/// in the new language.
#[tokio::test]
async fn changing_only_languages_mails_no_one_and_the_next_message_reads_in_the_new_one() {
    let (server, db, api) = scene().await;
    let people = json!([{"email": "anna@example.com", "name": "Anna"}, {"email": "kenji@example.com", "name": "健二"}]);
    let id = planning(&api, people).await;
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), 2);
    let patch = |body: Value| {
        let (api, id) = (&api, &id);
        async move { api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&body.to_string())).await }
    };
    let people = json!([{"email": "anna@example.com", "name": "Anna"}, {"email": "kenji@example.com", "name": "健二", "locale": "ja"}]);
    let resp = patch(json!({"version": 1, "attendees": people, "locale": "es"})).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!((resp.body["version"].as_i64(), resp.body["organizer"]["locale"].as_str()), (Some(2), Some("es")));
    assert_eq!(resp.body["attendees"][0]["language"], "es", "the organizer's, for one who names none");
    assert_eq!(resp.body["attendees"][1]["language"], "ja");
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), 2, "no news, no mail");
    let resp = patch(json!({"version": 2, "title": "Planning, room 4"})).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    drain(&db, &server).await;
    let subjects: Vec<String> =
        server.parsed()[2..].iter().map(|m| m["subject"].as_str().unwrap().to_string()).collect();
    assert!(
        subjects.iter().any(|s| s.starts_with("Invitación actualizada: Planning, room 4 @ lunes, 7 de enero de 2030")),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s.starts_with("招待の更新: Planning, room 4 @ 2030年1月7日月曜日")),
        "{subjects:?}"
    );
    for bad in [json!("fr_FR"), json!(7), json!("")] {
        let resp = patch(json!({"version": 3, "locale": bad})).await;
        assert_eq!(resp.status, 422, "{bad}: {}", resp.body);
        assert_eq!(resp.body["invalid_params"][0]["name"], "locale");
    }
    let version: i32 = db.scalar("SELECT version FROM bookings").await;
    assert_eq!(version, 3, "nothing written");
    // `null` clears the organizer's: Anna, who names none, reads the default.
    let resp = patch(json!({"version": 3, "locale": null})).await;
    assert_eq!((resp.status, resp.body["version"].as_i64()), (200, Some(4)), "{}", resp.body);
    assert!(resp.body["organizer"].get("locale").is_none(), "{}", resp.body);
    assert_eq!(resp.body["attendees"][0]["language"], "en");
    let before = server.messages().len();
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), before, "no news, no mail");
}

/// `DEFAULT_LOCALE`: the language of whoever names none.
#[tokio::test]
async fn the_default_locale_serves_everyone_who_names_no_language() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let api = TestApi::with(&db, Faults::none(), ApiConfig { default_language: Language::De, ..ApiConfig::default() });
    let people = json!([{"email": "anna@example.com", "name": "Anna"}, {"email": "joao@example.com", "name": "João", "locale": "pt-BR"}]);
    let created = api.post("/bookings", BOB, &booking("Planung", "2030-01-07T09:00:00Z", people)).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["attendees"][0]["language"], "de");
    assert_eq!(created.body["attendees"][1]["language"], "de", "a language we do not ship ends at the default");
    drain(&db, &server).await;
    assert_eq!(server.parsed().len(), 2);
    for m in server.parsed() {
        assert!(
            m["subject"].as_str().unwrap().starts_with("Einladung: Planung @ Montag, 7. Januar 2030"),
            "{}",
            m["subject"]
        );
    }
}

/// Right-to-left and CJK names and titles reach every language's message
/// whole: subject, text and calendar part.
#[tokio::test]
async fn right_to_left_and_cjk_names_and_titles_survive_in_every_language() {
    let (server, db, api) = scene().await;
    let title = "מסקירה · مراجعة التصميم · 設計レビュー";
    let names = ["דוד כהן", "سارة الأحمد", "山田 太郎", "김민준", "Zoë"];
    let people: Vec<Value> = Language::ALL
        .iter()
        .zip(names)
        .map(|(l, name)| json!({"email": format!("{}@example.com", l.code()), "name": name, "locale": l.code()}))
        .collect();
    let organizer = outbox_tests::api::Caller { email: "noor@example.com", name: "نور الهدى", sub: "sub-noor" };
    let created = api.post("/bookings", organizer, &booking(title, "2030-01-07T09:00:00Z", json!(people))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    drain(&db, &server).await;
    let parsed = server.parsed();
    assert_eq!(parsed.len(), Language::ALL.len());
    for m in &parsed {
        let (subject, text) = (m["subject"].as_str().unwrap(), m["text"].as_str().unwrap());
        assert!(subject.contains(title), "{subject}");
        assert!(text.contains(title) && text.contains("نور الهدى <noor@example.com>"), "{text}");
        let cns: Vec<&str> =
            m["calendar"]["ATTENDEES"].as_array().unwrap().iter().map(|a| a["CN"].as_str().unwrap()).collect();
        assert_eq!(cns, names);
        assert_eq!(m["calendar"], parsed[0]["calendar"]);
        assert_eq!(m["defects"], json!([]));
    }
}

/// The design story's hardest crash, then an operator's resend: SMTP took
/// the message and the poller died before recording it; the resend is a
/// new claim a second later. The recipient's two messages are the same
/// bytes: the same Message-ID, Date, boundary, subject, text and calendar
/// part, and no claim of ours in them.
#[tokio::test]
async fn a_resend_after_a_crash_renders_the_same_bytes_for_the_recipient() {
    use outbox_tests::outbox::{killed, sweep_after_timeout, Worker};
    let (server, db, api) = scene().await;
    let people = json!([{"email": "amelie@example.com", "name": "Amélie", "timezone": "Europe/Paris", "locale": "fr"}]);
    let mut body = booking("Revue · 設計", "2030-01-07T09:00:00Z", people);
    body["reminders"] = json!([]);
    assert_eq!(api.post("/bookings", BOB, &body).await.status, 201);
    let worker = Worker::new(env!("CARGO_BIN_EXE_outbox-worker"));
    let mut env = server.env();
    env.push(("OUTBOX_WORKER_MAILER", "smtp".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let kill = format!("{}=kill", shared::notify::deliver::FAULT_AFTER_SEND);
    assert!(killed(worker.run(&db, &kill, &env).await));
    assert_eq!(server.messages().len(), 1, "the server took it; the poller died before recording it");
    sweep_after_timeout(&db, 8).await;
    assert!(worker.run(&db, "", &env).await.success());
    let send: uuid::Uuid =
        db.scalar(formatcp!("SELECT id FROM booking_notification_sends WHERE status = {UNKNOWN}")).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut client = db.pool.get().await.unwrap();
    let decision = shared::notify::evidence::resend::Decision::Operator("a test");
    shared::notify::evidence::resend::resend(&mut client, send, decision).await.unwrap();
    assert!(worker.run(&db, "", &env).await.success());
    let stored = server.messages();
    assert_eq!(stored.len(), 2, "the operator's resend went");
    let again: uuid::Uuid = db.scalar("SELECT id FROM booking_notification_sends").await;
    assert_ne!(again, send, "a new claim");
    assert_eq!(stored[0].data, stored[1].data);
    assert!(stored[0].data.contains("Subject: =?utf-8?"), "{}", stored[0].data);
}

/// A booking written before languages existed (its attendees carry none),
/// under `DEFAULT_LOCALE=de`: its messages keep the compact English form, a
/// PATCH to the values it has writes nothing, and a real change decides
/// each attendee's language.
#[tokio::test]
async fn a_booking_from_before_languages_reads_as_before_until_a_change_decides_its_languages() {
    let server = SmtpServer::start(Options::default());
    let db = TestDb::create().await;
    let api = TestApi::with(&db, Faults::none(), ApiConfig { default_language: Language::De, ..ApiConfig::default() });
    let people = json!([{"email": "anna@example.com", "name": "Anna"}]);
    let id = planning(&api, people.clone()).await;
    // As the API wrote bookings, and their events, before languages.
    let strip = "(SELECT jsonb_agg(a - 'language') FROM jsonb_array_elements(attendees) a)";
    let client = db.pool.get().await.unwrap();
    client.batch_execute(&format!("UPDATE bookings SET attendees = {strip}")).await.unwrap();
    let strip_event = strip.replace("attendees", "payload->'booking'->'attendees'");
    client
        .batch_execute(&format!(
            "UPDATE outbox_events SET payload = jsonb_set(payload, '{{booking,attendees}}', {strip_event})"
        ))
        .await
        .unwrap();
    drain(&db, &server).await;
    let subjects = |server: &SmtpServer| -> Vec<Value> {
        to(server, "anna@example.com").iter().map(|m| m["subject"].clone()).collect()
    };
    assert_eq!(subjects(&server), ["Invitation: Planning @ Mon 7 Jan 2030 10:00 (CET)"]);
    let same = json!({"version": 1, "attendees": people, "title": "Planning"});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&same.to_string())).await;
    assert_eq!((resp.status, resp.body["version"].as_i64()), (200, Some(1)), "{}", resp.body);
    assert!(resp.body["attendees"][0].get("language").is_none(), "nothing written: {}", resp.body);
    let retitle = json!({"version": 1, "title": "Planning, room 4"});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&retitle.to_string())).await;
    assert_eq!((resp.status, resp.body["attendees"][0]["language"].as_str()), (200, Some("de")), "{}", resp.body);
    drain(&db, &server).await;
    let last = subjects(&server).last().unwrap().as_str().unwrap().to_string();
    assert!(last.starts_with("Aktualisierte Einladung: Planning, room 4 @ Montag, 7. Januar 2030"), "{last}");
}

/// A message still waiting when its recipient changes only their zone and
/// language (a change that tells no one, so it supersedes nothing) is
/// written as they now ask.
#[tokio::test]
async fn a_message_waiting_when_its_recipient_changes_only_their_language_is_written_as_they_now_ask() {
    let (server, db, api) = scene().await;
    let people = json!([{"email": "anna@example.com", "name": "Anna"}, {"email": "ben@example.com", "name": "Ben"}]);
    let id = planning(&api, people).await;
    let people = json!([
        {"email": "anna@example.com", "name": "Anna", "locale": "fr", "timezone": "Asia/Tokyo"},
        {"email": "ben@example.com", "name": "Ben"},
    ]);
    let change = json!({"version": 1, "attendees": people});
    let resp = api.send("PATCH", &format!("/bookings/{id}"), Some(BOB), &[], Some(&change.to_string())).await;
    assert_eq!((resp.status, resp.body["version"].as_i64()), (200, Some(2)), "{}", resp.body);
    drain(&db, &server).await;
    assert_eq!(server.messages().len(), 2, "one invitation each, nothing for the quiet change");
    assert_eq!(
        to(&server, "anna@example.com")[0]["subject"],
        "Invitation : Planning @ lundi 7 janvier 2030 à 18:00 (heure normale du Japon)"
    );
    assert_eq!(to(&server, "ben@example.com")[0]["subject"], "Invitation: Planning @ Mon 7 Jan 2030 10:00 (CET)");
}

/// A reminder in the recipient's language, its "starts in" by the
/// language's plural rules.
#[tokio::test]
async fn a_reminder_reads_in_the_recipients_language() {
    let (server, db, api) = scene().await;
    let people = json!([{"email": "anna@example.com", "name": "Anna", "locale": "de"}]);
    let mut body = booking("Planung", "2030-01-07T09:00:00Z", people);
    body["reminders"] = json!(["PT2H"]);
    assert_eq!(api.post("/bookings", BOB, &body).await.status, 201);
    drain(&db, &server).await;
    let client = db.pool.get().await.unwrap();
    client
        .batch_execute("UPDATE outbox_events SET next_attempt_at = now() WHERE event_type = 'BOOKING_REMINDER'")
        .await
        .unwrap();
    drain(&db, &server).await;
    let got = to(&server, "anna@example.com");
    assert_eq!(got.len(), 2, "the invitation, then the reminder");
    assert_eq!(
        got[1]["subject"],
        "Erinnerung: Planung @ Montag, 7. Januar 2030 um 10:00 (Mitteleuropäische Normalzeit)"
    );
    assert!(got[1]["text"].as_str().unwrap().contains("beginnt in 2 Stunden."), "{}", got[1]["text"]);
}
