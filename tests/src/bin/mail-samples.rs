//! Writes one meeting's messages, each kind in each language the
//! screenshots show, as the recipient's client gets them: `<kind>-<lang>`
//! `.html`, `.txt` and `.eml`, and `index.json` naming them.
//! scripts/mail-screenshots.sh opens each in a real browser.
//!
//! usage: mail-samples DIR

use outbox_tests::mail_samples::{notification, KINDS, LANGUAGES};
use shared::notify::render::card::Card;
use shared::notify::render::invite::{build, Sender};
use shared::notify::render::page;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: mail-samples DIR");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let sender = Sender::parse("Bookings <bookings@example.com>").expect("a sender");
    let mut index = Vec::new();
    for kind in KINDS {
        for language in LANGUAGES {
            let n = notification(kind, language);
            let card = Card::of(&n);
            let stem = format!("{kind}-{}", language.code());
            let write = |suffix: &str, bytes: &[u8]| {
                let path = dir.join(format!("{stem}.{suffix}"));
                std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            };
            let html = page::html(&card);
            write("html", html.as_bytes());
            write("txt", page::text(&card).as_bytes());
            write("eml", &build(&n, &sender));
            index.push(serde_json::json!({
                "kind": kind, "language": language.code(), "stem": stem,
                "subject": card.subject, "title": card.title, "html_bytes": html.len(),
            }));
        }
    }
    let path = dir.join("index.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&index).expect("JSON")).expect("index.json");
    println!("{} messages written to {}", index.len(), dir.display());
}
