#!/usr/bin/env python3
"""Checks the README and the pages under docs/ (standard library only).

- every relative markdown link points at a file that exists, and its
  `#anchor`, if any, at a heading of that file (GitHub's slugs: lower case,
  punctuation but hyphens and spaces dropped, spaces to hyphens, repeats
  numbered -1, -2, ...); http(s):// and mailto: links are not checked;
- README.md stays under 250 lines (it is the front door; the rest is in docs/);
- every "start"/"end" date in the JSON examples is at least 60 days ahead,
  so that the examples still work when someone copies them;
- every parameter of template.yaml is named in docs/deploy.md's
  "Parameters" section, and the raw `aws lambda invoke` there has the form
  scripts/operator.sh uses (the AWS CLI v2's `--cli-binary-format
  raw-in-base64-out`, and an output file);
- CHANGELOG.md names each release by a commit that exists and is that
  release (tags do not travel with main);
- docs/aws-behaviours.md: each row names AWS's page and a test, script or
  `make verify` step that exists (or says GAP).

Prints one line per problem and exits 1, or `docs: N links checked,
0 problems`. CHECK_DOCS_TODAY=YYYY-MM-DD replaces today's date (UTC).

usage: scripts/check-docs.py
"""
import datetime
import os
import re
import sys
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README_MAX_LINES = 250
MIN_DAYS_AHEAD = 60

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^\s{0,3}(#{1,6})(?:\s+(.*?))?\s*$")
SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the target may be <...> and carry a "title".
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
DATE = re.compile(r"\"(start|end)\"\s*:\s*\"(\d{4}-\d{2}-\d{2})")


def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    if os.path.isdir(docs):
        files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def rel(path):
    return os.path.relpath(path, ROOT)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def prose_lines(lines):
    """(line number, text) of each line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
            continue
        yield number, line


def heading_text(raw):
    """A heading's text as GitHub renders it, before the slug."""
    text = re.sub(r"\s+#+\s*$", "", raw).strip()  # closing hashes
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images keep their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    return text


def slug(text):
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    """Every anchor the headings of a markdown file produce, with GitHub's numbering of repeats."""
    if path in _anchors:
        return _anchors[path]
    seen = {}
    found = set()
    lines = read_lines(path)
    prose = list(prose_lines(lines))
    previous = None
    for number, line in prose:
        texts = []
        m = ATX.match(line)
        if m:
            texts.append(m.group(2) or "")
        elif SETEXT.match(line) and previous is not None and previous[0] == number - 1 and previous[1].strip() \
                and not ATX.match(previous[1]) and not previous[1].lstrip().startswith(("|", ">", "-", "*")):
            texts.append(previous[1])
        for text in texts:
            base = slug(heading_text(text))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        for a in HTML_ANCHOR.findall(line):
            found.add(a)
        previous = (number, line)
    _anchors[path] = found
    return found


def links(lines):
    """(line number, target) of every link outside code."""
    for number, line in prose_lines(lines):
        text = CODE_SPAN.sub("", line)
        for m in INLINE_LINK.finditer(text):
            yield number, m.group(1)
        m = REFERENCE_DEF.match(text)
        if m:
            yield number, m.group(1)


def check_link(source, number, target, problems):
    """Returns 1 if the link was checked (relative), 0 if skipped."""
    target = target.strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1].strip()
    lowered = target.lower()
    if lowered.startswith(("http://", "https://", "mailto:")):
        return 0
    if re.match(r"^[a-z][a-z0-9+.-]*:", lowered):
        problems.append(f"{rel(source)}:{number}: link {target!r}: a scheme this check does not know")
        return 1
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part)
    anchor = urllib.parse.unquote(anchor)
    if path_part:
        if path_part.startswith("/"):
            resolved = os.path.normpath(os.path.join(ROOT, path_part.lstrip("/")))
        else:
            resolved = os.path.normpath(os.path.join(os.path.dirname(source), path_part))
        if not os.path.exists(resolved):
            problems.append(f"{rel(source)}:{number}: link {target!r}: no such file {rel(resolved)}")
            return 1
    else:
        resolved = source
    if anchor:
        if os.path.isfile(resolved) and resolved.endswith(".md"):
            if anchor not in anchors(resolved):
                problems.append(f"{rel(source)}:{number}: link {target!r}: no heading in {rel(resolved)} makes the anchor #{anchor}")
        elif os.path.isdir(resolved):
            problems.append(f"{rel(source)}:{number}: link {target!r}: an anchor into a directory")
    return 1


