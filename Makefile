.PHONY: test dev
# Runs the whole test suite against real services (see scripts/test.sh).
test:
	./scripts/test.sh
