#!/usr/bin/env bash
# `make deploy`: build the six functions exactly as deploy-check does, then
# deploy with the pinned SAM CLI. The first run asks every parameter
# (`sam deploy --guided`, saved to samconfig.toml, which git ignores); later
# runs reuse the answers. Needs AWS credentials for the target account and
# region (AWS_PROFILE / AWS_REGION), and nothing installed by hand: SAM CLI
# (1.170.0) and cargo-lambda (with its zig, for arm64) come into .venv/.
#
#   make deploy                      # guided on the first run
#   make deploy ARGS="--parameter-overrides AlarmEmail=oncall@example.com"
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/lambda.sh
source scripts/lib/sam.sh
lambda_ensure_installed
sam_ensure_installed

# SAM's cargo-lambda builder is a beta feature: without the flag SAM asks,
# and without a terminal that question aborts the build.
"$SAM" build --beta-features -t template.yaml
if [ -f samconfig.toml ]; then
  # shellcheck disable=SC2086 # ARGS is a list of sam deploy options
  "$SAM" deploy ${ARGS:-}
else
  # shellcheck disable=SC2086
  "$SAM" deploy --guided --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND ${ARGS:-}
fi
