#!/usr/bin/env python3
"""seeds.py -- owns the generation of the seed corpora of tests/fuzz/corpus/<harness>/ from the inputs of
the existing tests (tests/http, tests/solve, tests/data, tests/http/pngs.py). Usage:
seeds.py VBMEM_SOLVE OUTDIR (writes OUTDIR/<harness>/<name>); run once, the output is committed."""
import base64
import json
import os
import random
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "http"))
import pngs  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SOLVE, OUT = sys.argv[1], sys.argv[2]


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def js(v):
    return json.dumps(v, separators=(",", ":"))


def tensor(rows, dtype="float32"):
    flat = [x for r in rows for x in r]
    if dtype == "float32":
        data = struct.pack("<%df" % len(flat), *flat)
    else:
        data = bytes(flat)
    return {"dtype": dtype, "shape": [len(rows), len(rows[0])], "data": base64.b64encode(data).decode()}


rng = random.Random(7)
codes = [[round(rng.gauss(0, 1), 3) for _ in range(4)] for _ in range(6)]

# ---- fuzz-json: bodies of the wire readers (codes as nested arrays and tensors, numbers)
put("json", "codes_nested", js({"mu": codes, "sigma2": 0.05}))
put("json", "codes_tensor", js({"mu": tensor(codes), "sigma2": tensor([[0.1] * 4] * 6)}))
put("json", "codes_s2_rows", js({"mu": codes[:2], "sigma2": [[0.5, 0, 1, 2], [1e-3, 4, 5, 6]]}))
put("json", "numbers", '[0, -0, 1e22, 1e23, 9007199254740993, 1.7976931348623157e308, 5e-324, -1.5E-7, 123456789012345678]')
put("json", "strings", '{"a":"x\\u00e9\\ud83d\\ude00\\n","b":[true,false,null],"c":{"d":{}}}')
put("json", "base64", "AAECAwQFBgc=")
put("json", "dup", '{"a":1,"a":2}')

# ---- fuzz-png: PNGs of every colour type and depth (tests/http/pngs.py writer)
px = [[(x * 37 + y * 11) % 256 for x in range(4)] for y in range(4)]


def rows8(rows, rep=1):
    return [bytes(v for v in r for _ in range(rep)) for r in rows]


put("png", "grey8", pngs.png(4, 4, rows8(px), 0, 8))
put("png", "grey16", pngs.png(4, 4, [struct.pack(">4H", *[v * 257 for v in r]) for r in px], 0, 16))
put("png", "grey1", pngs.png(4, 4, [bytes([sum((v & 1) << (7 - i) for i, v in enumerate(r))]) for r in px], 0, 1))
put("png", "rgb8", pngs.png(4, 4, rows8(px, 3), 2, 8))
put("png", "rgba8", pngs.png(4, 4, rows8(px, 4), 6, 8))
put("png", "ga8", pngs.png(4, 4, rows8(px, 2), 4, 8))
put("png", "palette", pngs.png(4, 4, rows8([[v % 4 for v in r] for r in px]), 3, 8,
                               palette=[(0, 0, 0), (80, 80, 80), (160, 160, 160), (255, 255, 255)],
                               trns=bytes([0, 255])))

