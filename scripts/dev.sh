#!/usr/bin/env bash
# `make dev`: the whole stack on this machine, in one command.
#   Postgres (project-local cluster in .local/pg, kept between runs)
#   + migrations + moto SES v2 (verified sender) + the SES event publisher
#   (scripts/ses-publisher.py, in front of moto: publishes each send's Send
#   and Delivery events to the ses-events function, as SES does through
#   EventBridge) + `cargo lambda watch` (all the functions on 127.0.0.1)
#   + the poller and sweeper invoked on their schedules the way EventBridge
#   would (each invoke under a timeout, DEV_INVOKE_TIMEOUT, default 60 s)
#   + a watchdog that warns when due outbox events wait longer than
#   DEV_STALL_SECS (default 60).
# Installs what is missing into git-ignored places (.venv/, .local/).
# Ctrl-C (or SIGTERM) stops everything it started, and nothing else; the
# clean-up runs to its end whatever signals arrive meanwhile.
#
# `make dev LOCALSTACK=1`: the functions read the database settings the way
# they do in AWS, from a Secrets Manager secret (DATABASE_SECRET_ARN, no
# DATABASE_URL), served by LocalStack: the one at LOCALSTACK_ENDPOINT
# (default http://127.0.0.1:4566), or, if none answers there, one installed
# into .venv/localstack and started on the host (no Docker). SES v2 goes to
# LocalStack only if it emulates it (a paid LocalStack with
# LOCALSTACK_AUTH_TOKEN); the free edition answers 501, so moto stays.
#
# `make dev MAILER=smtp`: the poller sends through SMTP instead, to a local
# SMTP server (scripts/smtp-server.py: aiosmtpd with STARTTLS required, a
# CA made in $DEV_DIR/smtp-tls, AUTH, and a mailbox file that `make mailbox`
# reads); no moto, no SES events.
#
# Ports: DEV_PG_PORT (54329), DEV_MOTO_PORT (5055), DEV_SES_PORT (5056, the
# SES endpoint the functions use: the publisher), DEV_SMTP_PORT (5025, with
# MAILER=smtp), DEV_LAMBDA_PORT (9000).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/moto.sh
source scripts/lib/lambda.sh
source scripts/lib/localstack.sh

DEV_DIR="${DEV_DIR:-$PWD/.local}"
DEV_PG_PORT="${DEV_PG_PORT:-54329}"
DEV_MOTO_PORT="${DEV_MOTO_PORT:-5055}"
DEV_SES_PORT="${DEV_SES_PORT:-5056}"
DEV_LAMBDA_PORT="${DEV_LAMBDA_PORT:-9000}"
DEV_SMTP_PORT="${DEV_SMTP_PORT:-5025}"
MAILER="${MAILER:-ses}"
DEV_SWEEP_EVERY="${DEV_SWEEP_EVERY:-60}"
DEV_INVOKE_TIMEOUT="${DEV_INVOKE_TIMEOUT:-60}"
DEV_FIRST_INVOKE_TIMEOUT="${DEV_FIRST_INVOKE_TIMEOUT:-900}"
DEV_STALL_SECS="${DEV_STALL_SECS:-60}"
LOCALSTACK="${LOCALSTACK:-0}"
LOCALSTACK_ENDPOINT="${LOCALSTACK_ENDPOINT:-http://127.0.0.1:4566}"
SENDER="bookings@example.com"
for pair in "DEV_INVOKE_TIMEOUT:$DEV_INVOKE_TIMEOUT" "DEV_FIRST_INVOKE_TIMEOUT:$DEV_FIRST_INVOKE_TIMEOUT" \
  "DEV_STALL_SECS:$DEV_STALL_SECS" "DEV_SWEEP_EVERY:$DEV_SWEEP_EVERY"; do
  case "${pair#*:}" in ''|*[!0-9]*|0) echo "error: ${pair%%:*} must be a whole number of seconds, 1 or more (got '${pair#*:}')" >&2; exit 1 ;; esac
