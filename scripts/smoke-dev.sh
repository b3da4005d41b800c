#!/usr/bin/env bash
# End-to-end smoke test of `make dev`, on free ports with a throwaway data dir.
#
# Run 1: POST a booking over HTTP through `cargo lambda watch`, see one
#   invite per attendee in moto, each with the Send and Delivery events the
#   SES event publisher published. Then a stalled dev scheduler recovers by
#   itself: SIGKILL the outbox-poller function process in the middle of an
#   invocation (the invoke waits for an answer that never comes), create a
#   booking, and its invites still arrive, because the invoke times out
#   (DEV_INVOKE_TIMEOUT, low here) and the next one runs; the watchdog
#   (DEV_STALL_SECS, low here) warns during the stall and says when it is
#   over. Then Ctrl-C pressed twice quickly: two SIGINTs to make dev's
#   process group, as a terminal sends them.
# Run 2: SIGTERM to make dev's process group (make forwards one more to its
#   recipe), as a supervisor stops a job.
# After each stop: no process of the stack remains (make's group, anything
# started with the data dir), the ports are free, the clean-up ran once, to
# its end.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/smoke.sh

smoke_dev_dir ""
# A poller run lasts at most 15 s (POLLER_MAX_RUN_SECS): 25 s leaves room.
INVOKE_TIMEOUT=25
STALL_SECS=10
SMOKE_ENV=(DEV_INVOKE_TIMEOUT="$INVOKE_TIMEOUT" DEV_STALL_SECS="$STALL_SECS")

# ---- run 1 -------------------------------------------------------------------
smoke_free_ports
say "run 1: make dev (ports pg $DEV_PG_PORT, moto $DEV_MOTO_PORT, ses $DEV_SES_PORT, lambda $DEV_LAMBDA_PORT; DEV_INVOKE_TIMEOUT=$INVOKE_TIMEOUT DEV_STALL_SECS=$STALL_SECS)"
smoke_start "$DEV_DIR.run1.log"
smoke_wait_up 900
say "the stack is up"

smoke_book "Smoke test" 03
t=$(date +%s)
smoke_wait_invites "Smoke test" 60
say "one REQUEST invite per attendee, each with Send + Delivery, $(( $(date +%s) - t ))s after the booking"
smoke_mailbox
# A healthy stack logs no error on its way up (a new user reads one as a
# failure): the functions' logs (watch.log) and the publisher's.
errors=$(grep -h '"level":"ERROR"' "$DEV_DIR/watch.log" "$DEV_DIR/ses-publisher.log" 2>/dev/null | head -n 3 || true)
[ -z "$errors" ] || fail "the healthy stack logged errors on its way up: $errors"
say "no ERROR in the functions' logs on the way up"
smoke_verify
say "make verify LOCAL=1: every step it can run against make dev passed"

# (a2) The operator console in a real browser (Debian's Chromium, headless):
# the overview, a booking's timeline live, search, keyboard, the group.
source scripts/lib/browser.sh
browser_ensure
CONSOLE_OUT="${ARTIFACTS_DIR:-$PWD/artifacts}/console"
rm -rf "$CONSOLE_OUT"
timeout 300 "$BROWSER_VENV/bin/python" scripts/console-browser.py \
  "http://127.0.0.1:$DEV_LAMBDA_PORT/lambda-url/operator-console/" \
  "http://127.0.0.1:$DEV_LAMBDA_PORT/lambda-url/booking-api" "$CONSOLE_OUT" --chromium "$(command -v chromium)" \
  --psql "$PG_BIN/psql" --database-url "postgres://postgres@127.0.0.1:$DEV_PG_PORT/postgres" --dev-dir "$DEV_DIR" \
  || fail "the operator console's browser check failed (screenshots in $CONSOLE_OUT)"
say "the operator console: overview, a live timeline to Delivery, search, keyboard, the group, a dead event replayed to the mailbox once (browser)"

# (b) The README's own examples, as a reader pastes them (on this stack's port).
readme_example() { python3 scripts/lib/readme-example.py "$1" | sed "s#127.0.0.1:9000/#127.0.0.1:$DEV_LAMBDA_PORT/#g"; }
say "README: create"
read -r API ID < <({ readme_example 1; echo; echo 'echo "$API $ID"'; } | bash -euo pipefail) || fail "the README's create example failed"
[[ "$ID" =~ ^[0-9a-f-]{36}$ ]] || fail "the README's create example printed no booking id (got '$ID')"
smoke_wait_invites "Design review" 60
french=$(smoke_mailbox --json | python3 -c 'import json,sys; print(next(x["subject"] for x in json.load(sys.stdin) if x["to"]=="carol@example.com" and "Design review" in x["subject"]))')
[ "$french" = "Invitation : Design review @ lundi 7 janvier 2030 à 10:00 (heure normale d’Europe centrale)" ] \
  || fail "the README's invitation to Carol (locale fr) is not the French one it shows: $french"
