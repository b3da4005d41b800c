"""The operator console in a real browser (issue 56): Debian's Chromium,
headless, driven by Playwright's Python package (no browser download),
against a running `make dev` stack (scripts/smoke-dev.sh runs it).

    console-browser.py CONSOLE_URL API_URL OUT_DIR --chromium /usr/bin/chromium \
        --psql PSQL --database-url URL --dev-dir DEV_DIR

Checks, failing with one line each:
  1. the overview opens and fills itself in (the backlog tiles, both charts);
  2. a booking created through the API shows in its timeline going CLAIMED
     (or straight to) SENT, then delivered (SES's Delivery event), for each
     attendee, without the page reloading; a message opens as it was sent
     (its HTML part in a sandboxed frame, its calendar part);
  3. the search finds it by an attendee's address, sent in a POST (no
     address in the URL);
  4. every control is reachable by keyboard and every input has a label;
  5. a request without the operators group gets a 403 and nothing else;
  6. a dead event replayed from the console (shown, confirmed) reaches the
     mailbox once: the event of a new booking is put in the state an
     exhausted one leaves (Alice's send SENT, Erin's claim released, DEAD
     after its attempts, as tests/src/ctl.rs seeds it), then replayed from
     the overview's button: Erin gets one more message, Alice none.
Screenshots go to OUT_DIR (always; CI keeps them as artifacts).
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

from playwright.sync_api import sync_playwright


def fail(what):
    print(f"console-browser: FAIL: {what}", file=sys.stderr)
    sys.exit(1)


def create_booking(api, title="Console check", day="02", attendees=None):
    body = {
        "title": title, "start": f"2031-04-{day}T09:00:00Z", "end": f"2031-04-{day}T09:30:00Z",
        "timezone": "Europe/Paris",
        "attendees": attendees or [{"email": "alice@example.com", "name": "Alice"},
                                   {"email": "carol@example.com", "name": "Carol", "locale": "fr"}],
    }
    req = urllib.request.Request(api + "/bookings", data=json.dumps(body).encode(), method="POST", headers={
        "content-type": "application/json", "x-dev-user-email": "bob@example.com", "x-dev-user-name": "Bob"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["id"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("console")
    ap.add_argument("api")
    ap.add_argument("out")
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--psql", required=True)
    ap.add_argument("--database-url", required=True)
    ap.add_argument("--dev-dir", required=True)
    a = ap.parse_args()
    console = a.console if a.console.endswith("/") else a.console + "/"
    os.makedirs(a.out, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        remote = []
        page.on("request", lambda r: remote.append(r.url) if not r.url.startswith(console.split("/lambda-url")[0]) else None)
        try:
            run(page, console, a.api, a.out)
            replay(page, a)
        except Exception as e:  # noqa: BLE001 - one line, and the screen as it was
            page.screenshot(path=f"{a.out}/failure.png", full_page=True)
            fail(f"{e} (screenshot: {a.out}/failure.png)")
        if errors:
            fail(f"the page's script threw: {errors[0]}")
        if remote:
            fail(f"the console fetched something from elsewhere: {remote[0]}")
        browser.close()
    print(f"console-browser: ok (screenshots in {a.out})")


def run(page, console, api, out):
    # 1. The overview.
    page.goto(console)
    page.wait_for_selector("#due-now", timeout=30000)
    if page.locator("svg.chart").count() != 2:
        raise AssertionError("the overview has not its two charts")
    page.evaluate("window.__sameDocument = true")
    page.screenshot(path=f"{out}/overview.png", full_page=True)

    # 2. A booking's timeline, live.
    booking = create_booking(api)
    page.evaluate(f"location.hash = '#/bookings/{booking}'")
    page.wait_for_selector("[data-view=timeline]", timeout=30000)
    seen = set()
    deadline = time.time() + 90
    while time.time() < deadline:
        rows = page.locator("table.sends tr[id^=send-]")
        states = []
        for i in range(rows.count()):
            text = rows.nth(i).inner_text()
            states.append(text)
            for state in ("CLAIMED", "SENT"):
                if state in text:
                    seen.add(state)
        delivered = [s for s in states if "Delivery" in s]
        if len(states) == 2 and len(delivered) == 2:
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"the timeline did not show both invitations delivered within 90 s (saw {seen})")
    if "SENT" not in seen:
        raise AssertionError("no send shown as SENT")
    if not page.evaluate("window.__sameDocument === true"):
        raise AssertionError("the page reloaded to show the change")
    text = page.locator("main").inner_text()
    for expected in ("Console check", "BOOKING_CONFIRMED", "alice@example.com", "carol@example.com", "accepted by"):
        if expected not in text:
            raise AssertionError(f"the timeline does not say {expected!r}")
    page.screenshot(path=f"{out}/timeline.png", full_page=True)
    # A sent message as its recipient saw it: the HTML part in a sandboxed frame.
    page.locator("button[data-message$='/html']").first.click()
    page.wait_for_selector("#message[open]", timeout=10000)
    frame = page.frame_locator("#message-html")
    frame.locator("h1").first.wait_for(timeout=10000)
    if "Console check" not in frame.locator("body").inner_text():
        raise AssertionError("the message's HTML part does not show the booking's title")
    page.screenshot(path=f"{out}/message.png")
    page.keyboard.press("Escape")
    page.locator("button[data-message$='/ics']").first.click()
    page.wait_for_selector("#message[open]", timeout=10000)
    if "BEGIN:VCALENDAR" not in page.locator("#message-text").inner_text():
        raise AssertionError("the calendar part is not shown")
    page.keyboard.press("Escape")

    # 3. Search by an attendee's address: a POST, the address not in the URL.
    posted = []
    page.on("request", lambda r: posted.append((r.method, r.url, r.post_data)) if "/api/search" in r.url else None)
    page.fill("#q", "carol@example.com")
    page.press("#q", "Enter")
    page.wait_for_selector("[data-view=search]", timeout=15000)
    if not page.locator(f"a[href='#/bookings/{booking}']").count():
        raise AssertionError("the search by attendee did not find the booking")
    if not posted or posted[0][0] != "POST" or "carol" in posted[0][1] or "carol" in page.url:
        raise AssertionError(f"the address went in a URL: {posted} {page.url}")
    page.screenshot(path=f"{out}/search.png", full_page=True)

    # 4. Keyboard and labels.
    for control in page.locator("input").all():
        cid = control.get_attribute("id")
        if not cid or not page.locator(f"label[for='{cid}']").count():
            raise AssertionError(f"an input without a label: {control.evaluate('e => e.outerHTML')}")
    page.evaluate("location.hash = '#/'")
    page.wait_for_selector("[data-view=overview]", timeout=15000)
    page.evaluate("document.activeElement.blur()")
    focusable = page.evaluate("""() => [...document.querySelectorAll('a[href], button, input')]
        .filter(e => e.offsetParent !== null && !e.closest('dialog')).length""")
    reached = set()
    for _ in range(focusable + 5):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("""() => { const e = document.activeElement;
            return e.tagName + '|' + (e.id || e.getAttribute('href') || e.textContent.trim()).slice(0, 60); }"""))
    if not any(r.startswith("INPUT|q") for r in reached) or not any(r.startswith("BUTTON|") for r in reached):
        raise AssertionError(f"the search field and its button are not reachable by keyboard: {sorted(reached)}")
    if len(reached) < focusable:
        raise AssertionError(f"{focusable} controls, {len(reached)} reached by Tab")

    # 5. Without the operators group: 403, and nothing of the outbox.
    answer = page.evaluate("""async () => {
        const r = await fetch('api/overview', {headers: {'x-dev-user-email': 'stranger@example.com',
                                                         'x-dev-user-groups': 'staff'}});
        return [r.status, await r.text()]; }""")
    if answer[0] != 403 or "Console check" in answer[1] or "carol" in answer[1]:
        raise AssertionError(f"a request without the operators group got {answer[0]}: {answer[1][:200]}")


def sql(a, statement):
    out = subprocess.run([a.psql, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", a.database_url, "-c", statement],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def mailbox(a, title):
    """How many invitations to `title` each address has in the local mailbox."""
    out = subprocess.run(["./scripts/mailbox.sh", "--json"], env=dict(os.environ, DEV_DIR=a.dev_dir),
                         check=True, capture_output=True, text=True).stdout
    counts = {}
    for m in json.loads(out):
        if title in m["subject"]:
            counts[m["to"]] = counts.get(m["to"], 0) + 1
    return counts


def wait(what, seconds, check):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what} within {seconds} s")


def replay(page, a):
    title = "Replay check"
    booking = create_booking(a.api, title, "03", [{"email": "alice@example.com", "name": "Alice"},
                                                  {"email": "erin@example.com", "name": "Erin"}])
    wait("both invitations of the replay check in the mailbox", 60,
         lambda: mailbox(a, title) == {"alice@example.com": 1, "erin@example.com": 1})
    wait("the event DONE", 30, lambda: sql(a, f"SELECT status FROM outbox_events WHERE aggregate_id = '{booking}'") == "DONE")
    # What an exhausted event leaves: Erin's claim released after each
    # refusal, the event DEAD after its attempts, its processed row gone
    # with the transaction that would have written it.
    event = sql(a, f"SELECT id FROM outbox_events WHERE aggregate_id = '{booking}'")
    sql(a, f"BEGIN; DELETE FROM booking_notification_sends WHERE outbox_event_id = '{event}' "
           f"AND recipient_email = 'erin@example.com'; DELETE FROM processed_events WHERE event_id = '{event}'; "
           f"UPDATE outbox_events SET status = 'DEAD', attempts = 8, completed_at = NULL, "
           f"last_error = 'Throttling: Maximum sending rate exceeded.' WHERE id = '{event}'; COMMIT")
    page.evaluate("location.hash = '#/'")
    button = page.locator(f"button[data-action*='{event}']")
    button.wait_for(timeout=15000)
    button.focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#confirm[open]", timeout=10000)
    shown = page.locator("#confirm-text").inner_text()
    if "goes back to PENDING" not in shown:
        raise AssertionError(f"the confirmation does not say what the replay does: {shown!r}")
    page.screenshot(path=f"{a.out}/replay-confirm.png")
    page.click("#confirm-ok")
    wait("the console to say the event was replayed", 15, lambda: "Replayed" in page.locator("#status").inner_text())
    by = sql(a, f"SELECT replayed_by FROM outbox_replays WHERE outbox_event_id = '{event}'")
    if by != "console: operator@localhost":
        raise AssertionError(f"the replay was recorded as {by!r}")
    wait("Erin's second invitation", 60, lambda: mailbox(a, title).get("erin@example.com") == 2)
    time.sleep(3)  # anything more would have come by now
    counts = mailbox(a, title)
    if counts != {"alice@example.com": 1, "erin@example.com": 2}:
        raise AssertionError(f"the replay reached the mailbox as {counts}, not once to Erin alone")


if __name__ == "__main__":
    main()
