#!/usr/bin/env python3
"""A stand-in for the AWS CLI v2, for the commands scripts/operator.sh runs
(deploy-check runs operator.sh with it first on PATH). It answers as the
CLI would for a stack whose OperatorFunction prints `status`, and refuses
what the real CLI v2 would refuse or what would reach the wrong place:
every call must name its region (`--region`); `lambda invoke` needs the
v2-only `--cli-binary-format raw-in-base64-out`, a JSON payload with
`args`, and an output file. Each call is appended to $AWS_STUB_LOG.
"""
import json
import os
import sys


def fail(msg):
    print(f"aws (stub): {msg}", file=sys.stderr)
    sys.exit(252)


def main(argv):
    with open(os.environ["AWS_STUB_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(argv) + "\n")
    opts, positional, i = {}, [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                opts[a], i = argv[i + 1], i + 2
            else:
                opts[a], i = True, i + 1
        else:
            positional.append(a)
            i += 1
    if not opts.get("--region"):
        fail("no --region: the scripts must name it on every call")
    command = positional[:2]
    if command == ["sts", "get-caller-identity"]:
        print("arn:aws:iam::123456789012:user/operator")
    elif command == ["cloudformation", "describe-stacks"]:
        print("bookings-OperatorFunction-AbC123")
    elif command == ["lambda", "invoke"]:
        if opts.get("--cli-binary-format") != "raw-in-base64-out":
            fail("Invalid base64: the payload must be base64 without --cli-binary-format raw-in-base64-out")
        if len(positional) != 3:
            fail("the following arguments are required: outfile")
        payload = json.loads(opts["--payload"])
        if not isinstance(payload.get("args"), list):
            fail(f"the payload has no args list: {payload}")
        with open(positional[2], "w", encoding="utf-8") as out:
            json.dump({"output": [f"ran: {' '.join(payload['args'])}"], "notes": []}, out)
        print("None")
    else:
        fail(f"unexpected command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