# The README's `make mailbox SHOW=carol@example.com`: her message, its parts as files.
shown=$(DEV_DIR="$DEV_DIR" make -s mailbox SHOW=carol@example.com) || fail "make mailbox SHOW= failed: $shown"
grep -q '^Quand : ' <<<"$shown" || fail "make mailbox SHOW= did not print Carol's French text part: $shown"
grep -q '<html lang="fr"' "$DEV_DIR/mail/carol_at_example.com.html" || fail "make mailbox SHOW= wrote no French HTML part"
[ -s "$DEV_DIR/mail/carol_at_example.com.ics" ] || fail "make mailbox SHOW= wrote no calendar part"
say "README: make mailbox SHOW=carol@example.com prints her message and writes its parts"
say "README: where each invitation stands"
delivered=0
for _ in $(seq 1 60); do
  out=$({ echo "API=$API ID=$ID"; readme_example 2; } | bash -euo pipefail) || fail "the README's notifications example failed: $out"
  delivered=$(python3 -c 'import json,sys; print(sum(1 for r in json.load(sys.stdin)["notifications"] if r["state"] == "delivered"))' <<<"$out") \
    || fail "the README's notifications example did not answer the notifications: $out"
  [ "$delivered" = 2 ] && break
  sleep 0.5
done
[ "$delivered" = 2 ] || fail "the README's notifications example did not show both invitations delivered: $out"
say "README: reschedule and cancel"
out=$({ echo "API=$API ID=$ID"; readme_example 3; } | bash -euo pipefail) || fail "the README's PATCH/cancel example failed: $out"
grep -Eq '"version": ?2' <<<"$out" || fail "the README's PATCH did not answer version 2: $out"
grep -Eq '"status": ?"CANCELLED"' <<<"$out" || fail "the README's cancel did not answer CANCELLED: $out"
for _ in $(seq 1 120); do
  n=$(smoke_mailbox --json 2>/dev/null | python3 -c 'import json,sys; print(sum(1 for x in json.load(sys.stdin) if x["method"]=="CANCEL" and x["subject"].startswith(("Cancelled: Design review", "Annulé : Design review"))))' || echo 0)
  [ "$n" = 2 ] && break
  sleep 0.5
done
[ "$n" = 2 ] || fail "expected the README's cancel to mail both attendees, found $n"
say "the README's examples work as written: created, invited, delivered, rescheduled, cancelled"

say "README: a booking with a reminder"
out=$({ echo "API=$API"; readme_example 4; } | bash -euo pipefail) || fail "the README's reminder example failed: $out"
grep -Eq '"reminders": ?\["PT2H"\]' <<<"$out" || fail "the README's reminder example did not answer its reminder: $out"

# (b2) A reminder reaches the mailbox: make dev divides every offset by 60
# (DEV_REMINDER_SCALE), so a meeting 80 s ahead with a one-hour reminder is
# reminded 20 s from now, after its invitation, with no calendar part.
say "reminder: a meeting 80 s ahead with \"reminders\": [\"PT1H\"]"
start=$(date -u -d '+80 sec' +%FT%TZ); end=$(date -u -d '+3 min' +%FT%TZ)
resp=$(curl -s -m 30 -w '\n%{http_code}' -X POST "http://127.0.0.1:$DEV_LAMBDA_PORT/lambda-url/booking-api/bookings" \
  -H 'content-type: application/json' -H 'x-dev-user-email: bob@example.com' -H 'x-dev-user-name: Bob' \
  -d "{\"title\": \"Smoke reminder\", \"start\": \"$start\", \"end\": \"$end\", \"timezone\": \"UTC\",
       \"reminders\": [\"PT1H\"], \"attendees\": [{\"email\": \"alice@example.com\", \"name\": \"Alice\"}]}")
[ "$(tail -n1 <<<"$resp")" = 201 ] || fail "POST /bookings with a reminder answered: $resp"
t=$(date +%s)
n=0
for _ in $(seq 1 180); do
  n=$(smoke_mailbox --json 2>/dev/null | python3 -c 'import json,sys; print(sum(1 for x in json.load(sys.stdin) if x["method"]=="-" and x["subject"].startswith("Reminder: Smoke reminder")))' || echo 0)
  [ "$n" = 1 ] && break
  sleep 0.5
