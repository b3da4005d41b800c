#!/usr/bin/env bash
# `make dev`: the whole stack on this machine, in one command.
#   Postgres (project-local cluster in .local/pg, kept between runs)
#   + migrations + moto SES v2 (verified sender) + the SES event publisher
#   (scripts/ses-publisher.py, in front of moto: publishes each send's Send
#   and Delivery events to the ses-events function, as SES does through
#   EventBridge) + `cargo lambda watch` (all the functions on 127.0.0.1)
#   + the poller and sweeper invoked on their schedules the way EventBridge
#   would.
# Installs what is missing into git-ignored places (.venv/, .local/).
# Ctrl-C stops everything it started, and nothing else.
#
# Ports: DEV_PG_PORT (54329), DEV_MOTO_PORT (5055), DEV_SES_PORT (5056, the
# SES endpoint the functions use: the publisher), DEV_LAMBDA_PORT (9000).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/moto.sh
source scripts/lib/lambda.sh

DEV_DIR="${DEV_DIR:-$PWD/.local}"
DEV_PG_PORT="${DEV_PG_PORT:-54329}"
DEV_MOTO_PORT="${DEV_MOTO_PORT:-5055}"
DEV_SES_PORT="${DEV_SES_PORT:-5056}"
DEV_LAMBDA_PORT="${DEV_LAMBDA_PORT:-9000}"
DEV_SWEEP_EVERY="${DEV_SWEEP_EVERY:-60}"
SENDER="bookings@example.com"
mkdir -p "$DEV_DIR"

for pair in "Postgres:$DEV_PG_PORT:DEV_PG_PORT" "moto:$DEV_MOTO_PORT:DEV_MOTO_PORT" \
  "the SES event publisher:$DEV_SES_PORT:DEV_SES_PORT" "cargo lambda watch:$DEV_LAMBDA_PORT:DEV_LAMBDA_PORT"; do
  IFS=: read -r what port var <<<"$pair"
  if port_in_use "$port"; then
    echo "error: port $port (for $what) is already in use on 127.0.0.1; stop what holds it or set $var=<free port>" >&2
    exit 1
  fi
done

PIDS=()
PG_DIR="$DEV_DIR/pg"
STOPPED=""
stop_all() {
  [ -n "$STOPPED" ] && return 0
  STOPPED=1
  echo
  echo "==> stopping the local stack"
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true; done
  # Give each process group 10 s to exit, then SIGKILL what is left of it.
  for _ in $(seq 1 50); do
    alive=""
    for pid in "${PIDS[@]}"; do pgrep -g "$pid" >/dev/null 2>&1 && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.2
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  pg_stop "$PG_DIR"
  echo "==> stopped"
}
trap 'stop_all; exit 130' INT TERM
trap stop_all EXIT

# Runs a command in its own process group, so stopping it stops its children.
spawn() { setsid "$@" & PIDS+=("$!"); }

pg_ensure_installed
moto_ensure_installed
lambda_ensure_installed

echo "==> Postgres on 127.0.0.1:$DEV_PG_PORT (data in $PG_DIR)"
pg_start "$PG_DIR" "$DEV_PG_PORT"
export DATABASE_URL="postgres://postgres@127.0.0.1:$DEV_PG_PORT/postgres"
echo "==> migrations"
cargo run -q --locked -p outbox-shared --features cli --bin outboxctl -- migrate

echo "==> moto (SES v2) on 127.0.0.1:$DEV_MOTO_PORT"
spawn "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$DEV_MOTO_PORT" >"$DEV_DIR/moto.log" 2>&1
for _ in $(seq 1 100); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$DEV_MOTO_PORT/moto-api/data.json', timeout=1)" 2>/dev/null && break
  sleep 0.2
