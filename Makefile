.PHONY: dev test mailbox bench deploy-check smoke
# The whole stack locally: Postgres, migrations, moto SES, cargo lambda watch, schedules.
dev:
	./scripts/dev.sh
# The whole test suite against real services (Postgres, moto).
test:
	./scripts/test.sh
# Invitations delivered to the local mailbox (moto) while `make dev` runs.
mailbox:
	python3 scripts/mailbox.py
# Poller throughput and commit-to-send latency against a baseline.
bench:
	./scripts/bench.sh
# sam validate (+ lint), a broken template must fail, cargo lambda release zips.
deploy-check:
	./scripts/deploy-check.sh
# End-to-end smoke test of `make dev`.
smoke:
	./scripts/smoke-dev.sh
