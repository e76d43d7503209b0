#!/usr/bin/env python3
"""readme_examples.py -- runs the examples of README.md's "Four ways in" as a newcomer would:
each ```sh block of that section, with bash -e, from the repository root, against a real vbmemd
(the bundled model, sessions in memory) on a free loopback port. The examples name the default
address, http://127.0.0.1:8080; the test points them at its daemon by rewriting that address
and setting $VBMEM_URL (what the Python client and the command line read). Each example must
exit 0 and print what it is for: the curl one a write's ELBO, samples and a read's steps; the
Python one its sample count; the command line one the PNGs it wrote.

usage: readme_examples.py PATH/TO/vbmemd"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "http"))
from daemon import ROOT, Daemon  # noqa: E402


def examples(readme):
    """The ```sh blocks of the section "Four ways in", in order."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^## Four ways in\n(.*?)^## ", text, re.S | re.M)
    if m is None:
        raise SystemExit("README.md has no section \"Four ways in\"")
    return re.findall(r"^```sh\n(.*?)^```", m.group(1), re.S | re.M)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__.split("\n\n", 1)[1] + "\n")
        return 2
    blocks = examples(os.path.join(ROOT, "README.md"))
    # what each example must print (curl, Python, command line)
    wants = [
        [r'"elbo":\{"per_frame":', r'"codes":', r'"steps":\['],
        [r"^4 samples; the answer, [1-9][0-9]* bytes of PNG$"],
        [r"^sample_000\.png$", r"^step_03\.png$"],
    ]
    if len(blocks) != len(wants):
        print("README.md's \"Four ways in\" has %d shell examples, this test knows %d"
              % (len(blocks), len(wants)))
        return 1
    d = Daemon(os.path.abspath(argv[1]), "--threads", "1",
               env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    failed = 0
    try:
        url = "http://127.0.0.1:%d" % d.port
        env = dict(os.environ, VBMEM_URL=url, OPENBLAS_NUM_THREADS="1")
        for i, (block, want) in enumerate(zip(blocks, wants)):
            script = block.replace("http://127.0.0.1:8080", url)
            r = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=240)
            missing = [w for w in want if not re.search(w, r.stdout, re.M)]
            ok = r.returncode == 0 and not missing
            print("%s example %d (%s)" % ("ok  " if ok else "FAIL", i + 1, block.split("\n")[0][:60]))
            if not ok:
                failed += 1
                print("  exit %d; missing %s\n  stdout: %s\n  stderr: %s"
                      % (r.returncode, missing, r.stdout[-1500:], r.stderr[-1500:]))
    finally:
        d.stop()
    print("%d of %d README examples ran as written" % (len(blocks) - failed, len(blocks)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
