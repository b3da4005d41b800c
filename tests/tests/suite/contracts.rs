//! Typed contracts between the library's modules (issue 54): every state a
//! program reads back is a typed value in a column of its own (or an enum
//! the database checks), never a prefix or a pattern of an error text.
//! These tests read the sources of `shared/src`, as `layers` does.

use std::path::Path;

/// Every source file of `shared/src`, without its unit tests, by path.
fn library() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                // (a `tests.rs` is a module's unit tests)
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.split("#[cfg(test)]\nmod ").next().unwrap().to_string();
            (f.strip_prefix(&root).unwrap().display().to_string(), code)
        })
        .collect()
}

/// The error-text columns: written for people, never read back as a state.
const ERROR_COLUMNS: [&str; 2] = ["last_error", "previous_error"];
/// The names Rust code holds an error text or a reason under.
const REASON_NAMES: [&str; 5] = ["last_error", "reason", "reason()", "why", "r"];

/// Each place in `code` that reads a state back from an error text: SQL
/// that matches an error column against a prefix or a pattern, or Rust that
/// matches a reason's text.
fn reads_from_error_text(code: &str) -> Vec<String> {
    let lower = code.to_lowercase();
    let mut found = Vec::new();
    for column in ERROR_COLUMNS {
        for (i, _) in lower.match_indices(column) {
            let before = lower[..i].trim_end().trim_end_matches(|c: char| c.is_alphanumeric() || c == '.' || c == '_');
            let after = lower[i + column.len()..].trim_start();
            let matched = ["starts_with(", "strpos(", "position(", "left(", "substr(", "substring("]
                .iter()
                .any(|f| before.ends_with(f))
                || ["like", "ilike", "not like", "not ilike", "~", "similar", "^@"]
                    .iter()
                    .any(|op| after.starts_with(op));
            if matched {
                found.push(lower[i.saturating_sub(30)..(i + 40).min(lower.len())].replace('\n', " "));
            }
        }
    }
    for name in REASON_NAMES {
        for method in [".starts_with(", ".strip_prefix(", ".ends_with(", ".contains(", ".find("] {
            let needle = format!("{name}{method}");
            for (i, _) in code.match_indices(&needle) {
                if !code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.') {
                    found.push(code[i..(i + 50).min(code.len())].replace('\n', " "));
                }
            }
        }
    }
    found
}

#[test]
fn the_error_text_check_sees_a_state_read_back_from_a_prefix() {
    let sql = "SELECT count(*) FROM outbox_events WHERE status = 'PENDING' AND (starts_with(last_error, $1))";
    assert_eq!(reads_from_error_text(sql).len(), 1);
    assert_eq!(reads_from_error_text("WHERE e.last_error LIKE 'sending paused:%'").len(), 1);
    let rust = "Some(r) if r.starts_with(TOO_LATE) => State::TooLate, _ if reason().contains(\"x\") => 1";
    assert_eq!(reads_from_error_text(rust).len(), 2);
    // Writing one, or reading it to show it, is what the columns are for.
    assert!(reads_from_error_text("SET last_error = $4, stopped = $5 RETURNING last_error").is_empty());
}

#[test]
fn no_code_reads_a_state_back_from_error_text() {
    let library = library();
    assert!(library.len() > 50, "found the sources");
    let wrong: Vec<String> = library
        .iter()
        .flat_map(|(file, code)| reads_from_error_text(code).into_iter().map(move |at| format!("{file}: {at}")))
        .collect();
    assert!(
        wrong.is_empty(),
        "states read back from error text (store a typed value in a column of its own):\n{}",
        wrong.join("\n")
    );
}

