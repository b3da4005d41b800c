#!/usr/bin/env bash
# Deployment checks, all offline:
#   1. `sam validate` and `sam validate --lint` on template.yaml;
#   2. deliberately broken templates must fail the lint;
#   3. template defaults agree with the code (sweep timeout > poller timeout);
#   4. `sam build` of the five functions (cargo lambda, as a deploy builds
#      them); none of the binaries it produced carries a dev switch, and only
#      the poller links the SES v2 client and the SMTP mailer.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/lambda.sh

SAM_VENV="${SAM_VENV:-.venv/sam}"
if [ ! -x "$SAM_VENV/bin/sam" ]; then
  echo "==> installing aws-sam-cli and cfn-lint into $SAM_VENV"
  python3 -m venv "$SAM_VENV"
  # cfn-lint newer than 1.53.x no longer runs the SAM translator (misses bad
  # event properties, !Refs and runtimes), so it is pinned.
  "$SAM_VENV/bin/pip" install -q --disable-pip-version-check 'aws-sam-cli==1.170.0' 'cfn-lint==1.53.3'
fi
export SAM_CLI_TELEMETRY=0
SAM="$SAM_VENV/bin/sam"

echo "==> sam validate"
"$SAM" validate --region us-east-1 -t template.yaml
"$SAM" validate --lint --region us-east-1 -t template.yaml

echo "==> broken templates must fail"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
break_template() { # NAME PYTHON-REPLACEMENT-OLD NEW
  python3 - "$2" "$3" "$TMP/$1.yaml" <<'PY'
import sys
old, new, out = sys.argv[1], sys.argv[2], sys.argv[3]
src = open("template.yaml").read()
assert old in src, f"{old!r} not in template.yaml"
open(out, "w").write(src.replace(old, new, 1))
PY
  if "$SAM" validate --lint --region us-east-1 -t "$TMP/$1.yaml" >"$TMP/$1.log" 2>&1; then
    echo "error: the broken template '$1' passed validation" >&2
    exit 1
  fi
  echo "    $1: rejected ($(grep -m1 -oE '\[?[EW][0-9]{4}\]?.*' "$TMP/$1.log" | cut -c1-100 || echo failed))"
}
break_template wrong-runtime "Runtime: provided.al2023" "Runtime: provided.al2099"
break_template bad-ref "Destination: !GetAtt ScheduledFailureQueue.Arn" "Destination: !GetAtt NoSuchQueue.Arn"
break_template bad-event-property "ScheduleExpression: rate(5 minutes)" "ScheduleExpresion: rate(5 minutes)"

echo "==> the bring-your-own mode (CreateNetwork=false, CreateDatabase=false) validates too"
python3 - "$TMP/own.yaml" <<'PY'
import re, sys
src = open("template.yaml").read()
for name, value in [("CreateNetwork", '"false"'), ("CreateDatabase", '"false"'),
                    ("SubnetIds", '"subnet-0123456789abcdef0,subnet-0fedcba9876543210"'),
                    ("SecurityGroupIds", '"sg-0123456789abcdef0"'),
                    ("MigrationDatabaseSecretArn", '"arn:aws:secretsmanager:us-east-1:123456789012:secret:owner-AbCdEf"')]:
    src, n = re.subn(rf"(\n  {name}:\n    Type: [^\n]+\n(?:    [A-Za-z]+: [^\n]*\n)*?    Default: )[^\n]+", rf"\g<1>{value}", src, count=1)
    assert n == 1, f"no Default for {name}"
open(sys.argv[1], "w").write(src)
PY
"$SAM" validate --lint --region us-east-1 -t "$TMP/own.yaml" >/dev/null
echo "    bring-your-own defaults: sam validate --lint passes"

