# Helpers of the end-to-end smoke tests of `make dev` (scripts/smoke-dev.sh,
# scripts/smoke-localstack.sh, scripts/smoke-smtp.sh). Sourced after scripts/lib/postgres.sh.
#
# `make dev` runs in a process group of its own (SMOKE_PGID, make's pid), as
# a terminal runs its foreground job; signals go to that group as a terminal
# (Ctrl-C) or a supervisor would send them. DEV_DIR is given to make's
# environment only, not exported here: every process of the stack inherits
# it (or names it on its command line), and no process of this script does,
# which is how the stack's processes are found.

SMOKE_LOG=""
SMOKE_PGID=""
# Extra VAR=value settings for make dev's environment.
SMOKE_ENV=()
SMOKE_T0=$(date +%s)

# smoke_dev_dir NAME: a throwaway data dir for make dev (DEV_DIR), which the
# server, running as `postgres` when we are root, can reach.
smoke_dev_dir() {
  DEV_DIR="$(mktemp -d "/tmp/outbox-smoke$1.XXXXXX")"
  chmod 755 "$DEV_DIR"
}
# smoke_free_ports: free loopback ports for each service make dev starts.
smoke_free_ports() {
  DEV_PG_PORT="$(free_port)" DEV_MOTO_PORT="$(free_port)" DEV_SES_PORT="$(free_port)" DEV_LAMBDA_PORT="$(free_port)"
}

smoke_elapsed() { echo "$(( $(date +%s) - SMOKE_T0 ))s"; }
say() { echo "==> smoke [$(smoke_elapsed)]: $*"; }

# smoke_procs MODE [ARG]: the stack's processes, from /proc.
#   stack             every process of the stack: "pid command"
#   function NAME     pids of the function binary NAME that cargo lambda watch runs
#   invoke NAME       "pid age_seconds" of the `cargo lambda invoke NAME` in flight
smoke_procs() {
  python3 - "$DEV_DIR" "$SMOKE_PGID" "$1" "${2:-}" <<'PY'
import os, signal, sys
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when the reader takes only the first line
dev_dir, pgid, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
me = os.getpid()
hz = os.sysconf("SC_CLK_TCK")
with open("/proc/uptime") as f:
    uptime = float(f.read().split()[0])
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) in (me, os.getppid()):
        continue
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        continue
    if not argv or stat[0] == "Z":
        continue
    cmd = " ".join(argv)
    ours = (f"DEV_DIR={dev_dir}".encode() in env or dev_dir + "/" in cmd or cmd.endswith(dev_dir)
            or (pgid and stat[2] == pgid))
    if not ours:
        continue
    if mode == "stack":
        print(pid, cmd[:200])
    elif mode == "function" and exe == arg:
        print(pid)
    elif mode == "invoke" and "invoke" in argv and arg in argv and any(a.endswith("cargo-lambda") or a == "lambda" for a in argv):
        age = uptime - int(stat[19]) / hz
        print(pid, int(age))
PY
}

# Stops whatever is left of the stack after a failure: by pid, never by name.
smoke_cleanup() {
  local pids
  [ -n "$SMOKE_PGID" ] && kill -TERM -- "-$SMOKE_PGID" 2>/dev/null
  for _ in $(seq 1 30); do
    pids="$(smoke_procs stack | cut -d' ' -f1)"
    [ -z "$pids" ] && break
    sleep 0.5
  done
  pids="$(smoke_procs stack | cut -d' ' -f1)"
  # shellcheck disable=SC2086
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  [ -f "$DEV_DIR/pg/postmaster.pid" ] && pg_stop "$DEV_DIR/pg"
  return 0
}

fail() {
  echo "smoke: FAILED after $(smoke_elapsed): $*" >&2
  [ -n "$SMOKE_LOG" ] && tail -n 60 "$SMOKE_LOG" >&2
  for f in outbox-poller.log watch.log localstack.log; do
    [ -f "$DEV_DIR/$f" ] && { echo "--- $DEV_DIR/$f (tail)" >&2; tail -n 15 "$DEV_DIR/$f" >&2; }
  done
  smoke_cleanup
  echo "smoke: logs kept in $DEV_DIR and $SMOKE_LOG" >&2
  exit 1
}