done
case "$MAILER" in
  ses|smtp) ;;
  *) echo "error: MAILER must be ses or smtp (got '$MAILER')" >&2; exit 1 ;;
esac
case "$LOCALSTACK" in
  1|true|yes) LOCALSTACK=1 ;;
  0|false|no|"") LOCALSTACK="" ;;
  *) echo "error: LOCALSTACK must be 1 or 0 (got '$LOCALSTACK')" >&2; exit 1 ;;
esac
mkdir -p "$DEV_DIR"
# Paths in messages: relative to the project when inside it.
shown() { case "$1" in "$PWD"/*) echo "${1#"$PWD"/}" ;; *) echo "$1" ;; esac; }
LOGS="$(shown "$DEV_DIR")"

check_port() {
  if port_in_use "$2"; then
    echo "error: port $2 (for $1) is already in use on 127.0.0.1; stop what holds it or set $3=<free port>" >&2
    exit 1
  fi
}
check_port Postgres "$DEV_PG_PORT" DEV_PG_PORT
check_port "cargo lambda watch" "$DEV_LAMBDA_PORT" DEV_LAMBDA_PORT
if [ "$MAILER" = smtp ]; then
  check_port "the local SMTP server" "$DEV_SMTP_PORT" DEV_SMTP_PORT
else
  check_port "the SES event publisher" "$DEV_SES_PORT" DEV_SES_PORT
  # With LOCALSTACK=1 moto is needed only if LocalStack has no SES v2: checked then.
  [ -n "$LOCALSTACK" ] || check_port moto "$DEV_MOTO_PORT" DEV_MOTO_PORT
fi

PIDS=()
PG_DIR="$DEV_DIR/pg"
STOPPING=""
# Runs to its end whatever arrives meanwhile: a second Ctrl-C, make's SIGTERM
# (make forwards one to its recipe when it is itself terminated), a hang-up.
# The commands it runs inherit the ignored signals, so a second Ctrl-C at the
# terminal does not cut them short either.
stop_all() {
  trap '' INT TERM HUP
  [ -n "$STOPPING" ] && return 0
  STOPPING=1
  set +e
  echo
  echo "==> stopping the local stack"
  # Each spawned command leads its own session, but not everything it starts
  # stays there: `timeout` makes a process group of its own, and cargo lambda
  # watch runs each function in a session of its own. So: the sessions, the
  # groups, and every descendant, found before anything is signalled.
  local pid extra alive
  extra="$(descendants "${PIDS[@]}")"
  for pid in "${PIDS[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null
    pkill -TERM -s "$pid" 2>/dev/null
  done
  # shellcheck disable=SC2086
  [ -n "$extra" ] && kill -TERM $extra 2>/dev/null
  # Give them 10 s to exit, then SIGKILL what is left.
  for _ in $(seq 1 50); do
    alive=""
    for pid in "${PIDS[@]}"; do
      if pgrep -s "$pid" >/dev/null 2>&1 || pgrep -g "$pid" >/dev/null 2>&1; then alive=1; fi
    done
    for pid in $extra; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ -z "$alive" ] && break
    sleep 0.2
  done
  for pid in "${PIDS[@]}"; do
    kill -KILL -- "-$pid" 2>/dev/null
    pkill -KILL -s "$pid" 2>/dev/null
  done
  # shellcheck disable=SC2086
  [ -n "$extra" ] && kill -KILL $extra 2>/dev/null
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  pg_stop "$PG_DIR"
  echo "==> stopped"
}
on_signal() {
  trap '' INT TERM HUP
  # A signal that arrives while stop_all runs returns to it.
  [ -n "$STOPPING" ] && return 0
  stop_all
  exit "$1"
}
# Ctrl-C is how a user stops the stack: once everything has stopped cleanly
# that is success, so make reports no "Error 130".
trap 'on_signal 0' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP
trap stop_all EXIT

# descendants PID...: every process below the given ones.
descendants() {
  [ "$#" -gt 0 ] || return 0
  ps -eo pid=,ppid= | awk -v roots="$*" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) seen[r[i]] = 1 }
    { parent[$1] = $2 }
    END { do { more = 0; for (p in parent) if (!(p in seen) && (parent[p] in seen)) { seen[p] = 1; more = 1; print p } } while (more) }'
}

# Runs a command in its own session (and process group), so stopping it
# stops its children.
spawn() { setsid "$@" & PIDS+=("$!"); }

# wait_http URL PID TRIES: true once URL answers (any HTTP status), false if
# PID exits first or after TRIES x 0.2 s.
wait_http() {
  local url="$1" pid="$2" tries="$3"
  for _ in $(seq 1 "$tries"); do
    curl -s -o /dev/null -m 1 "$url" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

pg_ensure_installed
# As root the server runs as `postgres`, which cannot enter a checkout under
# a private directory (root's home, a mode-700 parent, as in a container):
# the cluster then lives under /var/tmp, one per checkout, kept between
# runs like .local/pg; everything else stays in DEV_DIR.
if ! pg_reachable "$PG_DIR"; then
  rmdir "$PG_DIR" 2>/dev/null || true
  PG_DIR="/var/tmp/outbox-dev-$(printf '%s' "$PWD" | sha1sum | cut -c1-12)/pg"
  mkdir -p "$(dirname "$PG_DIR")"
  echo "==> the postgres user cannot reach $(shown "$DEV_DIR"); its cluster goes to $PG_DIR instead"
fi
moto_ensure_installed  # with LOCALSTACK=1 too: its boto3 talks to LocalStack
lambda_ensure_installed

echo "==> Postgres on 127.0.0.1:$DEV_PG_PORT (data in $(shown "$PG_DIR"))"
pg_start "$PG_DIR" "$DEV_PG_PORT"
# Only the migrations and the operator CLI get the URL; the functions get it
# from dev.env, or, with LOCALSTACK=1, read the secret instead.
DATABASE_URL="postgres://postgres@127.0.0.1:$DEV_PG_PORT/postgres"
echo "==> migrations"
DATABASE_URL="$DATABASE_URL" cargo run -q --locked -p outboxctl -- migrate

SES_BACKEND=moto
# The configuration set the poller sends with (created in moto below), and
# the only one whose events ses-events reads (SES_CONFIGURATION_SET).
DEV_SES_CONFIGURATION_SET=bookings-dev
SES_UPSTREAM="http://127.0.0.1:$DEV_MOTO_PORT"
if [ -n "$LOCALSTACK" ]; then
  LOCALSTACK_ENDPOINT="${LOCALSTACK_ENDPOINT%/}"
  if localstack_answers "$LOCALSTACK_ENDPOINT"; then
    echo "==> LocalStack: using the one already running at $LOCALSTACK_ENDPOINT (left running on exit)"
  else
    read -r ls_host ls_port < <(localstack_host_port "$LOCALSTACK_ENDPOINT") || true
    if [ -z "${ls_port:-}" ]; then
      echo "error: no LocalStack answers at LOCALSTACK_ENDPOINT=$LOCALSTACK_ENDPOINT, and one can only be started at an http://127.0.0.1:PORT address" >&2
      exit 1
    fi
    if port_in_use "$ls_port"; then
      echo "error: port $ls_port (LOCALSTACK_ENDPOINT=$LOCALSTACK_ENDPOINT) is in use but is not LocalStack (no /_localstack/health); stop what holds it or set LOCALSTACK_ENDPOINT=http://127.0.0.1:<free port>" >&2
      exit 1
    fi
    localstack_ensure_installed
    echo "==> LocalStack (Secrets Manager, SES) on $ls_host:$ls_port, no Docker (logs in $LOGS/localstack.log)"
    localstack_command "$ls_host" "$ls_port" "$DEV_DIR/localstack"
    spawn "${LOCALSTACK_CMD[@]}" >"$DEV_DIR/localstack.log" 2>&1
    LS_PID=$!
    ready=""
    for _ in $(seq 1 300); do
      localstack_answers "$LOCALSTACK_ENDPOINT" && { ready=1; break; }
      kill -0 "$LS_PID" 2>/dev/null || break
      sleep 0.2
    done
    [ -n "$ready" ] || { echo "error: LocalStack did not come up at $LOCALSTACK_ENDPOINT; see $LOGS/localstack.log" >&2; tail -n 30 "$DEV_DIR/localstack.log" >&2; exit 1; }
  fi
  # The database secret, in the RDS format the functions read (host, port,
  # username, password, dbname, engine), and whether LocalStack has SES v2.
  # The cluster trusts loopback connections: the password is not checked.
  ls_out="$(AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$MOTO_VENV/bin/python" - \
    "$LOCALSTACK_ENDPOINT" "$DEV_PG_PORT" "$SENDER" <<'PY'
import json, sys, boto3, botocore
endpoint, port, sender = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kw = dict(endpoint_url=endpoint, region_name="us-east-1")
sm = boto3.client("secretsmanager", **kw)
name = "booking-outbox/dev/database"
value = json.dumps({"engine": "postgres", "host": "127.0.0.1", "port": port, "username": "postgres",
                    "password": "local-dev-trust-auth", "dbname": "postgres"})
try:
    arn = sm.create_secret(Name=name, SecretString=value)["ARN"]
except sm.exceptions.ResourceExistsException:
    arn = sm.put_secret_value(SecretId=name, SecretString=value)["ARN"]
print("arn", arn)
# The probe is the call the stack needs anyway: verifying the sender. Its
# URI is the same in every botocore (ListEmailIdentities moved in newer ones,
# and an older LocalStack cannot even route it: 500, not 501).
ses = boto3.client("sesv2", **kw)
try:
    ses.create_email_identity(EmailIdentity=sender)
    print("sesv2 yes")
except ses.exceptions.AlreadyExistsException:
    print("sesv2 yes")
except botocore.exceptions.ClientError as e:
    err = e.response.get("Error", {})
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
    message = " ".join((err.get("Message") or err.get("Code") or "").split())
    print("sesv2 no", status, message[:160])
except Exception as e:  # not an AWS answer at all
    print("sesv2 no", "?", " ".join(str(e).split())[:160])
PY
  )" || { echo "error: could not set up the database secret in LocalStack at $LOCALSTACK_ENDPOINT" >&2; exit 1; }
  DB_SECRET_ARN="$(sed -n 's/^arn //p' <<<"$ls_out")"
  echo "==> database secret in LocalStack Secrets Manager: $DB_SECRET_ARN"
  sesv2="$(sed -n 's/^sesv2 //p' <<<"$ls_out")"
  if [ "$MAILER" = smtp ]; then
    :
  elif [ "$sesv2" = yes ]; then
    SES_BACKEND=localstack
    SES_UPSTREAM="$LOCALSTACK_ENDPOINT"
    echo "==> SES v2: LocalStack answers it; sending through LocalStack (verified sender $SENDER)"
  else
    sesv2="${sesv2#no }"
    echo "==> SES v2: LocalStack answered HTTP ${sesv2%% *} (\"${sesv2#* }\"): its free edition emulates SES v1, not v2, so SES v2 stays on moto"
    check_port moto "$DEV_MOTO_PORT" DEV_MOTO_PORT
  fi
fi

SMTP_DEV_USER=dev
SMTP_DEV_PASSWORD=local-dev-smtp-password
if [ "$MAILER" = smtp ]; then
  SES_BACKEND=smtp
  SES_UPSTREAM="$DEV_DIR/smtp-mailbox.jsonl"
  echo "==> SMTP server on 127.0.0.1:$DEV_SMTP_PORT (STARTTLS required, AUTH; mailbox $(shown "$SES_UPSTREAM"), logs in $LOGS/smtp.log)"
  spawn "$MOTO_VENV/bin/python" scripts/smtp-server.py --listen "127.0.0.1:$DEV_SMTP_PORT" --tls starttls \
    --tls-dir "$DEV_DIR/smtp-tls" --auth "$SMTP_DEV_USER:$SMTP_DEV_PASSWORD" --mailbox "$SES_UPSTREAM" \
    >"$DEV_DIR/smtp.log" 2>&1
  SMTP_PID=$!
  ready=""
  for _ in $(seq 1 50); do
    grep -q '^ready ' "$DEV_DIR/smtp.log" 2>/dev/null && { ready=1; break; }
    kill -0 "$SMTP_PID" 2>/dev/null || break
    sleep 0.2
  done
  [ -n "$ready" ] || { echo "error: the SMTP server did not come up; see $LOGS/smtp.log" >&2; cat "$DEV_DIR/smtp.log" >&2; exit 1; }
elif [ "$SES_BACKEND" = moto ]; then
  echo "==> moto (SES v2) on 127.0.0.1:$DEV_MOTO_PORT"
  spawn "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$DEV_MOTO_PORT" >"$DEV_DIR/moto.log" 2>&1
  wait_http "http://127.0.0.1:$DEV_MOTO_PORT/moto-api/data.json" "$!" 100 \
    || { echo "error: moto did not come up; see $LOGS/moto.log" >&2; tail -n 30 "$DEV_DIR/moto.log" >&2; exit 1; }
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$MOTO_VENV/bin/python" - "$DEV_MOTO_PORT" "$SENDER" "$DEV_SES_CONFIGURATION_SET" <<'PY'
import sys, boto3
port, sender, config_set = sys.argv[1], sys.argv[2], sys.argv[3]
ses = boto3.client("sesv2", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
ses.create_email_identity(EmailIdentity=sender)
print(f"==> verified sender identity {sender}")
ses.create_configuration_set(ConfigurationSetName=config_set)
print(f"==> configuration set {config_set}")
PY
fi
# What `make mailbox` reads.
printf 'SES_BACKEND=%s\nSES_UPSTREAM=%s\n' "$SES_BACKEND" "$SES_UPSTREAM" >"$DEV_DIR/mailbox.env"

# moto (and LocalStack) publish no SES events and keep no tags: the
# publisher, in front, plays SES + EventBridge for every send through it.
SES_INVOKE_URL="http://127.0.0.1:$DEV_LAMBDA_PORT/2015-03-31/functions/ses-events/invocations"
# The account SES "publishes" as; ses-events reads only that account's
# events (SES_EVENTS_ACCOUNT, in dev.env below), in AWS_REGION, of the
# configuration set the poller sends with (DEV_SES_CONFIGURATION_SET).
DEV_SES_ACCOUNT=123456789012
if [ "$MAILER" = ses ]; then
  echo "==> SES event publisher on 127.0.0.1:$DEV_SES_PORT -> $SES_UPSTREAM (logs in $LOGS/ses-publisher.log)"
  : >"$DEV_DIR/ses-events.jsonl"
  spawn python3 scripts/ses-publisher.py --listen "127.0.0.1:$DEV_SES_PORT" --upstream "$SES_UPSTREAM" \
    --account "$DEV_SES_ACCOUNT" --region us-east-1 \
    --events-file "$DEV_DIR/ses-events.jsonl" --invoke "$SES_INVOKE_URL" >"$DEV_DIR/ses-publisher.log" 2>&1
  wait_http "http://127.0.0.1:$DEV_SES_PORT/" "$!" 50 \
    || { echo "error: the SES event publisher did not come up; see $LOGS/ses-publisher.log" >&2; cat "$DEV_DIR/ses-publisher.log" >&2; exit 1; }
fi

if [ -n "$LOCALSTACK" ]; then
  # The production path: DbConfig::from_env reads DATABASE_SECRET_ARN with
  # the AWS SDK; aws-config's defaults().load() honours the service-specific
  # endpoint variable.
  DB_ENV="DATABASE_SECRET_ARN=$DB_SECRET_ARN
AWS_ENDPOINT_URL_SECRETS_MANAGER=$LOCALSTACK_ENDPOINT"
else
  DB_ENV="DATABASE_URL=$DATABASE_URL"
fi
# The poller starts no send unless one send's worst case (SES connect + read
# timeout) and the safety margin fit before its deadline, which locally is
# POLLER_MAX_RUN_SECS (cargo lambda watch reports no usable one): 1 + 5 + 3 s
# leave each 15 s run 6 s of polling. With the defaults (3 + 10 s)
# nothing would fit and no run would ever claim an event.
# Also what the banner's outboxctl line needs, or it judges stuck rows by
# the production defaults.
DEV_POLLER_TIMEOUT_SECS=20
DEV_SWEEP_STUCK_AFTER_SECS=60
cat >"$DEV_DIR/dev.env" <<ENV
$DB_ENV
DATABASE_TLS=disable
AUTH_MODE=insecure-dev-headers
DEV_REMINDER_SCALE=60
AWS_REGION=us-east-1
SES_EVENTS_ACCOUNT=$DEV_SES_ACCOUNT
SES_CONFIGURATION_SET=$DEV_SES_CONFIGURATION_SET
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
SES_ENDPOINT_URL=http://127.0.0.1:$DEV_SES_PORT
SES_FROM_ADDRESS="Bookings <$SENDER>"
SES_MAX_SEND_RATE=20
SES_CONNECT_TIMEOUT_MS=1000
SES_READ_TIMEOUT_MS=5000
POLLER_IDLE_WAIT_MS=200
POLLER_SAFETY_MARGIN_SECS=3
POLLER_TIMEOUT_SECS=$DEV_POLLER_TIMEOUT_SECS
POLLER_MAX_RUN_SECS=15
SWEEP_STUCK_AFTER_SECS=$DEV_SWEEP_STUCK_AFTER_SECS
RUST_LOG=info
ENV
if [ "$MAILER" = smtp ]; then
  # The same 1 + 5 s worst case as SES's above.
  cat >>"$DEV_DIR/dev.env" <<ENV
MAILER=smtp
SMTP_URL=smtp://127.0.0.1:$DEV_SMTP_PORT
SMTP_FROM_ADDRESS="Bookings <$SENDER>"
SMTP_CA_FILE=$DEV_DIR/smtp-tls/ca.crt
SMTP_USERNAME=$SMTP_DEV_USER
SMTP_PASSWORD=$SMTP_DEV_PASSWORD
SMTP_CONNECT_TIMEOUT_MS=1000
SMTP_SEND_TIMEOUT_MS=5000
ENV
fi

echo "==> cargo lambda watch on 127.0.0.1:$DEV_LAMBDA_PORT (logs in $LOGS/watch.log)"
# The dev feature compiles in the local identity headers; release builds lack
# it. The functions see dev.env, never a DATABASE_URL or AWS endpoint that
# happens to be in this shell's environment.
spawn env -u DATABASE_URL -u DATABASE_SECRET_ARN -u AWS_ENDPOINT_URL -u AWS_ENDPOINT_URL_SECRETS_MANAGER \
  cargo lambda watch -A 127.0.0.1 -P "$DEV_LAMBDA_PORT" --features outbox-shared/dev \
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
[ -n "$ready" ] || { echo "error: the booking API did not come up; see $LOGS/watch.log" >&2; tail -n 30 "$DEV_DIR/watch.log" >&2; exit 1; }

# EventBridge stand-ins (scripts/lib/schedule.sh): the poller back to back
# (each run polls until near its 20 s timeout), the sweeper every
# DEV_SWEEP_EVERY seconds; their first invokes compile them.
rm -f "$DEV_DIR"/.first-run-*
schedule_env=(env DEV_DIR="$DEV_DIR" DEV_LAMBDA_PORT="$DEV_LAMBDA_PORT" DEV_PG_PORT="$DEV_PG_PORT" PG_BIN="$PG_BIN" DEV_WATCH_PID="$WATCH_PID"
  DEV_INVOKE_TIMEOUT="$DEV_INVOKE_TIMEOUT" DEV_FIRST_INVOKE_TIMEOUT="$DEV_FIRST_INVOKE_TIMEOUT" DEV_STALL_SECS="$DEV_STALL_SECS")
echo "==> dev scheduler: outbox-poller back to back, outbox-sweeper every ${DEV_SWEEP_EVERY}s (each invoke times out after ${DEV_INVOKE_TIMEOUT}s)"
spawn "${schedule_env[@]}" bash -c 'source scripts/lib/schedule.sh && schedule_loop "$@"' dev-schedule outbox-poller 0 "$DEV_DIR"
spawn "${schedule_env[@]}" bash -c 'source scripts/lib/schedule.sh && schedule_loop "$@"' dev-schedule outbox-sweeper "$DEV_SWEEP_EVERY" "$DEV_DIR"

# The first invoke of a function compiles it; the publisher gives up on an
# event after 3 x 10 s, so build ses-events now, with a Send event of this
# account's SES for mail this service did not tag (acknowledged, records
# nothing, logs no error).
echo "==> waiting for the ses-events, outbox-poller and outbox-sweeper functions (the first invoke compiles each)"
warm_up=$(python3 - "$DEV_SES_ACCOUNT" "$DEV_SES_CONFIGURATION_SET" <<'PY'
import json, sys
account, config_set = sys.argv[1], sys.argv[2]
mail = {"timestamp": "2030-01-01T00:00:00.000Z", "source": "warm-up@example.com", "sendingAccountId": account,
        "messageId": "dev-warm-up", "destination": [], "tags": {"ses:configuration-set": [config_set]}}
print(json.dumps({"version": "0", "id": "dev-warm-up", "detail-type": "Email Sent", "source": "aws.ses",
                  "account": account, "time": "2030-01-01T00:00:00Z", "region": "us-east-1",
                  "resources": [f"arn:aws:ses:us-east-1:{account}:configuration-set/{config_set}"],
                  "detail": {"eventType": "Send", "mail": mail, "send": {}}}))
PY
)
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time "$DEV_FIRST_INVOKE_TIMEOUT" -H 'content-type: application/json' \
  -d "$warm_up" "$SES_INVOKE_URL" 2>/dev/null || true)
[ "$code" = "200" ] || echo "warning: the ses-events function did not answer (HTTP $code); the publisher retries each event 3 times, see $LOGS/watch.log" >&2
# The operator console: its first request compiles it.
CONSOLE_URL="http://127.0.0.1:$DEV_LAMBDA_PORT/lambda-url/operator-console/"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time "$DEV_FIRST_INVOKE_TIMEOUT" "$CONSOLE_URL" 2>/dev/null || true)
[ "$code" = "200" ] || echo "warning: the operator console did not answer (HTTP $code); see $LOGS/watch.log" >&2
for _ in $(seq 1 $(( DEV_FIRST_INVOKE_TIMEOUT + 10 ))); do
  [ -e "$DEV_DIR/.first-run-outbox-poller" ] && [ -e "$DEV_DIR/.first-run-outbox-sweeper" ] && break
  kill -0 "$WATCH_PID" 2>/dev/null || { echo "error: cargo lambda watch exited; see $LOGS/watch.log" >&2; tail -n 30 "$DEV_DIR/watch.log" >&2; exit 1; }
  sleep 1
done

# What `make verify LOCAL=1` talks to (scripts/verify.py --local).
cat >"$DEV_DIR/verify.env" <<ENV
API_URL=$URL
CONSOLE_URL=$CONSOLE_URL
AWS_REGION=us-east-1
FROM_ADDRESS=Bookings <$SENDER>
MAILER=$MAILER
SES_ENDPOINT_URL=http://127.0.0.1:$DEV_SES_PORT
SES_CONFIGURATION_SET=$DEV_SES_CONFIGURATION_SET
ENV

echo "==> dev watchdog: warns when a due outbox event waits more than ${DEV_STALL_SECS}s (DEV_STALL_SECS)"
spawn "${schedule_env[@]}" bash -c 'source scripts/lib/schedule.sh && schedule_watchdog' dev-watchdog "$DEV_DIR"

if [ -n "$LOCALSTACK" ]; then
  DB_LINE="Database settings: the functions read the secret $DB_SECRET_ARN from LocalStack ($LOCALSTACK_ENDPOINT), no DATABASE_URL."
else
  DB_LINE="Database settings: the functions get DATABASE_URL ($LOGS/dev.env)."
fi
if [ "$SES_BACKEND" = smtp ]; then
  MAILBOX_HINT="make mailbox   (or: python3 scripts/mailbox.py --smtp $(shown "$SES_UPSTREAM"))"
  MAIL_LINE="Mail: the poller sends through SMTP (MAILER=smtp) to 127.0.0.1:$DEV_SMTP_PORT, STARTTLS + AUTH; no SES events."
elif [ "$SES_BACKEND" = localstack ]; then
  MAILBOX_HINT="make mailbox   (LocalStack's sent mail: $LOCALSTACK_ENDPOINT/_aws/ses)"
else
  MAILBOX_HINT="make mailbox   (or: python3 scripts/mailbox.py http://127.0.0.1:$DEV_MOTO_PORT)"
fi
if [ "$SES_BACKEND" = smtp ]; then
  MAIL_LOG="$LOGS/smtp.log"
else
  MAIL_LOG="$LOGS/ses-publisher.log"
  MAIL_LINE="SES events: the functions send through the publisher on 127.0.0.1:$DEV_SES_PORT, which publishes each
message's Send + Delivery events to the ses-events function (the mailbox's events column; $LOGS/ses-events.jsonl)."
fi
cat <<MSG

==> the stack is up. Create a booking (local identity headers, AUTH_MODE=insecure-dev-headers):

curl -s -X POST $URL/bookings \\
  -H 'content-type: application/json' \\
  -H 'x-dev-user-email: bob@example.com' -H 'x-dev-user-name: Bob' \\
  -d '{"title": "Design review", "start": "2030-01-07T09:00:00Z", "end": "2030-01-07T09:30:00Z",
       "timezone": "Europe/Paris",
       "attendees": [{"email": "alice@example.com", "name": "Alice"}, {"email": "carol@example.com", "name": "Carol", "locale": "fr"}]}'

Then, seconds later (Carol's in French), the local mailbox:  $MAILBOX_HINT

A reminder (DEV_REMINDER_SCALE=60 here: an hour's offset is a minute's), in the mailbox in about 3 minutes:

curl -s -X POST $URL/bookings \\
  -H 'content-type: application/json' \\
  -H 'x-dev-user-email: bob@example.com' -H 'x-dev-user-name: Bob' \\
  -d "{\"title\": \"Stand-up\", \"start\": \"\$(date -u -d '+5 min' +%FT%H:%M:00Z)\", \"end\": \"\$(date -u -d '+20 min' +%FT%H:%M:00Z)\",
       \"timezone\": \"Europe/Paris\", \"reminders\": [\"PT2H\"],
       \"attendees\": [{\"email\": \"alice@example.com\", \"name\": \"Alice\"}]}"
$MAIL_LINE
$DB_LINE
Operator console:  $CONSOLE_URL   (the overview, each booking's timeline, outboxctl's actions)
Check it as a deployed stack is checked:  make verify LOCAL=1
Operator CLI:  DATABASE_URL=$DATABASE_URL SWEEP_STUCK_AFTER_SECS=$DEV_SWEEP_STUCK_AFTER_SECS POLLER_TIMEOUT_SECS=$DEV_POLLER_TIMEOUT_SECS cargo run -q -p outboxctl -- status
Logs: $LOGS/watch.log, $LOGS/outbox-poller.log, $LOGS/outbox-sweeper.log, $MAIL_LOG.  Ctrl-C stops everything.
MSG

wait "$WATCH_PID"
