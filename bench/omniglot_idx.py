#!/usr/bin/python3
"""omniglot_idx.py -- writes Omniglot's test images (the 20 evaluation alphabets, 13,180
images, inverted and area-averaged to 28 x 28 exactly as the trainer reads them) as a gzipped
IDX file, the form bench-gain's --data reads.

usage: omniglot_idx.py --data-root DIR [--out FILE]
DIR: the folder holding omniglot.tar.gz (or images_evaluation/). Exits 1 with a message when
nothing is there."""
import argparse
import gzip
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from vbmtrain.data import load_omniglot  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", required=True)
    p.add_argument("--out", default="build/omniglot-test-images.idx.gz")
    a = p.parse_args()
    try:
        imgs = load_omniglot(a.data_root, "test")
    except (FileNotFoundError, OSError) as e:
        print("omniglot_idx: %s" % e, file=sys.stderr)
        return 1
    n = imgs.shape[0]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with gzip.open(tmp, "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28))
        f.write(imgs.reshape(n, 28 * 28).tobytes())
    os.replace(tmp, a.out)
    print("omniglot_idx: %d images -> %s" % (n, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
