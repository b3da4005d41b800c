#!/usr/bin/env bash
# The code's habits, checked in CI: formatting (rustfmt.toml), clippy with
# every warning an error, and the docs (intra-doc links included) built
# with every warning an error.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "==> cargo fmt --check"
cargo fmt --all --check
echo "==> cargo clippy (all targets, -D warnings)"
cargo clippy --workspace --all-targets --locked -q -- -D warnings
echo "==> cargo doc (-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked -q
