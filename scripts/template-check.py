#!/usr/bin/env python3
"""What CloudFormation would refuse in template.yaml, or what the docs
promise of it, that neither cfn-lint nor moto checks (docs/aws-behaviours.md
names the AWS page behind each). Run by scripts/deploy-check.sh, and by
scripts/deploy.sh before it builds, with the SAM venv's python:

    .venv/sam/bin/python scripts/template-check.py [TEMPLATE] [--only NAME]

Each check is a function named for what it holds; a failure prints its name
and what to fix, and the run exits 1.
"""
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from cfn_template import failed_rules, load, rule_functions_outside_aws, translated  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def rules_use_only_the_functions_aws_allows_in_a_rule(path, tpl):
    bad = rule_functions_outside_aws(tpl)
    assert not bad, ("CloudFormation refuses the change set: " + "; ".join(bad)
                     + " (a list: Fn::EachMemberEquals or Fn::Contains over its Ref)")
    return f"{len(tpl.get('Rules', {}))} rules, each only Ref and the rule functions"


# Parameters each rule must refuse, and the same made whole, which all rules
# must accept: (what, refused, accepted).
OWN_PROVIDER = dict(CreateUserPool="false", JwtIssuer="https://issuer.example.com", JwtAudience="api")
OWN_NETWORK = dict(CreateNetwork="false", SubnetIds="subnet-0123456789abcdef0", SecurityGroupIds="sg-0123456789abcdef0")
OWN_DATABASE = dict(CreateDatabase="false", MigrationDatabaseSecretArn="arn:aws:secretsmanager:us-east-1:1:secret:o")
SMTP = dict(MailProvider="smtp", SesIdentity="", SesFromAddress="", SmtpUrl="smtp://smtp.example.com:587",
            SmtpFromAddress="bookings@example.com")
CASES = [
    ("OwnIdentityProviderNeedsIssuerAndAudience", dict(OWN_PROVIDER, JwtAudience=""), OWN_PROVIDER),
    ("OwnIdentityProviderNeedsIssuerAndAudience", dict(OWN_PROVIDER, JwtIssuer=""), OWN_PROVIDER),
    ("UserPoolTokensCarryNoScope", dict(AuthorizerScopes="bookings/write"), {}),
    ("UserPoolTokensCarryNoScope", dict(JwtAudience="api"), {}),
    ("OwnNetworkNeedsSubnetsAndSecurityGroups", dict(OWN_NETWORK, SubnetIds=""), OWN_NETWORK),
    ("OwnNetworkNeedsSubnetsAndSecurityGroups", dict(OWN_NETWORK, SecurityGroupIds=""), OWN_NETWORK),
    ("OwnDatabaseNeedsItsOwnerSecret", dict(OWN_DATABASE, MigrationDatabaseSecretArn=""), OWN_DATABASE),
    ("SesNeedsAnIdentityAndAFromAddress", dict(SesFromAddress=""), {}),
    ("SmtpNeedsAServerAndAFromAddress", dict(SMTP, SmtpUrl=""), SMTP),
    ("CreatedDatabaseBehindAProxyCannotPause", dict(UseRdsProxy="true", DatabaseMinCapacity="0"), dict(UseRdsProxy="true")),
    ("RdsProxyNeedsExactlyOneTarget", dict(OWN_DATABASE, UseRdsProxy="true"),
     dict(OWN_DATABASE, UseRdsProxy="true", DatabaseClusterIdentifier="bookings")),
]
# Every other parameter the cases leave unset takes a value the rules accept.
BASE = dict(SesIdentity="example.com", SesFromAddress="bookings@example.com")


def each_rule_refuses_what_it_promises_and_nothing_else(path, tpl):
    """The rules evaluated as CloudFormation evaluates them (a
    CommaDelimitedList is a list; Fn::Equals compares strings)."""
    failed = failed_rules(tpl, **BASE)
    assert not failed, f"the defaults (with an SES identity) are refused: {failed}"
    for rule, refused, accepted in CASES:
        names = [name for name, _ in failed_rules(tpl, **dict(BASE, **refused))]
        assert names == [rule], f"{refused}: refused by {names or 'nothing'}, not {rule}"
        ok = failed_rules(tpl, **dict(BASE, **accepted))
        assert not ok, f"{accepted}: refused by {ok}"
    covered = {rule for rule, _, _ in CASES}
    untried = set(tpl.get("Rules", {})) - covered
    assert not untried, f"rules no case tries: {sorted(untried)}"
    return f"{len(CASES)} refusals, each by its own rule alone; the same parameters made whole pass"


