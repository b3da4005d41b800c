#!/usr/bin/env python3
"""make verify: what no stand-in can check, asked of the account the stack
runs in (docs/aws-behaviours.md names the AWS behaviour behind each step).

    verify.py --stack bookings --region eu-west-1   # a deployed stack
    verify.py --local .local                        # make dev's stack

One line per step, with its verdict (ok, warn, FAIL, skip) and, on a
failure, what to do; exits 1 when a step failed. Steps: from-identity,
account-sending, configuration-set, token, simulator-delivery,
simulator-bounce, console, alarms, schedules, stack-order, secrets, proxy. It cleans up what it wrote: the booking
it made is cancelled (its invitations went to SES's mailbox simulator
only), the user it made in the stack's pool is deleted. Against `make dev`
(--local, as CI runs it) the steps AWS alone can answer say skip, and the
rest run against the dev stack's stand-ins.

Needs boto3 (scripts/verify.sh installs it into .venv/verify) and, for a
deployed stack, credentials allowed to read the stack, SES, CloudWatch, and
to create and delete a user in the stack's user pool.
"""
import argparse
import base64
import json
import secrets
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from email.utils import parseaddr

SIMULATOR = "simulator.amazonses.com"
# Mailbox providers whose DMARC policy is p=reject: mail "from" them sent
# through SES fails DMARC at every receiver that checks it.
PUBLIC_MAILBOXES = {"gmail.com", "googlemail.com", "yahoo.com", "ymail.com", "aol.com", "outlook.com", "hotmail.com",
                    "live.com", "icloud.com", "me.com", "gmx.com", "gmx.de", "web.de", "yandex.ru", "mail.ru"}
# What the stack's configuration set must publish (template.yaml's
# SesEventsConfigurationSetEventDestination) for ses-events to settle sends.
EVENT_TYPES = {"SEND", "DELIVERY", "BOUNCE", "COMPLAINT", "REJECT", "DELIVERY_DELAY", "RENDERING_FAILURE"}
PRODUCTION_ACCESS = "https://docs.aws.amazon.com/ses/latest/dg/request-production-access.html"


def one_line(error):
    """An exception as one line of at most 200 characters (AWS's answers
    can be whole HTML pages)."""
    return " ".join(f"{type(error).__name__}: {error}".split())[:200]


class Report:
    def __init__(self):
        self.failed = 0

    def line(self, verdict, step, text):
        print(f"  {verdict:<5} {step:<19} {text}", flush=True)

    def ok(self, step, text):
        self.line("ok", step, text)

    def warn(self, step, text):
        self.line("warn", step, text)

    def skip(self, step, text):
        self.line("skip", step, text)

    def fail(self, step, text, fix):
        self.failed += 1
        self.line("FAIL", step, f"{text}\n{'':<27}what to do: {fix}")


def http(method, url, headers=None, body=None, timeout=30):
    """(status, headers, parsed JSON or text) of one request; never raises
    for an HTTP status."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        **({"content-type": "application/json"} if data else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, head, raw = resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        status, head, raw = e.code, dict(e.headers), e.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, head, json.loads(text)
    except ValueError:
        return status, head, text


class Target:
    """What verify talks to: the stack's API and console, SES, and (when
    deployed) Cognito and CloudWatch."""

    def __init__(self, *, local, region, api, console, from_address, config_set, mail_provider, stack=None,
                 pool=None, client_id=None, organizer_domains="", boto=None, ses_endpoint=None, token=None, proxy=None,
                 failure_queue=None):
        self.local, self.region, self.api, self.console = local, region, api.rstrip("/"), console
        self.from_address, self.config_set, self.mail_provider = from_address, config_set, mail_provider
        self.stack, self.pool, self.client_id, self.organizer_domains = stack, pool, client_id, organizer_domains
        self.boto, self.ses_endpoint, self.token, self.proxy = boto, ses_endpoint, token, proxy
        self.failure_queue = failure_queue
        self.user = None  # the user verify made in the pool
        self.booking = None  # (id, headers) of the booking verify made

    def client(self, service):
        kw = {"region_name": self.region}
        if self.local:
            kw.update(endpoint_url=self.ses_endpoint, aws_access_key_id="test", aws_secret_access_key="test")
        return self.boto.client(service, **kw)

    def organizer(self):
        """The address verify organizes as: at the first domain allowed to
        organize (SelfSignUpDomains), else the From address's domain."""
        domains = [d.strip() for d in self.organizer_domains.split(",") if d.strip()]
        domain = domains[0] if domains else parseaddr(self.from_address)[1].rpartition("@")[2]
        return f"outbox-verify@{domain}"

    def auth(self, groups=None):
        """The headers a request is identified by: the verify user's ID
        token, or make dev's identity headers."""
        if self.local:
            head = {"x-dev-user-email": self.organizer(), "x-dev-user-name": "make verify"}
            return {**head, "x-dev-user-groups": groups} if groups else head
        return {"authorization": f"Bearer {self.token}"} if self.token else None


