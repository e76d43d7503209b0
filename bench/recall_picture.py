#!/usr/bin/python3
"""recall_picture.py -- draws what `bench-recall --dump FILE` or `bench-gain --dump FILE`
wrote: for the first frames of an episode, a row each with the original, the damaged cue,
then every read step's answer; with --model-alone (a bench-gain dump) the same read's answer
on an empty memory follows in a last column.

    build/bench/bench-recall --episodes 1 --cue top --no-modes --dump /tmp/top.f32
    /usr/bin/python3 bench/recall_picture.py /tmp/top.f32 /tmp/recall-top.png --steps 5
    build/bench/bench-gain --episodes 1 --cue top --no-specificity --dump /tmp/gain-top.f32
    /usr/bin/python3 bench/recall_picture.py /tmp/gain-top.f32 docs/guide/gain-top.png --model-alone

Needs only NumPy (the PNG is written by clients/python's standard-library encoder)."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from vbmem.png import encode_png  # noqa: E402  (the client's standard-library PNG encoder)


def write_png(path, img):
    """8-bit greyscale PNG of img (H x W, values 0..255), with the Python client's encoder."""
    h, w = img.shape
    with open(path, "wb") as f:
        f.write(encode_png(img.astype(np.uint8).tobytes(), w, h, 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump")
    ap.add_argument("png")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--scale", type=int, default=3)
    ap.add_argument("--model-alone", action="store_true",
                    help="the dump also holds the empty memory's steps: draw its last answer")
    a = ap.parse_args()
    data = np.fromfile(a.dump, dtype="<f4")
    per = 64 * 784
    n = 2 + a.steps * (2 if a.model_alone else 1)
    if data.size != per * n:
        sys.exit("recall_picture: %s holds %d values, expected %d for %d steps"
                 % (a.dump, data.size, per * n, a.steps))
    blocks = data.reshape(n, 64, 28, 28)
    if a.model_alone:  # original, cue, the memory's steps, the model alone's last step
        blocks = blocks[list(range(2 + a.steps)) + [n - 1]]
    gap = 2
    cols = blocks.shape[0]
    H = a.frames * (28 + gap) - gap
    W = cols * (28 + gap) - gap + 4 + (4 if a.model_alone else 0)  # wider gaps: after the cue, before the model alone
    canvas = np.full((H, W), 255.0)
    for r in range(a.frames):
        for c in range(cols):
            x0 = c * (28 + gap) + (4 if c >= 2 else 0) + (4 if a.model_alone and c == cols - 1 else 0)
            canvas[r * (28 + gap): r * (28 + gap) + 28, x0: x0 + 28] = 255.0 * np.clip(blocks[c, r], 0, 1)
    canvas = np.kron(canvas, np.ones((a.scale, a.scale)))
    write_png(a.png, np.round(canvas))


if __name__ == "__main__":
    main()
