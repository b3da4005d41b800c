# Peer and bare-SQL comparisons for scripts/bench.sh (sourced; needs
# scripts/lib/postgres.sh for PG_BIN). Both run against DATABASE_URL's
# cluster, each in a database of its own that is created afresh and dropped
# after, and append `key<TAB>value` lines to "$BENCH_RESULTS":
#
#   bench_peers     graphile-worker with its own perf method (bench/peers/):
#                   graphile.perjob.c4, graphile.batched.p1c4,
#                   graphile.batched.p4c24 (jobs/s), graphile.latency.p50_ms/p99_ms.
#                   `bench_peers stress`: the held-snapshot stress instead
#                   (graphile.stress.*, as tests/benches/stress.rs).
#                   BENCH_PEERS=0 skips it; BENCH_PEERS=required makes a
#                   missing node/npm or a failed run fatal (otherwise one
#                   line says why it was skipped).
#   bench_api_sql   the SQL of POST /bookings (bench/api-write.pgbench) with
#                   pgbench, 8 clients, on the migrated schema:
#                   sql.api_write.c8 (tx/s), sql.api_write.p50_ms/p99_ms.

BENCH_PEERS_DIR="${BENCH_PEERS_DIR:-bench/peers}"

# bench_db_url URL NAME: URL with its database replaced by NAME.
bench_db_url() {
  local base="${1%%\?*}"
  local query="${1#"$base"}"
  echo "${base%/*}/$2$query"
}

# bench_recreate_db URL NAME: drops and creates database NAME on URL's server.
bench_recreate_db() {
  PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$1" \
    -c "DROP DATABASE IF EXISTS $2 WITH (FORCE)" -c "CREATE DATABASE $2" >/dev/null
}

# bench_drop_db URL NAME (kept when BENCH_KEEP_DBS=1, to look at afterwards).
bench_drop_db() {
  [ "${BENCH_KEEP_DBS:-0}" = "1" ] && return 0
  "$PG_BIN/psql" -X -q "$1" -c "DROP DATABASE IF EXISTS $2 WITH (FORCE)" >/dev/null 2>&1 || true
}

# bench_peers_skip REASON: one line, and a failure only if BENCH_PEERS=required.
bench_peers_skip() {
  echo "peers: skipped: $1" >&2
  [ "${BENCH_PEERS:-1}" != "required" ]
}

# Installs bench/peers/node_modules from the committed lock, unless the lock
# it was installed from is the same.
bench_peers_install() {
  local stamp="$BENCH_PEERS_DIR/node_modules/.installed-package-lock.json"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$BENCH_PEERS_DIR/package-lock.json"; then
    return 0
  fi
  echo "==> npm ci in $BENCH_PEERS_DIR" >&2
  (cd "$BENCH_PEERS_DIR" && npm ci --no-audit --no-fund --loglevel=error >&2) || return 1
  cp "$BENCH_PEERS_DIR/package-lock.json" "$stamp"
}

bench_peers() {
  [ "${BENCH_PEERS:-1}" = "0" ] && { echo "peers: skipped (BENCH_PEERS=0)" >&2; return 0; }
  command -v node >/dev/null && command -v npm >/dev/null \
    || { bench_peers_skip "node and npm are needed for graphile-worker (apt-get install nodejs npm)"; return; }
  bench_peers_install || { bench_peers_skip "npm ci failed in $BENCH_PEERS_DIR"; return; }
  local url out
  url="$(bench_db_url "$DATABASE_URL" bench_peers)"
  bench_recreate_db "$DATABASE_URL" bench_peers
  out="$(mktemp)"
  if [ "${1:-}" = stress ]; then
    echo "==> graphile-worker under the same stress (batched 1 x 4)" >&2
  else
    echo "==> graphile-worker, its own perf method (${BENCH_PEER_JOBS:-450000} jobs per preset)" >&2
  fi
  # perf.js stops itself after BENCH_PEER_TIMEOUT_S; `timeout` is the backstop.
  if DATABASE_URL="$url" timeout -k 10 $((${BENCH_PEER_TIMEOUT_S:-600} + 30)) \
      node "$BENCH_PEERS_DIR/perf.js" "$@" >"$out"; then
    cat "$out" >>"$BENCH_RESULTS"
    rm -f "$out"
    bench_drop_db "$DATABASE_URL" bench_peers
  else
    cat "$out" >>"$BENCH_RESULTS" # the presets that finished
    rm -f "$out"
    bench_drop_db "$DATABASE_URL" bench_peers
    bench_peers_skip "the graphile-worker run failed (see above)"
  fi
}

# Runs the pgbench script of POST /bookings against the migrated schema.
bench_api_sql() {
  local url dir secs="${BENCH_API_SECS:-10}" f script="$PWD/bench/api-write.pgbench"
  [ -x "$PG_BIN/pgbench" ] || { echo "api sql: skipped: no $PG_BIN/pgbench (postgresql-15)" >&2; return 0; }
  url="$(bench_db_url "$DATABASE_URL" bench_api)"
  bench_recreate_db "$DATABASE_URL" bench_api
  # The migrations as refinery applies them: each file once, in version
  # order, in a transaction. V5 creates the booking_app role it grants to.
  for f in $(ls migrations/V*__*.sql | sort -V); do
    "$PG_BIN/psql" -X -q -1 -v ON_ERROR_STOP=1 "$url" -f "$f" >/dev/null
  done
  dir="$(mktemp -d)"
  echo "==> POST /bookings SQL with pgbench: 8 clients, ${secs}s" >&2
  # -M prepared: statements parsed once per connection, like the service's
  # prepare_cached. slot=0: each client books its organizer's next slot.
  (cd "$dir" && "$PG_BIN/pgbench" -n -M prepared -c 8 -j 2 -T "$secs" -D slot=0 -r --log --log-prefix=tx \
    -f "$script" "$url" >pgbench.out 2>pgbench.err) \
    || { cat "$dir/pgbench.err" "$dir/pgbench.out" >&2; rm -rf "$dir"; bench_drop_db "$DATABASE_URL" bench_api; return 1; }
  sed -n '/^latency\|^tps\|^number of failed\|^statement latencies/,$p' "$dir/pgbench.out" >&2
  python3 - "$dir" >>"$BENCH_RESULTS" <<'PY'
import glob, re, sys
d = sys.argv[1]
out = open(f"{d}/pgbench.out").read()
tps = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", out, re.M)
# Per-transaction log: client tx_no latency_us script_no epoch_s epoch_us
lat = sorted(int(line.split()[2]) for f in glob.glob(f"{d}/tx.*") for line in open(f))
rank = lambda p: lat[round((len(lat) - 1) * p)] / 1000.0  # as tests/benches/poller.rs
if tps:
    print(f"sql.api_write.c8\t{float(tps.group(1)):.0f}")
if lat:
    print(f"sql.api_write.p50_ms\t{rank(0.5):.2f}")
    print(f"sql.api_write.p99_ms\t{rank(0.99):.2f}")
PY
  rm -rf "$dir"
  bench_drop_db "$DATABASE_URL" bench_api
}
