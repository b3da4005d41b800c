#!/usr/bin/env python3
"""Independent check of the mail the service sent: reads moto's sent raw
messages, parses each with Python's `email` package and the `icalendar`
package (neither shares code with the Rust builder), and prints one JSON
object per message.

usage: inspect_mail.py ENDPOINT [SOURCE_FILTER]
       inspect_mail.py --mailbox FILE   (the SMTP test server's mailbox,
                                         scripts/smtp-server.py: one JSON line
                                         a message, with its envelope)
"""
import json
import sys
import urllib.request
from email import policy
from email.parser import BytesParser

import icalendar


def calendar_summary(part):
    cal = icalendar.Calendar.from_ical(part.get_payload(decode=True))
    events = [c for c in cal.walk("VEVENT")]
    ev = events[0]
    attendees = ev.get("ATTENDEE")
    if attendees is None:
        attendees = []
    elif not isinstance(attendees, list):
        attendees = [attendees]
    return {
        "mime_method": part.get_param("method"),
        "METHOD": str(cal.get("METHOD")),
        "VERSION": str(cal.get("VERSION")),
        "PRODID": str(cal.get("PRODID")),
        "events": len(events),
        "UID": str(ev.get("UID")),
        "SEQUENCE": int(ev.get("SEQUENCE")),
        "STATUS": str(ev.get("STATUS")),
        "SUMMARY": str(ev.get("SUMMARY")),
        "LOCATION": str(ev.get("LOCATION")) if ev.get("LOCATION") is not None else None,
        "DESCRIPTION": str(ev.get("DESCRIPTION")) if ev.get("DESCRIPTION") is not None else None,
        "URL": str(ev.get("URL")) if ev.get("URL") is not None else None,
        "TRANSP": str(ev.get("TRANSP")) if ev.get("TRANSP") is not None else None,
        "DTSTART": ev.decoded("DTSTART").isoformat(),
        "DTEND": ev.decoded("DTEND").isoformat(),
        "ORGANIZER": str(ev.get("ORGANIZER")),
        "ORGANIZER_CN": str(ev.get("ORGANIZER").params.get("CN")),
        "ATTENDEES": [
            {"value": str(a), "CN": str(a.params.get("CN")), "RSVP": a.params.get("RSVP"),
             "PARTSTAT": a.params.get("PARTSTAT")}
            for a in attendees
        ],
    }


def summarise(entry):
    msg = BytesParser(policy=policy.default).parsebytes(entry["raw_data"].encode("utf-8"))
    parts = [p.get_content_type() for p in msg.walk() if not p.is_multipart()]
    out = {
        "destinations": sorted(set(entry.get("destinations", []))),
        "source": entry.get("source"),
        "header_names": [k for k in msg.keys()],
        "from": str(msg["From"]),
        "to": str(msg["To"]),
        "to_addresses": [a.addr_spec for a in msg["To"].addresses],
        "reply_to": str(msg["Reply-To"]),
        "subject": str(msg["Subject"]),
        "message_id": str(msg["Message-ID"]),
        "content_type": msg.get_content_type(),
        "parts": parts,
        "defects": [str(d) for p in msg.walk() for d in p.defects],
    }
    for p in msg.walk():
        if p.get_content_type() == "text/plain":
            out["text"] = p.get_content()
        elif p.get_content_type() == "text/html":
            out["html"] = p.get_content()
        elif p.get_content_type() == "text/calendar":
            out["calendar"] = calendar_summary(p)
    return out


def main():
    if sys.argv[1] == "--mailbox":
        with open(sys.argv[2], encoding="utf-8") as f:
            for line in f:
                stored = json.loads(line)
                entry = {"raw_data": stored["data"], "destinations": stored["rcpt_tos"], "source": stored["mail_from"]}
                print(json.dumps(summarise(entry)))
        return
    endpoint = sys.argv[1].rstrip("/")
    source = sys.argv[2] if len(sys.argv) > 2 else None
    data = json.load(urllib.request.urlopen(endpoint + "/moto-api/data.json"))
    raw = data.get("ses", {}).get("RawMessage", [])
    for entry in raw:
        if source and entry.get("source") != source:
            continue
        print(json.dumps(summarise(entry)))


if __name__ == "__main__":
    main()