# ---- fuzz-images: shape byte (bits 0-1 shape, 2-3 decoder, 4-6 frames - 1) + JSON body
g44 = pngs.b64(pngs.png(4, 4, rows8(px), 0, 8))
rgb44 = pngs.b64(pngs.png(4, 4, rows8(px, 3), 2, 8))
put("images", "png_grey", bytes([0x00]) + js({"observations": [g44, "data:image/png;base64," + g44]}).encode())
put("images", "png_rgb", bytes([0x01]) + js({"observations": [rgb44]}).encode())
u8 = {"dtype": "uint8", "shape": [1, 1, 4, 4], "data": base64.b64encode(bytes(range(16))).decode()}
f32 = {"dtype": "float32", "shape": [1, 1, 4, 4], "data": base64.b64encode(struct.pack("<16f", *[i / 16 for i in range(16)])).decode()}
put("images", "uint8", bytes([0x00]) + js({"observations": u8}).encode())
put("images", "float32", bytes([0x00]) + js({"observations": f32}).encode())
put("images", "nested", bytes([0x03]) + js({"observations": [[[[0.5, 0.25, 1], [0, 0.1, 0.2]]] * 3]}).encode())
put("images", "mask_png", bytes([0x04]) + js({"mask": [g44]}).encode())
put("images", "mask_tensor", bytes([0x14]) + js({"mask": {"dtype": "uint8", "shape": [2, 1, 4, 4], "data": base64.b64encode(bytes([1] * 32)).decode()}}).encode())
put("images", "mask_nested", bytes([0x04]) + js({"mask": [[[1, 0, 1, 1]] * 4]}).encode())
put("images", "both", bytes([0x0c]) + js({"observations": u8, "mask": [[[[1] * 4] * 4]]}).encode())
put("images", "code_mask", bytes([0x18]) + js({"mask": [[1, 0, 1, 1], [0, 0, 0, 1]]}).encode())
put("images", "code_mask_tensor", bytes([0x08]) + js({"mask": tensor([[1, 0, 0, 1]], "uint8")}).encode())

# ---- fuzz-model: the golden model files of tests/data (the two smallest)
os.makedirs(os.path.join(OUT, "model"), exist_ok=True)
for name in ("golden_nets_io.safetensors", "golden_nets_bernoulli_io.safetensors"):
    shutil.copy(os.path.join(ROOT, "tests", "data", name), os.path.join(OUT, "model", name))


# ---- fuzz-solve: the ops of tests/solve/run.sh on small jobs; fuzz-memory: the memories they print
def solve(job):
    p = subprocess.run([SOLVE, "-"], input=js(job).encode(), capture_output=True)
    return json.loads(p.stdout)


mu = [[round(rng.gauss(3.0 * (t % 3), 1.0), 3) for _ in range(4)] for t in range(12)]
kinds = {"mixture": {"rows": 2, "clusters": 3}, "gaussian": {"rows": 2}, "categorical": {"rows": 2},
         "tree": {"rows": 2, "clusters": 3, "groups": 2}, "dkm": {"rows": 2}}
mems = {}
for kind, extra in kinds.items():
    model = {"kind": kind, "retain_max": 20}
    model.update(extra)
    job = {"op": "write", "model": model, "codes": {"mu": mu, "sigma2": 0.05}, "iterations": 5, "seed": 1,
           "addresses": True}
    r = solve(job)
    assert "posterior" in r, (kind, r)
    put("solve", "write_" + kind, js(job))
    mems[kind] = r["posterior"]
    put("memory", "json_" + kind, js(r["posterior"]))
mem = mems["mixture"]
put("solve", "elbo", js({"op": "elbo", "memory": mem, "codes": {"mu": mu[:3]}, "addresses": True}))
put("solve", "sample", js({"op": "sample", "memory": mem, "count": 3, "seed": 2}))
put("solve", "read", js({"op": "read", "memory": mem, "codes": {"mu": mu[:2]}, "seed": 4, "mode": "mean"}))
put("solve", "append", js({"op": "append", "memory": mem, "codes": {"mu": tensor(mu[:2])}, "iterations": 3}))
put("solve", "refit", js({"op": "refit", "memory": mem, "iterations": 3, "seed": 7}))
put("solve", "resize", js({"op": "resize", "memory": mem, "clusters": 2, "rows": 1, "iterations": 3}))
put("solve", "export", js({"op": "export", "memory": mems["tree"]}))
put("solve", "prior", js({"op": "write", "model": {"kind": "gaussian", "rows": 2, "code_size": 4},
                          "prior": {"R0": [[0, 0, 0, 0], [1, 1, 1, 1]], "U0": [[1, 0], [0, 1]]},
                          "codes": {"mu": mu[:4]}, "iterations": 2, "init": "kmeans++", "trace": True}))

