#!/usr/bin/python3
"""test_images.py -- integration tests of vbmemd with hosted models and images: start the real
daemon on the bundled Fashion-MNIST model and talk HTTP to it. Covers the model listing, sessions on
a model, writing 64 real test-set images as PNG (and raw uint8/float32 tensors, JSON arrays),
samples as PNG decoded back, the iterative read of App. G.2 (5 steps), the stateless encode/decode
helpers, every 422 of an image (wrong size, wrong channels, corrupt PNG, bad base64, NaN), 404 for an
unknown model, a models directory with a bad file, and SIGHUP reloads with sessions keeping their
model (also when a continually trained model replaces a file under the same name). Every response is validated against proto/openapi.yaml.

usage: test_images.py PATH/TO/vbmemd [--quick] [--wrapper 'valgrind ...'] [--only a,b]"""
import base64
import json
import math
import os
import shutil
import signal
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import (STREAM_START, STREAM_STEP_PIXELS, Daemon, ROOT, derive_seed, expect, ok, parse_args,  # noqa: E402
                    pixel_seed_for_decode, problem, run_with_shared_daemon, same_bits, tensor, untensor,
                    vbmem_solve)
import pngs  # noqa: E402

BIN = None
WRAPPER = None
QUICK = False
FAST = None
MODEL = "fashion-mnist-mixture-v2"
BUNDLED = os.path.join(ROOT, "models", MODEL + ".safetensors")
C = 64








def start(*args):
    return Daemon(BIN, *args, wrapper=WRAPPER)


def stopped(d):
    """Stop d; its exit status must be 0 (the tail of its stderr otherwise)."""
    rc = d.stop()
    expect(rc == 0, "exit status %s: %s" % (rc, "\n".join(l for l in d.lines[-40:] if '"level":"info"' not in l)))


def episode_pngs(n, offset=0):
    return [pngs.b64(pngs.grey_png(img)) for img in pngs.fashion_images(n, offset)]


def new_session(c, **body):
    r = c.request("POST", "/v1/sessions", body)
    s = ok(r, 201)
    return s, "/v1/sessions/" + s["id"]


def check_pngs(images, n):
    """Decode n base64 PNGs returned by the server: 28x28 8-bit grey."""
    expect(isinstance(images, list) and len(images) == n, "expected %d PNGs" % n)
    out = []
    for b in images:
        w, h, ch, depth, rows = pngs.read_png(base64.b64decode(b))
        expect((w, h, ch, depth) == (28, 28, 1, 8), "PNG is %dx%d, %d channels, %d bits" % (w, h, ch, depth))
        out.append(rows)
    return out


# ---- tests -------------------------------------------------------------------------------------

def test_model_listing():
    c = FAST.client()
    lst = ok(c.request("GET", "/v1/models"))
    expect(lst["default_model"] == MODEL and lst["failed"] == [], lst)
    m = [x for x in lst["models"] if x["name"] == MODEL]
    expect(len(m) == 1, "the bundled model is not listed: %s" % [x["name"] for x in lst["models"]])
    m = m[0]
    expect(m["default"] and m["code_size"] == C and m["observation_shape"] == [1, 28, 28], m)
    expect(m["observation"]["likelihood"] == "gaussian" and m["memory"]["kind"] == "mixture", m)
    expect(m["defaults"]["clusters"] == 10 and m["defaults"]["rows"] == 6 and m["solver"]["iterations"] == 10, m)
    expect(m["provenance"]["dataset"] == "fashion-mnist" and len(m["file"]["sha256"]) == 64, m)
    one = ok(c.request("GET", "/v1/models/" + MODEL))
    expect(one["name"] == MODEL and one["architecture"]["code_size"] == C, one.keys())
    problem(c.request("GET", "/v1/models/no-such-model"), 404, "name")
    problem(c.request("POST", "/v1/models/no-such-model/encode", {"observations": episode_pngs(1)}), 404, "name")
    problem(c.request("POST", "/v1/models/no-such-model/decode", {"codes": {"mu": [[0.0] * C]}}), 404, "name")
    rz = ok(c.request("GET", "/readyz"))
    expect(rz["checks"]["models_loaded"] and rz["checks"]["models"] >= 1, rz)


FIRST = "fashion-mnist-mixture"  # the first bundled model, kept for the sessions written with it


def test_first_model_kept_beside_the_default():
    """Both bundled models are served: the default (retrained: its file's test ELBO at least the
    models issue's 1,500 nats per frame, its VAE's at least 1,650, both over the whole test set)
    and the first one under its own name, a different file with its own networks (the same code
    decodes to other images) and its own session precision; a session created on the first one
    keeps it."""
    c = FAST.client()
    lst = ok(c.request("GET", "/v1/models"))
    by = {m["name"]: m for m in lst["models"]}
    expect(FIRST in by and MODEL in by and MODEL != FIRST, sorted(by))
    new, old = by[MODEL], by[FIRST]
    expect(new["file"]["sha256"] != old["file"]["sha256"], "one file under two names")
    pn, po = new["provenance"], old["provenance"]
    expect(pn["test_episodes"] == 156 and pn["test_elbo_per_frame"] >= 1500.0
           and pn["baseline_vae_test_elbo_per_frame"] >= 1650.0 and pn["epochs"] == 60, pn)
    expect(po["test_elbo_per_frame"] < pn["test_elbo_per_frame"], (po, pn))
    z = {"codes": {"mu": [[0.5 * ((i * 7) % 5 - 2) for i in range(C)]]}, "format": "float32"}
    dn = ok(c.request("POST", "/v1/models/%s/decode" % MODEL, z))
    do = ok(c.request("POST", "/v1/models/%s/decode" % FIRST, z))
    expect(dn != do, "the two models decode a code to the same image")
    s = ok(c.request("POST", "/v1/sessions", {"model": FIRST}), 201)
    expect(s["model"] == FIRST, s)
    expect(s["config"]["sigma_z2"] == old["memory"]["session_sigma_z2"]
           != new["memory"]["session_sigma_z2"], (s["config"], old["memory"], new["memory"]))
    ok(c.request("DELETE", "/v1/sessions/" + s["id"]), 204)


SECOND = "omniglot-mixture"  # the second bundled model, trained on Omniglot's background alphabets