echo "==> checkov (a template security scanner, pinned; each check the template skips says why in place)"
CHECKOV_VENV="${CHECKOV_VENV:-.venv/checkov}"
if [ ! -x "$CHECKOV_VENV/bin/checkov" ]; then
  echo "==> installing checkov into $CHECKOV_VENV"
  python3 -m venv "$CHECKOV_VENV"
  "$CHECKOV_VENV/bin/pip" install -q --disable-pip-version-check 'checkov==3.2.334'
fi
checkov_scan() { "$CHECKOV_VENV/bin/checkov" -f "$1" --framework cloudformation --compact --quiet 2>/dev/null; }
for mode in template.yaml "$TMP/own.yaml"; do
  checkov_scan "$mode" >"$TMP/checkov.log" || { cat "$TMP/checkov.log" >&2; echo "error: checkov failed $mode" >&2; exit 1; }
done
"$SAM_VENV/bin/python" - <<'PY'
from cfnlint.decode import decode
tpl, errs = decode("template.yaml")
assert not errs, errs
skips = [(name, s) for name, r in tpl["Resources"].items()
         for s in ((r.get("Metadata") or {}).get("checkov") or {}).get("skip", [])]
bare = [f"{name}: {s.get('id')}" for name, s in skips if len(str(s.get("comment", "")).strip()) < 20]
assert not bare, f"a skipped checkov check without its reason: {bare}"
print(f"    checkov: no failed check in either mode; {len(skips)} skips, each with its reason")
PY
# The scanner is not blind: the same template without the migration
# function's concurrency limit fails it.
python3 - "$TMP/checkov-broken.yaml" <<'PY'
import sys
src = open("template.yaml").read()
old = "      ReservedConcurrentExecutions: 1\n"
assert old in src
open(sys.argv[1], "w").write(src.replace(old, "", 1))
PY
if checkov_scan "$TMP/checkov-broken.yaml" >/dev/null; then
  echo "error: checkov passed a template without the migration function's concurrency limit" >&2
  exit 1
fi
echo "    checkov: the same template without ReservedConcurrentExecutions fails (CKV_AWS_115)"

echo "==> template defaults agree with the code"
"$SAM_VENV/bin/python" - <<'PY'
from cfnlint.decode import decode
tpl, errs = decode("template.yaml")
assert not errs, errs
p = tpl["Parameters"]
stuck, poller = int(p["SweepStuckAfterSeconds"]["Default"]), int(p["PollerTimeoutSeconds"]["Default"])
assert stuck > poller, f"SweepStuckAfterSeconds ({stuck}) must exceed PollerTimeoutSeconds ({poller})"
fns = tpl["Resources"]
env = fns["OutboxPollerFunction"]["Properties"]["Environment"]["Variables"]
margin = int(env["POLLER_SAFETY_MARGIN_SECS"])
assert margin < int(p["PollerTimeoutSeconds"]["MinValue"]), "the safety margin must leave time to poll"
print(f"    sweep timeout {stuck}s > poller timeout {poller}s; poller safety margin {margin}s")
# Continuous coverage: a run polls until its timeout minus one SES worst case
# (the connect and read timeouts' defaults, from the checked settings table)
# and the margin; that must outlast the schedule's period, with room for a
# cold start, and two runs must be allowed at once.
import re
table = open("docs/configuration.md").read()
default = lambda name: int(re.search(rf"^\| `{name}` \| `(\d+)` \|", table, re.M).group(1))
worst = (default("SES_CONNECT_TIMEOUT_MS") + default("SES_READ_TIMEOUT_MS")) / 1000
schedule = fns["OutboxPollerFunction"]["Properties"]["Events"]["Every1Minute"]["Properties"]["ScheduleExpression"]
assert schedule == "rate(1 minute)" and int(env["POLLER_SCHEDULE_SECS"]) == 60, (schedule, env["POLLER_SCHEDULE_SECS"])
polls = poller - worst - margin
assert polls >= 60 + 5, f"a run polls {polls:.0f}s, not past the next run's start (60s) with 5s to spare"
reserved = int(p["PollerReservedConcurrency"]["Default"])
assert reserved >= 2 and int(p["PollerReservedConcurrency"]["MinValue"]) >= 2, "two runs must be allowed at once"
print(f"    a run polls {polls:.0f}s of each 60s period: {polls - 60:.0f}s of overlap, {reserved} runs at once")
# A queue policy that lets an AWS service send names whose behalf: its
# source (aws:SourceArn) or at least this account (aws:SourceAccount).
for name, r in fns.items():
    if r["Type"] != "AWS::SQS::QueuePolicy":
        continue
    for st in r["Properties"]["PolicyDocument"]["Statement"]:
        if "Service" in st.get("Principal", {}):
            keys = {k for cond in st.get("Condition", {}).values() for k in cond}
            assert keys & {"aws:SourceArn", "aws:SourceAccount"}, f"{name} {st.get('Sid')}: no aws:SourceArn/SourceAccount condition"