def every_function_has_a_log_group_with_retention_and_an_errors_alarm(path, tpl):
    res = tpl["Resources"]
    functions = [k for k, r in res.items() if r["Type"] == "AWS::Serverless::Function"]
    groups = {k: r for k, r in res.items() if r["Type"] == "AWS::Logs::LogGroup"}
    missing = []
    for fn in functions:
        named = [k for k, g in groups.items()
                 if g["Properties"].get("LogGroupName") == {"Fn::Sub": f"/aws/lambda/${{{fn}}}"}]
        routed = (res[fn]["Properties"].get("LoggingConfig") or {}).get("LogGroup")
        if routed:
            named = [k for k in groups if routed == {"Ref": k}]
        if len(named) != 1:
            missing.append(f"{fn}: no log group of its own (/aws/lambda/${{{fn}}}, or LoggingConfig.LogGroup)")
        elif "RetentionInDays" not in groups[named[0]]["Properties"]:
            missing.append(f"{named[0]}: no RetentionInDays")
        alarms = [k for k, r in res.items() if r["Type"] == "AWS::CloudWatch::Alarm"
                  and r["Properties"].get("Namespace") == "AWS/Lambda" and r["Properties"].get("MetricName") == "Errors"
                  and {"Name": "FunctionName", "Value": {"Ref": fn}} in r["Properties"].get("Dimensions", [])
                  and r["Properties"].get("AlarmActions")]
        if not alarms:
            missing.append(f"{fn}: no Errors alarm that notifies")
    assert not missing, "; ".join(missing)
    return f"{len(functions)} functions, each with its log group (a retention) and an Errors alarm"


def every_output_is_in_the_docs_and_every_documented_output_exists(path, tpl):
    text = (ROOT / "docs/deploy.md").read_text()
    sentence = re.search(r"\nOutputs: (.*?)\.\n\n", text, re.S)
    assert sentence, "docs/deploy.md: no 'Outputs: ...' paragraph"
    named = set(re.findall(r"`([A-Z][A-Za-z]+)`", sentence.group(1)))
    outputs = set(tpl["Outputs"])
    assert outputs <= named, f"docs/deploy.md's Outputs paragraph omits {sorted(outputs - named)}"
    assert named <= outputs, f"docs/deploy.md names outputs the template lacks: {sorted(named - outputs)}"
    return f"{len(outputs)} outputs, each in docs/deploy.md"


def a_parameter_only_change_of_the_roles_timeouts_is_an_update_of_schema_migration(path, tpl):
    """SAM names a function's version by a hash of the template's text, so a
    parameter's new value publishes no version; SchemaMigration must carry
    the value itself, so that CloudFormation sends an Update."""
    before, _ = translated(path)
    after, _ = translated(path, AppStatementTimeoutMs="45000", AppIdleInTransactionTimeoutMs="600000")
    version = lambda res: sorted(k for k, r in res.items() if r["Type"] == "AWS::Lambda::Version" and k.startswith("MigrateFunction"))
    props = lambda res: {k: v for k, v in res["SchemaMigration"]["Properties"].items() if k != "MigrateFunctionVersion"}
    assert props(before) != props(after), \
        "SchemaMigration's properties do not change with AppStatementTimeoutMs: no Update, the database keeps the old limits"
    changed = sorted(k for k in props(after) if props(after)[k] != props(before).get(k))
    same = version(before) == version(after)
    return (f"SchemaMigration's {', '.join(changed)} change (an Update); MigrateFunction's version "
            f"{'stays ' + version(before)[0] + ' (SAM hashes the text)' if same else 'changes too'}")


# The service prefix of each resource type's IAM actions (the deployer's
# credentials make every call: CloudFormation has no service role here).
SERVICE = {"AWS::ApiGatewayV2": "apigateway", "AWS::Lambda": "lambda", "AWS::IAM": "iam", "AWS::Logs": "logs",
           "AWS::Cognito": "cognito-idp", "AWS::EC2": "ec2", "AWS::RDS": "rds", "AWS::SecretsManager": "secretsmanager",
           "AWS::SES": "ses", "AWS::Scheduler": "scheduler", "AWS::Events": "events", "AWS::SQS": "sqs",
           "AWS::SNS": "sns", "AWS::CloudWatch": "cloudwatch", "AWS::CloudFormation": "cloudformation",
           "Custom": "lambda"}
MODES = [{}, dict(MailProvider="smtp", SmtpUrl="smtp://smtp.example.com:587", SmtpFromAddress="b@example.com",
                  SmtpSecretArn="arn:aws:secretsmanager:us-east-1:123456789012:secret:smtp-AbCdEf"),
         dict(UseRdsProxy="true", ReserveConcurrency="true", AlarmEmail="ops@example.com", SelfSignUpDomains="example.com"),
         dict(OWN_NETWORK, **OWN_DATABASE), OWN_PROVIDER]