def from_identity(t, r):
    step = "from-identity"
    address = parseaddr(t.from_address)[1].lower()
    domain = address.rpartition("@")[2]
    if domain in PUBLIC_MAILBOXES:
        r.fail(step, f"{address}: {domain} publishes DMARC p=reject, so receivers refuse mail from it sent through SES",
               "send from a domain you own: verify it in SES (Easy DKIM), set SesFromAddress, make deploy")
        return
    ses = t.client("sesv2")
    seen = {}
    for identity in (address, domain):
        try:
            seen[identity] = ses.get_email_identity(EmailIdentity=identity)
        except ses.exceptions.NotFoundException:
            continue
    verified = [i for i, v in seen.items() if v.get("VerifiedForSendingStatus")]
    if not verified:
        states = "; ".join(f"{i}: {v.get('VerificationStatus', 'not verified')}, DKIM "
                           f"{(v.get('DkimAttributes') or {}).get('Status', '-')}" for i, v in seen.items())
        r.fail(step, f"SES in {t.region} sends from neither {address} nor {domain} ({states or 'no such identity'})",
               f"create the identity {domain} in SES in {t.region} and add its three DKIM CNAME records "
               "(verified within 72 hours), or verify the address; then make verify again")
        return
    if domain in verified:
        dkim = (seen[domain].get("DkimAttributes") or {}).get("Status")
        if dkim != "SUCCESS":
            r.fail(step, f"{domain} is verified but its DKIM is {dkim}",
                   f"the three CNAME records SES shows for {domain} must resolve (dig CNAME <token>._domainkey.{domain})")
            return
        r.ok(step, f"{address}: its domain {domain} is verified in {t.region}, DKIM SUCCESS")
    else:
        r.warn(step, f"{address} is verified in {t.region} as an address only: SES signs its mail with amazonses.com's "
                     f"DKIM, not {domain}'s, so receivers' DMARC checks of {domain} may refuse it; verify the domain")


def account_sending(t, r):
    step = "account-sending"
    account = t.client("sesv2").get_account()
    quota = account.get("SendQuota") or {}
    rate, day, sent = quota.get("MaxSendRate"), quota.get("Max24HourSend"), quota.get("SentLast24Hours")
    if not account.get("SendingEnabled", True):
        r.fail(step, f"SES sending is paused for the account in {t.region}",
               "the SES console's reputation dashboard says why; resume it there (aws sesv2 put-account-sending-attributes)")
    elif account.get("EnforcementStatus") == "SHUTDOWN":
        r.fail(step, "SES shut the account's sending down (EnforcementStatus SHUTDOWN)", "open a case with AWS Support")
    elif not account.get("ProductionAccessEnabled"):
        r.warn(step, f"the SES sandbox: only verified recipients and the mailbox simulator, {day:g} a day, {rate:g} a "
                     f"second ({sent:g} sent in 24 h); request production access: {PRODUCTION_ACCESS}")
    else:
        suppressed = (account.get("SuppressionAttributes") or {}).get("SuppressedReasons") or []
        r.ok(step, f"production access: {rate:g} a second, {day:g} a day ({sent:g} sent in the last 24 hours), "
                   f"enforcement {account.get('EnforcementStatus', '?')}; the account's suppression list takes "
                   f"{' and '.join(x.lower() + 's' for x in suppressed) or 'nothing'}")