done
[ "$n" = 1 ] || fail "expected one reminder (no calendar part) for 'Smoke reminder' in the mailbox, found $n"
say "the reminder arrived $(( $(date +%s) - t ))s after the booking, without a calendar part"

# (c) A stalled dev scheduler recovers by itself.
say "stall: waiting for an outbox-poller invocation in flight"
victim=""
for _ in $(seq 1 120); do
  inv="" age=0
  read -r inv age < <(smoke_procs invoke outbox-poller | head -n1) || true
  # Well inside the run (a dev run polls about 6 s): a victim killed as its
  # invocation answers leaves no invoke to time out.
  if [ -n "${inv:-}" ] && [ "${age:-0}" -ge 2 ] && [ "${age:-0}" -le 4 ]; then
    victim="$(smoke_procs function outbox-poller | head -n1)"
    [ -n "$victim" ] && break
  fi
  sleep 0.5
done
[ -n "$victim" ] || fail "found no outbox-poller function process in the middle of an invocation"
timeouts_before=$(grep -c 'invoke timed out' "$DEV_DIR/outbox-poller.log" || true)
kill -KILL "$victim"
say "stall: SIGKILLed the outbox-poller function (pid $victim) ${age}s into an invocation"
smoke_book "Stall test" 04
t=$(date +%s)
smoke_wait_invites "Stall test" $(( INVOKE_TIMEOUT + 90 ))
say "stall: the invites arrived $(( $(date +%s) - t ))s after the booking"
timeouts_after=$(grep -c 'invoke timed out' "$DEV_DIR/outbox-poller.log" || true)
[ "$timeouts_after" -gt "$timeouts_before" ] \
  || fail "the invites arrived but no invoke timed out: the invoke timeout was not what rescued the schedule"
grep -q "outbox-poller invoke timed out after ${INVOKE_TIMEOUT}s" "$SMOKE_LOG" \
  || fail "make dev did not print the invoke timeout"
grep -q "WARNING (dev watchdog): the outbox is stalled" "$SMOKE_LOG" || fail "the watchdog did not warn during the stall"
grep -q "outbox-poller.log and .*watch.log" "$SMOKE_LOG" || fail "the watchdog's warning does not name the logs to read"
for _ in $(seq 1 30); do grep -q "dev watchdog: the outbox is moving again" "$SMOKE_LOG" && break; sleep 0.5; done
grep -q "dev watchdog: the outbox is moving again" "$SMOKE_LOG" || fail "the watchdog did not say the stall was over"
[ "$(grep -c 'WARNING (dev watchdog)' "$SMOKE_LOG")" = 1 ] || fail "the watchdog warned more than once for one stall"
say "stall: the invoke timed out, the next run delivered; the watchdog warned once and saw the recovery:"
grep -E 'invoke timed out|dev watchdog' "$SMOKE_LOG" | sed 's/^/    /'

# (a) Ctrl-C pressed twice quickly.
kill -INT -- "-$SMOKE_PGID"
sleep 0.3
kill -INT -- "-$SMOKE_PGID"
smoke_check_stopped "two SIGINTs" "$DEV_PG_PORT" "$DEV_MOTO_PORT" "$DEV_SES_PORT" "$DEV_LAMBDA_PORT"
pgrep -f "moto_server -H 127.0.0.1 -p $DEV_MOTO_PORT" >/dev/null && fail "moto survived"
say "Ctrl-C twice: everything stopped, ports free"

# ---- run 2 -------------------------------------------------------------------
smoke_free_ports
say "run 2: make dev (ports pg $DEV_PG_PORT, moto $DEV_MOTO_PORT, ses $DEV_SES_PORT, lambda $DEV_LAMBDA_PORT)"
smoke_start "$DEV_DIR.run2.log"
smoke_wait_up 900
say "the stack is up"
# (b) SIGTERM through make.
kill -TERM -- "-$SMOKE_PGID"
smoke_check_stopped "SIGTERM to make's process group" "$DEV_PG_PORT" "$DEV_MOTO_PORT" "$DEV_SES_PORT" "$DEV_LAMBDA_PORT"
pgrep -f "moto_server -H 127.0.0.1 -p $DEV_MOTO_PORT" >/dev/null && fail "moto survived"
say "SIGTERM through make: everything stopped, ports free"

rm -rf "$DEV_DIR" "$DEV_DIR.run1.log" "$DEV_DIR.run2.log"
say "passed"
