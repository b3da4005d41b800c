//! The message itself (issue 55): each kind, in each language, says what,
//! when, where and with whom; its text and HTML parts state the same facts
//! in the same words; its HTML wraps, carries its language and charset,
//! loads nothing remote and escapes what the organizer typed; its calendar
//! part is the product's own. The browser's view of it is checked by
//! scripts/mail-screenshots.py (a real Chromium, each kind at 390 and 900
//! pixels).

use outbox_tests::mail_samples::{notification, parsed, KINDS};
use serde_json::json;
use shared::booking::domain::Language;
use shared::notify::render::card::Card;
use shared::notify::render::invite::{build, Sender};
use shared::notify::render::page;

fn sender() -> Sender {
    Sender::parse("Bookings <bookings@example.com>").unwrap()
}

/// What a reader sees of an HTML page: its body's text, tags and entities
/// gone, a block's end as a space, white space as one space.
fn visible(html: &str) -> String {
    let body = &html[html.find("<body").expect("a body")..];
    let mut text = String::new();
    let mut rest = body;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        let close = open + rest[open..].find('>').expect("a closed tag");
        let name: String =
            rest[open + 1..close].trim_start_matches('/').chars().take_while(char::is_ascii_alphanumeric).collect();
        if !matches!(name.as_str(), "a" | "strong" | "del" | "span" | "b" | "em") {
            text.push(' ');
        }
        rest = &rest[close + 1..];
    }
    text.push_str(rest);
    words(&html_escape::decode_html_entities(&text))
}

fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn each_kind_in_each_language_states_the_same_facts_in_its_text_and_html_parts() {
    for kind in KINDS {
        for language in Language::ALL {
            let n = notification(kind, language);
            let card = Card::of(&n);
            let (text, html) = (page::text(&card), page::html(&card));
            let at = format!("{kind} in {}", language.code());
            assert_eq!(visible(&html), words(&text), "{at}: the HTML's words are the text part's");
            assert!(html.contains(&format!("<html lang=\"{}\"", language.code())), "{at}");
            assert!(html.contains("<meta charset=\"utf-8\">") && html.contains("width=device-width"), "{at}");
            assert!(!html.contains("<pre") && !html.contains("<img") && !html.contains(" src="), "{at}");
            assert!(!html.contains("width:") || !html.contains("px;width"), "{at}: no fixed width");
            assert!(html.contains("<h1 dir=\"auto\""), "{at}: the title is a heading, in its own direction");
            // The same facts: the title, the lead, a time, the organizer.
            for fact in [&card.title, &card.lead, &card.note] {
                assert!(text.contains(fact.as_str()), "{at}: {fact}");
            }
            assert!(card.facts.iter().any(|f| f.value.contains("Bob Organizer <bob.organizer@example.com>")), "{at}");
            assert!(!text.contains("{ $") && !text.contains('$'), "{at}: a Fluent variable left: {text}");
        }
    }
}

#[test]
fn an_invitation_says_what_when_where_how_long_and_with_whom() {
    let card = Card::of(&notification("invitation", Language::En));
    let text = page::text(&card);
    let html = page::html(&card);
    assert!(text.starts_with("Bob Organizer <bob.organizer@example.com> invited you to \"Design review"), "{text}");
    // Alice reads New York's clock (en-US: 12 hours), the date once, the
    // zone's short label once; the organizer's Paris time once.
    assert!(text.contains("When: Monday, January 7, 2030, 4:00\u{202f}AM – 5:30\u{202f}AM (EST)"), "{text}");
    assert!(
        text.contains("Organizer's time: Monday, January 7, 2030, 10:00\u{202f}AM – 11:30\u{202f}AM (GMT+1)"),
        "{text}"
    );
    assert!(text.contains("Duration: 1 hour 30 minutes"), "{text}");
    assert!(text.contains("Where: Room 4.12, 10 Rue de la Paix, Paris (https://meet.example.com/design-review-4-12)"));
    assert!(html.contains("<a href=\"https://meet.example.com/design-review-4-12\""), "{html}");
    assert!(text.contains("Guests: Carol Dupont, 山田 太郎, Dan Ng\n"), "the others, by name: {text}");
    assert!(!text.contains("Guests: Alice"), "not herself");
    assert!(text.contains("1. What a person reads on a phone"), "the description");
    assert!(text.contains("Your calendar app shows buttons to accept or decline"), "{text}");

    // Carol, in Paris, reads no organizer's time: hers is the same.
    let carol = page::text(&Card::of(&notification("invitation", Language::Fr)));
    assert!(carol.contains("Quand : lundi 7 janvier 2030, 10:00 – 11:30 (UTC+1)"), "{carol}");
    assert!(!carol.contains("Heure de l’organisateur"), "{carol}");
    assert!(carol.contains("Durée : 1 heure 30 minutes"), "{carol}");
    let taro = page::text(&Card::of(&notification("invitation", Language::Ja)));
    assert!(taro.contains("日時: 2030年1月7日月曜日 18:00～19:30 (JST)"), "{taro}");
}

