#!/usr/bin/env python3
"""A loopback proxy in front of moto that plays SES's event publishing.

In production every SES v2 SendEmail carries message tags (`claim`,
`event_id`, `event_type`) and SES publishes an event per message (Send,
Delivery, ...) to EventBridge, which invokes the `ses-events` function.
moto publishes no SES events and keeps no tags, so locally nothing would
ever reach that function. This proxy forwards every request to moto
unchanged and, for each SendEmail moto accepted, builds the events SES
publishes to EventBridge, with the request's tags (Send, then Delivery; for
the mailbox simulator's bounce@, suppressionlist@ and complaint@ a Bounce,
or a Delivery and a Complaint, as SES's simulator answers), then appends them to --events-file (one JSON line each;
the end-to-end test in tests/ reads it) and/or POSTs them to --invoke
(the Lambda Invoke API of `cargo lambda watch`), after --delay-ms, in
order, from one background thread: the SES response never waits for it.

usage: ses-publisher.py --listen 127.0.0.1:PORT --upstream http://127.0.0.1:MOTOPORT
                        [--events-file PATH] [--invoke URL] [--delay-ms N]
                        [--account 123456789012] [--region us-east-1]
Python 3.9+, standard library only.
"""
import argparse
import base64
import http.client
import ipaddress
import json
import queue
import signal
import sys
import threading
import time
import uuid
import urllib.request
from datetime import datetime, timezone
from email.utils import format_datetime, parseaddr
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from ses_events import send_and_delivery  # noqa: E402  (scripts/lib: the one shape of an SES event)

SEND_PATH = "/v2/email/outbound-emails"
ACCOUNT_PATH = "/v2/email/account"
IDENTITY_PATH = "/v2/email/identities/"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "proxy-connection", "expect"}


def log(line):
    print(f"ses-publisher: {line}", file=sys.stderr, flush=True)


def mask(address):
    local, _, domain = parseaddr(address)[1].partition("@")
    return f"{local[:1]}***@{domain}" if domain else "***"


def ses_events(request, response, now, account, region):
    """The Send and Delivery events SES in `account` and `region` would
    publish to EventBridge for this SendEmail."""
    message_id = response["MessageId"]
    source = parseaddr(request.get("FromEmailAddress") or "")[1]
    dest = request.get("Destination") or {}
    destination = [a for k in ("ToAddresses", "CcAddresses", "BccAddresses") for a in dest.get(k) or []]
    config_set = request.get("ConfigurationSetName")
    tags = {t["Name"]: [t["Value"]] for t in request.get("EmailTags") or []}
    if config_set:
        tags["ses:configuration-set"] = [config_set]
    if "@" in source:
        tags["ses:from-domain"] = [source.rpartition("@")[2]]
    return send_and_delivery(source=source, destination=[parseaddr(a)[1] for a in destination], tags=tags,
                             config_set=config_set, message_id=message_id, now=now, account=account, region=region)


def as_ses_sends(body):
    """The raw message as SES sends it on: SES overwrites a `Message-ID` the
    message carries with its own, and `Date` with when it accepted the
    message (docs.aws.amazon.com/ses/latest/dg/header-fields.html), so no
    recipient ever sees the sender's. A body it cannot read goes unchanged."""
    try:
        request = json.loads(body)
        raw = request["Content"]["Raw"]
        message = base64.b64decode(raw["Data"])
    except (ValueError, KeyError, TypeError):
        return body
    head, sep, rest = message.partition(b"\r\n\r\n")
    if not sep:
        return body
    ours = f"<{uuid.uuid4().hex[:16]}-{uuid.uuid4()}-000000@email.amazonses.com>".encode()
    now = format_datetime(datetime.now(timezone.utc)).encode()
    lines = [line for line in head.split(b"\r\n") if line.split(b":")[0].lower() not in (b"message-id", b"date")]
    lines += [b"Message-ID: " + ours, b"Date: " + now]
    raw["Data"] = base64.b64encode(b"\r\n".join(lines) + sep + rest).decode()
    return json.dumps(request).encode()


