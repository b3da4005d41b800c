//! The library's layers point one way (see `shared/src/lib.rs`), and so do
//! the wings of `notify` (see `shared/src/notify/mod.rs`): these tests read
//! every source file of `shared/src` and fail on a `crate::…` path that
//! points up or sideways, on two files of one folder that import each
//! other, on a file over 400 lines, and on a wing over a fifth of the
//! library.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layer of each top-level module: a module may use modules of a lower
/// layer only; the foundations (layer 0) may also use each other.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "config" | "db" | "fault" | "telemetry" => 0,
        "outbox" => 1,
        "booking" => 2,
        "notify" => 3,
        "api" | "relay" => 4,
        "console" => 5,
        _ => return None,
    })
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level modules named by `crate::X` paths in `text` (comments included:
/// a doc link upward is a reading step upward too).
fn crate_paths(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .filter(|(i, _)| !text[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(i, m)| text[i + m.len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
        .collect()
}

#[test]
fn no_module_of_shared_imports_a_layer_above_or_beside_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 20, "found the sources in {}", root.display());
    let mut wrong = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        let Some(own) = layer(&first) else { continue }; // lib.rs, bin/
        for used in crate_paths(&std::fs::read_to_string(&file).unwrap()) {
            let Some(theirs) = layer(&used) else { continue };
            let allowed = used == first || theirs < own || (own == 0 && theirs == 0);
            if !allowed {
                wrong.push(format!("{} uses crate::{used}", rel.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "imports that point up or sideways:\n{}", wrong.join("\n"));
}

#[test]
fn the_layer_check_sees_an_upward_import() {
    assert_eq!(
        crate_paths("use crate::relay::x; // crate::notify\nmy_crate::api"),
        BTreeSet::from(["notify".into(), "relay".into()])
    );
}

/// Every module of `shared/src` by path (`notify::sends::claim`), with its
/// source.
fn modules() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&root).unwrap().to_string_lossy().trim_end_matches(".rs").replace('/', "::");
            let name = rel.trim_end_matches("::mod").trim_end_matches("lib").trim_end_matches("::").to_string();
            (name, std::fs::read_to_string(f).unwrap())
        })
        .collect()
}

/// The modules `text` (the source of `module`) names through `crate::` or
/// `super::` paths, braces expanded; each path counts as the longest module
/// it starts with. A module's own ancestors and descendants are not edges.
fn module_edges(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let own = |m: &String| module.starts_with(&format!("{m}::")) || m.starts_with(&format!("{module}::"));
    file_edges(module, text, known).into_iter().filter(|m| !own(m)).collect()
}

/// [`module_edges`], a module's own parent and children included (a
/// `mod x;` declaration is not an edge; `use x::…` or `pub use x::…` of a
/// child is). A file's unit tests (`#[cfg(test)] mod …`, whose `super` is
/// the file itself) are left out.
fn file_edges(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    let text = text.split("#[cfg(test)]\nmod ").next().unwrap();
    let code: String = text.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n");
    let mut paths = Vec::new();
    // `use child::…` in a module's own file names its child.
    for line in code.lines() {
        let line = line.trim_start();
        let Some(rest) = line.strip_prefix("pub use ").or_else(|| line.strip_prefix("use ")) else { continue };
        let first: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !first.is_empty() && known.contains(&format!("{module}::{first}")) {
            let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            paths.push(format!("{module}::{path}"));
        }
    }
    for (base, tail) in [("crate::", ""), ("super::", parent)] {
        for (i, _) in code.match_indices(base) {
            // `$crate::` is a macro's: it names the crate where the macro expands.
            if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
                continue;
            }
            let rest = &code[i + base.len()..];
            let prefix = if tail.is_empty() { String::new() } else { format!("{tail}::") };
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                for item in inner.split(',') {
                    paths.push(format!("{prefix}{}", item.trim()));
                }
            } else {
                let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
                paths.push(format!("{prefix}{path}"));
            }
        }
    }
    paths
        .into_iter()
        .filter_map(|p| {
            let parts: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
            (1..=parts.len()).rev().map(|k| parts[..k].join("::")).find(|m| known.contains(m))
        })
        .filter(|m| m != module)
        .collect()
}

#[test]
fn no_two_modules_of_shared_import_each_other_even_through_others() {
    let modules = modules();
    let known: BTreeSet<String> = modules.iter().map(|(m, _)| m.clone()).collect();
    assert!(known.contains("notify::sends::claim") && known.contains("booking::idempotency"), "{known:?}");
    let edges: std::collections::BTreeMap<String, BTreeSet<String>> =
        modules.iter().map(|(m, text)| (m.clone(), module_edges(m, text, &known))).collect();
    assert!(
        edges["booking::service"].contains("booking::idempotency"),
        "the edge finder sees `use super::idempotency`"
    );
    // A module that reaches itself again is a circle.
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in &edges[&at] {
                if next == start {
                    circles.push(path.join(" → ") + " → " + start);
                } else if seen.insert(next.clone()) {
                    stack.push((next.clone(), [path.clone(), vec![next.clone()]].concat()));
                }
            }
        }
    }
    assert!(circles.is_empty(), "circles in shared's module graph:\n{}", circles.join("\n"));
}

