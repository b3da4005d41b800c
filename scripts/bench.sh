#!/usr/bin/env bash
# The poller benchmark, against a throwaway Postgres (or DATABASE_URL).
# The cluster has the same settings as the test cluster (fsync=off); set
# BENCH_DURABLE=1 for fsync=on. Figures are printed beside an
# insert-and-commit baseline measured in the same run on the same database.
# Then, on the same cluster (each in a database of its own): graphile-worker
# with its own perf method (BENCH_PEERS=0 skips it, BENCH_PEERS=required
# fails without node/npm) and the SQL of POST /bookings with pgbench; see
# scripts/lib/bench-peers.sh. The 1-poller drain and graphile-worker's
# batched 1 x 4 presets (no-op jobs, and equal work: a claim row committed
# before each recipient's no-op send and its outcome after) run again,
# interleaved (BENCH_ROUNDS rounds in all, default 2), and each side's best
# round counts; BENCH_ONLY=comparison runs
# only those rounds. Then GET /bookings with BENCH_LISTING_BOOKINGS (default
# 100,000) bookings in the table (tests/benches/listing.rs): p50/p99 of the
# organizer's first and next page and the attendee's first page, beside
# GET /bookings/{id} and the page's bare SQL; BENCH_ONLY=listing runs only
# that. Then the operator console's overview and a booking's timeline with
# BENCH_CONSOLE_EVENTS (default 1,000,000) events and three times as many
# sends in history, beside the same pages on an empty history
# (tests/benches/console.rs; BENCH_ONLY=console runs only that). Last, the held-snapshot stress (tests/benches/stress.rs)
# and graphile-worker under the same stress; BENCH_ONLY=stress runs only
# that, BENCH_STATEMENTS=1 adds each drain's statement costs. The poller
# bench also drains once more with BENCH_FUTURE_REMINDERS (default
# 1,000,000) reminders due later in the table, beside the same drain
# without (BENCH_ONLY=reminders runs only that pair), and, at the template's
# defaults with each message rendered, BENCH_LANGUAGE_EVENTS (default
# 30,000) invitations to three recipients in three languages beside the
# same with nobody naming one (BENCH_ONLY=languages runs only that pair,
# after messages rendered a second, each kind in en-US, fr and ja).
# BENCH_ONLY=smtp
# runs only the SMTP bench (tests/benches/smtp.rs: the poller through the
# SMTP mailer beside a bare SMTP client, against the local test server). All figures go
# to $BENCH_RESULTS (key<TAB>value; a temporary file unless set) and are
# printed as one table at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/bench-peers.sh

cleanup() {
  [ -n "${PG_DIR:-}" ] && { pg_stop "$PG_DIR"; rm -rf "$PG_DIR" "$PG_DIR.initdb.log"; }
  [ -n "${RESULTS_TMP:-}" ] && rm -f "$RESULTS_TMP"
  return 0
}
trap cleanup EXIT INT TERM

if [ -z "${DATABASE_URL:-}" ]; then
  pg_ensure_installed
  PG_DIR="$(mktemp -d /tmp/outbox-bench-pg.XXXXXX)"
  PG_PORT="$(free_port)"
  if [ "${BENCH_DURABLE:-0}" = "1" ]; then
    pg_start "$PG_DIR" "$PG_PORT"
  else
    pg_start "$PG_DIR" "$PG_PORT" fsync=off synchronous_commit=off full_page_writes=off \
      shared_preload_libraries=pg_stat_statements
  fi
  export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
fi
if [ -z "${BENCH_RESULTS:-}" ]; then
  RESULTS_TMP="$(mktemp /tmp/outbox-bench-results.XXXXXX)"
  export BENCH_RESULTS="$RESULTS_TMP"
fi
: >"$BENCH_RESULTS"
listing() {
  RUST_LOG="${RUST_LOG:-error}" cargo bench --locked -p outbox-tests --bench listing
}
console_pages() {
  RUST_LOG="${RUST_LOG:-error}" cargo bench --locked -p outbox-tests --bench console
}
stress() {
  RUST_LOG="${RUST_LOG:-error}" cargo bench --locked -p outbox-tests --bench stress
  bench_peers stress
}
if [ "${BENCH_ONLY:-}" = "listing" ]; then
  listing
  python3 scripts/lib/bench-table.py "$BENCH_RESULTS"
  exit 0
fi
if [ "${BENCH_ONLY:-}" = "console" ]; then
  console_pages
  python3 scripts/lib/bench-table.py "$BENCH_RESULTS"
  exit 0
fi
if [ "${BENCH_ONLY:-}" = "smtp" ]; then
  # The local SMTP test server (aiosmtpd) lives in the moto venv.
  source scripts/lib/moto.sh
  moto_ensure_installed
  OUTBOX_TEST_PYTHON="$PWD/$MOTO_VENV/bin/python" RUST_LOG="${RUST_LOG:-error}" \
    cargo bench --locked -p outbox-tests --bench smtp
  exit 0
fi
if [ "${BENCH_ONLY:-}" = "reminders" ]; then
  # The drain with and without BENCH_FUTURE_REMINDERS (default 1,000,000)
  # reminders due later in outbox_events.
  RUST_LOG="${RUST_LOG:-error}" cargo bench --locked -p outbox-tests --bench poller
  python3 scripts/lib/bench-table.py "$BENCH_RESULTS"
  exit 0
fi
if [ "${BENCH_ONLY:-}" = "languages" ]; then
  # The drain with every message rendered, its three recipients in three
  # languages, beside the same drain with nobody naming a language.
  BENCH_ONLY=languages RUST_LOG="${RUST_LOG:-error}" cargo bench --locked -p outbox-tests --bench poller
  python3 scripts/lib/bench-table.py "$BENCH_RESULTS"
  exit 0
fi
if [ "${BENCH_ONLY:-}" = "stress" ]; then
  stress
  python3 scripts/lib/bench-table.py "$BENCH_RESULTS"
  exit 0
fi
# BENCH_ONLY=comparison: only the interleaved rounds below.
first_round=1
if [ "${BENCH_ONLY:-}" != "comparison" ]; then
  RUST_LOG="${RUST_LOG:-error}" cargo bench --locked -p outbox-tests --bench poller
  bench_peers
  first_round=2
fi
# The 1-process comparison (again), interleaved with its peer: BENCH_ROUNDS
# rounds in all (default 2). The table takes each side's best round, so one
# slow minute of this shared machine does not decide the ratio.
# Odd rounds run the project first, even rounds the peer: whichever runs
# first on a fresh cluster also pays for creating its WAL segments.
project_drain() {
  BENCH_ONLY=throughput BENCH_POLLERS=1 BENCH_PRODUCTION_DRAIN=0 RUST_LOG="${RUST_LOG:-error}" \
    cargo bench --locked -p outbox-tests --bench poller
}
for round in $(seq "$first_round" "${BENCH_ROUNDS:-2}"); do
  echo "==> round $round, interleaved: the project's 1-poller drain and graphile-worker batched 1 x 4 (no-op jobs, then equal work)" >&2
  if [ $((round % 2)) -eq 1 ]; then
    project_drain
    BENCH_PEER_PRESETS=batched.p1c4,equalwork.p1c4 bench_peers
  else
    BENCH_PEER_PRESETS=batched.p1c4,equalwork.p1c4 bench_peers
    project_drain
  fi
done
[ "${BENCH_ONLY:-}" = "comparison" ] || { bench_api_sql; listing; console_pages; stress; }
python3 scripts/lib/bench-table.py "$BENCH_RESULTS"