#[test]
fn an_update_shows_what_changed_old_and_new_side_by_side() {
    let card = Card::of(&notification("update", Language::En));
    let labels: Vec<&str> = card.changes.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(labels, ["When:", "Title:", "Where:"]);
    let when = &card.changes[0];
    assert!(when.was.value.contains("4:00\u{202f}AM – 5:30") && when.now.value.contains("5:00\u{202f}AM – 6:30"));
    let html = page::html(&card);
    assert!(html.contains("<del>Monday, January 7, 2030, 4:00"), "the old time struck: {html}");
    assert!(html.contains("<strong>Monday, January 7, 2030, 5:00"), "the new one strong");
    assert_eq!(html.matches("<strong>").count(), 3, "nothing else in bold");
    assert!(!card.facts.iter().any(|f| f.label == "When:" || f.label == "Where:"), "not repeated below");
}

#[test]
fn a_cancellation_says_what_and_when_it_would_have_been() {
    let text = page::text(&Card::of(&notification("cancellation", Language::En)));
    assert!(text.starts_with("Bob Organizer <bob.organizer@example.com> cancelled \"Design review"), "{text}");
    assert!(text.contains("Was planned for: Monday, January 7, 2030, 4:00"), "{text}");
    assert!(text.contains("This meeting will not take place."), "{text}");
    assert!(!text.contains("Guests:") && !text.contains("Duration:"), "{text}");
}

#[test]
fn a_reminder_says_what_when_how_long_from_now_and_where() {
    let text = page::text(&Card::of(&notification("reminder", Language::Fr)));
    assert!(text.contains("commence dans 15 minutes"), "{text}");
    assert!(text.contains("Où : Room 4.12"), "{text}");
    assert!(text.contains("https://meet.example.com/design-review-4-12"), "{text}");
}

#[test]
fn what_the_organizer_typed_is_escaped_and_only_web_addresses_are_links() {
    let mut n = notification("invitation", Language::En);
    let b = &mut n.payload.booking;
    let hostile: shared::booking::domain::Booking = serde_json::from_value(json!({
        "id": b.id, "title": "<script>alert(1)</script> & \"quotes\"", "timezone": "Europe/Paris",
        "description": "<img src=https://tracker.example/x.png>",
        "location": "javascript:alert(1) \"><b>x</b>",
        "start": "2030-01-07T09:00:00Z", "end": "2030-01-07T10:00:00Z",
        "organizer": {"email": "bob@example.com", "name": "<a href=x>Bob</a>"},
        "attendees": [{"email": "alice@example.com", "name": "Alice"}],
        "status": "CONFIRMED", "version": 1,
        "created_at": "2029-12-01T10:00:00Z", "updated_at": "2029-12-01T10:00:00Z"
    }))
    .unwrap();
    *b = hostile;
    n.recipient = b.attendees[0].clone();
    let html = page::html(&Card::of(&n));
    assert!(!html.contains("<script") && !html.contains("<img") && !html.contains("<b>x"), "{html}");
    assert!(!html.contains("href=\"javascript") && !html.contains("<a href=x"), "{html}");
    assert!(visible(&html).contains("<script>alert(1)</script> & \"quotes\""), "shown as typed: {html}");
}