print("    every queue policy for an AWS service is scoped to its source or this account")
# What SAM generates counts too: the template as CloudFormation receives it.
from cfnlint.template.transforms._sam import Transform
sam = Transform("template.yaml", tpl, "us-east-1")
assert not sam.transform_template(), "the SAM transform failed"
translated = sam._template["Resources"]
# Every invoke permission names the one source that may use it.
perms = {k: r["Properties"] for k, r in translated.items() if r["Type"] == "AWS::Lambda::Permission"}
assert perms, "no Lambda permission found: the transform changed shape"
for k, props in perms.items():
    assert props.get("SourceArn"), f"{k}: {props.get('Principal')} may invoke {props.get('FunctionName')} from anywhere"
print(f"    every Lambda permission ({len(perms)}) names its source (SourceArn)")
# Every statement that lets a role send mail pins the From address.
sends = [(k, st) for k, r in translated.items() if r["Type"] == "AWS::IAM::Role"
         for pol in r["Properties"].get("Policies", []) for st in pol["PolicyDocument"]["Statement"]
         if "ses:SendEmail" in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])]
assert sends, "no role may send mail: the transform changed shape"
for k, st in sends:
    assert "ses:FromAddress" in st.get("Condition", {}).get("StringEquals", {}), f"{k}: SendEmail without ses:FromAddress"
print(f"    SendEmail ({len(sends)} statement) only from the configured address (ses:FromAddress)")
# Browser front ends: with CorsAllowedOrigins set, API Gateway answers the
# preflight itself (no route takes OPTIONS, so no authorizer runs on it)
# and exposes the headers scripts need; unset, no CORS at all.
origins = "https://calendar.example.com,https://admin.example.com"
sam = Transform("template.yaml", decode("template.yaml")[0], "us-east-1")
sam._parameters["CorsAllowedOrigins"] = origins
assert not sam.transform_template(), "the SAM transform failed"
body = sam._template["Resources"]["HttpApi"]["Properties"]["Body"]
cond, cors, off = body["x-amazon-apigateway-cors"]["Fn::If"]
assert cond == "HasCorsOrigins" and off == {"Ref": "AWS::NoValue"}, body["x-amazon-apigateway-cors"]
assert cors["allowOrigins"] == {"Fn::Split": [",", origins]}, cors
for h in ["authorization", "content-type", "idempotency-key", "if-match"]:
    assert h in cors["allowHeaders"], f"preflight refuses {h}"
for h in ["location", "etag", "retry-after", "idempotent-replayed"]:
    assert h in cors["exposeHeaders"], f"{h} hidden from scripts"
assert "OPTIONS" in cors["allowMethods"] and all("options" not in ops for ops in body["paths"].values())
for path, ops in body["paths"].items():
    for op in ops.values():
        schemes = {k for s in op.get("security", []) for k in s}
        want = {"NONE"} if path.startswith("/problems/") else {"JwtAuthorizer"}
        assert schemes == want, f"{path}: security {schemes}, not {want}"
