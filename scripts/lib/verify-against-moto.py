"""make verify's deployed-stack mode (scripts/verify.py --stack) against
moto, for scripts/deploy-check.sh: a stack whose outputs name a user pool,
an alarm and an SES identity made in moto. Every step must print one
verdict (none may crash), the token step must sign in to the pool and read
its ID token's claims, the alarm step must read the stack's alarms, and
every step moto cannot answer as AWS does must fail with what to do, not
pass. usage: verify-against-moto.py ENDPOINT (AWS_* credentials: test)."""
import json
import os
import subprocess
import sys

import boto3

endpoint = sys.argv[1]
kw = dict(region_name="us-east-1", endpoint_url=endpoint)
idp = boto3.client("cognito-idp", **kw)
pool = idp.create_user_pool(PoolName="bookings", UsernameAttributes=["email"],
                            AdminCreateUserConfig={"AllowAdminCreateUserOnly": True})["UserPool"]["Id"]
client = idp.create_user_pool_client(UserPoolId=pool, ClientName="api", ExplicitAuthFlows=[
    "ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH"])["UserPoolClient"]["ClientId"]
boto3.client("cloudwatch", **kw).put_metric_alarm(
    AlarmName="verify-bookings-PollerErrorsAlarm-AbC123", Namespace="AWS/Lambda", MetricName="Errors", Statistic="Sum",
    Period=300, EvaluationPeriods=1, Threshold=0, ComparisonOperator="GreaterThanThreshold")
ses = boto3.client("sesv2", **kw)
ses.create_email_identity(EmailIdentity="example.com")
ses.create_configuration_set(ConfigurationSetName="bookings-set")
template = {
    "Parameters": {k: {"Type": "String", "Default": v} for k, v in [
        ("SesFromAddress", "Bookings <bookings@example.com>"), ("MailProvider", "ses"), ("SelfSignUpDomains", ""),
        ("Pool", pool), ("Client", client)]},
    "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
    "Outputs": {"ApiUrl": {"Value": "http://127.0.0.1:9/nothing-listens"},
                "ConsoleUrl": {"Value": "http://127.0.0.1:9/nothing-listens/console"},
                "UserPoolId": {"Value": {"Ref": "Pool"}}, "UserPoolClientId": {"Value": {"Ref": "Client"}},
                "SesConfigurationSetName": {"Value": "bookings-set"}},
}
boto3.client("cloudformation", **kw).create_stack(StackName="verify-bookings", TemplateBody=json.dumps(template))
env = {**os.environ, "AWS_ENDPOINT_URL": endpoint}
run = subprocess.run([sys.executable, "scripts/verify.py", "--stack", "verify-bookings", "--region", "us-east-1", "--wait", "3"],
                     capture_output=True, text=True, env=env, timeout=120)
out = run.stdout + run.stderr
print("\n".join("      " + line for line in run.stdout.splitlines()))
assert "Traceback" not in out, out
verdicts = {line.split()[1]: line.split()[0] for line in run.stdout.splitlines()
            if line.startswith("  ") and line.split()[0] in ("ok", "warn", "FAIL", "skip")}
steps = ["from-identity", "account-sending", "configuration-set", "token", "simulator-delivery", "simulator-bounce",
         "console", "alarms", "schedules", "stack-order", "secrets", "proxy"]
assert sorted(verdicts) == sorted(steps), verdicts
# moto's ID token leaves out email_verified, which Cognito's carries: the
# step signed in, read the claims, and refuses a token the API would refuse.
token_line = next(line for line in run.stdout.splitlines() if line.split()[1:2] == ["token"])
assert "outbox-verify@example.com" in token_line and (verdicts["token"] == "ok" or "email_verified" in token_line), token_line
assert verdicts["alarms"] == "ok", verdicts
# moto holds example.com but never verifies it, has no GetAccount and no
# event destinations: SES's answers that would pass in AWS must fail here.
for step in ("from-identity", "account-sending", "configuration-set", "console"):
    assert verdicts[step] == "FAIL", (step, verdicts)
# No API answers here: the booking never passes (skipped without a token).
assert verdicts["simulator-delivery"] in ("FAIL", "skip"), verdicts
assert run.returncode == 1, run.returncode
assert "what to do:" in run.stdout
assert not idp.list_users(UserPoolId=pool)["Users"], "make verify left its user in the pool"
print(f"    make verify --stack against moto: {len(steps)} steps, one verdict each; the token signed in to the pool "
      "and was cleaned up, the alarms read; what moto cannot answer as AWS does failed, saying what to do")
