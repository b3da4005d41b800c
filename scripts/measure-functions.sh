#!/usr/bin/env bash
# `make measure-functions`: what each release Lambda costs. It builds the
# zips as `sam build` builds the functions (`cargo lambda build --release
# --bin NAME` at the workspace root), for this host's CPU so they can run
# here: target/lambda/<function>/bootstrap.zip. With MEASURE_ZIP_DIR set it
# builds nothing and measures the zips there (an absent one is skipped with
# one line).
#
# For each function:
#   zip KiB      the size of bootstrap.zip;
#   init ms      cold start: from the exec of the unzipped `bootstrap` to its
#                first GET /2018-06-01/runtime/invocation/next on a local
#                Lambda Runtime API (scripts/lib/lambda-runtime.py);
#                MEASURE_RUNS (5) fresh processes, median (min-max);
#   peak RSS MB  VmHWM of the process, read when the response of one real
#                invocation is posted (MiB, as Lambda's "Max Memory Used"):
#                  migrate         a CloudFormation custom-resource Create: it
#                                  migrates the throwaway database, then fails
#                                  to PUT its answer (the release build answers
#                                  only CloudFormation's bucket, offline here);
#                  booking-api     POST /bookings, API Gateway HTTP API
#                                  payload v2 with JWT authorizer claims,
#                                  three attendees in French, Japanese and
#                                  American English;
#                  outbox-poller   a scheduled event: sends that booking's
#                                  three invitations to moto (SES v2), each
#                                  in its language; the run lasts
#                                  MEASURE_POLLER_RUN_SECS (3, POLLER_MAX_RUN_SECS);
#                  outbox-sweeper  a scheduled event;
#                  ses-events      an SES Send event (EventBridge) for that send.
# Services: a throwaway Postgres on a free loopback port (no TLS, so
# DATABASE_TLS=disable; the functions other than migrate log in as a member
# of the booking_app role, as in production) and moto on a free loopback
# port. Everything stops on exit.
#
# Prints one table; with BENCH_RESULTS set, appends `key<TAB>value` lines to
# it: fn.<function>.zip_kib, .init_ms (median), .init_ms_min, .init_ms_max,
# .rss_mb. MEASURE_KEEP_LOGS=DIR keeps each function's output in DIR;
# MEASURE_ZIP_DIR is where prebuilt <function>/bootstrap.zip are.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/moto.sh

FUNCTIONS=(booking-api outbox-poller outbox-sweeper migrate ses-events)
RUNS="${MEASURE_RUNS:-5}"
POLLER_RUN_SECS="${MEASURE_POLLER_RUN_SECS:-3}"
for pair in "MEASURE_RUNS:$RUNS" "MEASURE_POLLER_RUN_SECS:$POLLER_RUN_SECS"; do
  case "${pair#*:}" in ''|*[!0-9]*|0) echo "error: ${pair%%:*} must be a whole number, 1 or more (got '${pair#*:}')" >&2; exit 1 ;; esac
done
# One send's worst case (SES connect + read timeout) plus the safety margin
# (0 here) must fit in POLLER_MAX_RUN_SECS, or the poller refuses to start.
SES_CONNECT_MS=500
SES_READ_MS=$(( POLLER_RUN_SECS * 1000 / 2 ))
SENDER="bookings@example.com"
HELPER=scripts/lib/lambda-runtime.py
ZIP_DIR="${MEASURE_ZIP_DIR:-target/lambda}"
ZIP_DIR="${ZIP_DIR%/}"

say() { echo "==> $*" >&2; }

TMP=""
PG_DIR=""
HELPER_PID=""
PUBLISHER_PID=""
cleanup() {
  trap '' INT TERM HUP
  set +e
  [ -n "$PUBLISHER_PID" ] && { kill "$PUBLISHER_PID" 2>/dev/null; wait "$PUBLISHER_PID" 2>/dev/null; }
  if [ -n "$HELPER_PID" ]; then
    # `timeout` passes the TERM on; the helper stops its function process.
    kill -TERM "$HELPER_PID" 2>/dev/null
    wait "$HELPER_PID" 2>/dev/null
  fi
  moto_stop
  [ -n "$PG_DIR" ] && { pg_stop "$PG_DIR"; rm -rf "$PG_DIR" "$PG_DIR.initdb.log"; }
  [ -n "$TMP" ] && rm -rf "$TMP"
  return 0
}
trap cleanup EXIT
interrupted() { echo "measure-functions: interrupted; stopping what it started" >&2; exit "$1"; }
trap 'interrupted 130' INT
trap 'interrupted 143' TERM
trap 'interrupted 129' HUP