def configuration_set(t, r):
    step = "configuration-set"
    ses = t.client("sesv2")
    try:
        ses.get_configuration_set(ConfigurationSetName=t.config_set)
    except ses.exceptions.NotFoundException:
        r.fail(step, f"no configuration set {t.config_set} in {t.region}",
               "leave SesConfigurationSet empty (the stack makes one), or create the set named there")
        return
    if t.local:
        r.ok(step, f"{t.config_set} exists; (make dev: the publisher, not an event destination, hands its events to ses-events)")
        return
    destinations = ses.get_configuration_set_event_destinations(ConfigurationSetName=t.config_set)["EventDestinations"]
    bus = [d for d in destinations if d.get("Enabled") and d.get("EventBridgeDestination")]
    missing = EVENT_TYPES - {e for d in bus for e in d.get("MatchingEventTypes", [])}
    if not bus or missing:
        r.fail(step, f"{t.config_set} publishes {'no event to EventBridge' if not bus else 'no ' + ', '.join(sorted(missing))}",
               "add an enabled EventBridge event destination (the default bus) for "
               f"{', '.join(sorted(EVENT_TYPES))} (docs/deploy.md, SesConfigurationSet)")
        return
    r.ok(step, f"{t.config_set} publishes {len(EVENT_TYPES)} event types to EventBridge ({bus[0]['Name']})")


def token(t, r):
    step = "token"
    if t.local:
        r.skip(step, "make dev identifies requests by headers (AUTH_MODE=insecure-dev-headers), not tokens")
        return
    if t.token:
        r.ok(step, "TOKEN given: the booking below is made with it")
        return
    if not (t.pool and t.client_id):
        r.skip(step, "your own identity provider (CreateUserPool=false): TOKEN=<an ID token> make verify runs the booking steps")
        return
    idp = t.client("cognito-idp")
    user, password = t.organizer(), "Vf-" + secrets.token_urlsafe(18) + "9a"
    try:
        idp.admin_create_user(UserPoolId=t.pool, Username=user, MessageAction="SUPPRESS", UserAttributes=[
            {"Name": "email", "Value": user}, {"Name": "email_verified", "Value": "true"},
            {"Name": "name", "Value": "make verify"}])
    except idp.exceptions.UsernameExistsException:
        pass  # a run that died before its clean-up
    t.user = user
    idp.admin_set_user_password(UserPoolId=t.pool, Username=user, Password=password, Permanent=True)
    auth = idp.initiate_auth(ClientId=t.client_id, AuthFlow="USER_PASSWORD_AUTH",
                             AuthParameters={"USERNAME": user, "PASSWORD": password})
    if "AuthenticationResult" not in auth:
        r.fail(step, f"sign-in asked for {auth.get('ChallengeName')} instead of answering a token",
               "the pool's MFA or password settings changed: make a token by hand and pass TOKEN=<ID token>")
        return
    t.token = auth["AuthenticationResult"]["IdToken"]
    payload = t.token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    if claims.get("email") != user or claims.get("email_verified") not in (True, "true"):
        r.fail(step, f"the ID token carries email {claims.get('email')!r}, email_verified {claims.get('email_verified')!r}",
               "the API needs both (openapi.yaml, bearerAuth): check the app client's read attributes")
        t.token = None
        return
    lifetime = claims.get("exp", 0) - claims.get("iat", 0)
    pool = idp.describe_user_pool(UserPoolId=t.pool)["UserPool"]
    mail = (pool.get("EmailConfiguration") or {}).get("EmailSendingAccount", "COGNITO_DEFAULT")
    open_sign_up = not (pool.get("AdminCreateUserConfig") or {}).get("AllowAdminCreateUserOnly", True)
    text = f"an ID token from the stack's pool for {user}: email and email_verified, valid {lifetime // 60} minutes"
    if open_sign_up and mail == "COGNITO_DEFAULT":
        r.warn(step, f"{text}; sign-up is open and Cognito mails its codes itself, at most 50 a day for the account: "
                     "past that, sign-ups get no code (SES for the pool's mail lifts it)")
    else:
        r.ok(step, text)


