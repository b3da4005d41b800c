//! The library's layers point one way (see `shared/src/lib.rs`): this test
//! reads every source file of `shared/src` and fails on a `crate::…` path
//! that points up or sideways.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layer of each top-level module: a module may use modules of a lower
/// layer only; the foundations (layer 0) may also use each other.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "config" | "db" | "fault" | "telemetry" => 0,
        "outbox" => 1,
        "booking" => 2,
        "api" | "notify" => 3,
        "relay" => 4,
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