# ---- fuzz-request: raw HTTP requests; "@L@" / "@M@" stand for a fresh latent / model session
def req(method, path, body=None, headers=()):
    h = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1"]
    b = b""
    if body is not None:
        b = body if isinstance(body, bytes) else js(body).encode()
        h += ["Content-Type: application/json", "Content-Length: %d" % len(b)]
    h += list(headers) + ["Connection: close"]
    return ("\r\n".join(h) + "\r\n\r\n").encode() + b


img = pngs.b64(pngs.grey_png(bytes((i * 7) % 256 for i in range(784))))
S = "/v1/sessions/"
reqs = {
    "health": req("GET", "/healthz"),
    "metrics": req("GET", "/metrics"),
    "models": req("GET", "/v1/models"),
    "model": req("GET", "/v1/models/fashion-mnist-mixture"),
    "encode": req("POST", "/v1/models/fashion-mnist-mixture/encode", {"observations": [img], "encoding": "base64"}),
    "decode": req("POST", "/v1/models/fashion-mnist-mixture/decode", {"codes": {"mu": [[0.1] * 64]}, "format": "uint8"}),
    "create": req("POST", "/v1/sessions", {"code_size": 3, "memory": {"kind": "mixture", "rows": 2, "clusters": 2}}),
    "create_model": req("POST", "/v1/sessions", {"model": "fashion-mnist-mixture", "ttl_seconds": 60}),
    "create_bad": req("POST", "/v1/sessions", b'{"code_size": 4, "memory": {"kind": "tree", "groups": -1}}'),
    "list": req("GET", "/v1/sessions?limit=2&after=0"),
    "get": req("GET", S + "@L@"),
    "episodes": req("POST", S + "@L@/episodes", {"mode": "replace", "codes": {"mu": [[0.1, 1, 2, 3], [1, 2, 3, 4], [3, 2, 1, 0], [4, 4, 4, 4]], "sigma2": 0.05}, "seed": 1, "addresses": True}),
    "episodes_if_match": req("POST", S + "@L@/episodes", {"mode": "append", "codes": {"mu": tensor([[1, 2, 3, 4]])}}, ["If-Match: \"1\""]),
    "samples": req("POST", S + "@L@/samples", {"count": 3, "seed": 3, "encoding": "base64"}),
    "reads": req("POST", S + "@L@/reads", {"query": {"mu": [[1, 2, 3, 4]]}, "iterations": 3, "seed": 5, "mask": [[1, 0, 1, 0]]}),
    "resize": req("POST", S + "@L@/resize", {"clusters": 2}),
    "memory": req("GET", S + "@L@/memory"),
    "memory_put": req("PUT", S + "@L@/memory", mems["mixture"]),
    "delete": req("DELETE", S + "@L@"),
    "model_episode": req("POST", S + "@M@/episodes", {"observations": [img], "seed": 1, "init": "prior", "iterations": 3}),
    "model_samples": req("POST", S + "@M@/samples", {"count": 1, "format": "png", "pixels": "sample"}),
    "model_reads": req("POST", S + "@M@/reads", {"observations": [img], "mask": [img], "iterations": 2, "format": "uint8"}),
    "web": req("GET", "/"),
    "head": req("HEAD", "/v1/models"),
    "bad_type": req("POST", "/v1/sessions", None, ["Content-Type: text/plain", "Content-Length: 2"]) + b"{}",
    "pipelined": req("GET", "/healthz").replace(b"Connection: close\r\n", b"") + req("GET", "/v1/models"),
    "chunked": b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n10\r\n{\"code_size\": 2}\r\n0\r\n\r\n",
}
for name, data in reqs.items():
    put("request", name, data)
print("seeds written to", OUT)
