#!/usr/bin/env bash
# Deployment checks, all offline:
#   1. `sam validate` and `sam validate --lint` on template.yaml;
#   2. deliberately broken templates must fail the lint;
#   3. template defaults agree with the code (sweep timeout > poller timeout);
#   4. a first deploy in a new account (reserved concurrency against a
#      quota, the user pool behind the authorizer, the operator function's
#      rights, both mail providers, a rollback that can delete what it made,
#      the poller's SES policy for the sandbox, the sending alarms, the
#      teardown order); make operator and the documented raw invoke against
#      a stand-in AWS CLI v2; make delete against moto;
#   5. `sam build` of the seven functions (cargo lambda, as a deploy builds
#      them); none of the binaries it produced carries a dev switch, and only
#      the poller links the SES v2 client and the SMTP mailer.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/lambda.sh
source scripts/lib/sam.sh
source scripts/lib/venv.sh
sam_ensure_installed

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

echo "==> what CloudFormation refuses and cfn-lint does not see (scripts/template-check.py)"
PYTHONPATH=scripts/lib "$SAM_VENV/bin/python" scripts/template-check.py template.yaml
# Not blind: v0.13.0's rules (Fn::Join over a list inside an Assert, which
# AWS refuses and cfn-lint passes) and a function without its log group.
break_check() { # NAME OLD NEW CHECK
  python3 - "$2" "$3" "$TMP/$1.yaml" <<'PY'
import sys
old, new, out = sys.argv[1], sys.argv[2], sys.argv[3]
src = open("template.yaml").read()
assert old in src, f"{old!r} not in template.yaml"
open(out, "w").write(src.replace(old, new, 1))
PY
  if "$SAM_VENV/bin/python" scripts/template-check.py "$TMP/$1.yaml" --only "$4" >"$TMP/$1.log" 2>&1; then
    echo "error: template-check passed the broken template '$1'" >&2; exit 1
  fi
  echo "    $1: refused ($(grep -m1 -oE "$4: .{0,90}" "$TMP/$1.log"))"
}
break_check join-in-a-rule '{"Fn::EachMemberEquals": [!Ref JwtAudience, ""]}' '!Equals [!Join ["", !Ref JwtAudience], ""]' \
  rules_use_only_the_functions_aws_allows_in_a_rule
break_check console-without-its-log-group "        LogGroup: !Ref OperatorConsoleLogGroup" "        LogFormat: Text" \
  every_function_has_a_log_group_with_retention_and_an_errors_alarm
break_check timeouts-in-the-environment-only "      AppStatementTimeoutMs: !Ref AppStatementTimeoutMs
      AppIdleInTransactionTimeoutMs: !Ref AppIdleInTransactionTimeoutMs
" "" a_parameter_only_change_of_the_roles_timeouts_is_an_update_of_schema_migration
# And the release they were written against, v0.13.0 (3521c99): its
# template and docs fail each check that names one of its faults.
if git cat-file -e '3521c99^{commit}' 2>/dev/null; then
  "$SAM_VENV/bin/python" - "$TMP/v0.13.0" <<'PY'
import pathlib, shutil, subprocess, sys
root = pathlib.Path(sys.argv[1])
for f in ["scripts/template-check.py", "scripts/lib/cfn_template.py", "docs/deployer-policy.json"]:
    (root / f).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(f, root / f)
for f in ["docs/deploy.md", "docs/security.md", "scripts/deploy.sh", "scripts/deploy-check.sh", "template.yaml"]:
    (root / f).write_text(subprocess.run(["git", "show", f"3521c99:{f}"], capture_output=True, text=True, check=True).stdout)
run = subprocess.run([sys.executable, str(root / "scripts/template-check.py"), str(root / "template.yaml")],
                     capture_output=True, text=True)
failed = {line.split(": ")[2] for line in run.stderr.splitlines() if line.startswith("error:")}
faults = {"rules_use_only_the_functions_aws_allows_in_a_rule", "each_rule_refuses_what_it_promises_and_nothing_else",
          "every_function_has_a_log_group_with_retention_and_an_errors_alarm",
          "every_output_is_in_the_docs_and_every_documented_output_exists",
          "a_parameter_only_change_of_the_roles_timeouts_is_an_update_of_schema_migration",
          "the_docs_count_the_functions_the_template_has", "the_guided_deploy_answer_names_every_route_without_a_token",
          "the_prerequisites_name_a_c_compiler", "the_template_counts_the_pollers_it_allows"}
