//! What `sam build` compiles: its cargo-lambda builder runs `cargo lambda
//! build --release --bin NAME` at the workspace root, so cargo resolves
//! features for the root's selection. That selection must never turn on
//! `dev` (the insecure identity headers and the fault points) in the
//! functions, as it did while every member, the test crate included, was
//! selected. `scripts/deploy-check.sh` runs the real `sam build` and scans
//! the binaries; this test catches the cause in a second.

use std::collections::BTreeSet;
use std::process::Command;

/// The features cargo turns on in `outbox-shared` for a build at the
/// workspace root, with `extra` arguments.
fn shared_features(extra: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(["tree", "--locked", "--offline", "-i", "outbox-shared", "-e", "features,normal", "--prefix", "none"])
        .args(extra)
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("outbox-shared feature \""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn a_root_build_as_sam_build_runs_it_turns_on_no_dev_switch() {
    let root = shared_features(&[]);
    assert!(!root.contains("dev"), "a build at the workspace root unifies `dev` into the functions: {root:?}");
    assert!(root.contains("ses"), "the poller's features are resolved at the root too: {root:?}");
    // The same question can see `dev`: with every member selected, it is on.
    assert!(shared_features(&["--workspace"]).contains("dev"), "the check is blind to `dev`");
}