if [ -z "${MEASURE_ZIP_DIR:-}" ]; then
  source scripts/lib/lambda.sh
  lambda_ensure_installed
  for f in "${FUNCTIONS[@]}"; do
    say "cargo lambda build --release --output-format zip --bin $f (as sam build does, for $(uname -m))"
    cargo lambda build --release --locked --output-format zip --bin "$f" >&2
  done
fi

ZIPS=()
SKIPPED=()
for f in "${FUNCTIONS[@]}"; do
  zip="$ZIP_DIR/$f/bootstrap.zip"
  if [ -s "$zip" ]; then
    ZIPS+=("$f")
  else
    echo "skip: $f: no $zip" >&2
    SKIPPED+=(--skip "$f" "no $zip")
  fi
done
[ "${#ZIPS[@]}" -gt 0 ] || { echo "error: no release zip in $ZIP_DIR" >&2; exit 1; }
has() { local f; for f in "${ZIPS[@]}"; do [ "$f" = "$1" ] && return 0; done; return 1; }

TMP="$(mktemp -d /tmp/outbox-measure.XXXXXX)"
if [ -n "${MEASURE_KEEP_LOGS:-}" ]; then
  mkdir -p "$MEASURE_KEEP_LOGS"
  LOGS="$(cd "$MEASURE_KEEP_LOGS" && pwd)"
else
  LOGS="$TMP"
fi
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

