#!/usr/bin/python3
"""make_omniglot_episode.py -- writes web/omniglot-episode.png, the ready episode the page offers
for a session on the Omniglot model: 64 drawings of the Omniglot evaluation set (the 20 alphabets
the model was not trained on), evenly spaced in sorted path order (image i of the episode is
drawing i * 13,180 // 64, so 64 different characters from every alphabet), each inverted and
area-averaged to 28 x 28 by the trainer's own reader (train/vbmtrain/data.py), as one 8 x 8
sprite of 28 x 28 greyscale tiles (as web/make_episode.py lays them out), and
web/omniglot-episode.json (each image's alphabet and character). Needs Pillow.

Omniglot (c) 2015 Brenden Lake, MIT licence: https://github.com/brendenlake/omniglot

    python3 web/make_omniglot_episode.py DIR   (DIR: the folder holding omniglot.tar.gz)
"""
import json
import os
import sys
import tarfile

from make_episode import COLS, N, SIDE, png_grey

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from vbmtrain.data import OMNIGLOT_SPLITS, load_omniglot  # noqa: E402

PREFIX = OMNIGLOT_SPLITS["test"] + "/"


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    archive = os.path.join(sys.argv[1], "omniglot.tar.gz")
    with tarfile.open(archive) as t:  # the names, in the order load_omniglot reads the drawings
        members = sorted(m.name for m in t if m.isfile() and m.name.startswith(PREFIX)
                         and m.name.lower().endswith(".png"))
    imgs = load_omniglot(archive, "test", size=SIDE)  # the trainer's own conversion
    assert imgs.shape[0] == len(members)
    picked = [i * len(members) // N for i in range(N)]
    tiles = [imgs[i, 0].tobytes() for i in picked]
    names = []
    for i in picked:
        alphabet, character = members[i][len(PREFIX):].split("/")[:2]
        names.append("%s, %s" % (alphabet.replace("_", " "), character))
    side = COLS * SIDE
    rows = [bytearray(side) for _ in range(side)]
    for i, px in enumerate(tiles):
        r0, c0 = (i // COLS) * SIDE, (i % COLS) * SIDE
        for y in range(SIDE):
            rows[r0 + y][c0:c0 + SIDE] = px[y * SIDE:(y + 1) * SIDE]
    with open(os.path.join(here, "omniglot-episode.png"), "wb") as f:
        f.write(png_grey(side, side, rows))
    with open(os.path.join(here, "omniglot-episode.json"), "w") as f:
        json.dump({"source": "Omniglot evaluation set (images_evaluation), drawings i * %d // 64"
                   % len(members), "license": "MIT, (c) 2015 Brenden Lake", "tile": SIDE,
                   "columns": COLS, "count": N, "labels": list(range(N)), "classes": names}, f)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