def today():
    forced = os.environ.get("CHECK_DOCS_TODAY")
    if forced:
        return datetime.date.fromisoformat(forced)
    return datetime.datetime.now(datetime.timezone.utc).date()


def deploy_doc_problems():
    """docs/deploy.md against template.yaml and scripts/operator.sh."""
    problems = []
    template = open(os.path.join(ROOT, "template.yaml"), encoding="utf-8").read()
    block = re.search(r"^Parameters:\n(.*?)^\S", template, re.M | re.S).group(1)
    params = re.findall(r"^  ([A-Za-z0-9]+):$", block, re.M)
    deploy = open(os.path.join(ROOT, "docs", "deploy.md"), encoding="utf-8").read()
    section = deploy[deploy.index("\n## Parameters"):]
    section = section[:section.find("\n## ", 1)]
    for name in params:
        if f"`{name}`" not in section:
            problems.append(f"docs/deploy.md: the template's parameter {name} is not in the Parameters section")
    invokes = re.findall(r"aws lambda invoke[^`]*?(?=```|\n\n)", deploy, re.S)
    if not invokes:
        problems.append("docs/deploy.md: no raw `aws lambda invoke` example for the operator function")
    for cmd in invokes:
        flat = " ".join(cmd.replace("\\\n", " ").split())
        if "--cli-binary-format raw-in-base64-out" not in flat or not re.search(r"--payload '[^']*' \S+", flat):
            problems.append(f"docs/deploy.md: `{flat[:60]}...` lacks --cli-binary-format raw-in-base64-out "
                            "or its output file (scripts/operator.sh's form)")
    operator = open(os.path.join(ROOT, "scripts", "operator.sh"), encoding="utf-8").read()
    if "--cli-binary-format raw-in-base64-out" not in operator:
        problems.append("scripts/operator.sh: no longer the form docs/deploy.md shows")
    return problems


def release_problems():
    """CHANGELOG.md names each release by the commit of main it is (tags do
    not travel with main): `## vX.Y.Z (abc1234)`, each commit existing here
    and holding that release at the top of its own CHANGELOG.md (the first,
    v0.9.0, predates the file). The newest may be `(unreleased)`: the change
    that lands it cannot name its own commit, the next one names it."""
    import subprocess
    git = lambda *args: subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    if git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        print("docs: a shallow clone (or no git): the releases' commits are not checked")
        return []
    problems = []
    heads = re.findall(r"^## (v\d+\.\d+\.\d+)(?: \((\w+)\))?\s*$", open(os.path.join(ROOT, "CHANGELOG.md")).read(), re.M)
    if not heads:
        return ["CHANGELOG.md: no `## vX.Y.Z (commit)` release"]
    for i, (version, commit) in enumerate(heads):
        if not commit or (commit == "unreleased" and i > 0):
            problems.append(f"CHANGELOG.md: {version} names no commit (`## {version} (abc1234)`)")
            continue
        if commit == "unreleased":
            continue
        if git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            problems.append(f"CHANGELOG.md: {version}'s commit {commit} is not in this repository")
            continue
        own = git("show", f"{commit}:CHANGELOG.md")
        top = re.search(r"^## (v\d+\.\d+\.\d+)", own.stdout, re.M) if own.returncode == 0 else None
        if own.returncode == 0 and (not top or top.group(1) != version):
            problems.append(f"CHANGELOG.md: {version}'s commit {commit} is release {top.group(1) if top else '?'}")
    return problems


LEDGER_SECTIONS = ["CloudFormation", "SAM", "SES v2", "Cognito", "API Gateway HTTP API", "EventBridge Scheduler",
                   "Lambda", "RDS Proxy", "Aurora Serverless v2", "Secrets Manager"]