def simulator(t, r, wait):
    """simulator-delivery and simulator-bounce: one booking to the mailbox
    simulator, until SES's Delivery and Bounce show in its notifications."""
    steps = ("simulator-delivery", "simulator-bounce")
    if t.mail_provider != "ses":
        for step in steps:
            r.skip(step, f"MailProvider={t.mail_provider}: no SES events come back")
        return
    headers = t.auth()
    if headers is None:
        for step in steps:
            r.skip(step, "no token (above)")
        return
    start = (datetime.now(timezone.utc) + timedelta(days=90, minutes=secrets.randbelow(50_000))).replace(second=0, microsecond=0)
    body = {"title": "make verify", "start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end": (start + timedelta(minutes=15)).strftime("%Y-%m-%dT%H:%M:%SZ"), "timezone": "UTC",
            "attendees": [{"email": f"success@{SIMULATOR}", "name": "Delivery"}, {"email": f"bounce@{SIMULATOR}", "name": "Bounce"}]}
    status, _, answer = http("POST", f"{t.api}/bookings", headers, body)
    if status != 201:
        for step in steps:
            r.fail(step, f"POST /bookings answered {status}: {str(answer)[:200]}",
                   "the API's log (and ApiAccessLogGroup) has the request; a 401/403 is the token or ORGANIZER_DOMAINS")
        return
    t.booking = (answer["id"], headers)
    want = {f"success@{SIMULATOR}": ("delivered",), f"bounce@{SIMULATOR}": ("not_delivered", "bounced")}
    began, states = time.monotonic(), {}
    while time.monotonic() - began < wait:
        status, _, answer = http("GET", f"{t.api}/bookings/{t.booking[0]}/notifications", headers)
        if status == 200:
            states = {n["recipient"]: n["state"] for n in answer["notifications"] if n["event_type"] == "BOOKING_CONFIRMED"}
            if all(states.get(a) in ok for a, ok in want.items()):
                break
        time.sleep(2)
    took = time.monotonic() - began
    for step, (address, ok) in zip(steps, want.items()):
        got = states.get(address, "no notification")
        if got in ok:
            r.ok(step, f"{address}: {got} {took:.0f} s after the booking (SES's event, through ses-events)")
        else:
            r.fail(step, f"{address}: still {got} after {wait} s (wanted {' or '.join(ok)})",
                   "pending: the poller's schedule or log; sent: SES's events do not reach ses-events (the configuration "
                   "set's destination, SesEventsRule, SesEventsDeadLetterQueue); failed: its detail says SES's answer")


def console(t, r):
    step = "console"
    status, head, _ = http("GET", t.console)
    if status != 200 or "text/html" not in head.get("Content-Type", head.get("content-type", "")):
        r.fail(step, f"GET {t.console} answered {status}", "the OperatorConsoleFunction's log group has the cause")
        return
    api = t.console.rstrip("/") + "/api/overview"
    if t.local:
        refused, _, _ = http("GET", api, t.auth())
        allowed, _, _ = http("GET", api, t.auth(groups="operators"))
        expect = (403, 200)
    else:
        refused, _, _ = http("GET", api)
        allowed, _, _ = http("GET", api, t.auth()) if t.token else (403, None, None)
        expect = (401, 403)  # no token: the authorizer; a user outside the operators group: the console
    if (refused, allowed) != expect:
        r.fail(step, f"{api}: {refused} and {allowed}, not {expect[0]} and {expect[1]}",
               "the console must refuse whoever is not an operator: check the route's authorizer and CONSOLE_OPERATORS_GROUP")
        return
    who = "an operator gets the overview" if t.local else "a signed-in user outside the operators group 403"
    text = f"the page answers; its API refuses a caller without {'the group' if t.local else 'a token'} " \
           f"({expect[0]}), {who}"
    if t.local:
        r.ok(step, text)
        return
    # The function logs to the group the stack made for it (LoggingConfig),
    # not to one Lambda would make with no retention.
    group, logs, streams = f"/aws/lambda/{t.stack}/operator-console", t.client("logs"), []
    for _ in range(15):
        streams = logs.describe_log_streams(logGroupName=group, orderBy="LastEventTime", descending=True,
                                            limit=1)["logStreams"]
        if streams:
            break
        time.sleep(2)
    if streams:
        r.ok(step, f"{text}; it logs to {group}")
    else:
        r.fail(step, f"{text}; but nothing reached {group} within 30 s",
               "the function's LoggingConfig must name the stack's OperatorConsoleLogGroup (make deploy again)")


