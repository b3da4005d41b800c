# moto (SES v2 emulator) helpers shared by scripts/test.sh and scripts/dev.sh (sourced);
# the same venv holds aiosmtpd, the local SMTP server (scripts/smtp-server.py).
# moto lives in a project-local, git-ignored venv: .venv/moto.
source scripts/lib/venv.sh

MOTO_VENV="${MOTO_VENV:-.venv/moto}"
MOTO_PIN="moto[server]==5.2.5"
ICALENDAR_PIN="icalendar==7.3.2"
# The SMTP server the SMTP mailer is tested against (scripts/smtp-server.py).
AIOSMTPD_PIN="aiosmtpd==1.4.6"

moto_ensure_installed() {
  if [ -x "$MOTO_VENV/bin/moto_server" ] && "$MOTO_VENV/bin/python" -c 'import icalendar, aiosmtpd' 2>/dev/null; then return 0; fi
  echo "==> installing $MOTO_PIN, $AIOSMTPD_PIN into $MOTO_VENV" >&2
  venv_create "$MOTO_VENV"
  "$MOTO_VENV/bin/pip" install -q --disable-pip-version-check "$MOTO_PIN" "$ICALENDAR_PIN" "$AIOSMTPD_PIN" >&2
}

# moto_start PORT LOGFILE: starts moto on 127.0.0.1:PORT in the background; sets MOTO_PID.
moto_start() {
  local port="$1" log="$2"
  "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  MOTO_PID=$!
  for _ in $(seq 1 100); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/data.json', timeout=1)" 2>/dev/null; then
      return 0
    fi
    kill -0 "$MOTO_PID" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.2
  done
  echo "error: moto did not answer on 127.0.0.1:$port" >&2
  return 1
}

moto_stop() {
  [ -n "${MOTO_PID:-}" ] && kill "$MOTO_PID" 2>/dev/null && wait "$MOTO_PID" 2>/dev/null
  return 0
}
