#!/usr/bin/env bash
# `make mailbox`: the local mailbox of the running `make dev`, from whichever
# SES it sends to: moto, or LocalStack's SES v2 when `make dev LOCALSTACK=1`
# found one (scripts/mailbox.py --localstack, which reads LocalStack's
# /_aws/ses), or, with `make dev MAILER=smtp`, the local SMTP server's
# mailbox file (--smtp). scripts/dev.sh records which in
# $DEV_DIR/mailbox.env. Arguments (--json, --events FILE) pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
DEV_DIR="${DEV_DIR:-$PWD/.local}"
SES_BACKEND=moto SES_UPSTREAM=""
if [ -f "$DEV_DIR/mailbox.env" ]; then
  SES_BACKEND="$(sed -n 's/^SES_BACKEND=//p' "$DEV_DIR/mailbox.env")"
  SES_UPSTREAM="$(sed -n 's/^SES_UPSTREAM=//p' "$DEV_DIR/mailbox.env")"
fi
export DEV_DIR
if [ "$SES_BACKEND" = smtp ]; then
  exec python3 scripts/mailbox.py --smtp "$SES_UPSTREAM" "$@"
fi
if [ "$SES_BACKEND" = localstack ]; then
  exec python3 scripts/mailbox.py --localstack ${SES_UPSTREAM:+"$SES_UPSTREAM"} "$@"
fi
exec python3 scripts/mailbox.py ${SES_UPSTREAM:+"$SES_UPSTREAM"} "$@"