def alarms(t, r):
    step = "alarms"
    if t.local:
        r.skip(step, "make dev has no CloudWatch alarms")
        return
    found = [a for page in t.client("cloudwatch").get_paginator("describe_alarms").paginate(AlarmNamePrefix=f"{t.stack}-")
             for a in page["MetricAlarms"] + page.get("CompositeAlarms", [])]
    firing = [a for a in found if a["StateValue"] == "ALARM"]
    waiting = [a for a in found if a["StateValue"] == "INSUFFICIENT_DATA"]
    if not found:
        r.fail(step, f"no alarm named {t.stack}-…", "the stack's alarms are named by CloudFormation after the stack: check STACK")
    elif firing:
        r.fail(step, ", ".join(a["AlarmName"] for a in firing) + " in ALARM",
               " / ".join((a.get("AlarmDescription") or "").split(". ")[0] for a in firing)[:300])
    else:
        extra = f" ({len(waiting)} not evaluated yet: INSUFFICIENT_DATA)" if waiting else ""
        r.ok(step, f"{len(found)} alarm{'s' if len(found) != 1 else ''}, none in ALARM{extra}")


# Resources a WaitConditionHandle's Metadata names, so that CloudFormation
# creates the handle after them and deletes it before them (a conditional
# DependsOn; template.yaml, DatabaseReadyHandle and NetworkReadyHandle).
ORDERED_BY_METADATA = {"DatabaseReadyHandle": ["DatabaseInstance"],
                       "NetworkReadyHandle": ["S3Endpoint", "SecretsManagerEndpoint", "PrivateDefaultRoute",
                                              "PrivateSubnetARoutes", "PrivateSubnetBRoutes"]}


def stack_order(t, r):
    """What the stack's own events say of the order CloudFormation created
    it in: each handle after every resource its Metadata names."""
    step = "stack-order"
    if t.local:
        r.skip(step, "make dev has no CloudFormation stack")
        return
    started, done = {}, {}
    for page in t.client("cloudformation").get_paginator("describe_stack_events").paginate(StackName=t.stack):
        for e in page["StackEvents"]:
            at, key = e["Timestamp"], e["LogicalResourceId"]
            if e["ResourceStatus"] == "CREATE_IN_PROGRESS":
                started[key] = min(started.get(key, at), at)
            elif e["ResourceStatus"] == "CREATE_COMPLETE":
                done[key] = max(done.get(key, at), at)
    early, checked = [], 0
    for handle, before in ORDERED_BY_METADATA.items():
        for name in (b for b in before if b in done and handle in started):
            checked += 1
            if started[handle] < done[name]:
                early.append(f"{handle} began before {name} was complete")
    if early:
        r.fail(step, "; ".join(early), "CloudFormation did not order by a Ref in Metadata: report it (docs/aws-behaviours.md); "
                                      "SchemaMigration may have run before the database or the routes were ready")
    elif not checked:
        r.skip(step, "the stack's creation events are gone (or it made neither the database nor the network)")
    else:
        r.ok(step, f"the creation followed the Refs in the handles' Metadata ({checked} pairs)")


