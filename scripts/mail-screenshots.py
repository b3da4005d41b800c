#!/usr/bin/env python3
"""Each message kind, as its recipient's mail client shows it, in a real
browser: Debian's Chromium, headless, driven by Playwright's Python package
(`executable_path`, never a browser download). For every HTML part
`mail-samples` wrote (4 kinds x en, fr, ja) at 390 x 844 pixels (a phone) and
900 (a desktop), at 390 in dark mode, and at 390 with its <style> block
removed (as mail clients that drop one show it: only the inline styles
left), it fails when:

  - the page scrolls sideways (its content is wider than the window);
  - text is cut: an element's text runs past the window's edge, or past
    its own box where it is clipped;
  - a Fluent message is missing: a message id (`label-when`), a variable
    (`{ $when }`) or Fluent's `{???}` shows instead of the words;
  - an invitation's facts (what, when, where, with whom) do not all fit
    on the first screen;
  - text is unreadable: its contrast with what is behind it is under 4.5:1
    (WCAG AA), in light or dark mode;
  - the page asks for anything remote (an image, a font, a tracker).

Each view is kept as a PNG (OUT/<kind>-<lang>-<width>[-dark|-no-style].png) and a
table of the sizes is printed.

usage: mail-screenshots.py SAMPLES_DIR OUT_DIR [--chromium PATH]
"""
import argparse
import json
import os
import re
import sys

from playwright.sync_api import sync_playwright

# A phone (an iPhone 14's 390 x 844 CSS pixels) and a desktop window.
VIEWS = {390: 844, 900: 800}

# Runs in the page: what a reader would see go wrong.
PROBE = r"""
() => {
  const w = window.innerWidth;
  const problems = [];
  const root = document.scrollingElement || document.documentElement;
  if (root.scrollWidth > w) problems.push(`scrolls sideways: ${root.scrollWidth}px of content in ${w}px`);
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const rgb = (s) => (s.match(/[\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const c = [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  let texts = 0, lowest = 99;
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.textContent.trim()) continue;
    const el = node.parentElement;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.right > w + 0.5 || r.left < -0.5) {
        problems.push(`text cut at the window's edge: "${node.textContent.trim().slice(0, 40)}" (${Math.round(r.left)}..${Math.round(r.right)}px)`);
        break;
      }
    }
    for (let e = el; e && e !== document.body; e = e.parentElement) {
      const s = getComputedStyle(e);
      if ((s.overflowX !== 'visible' || s.textOverflow === 'ellipsis') && e.scrollWidth > e.clientWidth + 1) {
        problems.push(`text clipped in its box: "${node.textContent.trim().slice(0, 40)}"`);
        break;
      }
    }
    const fg = lum(rgb(getComputedStyle(el).color)), bg = lum(background(el));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    lowest = Math.min(lowest, ratio);
    if (ratio < 4.5) problems.push(`contrast ${ratio.toFixed(2)}:1 under 4.5:1: "${node.textContent.trim().slice(0, 40)}"`);
    texts++;
  }
  const lists = document.querySelectorAll('dl');
  const facts = lists.length ? lists[lists.length - 1].getBoundingClientRect().bottom : 0;
  return { problems, texts, lowest, text: document.body.innerText, height: root.scrollHeight, facts };
}
"""

# What Fluent leaves when a message or a variable is missing.
MISSING = re.compile(r"\{\s*\$|\{\?\?\?\}|\b(?:subject|body|label|note|heading|when|length|left|more)-[a-z-]+\b")


# The HTML part before issue 55: its text in a <pre> that never wraps, with
# a missing Fluent variable and a faint line added. The probe must see all
# three, or it could not fail.
BEFORE = (
    "<!doctype html><html><body><pre style=\"font-family:sans-serif\">"
    "Bob Organizer &lt;bob.organizer@example.com&gt; invited you to \"Design review\".\n\n"
    "Quand : lundi 7 janvier 2030 à 10:00 (heure normale d’Europe centrale) – lundi 7 janvier 2030 à 11:30 "
    "(heure normale d’Europe centrale) { $where }</pre><p style=\"color:#bbb\">faint</p></body></html>"
)


def probe(page):
    """What the page shows and what is wrong with it."""
    seen = page.evaluate(PROBE)
    missing = MISSING.search(seen["text"])
    if missing:
        seen["problems"].append(f"a Fluent message is missing: {missing.group(0)!r}")
    return seen


def self_test(browser):
    page = browser.new_page(viewport={"width": 390, "height": 800})
    page.set_content(BEFORE)
    problems = " | ".join(probe(page)["problems"])
    page.close()
    for expected in ("scrolls sideways", "text cut", "Fluent message is missing", "contrast"):
        if expected not in problems:
            sys.exit(f"mail-screenshots: the probe missed '{expected}' on the old <pre> page: {problems}")
    print("the probe sees what was wrong with the old <pre> page: sideways scroll, cut text, a missing message, "
          "faint text")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("samples")
    p.add_argument("out")
    p.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    args = p.parse_args()
    index = json.load(open(os.path.join(args.samples, "index.json"), encoding="utf-8"))
    os.makedirs(args.out, exist_ok=True)
    failures = []
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        self_test(browser)
        for entry in index:
            path = os.path.abspath(os.path.join(args.samples, entry["stem"] + ".html"))
            html = open(path, encoding="utf-8").read()
            for width, scheme in [(w, "light") for w in VIEWS] + [(390, "dark"), (390, "no-style")]:
                page = browser.new_page(viewport={"width": width, "height": VIEWS[width]},
                                        color_scheme="dark" if scheme == "dark" else "light")
                remote = []
                page.on("request", lambda r: remote.append(r.url) if not r.url.startswith(("file:", "data:", "about:")) else None)
                if scheme == "no-style":
                    page.set_content(re.sub(r"<style>.*?</style>", "", html, flags=re.S))
                else:
                    page.goto("file://" + path)
                seen = probe(page)
                name = f"{entry['stem']}-{width}" + ("" if scheme == "light" else f"-{scheme}")
                page.screenshot(path=os.path.join(args.out, name + ".png"), full_page=True)
                page.close()
                problems = list(seen["problems"])
                if remote:
                    problems.append(f"asked for remote resources: {remote}")
                if entry["title"].split(":")[0] not in seen["text"]:
                    problems.append("the title is not on the page")
                # The first screen of an invitation says what, when, where
                # and with whom: every fact above the fold.
                if entry["kind"] == "invitation" and seen["facts"] > VIEWS[width]:
                    problems.append(f"the facts end at {seen['facts']:.0f}px, below the first screen")
                if seen["texts"] < 8:
                    problems.append(f"only {seen['texts']} pieces of text: nothing rendered?")
                failures += [f"{name}: {x}" for x in problems]
                rows.append((name, entry["html_bytes"], seen["height"], seen["lowest"], len(problems)))
        browser.close()
    print(f"{'view':<28} {'HTML bytes':>10} {'height px':>9} {'lowest contrast':>15}  problems")
    for name, size, height, lowest, n in rows:
        print(f"{name:<28} {size:>10} {height:>9} {lowest:>14.1f}:1  {n}")
    print(f"{len(rows)} views, PNGs in {args.out}")
    if failures:
        print("\n".join(["FAILED:"] + failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