print(f"    CORS for {origins}: preflight without a token, Location/ETag/Retry-After exposed; every booking route behind the JWT authorizer")
PY

echo "==> sam build (the five functions, exactly as a deploy builds them)"
lambda_ensure_installed
# SAM's cargo-lambda builder (a beta feature) runs `cargo lambda build
# --release --bin NAME` at the workspace root for each function; the root's
# default-members decide which features that build unifies (Cargo.toml).
# Its output, .aws-sam/build/<LogicalId>/bootstrap (for the template's
# Architecture, arm64 by default), is what `sam deploy` uploads.
"$SAM" build --beta-features -t template.yaml >"$TMP/sam-build.log" 2>&1 \
  || { tail -n 40 "$TMP/sam-build.log" >&2; echo "error: sam build failed" >&2; exit 1; }
"$SAM_VENV/bin/python" - <<'PY'
import io, os, sys, zipfile
from cfnlint.decode import decode
tpl, errs = decode("template.yaml")
assert not errs, errs
# Each function's LogicalId and its Metadata's Binary (the bin sam builds).
pairs = [(logical, r["Metadata"]["BuildProperties"]["Binary"]) for logical, r in tpl["Resources"].items()
         if r.get("Metadata", {}).get("BuildMethod") == "rust-cargolambda"]
assert sorted(b for _, b in pairs) == sorted(["booking-api", "outbox-poller", "outbox-sweeper", "migrate", "ses-events"]), pairs
built = {}
for logical, f in pairs:
    path = f".aws-sam/build/{logical}/bootstrap"
    built[f] = open(path, "rb").read()
    assert built[f], f"{path} is empty"
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(path, "bootstrap")
    print(f"    {path} ({f}): {len(built[f]) // 1024} KiB, {len(zipped.getvalue()) // 1024} KiB zipped")

print("==> the binaries sam built carry no dev switches")
# The dev feature (insecure identity headers, fault points) must never be in
# a release build. The same search must find them in a dev build (the tests'
# crash worker), so the check cannot pass by being blind.
needles = [b"x-dev-user-email", b"x-dev-user-name", b"OUTBOX_FAULT_POINTS"]
for f, binary in built.items():
    found = [n.decode() for n in needles if n in binary]
    if found:
        sys.exit(f"error: the release {f} contains dev switches: {', '.join(found)}")
    print(f"    {f}: none of {', '.join(n.decode() for n in needles)}")
# Only the poller sends email: the others must not link the SES v2 client
# (shared's `ses` feature). The marker is the client's SendEmail operation.
for f, binary in built.items():
    links = b"SendEmail" in binary
    if links != (f == "outbox-poller"):
        sys.exit(f"error: the release {f} {'links' if links else 'lacks'} the SES v2 client")
print("    the SES v2 client is linked by outbox-poller alone")
# Nor the SMTP mailer (shared's `smtp` feature, lettre): its marker is its
# refusal to send in the clear.
for f, binary in built.items():
    links = b"does not offer STARTTLS" in binary
    if links != (f == "outbox-poller"):
        sys.exit(f"error: the release {f} {'links' if links else 'lacks'} the SMTP mailer")
print("    the SMTP mailer is linked by outbox-poller alone")
# The tests' dev builds: the crash worker (fault points) and the API
# Gateway stand-in (the booking API handler, identity headers included).
dev = ["target/debug/outbox-worker", "target/debug/api-gateway"]
if all(os.path.exists(d) for d in dev):
    seen = b"".join(open(d, "rb").read() for d in dev)
    missed = [n.decode() for n in needles if n not in seen]
    assert not missed, f"the search missed {missed} in the dev builds {dev}"
    print(f"    (the same search finds each of them in the dev builds {', '.join(dev)})")
elif os.environ.get("CI"):
    sys.exit(f"error: {dev} absent: in CI the tests build them before this check, to prove the search is not blind")
PY
