#!/usr/bin/env bash
# End-to-end smoke test of `make dev LOCALSTACK=1`, on free ports with a
# throwaway data dir: no LocalStack answers at LOCALSTACK_ENDPOINT (a free
# port), so the stack installs one (.venv/localstack, once) and starts it on
# the host; it creates the database secret there, and the functions read the
# database settings from it through the AWS SDK (DATABASE_SECRET_ARN and
# AWS_ENDPOINT_URL_SECRETS_MANAGER; no DATABASE_URL), as they do in AWS.
# LocalStack's free edition has no SES v2 (501): the stack says so and sends
# through moto. A booking's invites arrive; then SIGINT, and everything it
# started, LocalStack included, is gone.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/smoke.sh

smoke_dev_dir -localstack
smoke_free_ports
LS_PORT="$(free_port)"
LS_ENDPOINT="http://127.0.0.1:$LS_PORT"
SMOKE_ENV=(LOCALSTACK_ENDPOINT="$LS_ENDPOINT")

say "make dev LOCALSTACK=1 (LocalStack $LS_ENDPOINT; ports pg $DEV_PG_PORT, moto $DEV_MOTO_PORT, ses $DEV_SES_PORT, lambda $DEV_LAMBDA_PORT)"
smoke_start "$DEV_DIR.log" LOCALSTACK=1
# The first run installs LocalStack (pip, a few minutes) before it starts it.
smoke_wait_up 1500
say "the stack is up"
grep -q "==> LocalStack (Secrets Manager, SES) on 127.0.0.1:$LS_PORT" "$SMOKE_LOG" || fail "make dev did not start its own LocalStack"
arn="$(sed -n 's/^==> database secret in LocalStack Secrets Manager: //p' "$SMOKE_LOG")"
case "$arn" in arn:aws:secretsmanager:*) ;; *) fail "no database secret ARN reported (got '$arn')" ;; esac
grep "==> SES v2:" "$SMOKE_LOG" | sed 's/^/    /'

# The functions' environment: the secret and the Secrets Manager endpoint, no URL.
grep -qx "DATABASE_SECRET_ARN=$arn" "$DEV_DIR/dev.env" || fail "dev.env does not give the functions DATABASE_SECRET_ARN"
grep -qx "AWS_ENDPOINT_URL_SECRETS_MANAGER=$LS_ENDPOINT" "$DEV_DIR/dev.env" || fail "dev.env does not point Secrets Manager at LocalStack"
grep -q '^DATABASE_URL=' "$DEV_DIR/dev.env" && fail "dev.env still gives the functions DATABASE_URL"

smoke_book "LocalStack test" 05
t=$(date +%s)
smoke_wait_invites "LocalStack test" 60
say "one REQUEST invite per attendee, each with Send + Delivery, $(( $(date +%s) - t ))s after the booking"
smoke_mailbox
smoke_verify
say "make verify LOCAL=1: every step it can run against make dev passed"

# Every function process that is running read the secret: none has a
# DATABASE_URL, each has the ARN, and LocalStack served GetSecretValue.
checked=0
for fn in booking-api outbox-poller outbox-sweeper ses-events; do
  for pid in $(smoke_procs function "$fn"); do
    env_of="$(tr '\0' '\n' <"/proc/$pid/environ")"
    grep -q '^DATABASE_URL=' <<<"$env_of" && fail "the $fn function (pid $pid) has DATABASE_URL in its environment"
    grep -qx "DATABASE_SECRET_ARN=$arn" <<<"$env_of" || fail "the $fn function (pid $pid) has no DATABASE_SECRET_ARN"
    checked=$((checked + 1))
  done
done
[ "$checked" -ge 3 ] || fail "expected the function processes to be running, found $checked"
reads=$(grep -c 'AWS secretsmanager.GetSecretValue => 200' "$DEV_DIR/localstack.log" || true)
[ "$reads" -ge "$checked" ] || fail "LocalStack served $reads GetSecretValue calls for $checked function processes"
grep -q 'DATABASE_SECRET_ARN.*cannot read' "$DEV_DIR/watch.log" && fail "a function could not read the database secret"
say "$checked function processes run with DATABASE_SECRET_ARN and no DATABASE_URL; LocalStack served $reads GetSecretValue calls"

kill -INT -- "-$SMOKE_PGID"
smoke_check_stopped "SIGINT" "$DEV_PG_PORT" "$DEV_MOTO_PORT" "$DEV_SES_PORT" "$DEV_LAMBDA_PORT" "$LS_PORT"
say "stopped: LocalStack and everything else gone, ports free"
rm -rf "$DEV_DIR" "$DEV_DIR.log"
say "passed"
