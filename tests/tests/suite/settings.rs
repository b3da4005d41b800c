//! Each setting is declared once, in `shared::config::settings`: the docs'
//! configuration table and the template's environment blocks are checked
//! against that list, as `openapi.rs` checks the operations.

use std::collections::BTreeMap;

use shared::config::settings::{self, Reader, Setting, ALL};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn readers(s: &Setting) -> String {
    let everyone = [Reader::FUNCTIONS.as_slice(), &[Reader::Outboxctl]].concat();
    let mut by: Vec<Reader> = s.read_by.to_vec();
    by.sort();
    if by == everyone {
        "all".into()
    } else if by == Reader::FUNCTIONS {
        "all functions".into()
    } else {
        by.iter().map(|r| r.doc_name()).collect::<Vec<_>>().join(", ")
    }
}

/// The table `docs/configuration.md` must hold, one row per setting.
fn table() -> String {
    let mut t = String::from("| variable | default | used by | meaning |\n|---|---|---|---|\n");
    for s in ALL {
        let default = s.default.map_or("—".to_string(), |d| format!("`{d}`"));
        t.push_str(&format!("| `{}` | {default} | {} | {} |\n", s.name, readers(s), s.doc));
    }
    t
}

#[test]
fn the_docs_configuration_table_is_the_declared_settings() {
    let docs = read("docs/configuration.md");
    let start = docs.find("| variable |").expect("docs/configuration.md has the table");
    let end = docs[start..].find("\n\n").map_or(docs.len(), |e| start + e + 1);
    let want = table();
    assert!(
        docs[start..end] == want,
        "docs/configuration.md's table differs from shared::config::settings; it should read:\n\n{want}"
    );
}

#[test]
fn every_declared_setting_is_named_once_and_its_default_parses() {
    let mut seen = std::collections::BTreeSet::new();
    for s in ALL {
        assert!(seen.insert(s.name), "{} declared twice", s.name);
        assert!(!s.read_by.is_empty(), "{} is read by nobody", s.name);
        assert!(!s.doc.is_empty() && !s.doc.contains('\n'), "{}: one line of doc", s.name);
        assert_eq!(settings::find(s.name).map(|f| f.doc), Some(s.doc));
    }
    // Defaults are plain values (numbers, booleans, words, an address), as the docs show them.
    for s in ALL {
        if let Some(d) = s.default {
            let numeric = d.parse::<f64>().is_ok() && d.chars().all(|c| c.is_ascii_digit() || c == '.');
            let boolean = d == "true" || d == "false";
            let word = d.chars().all(|c| c.is_ascii_lowercase() || c == '-');
            let address = d.split_once('@').is_some_and(|(l, h)| {
                !l.is_empty() && h.contains('.') && d.chars().all(|c| c.is_ascii_lowercase() || ".@-".contains(c))
            });
            assert!(numeric || boolean || word || address, "{}: {d:?}", s.name);
        }
    }
}

/// `KEY: value` lines under each `Variables:` block of the template, by the
/// resource (or `Globals`) they belong to.
fn template_variables() -> BTreeMap<String, Vec<String>> {
    let template = read("template.yaml");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut section, mut owner, mut block): (String, String, Option<usize>) = Default::default();
    for line in template.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if indent == 0 {
            section = text.trim_end_matches(':').to_string();
            owner = section.clone();
        } else if indent == 2 && section == "Resources" && text.ends_with(':') && !text.contains(' ') {
            owner = text.trim_end_matches(':').to_string();
        }
        match block {
            Some(at) if indent > at => {
                let key = text.split(':').next().unwrap().to_string();
                out.entry(owner.clone()).or_default().push(key);
                continue;
            }
            Some(_) => block = None,
            None => {}
        }
        if text == "Variables:" {
            block = Some(indent);
        }
    }
    out
}

#[test]
fn the_template_sets_only_declared_settings_on_functions_that_read_them() {
    let functions = [
        ("BookingApiFunction", Reader::Api),
        ("OutboxPollerFunction", Reader::Poller),
        ("OutboxSweeperFunction", Reader::Sweeper),
        ("SesEventsFunction", Reader::SesEvents),
        ("MigrateFunction", Reader::Migrate),
        // outboxctl's commands, run by the operator function.
        ("OperatorFunction", Reader::Outboxctl),
        ("OperatorConsoleFunction", Reader::Console),
    ];
    let vars = template_variables();
    assert!(vars.contains_key("Globals") && vars.len() > 3, "found the environment blocks: {vars:?}");
    for (owner, keys) in &vars {
        let reader = functions.iter().find(|(id, _)| id == owner).map(|(_, r)| *r);
        assert!(
            reader.is_some() || owner == "Globals",
            "{owner} sets environment variables but is not a known function"
        );
        for key in keys {
            let s = settings::find(key)
                .unwrap_or_else(|| panic!("template.yaml sets {key} on {owner}; it is not declared"));
            match reader {
                Some(r) => assert!(s.read_by.contains(&r), "template.yaml sets {key} on {owner}, which never reads it"),
                None => assert!(s.read_by.iter().any(|r| Reader::FUNCTIONS.contains(r)), "{key} in Globals"),
            }
        }
    }
}
