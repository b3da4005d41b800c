#!/usr/bin/env python3
"""The SMTP benchmark's peer: a bare SMTP client (Python's smtplib) that
sends COUNT copies of the message in FILE to the server, over CONNECTIONS
kept connections at once (STARTTLS verified against CA, AUTH), one
recipient each, as the poller does; prints the seconds it took.

usage: smtp_blast.py HOST PORT CA USER PASSWORD FILE COUNT CONNECTIONS
"""
import smtplib
import ssl
import sys
import threading
import time

host, port, ca, user, password, path, count, connections = sys.argv[1:9]
port, count, connections = int(port), int(count), int(connections)
message = open(path, "rb").read()
context = ssl.create_default_context(cafile=ca)
lock = threading.Lock()
left = [count]
errors = []


def take():
    with lock:
        if left[0] == 0:
            return False
        left[0] -= 1
        return True


def worker(n):
    try:
        with smtplib.SMTP(host, port, timeout=30) as s:
            s.starttls(context=context)
            s.login(user, password)
            i = 0
            while take():
                s.sendmail("bookings@example.com", [f"peer{n}.{i}@example.com"], message)
                i += 1
    except Exception as e:  # reported, and the bench fails
        errors.append(repr(e))


started = time.monotonic()
threads = [threading.Thread(target=worker, args=(n,)) for n in range(connections)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.monotonic() - started
if errors:
    sys.exit(f"smtp_blast: {errors[0]}")
print(f"{elapsed:.3f}")
