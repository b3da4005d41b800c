#!/usr/bin/env bash
# The API fuzzer, run by CI: schemathesis (pinned, from PyPI, in .venv/fuzz)
# against the real booking API handler behind a test-only stand-in for API
# Gateway (tests/src/bin/api-gateway.rs builds the same payload-v2 event the
# real one does; its bearer tokens `fuzz-bob` / `fuzz-alice` play the JWT
# authorizer), on a throwaway Postgres.
#
#   1. openapi.yaml must validate (openapi-spec-validator);
#   2. schemathesis runs every phase (examples, coverage, fuzzing, stateful:
#      create → read → update → cancel through the spec's links), positive
#      and negative data, every check but positive_data_acceptance (the
#      schema cannot express the start window, the IANA zone list or the
#      overlap rule, so valid-looking data is sometimes rightly refused);
#      scripts/schemathesis.toml counts 413 (a body over the size limit) as
#      the rejection it is.
# Bounded: FUZZ_MAX_EXAMPLES per operation and phase (default 50) and
# FUZZ_MAX_TIME seconds (default 180; CI's budget, raise both for a deeper run). Any failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh

FUZZ_VENV="${FUZZ_VENV:-.venv/fuzz}"
PINS=("schemathesis==4.32.5" "openapi-spec-validator==0.9.0")
FUZZ_MAX_EXAMPLES="${FUZZ_MAX_EXAMPLES:-50}"
FUZZ_MAX_TIME="${FUZZ_MAX_TIME:-180}"

# CPython 3.11.7's AST constructor trips on schemathesis's coverage phase
# ("AST constructor recursion depth mismatch"); the machine's pyenv 3.13 does not.
FUZZ_PYTHON="${FUZZ_PYTHON:-$(ls -d "$HOME"/.pyenv/versions/3.13*/bin/python3 2>/dev/null | tail -n 1)}"
FUZZ_PYTHON="${FUZZ_PYTHON:-python3}"
if [ ! -x "$FUZZ_VENV/bin/st" ] || [ ! -x "$FUZZ_VENV/bin/openapi-spec-validator" ]; then
  echo "==> installing ${PINS[*]} into $FUZZ_VENV ($("$FUZZ_PYTHON" --version))"
  "$FUZZ_PYTHON" -m venv "$FUZZ_VENV"
  "$FUZZ_VENV/bin/pip" install -q --disable-pip-version-check "${PINS[@]}"
fi

echo "==> openapi.yaml: $("$FUZZ_VENV/bin/openapi-spec-validator" openapi.yaml)"

GATEWAY_PID=""
cleanup() {
  if [ -n "$GATEWAY_PID" ]; then kill "$GATEWAY_PID" 2>/dev/null; wait "$GATEWAY_PID" 2>/dev/null || true; fi
  [ -n "${PG_DIR:-}" ] && { pg_stop "$PG_DIR"; rm -rf "$PG_DIR" "$PG_DIR.initdb.log"; }
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pg_ensure_installed
PG_DIR="$(mktemp -d /tmp/outbox-fuzz-pg.XXXXXX)"
PG_PORT="$(free_port)"
pg_start "$PG_DIR" "$PG_PORT" fsync=off synchronous_commit=off full_page_writes=off
export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres" DATABASE_TLS=disable
cargo run -q --locked -p outboxctl -- migrate >/dev/null
cargo build -q --locked -p outbox-tests --bin api-gateway

PORT="$(free_port)"
GATEWAY_LOG="$(mktemp /tmp/outbox-fuzz-gateway.XXXXXX.log)"
RUST_LOG=warn target/debug/api-gateway "127.0.0.1:$PORT" >"$GATEWAY_LOG" 2>&1 &
GATEWAY_PID=$!
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break
  kill -0 "$GATEWAY_PID" 2>/dev/null || { cat "$GATEWAY_LOG" >&2; exit 1; }
  sleep 0.1
done

echo "==> schemathesis: every phase, up to $FUZZ_MAX_EXAMPLES examples per operation and phase, at most ${FUZZ_MAX_TIME}s"
REPORT_DIR="${FUZZ_REPORT_DIR:-$(mktemp -d /tmp/outbox-fuzz-report.XXXXXX)}"
status=0
"$FUZZ_VENV/bin/st" --config-file scripts/schemathesis.toml run openapi.yaml \
  --url "http://127.0.0.1:$PORT" \
  -H "Authorization: Bearer fuzz-bob" \
  --phases examples,coverage,fuzzing,stateful \
  --mode all \
  --checks all --exclude-checks positive_data_acceptance \
  --max-examples "$FUZZ_MAX_EXAMPLES" \
  --max-time "$FUZZ_MAX_TIME" \
  --request-timeout 10 \
  --workers 2 \
  --suppress-health-check too_slow,filter_too_much \
  --report junit,ndjson --report-dir "$REPORT_DIR" \
  --no-color || status=$?
if [ "$status" -ne 0 ]; then
  echo "error: schemathesis found failures (report in $REPORT_DIR; gateway log $GATEWAY_LOG)" >&2
  tail -n 20 "$GATEWAY_LOG" >&2
  exit "$status"
fi
echo "==> fuzzing passed (report in $REPORT_DIR)"