done
AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$MOTO_VENV/bin/python" - "$DEV_MOTO_PORT" "$SENDER" <<'PY'
import sys, boto3
port, sender = sys.argv[1], sys.argv[2]
ses = boto3.client("sesv2", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
ses.create_email_identity(EmailIdentity=sender)
print(f"==> verified sender identity {sender}")
PY

# moto publishes no SES events and keeps no tags: the publisher, in front of
# it, plays SES + EventBridge for every send that goes through it.
SES_INVOKE_URL="http://127.0.0.1:$DEV_LAMBDA_PORT/2015-03-31/functions/ses-events/invocations"
echo "==> SES event publisher on 127.0.0.1:$DEV_SES_PORT -> moto (logs in .local/ses-publisher.log)"
: >"$DEV_DIR/ses-events.jsonl"
spawn python3 scripts/ses-publisher.py --listen "127.0.0.1:$DEV_SES_PORT" --upstream "http://127.0.0.1:$DEV_MOTO_PORT" \
  --events-file "$DEV_DIR/ses-events.jsonl" --invoke "$SES_INVOKE_URL" >"$DEV_DIR/ses-publisher.log" 2>&1
PUBLISHER_PID=$!
ready=""
for _ in $(seq 1 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$DEV_SES_PORT/moto-api/data.json', timeout=1)" 2>/dev/null && { ready=1; break; }
  kill -0 "$PUBLISHER_PID" 2>/dev/null || break
  sleep 0.2
done
[ -n "$ready" ] || { echo "error: the SES event publisher did not come up; see .local/ses-publisher.log" >&2; cat "$DEV_DIR/ses-publisher.log" >&2; exit 1; }

cat >"$DEV_DIR/dev.env" <<ENV
DATABASE_URL=$DATABASE_URL
DATABASE_TLS=disable
AUTH_MODE=insecure-dev-headers
AWS_REGION=us-east-1
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
SES_ENDPOINT_URL=http://127.0.0.1:$DEV_SES_PORT
SES_FROM_ADDRESS="Bookings <$SENDER>"
SES_MAX_SEND_RATE=20
POLLER_IDLE_WAIT_MS=200
POLLER_SAFETY_MARGIN_SECS=3
POLLER_TIMEOUT_SECS=20
POLLER_MAX_RUN_SECS=15
SWEEP_STUCK_AFTER_SECS=60
RUST_LOG=info
ENV

echo "==> cargo lambda watch on 127.0.0.1:$DEV_LAMBDA_PORT (logs in .local/watch.log)"
# The dev feature compiles in the local identity headers; release builds lack it.
spawn cargo lambda watch -A 127.0.0.1 -P "$DEV_LAMBDA_PORT" --features outbox-shared/dev \
  --env-file "$DEV_DIR/dev.env" >"$DEV_DIR/watch.log" 2>&1
WATCH_PID=$!

URL="http://127.0.0.1:$DEV_LAMBDA_PORT/lambda-url/booking-api"
echo "==> waiting for the booking API (the first request compiles it)"
ready=""
for _ in $(seq 1 600); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'x-dev-user-email: probe@example.com' \
    "$URL/bookings/00000000-0000-0000-0000-000000000000" 2>/dev/null || true)
  if [ "$code" = "404" ]; then ready=1; break; fi
  kill -0 "$WATCH_PID" 2>/dev/null || break
  sleep 1
done
[ -n "$ready" ] || { echo "error: the booking API did not come up; see .local/watch.log" >&2; tail -n 30 "$DEV_DIR/watch.log" >&2; exit 1; }

# The first invoke of a function compiles it; the publisher gives up on an
# event after 3 x 10 s, so build ses-events now, with an event for mail this
# service did not tag (acknowledged, records nothing).
echo "==> waiting for the ses-events function (the first invoke compiles it)"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 900 -H 'content-type: application/json' \
  -d '{"detail": {"eventType": "Send", "mail": {"messageId": "dev-warm-up", "timestamp": "2030-01-01T00:00:00.000Z"}, "send": {}}}' \
  "$SES_INVOKE_URL" 2>/dev/null || true)
[ "$code" = "200" ] || echo "warning: the ses-events function did not answer (HTTP $code); the publisher retries each event 3 times, see .local/watch.log" >&2

invoke() {
  cargo lambda invoke "$1" --data-file scripts/events/schedule.json -A 127.0.0.1 -P "$DEV_LAMBDA_PORT" >>"$DEV_DIR/$1.log" 2>&1
}
# EventBridge stand-ins: the poller back to back (each run polls until near
# its 20 s timeout), the sweeper every DEV_SWEEP_EVERY seconds.
spawn bash -c "$(declare -f invoke); DEV_LAMBDA_PORT=$DEV_LAMBDA_PORT DEV_DIR='$DEV_DIR'; while true; do invoke outbox-poller || sleep 2; done"
spawn bash -c "$(declare -f invoke); DEV_LAMBDA_PORT=$DEV_LAMBDA_PORT DEV_DIR='$DEV_DIR'; while true; do invoke outbox-sweeper || true; sleep $DEV_SWEEP_EVERY; done"

cat <<MSG

==> the stack is up. Create a booking (local identity headers, AUTH_MODE=insecure-dev-headers):

curl -s -X POST $URL/bookings \\
  -H 'content-type: application/json' \\
  -H 'x-dev-user-email: bob@example.com' -H 'x-dev-user-name: Bob' \\
  -d '{"title": "Design review", "start": "2030-01-07T09:00:00Z", "end": "2030-01-07T09:30:00Z",
       "timezone": "Europe/Paris",
       "attendees": [{"email": "alice@example.com", "name": "Alice"}, {"email": "carol@example.com", "name": "Carol"}]}'

Then, seconds later, the local mailbox:  make mailbox   (or: python3 scripts/mailbox.py http://127.0.0.1:$DEV_MOTO_PORT)
SES events: the functions send through the publisher on 127.0.0.1:$DEV_SES_PORT, which publishes each
message's Send + Delivery events to the ses-events function (the mailbox's events column; .local/ses-events.jsonl).
Operator CLI:  DATABASE_URL=$DATABASE_URL cargo run -q -p outbox-shared --features cli --bin outboxctl -- status
Logs: .local/watch.log, .local/outbox-poller.log, .local/outbox-sweeper.log, .local/ses-publisher.log.  Ctrl-C stops everything.
MSG

wait "$WATCH_PID"
