#!/usr/bin/python3
"""test_rpm.py -- integration tests of a served RPM (POST /v1/models/{name}/infer): the real daemon
with a models directory holding the golden RPM of train/golden_rpm.py next to the bundled model.
The posterior is checked against rpm.py's PyTorch numbers (tests/data/golden_rpm_io.json), in JSON
and base64 forms; every 422 (too short, too long, ragged, NaN, J mismatched, wrong observation
size), 404 for an unknown model, 422 (field name) for the wrong kind both ways, API keys, /metrics, and a SIGHUP reload that adds,
replaces and breaks the RPM file. Every response is validated against proto/openapi.yaml.

usage: test_rpm.py PATH/TO/vbmemd [--wrapper 'valgrind ...'] [--only a,b]"""
import base64
import json
import os
import shutil
import signal
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import Daemon, ROOT, expect, ok, parse_args, problem, run_with_shared_daemon  # noqa: E402

BIN = None
WRAPPER = None
SHARED = None
TMP = None
DATA = os.path.join(ROOT, "tests", "data")
RPM_FILE = os.path.join(DATA, "golden_rpm.safetensors")
BUNDLED = os.path.join(ROOT, "models", "fashion-mnist-mixture-v2.safetensors")
NAME = "balls-rpm"
with open(os.path.join(DATA, "golden_rpm_io.json")) as _f:
    GOLDEN = json.load(_f)
J = GOLDEN["J"]
INFER = "/v1/models/%s/infer" % NAME


def start(*args):
    return Daemon(BIN, *args, wrapper=WRAPPER)


def f32(rows):
    """A float32 tensor object of the nested rows (J x T, or J x T x D)."""
    flat, shape = [], []
    def walk(v, depth):
        if isinstance(v, list):
            if len(shape) <= depth:
                shape.append(len(v))
            for x in v:
                walk(x, depth + 1)
        else:
            flat.append(v)
    walk(rows, 0)
    return {"dtype": "float32", "shape": shape,
            "data": base64.b64encode(struct.pack("<%df" % len(flat), *flat)).decode()}