/// Each table, and the module that owns it: the only one whose SQL names it
/// (a file, or a folder of files). Others ask the owner: a typed function
/// of its module, or a function of the database it exports (V47).
const OWNERS: [(&str, &str); 25] = [
    ("api_cursor_key", "api/list.rs"),
    ("bookings", "booking/store.rs"),
    ("booking_attendees", "booking/store.rs"),
    ("idempotency_keys", "booking/idempotency.rs"),
    ("booking_daily_changes", "booking/limits.rs"),
    ("organizer_daily_usage", "booking/limits.rs"),
    ("organizer_accounts", "booking/limits.rs"),
    ("new_account_daily_usage", "booking/limits.rs"),
    ("outbox_events", "outbox/events/"),
    ("outbox_leases", "outbox/events/"),
    ("outbox_replays", "outbox/events/"),
    ("outbox_turns", "outbox/events/"),
    ("processed_events", "outbox/processed.rs"),
    ("booking_notification_sends", "notify/sends/"),
    ("booking_introductions", "notify/sends/introductions.rs"),
    ("send_rate", "notify/pacing/send_rate.rs"),
    ("mailbox_organizers", "notify/pacing/recipient_limit.rs"),
    ("mailbox_newcomers", "notify/pacing/recipient_limit.rs"),
    ("organizer_pauses", "notify/pacing/pauses.rs"),
    ("send_feedback", "notify/evidence/feedback.rs"),
    ("suppressed_addresses", "notify/evidence/suppression.rs"),
    ("ses_event_watermarks", "notify/evidence/watermark.rs"),
    ("ses_canaries", "notify/evidence/watermark.rs"),
    ("notification_resends", "notify/evidence/resend/"),
    ("recipient_daily_mails", "(dropped)"),
];

/// The tables `code` names in SQL: after FROM, JOIN, INTO, UPDATE or TABLE.
fn tables_named(code: &str) -> Vec<&'static str> {
    let lower = code.to_lowercase();
    let words: Vec<&str> =
        lower.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect();
    let mut named = Vec::new();
    for pair in words.windows(2) {
        if matches!(pair[0], "from" | "join" | "into" | "update" | "table") {
            if let Some((table, _)) = OWNERS.iter().find(|(t, _)| *t == pair[1]) {
                named.push(*table);
            }
        }
    }
    named
}

/// `code` without its comments (doc comments name tables in prose).
fn without_comments(code: &str) -> String {
    code.lines().map(|l| if l.trim_start().starts_with("//") { "" } else { l }).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_table_check_sees_sql_naming_a_table() {
    let sql = "SELECT s.id FROM booking_notification_sends s JOIN outbox_events e ON e.id = s.outbox_event_id";
    assert_eq!(tables_named(sql), ["booking_notification_sends", "outbox_events"]);
    assert!(tables_named("let bookings = from_bookings(update);").is_empty(), "Rust names are not SQL");
}

#[test]
fn every_table_of_the_migrations_has_an_owner() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let sql = std::fs::read_to_string(entry.unwrap().path()).unwrap().to_lowercase();
        for (i, _) in sql.match_indices("create table ") {
            let rest = sql[i + "create table ".len()..].trim_start_matches("if not exists ");
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !OWNERS.iter().any(|(t, _)| *t == name) {
                missing.push(name);
            }
        }
    }
    assert!(missing.is_empty(), "tables with no owner in OWNERS (give each one module): {missing:?}");
}

#[test]
fn no_modules_sql_names_a_table_another_module_owns() {
    let mut wrong = Vec::new();
    for (file, code) in library() {
        for table in tables_named(&without_comments(&code)) {
            let owner = OWNERS.iter().find(|(t, _)| *t == table).unwrap().1;
            if !(file == owner || owner.ends_with('/') && file.starts_with(owner)) {
                wrong.push(format!("{file} names {table} (owned by {owner})"));
            }
        }
    }
    assert!(wrong.is_empty(), "SQL naming another module's table (ask its owner):\n{}", wrong.join("\n"));
}

#[test]
fn no_module_hands_its_sql_to_another() {
    // A `pub const` holding SQL text is a fragment another module could
    // paste into its statements: only its own file may use it.
    let library = library();
    let mut wrong = Vec::new();
    for (file, code) in &library {
        for (i, _) in code.match_indices("pub const ") {
            let item = &code[i..i + code[i..].find(";\n").unwrap_or(code.len() - i)];
            let name: String =
                item["pub const ".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let upper = item.to_uppercase();
            if !(upper.contains("SELECT ") || upper.contains(" FROM ") || upper.contains("UPDATE ")) {
                continue;
            }
            for (other, text) in &library {
                let used = text.match_indices(name.as_str()).any(|(j, _)| {
                    !text[..j].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                        && !text[j + name.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if other != file && used {
                    wrong.push(format!("{other} uses {name}, SQL of {file}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "SQL handed from one module to another:\n{}", wrong.join("\n"));
}
