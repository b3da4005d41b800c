#!/usr/bin/env python3
"""The local mailbox: lists the invitations moto (SES v2) received, with
iCalendar METHOD, recipient, the SES events scripts/ses-publisher.py
published for each message (e.g. `Send,Delivery`), and subject.

usage: mailbox.py [ENDPOINT] [--events FILE] [--json]
  ENDPOINT  moto (default http://127.0.0.1:$DEV_MOTO_PORT or :5055); read
            directly, not through the publisher
  --events  the publisher's events file (default $DEV_DIR/ses-events.jsonl,
            i.e. .local/ses-events.jsonl)
"""
import argparse
import json
import os
import sys
import urllib.request
from email import policy
from email.parser import BytesParser


def published_events(path):
    """messageId -> the event types published for it, in order ({} if no file)."""
    events = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    detail = json.loads(line)["detail"]
                    events.setdefault(detail["mail"]["messageId"], []).append(detail["eventType"])
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return events


def messages(endpoint, events):
    data = json.load(urllib.request.urlopen(endpoint.rstrip("/") + "/moto-api/data.json", timeout=5))
    for entry in data.get("ses", {}).get("RawMessage", []):
        msg = BytesParser(policy=policy.default).parsebytes(entry["raw_data"].encode("utf-8"))
        method = "-"
        for part in msg.walk():
            if part.get_content_type() == "text/calendar":
                method = part.get_param("method") or "-"
        to = ", ".join(a.addr_spec for a in msg["To"].addresses) if msg["To"] else "-"
        # moto's `id` is the MessageId SendEmail returned, the one in SES's events.
        yield {"id": entry.get("id"), "to": to, "subject": str(msg["Subject"]), "method": method,
               "date": str(msg["Date"]), "ses_events": events.get(entry.get("id"), [])}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dev_dir = os.environ.get("DEV_DIR", os.path.join(root, ".local"))
    p = argparse.ArgumentParser(description="The local mailbox (moto SES v2).")
    p.add_argument("endpoint", nargs="?", default="http://127.0.0.1:" + os.environ.get("DEV_MOTO_PORT", "5055"))
    p.add_argument("--events", default=os.path.join(dev_dir, "ses-events.jsonl"), metavar="FILE",
                   help="the SES events ses-publisher.py wrote (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the messages as JSON")
    args = p.parse_args()
    try:
        rows = list(messages(args.endpoint, published_events(args.events)))
    except OSError as e:
        sys.exit(f"mailbox: cannot read {args.endpoint}/moto-api/data.json ({e}); is `make dev` running?")
    if args.json:
        print(json.dumps(rows))
        return
    if not rows:
        print("(no mail yet)")
    for r in rows:
        print(f"{r['method']:<8} {r['to']:<32} {','.join(r['ses_events']) or '-':<14} {r['subject']}")


if __name__ == "__main__":
    main()
