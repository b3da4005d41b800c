#!/usr/bin/env python3
"""A real SMTP server (aiosmtpd) with a mailbox and a fault mode: what the
SMTP mailer is tested against, and `make dev MAILER=smtp`'s mail server.

  smtp-server.py --listen 127.0.0.1:0 --mailbox FILE [--tls implicit|starttls|none]
                 [--tls-dir DIR] [--auth USER:PASSWORD] [--faults JSON]
                 [--random P --seed N --stall-secs S]

Prints `ready PORT` on stdout once it listens (port 0: a free one).

--tls-dir: a CA and a certificate for 127.0.0.1 and localhost are made there
  (once; kept): DIR/ca.crt is what a client must trust (SMTP_CA_FILE).
  `--tls implicit` speaks TLS from the first byte (smtps://), `starttls`
  offers STARTTLS and refuses mail without it (smtp://), `none` offers no
  TLS at all (to show the mailer refuses to send in the clear).
--auth: AUTH PLAIN/LOGIN with these credentials is required (after TLS).
--mailbox: each accepted message is appended as one JSON line (mail_from,
  rcpt_tos, message_id, subject, connection, data).
--faults: a JSON list of faults, each
    {"at": "MAIL"|"RCPT"|"DATA"|"EOM", "do": "reply"|"drop"|"stall"|"store-then-drop",
     "reply": "451 4.3.0 try later", "secs": 5, "times": 1, "rcpt": "a@example.com"}
  at a command (EOM: the final "." of DATA): answer `reply` instead, drop the
  connection without a reply, or stall `secs` and go on; at EOM `stall`
  stores the mail first, and `store-then-drop` stores it and drops the
  connection before replying (the mail is the server's, the client never
  hears so). `times` (default: always) counts uses; `rcpt` limits it to
  transactions for that recipient (not at MAIL); `skip` lets that many
  matching commands pass first.
--ses-events FILE: play SES's SMTP interface with a configuration set: a
  message naming one (X-SES-CONFIGURATION-SET) is answered "250 Ok <id>"
  with an SES-style message id, stored without the X-SES-* headers (SES
  strips them), and the Send and Delivery events SES would publish for it
  (its X-SES-MESSAGE-TAGS as tags, like scripts/ses-publisher.py writes
  them) are appended to FILE, one JSON line each, once it is accepted.
--random P: besides, each command draws a fault with probability P from a
  fixed mix (451, 550 and drops before the final ".", and 451, 554, drop,
  store-then-drop and stall-then-store at it; no 421, which pauses the
  poller for minutes), seeded with --seed. Counts of
  what was applied are printed to stderr at exit (SIGTERM).

Loopback only: it refuses a --listen address that is not.
"""
import argparse
import asyncio
import datetime
import email
import email.policy
import ipaddress
import json
import os
import random
import signal
import ssl
import sys
import uuid
import warnings
from collections import Counter
from pathlib import Path

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from ses_events import send_and_delivery  # noqa: E402  (scripts/lib: the one shape of an SES event)

# aiosmtpd 1.4 warns about its own use of Session.login_data.
warnings.filterwarnings("ignore", category=DeprecationWarning, module="aiosmtpd")


def make_certs(directory):
    """A CA and a server certificate for 127.0.0.1 / localhost, made once."""
    ca_path, cert_path, key_path = (os.path.join(directory, n) for n in ("ca.crt", "server.crt", "server.key"))
    if all(os.path.exists(p) for p in (ca_path, cert_path, key_path)):
        return cert_path, key_path
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "booking-outbox local SMTP CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(pem))
    with open(ca_path + ".tmp", "wb") as f:
        f.write(ca.public_bytes(pem))
    os.replace(ca_path + ".tmp", ca_path)
    return cert_path, key_path


