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
source scripts/lib/venv.sh
ARTIFACTS_DIR="${ARTIFACTS_DIR:-$PWD/artifacts}"
OUT="$ARTIFACTS_DIR/mail"
BROWSER_VENV="${BROWSER_VENV:-.venv/browser}"
PLAYWRIGHT_PIN="playwright==1.65.2"

if ! command -v chromium >/dev/null || ! fc-list 2>/dev/null | grep -qi "CJK"; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "==> installing Debian's chromium and a CJK font (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends chromium fonts-noto-cjk fonts-dejavu-core fontconfig >/dev/null
  else
    echo "error: needs Debian's chromium and a CJK font: sudo apt-get install chromium fonts-noto-cjk" >&2
    exit 1
  fi
fi
if ! "$BROWSER_VENV/bin/python" -c 'import playwright' 2>/dev/null; then
  echo "==> installing $PLAYWRIGHT_PIN in $BROWSER_VENV (the Python package only; no browser download)"
  venv_create "$BROWSER_VENV"
  "$BROWSER_VENV/bin/pip" install -q "$PLAYWRIGHT_PIN"
fi

SAMPLES="$(mktemp -d /tmp/outbox-mail-samples.XXXXXX)"
trap 'rm -rf "$SAMPLES"' EXIT
# The workspace's features, as scripts/test.sh built it: no rebuild after it.
cargo build --workspace --locked -q --bin mail-samples
"target/debug/mail-samples" "$SAMPLES"
rm -rf "$OUT"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 timeout 600 "$BROWSER_VENV/bin/python" scripts/mail-screenshots.py \
  "$SAMPLES" "$OUT" --chromium "$(command -v chromium)"
