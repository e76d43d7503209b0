#!/usr/bin/python3
"""encoder_variances.py -- the range of the bundled encoder's code variances sigma2 on 256
Fashion-MNIST test images, their random 14 x 14 crops (zero-filled) and copies under pixel noise of
sd 0.5 (seed 1), through a running vbmemd's /encode; docs/guide/fused-views.md compares them
with the code prior's variance v0 = 6 (a fused precision is positive when every view's variance is
below v0).

usage: build/vbmemd --listen 127.0.0.1:18473 & /usr/bin/python3 bench/encoder_variances.py http://127.0.0.1:18473"""
import base64
import json
import os
import random
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "http"))
import pngs  # noqa: E402

if len(sys.argv) != 2:
    print(__doc__)
    sys.exit(2)
U = sys.argv[1]


def post(path, body):
    req = urllib.request.Request(U + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


raw = pngs.fashion_images(256, 1000)
rnd = random.Random(1)
sets = {"clean": raw,
        "noise0.5": [bytes(min(255, max(0, int(v + rnd.gauss(0, 128)))) for v in im) for im in raw],
        "crop": [], "black": [bytes(784)], "white": [bytes([255]) * 784]}
for im in raw:
    r0, c0 = rnd.randrange(15), rnd.randrange(15)
    sets["crop"].append(bytes(im[y * 28 + x] if r0 <= y < r0 + 14 and c0 <= x < c0 + 14 else 0 for y in range(28) for x in range(28)))
for k, ims in sets.items():
    u8 = {"dtype": "uint8", "shape": [len(ims), 1, 28, 28], "data": base64.b64encode(b"".join(ims)).decode()}
    e = post("/v1/models/fashion-mnist-mixture/encode", {"observations": u8})
    s2 = [v for row in e["codes"]["sigma2"] for v in row]
    print(k, "sigma2 min %.4f max %.4f mean %.4f" % (min(s2), max(s2), sum(s2) / len(s2)))