pg_ensure_installed
PG_DIR="$(mktemp -d /tmp/outbox-measure-pg.XXXXXX)"
PG_PORT="$(free_port)"
say "throwaway Postgres on 127.0.0.1:$PG_PORT"
pg_start "$PG_DIR" "$PG_PORT" fsync=off synchronous_commit=off full_page_writes=off
OWNER_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
psql_q() { PGCONNECT_TIMEOUT=5 timeout 30 "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 "$OWNER_URL" "$@"; }

moto_ensure_installed
MOTO_PORT="$(free_port)"
say "moto (SES v2) on 127.0.0.1:$MOTO_PORT"
moto_start "$MOTO_PORT" "$TMP/moto.log"
AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test timeout 60 "$MOTO_VENV/bin/python" - "$MOTO_PORT" "$SENDER" <<'PY'
import sys, boto3
port, sender = sys.argv[1], sys.argv[2]
ses = boto3.client("sesv2", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
ses.create_email_identity(EmailIdentity=sender)
PY
# SES as the poller meets it: moto never marks an identity verified, and
# the poller asks at cold start (GetEmailIdentity); the publisher in front
# answers for the identities moto holds as SES does once they are verified.
SES_PORT="$(free_port)"
python3 scripts/ses-publisher.py --listen "127.0.0.1:$SES_PORT" --upstream "http://127.0.0.1:$MOTO_PORT" \
  >"$TMP/ses-publisher.log" 2>&1 &
PUBLISHER_PID=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$SES_PORT") 2>/dev/null && break; sleep 0.1; done

# The environment of every function: the template's globals (DATABASE_TLS
# is require there; the loopback cluster has no TLS), static credentials
# as Lambda passes its role's, nothing from this shell.
common_env() { # DATABASE_URL
  cat <<ENV
DATABASE_URL=$1
DATABASE_TLS=disable
RUST_LOG=info
OUTBOX_MAX_ATTEMPTS=8
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_SESSION_TOKEN=test
ENV
}

RESULTS=()
# measure FUNCTION DEADLINE_SECS [helper options...]
measure() {
  local fn="$1" deadline="$2" rc=0 built; shift 2
  built="$(date -r "$ZIP_DIR/$fn/bootstrap.zip" '+%F %T')"
  say "$fn: $RUNS cold starts, the last with one invocation (bootstrap.zip of $built)"
  # Bounded inside (init 30 s a run, the invocation its deadline + 15 s);
  # `timeout` is the backstop.
  timeout -k 10 $(( RUNS * 45 + deadline + 60 )) python3 "$HELPER" measure --function "$fn" \
    --zip "$ZIP_DIR/$fn/bootstrap.zip" --runs "$RUNS" --env-file "$TMP/$fn.env" \
    --deadline-secs "$deadline" --out "$TMP/$fn.json" --log "$LOGS/$fn.log" "$@" &
  HELPER_PID=$!
  wait "$HELPER_PID" || rc=$?
  HELPER_PID=""
  [ "$rc" -eq 0 ] || { echo "error: measuring $fn failed (status $rc)" >&2; exit 1; }
  RESULTS+=("$TMP/$fn.json")
}

# 1. migrate: CloudFormation's Create of the SchemaMigration custom resource,
# which migrates the database. A release build answers only CloudFormation's
# response bucket over HTTPS (never a loopback URL), which is unreachable
# here: the run migrates, then fails to PUT its answer, and says so.
if has migrate; then
  STACK="arn:aws:cloudformation:us-east-1:123456789012:stack/booking-outbox/$(python3 -c 'import uuid; print(uuid.uuid4())')"
  { common_env "$OWNER_URL"; echo "CUSTOM_RESOURCE_STACK_ID=$STACK"; } >"$TMP/migrate.env"
  python3 - "$TMP/migrate.event.json" "$STACK" <<'PY'
import json, sys, uuid
stack = sys.argv[2]
token = "arn:aws:lambda:us-east-1:123456789012:function:migrate:live"
bucket = "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com"
json.dump({
    "RequestType": "Create",
    "ServiceToken": token,
    "ResponseURL": f"{bucket}/arn%3Aaws%3Acloudformation%3Aus-east-1%3A123456789012%3Astack/booking-outbox/{uuid.uuid4()}?X-Amz-Signature=local",
    "StackId": stack,
    "RequestId": str(uuid.uuid4()),
    "LogicalResourceId": "SchemaMigration",
    "ResourceType": "Custom::SchemaMigration",
    "ResourceProperties": {"ServiceToken": token, "MigrateFunctionVersion": "1"},
}, open(sys.argv[1], "w"))
PY
  measure migrate 120 --event "$TMP/migrate.event.json" --label "CFN Create" --expect-error "cannot answer CloudFormation"
  applied="$(psql_q -c "SELECT count(*) FROM refinery_schema_history")"
  [ "$applied" = "$(ls migrations/V*__*.sql | wc -l)" ] || { echo "error: the migrate run applied $applied migrations" >&2; exit 1; }
else
  # No migrate zip: the migrations as refinery applies them, each file once,
  # in version order, in a transaction (as scripts/lib/bench-peers.sh does).
  say "migrations with psql (no migrate zip)"
  for sql in $(ls migrations/V*__*.sql | sort -V); do
    PGOPTIONS="-c client_min_messages=warning" psql_q -1 -f "$sql" >/dev/null
  done
fi

# The functions log in as production's do: a login role in booking_app
# (migrations/V5), which has only the DML each table needs.
if [ "$(psql_q -c "SELECT count(*) FROM pg_roles WHERE rolname = 'booking_app'")" = 1 ]; then
  psql_q -c "CREATE ROLE booking_app_login LOGIN IN ROLE booking_app" >/dev/null
  APP_URL="postgres://booking_app_login@127.0.0.1:$PG_PORT/postgres"
else
  say "no booking_app role in this schema: the functions log in as the owner"
  APP_URL="$OWNER_URL"
fi

# 2. booking-api: POST /bookings, as API Gateway (HTTP API, payload v2)
# passes it after its JWT authorizer (tests/src/api.rs gateway_event).
if has booking-api; then
  { common_env "$APP_URL"; cat <<ENV
AUTH_MODE=jwt
DATABASE_POOL_SIZE=2
ENV
  } >"$TMP/booking-api.env"
  python3 - "$TMP/booking-api.event.json" "$SENDER" <<'PY'
import datetime, json, sys, time, uuid
day = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=7)).strftime("%Y-%m-%d")
body = json.dumps({
    "title": "Design review", "start": f"{day}T09:00:00Z", "end": f"{day}T09:30:00Z", "timezone": "Europe/Paris",
    "attendees": [{"email": "alice@example.com", "name": "Alice Attendee", "locale": "fr"},
                  {"email": "taro@example.com", "name": "山田 太郎", "timezone": "Asia/Tokyo", "locale": "ja-JP"},
                  {"email": "sam@example.com", "name": "Sam", "timezone": "America/New_York", "locale": "en-US"}],
    "description": "Agenda:\n- outbox", "location": "Room 4",
})
claims = {"sub": "sub-bob", "email": "bob@example.com", "name": "Bob Organizer", "email_verified": "true"}
now = time.time()
json.dump({
    "version": "2.0", "routeKey": "POST /bookings", "rawPath": "/bookings", "rawQueryString": "",
    "headers": {"content-type": "application/json", "authorization": "Bearer local.measure.token",
                "idempotency-key": str(uuid.uuid4()), "host": "api.example.test",
                "content-length": str(len(body))},
    "requestContext": {
        "accountId": "123456789012", "apiId": "api", "domainName": "api.example.test", "domainPrefix": "api",
        "authorizer": {"jwt": {"claims": claims, "scopes": None}},
        "http": {"method": "POST", "path": "/bookings", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1",
                 "userAgent": "measure-functions"},
        "requestId": str(uuid.uuid4()), "routeKey": "POST /bookings", "stage": "$default",
        "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)), "timeEpoch": int(now * 1000),
    },
    "body": body, "isBase64Encoded": False,
}, open(sys.argv[1], "w"))
PY
  measure booking-api 10 --event "$TMP/booking-api.event.json" --label "POST /bookings" --expect-status 201
