#!/usr/bin/env bash
# The test command: runs the whole suite against real services.
#   - Postgres: a throwaway cluster on a free loopback port, unless
#     DATABASE_URL is set (then each test creates its own database there).
# Extra arguments go to `cargo test` (e.g. ./scripts/test.sh -- overlap).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh

cleanup() {
  [ -n "${PG_DIR:-}" ] && { pg_stop "$PG_DIR"; rm -rf "$PG_DIR" "$PG_DIR.initdb.log"; }
  return 0
}
trap cleanup EXIT INT TERM

if [ -z "${DATABASE_URL:-}" ]; then
  pg_ensure_installed
  PG_DIR="$(mktemp -d /tmp/outbox-test-pg.XXXXXX)"
  PG_PORT="$(free_port)"
  echo "==> starting a throwaway Postgres on 127.0.0.1:$PG_PORT ($PG_DIR)"
  # Durability is irrelevant for a throwaway cluster; speed is not.
  pg_start "$PG_DIR" "$PG_PORT" fsync=off synchronous_commit=off full_page_writes=off
  export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
fi

cargo test --workspace --locked "$@"
