#!/usr/bin/env bash
# `make verify`: after `make deploy`, what no stand-in can check, asked of
# the account the stack runs in (scripts/verify.py: the From identity and
# its DKIM, the account's sandbox and quota, the configuration set's event
# destination, a token from the stack's pool, one booking to SES's mailbox
# simulator until its Delivery and Bounce show, the console, every alarm).
# One line a step; exits 1 when one failed, saying what to do. boto3 comes
# into .venv/verify; credentials for the account as for make deploy.
#
#   make verify STACK=bookings REGION=eu-west-1
#   make verify STACK=bookings TOKEN=<ID token>   # your own identity provider
#   make verify LOCAL=1                          # against make dev (DEV_DIR, default .local)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/verify.sh
verify_ensure_installed
if [ -n "${LOCAL:-}" ]; then
  DEV_DIR="${DEV_DIR:-$PWD/.local}"
  [ -f "$DEV_DIR/verify.env" ] || { echo "verify: no make dev stack in $DEV_DIR (start it: make dev)" >&2; exit 2; }
  exec "$VERIFY_VENV/bin/python" scripts/verify.py --local "$DEV_DIR" ${WAIT:+--wait "$WAIT"}
fi
: "${STACK:?set STACK to the stack name (sam deploy --stack-name), or LOCAL=1 for make dev}"
source scripts/lib/region.sh
require_region verify
exec "$VERIFY_VENV/bin/python" scripts/verify.py --stack "$STACK" --region "$REGION" ${TOKEN:+--token "$TOKEN"} ${WAIT:+--wait "$WAIT"}