assert faults <= failed, f"passed on v0.13.0: {sorted(faults - failed)}"
print(f"    v0.13.0 (3521c99) fails the {len(faults)} checks written against its faults")
PY
else
  echo "    (a shallow clone: v0.13.0's commit is not here to fail the checks)"
fi
# make deploy checks for the host's C compiler before building.
if CC_PROBE=no-such-cc-here bash -c 'source scripts/lib/lambda.sh && host_cc_required' 2>"$TMP/cc.log"; then
  echo "error: host_cc_required passed without a C compiler" >&2; exit 1
fi
grep -q "apt install build-essential" "$TMP/cc.log" || { cat "$TMP/cc.log" >&2; exit 1; }
grep -q "host_cc_required" scripts/deploy.sh || { echo "error: make deploy does not check for a C compiler" >&2; exit 1; }
echo "    make deploy without a C compiler stops first, naming build-essential"

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
  venv_create "$CHECKOV_VENV"
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
old = "      ReservedConcurrentExecutions: !If [ReserveConcurrency, 1, !Ref AWS::NoValue]\n"
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
# A take-over in seconds needs a second live poller at every moment: each
# run polls past the start of the run after next.
assert polls >= 2 * 60 + 5, f"a run polls {polls:.0f}s: not two runs claiming at every moment (120s + 5s)"
reserved = int(p["PollerReservedConcurrency"]["Default"])
runs_at_once = int(-(-(poller) // 60))
assert reserved >= runs_at_once, f"PollerReservedConcurrency ({reserved}) must let {runs_at_once} runs of {poller}s live at once"
assert int(p["PollerReservedConcurrency"]["MinValue"]) >= 2, "two runs must be allowed at once"
assert env["POLLER_LEASE_SECS"] == {"Ref": "PollerLeaseSeconds"}, env["POLLER_LEASE_SECS"]
lease = int(p["PollerLeaseSeconds"]["Default"])
assert lease == default("POLLER_LEASE_SECS"), f"PollerLeaseSeconds ({lease}) is not the setting's default"
print(f"    a run polls {polls:.0f}s of each 60s period: two runs claim at every moment, {reserved} may live at once; "
      f"lease {lease}s")
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
# A policy that only applies in one mode (MailProvider) is an Fn::If: both
# of its branches are checked.
def policies(role):
    for pol in role["Properties"].get("Policies", []):
        yield from (b for b in pol["Fn::If"][1:] if isinstance(b, dict) and "PolicyDocument" in b) if "Fn::If" in pol else [pol]
sends = [(k, st) for k, r in translated.items() if r["Type"] == "AWS::IAM::Role"
         for pol in policies(r) for st in pol["PolicyDocument"]["Statement"]
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
        # Public: the problem types' pages, the console's page and assets (no data).
        public = path.startswith("/problems/") or path in ("/console", "/console/assets/{file}")
        want = {"NONE"} if public else {"JwtAuthorizer"}
        assert schemes == want, f"{path}: security {schemes}, not {want}"
print(f"    CORS for {origins}: preflight without a token, Location/ETag/Retry-After exposed; every booking route and /console/api/* behind the JWT authorizer")
PY

echo "==> a first deploy in a new account: concurrency, a token, an operator, both mail providers, a clean rollback"
# The account's Lambda concurrency quota to check the template against
# (a new account's is often 10; `aws lambda get-account-settings`).
ACCOUNT_CONCURRENCY_QUOTA="${ACCOUNT_CONCURRENCY_QUOTA:-10}" PYTHONPATH=scripts/lib "$SAM_VENV/bin/python" - <<'PY'
import json, os
from cfnlint.decode import decode
from cfn_template import translated

def reserved(res, values):
    number = int
    return {k: number(r["Properties"]["ReservedConcurrentExecutions"]) for k, r in res.items()
            if r["Type"] == "AWS::Lambda::Function" and "ReservedConcurrentExecutions" in r["Properties"]}

# 1. Reserved concurrency: at the defaults none, so a new account's quota
# is enough; reserved, the sum the docs name, and it needs quota >= sum + 100.
quota = int(os.environ["ACCOUNT_CONCURRENCY_QUOTA"])
res, values = translated()
total = sum(reserved(res, values).values())
unreserved_minimum = min(100, quota)
assert quota - total >= unreserved_minimum, \
    f"the defaults reserve {total} of an account quota of {quota}: Lambda refuses to leave fewer than {unreserved_minimum} unreserved"
res_on, values_on = translated(ReserveConcurrency="true")
on = reserved(res_on, values_on)
functions = [k for k, r in res_on.items() if r["Type"] == "AWS::Lambda::Function"]
assert sorted(on) == sorted(functions), f"ReserveConcurrency leaves out {set(functions) - set(on)}"
summed = sum(on.values())
desc = decode("template.yaml")[0]["Parameters"]["ReserveConcurrency"]["Description"]
assert f"{summed} at the defaults" in desc, f"ReserveConcurrency's description must name the sum, {summed}"
deploy_md = open("docs/deploy.md").read()
assert f"at least {summed + 100}" in deploy_md, f"docs/deploy.md must say the quota ReserveConcurrency needs: at least {summed + 100}"
print(f"    reserved concurrency: {total} at the defaults (fits an account quota of {quota}); "
      f"ReserveConcurrency=true reserves {summed} over {len(on)} functions (quota >= {summed + 100})")

# 2. A first deploy rolls back cleanly: nothing it creates refuses deletion.
cluster = res["DatabaseCluster"]
assert str(cluster["Properties"]["DeletionProtection"]).lower() == "false", "a failed first deploy could not delete the cluster"
assert cluster.get("DeletionPolicy") == "Snapshot", "the cluster must keep a final snapshot when deleted"
print("    a failed first deploy rolls back: the cluster's deletion protection is off by default, a final snapshot kept")

# 3. A token from the stack's own pool: the authorizer trusts that pool's
# issuer and its app client, and the client signs in with a password.
auth = res["HttpApi"]["Properties"]["Body"]["components"]["securitySchemes"]["JwtAuthorizer"]["x-amazon-apigateway-authorizer"]["jwtConfiguration"]
assert auth["issuer"] == {"Fn::Sub": "https://cognito-idp.${AWS::Region}.${AWS::URLSuffix}/${UserPool}"}, auth
assert auth["audience"] == [{"Ref": "UserPoolClient"}], auth
client = res["UserPoolClient"]["Properties"]
assert client["UserPoolId"] == {"Ref": "UserPool"} and client["GenerateSecret"] is False
assert "ALLOW_USER_PASSWORD_AUTH" in client["ExplicitAuthFlows"], "deploy.md's initiate-auth needs USER_PASSWORD_AUTH"
pool = res["UserPool"]["Properties"]
assert pool["AutoVerifiedAttributes"] == ["email"] and pool["UsernameAttributes"] == ["email"], pool
assert pool["UserAttributeUpdateSettings"]["AttributesRequireVerificationBeforeUpdate"] == ["email"]
# No sign-up by default (only an administrator makes users); SelfSignUpDomains
# opens it and holds organizers to those domains (issue 52, Medium 5).
assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True, pool["AdminCreateUserConfig"]
api_env = res["BookingApiFunction"]["Properties"]["Environment"]["Variables"]
assert api_env["ORGANIZER_DOMAINS"] in ("", {"Ref": "SelfSignUpDomains"}), api_env["ORGANIZER_DOMAINS"]
opened, _ = translated(SelfSignUpDomains="corp.example")
assert opened["UserPool"]["Properties"]["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is False
print("    the user pool takes no sign-up by default; SelfSignUpDomains opens it and sets ORGANIZER_DOMAINS")
own, _ = translated(CreateUserPool="false", JwtIssuer="https://issuer.example.com", JwtAudience="api")
own_auth = own["HttpApi"]["Properties"]["Body"]["components"]["securitySchemes"]["JwtAuthorizer"]["x-amazon-apigateway-authorizer"]["jwtConfiguration"]
assert "UserPool" not in own and own_auth["issuer"] == "https://issuer.example.com", own_auth
print("    the authorizer trusts the stack's user pool and app client (ID tokens, verified email); CreateUserPool=false: your issuer")

# 4. The operator function: no trigger, its own secret only, its login made
# by the migration function in outbox_operator.
role = res["OperatorFunctionRole"]["Properties"]
statements = [st for pol in role["Policies"] for st in pol["PolicyDocument"]["Statement"]]
assert [st["Action"] for st in statements] == [["secretsmanager:GetSecretValue"]], statements
assert "OperatorDatabaseSecret" in json.dumps(statements[0]["Resource"]), statements
triggers = [k for k, r in res.items() if json.dumps(r).count('"OperatorFunction"') and r["Type"] in
            ("AWS::Lambda::Permission", "AWS::Scheduler::Schedule", "AWS::Events::Rule", "AWS::Lambda::EventSourceMapping")]
assert not triggers, f"the operator function must run only when invoked by hand: {triggers}"
logins = res["MigrateFunction"]["Properties"]["Environment"]["Variables"]["DATABASE_LOGIN_SECRET_ARNS"]
assert "outbox_operator=${OperatorDatabaseSecret}" in json.dumps(logins), logins
print("    OperatorFunction: invoked by hand only, reads only its own secret; its login is made in outbox_operator")

# 4b. The operator console: its page and assets hold no data and need no
# token; every view and action (/console/api/...) is behind the JWT
# authorizer, and the function answers only the operators group, logged in
# as the operators' role.
paths = res["HttpApi"]["Properties"]["Body"]["paths"]
console = {p: ops for p, ops in paths.items() if p.startswith("/console")}
assert sorted(console) == ["/console", "/console/api/{proxy+}", "/console/assets/{file}"], sorted(console)
for p, ops in console.items():
    for method, op in ops.items():
        secured = op.get("security") or []
        if p == "/console/api/{proxy+}":
            assert secured == [{"JwtAuthorizer": []}], (p, method, secured)
        else:
            assert method == "get" and secured == [{"NONE": []}], (p, method, secured)
role = res["OperatorConsoleFunctionRole"]["Properties"]
statements = [st for pol in role["Policies"] for st in pol["PolicyDocument"]["Statement"]]
assert [st["Action"] for st in statements] == [["secretsmanager:GetSecretValue"]], statements
assert "OperatorDatabaseSecret" in json.dumps(statements[0]["Resource"]), statements
env = res["OperatorConsoleFunction"]["Properties"]["Environment"]["Variables"]
assert env["AUTH_MODE"] == "jwt" and env["CONSOLE_OPERATORS_GROUP"] == {"Ref": "OperatorsGroup"}, env
assert env["CONSOLE_CLIENT_ID"] == {"Ref": "UserPoolClient"}, env
assert res["OperatorsGroup"]["Properties"]["GroupName"] == "operators"
own_env = own["OperatorConsoleFunction"]["Properties"]["Environment"]["Variables"]
assert "CONSOLE_SIGN_IN_ENDPOINT" not in own_env and own_env["CONSOLE_OPERATORS_GROUP"] == "operators", own_env
print("    the operator console: page and assets without a token, /console/api/* behind the JWT authorizer; "
      "the operators group; the operators' login")

# 5. Both mail providers.
def poller(res):
    fn = res["OutboxPollerFunction"]["Properties"]
    role = res["OutboxPollerFunctionRole"]["Properties"]
    actions = {a for pol in role["Policies"] for st in pol["PolicyDocument"]["Statement"]
               for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
    return fn["Environment"]["Variables"], actions, role
env, actions, _ = poller(res)
assert env["MAILER"] == "ses" and "ses:SendEmail" in actions and "SMTP_URL" not in env, (env, actions)
ses_only = ["SesEventsConfigurationSet", "SesEventsRule", "SesBounceRateAlarm", "StackBounceRateAlarm", "EvidenceStalledAlarm"]
assert all(k in res for k in ses_only)
smtp, _ = translated(MailProvider="smtp", SesIdentity="", SesFromAddress="", SmtpUrl="smtp://smtp.example.com:587",
                     SmtpFromAddress="Bookings <bookings@example.com>",
                     SmtpSecretArn="arn:aws:secretsmanager:us-east-1:123456789012:secret:smtp-AbCdEf")
env, actions, role = poller(smtp)
assert env["MAILER"] == "smtp" and env["SMTP_URL"] == "smtp://smtp.example.com:587" and "SES_FROM_ADDRESS" not in env, env
assert env["SMTP_SECRET_ARN"].endswith(":secret:smtp-AbCdEf"), env
assert not any(a.startswith("ses:") for a in actions), f"an SMTP poller may not call SES: {actions}"
assert "smtp-AbCdEf" in json.dumps(role["Policies"]), "the poller must read the SMTP secret"
assert not [k for k in ses_only if k in smtp], [k for k in ses_only if k in smtp]
print("    MailProvider=ses: SendEmail from the From address, SES's feedback and alarms; "
      "MailProvider=smtp: the SMTP settings and secret, no SES right, resource or alarm")

# 6. The first invitation in a sandbox account: SES authorizes SendEmail
# against the sender's identity, the configuration set and, in the
# sandbox, each recipient's identity. So the account's identities in the
# region, from the configured address only; nothing else of SES but
# GetAccount (which has no resource-level permission).
_, _, role = poller(res)
statements = [st for pol in role["Policies"] for st in pol["PolicyDocument"]["Statement"]
              if any(a.startswith("ses:") for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]]))]
send = [st for st in statements if st["Action"] == "ses:SendEmail"]
assert len(send) == 1 and len(statements) == 3, statements
send = send[0]
text = lambda r: r["Fn::Sub"] if isinstance(r["Fn::Sub"], str) else r["Fn::Sub"][0]
resources = sorted(text(r) for r in send["Resource"])
assert resources == ["arn:${AWS::Partition}:ses:${AWS::Region}:${AWS::AccountId}:configuration-set/${ConfigurationSetName}",
                     "arn:${AWS::Partition}:ses:${AWS::Region}:${AWS::AccountId}:identity/*"], resources
assert list(send["Condition"]) == ["StringEquals"] and list(send["Condition"]["StringEquals"]) == ["ses:FromAddress"], send
account, identity = [st for st in statements if st is not send]
assert account["Action"] == "ses:GetAccount" and account["Resource"] == "*", account
assert identity["Action"] == "ses:GetEmailIdentity" and "Condition" not in identity, identity
assert text(identity["Resource"]) == "arn:${AWS::Partition}:ses:${AWS::Region}:${AWS::AccountId}:identity/*", identity
print("    SendEmail on this account's identities in the region (the sandbox checks each recipient's too) and "
      "the stack's configuration set, from the configured address only; GetAccount; GetEmailIdentity on the "
      "region's identities (the cold start's check); no other SES right")

# 7. Sending that stops is never silent: the poller's SendingStopped (the
# provider paused the account, or refused the stack's configuration) and
# its sends refused for good, as a share of those tried, each alarm.
alarms = {k: r["Properties"] for k, r in res.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
stopped = alarms["SendingStoppedAlarm"]
assert (stopped["MetricName"], stopped["Threshold"], stopped["AlarmActions"]) == ("SendingStopped", 0, [{"Ref": "AlarmTopic"}]), stopped
failed = alarms["FailedSendRateAlarm"]
names = sorted(m["MetricStat"]["Metric"]["MetricName"] for m in failed["Metrics"] if "MetricStat" in m)
assert names == ["PermanentlyFailed", "Sent"] and failed["AlarmActions"] == [{"Ref": "AlarmTopic"}], failed
assert str(failed["Threshold"]) == values["FailedSendRateAlarmThreshold"], failed["Threshold"]
print(f"    alarms: SendingStopped > 0; PermanentlyFailed / tried >= {values['FailedSendRateAlarmThreshold']} in an hour")

# 8. Teardown: the migration function's Delete reply leaves the VPC over
# the private routes (the S3 endpoint, or the NAT gateway). SchemaMigration
# depends on all of them, so CloudFormation deletes it first.
import re
def depends(res, name, seen=None):
    seen = set() if seen is None else seen
    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "Ref" and isinstance(v, str):
                    yield v
                elif k == "Fn::GetAtt":
                    yield (v[0] if isinstance(v, list) else v.split(".")[0])
                elif k == "Fn::Sub":
                    yield from re.findall(r"\$\{([A-Za-z0-9]+)", v if isinstance(v, str) else v[0])
                    if not isinstance(v, str):
                        yield from walk(v[1])
                else:
                    yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)
    r = res[name]
    on = r.get("DependsOn", [])
    for dep in ([on] if isinstance(on, str) else on) + list(walk({k: v for k, v in r.items() if k != "DependsOn"})):
        if dep in res and dep not in seen:
            seen.add(dep)
            depends(res, dep, seen)
    return seen
needed = {"S3Endpoint", "SecretsManagerEndpoint", "PrivateDefaultRoute", "NatGateway", "PrivateSubnetARoutes", "PrivateSubnetBRoutes"}
missing = needed - depends(res, "SchemaMigration")
assert not missing, f"SchemaMigration does not depend on {sorted(missing)}: sam delete may remove them before its Delete reply"
own, _ = translated(CreateNetwork="false", CreateDatabase="false", SubnetIds="subnet-0123456789abcdef0",
                    SecurityGroupIds="sg-0123456789abcdef0",
                    MigrationDatabaseSecretArn="arn:aws:secretsmanager:us-east-1:123456789012:secret:owner-AbCdEf")
assert "S3Endpoint" not in own and "NetworkReady" in own, "without the stack's network, nothing to wait for"
print(f"    teardown: SchemaMigration depends on {', '.join(sorted(needed))}, so its Delete reply still has a route")
PY
for mode in smtp; do
  python3 - "$TMP/$mode.yaml" <<'PY'
import re, sys
src = open("template.yaml").read()
for name, value in [("MailProvider", "smtp"), ("SesIdentity", '""'), ("SesFromAddress", '""'),
                    ("SmtpUrl", "smtp://smtp.example.com:587"), ("SmtpFromAddress", '"Bookings <bookings@example.com>"'),
                    ("SmtpSecretArn", '"arn:aws:secretsmanager:us-east-1:123456789012:secret:smtp-AbCdEf"')]:
    src, n = re.subn(rf"(\n  {name}:\n    Type: [^\n]+\n(?:    [A-Za-z]+: [^\n]*\n)*?    Default: )[^\n]+", rf"\g<1>{value}", src, count=1)
    assert n == 1, f"no Default for {name}"
open(sys.argv[1], "w").write(src)
PY
  "$SAM" validate --lint --region us-east-1 -t "$TMP/$mode.yaml" >/dev/null
  checkov_scan "$TMP/$mode.yaml" >"$TMP/checkov.log" || { cat "$TMP/checkov.log" >&2; echo "error: checkov failed the $mode mode" >&2; exit 1; }
  echo "    MailProvider=$mode at its defaults: sam validate --lint and checkov pass"
done

echo "==> make operator's AWS CLI v2 commands, run against a stand-in CLI that refuses what v2 would"
mkdir -p "$TMP/bin"
ln -sf "$PWD/tests/tools/aws-v2-stub.py" "$TMP/bin/aws"
out=$(PATH="$TMP/bin:$PATH" AWS_STUB_LOG="$TMP/aws.log" STACK=bookings REGION=eu-west-1 \
  ARGS="--operator ci dead list --limit 10" ./scripts/operator.sh) || { cat "$TMP/aws.log" >&2; exit 1; }
[ "$out" = "ran: --operator ci dead list --limit 10" ] || { echo "error: make operator printed '$out'" >&2; exit 1; }
python3 - "$TMP/aws.log" <<'PY'
import json, sys
calls = [json.loads(line) for line in open(sys.argv[1])]
assert all(c[c.index("--region") + 1] == "eu-west-1" for c in calls), calls
invoke = [c for c in calls if c[:2] == ["lambda", "invoke"] or c[2:4] == ["lambda", "invoke"]]
assert len(invoke) == 1, calls
PY
# The raw command docs/deploy.md shows, as a reader pastes it.
python3 - docs/deploy.md >"$TMP/raw-invoke.sh" <<'PY'
import re, sys
blocks = re.findall(r"```sh\n(.*?)```", open(sys.argv[1]).read(), re.S)
print(next(b for b in blocks if "aws lambda invoke" in b))
PY
(cd "$TMP" && PATH="$TMP/bin:$PATH" AWS_STUB_LOG="$TMP/aws.log" REGION=eu-west-1 \
  bash -euo pipefail -c "out() { echo bookings-OperatorFunction-AbC123; }; $(cat "$TMP/raw-invoke.sh")" >/dev/null) \
  || { echo "error: docs/deploy.md's aws lambda invoke fails as written" >&2; exit 1; }
grep -q '"ran: status"' "$TMP/out.json" || { echo "error: docs/deploy.md's invoke wrote no answer to out.json" >&2; exit 1; }
echo "    make operator: --region on every call; lambda invoke with --cli-binary-format raw-in-base64-out and an output file;"
echo "    docs/deploy.md's raw invoke runs as written"

echo "==> make delete against moto: the stack deleted, what is left named with its command"
source scripts/lib/moto.sh
moto_ensure_installed
# The AWS CLI the script calls (v1 and v2 agree on every command it runs).
AWSCLI_VENV="${AWSCLI_VENV:-.venv/awscli}"
if [ ! -x "$AWSCLI_VENV/bin/aws" ]; then
  venv_create "$AWSCLI_VENV"
  "$AWSCLI_VENV/bin/pip" install -q --disable-pip-version-check 'awscli==1.45.11'
fi
source scripts/lib/postgres.sh
MOTO_PORT=$(free_port)
moto_start "$MOTO_PORT" "$TMP/moto.log"
trap 'moto_stop 2>/dev/null; rm -rf "$TMP"' EXIT
printf 'Resources:\n  Queue:\n    Type: AWS::SQS::Queue\n' >"$TMP/stack.yaml"
moto_aws() {
  PATH="$PWD/$AWSCLI_VENV/bin:$PATH" AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" AWS_ACCESS_KEY_ID=test \
    AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION= "$@"
}
moto_aws aws --region us-east-1 cloudformation create-stack --stack-name bookings --template-body "file://$TMP/stack.yaml" >/dev/null
moto_aws aws --region us-east-1 logs create-log-group --log-group-name /aws/lambda/bookings-OutboxPollerFunction-AbC123
moto_aws env STACK=bookings REGION=us-east-1 ./scripts/delete.sh >"$TMP/delete.log" 2>&1 \
  || { cat "$TMP/delete.log" >&2; echo "error: make delete failed against moto" >&2; exit 1; }
grep -q "the stack bookings is deleted" "$TMP/delete.log" \
  && grep -q "aws logs delete-log-group --region us-east-1 --log-group-name /aws/lambda/bookings-OutboxPollerFunction-AbC123" "$TMP/delete.log" \
  || { cat "$TMP/delete.log" >&2; echo "error: make delete did not report what is left" >&2; exit 1; }
if moto_aws aws --region us-east-1 cloudformation describe-stacks --stack-name bookings >/dev/null 2>&1; then
  echo "error: make delete left the stack" >&2; exit 1
fi
moto_aws env STACK=bookings REGION=us-east-1 ./scripts/delete.sh >"$TMP/delete2.log" 2>&1 \
  && { echo "error: make delete of a stack that is gone succeeded" >&2; exit 1; }
grep -q "no stack bookings in us-east-1" "$TMP/delete2.log" || { cat "$TMP/delete2.log" >&2; exit 1; }
echo "    make delete: sam delete ran, the stack is gone, the leftover log group named with its command; a second run says there is no stack"

echo "==> make verify against a stack in moto (every step answers once; what moto cannot answer as AWS does fails)"
source scripts/lib/verify.sh
verify_ensure_installed
AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION= \
  "$VERIFY_VENV/bin/python" scripts/lib/verify-against-moto.py "http://127.0.0.1:$MOTO_PORT"
moto_stop
trap 'rm -rf "$TMP"' EXIT

echo "==> sam build (the seven functions, exactly as a deploy builds them)"
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
assert sorted(b for _, b in pairs) == sorted(["booking-api", "outbox-poller", "outbox-sweeper", "migrate", "ses-events", "outbox-operator", "operator-console"]), pairs
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