def ledger_problems():
    """docs/aws-behaviours.md: every row names AWS's page and what shows the
    stand-in as strict: a suite test that exists, a script that exists, a
    `make verify` step scripts/verify.py runs, or an admitted GAP."""
    problems = []
    text = open(os.path.join(ROOT, "docs", "aws-behaviours.md"), encoding="utf-8").read()
    verify = open(os.path.join(ROOT, "scripts", "verify.py"), encoding="utf-8").read()
    steps = set(re.findall(r'step = "([a-z-]+)"', verify)) | set(re.findall(r'\("([a-z-]+)", ', verify))
    steps |= {"simulator-delivery", "simulator-bounce"} & set(re.findall(r'"(simulator-[a-z]+)"', verify))
    sections = re.findall(r"^## (.+)$", text, re.M)
    for name in LEDGER_SECTIONS:
        if name not in sections:
            problems.append(f"docs/aws-behaviours.md: no section ## {name}")
    rows = gaps = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.startswith("| ") or line.startswith("| behaviour |"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 4:
            problems.append(f"docs/aws-behaviours.md:{number}: {len(cells)} columns, not 4")
            continue
        rows += 1
        if "](https://docs.aws.amazon.com/" not in cells[1]:
            problems.append(f"docs/aws-behaviours.md:{number}: no AWS page (docs.aws.amazon.com) in the second column")
        shown = cells[3]
        if shown.startswith("GAP"):
            gaps += 1
            continue
        found = False
        for module, function in re.findall(r"`([a-z_]+)::([a-z0-9_]+)`", shown):
            found = True
            path = os.path.join(ROOT, "tests", "tests", "suite", f"{module}.rs")
            if not os.path.exists(path) or f"fn {function}(" not in open(path, encoding="utf-8").read():
                problems.append(f"docs/aws-behaviours.md:{number}: no test {module}::{function} in tests/tests/suite")
        for step in re.findall(r"make verify: `?([a-z-]+)", shown):
            found = True
            if step not in steps:
                problems.append(f"docs/aws-behaviours.md:{number}: make verify has no step {step}")
        for script in re.findall(r"(scripts/[A-Za-z0-9_./-]+\.(?:sh|py))", shown):
            found = True
            if not os.path.exists(os.path.join(ROOT, script)):
                problems.append(f"docs/aws-behaviours.md:{number}: {script} does not exist")
        if not found:
            problems.append(f"docs/aws-behaviours.md:{number}: names no test, script, make verify step or GAP")
    print(f"docs: the AWS ledger has {rows} behaviours, {gaps} of them admitted gaps")
    return problems


def main():
    problems = []
    checked = 0
    earliest = today() + datetime.timedelta(days=MIN_DAYS_AHEAD)
    for path in doc_files():
        lines = read_lines(path)
        for number, target in links(lines):
            checked += check_link(path, number, target, problems)
        for number, line in enumerate(lines, 1):
            for field, value in DATE.findall(line):
                try:
                    day = datetime.date.fromisoformat(value)
                except ValueError:
                    problems.append(f"{rel(path)}:{number}: \"{field}\": {value} is not a date")
                    continue
                if day < earliest:
                    problems.append(
                        f"{rel(path)}:{number}: \"{field}\": {value} is less than {MIN_DAYS_AHEAD} days ahead "
                        f"(use {earliest.isoformat()} or later)")
    problems.extend(deploy_doc_problems())
    problems.extend(release_problems())
    problems.extend(ledger_problems())
    readme = os.path.join(ROOT, "README.md")
    count = len(read_lines(readme)) - 1 if open(readme, encoding="utf-8").read().endswith("\n") else len(read_lines(readme))
    if count >= README_MAX_LINES:
        problems.append(f"README.md: {count} lines; keep it under {README_MAX_LINES} (move detail into docs/)")
    for problem in problems:
        print(problem)
    if problems:
        print(f"docs: {checked} links checked, {len(problems)} problems", file=sys.stderr)
        return 1
    print(f"docs: {checked} links checked, 0 problems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