# smoke_start LOG [make variables...]: `make dev` in a process group of its
# own, with SIGINT restored (a background job of a non-interactive shell
# starts with it ignored, and bash cannot trap an ignored signal; a terminal
# would deliver it).
smoke_start() {
  SMOKE_LOG="$1"; shift
  env DEV_DIR="$DEV_DIR" DEV_PG_PORT="$DEV_PG_PORT" DEV_MOTO_PORT="$DEV_MOTO_PORT" DEV_SES_PORT="$DEV_SES_PORT" \
    DEV_LAMBDA_PORT="$DEV_LAMBDA_PORT" "${SMOKE_ENV[@]}" \
    setsid python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    make --no-print-directory dev "$@" >"$SMOKE_LOG" 2>&1 &
  SMOKE_PGID=$!
}

# smoke_wait_up SECONDS
smoke_wait_up() {
  for _ in $(seq 1 "$1"); do
    grep -q "the stack is up" "$SMOKE_LOG" && return 0
    kill -0 "$SMOKE_PGID" 2>/dev/null || fail "make dev exited early"
    sleep 1
  done
  fail "the stack did not come up in $1 s"
}

# smoke_book TITLE DAY: creates a booking for alice and carol on 2031-03-DAY
# with the curl the stack prints (one organizer: one booking per day).
smoke_book() {
  local resp code
  resp=$(curl -s -m 30 -w '\n%{http_code}' -X POST "http://127.0.0.1:$DEV_LAMBDA_PORT/lambda-url/booking-api/bookings" \
    -H 'content-type: application/json' -H 'x-dev-user-email: bob@example.com' -H 'x-dev-user-name: Bob' \
    -d "{\"title\": \"$1\", \"start\": \"2031-03-$2T09:00:00Z\", \"end\": \"2031-03-$2T09:30:00Z\", \"timezone\": \"UTC\",
         \"attendees\": [{\"email\": \"alice@example.com\", \"name\": \"Alice\"}, {\"email\": \"carol@example.com\", \"name\": \"Carol\"}]}")
  code=$(tail -n1 <<<"$resp")
  [ "$code" = "201" ] || fail "POST /bookings ($1) answered $code: $resp"
}

# smoke_mailbox [--json]: `make mailbox` of this stack.
smoke_mailbox() { DEV_DIR="$DEV_DIR" ./scripts/mailbox.sh "$@"; }

