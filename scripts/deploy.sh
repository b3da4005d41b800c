#!/usr/bin/env bash
# `make deploy`: build the seven functions exactly as deploy-check does, then
# deploy with the pinned SAM CLI. The first run asks every parameter
# (`sam deploy --guided`, saved to samconfig.toml, which git ignores); later
# runs reuse the answers. Needs AWS credentials for the target account
# (AWS_PROFILE, ...) and nothing installed by hand: SAM CLI (1.170.0) and
# cargo-lambda (with its zig, for arm64) come into .venv/; a C compiler (cc)
# must be there, and is checked first. The region: REGION
# (or AWS_REGION, AWS_DEFAULT_REGION), passed to sam deploy explicitly (SAM
# reads AWS_DEFAULT_REGION, not AWS_REGION); given none, samconfig.toml's,
# or on the first run the one the guided deploy asks.
#
#   make deploy REGION=eu-west-1     # guided on the first run
#   make deploy ARGS="--parameter-overrides AlarmEmail=oncall@example.com"
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/lambda.sh
source scripts/lib/sam.sh
source scripts/lib/region.sh
host_cc_required
lambda_ensure_installed
sam_ensure_installed
# What CloudFormation would refuse (a function inside a rule, ...) fails
# here, before ten minutes of building.
"$SAM_VENV/bin/python" scripts/template-check.py template.yaml --only rules_use_only_the_functions_aws_allows_in_a_rule,every_function_has_a_log_group_with_retention_and_an_errors_alarm

# SAM's cargo-lambda builder is a beta feature: without the flag SAM asks,
# and without a terminal that question aborts the build.
"$SAM" build --beta-features -t template.yaml
REGION_ARG=()
if region_given; then
  REGION_ARG=(--region "$(aws_region)")
fi
if [ -f samconfig.toml ]; then
  # shellcheck disable=SC2086 # ARGS is a list of sam deploy options
  "$SAM" deploy "${REGION_ARG[@]}" ${ARGS:-}
else
  # shellcheck disable=SC2086
  "$SAM" deploy --guided --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND "${REGION_ARG[@]}" ${ARGS:-}
fi