def stack_secrets(t, r):
    """The functions' logins are made from their secrets by the migration,
    at a deploy: a secret rotated between deploys would change a password
    no login has."""
    step = "secrets"
    if t.local:
        r.skip(step, "make dev's functions read DATABASE_URL (or LocalStack's secret, without rotation)")
        return
    cfn, sm = t.client("cloudformation"), t.client("secretsmanager")
    arns = [x["PhysicalResourceId"] for page in cfn.get_paginator("list_stack_resources").paginate(StackName=t.stack)
            for x in page["StackResourceSummaries"] if x["ResourceType"] == "AWS::SecretsManager::Secret"]
    rotating = [a.split(":")[-1] for a in arns if sm.describe_secret(SecretId=a).get("RotationEnabled")]
    if rotating:
        r.fail(step, f"rotation is on for {', '.join(rotating)}: the login keeps the password of the last deploy",
               "turn rotation off on the stack's login secrets (aws secretsmanager cancel-rotate-secret); a new "
               "password reaches its login by a deploy that replaces the secret")
    else:
        r.ok(step, f"{len(arns)} login secrets, none rotated behind the migration's back")


def schedules(t, r):
    """The poller's and sweeper's schedules as deployed: enabled, each with
    its dead-letter queue and no retry; and what failed and waits there."""
    step = "schedules"
    if t.local:
        r.skip(step, "make dev's scheduler is a loop, not EventBridge Scheduler")
        return
    names = [x["PhysicalResourceId"] for page in t.client("cloudformation").get_paginator("list_stack_resources")
             .paginate(StackName=t.stack) for x in page["StackResourceSummaries"]
             if x["ResourceType"] == "AWS::Scheduler::Schedule"]
    scheduler, wrong = t.client("scheduler"), []
    for name in names:
        schedule = scheduler.get_schedule(Name=name.split("|")[-1])
        target = schedule.get("Target") or {}
        if schedule.get("State") != "ENABLED":
            wrong.append(f"{schedule['Name']} is {schedule.get('State')}")
        if not (target.get("DeadLetterConfig") or {}).get("Arn"):
            wrong.append(f"{schedule['Name']} has no dead-letter queue")
        if (target.get("RetryPolicy") or {}).get("MaximumRetryAttempts", 185) != 0:
            wrong.append(f"{schedule['Name']} retries a failed delivery (a late run overlaps the next)")
    if not names or wrong:
        r.fail(step, "; ".join(wrong) or "the stack has no schedule", "make deploy again: the template sets them")
        return
    waiting = 0
    if t.failure_queue:
        attrs = t.client("sqs").get_queue_attributes(QueueUrl=t.failure_queue, AttributeNames=["ApproximateNumberOfMessages"])
        waiting = int(attrs["Attributes"]["ApproximateNumberOfMessages"])
    text = f"{len(names)} schedules enabled, each with its dead-letter queue and no retry"
    if waiting:
        r.warn(step, f"{text}; {waiting} failed scheduled invocation(s) wait in ScheduledFailureQueue: read why "
                     "(aws sqs receive-message --queue-url <ScheduledFailureQueueUrl>)")
    else:
        r.ok(step, f"{text}; none failed (ScheduledFailureQueue is empty)")


def proxy_pinning(t, r):
    step = "proxy"
    if t.local or not t.proxy:
        r.skip(step, "no RDS Proxy (UseRdsProxy=false)" if not t.local else "make dev has no RDS Proxy")
        return
    now = datetime.now(timezone.utc)
    points = t.client("cloudwatch").get_metric_statistics(
        Namespace="AWS/RDS", MetricName="DatabaseConnectionsCurrentlySessionPinned",
        Dimensions=[{"Name": "ProxyName", "Value": t.proxy}], StartTime=now - timedelta(hours=3), EndTime=now,
        Period=300, Statistics=["Maximum"])["Datapoints"]
    pinned = max((p["Maximum"] for p in points), default=0)
    if pinned > 0:
        r.warn(step, f"{t.proxy}: up to {pinned:g} pinned connections in 3 hours: a pinned connection serves one "
                     "client, so the proxy multiplexes less (docs/aws-behaviours.md, RDS Proxy)")
    else:
        r.ok(step, f"{t.proxy}: no pinned connection in the last 3 hours ({len(points)} data points)")


