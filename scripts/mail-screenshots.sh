#!/usr/bin/env bash
# The mail as its recipients see it, in a real browser (issue 55): writes
# each message kind in en, fr and ja (the mail-samples binary, the real
# renderer), then opens each HTML part in Debian's Chromium, headless, at
# 390 and 900 pixels and in dark mode (scripts/mail-screenshots.py says what
# fails). The PNGs are CI's artifacts: $ARTIFACTS_DIR/mail (default
# artifacts/mail).
#
# Installs what it lacks: Debian's chromium and a CJK font (apt, as root;
# otherwise one line saying what to install), and Playwright's Python
# package in a project venv (.venv/browser). Playwright never downloads a
# browser here: it drives /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/browser.sh
ARTIFACTS_DIR="${ARTIFACTS_DIR:-$PWD/artifacts}"
OUT="$ARTIFACTS_DIR/mail"
browser_ensure

SAMPLES="$(mktemp -d /tmp/outbox-mail-samples.XXXXXX)"
trap 'rm -rf "$SAMPLES"' EXIT
# The workspace's features, as scripts/test.sh built it: no rebuild after it.
cargo build --workspace --locked -q --bin mail-samples
"target/debug/mail-samples" "$SAMPLES"
rm -rf "$OUT"
timeout 600 "$BROWSER_VENV/bin/python" scripts/mail-screenshots.py \
  "$SAMPLES" "$OUT" --chromium "$(command -v chromium)"
