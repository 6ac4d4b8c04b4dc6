#!/usr/bin/env python3
"""Check the links of README.md and docs/**/*.md: every relative Markdown link and image resolves to a file, and
every #anchor to a heading of its target (GitHub's slugs); every path named in prose as docs/NAME.md, or in
backticks as bench/results/..., exists (brace lists such as {md,json} expanded). Prints one line per problem and
exits 1 if there is any.   python3 docs/check_links.py [REPO_ROOT]"""
import itertools, os, re, sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))


def slugs(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = m.group(2).strip().lower()
        s = re.sub(r"[^\w\- ]", "", s)            # GitHub keeps letters, digits, _, - and spaces
        s = s.replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def expand(p):
    parts = re.split(r"(\{[^}]*\})", p)
    choices = [x[1:-1].split(",") if x.startswith("{") else [x] for x in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def md_files():
    yield os.path.join(ROOT, "README.md")
    for d, _, fs in os.walk(os.path.join(ROOT, "docs")):
        for f in sorted(fs):
            if f.endswith(".md"):
                yield os.path.join(d, f)


problems, checked = [], 0
for md in md_files():
    rel = os.path.relpath(md, ROOT)
    text = open(md, encoding="utf-8").read()
    for m in re.finditer(r"!?\[[^\]]*\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        checked += 1
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        if not os.path.exists(full):
            problems.append(f"{rel}: link {target}: no such file")
        elif anchor and full.endswith(".md") and anchor not in slugs(full):
            problems.append(f"{rel}: link {target}: no heading with that anchor")
    for m in re.finditer(r"(?<![\w/.])docs/([\w./-]+\.md)", text):
        checked += 1
        if not os.path.exists(os.path.join(ROOT, "docs", m.group(1))):
            problems.append(f"{rel}: names docs/{m.group(1)}: no such file")
    for m in re.finditer(r"`((?:bench/results/)[^`\s]+)`", text):
        for p in expand(m.group(1)):
            if "*" in p or "OUT" in p or "<" in p:   # globs and placeholders
                continue
            checked += 1
            if not os.path.exists(os.path.join(ROOT, p)):
                problems.append(f"{rel}: names {p}: no such file")

for p in problems:
    print(p)
print(f"{checked} links and paths checked, {len(problems)} problems", file=sys.stderr)
sys.exit(1 if problems else 0)