#[test]
fn every_kind_parses_as_icalendar_with_its_method_sequence_and_fields_and_no_claim_header() {
    let raws: Vec<(String, Vec<u8>)> = KINDS
        .iter()
        .map(|kind| {
            let n = notification(kind, Language::En);
            (n.recipient.email.to_string(), build(&n, &sender()))
        })
        .collect();
    let parsed = parsed(&raws);
    for (kind, m) in KINDS.iter().zip(&parsed) {
        assert_eq!(m["defects"], json!([]), "{kind}");
        let headers: Vec<&str> = m["header_names"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect();
        assert_eq!(
            headers,
            ["From", "To", "Reply-To", "Subject", "Message-ID", "Date", "MIME-Version", "Content-Type"],
            "{kind}: nothing internal to the public"
        );
        let html = m["html"].as_str().unwrap();
        assert!(html.contains("<h1"), "{kind}");
        if *kind == "reminder" {
            assert_eq!(m["parts"], json!(["text/plain", "text/html"]), "a reminder changes no calendar");
            continue;
        }
        let cal = &m["calendar"];
        let (method, sequence) = match *kind {
            "invitation" => ("REQUEST", 0),
            "update" => ("REQUEST", 1),
            _ => ("CANCEL", 1),
        };
        assert_eq!((cal["METHOD"].as_str().unwrap(), cal["SEQUENCE"].as_i64().unwrap()), (method, sequence), "{kind}");
        assert_eq!(cal["mime_method"], method, "{kind}");
        assert_eq!(cal["PRODID"], "-//booking-outbox//Booking Outbox//EN", "{kind}");
        assert_eq!(cal["UID"], "0190d7b2-6a6e-7a3c-8c1e-1234567890ab@booking-outbox", "{kind}");
        assert_eq!(cal["TRANSP"], "OPAQUE", "{kind}");
        assert!(cal["DESCRIPTION"].as_str().unwrap().starts_with("Agenda:"), "{kind}");
        assert!(cal["LOCATION"].as_str().unwrap().contains("meet.example.com"), "{kind}");
        assert!(cal["URL"].as_str().unwrap().starts_with("https://meet.example.com/"), "{kind}");
        assert_eq!(cal["ORGANIZER"], "mailto:bob.organizer@example.com", "{kind}");
        assert_eq!(cal["STATUS"], if method == "CANCEL" { "CANCELLED" } else { "CONFIRMED" }, "{kind}");
    }
}

/// Gmail clips a message's HTML past 102 KB; ours stays far from it even
/// with every field at its longest (a third of it), the markup around what
/// the organizer typed stays small, and the whole message (three parts,
/// base64 for CJK) well under any provider's limit.
#[test]
fn a_message_stays_within_its_size_budget() {
    const MARKUP_BUDGET: usize = 6 * 1024;
    const HTML_BUDGET: usize = 34 * 1024;
    const MESSAGE_BUDGET: usize = 160 * 1024;
    let mut longest = notification("invitation", Language::Ja);
    let b = &mut longest.payload.booking;
    let mut json = serde_json::to_value(&*b).unwrap();
    let limits = shared::booking::domain::MAX_DESCRIPTION_CHARS;
    json["title"] = json!("会".repeat(shared::booking::domain::MAX_TITLE_CHARS));
    json["description"] = json!("議".repeat(limits));
    json["location"] = json!("場".repeat(shared::booking::domain::MAX_LOCATION_CHARS));
    let people: Vec<_> = (0..shared::booking::domain::MAX_ATTENDEES)
        .map(|i| json!({"email": format!("guest{i}@example.com"), "name": "名".repeat(100)}))
        .collect();
    json["attendees"] = json!(people);
    *b = serde_json::from_value(json).unwrap();
    longest.recipient = b.attendees[0].clone();
    println!("message sizes (bytes): kind, language, HTML part, its markup, text part, whole message");
    for (name, n) in KINDS
        .iter()
        .flat_map(|k| [Language::En, Language::Ja].map(|l| (format!("{k}, {}", l.code()), notification(k, l))))
        .chain([("longest invitation, ja".to_string(), longest)])
    {
        let card = Card::of(&n);
        let (html, text) = (page::html(&card), page::text(&card));
        let markup = html.len() - visible(&html).len();
        let whole = build(&n, &sender()).len();
        println!("  {name}: {}, {markup}, {}, {whole}", html.len(), text.len());
        assert!(markup <= MARKUP_BUDGET, "{name}: {markup} bytes of markup");
        assert!(html.len() <= HTML_BUDGET, "{name}: {} bytes of HTML", html.len());
        assert!(whole <= MESSAGE_BUDGET, "{name}: {whole} bytes");
    }
}

/// Issue 55: a booking whose organizer hid the guest list names no other
/// guest: not in the body, not in the calendar part (whose `ATTENDEE` is
/// the recipient alone, as a removed attendee's `CANCEL` is).
#[test]
fn a_hidden_guest_list_names_no_other_guest_in_the_body_or_the_calendar_part() {
    use shared::booking::domain::GuestList;
    for kind in ["invitation", "update", "cancellation"] {
        let mut n = notification(kind, Language::En);
        n.payload.booking.guest_list = GuestList::Hidden;
        let text = page::text(&Card::of(&n));
        assert!(!text.contains("Guests:") && !text.contains("Carol") && !text.contains("Dan Ng"), "{kind}: {text}");
        let raw = build(&n, &sender());
        let m = &parsed(&[(n.recipient.email.to_string(), raw)])[0];
        let attendees: Vec<&str> =
            m["calendar"]["ATTENDEES"].as_array().unwrap().iter().map(|a| a["value"].as_str().unwrap()).collect();
        assert_eq!(attendees, [format!("mailto:{}", n.recipient.email)], "{kind}");
        // Shown, every guest is there.
        n.payload.booking.guest_list = GuestList::Visible;
        let m = &parsed(&[(n.recipient.email.to_string(), build(&n, &sender()))])[0];
        assert_eq!(m["calendar"]["ATTENDEES"].as_array().unwrap().len(), 4, "{kind}");
    }
}