def clean_up(t):
    if t.booking:
        booking, headers = t.booking
        status, _, _ = http("POST", f"{t.api}/bookings/{booking}/cancel", headers)
        print(f"  cleaned up: the booking {booking} cancelled ({status})")
    if t.user:
        t.client("cognito-idp").admin_delete_user(UserPoolId=t.pool, Username=t.user)
        print(f"  cleaned up: the user {t.user} deleted from the pool")


def deployed(args, boto3):
    cfn = boto3.client("cloudformation", region_name=args.region)
    stack = cfn.describe_stacks(StackName=args.stack)["Stacks"][0]
    out = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    par = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    return Target(local=False, region=args.region, api=out["ApiUrl"], console=out["ConsoleUrl"],
                  from_address=par.get("SesFromAddress") or par.get("SmtpFromAddress", ""),
                  config_set=out.get("SesConfigurationSetName", ""), mail_provider=par.get("MailProvider", "ses"),
                  stack=args.stack, pool=out.get("UserPoolId"), client_id=out.get("UserPoolClientId"),
                  organizer_domains=par.get("SelfSignUpDomains", ""), boto=boto3, token=args.token,
                  proxy=(out.get("RdsProxyEndpoint") or "").split(".")[0] or None,
                  failure_queue=out.get("ScheduledFailureQueueUrl"))


def local(args, boto3):
    env = dict(line.split("=", 1) for line in open(f"{args.local}/verify.env").read().splitlines() if "=" in line)
    return Target(local=True, region=env["AWS_REGION"], api=env["API_URL"], console=env["CONSOLE_URL"],
                  from_address=env["FROM_ADDRESS"], config_set=env.get("SES_CONFIGURATION_SET", ""),
                  mail_provider=env["MAILER"], boto=boto3, ses_endpoint=env.get("SES_ENDPOINT_URL"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stack")
    p.add_argument("--region")
    p.add_argument("--local", metavar="DEV_DIR", help="make dev's data dir (its verify.env)")
    p.add_argument("--token", help="an ID token to book with (your own identity provider)")
    p.add_argument("--wait", type=int, default=None, help="seconds to wait for SES's events (300; 120 with --local)")
    args = p.parse_args()
    if not args.local and not (args.stack and args.region):
        p.error("give --stack and --region, or --local")
    try:
        import boto3
    except ImportError:
        sys.exit("verify: boto3 is missing (scripts/verify.sh installs it into .venv/verify)")
    t = local(args, boto3) if args.local else deployed(args, boto3)
    wait = args.wait or (120 if t.local else 300)
    print(f"==> make verify: {'make dev at ' + t.api if t.local else 'the stack ' + t.stack + ' in ' + t.region}")
    r = Report()
    ses_steps = [from_identity, account_sending, configuration_set]
    try:
        for check in ses_steps:
            if t.mail_provider != "ses":
                r.skip(check.__name__.replace("_", "-"), f"MailProvider={t.mail_provider}")
                continue
            try:
                check(t, r)
            except Exception as e:  # noqa: BLE001 -- one line per step, whatever AWS answered
                r.fail(check.__name__.replace("_", "-"), one_line(e),
                       "the credentials need ses:Get* in this region (docs/deployer-policy.json)")
        steps = [("token", token), ("simulator", lambda t, r: simulator(t, r, wait)), ("console", console),
                 ("alarms", alarms), ("schedules", schedules), ("stack-order", stack_order), ("secrets", stack_secrets),
                 ("proxy", proxy_pinning)]
        for name, check in steps:
            try:
                check(t, r)
            except Exception as e:  # noqa: BLE001 -- one line per step, whatever AWS answered
                r.fail(name, one_line(e), "the credentials may lack a read right "
                                                              "(docs/deployer-policy.json); the error names it")
    finally:
        clean_up(t)
    print(f"==> make verify: {'all steps passed' if not r.failed else str(r.failed) + ' failed'}")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
