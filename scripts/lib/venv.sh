# venv_create DIR [PYTHON] (sourced): a project-local virtualenv, or one
# line saying what is missing. Debian and Ubuntu ship venv apart from
# Python (python3-venv); without it `python3 -m venv` fails half-way.
venv_create() {
  local dir="$1" py="${2:-python3}" log
  mkdir -p "$(dirname "$dir")"
  log="$(mktemp)"
  if ! "$py" -m venv "$dir" >"$log" 2>&1; then
    rm -rf "$dir"
    echo "error: $py -m venv failed; install the venv module (Debian, Ubuntu: apt-get install python3-venv):" >&2
    tail -n 3 "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
