#!/usr/bin/env bash
# End-to-end smoke test of `make dev MAILER=smtp`, on free ports with a
# throwaway data dir: the stack starts the local SMTP server (aiosmtpd,
# STARTTLS required, AUTH, its own CA) instead of moto, and the poller
# Lambda, with MAILER=smtp, sends a booking's invitations through it; `make
# mailbox` lists them. Then SIGINT, and everything it started, the SMTP
# server included, is gone.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/postgres.sh
source scripts/lib/smoke.sh

smoke_dev_dir -smtp
smoke_free_ports
DEV_SMTP_PORT="$(free_port)"
SMOKE_ENV=(DEV_SMTP_PORT="$DEV_SMTP_PORT")

say "make dev MAILER=smtp (ports pg $DEV_PG_PORT, smtp $DEV_SMTP_PORT, lambda $DEV_LAMBDA_PORT)"
smoke_start "$DEV_DIR.log" MAILER=smtp
smoke_wait_up 900
say "the stack is up"
grep -q "==> SMTP server on 127.0.0.1:$DEV_SMTP_PORT" "$SMOKE_LOG" || fail "make dev did not start the local SMTP server"
grep -q "==> moto" "$SMOKE_LOG" && fail "make dev MAILER=smtp started moto"
grep -qx "MAILER=smtp" "$DEV_DIR/dev.env" || fail "dev.env does not set MAILER=smtp"
grep -qx "SMTP_URL=smtp://127.0.0.1:$DEV_SMTP_PORT" "$DEV_DIR/dev.env" || fail "dev.env does not point SMTP_URL at the local server"

smoke_book "SMTP test" 06
t=$(date +%s)
SMOKE_SES_EVENTS=0 smoke_wait_invites "SMTP test" 60
say "one REQUEST invite per attendee through SMTP, $(( $(date +%s) - t ))s after the booking"
smoke_mailbox
# Both went over TLS with AUTH (the server refuses mail otherwise), and
# none names a claim of ours (docs/invitation.md: the Message-ID names its key).
python3 - "$DEV_DIR/smtp-mailbox.jsonl" <<'PY' || fail "the SMTP mailbox does not hold the two invitations as expected"
import json, sys
mail = [json.loads(line) for line in open(sys.argv[1])]
assert len(mail) == 2, mail
assert sorted(m["rcpt_tos"][0] for m in mail) == ["alice@example.com", "carol@example.com"]
assert all(m["message_id"] and m["mail_from"] == "bookings@example.com" for m in mail)
assert not any("X-Outbox-Claim" in m["data"] for m in mail)
PY

kill -INT -- "-$SMOKE_PGID"
smoke_check_stopped "SIGINT" "$DEV_PG_PORT" "$DEV_SMTP_PORT" "$DEV_LAMBDA_PORT"
say "stopped: the SMTP server and everything else gone, ports free"
rm -rf "$DEV_DIR" "$DEV_DIR.log"
say "passed"
