#!/usr/bin/env python3
"""The local mailbox when `make dev LOCALSTACK=1` sends through LocalStack's
SES v2 (a paid LocalStack with LOCALSTACK_AUTH_TOKEN; the free edition has
no SES v2 and the stack uses moto, read by mailbox.py). Lists what
LocalStack's sent-mail listing `/_aws/ses` holds, in mailbox.py's columns:
iCalendar METHOD, recipient, the SES events scripts/ses-publisher.py
published for each message, subject.

usage: mailbox-localstack.py [ENDPOINT] [--events FILE] [--json]
  ENDPOINT  LocalStack (default $LOCALSTACK_ENDPOINT or http://127.0.0.1:4566)
  --events  the publisher's events file (default $DEV_DIR/ses-events.jsonl)
"""
import argparse
import importlib.util
import json
import os
import sys
import urllib.request
from email import policy
from email.parser import BytesParser

# scripts/mailbox.py's reader of the publisher's events file (by path: the
# standard library has a module named mailbox too).
_spec = importlib.util.spec_from_file_location(
    "dev_mailbox", os.path.join(os.path.dirname(os.path.abspath(__file__)), "mailbox.py"))
_dev_mailbox = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_dev_mailbox)
published_events = _dev_mailbox.published_events


def messages(endpoint, events):
    data = json.load(urllib.request.urlopen(endpoint.rstrip("/") + "/_aws/ses", timeout=5))
    for entry in data.get("messages", []):
        method, subject, to = "-", entry.get("Subject") or "-", "-"
        dest = entry.get("Destination") or {}
        addresses = [a for k in ("ToAddresses", "CcAddresses", "BccAddresses") for a in dest.get(k) or []]
        if addresses:
            to = ", ".join(addresses)
        raw = entry.get("RawData")
        if raw:
            msg = BytesParser(policy=policy.default).parsebytes(raw.encode("utf-8"))
            for part in msg.walk():
                if part.get_content_type() == "text/calendar":
                    method = part.get_param("method") or "-"
            subject = str(msg["Subject"]) if msg["Subject"] else subject
            if msg["To"]:
                to = ", ".join(a.addr_spec for a in msg["To"].addresses)
        # LocalStack's `Id` is the MessageId SendEmail returned, the one in SES's events.
        yield {"id": entry.get("Id"), "to": to, "subject": subject, "method": method,
               "date": entry.get("Timestamp") or "-", "ses_events": events.get(entry.get("Id"), [])}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dev_dir = os.environ.get("DEV_DIR", os.path.join(root, ".local"))
    p = argparse.ArgumentParser(description="The local mailbox (LocalStack's /_aws/ses).")
    p.add_argument("endpoint", nargs="?", default=os.environ.get("LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566"))
    p.add_argument("--events", default=os.path.join(dev_dir, "ses-events.jsonl"), metavar="FILE",
                   help="the SES events ses-publisher.py wrote (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the messages as JSON")
    args = p.parse_args()
    try:
        rows = list(messages(args.endpoint, published_events(args.events)))
    except OSError as e:
        sys.exit(f"mailbox: cannot read {args.endpoint}/_aws/ses ({e}); is `make dev LOCALSTACK=1` running?")
    if args.json:
        print(json.dumps(rows))
        return
    if not rows:
        print("(no mail yet)")
    for r in rows:
        print(f"{r['method']:<8} {r['to']:<32} {','.join(r['ses_events']) or '-':<14} {r['subject']}")


if __name__ == "__main__":
    main()
