#!/usr/bin/env python3
"""The local mailbox: lists the invitations the local SES received, with
iCalendar METHOD, recipient, the SES events scripts/ses-publisher.py
published for each message (e.g. `Send,Delivery`), and subject.

The SES is moto (`/moto-api/data.json`), or with --localstack a LocalStack
that answers SES v2 (a paid one, LOCALSTACK_AUTH_TOKEN; its sent-mail
listing `/_aws/ses`), or with --smtp FILE the mailbox of the local SMTP
server (scripts/smtp-server.py, `make dev MAILER=smtp`): no SES events
there, the events column is "-". `make mailbox` (scripts/mailbox.sh) picks
the one the running `make dev` uses.

usage: mailbox.py [ENDPOINT] [--localstack | --smtp FILE] [--events FILE] [--json]
                  [--show ADDRESS [--out DIR]]
  ENDPOINT  moto (default http://127.0.0.1:$DEV_MOTO_PORT or :5055), read
            directly, not through the publisher; with --localstack,
            LocalStack (default $LOCALSTACK_ENDPOINT or http://127.0.0.1:4566)
  --events  the publisher's events file (default $DEV_DIR/ses-events.jsonl,
            i.e. .local/ses-events.jsonl)
  --show    the latest message to ADDRESS as its recipient reads it: its
            text part printed, and its HTML, text and calendar parts written
            to DIR (default $DEV_DIR/mail) to open in a browser
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


def read_raw(raw):
    """(METHOD, To, Subject, Date) of a raw RFC 5322 message."""
    msg = BytesParser(policy=policy.default).parsebytes(raw.encode("utf-8"))
    method = "-"
    for part in msg.walk():
        if part.get_content_type() == "text/calendar":
            method = part.get_param("method") or "-"
    to = ", ".join(a.addr_spec for a in msg["To"].addresses) if msg["To"] else "-"
    return method, to, str(msg["Subject"]) if msg["Subject"] else "-", str(msg["Date"]) if msg["Date"] else "-"


def show(rows, address, out):
    """Prints the latest message to `address` and writes its parts to `out`."""
    mine = [r for r in rows if address.lower() in r["to"].lower()]
    if not mine:
        sys.exit(f"mailbox: no message to {address} yet (`make mailbox` lists them)")
    msg = BytesParser(policy=policy.default).parsebytes(mine[-1]["raw"].encode("utf-8"))
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, address.replace("@", "_at_").replace("/", "_"))
    written = []
    for part in msg.walk():
        suffix = {"text/plain": ".txt", "text/html": ".html", "text/calendar": ".ics"}.get(part.get_content_type())
        if suffix:
            with open(stem + suffix, "w", encoding="utf-8") as f:
                f.write(part.get_content())
            written.append(stem + suffix)
    print(f"Subject: {msg['Subject']}\nTo:      {msg['To']}\nDate:    {msg['Date']}\n")
    body = msg.get_body(preferencelist=("plain",))
    print(body.get_content() if body else "(no text part)")
    print("the parts, to open (the .html in a browser):")
    for path in written:
        print(f"  {path}")


def moto_messages(endpoint):
    """(message id, raw message) of everything moto received; moto's `id`
    is the MessageId SendEmail returned, the one in SES's events."""
    data = json.load(urllib.request.urlopen(endpoint.rstrip("/") + "/moto-api/data.json", timeout=5))
    for entry in data.get("ses", {}).get("RawMessage", []):
        yield entry.get("id"), entry["raw_data"]


def localstack_messages(endpoint):
    """The same from LocalStack's `/_aws/ses`; its `Id` is the MessageId."""
    data = json.load(urllib.request.urlopen(endpoint.rstrip("/") + "/_aws/ses", timeout=5))
    for entry in data.get("messages", []):
        if entry.get("RawData"):
            yield entry.get("Id"), entry["RawData"]


def smtp_messages(path):
    """The same from the SMTP server's mailbox file; the id is the Message-ID."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            yield entry.get("message_id"), entry["data"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dev_dir = os.environ.get("DEV_DIR", os.path.join(root, ".local"))
    p = argparse.ArgumentParser(description="The local mailbox (moto, or LocalStack's SES v2).")
    p.add_argument("endpoint", nargs="?")
    p.add_argument("--localstack", action="store_true", help="read LocalStack's /_aws/ses instead of moto")
    p.add_argument("--smtp", metavar="FILE", help="read the local SMTP server's mailbox file instead of moto")
    p.add_argument("--events", default=os.path.join(dev_dir, "ses-events.jsonl"), metavar="FILE",
                   help="the SES events ses-publisher.py wrote (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the messages as JSON")
    p.add_argument("--show", metavar="ADDRESS", help="show the latest message to ADDRESS, its parts written to --out")
    p.add_argument("--out", default=os.path.join(dev_dir, "mail"), metavar="DIR",
                   help="where --show writes the parts (default: %(default)s)")
    args = p.parse_args()
    if args.smtp:
        endpoint, source, where, hint = args.smtp, smtp_messages, "", "make dev MAILER=smtp"
    elif args.localstack:
        endpoint = args.endpoint or os.environ.get("LOCALSTACK_ENDPOINT", "http://127.0.0.1:4566")
        source, where, hint = localstack_messages, "/_aws/ses", "make dev LOCALSTACK=1"
    else:
        endpoint = args.endpoint or "http://127.0.0.1:" + os.environ.get("DEV_MOTO_PORT", "5055")
        source, where, hint = moto_messages, "/moto-api/data.json", "make dev"
    events = published_events(args.events)
    try:
        rows = []
        for message_id, raw in source(endpoint):
            method, to, subject, date = read_raw(raw)
            rows.append({"id": message_id, "to": to, "subject": subject, "method": method, "date": date,
                         "ses_events": events.get(message_id, []), "raw": raw})
    except OSError as e:
        sys.exit(f"mailbox: cannot read {endpoint}{where} ({e}); is `{hint}` running?")
    if args.show:
        show(rows, args.show, args.out)
        return
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "raw"} for r in rows]))
        return
    if not rows:
        print("(no mail yet)")
    for r in rows:
        print(f"{r['method']:<8} {r['to']:<32} {','.join(r['ses_events']) or '-':<14} {r['subject']}")


if __name__ == "__main__":
    main()