class Publisher:
    def __init__(self, events_file, invoke_url, delay_ms, account, region):
        self.account, self.region = account, region
        self.lock = threading.Lock()
        self.file = open(events_file, "a", encoding="utf-8") if events_file else None
        self.invoke_url, self.delay = invoke_url, delay_ms / 1000
        self.queue = queue.Queue()
        if invoke_url:
            threading.Thread(target=self.invoker, daemon=True).start()

    def publish(self, request_body, response_body):
        """Never raises: a body it cannot read is forwarded, not published."""
        try:
            request, response = json.loads(request_body), json.loads(response_body)
            events = ses_events(request, response, datetime.now(timezone.utc), self.account, self.region)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            log(f"SendEmail accepted but not published: unexpected body ({type(e).__name__}: {e})")
            return
        mail = events[0]["detail"]["mail"]
        if self.file:
            with self.lock:
                for event in events:
                    self.file.write(json.dumps(event, separators=(",", ":")) + "\n")
                    self.file.flush()
        for event in events if self.invoke_url else []:
            self.queue.put((time.monotonic() + self.delay, event))
        log(f"published {'+'.join(e['detail']['eventType'] for e in events)} for {mail['messageId']} claim={mail['tags'].get('claim', ['-'])[0]} "
            f"to {','.join(mask(a) for a in mail['destination'])}")

    def invoker(self):
        while True:
            due, event = self.queue.get()
            time.sleep(max(0.0, due - time.monotonic()))
            what = f"{event['detail']['eventType']} of {event['detail']['mail']['messageId']}"
            for attempt in range(1, 4):
                try:
                    req = urllib.request.Request(self.invoke_url, data=json.dumps(event).encode(),
                                                 headers={"content-type": "application/json"})
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        resp.read()
                        if resp.headers.get("X-Amz-Function-Error"):
                            raise OSError(f"function error {resp.headers['X-Amz-Function-Error']}")
                    break
                except Exception as e:  # noqa: BLE001 -- one line per failure, never a dead worker
                    log(f"invoke {what} failed (attempt {attempt}/3): {e}")
                    time.sleep(0.5 * attempt)


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None  # (host, port)
    publisher = None
    max_send_rate = 14.0

    def log_message(self, *args):  # no access log: one line per published message is enough
        pass

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def forward(self):
        body = self.read_body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if self.command == "POST" and urlsplit(self.path).path == SEND_PATH:
            body = as_ses_sends(body)
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            status, reason, resp_headers, data = resp.status, resp.reason, resp.getheaders(), resp.read()
        except (OSError, http.client.HTTPException) as e:
            log(f"upstream {self.command} {self.path} failed: {e}")
            status, reason, data = 502, "Bad Gateway", f"ses-publisher: upstream failed: {e}\n".encode()
            resp_headers = [("Content-Type", "text/plain")]
        finally:
            conn.close()
        # Decided on the upstream's answer alone, before the client hears it.
        if self.command == "POST" and urlsplit(self.path).path == SEND_PATH and 200 <= status < 300:
            self.publisher.publish(body, data)
        # moto has no verification step (its VerifiedForSendingStatus stays
        # false, yet it sends from any identity it holds): an identity it
        # holds is answered as SES answers one verified (the address's
        # click, or the domain's DKIM records seen), consistent with what it
        # sends from; one it lacks stays NotFound, as in SES. The poller asks
        # at cold start and stops sending on anything else.
        if self.command == "GET" and urlsplit(self.path).path.startswith(IDENTITY_PATH) and status == 200:
            try:
                identity = json.loads(data)
                domain = "@" not in unquote(urlsplit(self.path).path[len(IDENTITY_PATH):])
                identity.update({"VerifiedForSendingStatus": True, "VerificationStatus": "SUCCESS"})
                identity["DkimAttributes"] = {**(identity.get("DkimAttributes") or {}), "SigningEnabled": domain,
                                              "Status": "SUCCESS" if domain else "NOT_STARTED"}
                data = json.dumps(identity).encode()
            except ValueError:
                pass
        # moto has no SES v2 GetAccount (404): answer as SES does for an
        # account out of the sandbox, so the poller paces at a real rate
        # instead of logging that it cannot read one.
        if self.command == "GET" and urlsplit(self.path).path == ACCOUNT_PATH and status == 404:
            status, reason = 200, "OK"
            data = json.dumps({"SendQuota": {"Max24HourSend": 50000.0, "MaxSendRate": self.max_send_rate,
                                             "SentLast24Hours": 0.0},
                               "SendingEnabled": True, "ProductionAccessEnabled": True,
                               "EnforcementStatus": "HEALTHY"}).encode()
            resp_headers = [("Content-Type", "application/json")]
        try:
            self.send_response_only(status, reason)
            for k, v in resp_headers:
                if k.lower() not in HOP_BY_HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                    self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except OSError as e:
            self.close_connection = True
            log(f"client went away before the answer to {self.command} {self.path} ({e})")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = forward


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", required=True, help="loopback HOST:PORT to listen on")
    p.add_argument("--upstream", required=True, help="moto's URL, e.g. http://127.0.0.1:5055")
    p.add_argument("--events-file", help="append each event as one JSON line")
    p.add_argument("--invoke", help="POST each event to this Lambda Invoke URL")
    p.add_argument("--delay-ms", type=int, default=200, help="delay before invoking (default 200)")
    # ses-events accepts only events of its own account and region (those of
    # the ARN it is invoked as), as SES in that account publishes them.
    p.add_argument("--account", default="123456789012", help="the events' AWS account (default 123456789012)")
    p.add_argument("--region", default="us-east-1", help="the events' region (default us-east-1)")
    p.add_argument("--max-send-rate", type=float, default=14.0,
                   help="GetAccount's MaxSendRate when the upstream has none (moto): default 14, a new account's")
    args = p.parse_args()
    if not (len(args.account) == 12 and args.account.isdigit()):
        p.error("--account must be 12 digits")
    host, _, port = args.listen.rpartition(":")
    if host != "localhost" and not (host.replace(".", "").isdigit() and ipaddress.ip_address(host).is_loopback):
        p.error("--listen must be a loopback HOST:PORT, e.g. 127.0.0.1:5056")
    up = urlsplit(args.upstream)
    if up.scheme != "http" or not up.hostname:
        p.error("--upstream must be an http:// URL")
    Proxy.upstream = (up.hostname, up.port or 80)
    Proxy.max_send_rate = args.max_send_rate
    Proxy.publisher = Publisher(args.events_file, args.invoke, args.delay_ms, args.account, args.region)
    server = ThreadingHTTPServer((host, int(port)), Proxy)
    server.daemon_threads = True

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(f"listening on http://{host}:{port} -> {args.upstream}")
    try:
        server.serve_forever()
    except SystemExit:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
