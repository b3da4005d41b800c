# The EventBridge stand-ins of `make dev` and its stall watchdog (sourced by
# the processes scripts/dev.sh spawns; each runs in its own session).
#
# Settings, from the environment dev.sh gives them:
#   DEV_DIR, DEV_LAMBDA_PORT, DEV_PG_PORT, PG_BIN
#   DEV_WATCH_PID             the `cargo lambda watch` process
#   DEV_INVOKE_TIMEOUT        seconds one invoke may take (default 60)
#   DEV_FIRST_INVOKE_TIMEOUT  the same for the first one, which compiles (900)
#   DEV_STALL_SECS            how long a due PENDING event may wait (60)

# Paths as the user typed them: relative to the project when inside it.
schedule_path() { case "$1" in "$PWD"/*) echo "${1#"$PWD"/}" ;; *) echo "$1" ;; esac; }

# The process of FUNCTION that cargo lambda watch (DEV_WATCH_PID) runs, if any.
schedule_instance() { pgrep -P "$DEV_WATCH_PID" -x "$1" 2>/dev/null | head -n1; }

# schedule_wait_instance FUNCTION SECONDS: true once FUNCTION has a process
# (a restart in progress takes a second or two: `cargo run` checks the build).
schedule_wait_instance() {
  local i
  for ((i = 0; i < $2 * 2; i++)); do
    [ -n "$(schedule_instance "$1")" ] && return 0
    sleep 0.5
  done
  return 1
}

# schedule_reload FUNCTION: cargo lambda watch (1.9) never restarts a
# function process that died; it starts it again on a change in the project,
# as when you save a file. Touching the dev schedule's event file (mtime
# only, no rebuild) is that change; every function restarts. Waits up to
# 60 s for FUNCTION's new process.
schedule_reload() {
  touch scripts/events/schedule.json
  schedule_wait_instance "$1" 60
}

schedule_say() {
  echo "[$(date '+%F %T')] $2" >>"$1"
  echo "==> $(date +%T) $2"
}

# schedule_loop FUNCTION PAUSE: invokes FUNCTION with scripts/events/schedule.json
# again and again, PAUSE seconds apart, each invoke under a timeout
# (DEV_INVOKE_TIMEOUT): a function that died, was restarted or hangs
# mid-invocation leaves `cargo lambda invoke` waiting for an answer that
# never comes, and the timeout is what gets the schedule going again. At a
# timeout, a function process still busy with that invocation is killed, as
# Lambda ends a function at its timeout, and a dead one is started again.
# The first invoke compiles the function (DEV_FIRST_INVOKE_TIMEOUT); when it
# ends, $DEV_DIR/.first-run-FUNCTION is created.
schedule_loop() {
  local fn="$1" pause="$2" log="$DEV_DIR/$1.log" limit rc what first=1 before now shown_watch
  shown_watch="$(schedule_path "$DEV_DIR/watch.log")"
  SCHEDULE_CHILD=""
  # Stopping the loop stops the invoke in flight: `timeout` runs it in a
  # process group of its own, which a signal to this one does not reach.
  trap '[ -n "$SCHEDULE_CHILD" ] && kill -TERM "$SCHEDULE_CHILD" 2>/dev/null; exit 0' TERM INT HUP
  while true; do
    if [ -z "$first" ] && ! schedule_wait_instance "$fn" 5; then
      schedule_say "$log" "dev scheduler: the $fn function process is gone (see $shown_watch) and cargo lambda watch does not restart it: reloading the functions"
      schedule_reload "$fn" || true
    fi
    before="$(schedule_instance "$fn")"
    limit="${DEV_INVOKE_TIMEOUT:-60}"
    [ -n "$first" ] && limit="${DEV_FIRST_INVOKE_TIMEOUT:-900}"
    timeout --kill-after=5s "$limit" cargo lambda invoke "$fn" --data-file scripts/events/schedule.json \
      -A 127.0.0.1 -P "$DEV_LAMBDA_PORT" >>"$log" 2>&1 &
    SCHEDULE_CHILD=$!
    rc=0
    wait "$SCHEDULE_CHILD" || rc=$?
    SCHEDULE_CHILD=""
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      schedule_wait_instance "$fn" 5
      now="$(schedule_instance "$fn")"
      if [ -n "$before" ] && [ "$now" = "$before" ]; then
        kill -KILL "$now" 2>/dev/null
        what="its function process (pid $now) was still on it: killed it, as Lambda does at a timeout, and reloading the functions"
      elif [ -z "$now" ]; then
        what="its function process had died (see $shown_watch): reloading the functions"
      else
        what="its function process was restarted meanwhile (a code change?)"
      fi
      schedule_say "$log" "dev scheduler: $fn invoke timed out after ${limit}s (DEV_INVOKE_TIMEOUT); $what; invoking again"
      if [ -z "$now" ] || [ "$now" = "$before" ]; then
        sleep 0.5
        schedule_reload "$fn" || true
      fi
    elif [ "$rc" -ne 0 ]; then
      sleep 2  # an error answer: do not spin
    fi
    if [ -n "$first" ]; then first=""; : >"$DEV_DIR/.first-run-$fn"; fi
    sleep "$pause" & wait $!
  done
}

# schedule_watchdog: every 5 s, asks the dev database (psql, not cargo) how
# long the oldest due PENDING outbox event has waited. Past DEV_STALL_SECS it
# prints one warning naming the logs to read; when the backlog clears, one
# line saying so. Once per stall.
schedule_watchdog() {
  local bound="${DEV_STALL_SECS:-60}" stalled="" since=0 out n age
  local poller_log watch_log
  poller_log="$(schedule_path "$DEV_DIR/outbox-poller.log")" watch_log="$(schedule_path "$DEV_DIR/watch.log")"
  local sql="SELECT count(*), coalesce(floor(extract(epoch FROM now() - min(next_attempt_at)))::bigint, 0)
             FROM outbox_events WHERE status = 'PENDING' AND next_attempt_at <= now()"
  trap 'exit 0' TERM INT HUP
  while true; do
    sleep 5 & wait $!
    out="$(PGCONNECT_TIMEOUT=3 timeout 10 "$PG_BIN/psql" -X -q -A -t -F ' ' -h 127.0.0.1 -p "$DEV_PG_PORT" \
      -U postgres -d postgres -c "$sql" 2>/dev/null)" || continue
    read -r n age <<<"$out"
    case "$n$age" in *[!0-9]*|"") continue ;; esac
    if [ "$n" -gt 0 ] && [ "$age" -ge "$bound" ]; then
      if [ -z "$stalled" ]; then
        stalled=1 since=$(( $(date +%s) - age ))
        echo "==> $(date +%T) WARNING (dev watchdog): the outbox is stalled: $n due PENDING event(s), the oldest waiting ${age}s" \
          "(more than DEV_STALL_SECS=$bound). The poller is not delivering: read $poller_log and $watch_log"
      fi
    elif [ -n "$stalled" ]; then
      stalled=""
      echo "==> $(date +%T) dev watchdog: the outbox is moving again (stalled for about $(( $(date +%s) - since ))s)"
    fi
  done
}
