#!/usr/bin/env python3
"""check_layers.py -- fails when the HTTP layer reaches the networks' headers: no file under src/http
includes a src/nets header, directly or through the headers it includes (the engine owns encoding,
fusion and decoding). Usage: check_layers.py ROOT, or check_layers.py --self-test."""
import os
import re
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve(root, here, name):
    """The file a quoted include names: beside the includer, else under src/ or include/."""
    for base in (os.path.dirname(here), os.path.join(root, 'src'), os.path.join(root, 'include')):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def nets_paths(root, start):
    """Every chain of includes from start that reaches a header under src/nets."""
    nets = os.path.join(root, 'src', 'nets') + os.sep
    found, seen, todo = [], {start}, [(start, [os.path.relpath(start, root)])]
    while todo:
        f, chain = todo.pop()
        with open(f, encoding='utf-8', errors='replace') as fh:
            text = fh.read()
        for name in INCLUDE.findall(text):
            p = resolve(root, f, name)
            if p is None:
                if name.startswith('nets/'):
                    found.append(chain + [name])
                continue
            if p.startswith(nets):
                found.append(chain + [os.path.relpath(p, root)])
                continue
            if p not in seen:
                seen.add(p)
                todo.append((p, chain + [os.path.relpath(p, root)]))
    return found


def check(root, quiet=False):
    root = os.path.abspath(root)
    http = os.path.join(root, 'src', 'http')
    bad = []
    for name in sorted(os.listdir(http)):
        if name.endswith(('.c', '.h')):
            bad += nets_paths(root, os.path.join(http, name))
    for chain in [] if quiet else bad:
        print('check_layers: src/http reaches the networks: ' + ' -> '.join(chain), file=sys.stderr)
    return 1 if bad else 0


def self_test():
    """A direct and an indirect include are caught; a clean tree passes."""
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.relpath(tmp)  # a relative root, as meson may pass
        for d in ('src/http', 'src/engine', 'src/nets'):
            os.makedirs(os.path.join(root, d))
        files = {'src/nets/nets.h': '', 'src/engine/e.h': '#include "vbmem/vbmem.h"\n',
                 'src/http/a.c': '#include "engine/e.h"\n#include <stdio.h>\n'}
        for p, text in files.items():
            with open(os.path.join(root, p), 'w') as fh:
                fh.write(text)
        if check(root, True) != 0:
            return 1
        with open(os.path.join(root, 'src/engine/e.h'), 'w') as fh:
            fh.write('#include "nets/nets.h"\n')
        if check(root, True) != 1:
            print('check_layers self-test: an indirect include was not caught', file=sys.stderr)
            return 1
        with open(os.path.join(root, 'src/engine/e.h'), 'w') as fh:
            fh.write('\n')
        with open(os.path.join(root, 'src/http/b.h'), 'w') as fh:
            fh.write('#include "nets/rpm.h"\n')
        if check(root, True) != 1:
            print('check_layers self-test: a direct include was not caught', file=sys.stderr)
            return 1
    print('check_layers self-test: direct and indirect includes caught')
    return 0


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(self_test() if sys.argv[1] == '--self-test' else check(sys.argv[1]))