def the_deployer_policy_allows_every_resource_type_the_stack_creates(path, tpl):
    policy = json.loads((ROOT / "docs/deployer-policy.json").read_text())
    actions = {a for st in policy["Statement"] if st["Effect"] == "Allow"
               for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
    prefixes = {a.split(":")[0] for a in actions}
    types = set()
    for mode in MODES:
        res, _ = translated(path, **mode)
        types |= {r["Type"] for r in res.values()}
    lacking = sorted(t for t in types if SERVICE[t.split("::")[0] if t.startswith("Custom::") else "::".join(t.split("::")[:2])] not in prefixes)
    assert not lacking, f"docs/deployer-policy.json allows no action for {lacking}"
    # What no resource type says: roles handed to services, RDS's
    # service-linked role (made the first time in an account), the SAM
    # transform, SAM's artifacts bucket, the change sets.
    for needed in ["iam:PassRole", "iam:CreateServiceLinkedRole", "cloudformation:CreateChangeSet",
                   "cloudformation:ExecuteChangeSet", "s3:PutObject", "logs:PutRetentionPolicy"]:
        service = needed.split(":")[0]
        assert needed in actions or f"{service}:*" in actions, f"docs/deployer-policy.json lacks {needed}"
    return f"{len(types)} resource types over {len(MODES)} modes, each of their services allowed, with iam:PassRole and RDS's service-linked role"


def the_docs_count_the_functions_the_template_has(path, tpl):
    count = sum(r["Type"] == "AWS::Serverless::Function" for r in tpl["Resources"].values())
    words = "zero one two three four five six seven eight nine ten eleven twelve".split()
    wrong = []
    for doc in ["docs/deploy.md", "docs/security.md", "scripts/deploy.sh", "scripts/deploy-check.sh"]:
        for m in re.finditer(r"\b(" + "|".join(words) + r") (?:release binaries|functions)\b", (ROOT / doc).read_text()):
            if words.index(m.group(1)) != count:
                wrong.append(f"{doc}: '{m.group(0)}'")
    assert not wrong, f"the template has {words[count]} functions: " + "; ".join(wrong)
    return f"{words[count]} functions, as the docs say"


def every_function_behind_the_api_ends_within_api_gateways_30_seconds(path, tpl):
    """API Gateway answers 503 after 30 s whatever the function does: a
    function behind a route must time out first, so its own limits answer."""
    res, _ = translated(path)
    routed = {k: r["Properties"].get("Timeout", 3) for k, r in res.items() if r["Type"] == "AWS::Lambda::Function"
              and any(p["Type"] == "AWS::Lambda::Permission" and p["Properties"].get("Principal") == "apigateway.amazonaws.com"
                      and p["Properties"].get("FunctionName") == {"Ref": k} for p in res.values())}
    assert routed, "no function behind the API: the transform changed shape"
    slow = {k: t for k, t in routed.items() if int(t) >= 30}
    assert not slow, f"these time out at or after API Gateway's 30 s: {slow}"
    return ", ".join(f"{k} {t} s" for k, t in sorted(routed.items())) + ": each under 30 s"


def more_than_five_authorizer_scopes_fail_the_stack_at_once(path, tpl):
    """The authorizer takes at most 5 scopes (5 slots); a sixth must fail the
    deploy at once (a WaitCondition nothing signals), not be dropped."""
    five, _ = translated(path, AuthorizerScopes="a,b,c,d,e")
    six, _ = translated(path, AuthorizerScopes="a,b,c,d,e,f")
    waits = lambda res: [k for k, r in res.items() if r["Type"] == "AWS::CloudFormation::WaitCondition" and "Scope" in k]
    assert not waits(five), f"5 scopes must deploy: {waits(five)}"
    assert waits(six), "6 scopes deploy with one silently dropped"
    cond = six[waits(six)[0]]["Properties"]
    assert int(cond["Timeout"]) <= 60 and "Handle" in str(cond["Handle"]), cond
    return f"5 scopes deploy; 6 create {waits(six)[0]}, which nothing signals (fails after {cond['Timeout']} s)"


def each_schedule_may_hand_a_failed_delivery_to_its_dead_letter_queue(path, tpl):
    """EventBridge Scheduler writes to a schedule's dead-letter queue with
    the schedule's execution role, not through the queue's policy."""
    res, _ = translated(path)
    schedules = {k: r["Properties"]["Target"] for k, r in res.items() if r["Type"] == "AWS::Scheduler::Schedule"}
    assert schedules, "no schedule: the transform changed shape"
    for k, target in schedules.items():
        queue = (target.get("DeadLetterConfig") or {}).get("Arn")
        assert queue, f"{k} has no dead-letter queue"
        role = res[target["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
        allowed = [st for pol in role["Policies"] for st in pol["PolicyDocument"]["Statement"]
                   if st["Effect"] == "Allow" and "sqs:SendMessage" in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
                   and st["Resource"] == queue]
        assert allowed, f"{k}'s role may not send to its dead-letter queue {queue}"
        assert target.get("RetryPolicy", {}).get("MaximumRetryAttempts") == 0, f"{k}: a retried run would overlap the next"
    return f"{len(schedules)} schedules, each role allowed sqs:SendMessage on its dead-letter queue, no retry"


def the_guided_deploy_answer_names_every_route_without_a_token(path, tpl):
    """SAM asks, for each function with a route that has no authorizer,
    whether that is intended: docs/deploy.md's answer must name them all."""
    routes = [e["Properties"]["Path"] for r in tpl["Resources"].values() if r["Type"] == "AWS::Serverless::Function"
              for e in (r["Properties"].get("Events") or {}).values()
              if e["Type"] == "HttpApi" and (e["Properties"].get("Auth") or {}).get("Authorizer") == "NONE"]
    row = next((line for line in (ROOT / "docs/deploy.md").read_text().splitlines()
                if "may not have authorization defined" in line), "")
    assert row, "docs/deploy.md: the guided deploy's authorization question is not answered"
    shown = lambda p: p.replace("{slug}", "…") if p.startswith("/problems/") else p  # noqa: E731
    missing = [p for p in routes if f"`{shown(p)}" not in row]
    assert not missing, f"docs/deploy.md's answer to SAM's authorization question omits {missing}"
    return f"{len(routes)} routes without a token, each named in the guided deploy's answer"


def the_prerequisites_name_a_c_compiler(path, tpl):
    """cargo links build scripts and proc-macros for the host with `cc`."""
    text = (ROOT / "docs/deploy.md").read_text()
    before = text[text.index("## Before you start"):text.index("## From an empty account")]
    assert "C compiler" in before and "build-essential" in before, "docs/deploy.md's prerequisites name no C compiler"
    assert "host_cc_required" in (ROOT / "scripts/deploy.sh").read_text(), "make deploy does not check for one"
    return "docs/deploy.md names a C compiler (build-essential), make deploy checks for it first"


def the_template_counts_the_pollers_it_allows(path, tpl):
    """A description that says how many pollers run at once says the
    number PollerReservedConcurrency's default allows."""
    words = "zero one two three four five six".split()
    allowed = int(tpl["Parameters"]["PollerReservedConcurrency"]["Default"])
    said = re.findall(r"at most (\w+) pollers", Path(path).read_text())
    wrong = [w for w in said if w not in words or words.index(w) != allowed]
    assert said and not wrong, f"the template says at most {wrong or 'nothing of'} pollers; {allowed} run at once"
    return f"at most {words[allowed]} pollers, as PollerReservedConcurrency's default"


CHECKS = [rules_use_only_the_functions_aws_allows_in_a_rule,
          each_rule_refuses_what_it_promises_and_nothing_else,
          every_function_has_a_log_group_with_retention_and_an_errors_alarm,
          every_output_is_in_the_docs_and_every_documented_output_exists,
          a_parameter_only_change_of_the_roles_timeouts_is_an_update_of_schema_migration,
          the_deployer_policy_allows_every_resource_type_the_stack_creates,
          the_docs_count_the_functions_the_template_has,
          every_function_behind_the_api_ends_within_api_gateways_30_seconds,
          more_than_five_authorizer_scopes_fail_the_stack_at_once,
          each_schedule_may_hand_a_failed_delivery_to_its_dead_letter_queue,
          the_guided_deploy_answer_names_every_route_without_a_token,
          the_prerequisites_name_a_c_compiler,
          the_template_counts_the_pollers_it_allows]


def main(argv):
    only = argv[argv.index("--only") + 1].split(",") if "--only" in argv else None
    args = [a for i, a in enumerate(argv) if a != "--only" and (i == 0 or argv[i - 1] != "--only")]
    path = args[0] if args else "template.yaml"
    tpl = load(path)
    failed = 0
    for check in CHECKS:
        if only and check.__name__ not in only:
            continue
        try:
            print(f"    {check.__name__}: {check(path, tpl)}")
        except Exception as e:  # noqa: BLE001 -- each check reports alone
            failed += 1
            print(f"error: {path}: {check.__name__}: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
