.PHONY: dev test mailbox bench bench-production measure-functions deploy-check deploy verify operator delete smoke smoke-localstack smoke-smtp
# The whole stack locally: Postgres, migrations, moto SES, cargo lambda watch, schedules.
# `make dev MAILER=smtp`: the poller sends through SMTP, to a local SMTP
# server (STARTTLS, AUTH) whose mailbox `make mailbox` reads.
# `make dev LOCALSTACK=1`: the functions read the database settings from a
# Secrets Manager secret in LocalStack (LOCALSTACK_ENDPOINT, default
# http://127.0.0.1:4566; installed and started on the host if none answers).
dev:
	./scripts/dev.sh
# The whole test suite against real services (Postgres, moto).
test:
	./scripts/test.sh
# Invitations delivered to the local mailbox (moto, LocalStack's SES v2, or the SMTP server) while `make dev` runs.
# SHOW=alice@example.com: the latest message to her, its parts written to .local/mail/.
mailbox:
	./scripts/mailbox.sh $(if $(SHOW),--show $(SHOW))
# Poller throughput and commit-to-send latency against a baseline.
bench:
	./scripts/bench.sh
# The real release poller on the template's schedule, against SES's own limits.
bench-production:
	./scripts/bench-production.sh
# Each release Lambda zip (built as sam build does, for this host): size, cold-start init time, peak RSS of one invocation.
measure-functions:
	./scripts/measure-functions.sh
# sam validate (+ lint), a broken template must fail, cargo lambda release zips.
deploy-check:
	./scripts/deploy-check.sh
# sam build --beta-features, then sam deploy (--guided the first time), with the pinned SAM CLI and cargo-lambda.
deploy:
	REGION="$(REGION)" ARGS="$(ARGS)" ./scripts/deploy.sh
# After make deploy, what no stand-in can check, in your account: make verify STACK=<stack> [REGION=<region>];
# make verify LOCAL=1 runs the same steps against make dev.
verify:
	STACK="$(STACK)" REGION="$(REGION)" LOCAL="$(LOCAL)" TOKEN="$(TOKEN)" WAIT="$(WAIT)" ./scripts/verify.sh
# One outboxctl command against a deployed stack's database: make operator STACK=<stack> ARGS='status'.
operator:
	STACK="$(STACK)" REGION="$(REGION)" ARGS="$(ARGS)" ./scripts/operator.sh
# Delete a deployed stack, then say what is left and what it costs: make delete STACK=<stack> [REGION=<region>].
delete:
	STACK="$(STACK)" REGION="$(REGION)" ./scripts/delete.sh
# End-to-end smoke test of `make dev`: invites, a stalled poller recovering, Ctrl-C twice, SIGTERM through make.
smoke:
	./scripts/smoke-dev.sh
# End-to-end smoke test of `make dev LOCALSTACK=1`: the database secret read from LocalStack.
smoke-localstack:
	./scripts/smoke-localstack.sh
# End-to-end smoke test of `make dev MAILER=smtp`: invitations through the local SMTP server.
smoke-smtp:
	./scripts/smoke-smtp.sh