fi

# 3. outbox-poller: a scheduled event; it runs POLLER_MAX_RUN_SECS, well
# before its deadline (20 s), and sends the booking's three invitations to moto.
if has outbox-poller; then
  { common_env "$APP_URL"; cat <<ENV
POLLER_CONCURRENCY=4
POLLER_SAFETY_MARGIN_SECS=0
POLLER_TIMEOUT_SECS=60
POLLER_MAX_RUN_SECS=$POLLER_RUN_SECS
SES_FROM_ADDRESS=Bookings <$SENDER>
SES_MAX_SEND_RATE=10
SES_ENDPOINT_URL=http://127.0.0.1:$SES_PORT
SES_CONNECT_TIMEOUT_MS=$SES_CONNECT_MS
SES_READ_TIMEOUT_MS=$SES_READ_MS
ENV
  } >"$TMP/outbox-poller.env"
  measure outbox-poller 20 --event scripts/events/schedule.json --label "scheduled"
fi

# 4. outbox-sweeper: a scheduled event.
if has outbox-sweeper; then
  { common_env "$APP_URL"; cat <<ENV
SWEEP_STUCK_AFTER_SECS=300
POLLER_TIMEOUT_SECS=60
RETENTION_DAYS=7
FEEDBACK_GRACE_SECS=900
UNKNOWN_RESENDS_MAX=3
ENV
  } >"$TMP/outbox-sweeper.env"
  measure outbox-sweeper 60 --event scripts/events/schedule.json --label "scheduled"
fi

# 5. ses-events: SES's Send event for the poller's send, tagged with its
# claim (tests/src/ses_events.rs); untagged if nothing was sent.
if has ses-events; then
  { common_env "$APP_URL"; echo "DATABASE_POOL_SIZE=2"; echo "SES_EVENTS_ACCOUNT=123456789012"; echo "SES_CONFIGURATION_SET=bookings"; } >"$TMP/ses-events.env"
  # The claim and the message id moto gave it: ses-events reads only an
  # event about the claim's own message, from its own account and region.
  sent="$(psql_q -c "SELECT id || ' ' || coalesce(provider_message_id, '') FROM booking_notification_sends WHERE recipient_email = 'alice@example.com' ORDER BY claimed_at DESC LIMIT 1" 2>/dev/null || true)"
  read -r claim message_id <<<"$sent" || true
  python3 - "$TMP/ses-events.event.json" "$SENDER" "${claim:-}" "${message_id:-}" <<'PY'
import json, sys, uuid
out, sender, claim, message_id = sys.argv[1], sys.argv[2], sys.argv[3].strip(), sys.argv[4].strip()
tags = {"ses:configuration-set": ["bookings"], "event_type": ["BOOKING_CONFIRMED"]}
if claim:
    tags["claim"] = [claim]
json.dump({
    "version": "0", "id": str(uuid.uuid4()), "detail-type": "Email Sent", "source": "aws.ses",
    "account": "123456789012", "time": "2026-11-30T12:00:01Z", "region": "us-east-1",
    "resources": ["arn:aws:ses:us-east-1:123456789012:configuration-set/bookings"],
    "detail": {"eventType": "Send", "send": {}, "mail": {
        "timestamp": "2026-11-30T12:00:00.012Z", "source": f"Bookings <{sender}>",
        "sourceArn": "arn:aws:ses:us-east-1:123456789012:identity/example.com",
        "sendingAccountId": "123456789012", "messageId": message_id or f"local-{uuid.uuid4()}",
        "destination": ["alice@example.com"], "headersTruncated": False, "tags": tags}},
}, open(out, "w"))
PY
  measure ses-events 30 --event "$TMP/ses-events.event.json" --label "SES Send${claim:+ (claim)}"
fi

# The table, in the order of FUNCTIONS.
ORDERED=()
for f in "${FUNCTIONS[@]}"; do
  [ -f "$TMP/$f.json" ] && ORDERED+=("$TMP/$f.json")
done
echo
echo "Release Lambda zips ($ZIP_DIR/*/bootstrap.zip) on this host: $(nproc) CPUs, load average $LOAD_START at the start."
echo "init: exec of bootstrap to its first /invocation/next (local Runtime API), $RUNS cold starts; peak RSS: VmHWM (MiB) after one invocation."
python3 "$HELPER" table --runs "$RUNS" ${BENCH_RESULTS:+--results "$BENCH_RESULTS"} "${SKIPPED[@]}" "${ORDERED[@]}"
[ -n "${MEASURE_KEEP_LOGS:-}" ] && say "function logs in $LOGS"
exit 0
