#!/usr/bin/python3
"""convert_fixtures.py -- owns the image files on which the command line (tests/clients) and the web
page (tests/browser) must agree: which PNGs go untouched, which are converted and to what pixels,
which are refused. The expected pixels come from the pictures' own definition (a pattern, its
luminance (299 R + 587 G + 114 B) / 1000, times alpha / 255), not from either client's code.

usage: convert_fixtures.py OUTDIR   (writes the files and expected.json; prints OUTDIR)"""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "http"))
from pngs import png  # noqa: E402

W = H = 28  # the bundled model's observations: 1 x 28 x 28


def pattern(x, y):
    return ((x * 9 + y * 5) % 256, (x * 3 + y * 11 + 60) % 256, (x * 13 + y * 7 + 120) % 256)


def alpha(x, y):
    return (x * 37 + y * 17) % 256


def rounded(v):
    return min(255, max(0, int(math.floor(v + 0.5))))


def fixtures():
    """{name: (file bytes, expectation)}; expectation: {"converted": bool, "grey": [784 ints]
    (converted only)} or {"refused": text the refusal holds}."""
    out = {}
    # RGB at twice the size, each pixel of the pattern a 2 x 2 block: a bilinear stretch at the
    # sample centres averages two equal pixels in each direction, so the answer is the pattern's
    # luminance exactly
    rows = [bytes(v for x in range(2 * W) for v in pattern(x // 2, y // 2)) for y in range(2 * H)]
    out["rgb56.png"] = (png(2 * W, 2 * H, rows, color_type=2),
                        {"converted": True, "grey": [rounded((299 * r + 587 * g + 114 * b) / 1000)
                                                     for y in range(H) for x in range(W)
                                                     for r, g, b in [pattern(x, y)]]})
    # RGBA at the model's size: each colour times alpha / 255, then the luminance
    rows = [bytes(v for x in range(W) for v in pattern(x, y) + (alpha(x, y),)) for y in range(H)]
    grey = []
    for y in range(H):
        for x in range(W):
            r, g, b = pattern(x, y)
            grey.append(rounded((299 * r + 587 * g + 114 * b) * alpha(x, y) / 255000))
    out["rgba28.png"] = (png(W, H, rows, color_type=6), {"converted": True, "grey": grey})
    # grey at the model's size (8 and 16 bits): as it is
    out["grey28.png"] = (png(W, H, [bytes((x * 7 + y * 3) % 256 for x in range(W)) for y in range(H)]),
                         {"converted": False})
    out["grey16.png"] = (png(W, H, [b"".join(((x * 2311 + y * 977) % 65536).to_bytes(2, "big")
                                             for x in range(W)) for y in range(H)], bit_depth=16),
                         {"converted": False})
    # grey of another size: stretched bilinearly, sample centres aligned: answer pixel x samples
    # the source at x / 2 - 1/4 (clamped to [0, 13]), between two source pixels
    def src(x, y):
        return (x * 17 + y * 5) % 256

    def at(t):  # (lower pixel, upper pixel, weight of the upper) along one axis
        t = min(max(t / 2 - 0.25, 0.0), 13.0)
        lo = int(t)
        return lo, min(lo + 1, 13), t - lo

    grey = []
    for y in range(H):
        y0, y1, fy = at(y)
        for x in range(W):
            x0, x1, fx = at(x)
            top = src(x0, y0) * (1 - fx) + src(x1, y0) * fx
            bottom = src(x0, y1) * (1 - fx) + src(x1, y1) * fx
            grey.append(rounded(top * (1 - fy) + bottom * fy))
    out["grey14.png"] = (png(14, 14, [bytes(src(x, y) for x in range(14)) for y in range(14)]),
                         {"converted": True, "grey": grey})
    # 16-bit RGB: would need converting, which only 8-bit non-interlaced PNGs are
    out["rgb16.png"] = (png(W, H, [b"".join(c.to_bytes(2, "big") for x in range(W) for c in pattern(x, y))
                                   for y in range(H)], color_type=2, bit_depth=16),
                        {"refused": "convert it to 8 bits first"})
    return out


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    exp = {}
    for name, (data, e) in fixtures().items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        exp[name] = e
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(exp, f)
    print(d)


if __name__ == "__main__":
    main()
