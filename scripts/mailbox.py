#!/usr/bin/env python3
"""The local mailbox: lists the invitations moto (SES v2) received, with
recipient, subject and iCalendar METHOD.

usage: mailbox.py [ENDPOINT]   (default http://127.0.0.1:$DEV_MOTO_PORT or :5055)
"""
import json
import os
import sys
import urllib.request
from email import policy
from email.parser import BytesParser


def messages(endpoint):
    data = json.load(urllib.request.urlopen(endpoint.rstrip("/") + "/moto-api/data.json", timeout=5))
    for entry in data.get("ses", {}).get("RawMessage", []):
        msg = BytesParser(policy=policy.default).parsebytes(entry["raw_data"].encode("utf-8"))
        method = "-"
        for part in msg.walk():
            if part.get_content_type() == "text/calendar":
                method = part.get_param("method") or "-"
        to = ", ".join(a.addr_spec for a in msg["To"].addresses) if msg["To"] else "-"
        yield {"to": to, "subject": str(msg["Subject"]), "method": method, "date": str(msg["Date"])}


def main():
    default = "http://127.0.0.1:" + os.environ.get("DEV_MOTO_PORT", "5055")
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    endpoint = args[0] if args else default
    try:
        rows = list(messages(endpoint))
    except OSError as e:
        sys.exit(f"mailbox: cannot read {endpoint}/moto-api/data.json ({e}); is `make dev` running?")
    if "--json" in sys.argv:
        print(json.dumps(rows))
        return
    if not rows:
        print("(no mail yet)")
    for r in rows:
        print(f"{r['method']:<8} {r['to']:<32} {r['subject']}")


if __name__ == "__main__":
    main()
