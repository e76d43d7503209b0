#!/usr/bin/python3
"""temporal_demo.py -- the temporal memory's demo (issue 17): sequences of Fashion-MNIST images in
which two items persist, disappear and reappear (binary Markov chains) while their brightness and
horizontal position drift (AR(1)); the frames are encoded by the bundled model, written into a
temporal session of vbmemd (latent, on the centred codes), and held-out prefixes are continued.
The continuation is compared, frame by frame ahead, with a static mixture memory of the same
frames (a latent mixture session: its best guess of the next frames is its read of the prefix's
last frame, mode mean) and with repeating the last frame, in code space and in pixels (decoded by
the model). Prints a table and writes bench/figures/temporal-demo.png.

Everything is seeded (numpy Generator(seed), the sessions' seeds); the daemon is build/vbmemd.
Sizes are small so that a run takes about a minute on a shared 2-core machine.

usage: bench/temporal_demo.py [BUILD_DIR] [--seed S] [--train N] [--test N] [--no-picture]
       [--start windows|pca|random]"""
import argparse
import base64
import gzip
import json
import os
import struct
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
from daemon import Daemon  # noqa: E402

MODEL = "fashion-mnist-mixture"
DATA = os.path.join(ROOT, "..", "shared", "data", "fashion-mnist", "t10k-images-idx3-ubyte.gz")


