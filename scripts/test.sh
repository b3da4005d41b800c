#!/usr/bin/env bash
# The test command: runs the whole suite against real services.
#   - Postgres: a throwaway cluster on a free loopback port, unless
#     DATABASE_URL is set (then each test creates its own database there).
#   - SES v2: moto on a free loopback port, unless SES_ENDPOINT_URL is set.
#     Mail is read back from moto's /moto-api/data.json and parsed with
#     Python's email + icalendar (the venv's python, OUTBOX_TEST_PYTHON).
#   - the mail in a real browser: scripts/mail-screenshots.sh (Debian's
#     Chromium, headless), after the suite, unless arguments were given.
# Extra arguments go to `cargo test` (e.g. ./scripts/test.sh -- overlap).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/moto.sh

cleanup() {
  moto_stop
  [ -n "${PG_DIR:-}" ] && { pg_stop "$PG_DIR"; rm -rf "$PG_DIR" "$PG_DIR.initdb.log" "$PG_DIR.tls"; }
  return 0
}
trap cleanup EXIT INT TERM

if [ -z "${DATABASE_URL:-}" ]; then
  pg_ensure_installed
  PG_DIR="$(mktemp -d /tmp/outbox-test-pg.XXXXXX)"
  PG_PORT="$(free_port)"
  echo "==> starting a throwaway Postgres on 127.0.0.1:$PG_PORT ($PG_DIR)"
  # TLS on (plain TCP still allowed) so the TLS tests have a real server;
  # their CA goes to OUTBOX_TEST_CA_FILE.
  TLS_SETTINGS="$(pg_make_tls_certs "$PG_DIR.tls")"
  export OUTBOX_TEST_CA_FILE="$PG_DIR.tls/ca.crt"
  # Durability is irrelevant for a throwaway cluster; speed is not.
  # shellcheck disable=SC2086
  pg_start "$PG_DIR" "$PG_PORT" fsync=off synchronous_commit=off full_page_writes=off $TLS_SETTINGS
  export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
fi

moto_ensure_installed
export OUTBOX_TEST_PYTHON="${OUTBOX_TEST_PYTHON:-$PWD/$MOTO_VENV/bin/python}"
if [ -z "${SES_ENDPOINT_URL:-}" ]; then
  MOTO_PORT="$(free_port)"
  echo "==> starting moto (SES v2) on 127.0.0.1:$MOTO_PORT"
  moto_start "$MOTO_PORT" "$(mktemp /tmp/outbox-test-moto.XXXXXX.log)"
  export SES_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT"
fi

# The operator CLI runs as a real process in its tests.
cargo build --locked -q -p outboxctl
export OUTBOXCTL_BIN="$PWD/target/debug/outboxctl"

cargo test --workspace --locked "$@"
if [ "$#" -eq 0 ]; then
  ./scripts/mail-screenshots.sh
fi