def omniglot_episode():
    """The page's ready Omniglot episode (web/omniglot-episode.png: 64 drawings of the evaluation
    alphabets, which the model never saw, as 28 x 28 bytes): a list of 64 bytes objects."""
    with open(os.path.join(ROOT, "web", "omniglot-episode.png"), "rb") as f:
        w, h, ch, depth, rows = pngs.read_png(f.read())
    expect((w, h, ch, depth) == (224, 224, 1, 8), (w, h, ch, depth))
    return [bytes(rows[(i // 8) * 28 + y][(i % 8) * 28 + x] for y in range(28) for x in range(28))
            for i in range(64)]


def test_second_model_omniglot():
    """The second bundled model, trained on Omniglot: listed with its own provenance (its test ELBO
    over the whole test set, 13,180 drawings of the 20 evaluation alphabets, next to its VAE's, both
    with the same budget) and session precision; on drawings of alphabets it never saw it
    reconstructs better than the Fashion-MNIST model does; and a session on it remembers: the
    bottom halves of 32 written drawings, read from their top halves, come back nearer the
    originals from its memory than from an empty session on the same model (the model alone) and
    than from a session holding the other 32 drawings."""
    c = FAST.client()
    by = {m["name"]: m for m in ok(c.request("GET", "/v1/models"))["models"]}
    expect(SECOND in by and not by[SECOND]["default"], sorted(by))
    m = by[SECOND]
    pv = m["provenance"]
    expect(pv["dataset"] == "omniglot" and pv["test_episodes"] == 13180 // 64, pv)
    expect(math.isfinite(pv["test_elbo_per_frame"]) and math.isfinite(pv["baseline_vae_test_elbo_per_frame"])
           and pv["baseline_vae_epochs"] == pv["epochs"], pv)
    expect(m["observation"] == by[MODEL]["observation"] and m["code_size"] == C, m)
    raw = omniglot_episode()
    u8 = lambda imgs: {"dtype": "uint8", "shape": [len(imgs), 1, 28, 28], "data": pngs.b64(b"".join(imgs))}

    def mse(a, b, pixels=range(784)):
        return sum((a[i][p] - b[i][p]) ** 2 for i in range(len(a)) for p in pixels) / (255.0 ** 2 * len(a) * len(pixels))

    def recon(model):
        enc = ok(c.request("POST", "/v1/models/%s/encode" % model, {"observations": u8(raw)}))
        dec = ok(c.request("POST", "/v1/models/%s/decode" % model, {"codes": {"mu": enc["codes"]["mu"]}, "format": "uint8"}))
        return mse(raw, [base64.b64decode(dec["observations"]["data"])[i * 784:(i + 1) * 784] for i in range(64)])
    r2, rf = recon(SECOND), recon(MODEL)
    expect(r2 < rf, "encode-decode of Omniglot drawings: MSE %.4f on %s, %.4f on %s" % (r2, SECOND, rf, MODEL))
    a, b = raw[:32], raw[32:]
    # the reads of the comparison: all 32 written drawings (their ordering asserted), or the first
    # VBMEM_SECOND_MODEL_CUES of them with the ordering only printed (the sanitizer build, where
    # these reads took 85 s and the release build asserts the figure; the read code is the default
    # model's, whose reads the sanitizer build runs in full in the tests above)
    n_cues = int(os.environ.get("VBMEM_SECOND_MODEL_CUES", "32"))
    expect(1 <= n_cues <= 32, "VBMEM_SECOND_MODEL_CUES %d: from 1 to 32" % n_cues)
    sa, base_a = new_session(c, model=SECOND)
    expect(sa["model"] == SECOND and sa["config"]["sigma_z2"] == m["memory"]["session_sigma_z2"], sa)
    sb, base_b = new_session(c, model=SECOND)
    se, base_e = new_session(c, model=SECOND)
    ok(c.request("POST", base_a + "/episodes", {"observations": u8(a), "seed": 1}))
    ok(c.request("POST", base_b + "/episodes", {"observations": u8(b), "seed": 1}))
    top = {"dtype": "uint8", "shape": [n_cues, 1, 28, 28],
           "data": pngs.b64(bytes(255 if p < 392 else 0 for _ in a[:n_cues] for p in range(784)))}
    cue = [x[:392] + bytes(392) for x in a[:n_cues]]
    got = {}
    for name, base in (("memory", base_a), ("another episode", base_b), ("empty", base_e)):
        r = ok(c.request("POST", base + "/reads", {"observations": u8(cue), "mask": top, "iterations": 5, "seed": 7,
                                                  "format": "uint8"}))
        out = base64.b64decode(r["steps"][-1]["observations"]["data"])
        got[name] = mse(a[:n_cues], [out[i * 784:(i + 1) * 784] for i in range(n_cues)], range(392, 784))
    print("  omniglot, bottom halves of %d drawings from their top halves (MSE): %s; encode-decode %.4f (%s %.4f)"
          % (n_cues, ", ".join("%s %.4f" % kv for kv in got.items()), r2, MODEL, rf))
    if n_cues == 32:
        expect(got["memory"] < got["empty"] and got["memory"] < got["another episode"], got)
    for base in (base_a, base_b, base_e):
        ok(c.request("DELETE", base), 204)


def test_sessions_on_the_bundled_model():
    c = FAST.client()
    s, base = new_session(c)  # neither model nor code_size: the default model
    expect(s["model"] == MODEL and s["code_size"] == C and s["kind"] == "mixture", s)
    expect(s["clusters"] == 10 and s["rows"] == 6 and s["solver"]["iterations"] == 10, s)
    # the model file's vbmem.memory, read here from the file itself: sessions take its
    # session_sigma_z2 (the serving precision), not the trained sigma_z2
    with open(os.path.join(ROOT, "models", MODEL + ".safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        filemem = json.loads(json.loads(f.read(n))["__metadata__"]["vbmem.memory"])
    expect(filemem["session_sigma_z2"] != filemem["sigma_z2"], filemem)
    expect(s["config"]["sigma_z2"] == filemem["session_sigma_z2"], (s["config"], filemem))
    s1, base1 = new_session(c, memory={"sigma_z2": filemem["sigma_z2"]})  # the trained value on request
    expect(s1["config"]["sigma_z2"] == filemem["sigma_z2"], s1["config"])
    ok(c.request("DELETE", base1), 204)
    s2, base2 = new_session(c, model=MODEL, memory={"clusters": 4, "retain_max": 100}, solver={"iterations": 12})
    expect(s2["clusters"] == 4 and s2["rows"] == 6 and s2["config"]["retain_max"] == 100, s2)
    expect(s2["solver"]["iterations"] == 12 and s2["model"] == MODEL, s2)
    s3, base3 = new_session(c, model=MODEL, code_size=C, memory={"kind": "gaussian", "rows": 8})
    expect(s3["kind"] == "gaussian" and s3["rows"] == 8 and s3["config"]["sigma_z2"] == 1.0, s3)
    latent, lbase = new_session(c, code_size=16)
    expect(latent["model"] is None and latent["code_size"] == 16, latent)
    problem(c.request("POST", "/v1/sessions", {"model": "mnist"}), 422, "model")
    problem(c.request("POST", "/v1/sessions", {"model": 7}), 422, "model")
    problem(c.request("POST", "/v1/sessions", {"model": MODEL, "code_size": 32}), 422, "code_size")
    problem(c.request("POST", "/v1/sessions", {"model": MODEL, "memory": {"code_size": 32}}), 422, "memory.code_size")
    for b in (base, base2, base3, lbase):
        ok(c.request("DELETE", b), 204)


def test_write_64_images_samples_and_read():
    c = FAST.client()
    s, base = new_session(c, memory={"retain_max": 1000})
    imgs = episode_pngs(64)
    w = ok(c.request("POST", base + "/episodes", {"observations": imgs, "seed": 1}))
    expect(w["frames"] == 64 and w["version"] == 2 and w["iterations"] == 10, w)
    expect(math.isfinite(w["elbo"]["per_frame"]) and w["timings"]["encode_s"] > 0, w)
    expect(abs(sum(w["cluster_usage"][0]) - 64) < 1e-6, w["cluster_usage"])
    # the same episode as codes from the encode helper gives the same memory
    enc = ok(c.request("POST", "/v1/models/%s/encode" % MODEL, {"observations": imgs, "encoding": "base64"}))
    s2, base2 = new_session(c, memory={"retain_max": 1000})
    w2 = ok(c.request("POST", base2 + "/episodes", {"codes": enc["codes"], "seed": 1}))
    expect(abs(w2["elbo"]["per_frame"] - w["elbo"]["per_frame"]) <= 1e-3 * abs(w["elbo"]["per_frame"]),
           "images and their float32 codes give different ELBOs: %s vs %s" % (w["elbo"]["per_frame"], w2["elbo"]["per_frame"]))
    ok(c.request("DELETE", base2), 204)
    # append in the other encodings
    raw = pngs.fashion_images(4, 64)
    u8 = {"dtype": "uint8", "shape": [4, 1, 28, 28], "data": base64.b64encode(b"".join(raw)).decode()}
    a = ok(c.request("POST", base + "/episodes", {"mode": "append", "observations": u8}))
    expect(a["frames"] == 68, a)
    f32 = {"dtype": "float32", "shape": [2, 1, 28, 28],
           "data": base64.b64encode(struct.pack("<%df" % (2 * 784), *[(v + 0.5) / 256 for v in raw[0] + raw[1]])).decode()}
    a = ok(c.request("POST", base + "/episodes", {"mode": "append", "observations": f32}))
    expect(a["frames"] == 70, a)
    nested = [[[[(raw[2][y * 28 + x] + 0.5) / 256 for x in range(28)] for y in range(28)]]]
    a = ok(c.request("POST", base + "/episodes", {"mode": "append", "observations": nested}))
    expect(a["frames"] == 71 and a["retained_codes"] == 71, a)
    rf = ok(c.request("POST", base + "/episodes", {"mode": "refit"}))
    expect(rf["frames"] == 71, rf)
    # 64 samples as PNG, decoded back
    sm = ok(c.request("POST", base + "/samples", {"count": 64, "seed": 3}))
    expect(len(sm["codes"]) == 64 and len(sm["codes"][0]) == C, "sample codes")
    check_pngs(sm["observations"], 64)
    sm2 = ok(c.request("POST", base + "/samples", {"count": 64, "seed": 3}))
    expect(sm2["observations"] == sm["observations"], "samples are not deterministic given the seed")
    for fmt, check in (("uint8", lambda o: o["dtype"] == "uint8" and o["shape"] == [5, 1, 28, 28]
                        and len(base64.b64decode(o["data"])) == 5 * 784),
                       ("float32", lambda o: o["shape"] == [5, 1, 28, 28] and len(base64.b64decode(o["data"])) == 5 * 784 * 4),
                       ("json", lambda o: len(o) == 5 and len(o[0]) == 1 and len(o[0][0]) == 28 and len(o[0][0][0]) == 28)):
        o = ok(c.request("POST", base + "/samples", {"count": 5, "seed": 3, "format": fmt}))["observations"]
        expect(check(o), "samples in %s: %s" % (fmt, str(o)[:200]))
    u8s = ok(c.request("POST", base + "/samples", {"count": 5, "seed": 3, "format": "uint8"}))["observations"]
    pngs5 = check_pngs(ok(c.request("POST", base + "/samples", {"count": 5, "seed": 3}))["observations"], 5)
    expect(list(base64.b64decode(u8s["data"])[:784]) == sum(pngs5[0], []), "PNG and uint8 samples differ")
    px = ok(c.request("POST", base + "/samples", {"count": 3, "seed": 3, "pixels": "sample", "format": "float32"}))
    mean = ok(c.request("POST", base + "/samples", {"count": 3, "seed": 3, "format": "float32"}))
    expect(px["codes"] == mean["codes"] and px["observations"] != mean["observations"], "pixel samples")
    nofmt = ok(c.request("POST", base + "/samples", {"count": 2, "format": "none"}))
    expect("observations" not in nofmt, "format none still returned images")
    # a 5-step iterative read from 8 query images
    rd = ok(c.request("POST", base + "/reads", {"observations": imgs[:8], "iterations": 5, "seed": 11}))
    expect(len(rd["steps"]) == 5 and rd["version"] == 6, "read steps")
    for st in rd["steps"]:
        expect(len(st["codes"]) == 8 and len(st["codes"][0]) == C, "read codes")
        expect(len(st["clusters"]) == 8 and all(0 <= h[0] < 10 for h in st["clusters"]), st["clusters"])
        expect(len(st["addresses"]["s"]) == 8, "addresses")
        check_pngs(st["observations"], 8)
    expect("start" not in rd, "a read with a query has no start")
    # from memory (G.2 step 1), without addresses, codes as base64
    rm = ok(c.request("POST", base + "/reads", {"count": 4, "iterations": 5, "seed": 2, "addresses": False,
                                              "encoding": "base64", "format": "uint8"}))
    expect(len(rm["steps"]) == 5 and rm["start"]["codes"]["shape"] == [4, C], rm.get("start", {}).keys())
    expect(rm["start"]["observations"]["shape"] == [4, 1, 28, 28] and "addresses" not in rm["steps"][0], "start")
    rm2 = ok(c.request("POST", base + "/reads", {"count": 4, "iterations": 5, "seed": 2, "addresses": False,
                                               "encoding": "base64", "format": "uint8"}))
    expect(rm2["steps"] == rm["steps"] and rm2["start"] == rm["start"], "reads are not deterministic given the seed")
    # from query codes on a model session: images come back too
    rc = ok(c.request("POST", base + "/reads", {"query": {"mu": sm["codes"][:3]}, "iterations": 2, "format": "json"}))
    expect(len(rc["steps"]) == 2 and len(rc["steps"][1]["observations"]) == 3, "read from codes")
    ok(c.request("DELETE", base), 204)


def test_encode_decode_helpers():
    c = FAST.client()
    imgs = episode_pngs(10, 100)
    e = ok(c.request("POST", "/v1/models/%s/encode" % MODEL, {"observations": imgs}))
    expect(e["model"] == MODEL and e["count"] == 10, e.keys())
    mu, s2 = e["codes"]["mu"], e["codes"]["sigma2"]
    expect(len(mu) == 10 and len(mu[0]) == C and all(v > 0 for r in s2 for v in r), "encode shapes")
    d = ok(c.request("POST", "/v1/models/%s/decode" % MODEL, {"codes": {"mu": mu}}))
    rec = check_pngs(d["observations"], 10)
    # the reconstruction of a code is close to its image (mean absolute pixel error)
    raw = pngs.fashion_images(10, 100)
    err = sum(abs(rec[i][y][x] - raw[i][y * 28 + x]) for i in range(10) for y in range(28) for x in range(28)) / (10 * 784)
    expect(err < 40, "reconstructions are far from the images: mean |error| %.1f of 255" % err)
    e2 = ok(c.request("POST", "/v1/models/%s/encode" % MODEL, {"observations": d["observations"], "encoding": "base64"}))
    expect(e2["codes"]["mu"]["shape"] == [10, C], e2["codes"]["mu"]["shape"])
    d2 = ok(c.request("POST", "/v1/models/%s/decode" % MODEL,
                      {"codes": {"mu": tensor(mu)}, "format": "float32", "pixels": "sample", "seed": 5}))
    d3 = ok(c.request("POST", "/v1/models/%s/decode" % MODEL,
                      {"codes": {"mu": tensor(mu)}, "format": "float32", "pixels": "sample", "seed": 5}))
    expect(d2["observations"] == d3["observations"], "pixel samples are not deterministic given the seed")
    problem(c.request("POST", "/v1/models/%s/decode" % MODEL, {"codes": {"mu": [[0.0] * (C - 1)]}}), 422, "codes.mu")
    problem(c.request("POST", "/v1/models/%s/decode" % MODEL, {"codes": {"mu": [[0.0] * C]}, "format": "gif"}), 422, "format")
    problem(c.request("POST", "/v1/models/%s/decode" % MODEL, {"codes": {"mu": [[0.0] * C]}, "pixels": "max"}), 422, "pixels")
    problem(c.request("POST", "/v1/models/%s/encode" % MODEL, {}), 422, "observations")


def test_image_errors():
    c = FAST.client()
    s, base = new_session(c)
    ep = base + "/episodes"
    img = pngs.fashion_images(3)
    good = [pngs.b64(pngs.grey_png(i)) for i in img]

    def bad(obs, field, detail=None, path=ep, key="observations"):
        return problem(c.request("POST", path, {key: obs}), 422, field, detail)

    # wrong size
    p = bad(good[:1] + [pngs.b64(pngs.grey_png(bytes(32 * 32), 32, 32))], "observations[1]", "32x32")
    expect("frame 1" in p["detail"], p)
    # wrong channels: a colour RGB image for a greyscale model
    rgb = [bytes(sum(([v, 255 - v, v // 2] for v in img[0][y * 28:(y + 1) * 28]), [])) for y in range(28)]
    bad([pngs.b64(pngs.png(28, 28, rgb, color_type=2))], "observations[0]", "colour")
    # corrupt PNG: bad signature, bit flips in IDAT (CRC), truncation, garbage after the signature
    bad([pngs.b64(b"GIF89a" + bytes(100))], "observations[0]", "PNG")
    raw = bytearray(pngs.grey_png(img[1]))
    k = raw.index(b"IDAT") + 20
    raw[k] ^= 0xff
    bad(good[:2] + [pngs.b64(bytes(raw))], "observations[2]", "frame 2")
    bad([pngs.b64(pngs.grey_png(img[1])[:120])], "observations[0]")
    bad([pngs.b64(b"\x89PNG\r\n\x1a\n" + os.urandom(300))], "observations[0]")
    # bad base64 (in a PNG list and in a tensor)
    bad(["!!!not base64!!!"], "observations[0]", "base64")
    bad({"dtype": "uint8", "shape": [1, 1, 28, 28], "data": "%%%%"}, "observations.data", "base64")
    # NaN, infinity and out of range in float32; out of range in JSON numbers
    vals = [0.5] * 784 * 2
    vals[784 + 30] = float("nan")
    nan = {"dtype": "float32", "shape": [2, 1, 28, 28], "data": base64.b64encode(struct.pack("<%df" % len(vals), *vals)).decode()}
    p = bad(nan, "observations.data", "NaN")
    expect("frame 1" in p["detail"] and "row 1" in p["detail"], p)
    vals[784 + 30] = float("inf")
    nan["data"] = base64.b64encode(struct.pack("<%df" % len(vals), *vals)).decode()
    bad(nan, "observations.data")
    bad([[[[1.5] * 28] * 28]], "observations[0][0][0][0]")
    bad([[[[0.5] * 27] * 28]], "observations[0][0][0]")
    # tensor shape and size
    bad({"dtype": "uint8", "shape": [1, 3, 28, 28], "data": pngs.b64(bytes(3 * 784))}, "observations.shape")
    bad({"dtype": "uint8", "shape": [1, 1, 28, 28], "data": pngs.b64(bytes(783))}, "observations.data")
    bad({"dtype": "int16", "shape": [1, 1, 28, 28], "data": ""}, "observations.dtype")
    bad([], "observations")
    bad("a string", "observations")
    # both codes and observations; observations on a latent session; images from a latent session
    problem(c.request("POST", ep, {"observations": good, "codes": {"mu": [[0.0] * C]}}), 422, "observations")
    latent, lbase = new_session(c, code_size=8)
    problem(c.request("POST", lbase + "/episodes", {"observations": good}), 422, "observations")
    problem(c.request("POST", lbase + "/samples", {"count": 1, "format": "png"}), 422, "format")
    problem(c.request("POST", lbase + "/reads", {"observations": good}), 422, "observations")
    # reads and the encode helper report the same way
    bad([pngs.b64(pngs.grey_png(bytes(32 * 32), 32, 32))], "observations[0]", path=base + "/reads")
    bad(["!!!"], "observations[0]", path="/v1/models/%s/encode" % MODEL)
    problem(c.request("POST", base + "/reads", {"observations": good, "count": 3}), 422, "count")
    problem(c.request("POST", base + "/reads", {"count": 5000, "iterations": 100}), 422, "iterations", "bytes")
    problem(c.request("POST", base + "/reads", {"observations": good, "query": {"mu": [[0.0] * C]}}), 422, "observations")
    # the session is untouched by all of this
    expect(ok(c.request("GET", base))["version"] == 1, "a refused write changed the session")
    ok(c.request("DELETE", base), 204)
    ok(c.request("DELETE", lbase), 204)


def test_png_variants():
    """Every PNG colour type and depth the codec converts, and the ones it refuses."""
    c = FAST.client()
    url = "/v1/models/%s/encode" % MODEL
    img = pngs.fashion_images(1, 7)[0]
    rows8 = [img[y * 28:(y + 1) * 28] for y in range(28)]
    ref = ok(c.request("POST", url, {"observations": [pngs.b64(pngs.grey_png(img))]}))["codes"]["mu"][0]
    variants = {
        "grey16": pngs.png(28, 28, [b"".join(struct.pack(">H", v * 256 + 128) for v in r) for r in rows8], 0, 16),
        "grey+alpha": pngs.png(28, 28, [bytes(sum(([v, 255] for v in r), [])) for r in rows8], 4, 8),
        "rgb-grey": pngs.png(28, 28, [bytes(sum(([v, v, v] for v in r), [])) for r in rows8], 2, 8),
        "rgba-grey": pngs.png(28, 28, [bytes(sum(([v, v, v, 9] for v in r), [])) for r in rows8], 6, 8),
        "palette-grey": pngs.png(28, 28, rows8, 3, 8, palette=[(v, v, v) for v in range(256)]),
    }
    for name, data in variants.items():
        mu = ok(c.request("POST", url, {"observations": [pngs.b64(data)]}))["codes"]["mu"][0]
        diff = max(abs(a - b) for a, b in zip(mu, ref))
        expect(diff < 1e-3, "%s PNG encodes differently from the 8-bit grey one (%.2g)" % (name, diff))
    # 1-bit grey converts (values 0 and 255 -> 0.5/256 and 255.5/256)
    packed = [bytes(int("".join("1" if v > 127 else "0" for v in r[i:i + 8]).ljust(8, "0"), 2) for i in range(0, 28, 8)) for r in rows8]
    ok(c.request("POST", url, {"observations": [pngs.b64(pngs.png(28, 28, packed, 0, 1))]}))
    # a data URL prefix is accepted
    ok(c.request("POST", url, {"observations": ["data:image/png;base64," + pngs.b64(pngs.grey_png(img))]}))
    # a colourful palette is refused for a grey model
    pal = pngs.png(28, 28, rows8, 3, 8, palette=[(v, 0, 255 - v) for v in range(256)])
    problem(c.request("POST", url, {"observations": [pngs.b64(pal)]}), 422, "observations[0]", "colour")
    # huge dimensions are refused before any pixel memory is allocated
    huge = pngs.png(100000, 100000, [], 0, 8)
    problem(c.request("POST", url, {"observations": [pngs.b64(huge)]}), 422, "observations[0]")


def test_hostile_image_inputs_never_500():
    """Malformed PNG headers and chunks, odd JSON in every image member: only 4xx, never a crash."""
    import random
    import zlib
    c = FAST.client()
    s, base = new_session(c)
    rnd = random.Random(5)
    sig = b"\x89PNG\r\n\x1a\n"

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff)

    def ihdr(w, h, depth, ctype, interlace=0):
        return chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace))

    row = bytes(29)
    blobs = [sig, sig + ihdr(28, 28, 3, 0), sig + ihdr(28, 28, 8, 5), sig + ihdr(0, 28, 8, 0),
             sig + ihdr(28, 28, 8, 0, 7), sig + ihdr(28, 28, 8, 0) + chunk(b"IEND", b""),
             sig + ihdr(28, 28, 8, 0) + chunk(b"IDAT", b"") + chunk(b"IEND", b""),
             sig + ihdr(28, 28, 8, 0) + chunk(b"IDAT", zlib.compress(row * 3)) + chunk(b"IEND", b""),
             sig + ihdr(28, 28, 8, 0) + chunk(b"IDAT", zlib.compress(row * 28 * 50)) + chunk(b"IEND", b""),
             sig + ihdr(28, 28, 8, 0) + chunk(b"IDAT", zlib.compress(b"\x07" * 29 * 28)) + chunk(b"IEND", b""),
             sig + ihdr(28, 28, 8, 3) + chunk(b"PLTE", b"") + chunk(b"IDAT", zlib.compress(row * 28)),
             sig + ihdr(28, 28, 8, 3) + chunk(b"IDAT", zlib.compress(row * 28)) + chunk(b"IEND", b""),
             sig + ihdr(28, 28, 8, 0) + chunk(b"zTXt", b"k\x00\x00" + zlib.compress(b"x" * 10 ** 6))
             + chunk(b"IDAT", zlib.compress(row * 28)) + chunk(b"IEND", b""),
             sig + ihdr(2 ** 31 - 1, 2 ** 31 - 1, 16, 6)]
    blobs += [sig + bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 400))) for _ in range(20)]
    good = pngs.grey_png(pngs.fashion_images(1)[0])
    for _ in range(30):
        b = bytearray(good)
        for _ in range(rnd.randrange(1, 6)):
            b[rnd.randrange(8, len(b))] = rnd.randrange(256)
        blobs.append(bytes(b))
    values = [[pngs.b64(b)] for b in blobs]
    values += [None, 0, True, {}, [], [None], [[]], [[[]]], [[[[]]]], ["", ""], [""], {"dtype": "uint8"},
               {"dtype": "uint8", "shape": [1, 1, 28, 28]}, {"dtype": "float32", "shape": [0, 1, 28, 28], "data": ""},
               {"dtype": "uint8", "shape": [2 ** 62, 1, 28, 28], "data": ""},
               {"dtype": "uint8", "shape": [1, 1, 28, 28], "data": 5},
               {"dtype": "uint8", "shape": [1.5, 1, 28, 28], "data": ""},
               {"dtype": "uint8", "shape": [1, 1, 28, 28], "data": "", "extra": 1},
               [[[[-0.5] * 28] * 28]], [[[["x"] * 28] * 28]], [[[[1e308] * 28] * 28]], [[[[0.5] * 28] * 28]] * 3 + [5]]
    for v in values:
        for path, key in ((base + "/episodes", "observations"), (base + "/reads", "observations"),
                          ("/v1/models/%s/encode" % MODEL, "observations")):
            r = c.request("POST", path, {key: v})
            expect(r.status in (200, 422), "%s %r -> %d %s" % (path, str(v)[:80], r.status, r.body[:200]))
    for body in ({"format": 7}, {"format": "PNG"}, {"pixels": None}, {"count": 2, "format": "json", "pixels": "sample"}):
        expect(c.request("POST", base + "/samples", body).status in (200, 422), "samples %r" % body)
        expect(c.request("POST", "/v1/models/%s/decode" % MODEL, dict(body, codes={"mu": [[0.0] * C]})).status in (200, 422),
               "decode %r" % body)
    expect(c.request("POST", "/v1/models/%s/decode" % MODEL, {"codes": {"mu": [[1e30] * C]}}).status in (200, 422), "huge codes")
    expect(ok(c.request("GET", base))["version"] >= 1, "the session is gone")
    ok(c.request("DELETE", base), 204)


def test_models_dir_bad_file_and_sighup_reload():
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(BUNDLED, os.path.join(tmp, "alpha.safetensors"))
        with open(os.path.join(tmp, "broken.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", 40) + b'{"__metadata__": {"vbmem.format": "x"}}' + b" ")
        with open(os.path.join(tmp, "notes.txt"), "w") as f:
            f.write("not a model\n")
        d = start("--models-dir", tmp, "--default-model", "alpha", "--threads", "2")
        try:
            c = d.client()
            logs = d.logs()
            skipped = [l for l in logs if l.get("msg") == "model file skipped"]
            expect(len(skipped) == 1 and skipped[0]["file"] == "broken.safetensors"
                   and "vbmem.format" in skipped[0]["detail"], "the bad file was not logged: %s" % skipped)
            p = problem(c.request("GET", "/readyz"), 503)
            expect("broken.safetensors" in p["detail"], p)
            lst = ok(c.request("GET", "/v1/models"))
            expect([m["name"] for m in lst["models"]] == ["alpha"] and lst["failed"][0]["file"] == "broken.safetensors", lst)
            s, base = new_session(c)
            expect(s["model"] == "alpha", s)
            ok(c.request("POST", base + "/episodes", {"observations": episode_pngs(16), "seed": 1}))
            # reload: alpha goes away, beta arrives, the broken file is fixed by removal
            os.remove(os.path.join(tmp, "broken.safetensors"))
            os.rename(os.path.join(tmp, "alpha.safetensors"), os.path.join(tmp, "beta.safetensors"))
            gen = lst["generation"]
            d.signal(signal.SIGHUP)
            deadline = time.time() + 20
            while time.time() < deadline and ok(c.request("GET", "/v1/models"))["generation"] == gen:
                time.sleep(0.02)
            lst = ok(c.request("GET", "/v1/models"))
            expect([m["name"] for m in lst["models"]] == ["beta"] and lst["failed"] == [], lst)
            # the session keeps the model it was created with
            sm = ok(c.request("POST", base + "/samples", {"count": 2, "seed": 1}))
            check_pngs(sm["observations"], 2)
            ok(c.request("POST", base + "/episodes", {"mode": "append", "observations": episode_pngs(2, 20)}))
            problem(c.request("POST", "/v1/sessions", {"model": "alpha"}), 422, "model")
            problem(c.request("POST", "/v1/sessions", {}), 422, "model")  # the default is gone
            p = problem(c.request("GET", "/readyz"), 503)
            expect("alpha" in p["detail"], p)
            s2, _ = new_session(c, model="beta")
            expect(s2["model"] == "beta", s2)
            expect(any(l.get("msg") == "reloaded" and l.get("models") == 1 for l in d.logs()), "no reload log")
        finally:
            stopped(d)


CONTINUAL_DIR = os.path.join(ROOT, "research", "models", "continual")
CONTINUAL_STAGE = os.path.join(CONTINUAL_DIR, "mnist-stage-foovb.safetensors")  # after MNIST only
CONTINUAL_END = os.path.join(CONTINUAL_DIR, "mnist-fashion-foovb.safetensors")  # after MNIST, then Fashion-MNIST


def test_continual_model_replaced_under_one_name():
    """research/continual.py's FOO-VB networks served: a session written on the MNIST-stage model keeps
    decoding (bit for bit the same samples and reads) after the file is replaced under the same name
    by the continually trained one and SIGHUP reloads it; new sessions and the decode helper use the
    new networks. (What test_models_dir_bad_file_and_sighup_reload does not cover: a replaced file
    under an unchanged name, and models from the continual trainer.)"""
    import hashlib

    def sha(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    with tempfile.TemporaryDirectory() as tmp:
        live = os.path.join(tmp, "digits.safetensors")
        shutil.copy(CONTINUAL_STAGE, live)
        d = start("--models-dir", tmp, "--default-model", "digits", "--threads", "2")
        try:
            c = d.client()
            lst = ok(c.request("GET", "/v1/models"))
            m = lst["models"][0]
            expect([x["name"] for x in lst["models"]] == ["digits"] and m["file"]["sha256"] == sha(CONTINUAL_STAGE), lst)
            # the committed files were written when the script lived in train/: their provenance says so
            expect(m["provenance"]["trainer"] == "train/continual.py" and m["provenance"]["dataset"] == "mnist", m)
            code = m["code_size"]
            s, base = new_session(c)
            expect(s["model"] == "digits" and s["code_size"] == code, s)
            imgs = episode_pngs(16)
            ok(c.request("POST", base + "/episodes", {"observations": imgs, "seed": 1}))
            sm_before = ok(c.request("POST", base + "/samples", {"count": 4, "seed": 5}))
            check_pngs(sm_before["observations"], 4)
            rd_args = {"observations": imgs[:3], "iterations": 2, "seed": 3}
            rd_before = ok(c.request("POST", base + "/reads", rd_args))
            probe = {"codes": {"mu": sm_before["codes"][:2]}, "format": "uint8"}
            dec_before = ok(c.request("POST", "/v1/models/digits/decode", probe))["observations"]
            # the continually trained file replaces it under the same name (atomically), then SIGHUP
            shutil.copy(CONTINUAL_END, live + ".new")
            os.replace(live + ".new", live)
            d.signal(signal.SIGHUP)
            deadline = time.time() + 20
            while time.time() < deadline and ok(c.request("GET", "/v1/models"))["generation"] == lst["generation"]:
                time.sleep(0.02)
            lst2 = ok(c.request("GET", "/v1/models"))
            m2 = lst2["models"][0]
            expect([x["name"] for x in lst2["models"]] == ["digits"] and m2["file"]["sha256"] == sha(CONTINUAL_END), lst2)
            expect(m2["provenance"]["stream"] == ["mnist", "fashion-mnist"]
                   and m2["provenance"]["optimizer"]["name"] == "foovb", m2["provenance"])
            # the session written before the reload still decodes, with the networks it was written with
            sm_after = ok(c.request("POST", base + "/samples", {"count": 4, "seed": 5}))
            check_pngs(sm_after["observations"], 4)
            expect(sm_after["codes"] == sm_before["codes"] and sm_after["observations"] == sm_before["observations"],
                   "the old session's samples changed across the reload")
            rd_after = ok(c.request("POST", base + "/reads", rd_args))
            expect(rd_after["steps"] == rd_before["steps"], "the old session's read changed across the reload")
            for st in rd_after["steps"]:
                check_pngs(st["observations"], 3)
            ok(c.request("POST", base + "/episodes", {"mode": "append", "observations": episode_pngs(2, 20)}))
            # new sessions and the stateless helper use the new networks
            s2, base2 = new_session(c)
            expect(s2["model"] == "digits", s2)
            ok(c.request("POST", base2 + "/episodes", {"observations": imgs, "seed": 1}))
            sm_new = ok(c.request("POST", base2 + "/samples", {"count": 4, "seed": 5}))
            check_pngs(sm_new["observations"], 4)
            expect(sm_new["observations"] != sm_before["observations"], "a new session decodes with the old model")
            dec_after = ok(c.request("POST", "/v1/models/digits/decode", probe))["observations"]
            expect(dec_after != dec_before, "the decode helper still uses the old model")
            for b in (base, base2):
                ok(c.request("DELETE", b), 204)
        finally:
            stopped(d)


def test_model_session_survives_restart():
    """With --data-dir a session keeps its model through a restart (and LRU eviction)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = start("--data-dir", tmp, "--max-resident", "1")
        try:
            c = d.client()
            s, base = new_session(c)
            ok(c.request("POST", base + "/episodes", {"observations": episode_pngs(16), "seed": 1}))
            new_session(c, code_size=4)  # evicts the first (one resident session)
            before = ok(c.request("POST", base + "/samples", {"count": 3, "seed": 2}))
            check_pngs(before["observations"], 3)
        finally:
            stopped(d)
        d = start("--data-dir", tmp)
        try:
            c = d.client()
            g = ok(c.request("GET", base))
            expect(g["model"] == MODEL and g["frames"] == 16, g)
            after = ok(c.request("POST", base + "/samples", {"count": 3, "seed": 2}))
            expect(after["observations"] == before["observations"], "samples changed across the restart")
            ok(c.request("POST", base + "/episodes", {"mode": "append", "observations": episode_pngs(2, 30)}))
        finally:
            stopped(d)
        # restarted without the model: codes still work, images are refused
        d = start("--data-dir", tmp, "--models-dir", "", "--default-model", "")
        try:
            c = d.client()
            expect(ok(c.request("GET", base))["model"] == MODEL, "the session forgot its model")
            ok(c.request("POST", base + "/samples", {"count": 2, "format": "none"}))
            problem(c.request("POST", base + "/samples", {"count": 2}), 422, "model", "not hosted")
            problem(c.request("POST", base + "/episodes", {"observations": episode_pngs(1)}), 422, "model")
            enc = before["codes"][:2]
            ok(c.request("POST", base + "/episodes", {"mode": "append", "codes": {"mu": enc}}))
        finally:
            stopped(d)


def test_latent_only_daemon():
    """--models-dir '' hosts nothing: latent sessions work, sessions without code_size are refused."""
    d = start("--models-dir", "", "--default-model", "")
    try:
        c = d.client()
        lst = ok(c.request("GET", "/v1/models"))
        expect(lst["models"] == [] and lst["default_model"] is None, lst)
        ok(c.request("GET", "/readyz"))
        problem(c.request("POST", "/v1/sessions", {}), 422, "code_size")
        problem(c.request("POST", "/v1/sessions", {"model": MODEL}), 422, "model")
        s, base = new_session(c, code_size=4, memory={"kind": "mixture", "rows": 2, "clusters": 2})
        ok(c.request("POST", base + "/episodes", {"codes": {"mu": [[float(t % 2) * 3, 1, 0, t / 8] for t in range(8)]}}))
        # a latent read without a query starts from codes sampled from memory
        rd = ok(c.request("POST", base + "/reads", {"count": 3, "iterations": 2, "seed": 4}))
        expect(len(rd["start"]["codes"]) == 3 and len(rd["steps"]) == 2 and len(rd["steps"][1]["codes"][0]) == 4, rd)
        expect("observations" not in rd["steps"][0] and "observations" not in rd["start"], "images from a latent read")
        problem(c.request("POST", base + "/reads", {"format": "png"}), 422, "format")
        problem(c.request("POST", base + "/samples", {"pixels": "sample"}), 422, "pixels")
        problem(c.request("POST", base + "/samples", {"format": "png", "pixels": "sample"}), 422, "format")
    finally:
        stopped(d)


def test_read_modes_and_mask_errors():
    """mode, candidates, cue_noise and mask of a read: every mode accepted, and every 422 of the
    new members with its exact field. None of this needs the engine's recall."""
    c = FAST.client()
    s, base = new_session(c, memory={"retain_max": 1000})
    rd = base + "/reads"
    imgs = episode_pngs(16, 300)
    ok(c.request("POST", base + "/episodes", {"observations": imgs, "seed": 1}))
    q = imgs[:2]
    top = [1 if y < 14 else 0 for y in range(28) for x in range(28)]  # the top half known

    def field(body, name, detail=None):
        p = problem(c.request("POST", rd, body), 422, name, detail)
        expect(p["field"] == name, "field %r, expected %r (%s)" % (p["field"], name, p["detail"]))
        return p

    for mode in ("recall", "mean", "sample"):
        for body in ({"observations": q}, {"count": 2}, {"query": {"mu": [[0.1] * C]}}):
            r = ok(c.request("POST", rd, dict(body, mode=mode, iterations=2, seed=3, format="uint8")))
            expect(len(r["steps"]) == 2 and len(r["steps"][1]["codes"]) == len(r["steps"][0]["codes"]), r.keys())
    for extra in ({"candidates": 1}, {"candidates": 256}, {"cue_noise": "auto"}, {"cue_noise": 0},
                  {"cue_noise": 1}, {"cue_noise": 0.25, "mode": "recall"}):
        ok(c.request("POST", rd, dict({"observations": q, "seed": 2}, **extra)))
    # mode, candidates, cue_noise
    field({"observations": q, "mode": "greedy"}, "mode")
    field({"observations": q, "mode": 2}, "mode")
    field({"observations": q, "candidates": 0}, "candidates")
    field({"observations": q, "candidates": 257}, "candidates")
    field({"observations": q, "candidates": 1.5}, "candidates")
    field({"observations": q, "mode": "sample", "candidates": 4}, "candidates", "recall")
    field({"observations": q, "mode": "mean", "cue_noise": 0.1}, "cue_noise", "recall")
    field({"observations": q, "cue_noise": 1.5}, "cue_noise", "[0, 1]")
    field({"observations": q, "cue_noise": -0.01}, "cue_noise")
    field({"observations": q, "cue_noise": "high"}, "cue_noise")
    field({"observations": q, "cue_noise": None}, "cue_noise")
    # mask: without a query, count, shapes, values, empty frames, PNGs that do not decode
    u8 = lambda n, ch=1, h=28, w=28, data=None: {"dtype": "uint8", "shape": [n, ch, h, w],
                                                  "data": pngs.b64(data if data is not None else bytes(top) * n * ch)}
    field({"count": 2, "mask": u8(2)}, "mask", "query")
    field({"mask": [pngs.b64(pngs.grey_png([255 * v for v in top]))]}, "mask", "query")
    field({"observations": q, "mask": [pngs.b64(pngs.grey_png([255 * v for v in top]))]}, "mask", "2 frames")
    field({"observations": q, "mask": []}, "mask")
    field({"observations": q, "mask": "all"}, "mask")
    field({"observations": q, "mask": [7, 8]}, "mask")
    field({"observations": q, "mask": u8(3)}, "mask.shape", "[2, 1 or 1, 28, 28]")
    field({"observations": q, "mask": u8(2, h=27, data=bytes(2 * 27 * 28))}, "mask.shape")
    field({"observations": q, "mask": u8(2, ch=3)}, "mask.shape")
    field({"observations": q, "mask": dict(u8(2), shape=[2, 28, 28])}, "mask.shape")
    field({"observations": q, "mask": dict(u8(2), dtype="float32")}, "mask.dtype", "uint8")
    field({"observations": q, "mask": u8(2, data=bytes(top) * 2 + b"\x01")}, "mask.data", "bytes")
    field({"observations": q, "mask": dict(u8(2), data="%%%")}, "mask.data", "base64")
    field({"observations": q, "mask": dict(u8(2), extra=1)}, "mask.extra")
    field({"observations": q, "mask": u8(2, data=bytes(top) + bytes(784))}, "mask[1]", "no known value")
    nested = [[[[1] * 28 for _ in range(28)]] for _ in range(2)]
    nested[1][0][5][7] = 2
    field({"observations": q, "mask": nested}, "mask[1][0][5][7]", "0 (unknown) or 1 (known)")
    nested[1][0][5][7] = 0.5
    field({"observations": q, "mask": nested}, "mask[1][0][5][7]")
    nested[1][0][5][7] = True
    field({"observations": q, "mask": nested}, "mask[1][0][5][7]")
    flat = [[[1] * 28 for _ in range(28)] for _ in range(2)]
    flat[0][27][0] = -1
    field({"observations": q, "mask": flat}, "mask[0][27][0]")
    flat[0][27][0] = 1
    flat[1] = [[0] * 28 for _ in range(28)]
    field({"observations": q, "mask": flat}, "mask[1]", "no known value")
    flat[1] = [[1] * 28 for _ in range(27)]
    problem(c.request("POST", rd, {"observations": q, "mask": flat}), 422, "mask[1]")
    white = pngs.b64(pngs.grey_png([255] * 784))
    field({"observations": q, "mask": [white, pngs.b64(pngs.grey_png(bytes(784)))]}, "mask[1]", "no known value")
    field({"observations": q, "mask": [white, pngs.b64(b"GIF89a" + bytes(100))]}, "mask[1]", "PNG")
    field({"observations": q, "mask": [white, "!!!"]}, "mask[1]", "base64")
    field({"observations": q, "mask": [pngs.b64(pngs.grey_png(bytes(32 * 32), 32, 32)), white]}, "mask[0]", "32x32")
    raw = bytearray(pngs.grey_png([255 * v for v in top]))
    raw[raw.index(b"IDAT") + 20] ^= 0xff
    field({"observations": q, "mask": [white, pngs.b64(bytes(raw))]}, "mask[1]")
    # query codes on a model session: the mask follows the query (T x C code dimensions), and the
    # cue noise is in code units (no pixel bound)
    qc = {"mu": [[0.1] * C] * 2}
    for m in ([[1] * (C // 2) + [0] * (C // 2)] * 2, {"dtype": "uint8", "shape": [2, C], "data": pngs.b64(bytes([1] * 2 * C))}):
        ok(c.request("POST", rd, {"query": qc, "mask": m, "seed": 4}))
    ok(c.request("POST", rd, {"query": qc, "cue_noise": 2.5, "seed": 4}))
    field({"query": qc, "mask": u8(2)}, "mask.shape", "[frames, code size]")
    field({"query": qc, "mask": [[1] * C, [0] * C]}, "mask[1]", "no known value")
    field({"query": qc, "cue_noise": -2.5}, "cue_noise")
    # every accepted form: PNG (grey; RGBA with alpha ignored, colour on the model's one channel),
    # uint8 tensor, nested n x c x h x w and n x h x w
    rgba = [bytes(sum(([0, 0, 200, 0] if v else [0, 0, 0, 255] for v in top[y * 28:(y + 1) * 28]), []))
            for y in range(28)]
    forms = [[pngs.b64(pngs.grey_png([255 * v for v in top]))] * 2,
             ["data:image/png;base64," + pngs.b64(pngs.png(28, 28, rgba, color_type=6))] * 2,
             u8(2), [[[top[y * 28:(y + 1) * 28] for y in range(28)]]] * 2,
             [[top[y * 28:(y + 1) * 28] for y in range(28)]] * 2]
    for m in forms:
        for mode in ("recall", "mean", "sample"):
            ok(c.request("POST", rd, {"observations": q, "mask": m, "mode": mode, "seed": 4, "format": "uint8"}))
    ok(c.request("DELETE", base), 204)


def test_masked_reads_keep_known_pixels():
    """ENGINE: needs the engine's recall (eng_session_recall honouring mode and mask). A masked
    read returns the query's known pixels unchanged at every step, in every mode -- recall (with
    the default cue_noise, 0 with a mask), mean, and sample with the decoder's mean or with pixels
    drawn from p(x | z) for the unknown ones -- whatever the form of the mask; uint8 in and out is
    exact (v in, (v + 0.5) / 256 inside, v out)."""
    c = FAST.client()
    s, base = new_session(c, memory={"retain_max": 1000})
    ok(c.request("POST", base + "/episodes", {"observations": episode_pngs(32, 400), "seed": 1}))
    raw = pngs.fashion_images(3, 400)
    q = {"dtype": "uint8", "shape": [3, 1, 28, 28], "data": pngs.b64(b"".join(raw))}
    known = [1 if (y < 14) != (t == 1) else 0 for t in range(3) for y in range(28) for x in range(28)]
    masks = [{"dtype": "uint8", "shape": [3, 1, 28, 28], "data": pngs.b64(bytes(255 * k for k in known))},
             [pngs.b64(pngs.grey_png([255 * k for k in known[t * 784:(t + 1) * 784]])) for t in range(3)],
             [[[known[t * 784 + y * 28:t * 784 + (y + 1) * 28] for y in range(28)]] for t in range(3)]]
    modes = [{"mode": "recall"}, {"mode": "mean"}, {"mode": "sample"}, {"mode": "sample", "pixels": "sample"}]
    for m in masks:
        for mode in modes:
            r = ok(c.request("POST", base + "/reads", dict({"observations": q, "mask": m, "iterations": 3,
                                                            "seed": 7, "format": "uint8"}, **mode)))
            unknown_moved = False
            for st in r["steps"]:
                out = base64.b64decode(st["observations"]["data"])
                bad = [i for i in range(3 * 784) if known[i] and out[i] != raw[i // 784][i % 784]]
                expect(not bad, "%s: %d known pixels changed (first at frame %d, pixel %d)"
                       % (mode, len(bad), bad[0] // 784, bad[0] % 784) if bad else "")
                expect(len(st["codes"]) == 3 and len(st["codes"][0]) == C, "codes of a masked read")
                unknown_moved |= any(out[i] != raw[i // 784][i % 784] for i in range(3 * 784) if not known[i])
            # the read answered the unknown pixels (it did not return the query unchanged)
            expect(unknown_moved, "%s: no unknown pixel was filled in" % mode)
    ok(c.request("DELETE", base), 204)


# ---- mode "sample": App. G.2, computed step by step apart from the read ------------------------
# The read's sample mode is the paper's iterative read (App. G.2): start from the query images,
# the query codes, or images decoded from codes sampled from memory (step 1); then, step after
# step, encode the previous images into q(z) (2), address and draw from the memory with seed + i
# (3-5: vbm_read in sample mode) and decode the draw into the step's images (5). The test does
# the same chain apart from the read, on the same machine: the memory exported (GET .../memory)
# and given to vbmem-solve (its own process: `sample` for the start, `read` for each step), the
# networks through the stateless encode/decode helpers, the seeds of the random streams derived
# in Python (daemon.derive_seed); and asserts every step's codes, clusters, addresses and images,
# and the start, bit for bit. Nothing is recorded: both sides run here, on this CPU.
SAMPLE_READS = [
    # (name, body without "mode", pixels drawn)
    ("images", lambda imgs, cs: {"observations": imgs[:4], "iterations": 3, "seed": 11}),
    ("memory", lambda imgs, cs: {"count": 3, "iterations": 2, "seed": 2, "pixels": "sample"}),
    ("codes", lambda imgs, cs: {"query": {"mu": cs}, "iterations": 2, "seed": 5}),
]


def g2_read(c, memory, body):
    """App. G.2 for a read body on the exported memory: {"start": {codes, observations} or None,
    "steps": [{codes, clusters, addresses, observations}]}, every image a float32 tensor."""
    seed, sample = body["seed"], body.get("pixels") == "sample"
    enc = "/v1/models/%s/encode" % MODEL
    dec = "/v1/models/%s/decode" % MODEL

    def decode(z, pixel_seed):
        b = {"codes": {"mu": z}, "format": "float32"}
        if sample:
            b.update(pixels="sample", seed=pixel_seed)
        return ok(c.request("POST", dec, b))["observations"]

    def encode(x):
        return ok(c.request("POST", enc, {"observations": x}))["codes"]

    start = None
    if "observations" in body:  # step 1: the query images
        q = encode(body["observations"])
    elif "query" in body:  # step 1: the query codes (q(z) with zero variances)
        q = {"mu": body["query"]["mu"]}
    else:  # step 1: codes drawn from memory, decoded into images (G.1), then encoded
        z0 = vbmem_solve(BIN, {"op": "sample", "memory": memory, "count": body["count"],
                               "seed": str(derive_seed(seed, STREAM_START))})["codes"]
        x0 = decode(z0, str(seed))  # the decode helper draws from stream STREAM_PIXELS of seed
        start = {"codes": z0, "observations": x0}
        q = encode(x0)
    steps = []
    for i in range(body["iterations"]):
        r = vbmem_solve(BIN, {"op": "read", "mode": "sample", "memory": memory, "codes": q,
                              "seed": str(seed + i)})
        s = r["addresses"]["s"]  # clusters: the most probable cluster of each group (lowest on ties)
        clusters = [[max(range(len(g)), key=lambda h, g=g: (g[h], -h)) for g in frame] for frame in s]
        x = decode(r["codes"], pixel_seed_for_decode(seed + i, STREAM_STEP_PIXELS))
        steps.append({"codes": r["codes"], "clusters": clusters, "addresses": r["addresses"],
                      "observations": x})
        if i + 1 < body["iterations"]:
            q = encode(x)
    return {"start": start, "steps": steps}


def test_sample_mode_is_app_g2():
    """A read in mode "sample" (from images, from memory with pixel samples, from codes) is App.
    G.2 computed apart from it (vbmem-solve on the exported memory, the encode/decode helpers,
    the seeds of its random streams): every step's codes, clusters, addresses and images and the
    start equal bit for bit on this machine."""
    c = FAST.client()
    s, base = new_session(c, memory={"retain_max": 1000})
    imgs = episode_pngs(16, 200)
    ok(c.request("POST", base + "/episodes", {"observations": imgs, "seed": 1}))
    r = c.request("GET", base + "/memory")
    memory, etag = ok(r), r.header("ETag")
    cs = [[round(math.sin(0.3 * t + 0.1 * k), 6) for k in range(C)] for t in range(2)]
    for name, body in SAMPLE_READS:
        b = dict(body(imgs, cs), mode="sample", format="float32", addresses=True)
        rd = ok(c.request("POST", base + "/reads", b))
        expect('"%d"' % rd["version"] == etag, "the memory changed between export and read")
        want = g2_read(c, memory, b)
        expect(len(rd["steps"]) == len(want["steps"]) == b["iterations"], "%s: steps" % name)
        for i, (got, exp) in enumerate(zip(rd["steps"], want["steps"])):
            for k in ("codes", "clusters", "addresses", "observations"):
                expect(same_bits(got[k], exp[k]), "mode sample (%s), step %d: %s differ from App. G.2"
                       " computed apart (vbmem-solve, encode/decode)" % (name, i, k))
        expect(same_bits(rd.get("start"), want["start"]), "mode sample (%s): the start differs" % name)
    ok(c.request("DELETE", base), 204)


def test_temporal_sessions_of_images():
    """A temporal session on the model: sequences of images written in the order posted (two
    sequences, then one appended), a sampled sequence and a continued prefix back as PNG images,
    infer on images, the 422s of a one-frame sequence and a bad image; then the session, its
    memory and its continuations survive a restart with --data-dir."""
    c = FAST.client()
    s, base = new_session(c, model=MODEL, memory={"kind": "temporal", "components": 2})
    expect(s["kind"] == "temporal" and s["code_size"] == C and s["model"] == MODEL, s)
    w = ok(c.request("POST", base + "/episodes",
                     {"observations": [episode_pngs(8), episode_pngs(8, 8)], "iterations": 10, "seed": 1}))
    expect(w["sequences"] == 2 and w["frames"] == 16 and "encode_s" in w["timings"], w)
    tr = w["free_energy_trace"]
    expect(all(b >= a - 1e-9 * abs(a) for a, b in zip(tr, tr[1:])), "trace: %s" % tr)
    a = ok(c.request("POST", base + "/episodes",
                     {"mode": "append", "observations": [episode_pngs(6, 16)], "iterations": 5}))
    expect(a["sequences"] == 3 and a["frames"] == 22, a)
    smp = ok(c.request("POST", base + "/samples", {"length": 4, "seed": 3}))
    check_pngs(smp["observations"], 4)
    expect(len(smp["codes"]) == 4 and len(smp["codes"][0]) == C, "sampled codes")
    k = ok(c.request("POST", base + "/continue",
                     {"observations": episode_pngs(6, 30), "steps": 3, "samples": 2, "seed": 4}))
    check_pngs(k["observations"]["mean"], 3)
    expect(len(k["observations"]["samples"]) == 2, "sampled continuations")
    for imgs in k["observations"]["samples"]:
        check_pngs(imgs, 3)
    kc = ok(c.request("POST", base + "/continue",
                      {"prefix": {"mu": smp["codes"]}, "steps": 2, "format": "none"}))
    expect("observations" not in kc and len(kc["mean"]) == 2, "codes only")
    inf = ok(c.request("POST", base + "/infer", {"observations": episode_pngs(5, 40)}))
    expect(len(inf["identities"]) == 5 and len(inf["identities"][0]) == 2, "infer on images")
    problem(c.request("POST", base + "/episodes", {"observations": [episode_pngs(1)]}), 422,
            "observations[0]", "at least 2")
    problem(c.request("POST", base + "/episodes", {"observations": [episode_pngs(2) + ["not png"]]}), 422,
            "observations[0]")
    problem(c.request("POST", base + "/episodes", {"observations": episode_pngs(2)}), 422, "observations")
    ok(c.request("DELETE", base), 204)
    with tempfile.TemporaryDirectory() as tmp:
        d = start("--data-dir", tmp)
        try:
            c = d.client()
            s, base = new_session(c, model=MODEL, memory={"kind": "temporal", "components": 2})
            ok(c.request("POST", base + "/episodes", {"observations": [episode_pngs(8)], "iterations": 5}))
            before = ok(c.request("GET", base + "/memory"))
            kb = ok(c.request("POST", base + "/continue", {"observations": episode_pngs(4, 8), "steps": 2}))
        finally:
            stopped(d)
        d = start("--data-dir", tmp)
        try:
            c = d.client()
            g = ok(c.request("GET", base))
            expect(g["kind"] == "temporal" and g["frames"] == 8 and g["model"] == MODEL, g)
            expect(ok(c.request("GET", base + "/memory"))["export"] == before["export"], "memory changed")
            ka = ok(c.request("POST", base + "/continue", {"observations": episode_pngs(4, 8), "steps": 2}))
            expect(ka["observations"] == kb["observations"], "continuation changed across the restart")
            ok(c.request("POST", base + "/episodes", {"mode": "append", "observations": [episode_pngs(3, 20)],
                                                      "iterations": 3}))
        finally:
            stopped(d)
def fuse_views(mus, s2s, J, v0, m0=0.0):
    """The analytic RPM posterior of J views per frame (rows frame-major), computed here from
    the formula: precision sum_j 1/s2_j - (J - 1)/v0, precision-mean sum_j mu_j/s2_j - (J - 1) m0/v0."""
    fm, fs = [], []
    for t in range(len(mus) // J):
        rm, rs = [], []
        for k in range(len(mus[0])):
            lam = sum(1.0 / s2s[t * J + j][k] for j in range(J)) - (J - 1) / v0
            h = sum(mus[t * J + j][k] / s2s[t * J + j][k] for j in range(J)) - (J - 1) * m0 / v0
            rm.append(h / lam)
            rs.append(1.0 / lam)
        fm.append(rm)
        fs.append(rs)
    return fm, fs


def session_prior_var(s):
    """v0 of the code prior of a session (its memory's moment-matched prior)."""
    cfg = s["config"]
    return cfg["rows"] * cfg["u0"] + cfg["sigma2_b0"] + cfg["sigma_z2"]  # mixture: shifts on


def test_views_per_frame():
    """Fused writes and reads (views_per_frame, seed 004): J = 1 is the request without it; J = 2
    views of each frame write the memory that their RPM-fused codes (computed here from the
    encoder's codes) write; a read of two half-masked views of each frame answers with both
    views' known pixels; every 422 names its field."""
    c = FAST.client()
    imgs = episode_pngs(24, 300)
    # J = 1: the same write and the same read as without views_per_frame
    sa, ba = new_session(c)
    sb, bb = new_session(c)
    wa = ok(c.request("POST", ba + "/episodes", {"observations": imgs[:12], "seed": 1}))
    wb = ok(c.request("POST", bb + "/episodes", {"observations": imgs[:12], "seed": 1, "views_per_frame": 1}))
    expect(wa["elbo"] == wb["elbo"], "views_per_frame 1 changed the write")
    ra = ok(c.request("POST", ba + "/reads", {"observations": imgs[12:15], "iterations": 2, "seed": 3, "format": "uint8"}))
    rb = ok(c.request("POST", ba + "/reads", {"observations": imgs[12:15], "iterations": 2, "seed": 3, "format": "uint8",
                                             "views_per_frame": 1}))
    expect(ra["steps"] == rb["steps"], "views_per_frame 1 changed the read")
    for b in (ba, bb):
        ok(c.request("DELETE", b), 204)
    # J = 2: 12 frames of 2 views (images 2t and 2t + 1) against their fused codes posted as codes
    s1, b1 = new_session(c)
    s2, b2 = new_session(c)
    w1 = ok(c.request("POST", b1 + "/episodes", {"observations": imgs, "views_per_frame": 2, "seed": 1}))
    expect(w1["frames"] == 12, w1)
    enc = ok(c.request("POST", "/v1/models/%s/encode" % MODEL, {"observations": imgs}))["codes"]
    fm, fs = fuse_views(enc["mu"], enc["sigma2"], 2, session_prior_var(s1))
    w2 = ok(c.request("POST", b2 + "/episodes", {"codes": {"mu": fm, "sigma2": fs}, "seed": 1}))
    expect(abs(w1["elbo"]["total"] - w2["elbo"]["total"]) <= 1e-6 * abs(w2["elbo"]["total"]),
           "fused images %r vs their fused codes %r" % (w1["elbo"]["total"], w2["elbo"]["total"]))
    # the same views posted as codes (with variances) fuse the same way
    w3 = ok(c.request("POST", b2 + "/episodes", {"codes": {"mu": enc["mu"], "sigma2": enc["sigma2"]},
                                                "views_per_frame": 2, "seed": 1}))
    expect(w3["frames"] == 12 and abs(w3["elbo"]["total"] - w2["elbo"]["total"]) <= 1e-9 * abs(w2["elbo"]["total"]),
           "codes of 2 views %r vs fused %r" % (w3["elbo"]["total"], w2["elbo"]["total"]))
    # a read of 4 frames, each two views: view 0 knows the top half, view 1 the bottom half;
    # with the masks (cue_noise 0) the answer is the two known halves, exactly
    raw = pngs.fashion_images(8, 400)
    top = bytes(1 if y < 14 else 0 for y in range(28) for x in range(28))
    bottom = bytes(1 - v for v in top)
    views = b"".join(raw[t] for t in range(8))
    u8 = {"dtype": "uint8", "shape": [8, 1, 28, 28], "data": base64.b64encode(views).decode()}
    mask = {"dtype": "uint8", "shape": [8, 1, 28, 28], "data": base64.b64encode((top + bottom) * 4).decode()}
    rd = ok(c.request("POST", b1 + "/reads", {"observations": u8, "mask": mask, "views_per_frame": 2,
                                             "iterations": 2, "seed": 5, "format": "uint8"}))
    for st in rd["steps"]:
        expect(len(st["codes"]) == 4 and len(st["clusters"]) == 4, "a read of 4 frames of 2 views")
        out = base64.b64decode(st["observations"]["data"])
        expect(st["observations"]["shape"] == [4, 1, 28, 28], st["observations"]["shape"])
        for t in range(4):
            want = raw[2 * t][:14 * 28] + raw[2 * t + 1][14 * 28:]
            expect(out[t * 784:(t + 1) * 784] == want, "frame %d is not its views' known halves" % t)
    # unmasked noisy views and query codes of 2 views: one answer per frame
    rn = ok(c.request("POST", b1 + "/reads", {"observations": imgs[:6], "views_per_frame": 3, "seed": 2}))
    expect(len(rn["steps"][0]["codes"]) == 2, "3 views of 2 frames")
    rq = ok(c.request("POST", b1 + "/reads", {"query": {"mu": enc["mu"][:4], "sigma2": enc["sigma2"][:4]},
                                             "views_per_frame": 2, "seed": 2, "format": "json"}))
    expect(len(rq["steps"][0]["codes"]) == 2 and len(rq["steps"][0]["observations"]) == 2, "fused query codes")
    # 422s with their fields
    ep, rdp = b2 + "/episodes", b1 + "/reads"

    def field(path, body, name, detail=None):
        p = problem(c.request("POST", path, body), 422, name, detail)
        expect(p["field"] == name, "field %r, expected %r" % (p["field"], name))

    for bad in (0, 65, "2", 1.5, -1, None):
        field(ep, {"observations": imgs[:2], "views_per_frame": bad}, "views_per_frame")
        field(rdp, {"observations": imgs[:2], "views_per_frame": bad}, "views_per_frame")
    field(ep, {"observations": imgs[:3], "views_per_frame": 2}, "observations", "whole frames")
    field(ep, {"codes": {"mu": enc["mu"][:3], "sigma2": enc["sigma2"][:3]}, "views_per_frame": 2}, "codes.mu", "whole frames")
    field(ep, {"codes": {"mu": enc["mu"][:2]}, "views_per_frame": 2}, "codes.sigma2[0][0]", "variance > 0")
    field(ep, {"codes": {"mu": enc["mu"][:2], "sigma2": 100.0}, "views_per_frame": 2}, "codes.sigma2[0]", "precision")
    field(ep, {"codes": {"mu": enc["mu"][:2], "sigma2": [[0.5] * C, [0.5] * (C - 1)]}, "views_per_frame": 2},
          "codes.sigma2[1]")
    nan = tensor(enc["mu"][:2])
    nan["data"] = base64.b64encode(struct.pack("<f", float("nan")) + base64.b64decode(nan["data"])[4:]).decode()
    field(ep, {"codes": {"mu": nan, "sigma2": 0.5}, "views_per_frame": 2}, "codes.mu.data", "finite")
    field(ep, {"mode": "refit", "views_per_frame": 2}, "views_per_frame")
    field(rdp, {"count": 2, "views_per_frame": 2}, "views_per_frame")
    field(rdp, {"observations": imgs[:3], "views_per_frame": 2}, "observations", "whole frames")
    field(rdp, {"observations": u8, "mask": dict(mask, shape=[4, 1, 28, 28]), "views_per_frame": 2}, "mask.shape")
    field(rdp, {"query": {"mu": enc["mu"][:3], "sigma2": enc["sigma2"][:3]}, "views_per_frame": 2}, "query.mu")
    field(rdp, {"query": {"mu": enc["mu"][:2]}, "views_per_frame": 2}, "query.sigma2[0][0]")
    for b in (b1, b2):
        ok(c.request("DELETE", b), 204)


def test_cluster_pictures():
    """GET /v1/sessions/{id}/clusters on a session with a model: H PNGs, each the decoder's mean
    image of the cluster's mean code (the same bytes POST /v1/models/{name}/decode gives for
    those codes), in the other image formats too; format=none answers the means alone."""
    c = FAST.client()
    s, base = new_session(c, model=MODEL, memory={"kind": "mixture", "clusters": 4})
    ok(c.request("POST", base + "/episodes", {"observations": episode_pngs(16), "iterations": 5, "seed": 1}))
    cl = ok(c.request("GET", base + "/clusters"))
    expect(cl["clusters"] == 4 and cl["frames"] == 16 and len(cl["means"]) == 4, cl.keys())
    check_pngs(cl["observations"], 4)
    dec = ok(c.request("POST", "/v1/models/%s/decode" % MODEL, {"codes": {"mu": cl["means"]}, "format": "png"}))
    expect(dec["observations"] == cl["observations"], "the cluster pictures are not the decodes of the means")
    u8 = ok(c.request("GET", base + "/clusters?format=uint8"))
    expect(u8["observations"]["dtype"] == "uint8" and u8["observations"]["shape"] == [4, 1, 28, 28], u8["observations"])
    bare = ok(c.request("GET", base + "/clusters?format=none"))
    expect("observations" not in bare and bare["means"] == cl["means"], "format=none")
    problem(c.request("GET", base + "/clusters?format=bmp"), 422, "format")
    ok(c.request("DELETE", base), 204)
def test_forget_images():
    """POST forget with observations in every wire form (PNG, uint8 and float32 tensors, nested
    arrays): on a session that retains codes each image removes its own stored item (a perturbed
    one too), the retained codes are those before less the removed rows, and the memory is a
    replace of them; on the default session (no retained codes) the approximate downdate; the
    422s of images."""
    c = FAST.client()
    raw = pngs.fashion_images(16)
    s, base = new_session(c, memory={"clusters": 4, "retain_max": 100})
    ok(c.request("POST", base + "/episodes", {"observations": [pngs.b64(pngs.grey_png(i)) for i in raw],
                                              "seed": 1}))
    mem0 = ok(c.request("GET", base + "/memory"))
    before, before_s2 = mem0["codes"]["mu"], mem0["codes"]["sigma2"]
    kept = list(range(16))  # original index of every retained code, oldest first
    rnd = __import__("random").Random(5)
    perturbed = [min(1.0, max(0.0, (v + 0.5) / 256 + rnd.gauss(0, 0.02))) for v in raw[3]]
    forms = [
        (7, [pngs.b64(pngs.grey_png(raw[7]))], 1e-3),
        (3, {"dtype": "float32", "shape": [1, 1, 28, 28],
             "data": base64.b64encode(struct.pack("<784f", *perturbed)).decode()}, None),
        (10, [[[[(raw[10][y * 28 + x] + 0.5) / 256 for x in range(28)] for y in range(28)]]], 1e-3),
        (12, {"dtype": "uint8", "shape": [1, 1, 28, 28], "data": base64.b64encode(raw[12]).decode()}, 1e-3),
    ]
    version = 2
    for orig, obs, tol in forms:
        f = ok(c.request("POST", base + "/forget", {"observations": obs, "seed": 1},
                         headers={"If-Match": '"%d"' % version}))
        version += 1
        rm = f["removed"][0]
        expect(f["exact"] is True and f["version"] == version and rm["item"] == kept.index(orig),
               "image %d: removed %s (retained %s)" % (orig, rm, kept))
        expect(tol is None or rm["distance"] < tol, "image %d: distance %g" % (orig, rm["distance"]))
        expect("encode_s" in f["timings"], f["timings"])
        kept.remove(orig)
        expect(f["retained_codes"] == len(kept) and f["frames"] == len(kept), f)
    mem = ok(c.request("GET", base + "/memory"))
    expect(mem["codes"]["mu"] == [before[i] for i in kept], "retained codes are not the others'")
    s2, base2 = new_session(c, memory={"clusters": 4, "retain_max": 100})
    ok(c.request("POST", base2 + "/episodes", {"codes": {"mu": [before[i] for i in kept],
                                                         "sigma2": [before_s2[i] for i in kept]}, "seed": 1}))
    mem2 = ok(c.request("GET", base2 + "/memory"))
    expect(mem2["posterior"] == mem["posterior"], "not the memory a replace of the codes left gives")
    # the default session retains no codes: the downdate
    d, based = new_session(c)
    ok(c.request("POST", based + "/episodes", {"observations": [pngs.b64(pngs.grey_png(i)) for i in raw],
                                               "seed": 1}))
    f = ok(c.request("POST", based + "/forget", {"observations": [pngs.b64(pngs.grey_png(raw[5]))]}))
    expect(f["exact"] is False and f["elbo"] is None and f["frames"] == 15 and f["version"] == 3
           and f["removed"][0]["item"] is None and 0 <= f["removed"][0]["clusters"][0] < 10, f)
    # 422s: a wrong size names the image, both or neither, an empty list, more cues than codes
    wrong = pngs.b64(pngs.grey_png(bytes(32 * 32), 32, 32))
    problem(c.request("POST", base + "/forget", {"observations": [pngs.b64(pngs.grey_png(raw[0])), wrong]}),
            422, "observations[1]", "32x32")
    problem(c.request("POST", base + "/forget", {"observations": [wrong], "codes": {"mu": [[0.0] * C]}}),
            422, "observations")
    problem(c.request("POST", base + "/forget", {"observations": []}), 422, "observations")
    problem(c.request("POST", base + "/forget", {}), 422, "codes")
    many = [pngs.b64(pngs.grey_png(i)) for i in raw]
    p = problem(c.request("POST", base + "/forget", {"observations": many}), 422, "observations")
    expect(p["field"] == "observations" and "12 codes" in p["detail"], p)
    expect(ok(c.request("GET", base))["version"] == version, "a refused forget changed the session")
    # codes on a session with a model are cues too
    f = ok(c.request("POST", base + "/forget", {"codes": {"mu": [before[0]]}, "seed": 1}))
    expect(f["removed"][0]["item"] == 0 and f["removed"][0]["distance"] == 0.0, f)
    for b in (base, base2, based):
        ok(c.request("DELETE", b), 204)


def floats(o):
    """The values of a float32 image tensor answer."""
    raw = base64.b64decode(o["data"])
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def test_reads_answer_clean_familiarity_and_stopped_at():
    """A recall read of a noisy cue answers, by default, the decoder's mean at its chosen code
    (checked against POST /v1/models/{m}/decode of the step's codes, within float32 rounding of
    another batch size), `answer: "blend"` with cue_noise 0 gives the cue back, every read has
    one familiarity <= 0 per frame -- written images more familiar on the whole than images
    never written -- and a stopped_at within its steps, at which the steps stop changing; the
    422s of `answer`."""
    c = FAST.client()
    s, base = new_session(c)
    imgs = episode_pngs(32, 400)
    ok(c.request("POST", base + "/episodes", {"observations": imgs, "seed": 1}))
    rd = base + "/reads"
    fresh = episode_pngs(8, 700)
    r = ok(c.request("POST", rd, {"observations": imgs[:8] + fresh, "iterations": 3, "seed": 2,
                                  "format": "float32", "addresses": False}))
    fam = r["familiarity"]
    expect(len(fam) == 16 and all(isinstance(f, float) and f <= 0.0 for f in fam), fam)
    expect(sum(fam[:8]) > sum(fam[8:]), "written %s, never written %s" % (fam[:8], fam[8:]))
    expect(0 <= r["stopped_at"] < 3, r["stopped_at"])
    last = r["steps"][-1]
    for i in range(r["stopped_at"], 3):
        expect(r["steps"][i]["codes"] == last["codes"], "step %d differs from the last" % i)
    dec = ok(c.request("POST", "/v1/models/%s/decode" % MODEL,
                       {"codes": {"mu": last["codes"]}, "format": "float32"}))
    a, b = floats(last["observations"]), [min(1.0, max(0.0, v)) for v in floats(dec["observations"])]
    expect(len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < 1e-4,
           "the clean answer is not the decoder's mean at the chosen code")
    bl = ok(c.request("POST", rd, {"observations": fresh[:2], "answer": "blend", "cue_noise": 0,
                                   "format": "float32", "seed": 2}))
    want = [(v + 0.5) / 256.0 for img in pngs.fashion_images(2, 700) for v in img]  # bin centres
    got = floats(bl["steps"][-1]["observations"])
    expect(max(abs(x - y) for x, y in zip(got, want)) < 1e-6, "blend with cue_noise 0 is not the cue")
    for body, f in (({"answer": "noisy"}, "answer"), ({"answer": 1}, "answer"),
                    ({"answer": "clean", "mode": "sample"}, "answer")):
        p = problem(c.request("POST", rd, dict({"observations": fresh[:1]}, **body)), 422, f)
        expect(p["field"] == f, p)
    ok(c.request("DELETE", base), 204)


TESTS = [
    test_model_listing, test_first_model_kept_beside_the_default, test_second_model_omniglot,
    test_sessions_on_the_bundled_model, test_write_64_images_samples_and_read,
    test_encode_decode_helpers, test_image_errors, test_png_variants, test_hostile_image_inputs_never_500,
    test_models_dir_bad_file_and_sighup_reload, test_continual_model_replaced_under_one_name,
    test_model_session_survives_restart,
    test_latent_only_daemon, test_sample_mode_is_app_g2, test_read_modes_and_mask_errors,
    test_masked_reads_keep_known_pixels, test_temporal_sessions_of_images, test_views_per_frame,
    test_cluster_pictures,
    test_forget_images, test_reads_answer_clean_familiarity_and_stopped_at,
]


def main():
    global BIN, WRAPPER, QUICK, FAST
    BIN, WRAPPER, QUICK, only = parse_args(sys.argv[1:])
    if BIN is None:
        print(__doc__)
        return 2
    FAST = start("--threads", "2", "--max-body-bytes", "8000000")
    return run_with_shared_daemon(FAST, TESTS, only)


if __name__ == "__main__":
    sys.exit(main())