def load_images(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic, n, h, w = struct.unpack(">IIII", raw[:16])
    assert magic == 0x803 and h == 28 and w == 28
    return np.frombuffer(raw, np.uint8, offset=16).reshape(n, 28, 28).astype(np.float64) / 255.0


def make_sequence(items, T, rng):
    """Frames (T x 28 x 28) of the items (each 28 x 28) superposed by pixel-wise max: item p is
    shown while its chain is on (stays with 0.9; an off item comes back with 0.15), at brightness
    0.65 + 0.35 tanh(a) and shifted by round(3 a') pixels, a and a' AR(1) with lambda 0.9."""
    P = len(items)
    on = rng.random(P) < 0.6
    a = rng.normal(size=P)
    s = rng.normal(size=P)
    out = np.zeros((T, 28, 28))
    for t in range(T):
        if t > 0:
            flip = rng.random(P)
            on = np.where(on, flip < 0.9, flip < 0.15)
            a = 0.9 * a + np.sqrt(1 - 0.81) * rng.normal(size=P)
            s = 0.9 * s + np.sqrt(1 - 0.81) * rng.normal(size=P)
        for p in range(P):
            if on[p]:
                img = np.roll(items[p], int(round(3 * s[p])), axis=1) * (0.65 + 0.35 * np.tanh(a[p]))
                out[t] = np.maximum(out[t], img)
    return out


def f32_images(x):
    n = x.shape[0]
    data = x.astype("<f4").tobytes()
    return {"dtype": "float32", "shape": [n, 1, 28, 28], "data": base64.b64encode(data).decode()}


def untensor(t):
    shape = t["shape"]
    dt = "<f4" if t["dtype"] == "float32" else np.uint8
    return np.frombuffer(base64.b64decode(t["data"]), dt).reshape(shape).astype(np.float64)


def call(c, method, path, body=None):
    r = c.request(method, path, body, validate=False)
    if r.status not in (200, 201):
        raise RuntimeError("%s %s: %d %s" % (method, path, r.status, r.body[:300]))
    return r.json()


def encode(c, frames):
    out = []
    for i in range(0, len(frames), 256):
        r = call(c, "POST", "/v1/models/%s/encode" % MODEL, {"observations": f32_images(frames[i:i + 256])})
        out.append(np.array(r["codes"]["mu"]))
    return np.concatenate(out)


def decode(c, codes):
    r = call(c, "POST", "/v1/models/%s/decode" % MODEL, {"codes": {"mu": codes.tolist()}, "format": "float32"})
    return untensor(r["observations"])[:, 0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=24, help="training sequences")
    ap.add_argument("--test", type=int, default=100, help="held-out sequences")
    ap.add_argument("--T", type=int, default=24, help="frames per training sequence")
    ap.add_argument("--prefix", type=int, default=12)
    ap.add_argument("--ahead", type=int, default=4)
    ap.add_argument("--no-picture", action="store_true")
    ap.add_argument("--start", choices=("windows", "pca", "random"), default="windows",
                    help="the start of the temporal write (the daemon's default: windows)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    imgs = load_images(DATA)
    items = [imgs[i] for i in (0, 2)]  # a boot and a trouser of the test set
    train = [make_sequence(items, args.T, rng) for _ in range(args.train)]
    test = [make_sequence(items, args.prefix + args.ahead, rng) for _ in range(args.test)]
    t0 = time.time()
    d = Daemon(os.path.join(args.build, "vbmemd"), "--threads", "2", "--max-body-bytes", "64000000")
    try:
        c = d.client()
        c.timeout = 600
        ztr = encode(c, np.concatenate(train))
        zte = encode(c, np.concatenate(test))
        center = ztr.mean(axis=0)
        C = ztr.shape[1]
        ztr_c = (ztr - center).reshape(args.train, args.T, C)
        zte_c = (zte - center).reshape(args.test, args.prefix + args.ahead, C)
        # the temporal memory: 2 identities of 2 attributes (brightness, position)
        tid = call(c, "POST", "/v1/sessions", {"code_size": C, "memory": {"kind": "temporal", "components": 2,
                                                                         "attributes": 2}})["id"]
        w = call(c, "POST", "/v1/sessions/%s/episodes" % tid,
                 {"sequences": [{"mu": s.tolist()} for s in ztr_c], "iterations": 150, "restarts": 3,
                  "seed": args.seed, "start": args.start})
        # the static mixture memory of the same frames (the daemon's default sizes, H = 10, K = 6)
        mid = call(c, "POST", "/v1/sessions", {"code_size": C, "memory": {"kind": "mixture"}})["id"]
        call(c, "POST", "/v1/sessions/%s/episodes" % mid,
             {"codes": {"mu": ztr_c.reshape(-1, C).tolist()}, "iterations": 50, "seed": args.seed})
        H = args.ahead
        err = {k: np.zeros(H) for k in ("temporal", "mixture", "last frame", "mean frame")}
        perr = {k: np.zeros(H) for k in err}
        shown = None
        for i in range(args.test):
            pre, fut = zte_c[i, :args.prefix], zte_c[i, args.prefix:]
            k = call(c, "POST", "/v1/sessions/%s/continue" % tid,
                     {"prefix": {"mu": pre.tolist()}, "steps": H, "samples": 1 if i == 0 else 0,
                      "seed": args.seed})
            pred_t = np.array(k["mean"])
            rd = call(c, "POST", "/v1/sessions/%s/reads" % mid,
                      {"query": {"mu": [pre[-1].tolist()]}, "mode": "mean", "iterations": 1})
            pred_m = np.repeat(np.array(rd["steps"][-1]["codes"]), H, axis=0)
            preds = {"temporal": pred_t, "mixture": pred_m, "last frame": np.repeat(pre[-1:], H, axis=0),
                     "mean frame": np.zeros((H, C))}
            truth_px = test[i][args.prefix:]
            for name, p in preds.items():
                err[name] += ((p - fut) ** 2).sum(axis=1) / args.test
                px = decode(c, p + center)
                perr[name] += ((px - truth_px) ** 2).mean(axis=(1, 2)) / args.test
                if i == 0:
                    shown = shown or {}
                    shown[name] = px
            if i == 0:
                shown["temporal sample"] = decode(c, np.array(k["samples"][0]) + center)
                shown["truth"] = truth_px
                shown["prefix"] = test[i][:args.prefix]
    finally:
        d.stop()
    wall = time.time() - t0
    print("temporal write: %d sequences, %d frames, free energy %.1f after %d iterations" %
          (w["sequences"], w["frames"], w["free_energy"], w["iterations"]))
    print("squared error of the predicted code (sum over %d dims), and pixel MSE of its decoding, "
          "over %d held-out prefixes of %d frames" % (C, args.test, args.prefix))
    print("| predictor | " + " | ".join("code +%d" % (h + 1) for h in range(H)) + " | " +
          " | ".join("pixel +%d" % (h + 1) for h in range(H)) + " |")
    print("|---|" + "---:|" * (2 * H))
    for name in err:
        print("| %s | " % name + " | ".join("%.2f" % v for v in err[name]) + " | " +
              " | ".join("%.4f" % v for v in perr[name]) + " |")
    print("seed %d, %.0f s wall" % (args.seed, wall))
    if not args.no_picture:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = ["prefix", "truth", "temporal", "temporal sample", "mixture", "last frame"]
        fig, ax = plt.subplots(len(rows), 4, figsize=(5.2, 7.6))
        for r, name in enumerate(rows):
            frames = shown[name][-4:] if name == "prefix" else shown[name][:H]
            for j in range(4):
                a = ax[r, j]
                a.set_xticks([])
                a.set_yticks([])
                if j < len(frames):
                    a.imshow(frames[j], cmap="gray", vmin=0, vmax=1)
                else:
                    a.axis("off")
            label = {"prefix": "prefix\n(last 4)", "temporal": "temporal\n(mean)",
                     "temporal sample": "temporal\n(a sample)", "mixture": "mixture\n(read)"}
            ax[r, 0].set_ylabel(label.get(name, name), fontsize=9)
        fig.suptitle("a held-out prefix, its next %d frames,\nand the predicted frames (decoded)" % H,
                     fontsize=10)
        fig.tight_layout()
        out = os.path.join(ROOT, "bench", "figures", "temporal-demo.png")
        fig.savefig(out, dpi=80)
        fig2, bx = plt.subplots(figsize=(5, 3.2))
        for name in err:
            bx.plot(range(1, H + 1), perr[name], marker="o", label=name)
        bx.set_xlabel("frames ahead")
        bx.set_ylabel("pixel MSE")
        bx.legend(fontsize=8)
        fig2.tight_layout()
        fig2.savefig(os.path.join(ROOT, "bench", "figures", "temporal-demo-error.png"), dpi=80)
        print("wrote bench/figures/temporal-demo.png, bench/figures/temporal-demo-error.png")


if __name__ == "__main__":
    main()
