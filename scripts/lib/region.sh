# The AWS region the deploy scripts pass to every command explicitly
# (sourced). The SAM CLI (boto3) reads AWS_DEFAULT_REGION but not
# AWS_REGION, the AWS CLI v2 both: so one rule, here. REGION, else
# AWS_REGION, else AWS_DEFAULT_REGION; with none of them, `aws_region`
# prints the AWS CLI's configured region (or nothing) and `region_given`
# fails.

region_given() {
  [ -n "${REGION:-${AWS_REGION:-${AWS_DEFAULT_REGION:-}}}" ]
}

aws_region() {
  if region_given; then
    echo "${REGION:-${AWS_REGION:-${AWS_DEFAULT_REGION:-}}}"
  else
    aws configure get region 2>/dev/null || true
  fi
}

# require_region WHO: sets REGION by the rule above, or says in one line
# what to set and exits (a script that must name the region on each call).
require_region() {
  REGION=$(aws_region)
  [ -n "$REGION" ] || { echo "$1: no region: set REGION=<region> (or AWS_DEFAULT_REGION)" >&2; exit 2; }
}