# smoke_wait_invites TITLE SECONDS: one REQUEST invite per attendee, each with
# the Send and Delivery events the publisher published (in English, or in
# French: "Invitation : TITLE @ ...").
smoke_wait_invites() {
  local title="$1" deadline=$(( $(date +%s) + $2 )) mail n=0
  while [ "$(date +%s)" -le "$deadline" ]; do
    mail=$(smoke_mailbox --json 2>/dev/null || echo '[]')
    n=$(python3 -c 'import json,re,sys; m=json.loads(sys.argv[1]); print(sum(1 for x in m if x["method"]=="REQUEST" and re.match(r"Invitation ?: "+re.escape(sys.argv[2])+" @ ", x["subject"])))' "$mail" "$title")
    [ "$n" -ge 2 ] && break
    sleep 0.5
  done
  [ "$n" = "2" ] || fail "expected 2 invites for '$title' in the mailbox within $2 s, found $n"
  python3 -c 'import json,re,sys; to=sorted(x["to"] for x in json.loads(sys.argv[1]) if re.match(r"Invitation ?: "+re.escape(sys.argv[2])+" @ ", x["subject"])); assert to==["alice@example.com","carol@example.com"], to' "$mail" "$title" \
    || fail "one invite per attendee expected for '$title'"
  # Through SMTP there are no SES events to check.
  [ "${SMOKE_SES_EVENTS:-1}" = 1 ] || return 0
  # The publisher writes the events file before it answers the poller.
  for _ in $(seq 1 20); do
    mail=$(smoke_mailbox --json 2>/dev/null || echo '[]')
    python3 -c 'import json,re,sys; m=[x for x in json.loads(sys.argv[1]) if re.match(r"Invitation ?: "+re.escape(sys.argv[2])+" @ ", x["subject"])]; sys.exit(not all(x["ses_events"]==["Send","Delivery"] for x in m))' "$mail" "$title" && break
    sleep 0.5
  done
  python3 -c 'import json,re,sys; m=[x for x in json.loads(sys.argv[1]) if re.match(r"Invitation ?: "+re.escape(sys.argv[2])+" @ ", x["subject"])]; sys.exit(not all(x["ses_events"]==["Send","Delivery"] for x in m))' "$mail" "$title" \
    || fail "expected Send,Delivery SES events for each invite of '$title' in $DEV_DIR/ses-events.jsonl"
  # ...and the ses-events function accepted them (they come from its own
  # account and region, about each claim's own message): recorded per send.
  local recorded="" sql="SELECT count(*) FROM send_feedback f JOIN booking_notification_sends s ON s.id = f.send_id
    JOIN bookings b ON b.id = s.booking_id WHERE b.title = '$title' AND f.kind IN ('Send', 'Delivery')"
  for _ in $(seq 1 40); do
    recorded=$("$PG_BIN/psql" -X -A -t -q "postgres://postgres@127.0.0.1:$DEV_PG_PORT/postgres" -c "$sql" 2>/dev/null || echo 0)
    [ "${recorded:-0}" -ge 4 ] && return 0
    sleep 0.5
  done
  fail "ses-events recorded ${recorded:-0} of the 4 Send/Delivery events of '$title' (see $DEV_DIR/watch.log)"
}

# smoke_check_stopped HOW PORTS...: after a stop, `make dev` and every process
# of the stack are gone (within 60 s), the ports are free, the clean-up ran
# to its end.
smoke_check_stopped() {
  local how="$1" left=""; shift
  for _ in $(seq 1 120); do
    left="$(smoke_procs stack)"
    [ -z "$left" ] && ! pgrep -g "$SMOKE_PGID" >/dev/null && break
    sleep 0.5
  done
  [ -z "$left" ] || fail "processes of the stack still running 60 s after $how:
$left"
  pgrep -g "$SMOKE_PGID" >/dev/null && fail "make dev's process group still has processes after $how"
  for port in "$@"; do
    port_in_use "$port" && fail "port $port still in use after $how"
  done
  grep -q "==> stopped" "$SMOKE_LOG" || fail "the clean-up did not run to its end after $how (no '==> stopped')"
  [ "$(grep -c '==> stopping the local stack' "$SMOKE_LOG")" = 1 ] || fail "the clean-up ran more than once after $how"
  [ -f "$DEV_DIR/pg/postmaster.pid" ] && fail "Postgres still has its postmaster.pid after $how"
  return 0
}

# `make verify LOCAL=1` against the smoke stack: every step it can run
# locally passes (the From identity, the account, the configuration set, a
# booking to SES's mailbox simulator until its Delivery and Bounce show, the
# console), so the command a deploy ends with never rots.
smoke_verify() {
  local out
  out="$(DEV_DIR="$DEV_DIR" LOCAL=1 timeout 300 ./scripts/verify.sh 2>&1)" \
    || { printf '%s\n' "$out" >&2; fail "make verify LOCAL=1 failed against the smoke stack"; }
  printf '%s\n' "$out" | sed 's/^/    /'
  for step in from-identity account-sending configuration-set simulator-delivery simulator-bounce console; do
    printf '%s\n' "$out" | grep -qE "^  (ok|warn) +$step " || fail "make verify LOCAL=1 did not pass its $step step"
  done
}