/// The wings of `notify`, from the bottom up: a wing may use wings of a
/// lower rank only (see `shared/src/notify/mod.rs`).
fn wing_rank(wing: &str) -> Option<u8> {
    Some(match wing {
        "notification" => 0,
        "sends" | "pacing" | "render" => 1,
        "mailer" => 2,
        "evidence" => 3,
        "plan" => 4,
        "deliver" => 5,
        "tracking" => 6,
        _ => return None,
    })
}

/// The wing of `notify` a module belongs to (`notify::sends::claim` →
/// `sends`).
fn wing_of(module: &str) -> Option<&str> {
    module.strip_prefix("notify::").map(|rest| rest.split("::").next().unwrap())
}

#[test]
fn no_wing_of_notify_imports_a_wing_above_or_beside_it() {
    let modules = modules();
    let known: BTreeSet<String> = modules.iter().map(|(m, _)| m.clone()).collect();
    let mut wrong = Vec::new();
    let mut wings = BTreeSet::new();
    for (module, text) in &modules {
        let Some(own) = wing_of(module) else { continue };
        wings.insert(own.to_string());
        let Some(rank) = wing_rank(own) else {
            wrong.push(format!("{module}: notify::{own} is no wing the test knows (give it a rank)"));
            continue;
        };
        for used in module_edges(module, text, &known) {
            let Some(theirs) = wing_of(&used) else { continue };
            if theirs != own && wing_rank(theirs).is_none_or(|r| r >= rank) {
                wrong.push(format!("{module} (notify::{own}) uses {used} (notify::{theirs})"));
            }
        }
    }
    assert!(wings.len() >= 8, "found the wings: {wings:?}");
    assert!(wrong.is_empty(), "imports between notify's wings that point up or sideways:\n{}", wrong.join("\n"));
}

#[test]
fn no_two_files_of_a_folder_import_each_other() {
    let modules = modules();
    let known: BTreeSet<String> = modules.iter().map(|(m, _)| m.clone()).collect();
    let edges: std::collections::BTreeMap<&str, BTreeSet<String>> =
        modules.iter().map(|(m, text)| (m.as_str(), file_edges(m, text, &known))).collect();
    assert!(
        edges["notify::sends"].contains("notify::sends::claim"),
        "the edge finder sees a module's `pub use child::…`"
    );
    // A folder's files: its mod.rs (the folder's module) and the modules
    // right under it.
    let folder_of = |m: &str| m.rsplit_once("::").map_or(String::new(), |(p, _)| p.to_string());
    let mut wrong = Vec::new();
    for (a, used) in &edges {
        for b in used {
            let same_folder = folder_of(a) == folder_of(b) || folder_of(b) == *a || folder_of(a) == *b;
            if *a < b.as_str() && same_folder && edges.get(b.as_str()).is_some_and(|back| back.contains(*a)) {
                wrong.push(format!("{a} ↔ {b}"));
            }
        }
    }
    assert!(wrong.is_empty(), "files of one folder that import each other:\n{}", wrong.join("\n"));
}

#[test]
fn no_file_of_shared_is_over_400_lines_and_no_wing_of_notify_over_a_fifth_of_it() {
    let modules = modules();
    let lines = |text: &str| text.lines().count();
    let total: usize = modules.iter().map(|(_, t)| lines(t)).sum();
    let long: Vec<String> =
        modules.iter().filter(|(_, t)| lines(t) > 400).map(|(m, t)| format!("{m}: {} lines", lines(t))).collect();
    assert!(long.is_empty(), "files over 400 lines (split them by duty):\n{}", long.join("\n"));
    let mut wings: std::collections::BTreeMap<&str, usize> = Default::default();
    for (m, t) in &modules {
        if let Some(w) = wing_of(m) {
            *wings.entry(w).or_default() += lines(t);
        }
    }
    let big: Vec<String> =
        wings.iter().filter(|(_, n)| **n * 5 >= total).map(|(w, n)| format!("notify::{w}: {n} of {total}")).collect();
    assert!(big.is_empty(), "wings of notify over a fifth of the library:\n{}", big.join("\n"));
}

/// The words of what the outbox carries and of what its consumers do: none
/// belongs in it (it could serve any aggregate).
const NOT_THE_OUTBOXS_WORDS: [&str; 11] = [
    "booking",
    "reminder",
    "attendee",
    "organizer",
    "mail",
    "recipient",
    "invitation",
    "calendar",
    "smtp",
    "ses_",
    "notify::",
];

/// The words of `NOT_THE_OUTBOXS_WORDS` in `text` (comments included: a
/// doc that explains the outbox by bookings ties it to them too).
fn foreign_words(text: &str) -> Vec<&'static str> {
    let lower = text.to_lowercase();
    NOT_THE_OUTBOXS_WORDS.iter().copied().filter(|w| lower.contains(w)).collect()
}

#[test]
fn the_outbox_check_sees_a_word_of_bookings() {
    assert_eq!(foreign_words("e.payload -> 'booking' ->> 'start'"), ["booking"]);
    assert!(foreign_words("an aggregate's events, in its lanes").is_empty());
}

#[test]
fn the_outbox_has_no_word_of_bookings_or_mail() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/src/outbox");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() >= 5, "found the outbox's sources");
    let wrong: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            foreign_words(&text).into_iter().map(move |w| format!("outbox/{rel}: {w}"))
        })
        .collect();
    assert!(wrong.is_empty(), "the outbox speaks of what it carries or who consumes it:\n{}", wrong.join("\n"));
}
