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
