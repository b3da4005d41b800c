# LocalStack helpers for `make dev LOCALSTACK=1` (sourced).
#
# A LocalStack the user already runs at LOCALSTACK_ENDPOINT is used as it is
# (and left running). If none answers there, one is installed into the
# git-ignored venv .venv/localstack and started on the host, without Docker:
# localstack-core with its [runtime] extra (without it the runtime fails at
# start: "No module named 'rolo'"), on Python 3.13, with the pins below that
# were measured to work together.
#
# LocalStack's free edition emulates Secrets Manager and SES v1, not SES v2
# (every sesv2 call answers 501 "not included in your current license plan").
source scripts/lib/venv.sh

LOCALSTACK_VENV="${LOCALSTACK_VENV:-.venv/localstack}"
LOCALSTACK_PINS=("localstack-core[runtime]==2026.3.0" "cbor2<6" "pyopenssl==25.3.0" "cryptography<47" "service-identity")

# The Python 3.13 the venv is made with: LOCALSTACK_PYTHON, else pyenv's, else
# python3.13 on PATH.
localstack_python() {
  if [ -n "${LOCALSTACK_PYTHON:-}" ]; then echo "$LOCALSTACK_PYTHON"; return 0; fi
  local p
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  command -v python3.13 2>/dev/null && return 0
  return 1
}

localstack_ensure_installed() {
  if [ -x "$LOCALSTACK_VENV/bin/python" ] && "$LOCALSTACK_VENV/bin/python" -c 'import localstack.runtime.main, rolo' 2>/dev/null; then
    return 0
  fi
  local py
  py="$(localstack_python)" || {
    echo "error: LOCALSTACK=1 found no LocalStack at $LOCALSTACK_ENDPOINT and no Python 3.13 to install one with" >&2
    echo "       (looked at \$LOCALSTACK_PYTHON, ${PYENV_ROOT:-$HOME/.pyenv}/versions/3.13*/bin/python3, python3.13 on PATH);" >&2
    echo "       start LocalStack yourself at LOCALSTACK_ENDPOINT, or set LOCALSTACK_PYTHON=/path/to/python3.13" >&2
    return 1
  }
  echo "==> installing ${LOCALSTACK_PINS[0]} into $LOCALSTACK_VENV (Python: $py; takes a few minutes once)" >&2
  rm -rf "$LOCALSTACK_VENV"
  venv_create "$LOCALSTACK_VENV" "$py"
  "$LOCALSTACK_VENV/bin/pip" install -q --disable-pip-version-check "${LOCALSTACK_PINS[@]}" >&2
}

# localstack_answers URL: true if LocalStack's health endpoint answers at URL.
localstack_answers() {
  python3 - "$1" <<'PY'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1].rstrip("/") + "/_localstack/health", timeout=2) as r:
        sys.exit(0 if "services" in json.load(r) else 1)
except Exception:
    sys.exit(1)
PY
}

# localstack_host_port URL: prints "HOST PORT" of an http://HOST:PORT URL;
# fails unless HOST is a loopback address (we only ever start one there).
localstack_host_port() {
  python3 - "$1" <<'PY'
import ipaddress, sys
from urllib.parse import urlsplit
u = urlsplit(sys.argv[1])
host = u.hostname or ""
try:
    loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
except ValueError:
    loopback = False
if u.scheme != "http" or not loopback or not u.port:
    sys.exit(1)
print("127.0.0.1" if host == "localhost" else host, u.port)
PY
}

# localstack_command HOST PORT DIR: sets LOCALSTACK_CMD, the command that
# runs LocalStack on the host: no Docker, one loopback gateway, only the
# services this stack uses, its files under DIR, and nothing fetched from the
# internet (no DNS server, no test certificate download, no analytics).
# LOCALSTACK_AUTH_TOKEN, if set, passes through.
localstack_command() {
  local host="$1" port="$2" dir="$3"
  LOCALSTACK_CMD=(env OVERRIDE_IN_DOCKER=0 "GATEWAY_LISTEN=$host:$port" GATEWAY_SERVER=hypercorn
    SERVICES=secretsmanager,ses DNS_ADDRESS=0 SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1
    "FILESYSTEM_ROOT=$dir" "$LOCALSTACK_VENV/bin/python" -m localstack.runtime.main)
}