def unf32(t):
    vals = struct.unpack("<%df" % (len(base64.b64decode(t["data"])) // 4), base64.b64decode(t["data"]))
    rows, cols = t["shape"]
    return [list(vals[r * cols:(r + 1) * cols]) for r in range(rows)]


def close(got, want, rtol, what):
    for t, (g, w) in enumerate(zip(got, want)):
        expect(abs(g - w) <= rtol * (abs(w) + 1e-3), "%s[%d]: %r, expected %r" % (what, t, g, w))


VEC = "vec-rpm"  # J = 2 rows of D = 2 values, L = 2, one shared dense net (tests/test_rpm.c's model)
VEC_ARCH = {"factors": 2, "observation_size": 2, "latent_size": 2, "min_steps": 2, "max_steps": 16,
            "shared": True, "recognition": [{"type": "flatten"}, {"type": "dense", "name": "s", "in": 2, "out": 4}],
            "factor": {"parameters": "natural", "precision": "exp", "min_precision": 0.05},
            "prior": {"kernel": "matern12", "variance": [1.5, 0.5], "lengthscale": [3, 1.25], "jitter": 0.001,
                      "time_step": 0.5, "subtract_marginals": False}}


def write_vec_rpm(path):
    tensors = [("s.bias", [4], [0.1, -0.2, 0.3, -0.5]),
               ("s.weight", [4, 2], [0.5, -1.0, 0.25, 0.75, 0.1, -0.2, -0.3, 0.4])]
    header, off, blob = {"__metadata__": {"vbmem.format": "vbmem-model", "vbmem.format_version": "1",
                                          "vbmem.kind": "rpm", "vbmem.architecture": json.dumps(VEC_ARCH),
                                          "vbmem.provenance": "{}"}}, 0, b""
    for name, shape, vals in tensors:
        b = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        blob += b
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


def setup_dir(tmp):
    shutil.copy(BUNDLED, os.path.join(tmp, "fashion-mnist-mixture-v2.safetensors"))
    shutil.copy(RPM_FILE, os.path.join(tmp, NAME + ".safetensors"))
    write_vec_rpm(os.path.join(tmp, VEC + ".safetensors"))


# ---- tests -------------------------------------------------------------------------------------

def test_listing_and_description():
    c = SHARED.client()
    lst = ok(c.request("GET", "/v1/models"))
    expect([m["name"] for m in lst["models"]] == ["fashion-mnist-mixture-v2"], lst["models"])
    expect([m["name"] for m in lst["rpm_models"]] == [NAME, VEC] and lst["failed"] == [], lst)
    m = ok(c.request("GET", "/v1/models/" + NAME))
    expect(m["kind"] == "rpm" and m["factors"] == J and m["observation_size"] == 1 and m["latent_size"] == 1
           and m["steps"] == {"min": 2, "max": 64} and m["kernel"] == "rbf", m)
    expect(m["architecture"]["prior"]["lengthscale"][0] == GOLDEN["lengthscale"], m["architecture"]["prior"])
    # the Python client's infer (clients/python)
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    import vbmem
    r = vbmem.Client("http://127.0.0.1:%d" % SHARED.port).infer(NAME, GOLDEN["cases"][0]["X"])
    close([row[0] for row in r["mean"]], GOLDEN["cases"][0]["mu"], 1e-4, "client mean")
    try:
        vbmem.Client("http://127.0.0.1:%d" % SHARED.port, retries=0).infer(NAME, [[1, 2]])
        expect(False, "no error")
    except vbmem.VbmemError as e:
        expect(e.status == 422 and e.field == "observations", e)


def test_infer_matches_pytorch():
    """The served posterior equals rpm.py's (float32 nets, float64 GP) on T = 12, 2 and 30, with
    observations as JSON numbers and as a float32 tensor, results as JSON and base64."""
    c = SHARED.client()
    for case in GOLDEN["cases"]:
        T = case["T"]
        r = ok(c.request("POST", INFER, {"observations": case["X"]}))
        expect(r["model"] == NAME and r["factors"] == J and r["steps"] == T and r["latent_size"] == 1, r)
        expect(len(r["mean"]) == T and all(len(row) == 1 for row in r["mean"]), r["mean"])
        close([row[0] for row in r["mean"]], case["mu"], 1e-4, "mean")
        close([row[0] for row in r["variance"]], case["var"], 1e-4, "variance")
        r2 = ok(c.request("POST", INFER, {"observations": f32(case["X"]), "encoding": "base64"}))
        expect(r2["mean"]["shape"] == [T, 1], r2["mean"])
        close([row[0] for row in unf32(r2["mean"])], case["mu"], 1e-4, "mean (base64)")
        close([row[0] for row in unf32(r2["variance"])], case["var"], 1e-4, "variance (base64)")


def test_vector_observations():
    """D = 2 values per observation, L = 2: nested [J][T][D] and a [J, T, D] tensor give the same
    posterior, T rows of 2; a scalar per observation or a wrong D is a 422."""
    c = SHARED.client()
    X = [[[0.5 * j - 0.1 * t, 0.3 * t - j] for t in range(7)] for j in range(2)]
    url = "/v1/models/%s/infer" % VEC
    r = ok(c.request("POST", url, {"observations": X}))
    expect(r["steps"] == 7 and r["latent_size"] == 2 and len(r["mean"]) == 7 and len(r["mean"][0]) == 2, r)
    expect(all(v > 0 for row in r["variance"] for v in row), r["variance"])
    r2 = ok(c.request("POST", url, {"observations": f32(X)}))
    for a, b in zip(r["mean"] + r["variance"], r2["mean"] + r2["variance"]):
        close(a, b, 1e-12, "tensor vs nested")
    problem(c.request("POST", url, {"observations": [[1.0] * 7, [2.0] * 7]}), 422, "observations[0][0]")
    problem(c.request("POST", url, {"observations": [[[1.0, 2.0, 3.0]] * 7] * 2}), 422, "observations[0][0]")
    t = f32([[[1.0] * 3] * 7] * 2)
    problem(c.request("POST", url, {"observations": t}), 422, "observations.shape", "D = 3")
    t = f32([[1.0] * 7] * 2)
    problem(c.request("POST", url, {"observations": t}), 422, "observations.shape", "D = 1")


def test_infer_errors():
    c = SHARED.client()
    X = GOLDEN["cases"][0]["X"]  # J x 12
    T = len(X[0])

    def bad(obs, field, detail=None, status=422, body=None):
        return problem(c.request("POST", INFER, body if body is not None else {"observations": obs}),
                       status, field, detail)

    bad([row[:1] for row in X], "observations", "T = 1 steps is outside [2, 64]")           # too short
    bad([row * 6 for row in X], "observations", "T = 72 steps is outside [2, 64]")          # too long
    ragged = [list(row) for row in X]
    ragged[2] = ragged[2][:-1]
    bad(ragged, "observations[2]", "%d steps, row 0 has %d" % (T - 1, T))                  # ragged
    bad(X[:J - 1], "observations", "%d rows, the model has J = %d" % (J - 1, J))            # J
    bad(X + [X[0]], "observations", "the model has J = %d" % J)
    nan = f32(X)
    raw = bytearray(base64.b64decode(nan["data"]))
    raw[4 * (T + 3):4 * (T + 4)] = struct.pack("<f", float("nan"))
    nan["data"] = base64.b64encode(bytes(raw)).decode()
    bad(nan, "observations.data", "element [1][3][0] is not finite")                      # NaN
    raw[4 * (T + 3):4 * (T + 4)] = struct.pack("<f", float("inf"))
    nan["data"] = base64.b64encode(bytes(raw)).decode()
    bad(nan, "observations.data", "not finite")
    bad([[1e39] * T for _ in range(J)], "observations", "not finite in float32")
    bad([[[v, v] for v in row] for row in X], "observations[0][0]")                        # D = 2 given
    t3 = f32([[[v, v] for v in row] for row in X])
    bad(t3, "observations.shape", "D = 2 values per observation, the model's observation size is 1")
    t = f32(X)
    t["shape"] = [J - 1, T]
    bad(t, "observations.shape", "J = %d rows" % (J - 1))
    t["shape"] = [J, T + 1]
    bad(t, "observations.data", "holds")
    t = f32(X)
    t["data"] = "@@@"
    bad(t, "observations.data", "base64")
    bad([["x"] * T for _ in range(J)], "observations[0][0]")
    bad("abc", "observations")
    bad([1, 2, 3], "observations[0]")
    bad(None, "observations", "missing", body={})
    bad(None, "extra", body={"observations": X, "extra": 1})
    bad(None, "encoding", body={"observations": X, "encoding": "hex"})
    # models of the wrong kind, and none
    problem(c.request("POST", "/v1/models/nope/infer", {"observations": X}), 404, "name")
    problem(c.request("POST", "/v1/models/fashion-mnist-mixture-v2/infer", {"observations": X}), 422, "name",
            "not an RPM")
    problem(c.request("POST", "/v1/models/%s/encode" % NAME, {"observations": []}), 422, "name",
            "is an RPM")
    problem(c.request("POST", "/v1/models/%s/decode" % NAME, {"codes": {"mu": [[0]]}}), 422, "name")
    p = problem(c.request("POST", "/v1/sessions", {"model": NAME}), 422, "model", "is an RPM")
    expect(p["detail"].startswith('model: model "%s" is an RPM' % NAME), p["detail"])  # one prefix
    # the daemon still serves, and /metrics counts the route like any other
    ok(c.request("POST", INFER, {"observations": X}))
    m = c.request("GET", "/metrics").body.decode()
    for needle in ('vbmemd_requests_total{route="models_infer",status="200"}',
                   'vbmemd_requests_total{route="models_infer",status="422"}',
                   'vbmemd_requests_total{route="models_infer",status="404"}'):
        expect(needle in m, "/metrics lacks %s" % needle)


def test_sighup_reload():
    """An RPM file added, replaced by another (a different lengthscale changes the posterior), then
    broken: each SIGHUP swaps the registry; a broken file is a failure entry and a 404."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(BUNDLED, os.path.join(tmp, "fashion-mnist-mixture-v2.safetensors"))
        d = start("--models-dir", tmp, "--threads", "2")
        try:
            c = d.client()
            X = GOLDEN["cases"][0]["X"]

            def reload():
                gen = ok(c.request("GET", "/v1/models"))["generation"]
                d.signal(signal.SIGHUP)
                deadline = time.time() + 20
                while time.time() < deadline and ok(c.request("GET", "/v1/models"))["generation"] == gen:
                    time.sleep(0.02)
                return ok(c.request("GET", "/v1/models"))

            problem(c.request("POST", INFER, {"observations": X}), 404, "name")
            shutil.copy(RPM_FILE, os.path.join(tmp, NAME + ".safetensors"))
            lst = reload()
            expect([m["name"] for m in lst["rpm_models"]] == [NAME], lst)
            r = ok(c.request("POST", INFER, {"observations": X}))
            close([row[0] for row in r["mean"]], GOLDEN["cases"][0]["mu"], 1e-4, "mean")
            # the same weights with a longer lengthscale: another posterior
            with open(RPM_FILE, "rb") as f:
                blob = f.read()
            n = struct.unpack("<Q", blob[:8])[0]
            header = json.loads(blob[8:8 + n])
            arch = json.loads(header["__metadata__"]["vbmem.architecture"])
            arch["prior"]["lengthscale"] = [10.0]
            header["__metadata__"]["vbmem.architecture"] = json.dumps(arch)
            h = json.dumps(header).encode()
            h += b" " * ((8 - len(h) % 8) % 8)
            with open(os.path.join(tmp, NAME + ".safetensors"), "wb") as f:
                f.write(struct.pack("<Q", len(h)) + h + blob[8 + n:])
            reload()
            r2 = ok(c.request("POST", INFER, {"observations": X}))
            diff = max(abs(a[0] - b[0]) for a, b in zip(r["mean"], r2["mean"]))
            expect(diff > 1e-3, "the reloaded model gives the same posterior (max diff %g)" % diff)
            m = ok(c.request("GET", "/v1/models/" + NAME))
            expect(m["architecture"]["prior"]["lengthscale"] == [10.0], m)
            # broken: tensors truncated
            with open(os.path.join(tmp, NAME + ".safetensors"), "wb") as f:
                f.write(blob[:-8])
            lst = reload()
            expect(lst["rpm_models"] == [] and lst["failed"][0]["file"] == NAME + ".safetensors", lst)
            problem(c.request("POST", INFER, {"observations": X}), 404, "name")
            ok(c.request("GET", "/v1/models/fashion-mnist-mixture-v2"))
        finally:
            rc = d.stop()
            expect(rc == 0, "exit status %s" % rc)


def test_api_keys():
    """infer is under /v1 like encode: 401 without a key; a read-only key may infer (not a write)."""
    with tempfile.TemporaryDirectory() as tmp:
        setup_dir(tmp)
        keyfile = os.path.join(tmp, "keys")
        with open(keyfile, "w") as f:
            f.write("reader-key scope=read\n")
        d = start("--models-dir", tmp, "--api-key-file", keyfile, "--threads", "1")
        try:
            X = GOLDEN["cases"][1]["X"]
            problem(d.client().request("POST", INFER, {"observations": X}), 401)
            r = ok(d.client("reader-key").request("POST", INFER, {"observations": X}))
            close([row[0] for row in r["mean"]], GOLDEN["cases"][1]["mu"], 1e-4, "mean")
        finally:
            rc = d.stop()
            expect(rc == 0, "exit status %s" % rc)


def test_trained_checkpoint_example():
    """The trained Poisson-ball checkpoint of rpm.py (tests/data/rpm_poisson_minimalist.pt), exported
    by train/rpm_export.py, served: its two held-out example sequences give the posterior rpm.py
    stored in the checkpoint."""
    import subprocess
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "balls.safetensors")
        code = ("import json, sys, torch; sys.path.insert(0, %r); import rpm_export\n"
                "ck = torch.load(%r, weights_only=False); rpm_export.export(ck, %r)\n"
                "e = ck['example']; print(json.dumps({k: e[k].tolist() for k in ('X', 'mu', 'var')}))"
                % (os.path.join(ROOT, "train"), os.path.join(DATA, "rpm_poisson_minimalist.pt"), out))
        ex = json.loads(subprocess.run(["/usr/bin/python3", "-c", code], check=True, capture_output=True,
                                       env=dict(os.environ, OMP_NUM_THREADS="1")).stdout)
        d = start("--models-dir", tmp, "--default-model", "", "--threads", "1")
        try:
            c = d.client()
            m = ok(c.request("GET", "/v1/models/balls"))
            expect(m["factors"] == 10 and m["provenance"]["dataset"] == "poisson", m)
            for i in range(2):
                r = ok(c.request("POST", "/v1/models/balls/infer", {"observations": ex["X"][i]}))
                expect(r["steps"] == 50, r["steps"])
                close([row[0] for row in r["mean"]], ex["mu"][i], 1e-4, "mean")
                close([row[0] for row in r["variance"]], ex["var"][i], 1e-4, "variance")
        finally:
            rc = d.stop()
            expect(rc == 0, "exit status %s" % rc)


TESTS = [test_listing_and_description, test_infer_matches_pytorch, test_vector_observations, test_infer_errors, test_sighup_reload,
         test_api_keys, test_trained_checkpoint_example]


def main():
    global BIN, WRAPPER, SHARED, TMP
    BIN, WRAPPER, _quick, only = parse_args(sys.argv[1:])
    if BIN is None:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        setup_dir(tmp)
        SHARED = start("--models-dir", tmp, "--threads", "2")
        return run_with_shared_daemon(SHARED, TESTS, only)


if __name__ == "__main__":
    sys.exit(main())
