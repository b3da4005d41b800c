# make verify's Python (sourced): boto3, pinned, in a project-local,
# git-ignored venv (.venv/verify).
source scripts/lib/venv.sh
VERIFY_VENV="${VERIFY_VENV:-.venv/verify}"

verify_ensure_installed() {
  if [ ! -x "$VERIFY_VENV/bin/python" ] || ! "$VERIFY_VENV/bin/python" -c 'import boto3' 2>/dev/null; then
    echo "==> installing boto3 into $VERIFY_VENV" >&2
    venv_create "$VERIFY_VENV"
    "$VERIFY_VENV/bin/pip" install -q --disable-pip-version-check 'boto3==1.44.18' >&2
  fi
}
