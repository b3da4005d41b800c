#!/usr/bin/env bash
# `make operator STACK=<stack> ARGS='status'`: one outboxctl command against
# the deployed database, run by the stack's OperatorFunction inside its
# network as the operator login (role outbox_operator). Needs the AWS CLI v2
# (`--cli-binary-format`),
# credentials allowed lambda:InvokeFunction on that function, and
# cloudformation:DescribeStacks to find it. Prints the command's output
# (with --json, its JSON); a refused or failed command prints its one-line
# error and exits 1.
#
#   make operator STACK=bookings ARGS='dead list --limit 10'
#   make operator STACK=bookings ARGS="--operator $USER dead replay <id>"
set -euo pipefail
cd "$(dirname "$0")/.."
: "${STACK:?set STACK to the stack name (sam deploy --stack-name)}"
# The region, explicitly (REGION, AWS_REGION, AWS_DEFAULT_REGION, or the CLI's).
source scripts/lib/region.sh
require_region operator
aws() { command aws --region "$REGION" "$@"; }
ARGS="${ARGS:-status}"
# Who asks: the function cannot know (Lambda gives it no caller identity),
# so a decision it records names the caller's ARN, as the caller's own
# credentials give it, unless ARGS says --operator; it records the
# invocation's request id beside it, which CloudTrail ties to the principal.
case " $ARGS " in
  *" --operator "*) ;;
  *) ARGS="--operator $(aws sts get-caller-identity --query Arn --output text) $ARGS" ;;
esac
FUNCTION=$(aws cloudformation describe-stacks --stack-name "$STACK" \
  --query "Stacks[0].Outputs[?OutputKey=='OperatorFunctionName'].OutputValue" --output text)
[ -n "$FUNCTION" ] && [ "$FUNCTION" != "None" ] || { echo "operator: the stack $STACK has no OperatorFunctionName output" >&2; exit 1; }
# ARGS split as a shell would (quotes kept), into {"args": [...]}.
PAYLOAD=$(python3 -c 'import json, shlex, sys; print(json.dumps({"args": shlex.split(sys.argv[1])}))' "$ARGS")
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
ERROR=$(aws lambda invoke --function-name "$FUNCTION" --cli-binary-format raw-in-base64-out \
  --payload "$PAYLOAD" --query FunctionError --output text "$OUT")
python3 - "$OUT" "$ERROR" <<'PY'
import json, sys
answer = json.load(open(sys.argv[1]))
if sys.argv[2] not in ("", "None"):
    sys.exit(f"operator: error: {answer.get('errorMessage', answer)}")
out = answer["output"]
print("\n".join(out) if isinstance(out, list) else json.dumps(out, indent=2))
for note in answer.get("notes", []):
    print(note, file=sys.stderr)
PY