class Faults:
    """The scripted faults, then the random ones."""

    MIX = {
        "MAIL": [{"do": "reply", "reply": "451 4.3.0 Try again later"}, {"do": "drop"}],
        "RCPT": [{"do": "reply", "reply": "451 4.2.0 Mailbox busy"}, {"do": "reply", "reply": "550 5.1.1 No such user"},
                 {"do": "drop"}],
        "DATA": [{"do": "reply", "reply": "451 4.3.0 Try again later"}, {"do": "drop"}],
        "EOM": [{"do": "reply", "reply": "451 4.3.0 Queue full"}, {"do": "reply", "reply": "554 5.7.1 Refused"},
                {"do": "store-then-drop"}, {"do": "stall"}, {"do": "drop"}],
    }

    def __init__(self, scripted, probability, seed, stall_secs):
        self.scripted = scripted
        self.probability = probability
        self.random = random.Random(seed)
        self.stall_secs = stall_secs
        self.applied = Counter()

    def take(self, at, rcpts=()):
        for f in self.scripted:
            if f.get("at") != at or f.get("times") == 0:
                continue
            if f.get("rcpt") and f["rcpt"].lower() not in [r.lower() for r in rcpts]:
                continue
            if f.get("skip", 0) > 0:
                f["skip"] -= 1
                continue
            if "times" in f:
                f["times"] -= 1
            self.applied[f"{at} {f.get('do', 'reply')} {f.get('reply', '')}".strip()] += 1
            return f
        if self.probability and self.random.random() < self.probability:
            f = dict(self.random.choice(self.MIX[at]))
            f.setdefault("secs", self.stall_secs)
            self.applied[f"{at} {f['do']} {f.get('reply', '')}".strip()] += 1
            return f
        return None


class FaultySMTP(SMTP):
    """aiosmtpd's server with a fault check before MAIL, RCPT and DATA."""

    faults = None
    connections = 0

    def connection_made(self, transport):
        if self.transport is None:  # not again after STARTTLS
            FaultySMTP.connections += 1
            self.connection_number = FaultySMTP.connections
        super().connection_made(transport)

    async def fault(self, at, rcpts=()):
        """True when the fault answered the command (or dropped it)."""
        f = self.faults.take(at, rcpts)
        if f is None:
            return False
        do = f.get("do", "reply")
        if do == "stall":
            await asyncio.sleep(f.get("secs", 30))
            return False
        if do == "reply":
            await self.push(f["reply"])
            if f["reply"].startswith("421"):
                self.transport.close()
            return True
        self.transport.abort()  # drop: no reply at all
        return True

    async def smtp_MAIL(self, arg):
        if not await self.fault("MAIL"):
            await super().smtp_MAIL(arg)

    async def smtp_RCPT(self, arg):
        rcpt = (arg or "").split("<", 1)[-1].split(">", 1)[0]
        if not await self.fault("RCPT", [rcpt]):
            await super().smtp_RCPT(arg)

    async def smtp_DATA(self, arg):
        rcpts = self.envelope.rcpt_tos if self.envelope else []
        if not await self.fault("DATA", rcpts):
            await super().smtp_DATA(arg)


def ses_events(msg, message_id, envelope, account="123456789012", region="us-east-1"):
    """The Send and Delivery events SES publishes to EventBridge for a
    message its SMTP interface accepted (the shape of ses-publisher.py's)."""
    config_set = str(msg.get("X-SES-CONFIGURATION-SET")).strip()
    tags = {"ses:configuration-set": [config_set]}
    for pair in str(msg.get("X-SES-MESSAGE-TAGS") or "").split(","):
        name, _, value = pair.strip().partition("=")
        if name:
            tags[name.strip()] = [value.strip()]
    return send_and_delivery(source=envelope.mail_from, destination=envelope.rcpt_tos, tags=tags,
                             config_set=config_set, message_id=message_id,
                             now=datetime.datetime.now(datetime.timezone.utc), account=account, region=region)


