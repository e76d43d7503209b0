#!/usr/bin/env python3
"""check_links.py -- every relative link and image of the repository's Markdown resolves: the
file (or folder) it names exists, and a #fragment names a heading (or an <a id>) of the Markdown
file it points into. Links to other sites (http:, https:, mailto:) are not fetched. A path of the
tree written as inline code (`docs/guide/reads.md`, `src/engine/recall.c`: a span that starts with
one of the tree's top-level folders and holds no space or wildcard) must exist too, from the root.

usage: check_links.py ROOT              check README.md, docs/**/*.md, bench/README.md, proto/*.md
                                        and the READMEs of deploy/, clients/*/ and tests/fuzz/
       check_links.py ROOT FILE.md...   check these files
       check_links.py --self-test       check that broken links of each kind are reported
Exit 0 when every link resolves, 1 (naming file, line and link) otherwise."""
import glob
import os
import re
import subprocess
import sys
import tempfile

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\".*\")?\s*$")
HTML = re.compile(r"<(?:img|a)\s[^>]*?(?:src|href)=\"([^\"]+)\"", re.I)
CODE = re.compile(r"`([^`\s]+)`")
TREE_PATH = re.compile(r"^(?:docs|src|include|tests|train|research|bench|proto|clients|deploy|web|models|"
                       r"examples)/[A-Za-z0-9_.+/-]+$")


def strip_code(line):
    """The line without its inline code spans (a link inside backticks is text, not a link)."""
    return re.sub(r"(`+)(.+?)\1", "", line)


def body_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = re.match(r"\s{0,3}(```+|~~~+)", line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def slug(text):
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces
    to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        seen, out = {}, set()
        for _, line in body_lines(text):
            m = re.match(r"\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                out.add(s if k == 0 else "%s-%d" % (s, k))
            for a in re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
                out.add(a)
        _anchors[path] = out
    return _anchors[path]


def ignored(root, path):
    """True when git ignores path in the checkout at root (a folder a build or an install makes,
    such as tests/browser/node_modules); False outside a checkout or without git."""
    for p in (path, path.rstrip("/") + "/"):  # a pattern "dir/" matches a missing path as a folder only
        try:
            r = subprocess.run(["git", "-C", root, "check-ignore", "-q", "--no-index", p],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            return False
        if r.returncode == 0:
            return True
    return False


def check_file(md, root):
    """Problems of one Markdown file: a list of 'file:line: link: why'."""
    problems = []
    with open(md, encoding="utf-8") as f:
        text = f.read()
    base = os.path.dirname(md)
    for n, line in body_lines(text):
        for t in CODE.findall(line):
            t = t.rstrip(".,:;")
            if TREE_PATH.match(t) and not os.path.exists(os.path.join(root, t)) and not ignored(root, t):
                problems.append("%s:%d: `%s`: no such file in the tree" % (os.path.relpath(md, root), n, t))
        plain = strip_code(line)
        targets = LINK.findall(plain) + HTML.findall(plain)
        m = REF.match(plain)
        if m:
            targets.append(m.group(1))
        for t in targets:
            if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t):
                continue  # another site, mailto:, ...
            path, _, frag = t.partition("#")
            where = "%s:%d: %s" % (os.path.relpath(md, root), n, t)
            target = md if path == "" else os.path.normpath(os.path.join(base, path))
            if path.startswith("/"):
                problems.append(where + ": an absolute path (use a relative one)")
                continue
            if not os.path.exists(target):
                problems.append(where + ": no such file")
                continue
            if not os.path.realpath(target).startswith(os.path.realpath(root) + os.sep):
                problems.append(where + ": outside the repository")
                continue
            if frag:
                if not target.endswith(".md") or os.path.isdir(target):
                    problems.append(where + ": a #fragment on a file that is not Markdown")
                elif frag not in anchors(target):
                    problems.append(where + ": no heading #%s in %s" % (frag, os.path.relpath(target, root)))
    return problems


def default_files(root):
    files = [os.path.join(root, "README.md"), os.path.join(root, "bench", "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    # the other documents a reader reaches from those
    for pattern in ("proto/*.md", "deploy/README.md", "clients/*/README.md", "tests/fuzz/README.md",
                    "bench/*/README.md"):
        files += sorted(glob.glob(os.path.join(root, pattern)))
    return files


def self_test():
    """Each kind of broken link must be reported, and the good ones not."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "docs", "guide"))
        with open(os.path.join(d, "docs", "guide", "a.md"), "w") as f:
            f.write("# Page A\n\n## Two words, and more (x)\n\n## Same\n\n## Same\n\n<a id=\"here\"></a>\n")
        open(os.path.join(d, "docs", "pic.png"), "wb").close()
        good = ("# Top\n\n[a](docs/guide/a.md) [b](docs/guide/a.md#two-words-and-more-x) "
                "![p](docs/pic.png) [s](docs/guide/a.md#same-1) [h](docs/guide/a.md#here) "
                "[top](#top) [web](https://example.org/x) [dir](docs/guide/)\n\n"
                "`[not a link](nowhere.md)` `docs/guide/a.md` `docs/pic.png`, `docs/*.md` `src/x y`\n\n"
                "```\n[nor this](nowhere.md) `docs/nor/this.md`\n```\n")
        bad = {"[f](docs/guide/b.md)": "no such file",
               "![i](docs/missing.png)": "no such file",
               "[a](docs/guide/a.md#nope)": "no heading",
               "[s](docs/guide/a.md#same-2)": "no heading",
               "[t](#bottom)": "no heading",
               "[o](../outside.md)": "",
               "[r]: docs/gone.md": "no such file",
               "<img src=\"docs/gone.png\">": "no such file",
               "`docs/guide/gone.md`": "no such file in the tree"}
        with open(os.path.join(d, "README.md"), "w") as f:
            f.write(good)
        got = check_file(os.path.join(d, "README.md"), d)
        if got:
            print("self-test: good links reported:", got)
            return 1
        with open(os.path.join(d, "..", "outside.md"), "w") as f:
            f.write("# x\n")
        try:
            for link, why in bad.items():
                with open(os.path.join(d, "README.md"), "w") as f:
                    f.write(good + "\n" + link + "\n")
                got = check_file(os.path.join(d, "README.md"), d)
                if len(got) != 1 or why not in got[0]:
                    print("self-test: %r gave %r, expected one problem with %r" % (link, got, why))
                    return 1
        finally:
            os.unlink(os.path.join(d, "..", "outside.md"))
    print("self-test: %d kinds of broken link reported, good links accepted" % len(bad))
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    root = os.path.abspath(argv[1])
    files = [os.path.abspath(f) for f in argv[2:]] or default_files(root)
    problems, links = [], 0
    for md in files:
        problems += check_file(md, root)
    for p in problems:
        print(p)
    if problems:
        print("%d broken link(s) in %d file(s)" % (len(problems), len(files)))
        return 1
    print("every relative link of %d Markdown files resolves" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
