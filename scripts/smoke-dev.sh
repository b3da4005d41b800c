#!/usr/bin/env bash
# End-to-end smoke test of `make dev`: start the local stack on free ports
# with a throwaway data dir, POST a booking over HTTP through
# `cargo lambda watch`, see one invite per attendee in moto, each with the
# Send and Delivery events the SES event publisher published, stop it with
# SIGINT, and check that everything it started is gone.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh

export DEV_DIR="$(mktemp -d /tmp/outbox-smoke.XXXXXX)"
# The server runs as `postgres` when we are root: let it reach its data dir.
chmod 755 "$DEV_DIR"
export DEV_PG_PORT="$(free_port)" DEV_MOTO_PORT="$(free_port)" DEV_SES_PORT="$(free_port)" DEV_LAMBDA_PORT="$(free_port)"
LOG="$DEV_DIR.log"
# A background job of a non-interactive shell starts with SIGINT ignored,
# and bash cannot trap an ignored signal: restore it, as a terminal would.
setsid python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
  ./scripts/dev.sh >"$LOG" 2>&1 &
DEV_PID=$!
fail() {
  echo "smoke: FAILED: $*" >&2
  tail -n 40 "$LOG" >&2
  kill -INT "$DEV_PID" 2>/dev/null || true
  wait "$DEV_PID" 2>/dev/null || true
  exit 1
}

echo "==> smoke: waiting for make dev (ports pg $DEV_PG_PORT, moto $DEV_MOTO_PORT, ses $DEV_SES_PORT, lambda $DEV_LAMBDA_PORT)"
for _ in $(seq 1 900); do
  grep -q "the stack is up" "$LOG" && break
  kill -0 "$DEV_PID" 2>/dev/null || fail "dev.sh exited early"
  sleep 1
done
grep -q "the stack is up" "$LOG" || fail "the stack did not come up in 15 minutes"

# The curl the stack printed, with its own booking.
resp=$(curl -s -w '\n%{http_code}' -X POST "http://127.0.0.1:$DEV_LAMBDA_PORT/lambda-url/booking-api/bookings" \
  -H 'content-type: application/json' -H 'x-dev-user-email: bob@example.com' -H 'x-dev-user-name: Bob' \
  -d '{"title": "Smoke test", "start": "2031-03-03T09:00:00Z", "end": "2031-03-03T09:30:00Z", "timezone": "UTC",
       "attendees": [{"email": "alice@example.com", "name": "Alice"}, {"email": "carol@example.com", "name": "Carol"}]}')
code=$(tail -n1 <<<"$resp")
[ "$code" = "201" ] || fail "POST /bookings answered $code: $resp"
echo "==> smoke: booking created (201)"

started=$(date +%s)
for _ in $(seq 1 120); do
  mail=$(python3 scripts/mailbox.py "http://127.0.0.1:$DEV_MOTO_PORT" --json 2>/dev/null || echo '[]')
  n=$(python3 -c 'import json,sys; m=json.loads(sys.argv[1]); print(sum(1 for x in m if x["method"]=="REQUEST" and x["subject"].startswith("Invitation: Smoke test")))' "$mail")
  [ "$n" -ge 2 ] && break
  sleep 0.5
done
[ "$n" = "2" ] || fail "expected 2 invites in the mailbox, found $n"
python3 -c 'import json,sys; to=sorted(x["to"] for x in json.loads(sys.argv[1])); assert to==["alice@example.com","carol@example.com"], to' "$mail" \
  || fail "one invite per attendee expected"
echo "==> smoke: one REQUEST invite per attendee in the mailbox after $(( $(date +%s) - started ))s"
# The publisher writes the events file before it answers the poller; the
# mailbox reads it ($DEV_DIR/ses-events.jsonl).
ev=""
for _ in $(seq 1 20); do
  mail=$(python3 scripts/mailbox.py "http://127.0.0.1:$DEV_MOTO_PORT" --json 2>/dev/null || echo '[]')
  python3 -c 'import json,sys; m=[x for x in json.loads(sys.argv[1]) if x["subject"].startswith("Invitation: Smoke test")]; sys.exit(not all(x["ses_events"]==["Send","Delivery"] for x in m))' "$mail" && { ev=1; break; }
  sleep 0.5
done
[ -n "$ev" ] || fail "expected Send,Delivery SES events for each invite in $DEV_DIR/ses-events.jsonl"
echo "==> smoke: the SES event publisher published Send + Delivery for each invite"
python3 scripts/mailbox.py "http://127.0.0.1:$DEV_MOTO_PORT"

kill -INT "$DEV_PID"
for _ in $(seq 1 60); do kill -0 "$DEV_PID" 2>/dev/null || break; sleep 0.5; done
kill -0 "$DEV_PID" 2>/dev/null && fail "dev.sh did not stop on SIGINT"
sleep 1
for port in "$DEV_PG_PORT" "$DEV_MOTO_PORT" "$DEV_SES_PORT" "$DEV_LAMBDA_PORT"; do
  port_in_use "$port" && fail "port $port still in use after Ctrl-C"
done
pgrep -f "moto_server -H 127.0.0.1 -p $DEV_MOTO_PORT" >/dev/null && fail "moto survived"
pgrep -f "ses-publisher.py --listen 127.0.0.1:$DEV_SES_PORT" >/dev/null && fail "the SES event publisher survived"
pgrep -f "cargo-lambda lambda watch -A 127.0.0.1 -P $DEV_LAMBDA_PORT" >/dev/null && fail "cargo lambda watch survived"
grep -q "==> stopped" "$LOG" || fail "no clean stop"
echo "==> smoke: stopped cleanly; ports free"
rm -rf "$DEV_DIR" "$LOG"
