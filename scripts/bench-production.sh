#!/usr/bin/env bash
# The production-shape benchmark (`make bench-production`): the real release
# poller, from the same Lambda zip `sam build` packages, invoked on the
# template's schedule by scripts/lib/lambda-schedule.py, against the SES
# stand-in (the account's MaxSendRate, GetAccount, 80 ms ± 20 ms a call).
# The driver is tests/src/bin/bench-production.rs; its header says what is
# measured and which variables change it (BENCH_SCALE, BENCH_QUOTAS,
# BENCH_STREAMS, BENCH_FULL, BENCH_ONLY=trickle|burst|reminders|crash|fairness,
# BENCH_KEEP, BENCH_REMINDER_QUOTA, BENCH_FAIR_QUOTA, BENCH_FAIR_RECIPIENTS).
# Postgres: a throwaway cluster with durable settings (fsync on, as in
# production), unless DATABASE_URL is set. Loopback only; every run ends by
# itself. It ends with the continuous comparison against graphile-worker
# (scripts/bench.sh, BENCH_ONLY=comparison; BENCH_COMPARISON=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/lambda.sh

cleanup() {
  [ -n "${PG_DIR:-}" ] && { pg_stop "$PG_DIR"; rm -rf "$PG_DIR" "$PG_DIR.initdb.log"; }
  return 0
}
trap cleanup EXIT INT TERM

lambda_ensure_installed
echo "==> cargo lambda build --release --output-format zip --bin outbox-poller (as sam build does)"
cargo lambda build --release --locked --output-format zip --bin outbox-poller
export POLLER_ZIP="$PWD/target/lambda/outbox-poller/bootstrap.zip"
cargo build --locked -q -p outbox-tests --bin bench-production

if [ -z "${DATABASE_URL:-}" ]; then
  pg_ensure_installed
  PG_DIR="$(mktemp -d /tmp/outbox-bench-pg.XXXXXX)"
  PG_PORT="$(free_port)"
  pg_start "$PG_DIR" "$PG_PORT"
  export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
fi
RUST_LOG="${RUST_LOG:-error}" ./target/debug/bench-production
# Then the continuous comparison (a poller that never stops, against
# graphile-worker batched 1 x 4 at equal drain lengths), on its own cluster
# with the bench's settings; BENCH_COMPARISON=0 skips it.
if [ "${BENCH_COMPARISON:-1}" != "0" ]; then
  echo "==> the continuous comparison: scripts/bench.sh with BENCH_ONLY=comparison"
  env -u DATABASE_URL BENCH_ONLY=comparison ./scripts/bench.sh
fi
