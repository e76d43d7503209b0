#!/usr/bin/env python3
"""make_episode.py -- writes web/fashion-mnist-episode.png, the ready episode the page offers: the
first 64 images of the Fashion-MNIST test set (t10k) as one 8 x 8 sprite of 28 x 28 greyscale tiles
(224 x 224, 8-bit grey, row-major: image i is at column i % 8, row i // 8), and
web/fashion-mnist-episode.json (the 64 labels and class names). Standard library only.

Fashion-MNIST (c) Zalando SE, MIT licence: https://github.com/zalandoresearch/fashion-mnist

    python3 web/make_episode.py [/usr/share/datasets/fashion-mnist]
"""
import gzip
import json
import os
import struct
import sys
import zlib

N, SIDE, COLS = 64, 28, 8
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]


def png_grey(width, height, rows):
    def chunk(tag, data):
        body = tag + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    here = os.path.dirname(os.path.abspath(__file__))
    with gzip.open(os.path.join(src, "t10k-images-idx3-ubyte.gz")) as f:
        magic, n, h, w = struct.unpack(">IIII", f.read(16))
        assert magic == 2051 and h == SIDE and w == SIDE and n >= N
        pixels = f.read(N * SIDE * SIDE)
    with gzip.open(os.path.join(src, "t10k-labels-idx1-ubyte.gz")) as f:
        magic, n = struct.unpack(">II", f.read(8))
        assert magic == 2049
        labels = list(f.read(N))
    side = COLS * SIDE
    rows = [bytearray(side) for _ in range(side)]
    for i in range(N):
        r0, c0 = (i // COLS) * SIDE, (i % COLS) * SIDE
        for y in range(SIDE):
            off = (i * SIDE + y) * SIDE
            rows[r0 + y][c0:c0 + SIDE] = pixels[off:off + SIDE]
    with open(os.path.join(here, "fashion-mnist-episode.png"), "wb") as f:
        f.write(png_grey(side, side, rows))
    with open(os.path.join(here, "fashion-mnist-episode.json"), "w") as f:
        json.dump({"source": "Fashion-MNIST test set (t10k), images 0-63", "license": "MIT, (c) Zalando SE",
                   "tile": SIDE, "columns": COLS, "count": N, "labels": labels,
                   "classes": CLASSES}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
