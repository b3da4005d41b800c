# Postgres helpers shared by scripts/test.sh and scripts/dev.sh (sourced).
# A cluster is a data directory plus a port on 127.0.0.1; as root the server
# runs as the `postgres` user, because postgres refuses to run as root.

# The server's binaries: PG_BIN when set, else the newest major the
# distribution installed (/usr/lib/postgresql/N/bin: Debian, Ubuntu), else
# initdb on PATH (other systems, a build of your own). 15 or newer.
PG_MIN_MAJOR=15

pg_find_bin() {
  local dir
  for dir in $(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -t/ -k5,5nr); do
    if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; fi
}

PG_BIN="${PG_BIN:-$(pg_find_bin)}"

pg_ensure_installed() {
  if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      echo "error: no Postgres server found (initdb${PG_BIN:+ in $PG_BIN}): install your distribution's server" \
        "(Debian, Ubuntu: sudo apt-get install postgresql) or set PG_BIN to the directory holding initdb" \
        "($PG_MIN_MAJOR or newer)" >&2
      return 1
    fi
    echo "==> installing the distribution's Postgres server with apt" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    PG_BIN="$(pg_find_bin)"
    [ -n "$PG_BIN" ] || { echo "error: apt installed no initdb under /usr/lib/postgresql" >&2; return 1; }
  fi
  local major
  major="$("$PG_BIN/initdb" --version | sed -E 's/.* ([0-9]+)(\.[0-9]+)*.*/\1/')"
  if [ "${major:-0}" -lt "$PG_MIN_MAJOR" ] 2>/dev/null; then
    echo "error: $PG_BIN/initdb is Postgres $major; the project needs $PG_MIN_MAJOR or newer (set PG_BIN)" >&2
    return 1
  fi
  export PG_BIN
}

# Whether the server's user can write DIR (as root it runs as `postgres`,
# which cannot enter a private parent such as /root).
pg_reachable() {
  if [ "$(id -u)" -ne 0 ]; then return 0; fi
  mkdir -p "$1" && chown postgres:postgres "$1" && runuser -u postgres -- test -w "$1" 2>/dev/null
}

# Runs a command as the server's user: `postgres` when we are root.
pg_as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

port_in_use() {
  python3 - "$1" <<'PY'
import socket, sys
s = socket.socket()
# Only a listener counts; connections lingering in TIME_WAIT do not.
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)
PY
}

# pg_start DATADIR PORT [extra postgres -c settings...]
pg_start() {
  local dir="$1" port="$2"; shift 2
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$dir"; chmod 700 "$dir"; fi
  if ! pg_reachable "$dir"; then
    echo "error: the postgres user cannot reach $dir (a parent directory is private to root):" \
      "give the data a place it can reach, e.g. under /var/tmp" >&2
    return 1
  fi
  if [ ! -f "$dir/PG_VERSION" ]; then
    pg_as_owner "$PG_BIN/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$dir.initdb.log" 2>&1 \
      || { cat "$dir.initdb.log" >&2; return 1; }
    # Trust, except for members of outbox_password_checked, whose password
    # is checked (the tests of logins made from secrets: db/logins.rs).
    { printf 'host all +outbox_password_checked 127.0.0.1/32 scram-sha-256\n'; cat "$dir/pg_hba.conf"; } \
      >"$dir/pg_hba.conf.new" && mv "$dir/pg_hba.conf.new" "$dir/pg_hba.conf"
    if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$dir/pg_hba.conf"; fi
  fi
  local opts="-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200"
  for setting in "$@"; do opts="$opts -c $setting"; done
  pg_as_owner "$PG_BIN/pg_ctl" -D "$dir" -l "$dir/server.log" -o "$opts" -w -t 60 start >/dev/null \
    || { tail -n 30 "$dir/server.log" >&2; return 1; }
}

# pg_make_tls_certs DIR: a throwaway CA and a server certificate for
# localhost / 127.0.0.1 in DIR (ca.crt, server.crt, server.key), owned by the
# server's user; prints the postgres -c settings that enable TLS.
pg_make_tls_certs() {
  local dir="$1"
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=outbox-test-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$dir/server.key" -out "$dir/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >"$dir/ext.cnf"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 2 -extfile "$dir/ext.cnf" -out "$dir/server.crt" >/dev/null 2>&1
  chmod 600 "$dir/server.key"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$dir/server.key" "$dir/server.crt"; fi
  echo "ssl=on ssl_cert_file=$dir/server.crt ssl_key_file=$dir/server.key"
}

pg_stop() {
  local dir="$1"
  [ -f "$dir/postmaster.pid" ] || return 0
  pg_as_owner "$PG_BIN/pg_ctl" -D "$dir" -m fast -w stop >/dev/null 2>&1 || true
}