class Mailbox:
    def __init__(self, path, faults, ses_events_path=None):
        self.path = path
        self.faults = faults
        self.ses_events_path = ses_events_path

    def store(self, session_server, envelope):
        """Stores the message; returns SES's message id when it plays SES's
        SMTP interface for a message of a configuration set."""
        content = envelope.original_content or b""
        msg = email.message_from_bytes(content, policy=email.policy.default)
        ses_id = None
        if self.ses_events_path and msg.get("X-SES-CONFIGURATION-SET"):
            ses_id = f"0100{uuid.uuid4().hex}-000000"
            events = ses_events(msg, ses_id, envelope)
            for header in ("X-SES-CONFIGURATION-SET", "X-SES-MESSAGE-TAGS"):
                del msg[header]
            content = msg.as_bytes()
            with open(self.ses_events_path, "a", encoding="utf-8") as f:
                for event in events:
                    f.write(json.dumps(event, separators=(",", ":")) + "\n")
                f.flush()
        record = {
            "received_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "message_id": (msg.get("Message-ID") or "").strip(),
            "subject": str(msg.get("Subject") or ""),
            "connection": getattr(session_server, "connection_number", 0),
            "data": content.decode("utf-8", "replace"),
        }
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
        return ses_id

    async def handle_DATA(self, server, session, envelope):
        f = self.faults.take("EOM", envelope.rcpt_tos)
        do = f.get("do", "reply") if f else None
        if do == "reply":
            if f["reply"].startswith("421"):
                await server.push(f["reply"])  # then close: nothing after it is written
                server.transport.close()
                return "421 closing"
            return f["reply"]
        if do == "drop":
            server.transport.abort()
            return "250 OK"  # never written: the connection is gone
        ses_id = self.store(server, envelope)
        if do == "store-then-drop":
            server.transport.abort()
        elif do == "stall":
            await asyncio.sleep(f.get("secs", 30))
        return f"250 Ok {ses_id}" if ses_id else "250 2.0.0 OK: queued"


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--mailbox", required=True)
    ap.add_argument("--tls", choices=["implicit", "starttls", "none"], default="starttls")
    ap.add_argument("--tls-dir")
    ap.add_argument("--auth")
    ap.add_argument("--faults", default="[]")
    ap.add_argument("--random", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stall-secs", type=float, default=30.0)
    ap.add_argument("--ses-events")
    args = ap.parse_args()

    host, _, port = args.listen.rpartition(":")
    if not ipaddress.ip_address(host).is_loopback:
        sys.exit(f"error: --listen {args.listen}: this test server listens on loopback addresses only")
    try:
        scripted = json.loads(args.faults)
        assert isinstance(scripted, list)
    except (ValueError, AssertionError):
        sys.exit("error: --faults must be a JSON list of faults")

    context = None
    if args.tls != "none":
        if not args.tls_dir:
            sys.exit("error: --tls implicit or starttls needs --tls-dir")
        cert, key = make_certs(args.tls_dir)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)

    faults = Faults(scripted, args.random, args.seed, args.stall_secs)
    FaultySMTP.faults = faults
    handler = Mailbox(args.mailbox, faults, args.ses_events)
    open(args.mailbox, "a").close()
    kwargs = {"hostname": "localhost", "ident": "booking-outbox test SMTP", "enable_SMTPUTF8": True}
    if args.auth:
        user, _, password = args.auth.partition(":")

        def authenticator(server, session, envelope, mechanism, data):
            ok = isinstance(data, LoginPassword) and data.login == user.encode() and data.password == password.encode()
            return AuthResult(success=ok, handled=False)  # False: aiosmtpd answers 235 or 535

        kwargs.update(authenticator=authenticator, auth_required=True, auth_require_tls=args.tls == "starttls")
        # (implicit TLS: the whole connection is encrypted already)
    if args.tls == "starttls":
        kwargs.update(tls_context=context, require_starttls=True)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: FaultySMTP(handler, loop=loop, **kwargs), host, int(port),
        ssl=context if args.tls == "implicit" else None)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)

    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    print(f"faults applied: {dict(faults.applied)}; connections: {FaultySMTP.connections}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
