"""test_python_client.py -- the Python client (clients/python, import name vbmem) and its CLI
against a real vbmemd (in memory: no --data-dir) on an ephemeral loopback port, a local stub
server for retries and timeouts, and `pip install` of the package into fresh virtual
environments without network.

usage: VBMEMD=build/vbmemd /usr/bin/python3 -m pytest -q tests/clients
(VBMEMD defaults to build/vbmemd of the source tree; a missing binary is a failure, not a skip,
and so are a missing NumPy or PIL, python3-numpy and python3-pil of deploy/install-deps.sh: the
array and PIL tests fail where they are absent, never skip. The client itself needs neither.)
"""
import base64
import http.server
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time

import numpy as np  # python3-numpy (deploy/install-deps.sh): the array forms of the client
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "clients", "python")
sys.path.insert(0, PKG)
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))

import vbmem  # noqa: E402
from daemon import Daemon  # noqa: E402
from pngs import fashion_images, grey_png  # noqa: E402

MODEL = "fashion-mnist-mixture-v2"


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def daemon():
    binary = os.path.abspath(os.environ.get("VBMEMD") or os.path.join(ROOT, "build", "vbmemd"))
    assert os.path.isfile(binary), "no vbmemd at %s (build it, or set VBMEMD)" % binary
    d = Daemon(binary, "--threads", "2")  # no --data-dir: sessions in memory
    yield d
    assert d.stop() == 0, "\n".join(d.lines[-20:])


@pytest.fixture(scope="module")
def url(daemon):
    return "http://127.0.0.1:%d" % daemon.port


@pytest.fixture(scope="module")
def client(url):
    return vbmem.Client(url, retries=0)


@pytest.fixture(scope="module")
def pngs():
    """100 Fashion-MNIST test images as 8-bit grey PNG bytes."""
    return [grey_png(x) for x in fashion_images(100)]


@pytest.fixture(scope="module")
def png_dir(tmp_path_factory, pngs):
    d = tmp_path_factory.mktemp("pngs")
    for i, p in enumerate(pngs):
        (d / ("f%03d.png" % i)).write_bytes(p)
    return d


def top_half_mask():
    return grey_png([255] * 392 + [0] * 392)


def cli(url, *args, env=None):
    """Run `python3 -m vbmem ARGS` against url; returns the CompletedProcess (stdout/stderr text)."""
    e = dict(os.environ)
    e.update({"PYTHONPATH": PKG, "VBMEM_URL": url})
    e.pop("VBMEM_API_KEY", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "vbmem"] + [str(a) for a in args], env=e,
                          capture_output=True, text=True, timeout=120)


def latent(client, **kw):
    mem = {"kind": "mixture", "clusters": 2, "rows": 2, "retain_max": 1000}
    mem.update(kw)
    return client.create_session(code_size=4, memory=mem)


CODES = [[0, 0, 0, 0], [0.1, 0, 0, 0], [5, 5, 5, 5], [5, 5.1, 5, 5]]


# -------------------------------------------------------------------------- client methods


def test_system_endpoints(client):
    assert client.healthz() == {"status": "ok"}
    r = client.readyz()
    assert r["status"] == "ready" and r["checks"]["models_loaded"] is True


def test_models(client):
    ms = client.models()
    # and the first, and the second (Omniglot)
    assert sorted(m.name for m in ms) == sorted([MODEL, "fashion-mnist-mixture", "omniglot-mixture"])
    m = [m for m in ms if m.name == MODEL][0]
    assert not any(x.default for x in ms if x.name != MODEL)
    assert m.default and m.observation_shape == (1, 28, 28) and m.code_size == 64
    assert m.episode_length == 64 and m.defaults["kind"] == "mixture"
    one = client.model(MODEL)
    assert one.name == MODEL and "architecture" in one.raw
    with pytest.raises(vbmem.VbmemError) as e:
        client.model("no-such-model")
    assert e.value.status == 404


def test_encode_decode(client, pngs):
    enc = client.encode(MODEL, pngs[:3])
    assert enc.mu.shape == (3, 64) and enc.sigma2.shape == (3, 64)
    assert all(v > 0 for v in enc.sigma2[0])
    dec = client.decode(MODEL, enc.mu)
    assert dec.images.shape == (3, 1, 28, 28) and dec.images.format == "uint8"
    px, w, h, c = vbmem.decode_png(dec.images.png(0))
    assert (w, h, c) == (28, 28, 1) and px == dec.images.uint8()[:784]
    # the server's PNG of one row, inflated by the client, against its uint8 answer for the same
    # row alone (not px: a batch of three may round a float32 mean to the other side of a grey
    # level on the OpenBLAS path, whose float32 sums depend on the batch size)
    png = client.decode(MODEL, enc.mu.rows[:1], format="png").images
    alone = client.decode(MODEL, enc.mu.rows[:1]).images.uint8()
    assert png.format == "png" and png.shape == (1, 1, 28, 28) and png.uint8() == alone
    raw = np.frombuffer(b"".join(fashion_images(3)), dtype=np.uint8).reshape(3, 28, 28)
    same = client.encode(MODEL, raw)  # a uint8 tensor: the same pixels as the PNGs
    assert same.mu.rows == enc.mu.rows
    flt = client.encode(MODEL, (raw.astype(np.float32) + 0.5) / 256)  # float32 tensor
    assert np.allclose(flt.mu.numpy(), enc.mu.numpy(), atol=1e-5)
    assert client.decode(MODEL, enc.mu.numpy(), format="float32").images.numpy().dtype == np.float32


def test_latent_session_lifecycle(client):
    s = latent(client)
    assert isinstance(s, vbmem.Session) and s.version == 1 and s.model is None and s.code_size == 4
    r = client.write(s, codes=CODES, sigma2=0.01, seed=1)
    assert isinstance(r, vbmem.FitResult) and r.mode == "replace" and r.version == 2 and r.frames == 4
    assert r.elbo_per_frame is not None and r.iterations > 0
    r = client.write(s, codes=[[1, 2, 3, 4]], mode="append", if_match=2)
    assert r.mode == "append" and r.version == 3 and r.frames == 5
    with pytest.raises(vbmem.VbmemError) as e:
        client.write(s, codes=[[1, 2, 3, 4]], mode="append", if_match=2)
    assert e.value.status == 409
    r = client.write(s, mode="refit", if_match='"3"')
    assert r.mode == "refit" and r.version == 4
    r = client.resize(s, clusters=3, seed=2)
    assert r.clusters == 3 and r.version == 5 and r.elbo_before is not None and r.elbo_after is not None
    smp = client.sample(s, count=3, seed=7)
    assert smp.codes.shape == (3, 4) and smp.images is None and len(smp.clusters) == 3
    rd = client.read(s, codes=[[4, 4, 4, 4]], steps=3, mode="mean", seed=1)
    assert len(rd.steps) == 3 and rd.steps[0].codes.shape == (1, 4) and rd.version == 5
    rc = client.read(s, codes=[[4, 4, 4, 4]], mask=[[1, 1, 0, 0]], steps=2, candidates=4, seed=1)
    assert len(rc.steps) == 2
    assert rc.steps[-1].codes[0][:2] == [4.0, 4.0]  # known code values kept (cue_noise 0 with a mask)
    rs = client.read(s, count=2, steps=1, mode="sample", seed=3)
    assert rs.start_codes.shape == (2, 4) and len(rs.steps) == 1
    g = client.get_session(s.id)
    assert g.version == 5 and g.clusters == 3 and client.last_etag == '"5"'
    mem = client.export_memory(s)
    assert mem["format"] == "vbmem-memory"
    t = latent(client)
    imp = client.import_memory(t, mem)
    assert imp.version == 2 and imp.clusters == 3
    assert client.export_memory(t) == mem
    client.delete_session(s)
    client.delete_session(t.id)
    with pytest.raises(vbmem.VbmemError) as e:
        client.get_session(s.id)
    assert e.value.status == 404 and e.value.title and e.value.request_id


def test_forget(client, pngs):
    """forget by codes on a latent session that retains them (exact: the item, a new version,
    If-Match), by codes on one that does not (the downdate), by images on a model session
    (PNG bytes; the retained code of that image goes); both or neither is a ValueError, a bad
    cue a VbmemError 422 with its field."""
    s = latent(client)
    client.write(s, codes=CODES, seed=1, init="random")
    r = client.forget(s, codes=[[5, 5.1, 5, 5.02]], seed=1, init="random", if_match=2)
    assert isinstance(r, vbmem.ForgetResult) and r.exact and r.version == 3 and r.frames == 3
    assert r.retained_codes == 3 and r.elbo_per_frame is not None
    assert len(r.removed) == 1 and isinstance(r.removed[0], vbmem.Forgotten)
    assert r.removed[0].cue == 0 and r.removed[0].item == 3 and abs(r.removed[0].distance - 0.02) < 1e-6
    left = client.export_memory(s)["codes"]["mu"]  # (the client sends float32 codes)
    assert len(left) == 3 and all(abs(a - b) < 1e-6 for x, y in zip(left, CODES[:3]) for a, b in zip(x, y))
    with pytest.raises(vbmem.VbmemError) as e:
        client.forget(s, codes=[[0, 0, 0, 0]], if_match=2)
    assert e.value.status == 409
    with pytest.raises(vbmem.VbmemError) as e:
        client.forget(s, codes=[[0, 0, 0]])
    assert e.value.status == 422 and e.value.field == "codes"
    with pytest.raises(ValueError):
        client.forget(s)
    with pytest.raises(ValueError):
        client.forget(s, codes=CODES, images=pngs[:1])
    d = latent(client, retain_max=0)
    client.write(d, codes=CODES * 3, seed=1)
    r = client.forget(d, codes=CODES[:1])
    assert not r.exact and r.removed[0].item is None and r.elbo is None and r.frames == 11
    m = client.create_session(memory={"kind": "mixture", "clusters": 2, "retain_max": 10})
    client.write(m, images=pngs[:4], seed=1)
    r = client.forget(m, images=[pngs[2]], seed=1)
    assert r.exact and r.removed[0].item == 2 and r.retained_codes == 3
    for x in (s, d, m):
        client.delete_session(x)


def test_temporal_session(client, pngs):
    """A latent temporal session through the client: sequences, append, infer, a sampled
    sequence, a continuation; the session lists and exports like the others."""
    import random
    rnd = random.Random(5)
    seqs = [[[rnd.gauss(0, 1) for _ in range(4)] for _ in range(10)] for _ in range(2)]
    s = client.create_temporal_session(code_size=4, components=2)
    assert s.kind == "temporal" and s.rows is None and s.raw["components"] == 2
    w = client.write_sequences(s, sequences=seqs, iterations=10, seed=1, start="windows", warm_start=True)
    assert w["sequences"] == 2 and w["frames"] == 20 and len(w["free_energy_trace"]) == 10
    a = client.write_sequences(s, sequences=[seqs[0][:5]], mode="append", iterations=3, if_match=2)
    assert a["mode"] == "append" and a["frames"] == 25 and a["version"] == 3
    inf = client.infer_sequence(s, codes=seqs[1][:6])
    assert inf["identities"].shape == (6, 2) and inf["attributes"].shape == (6, 2)
    smp = client.sample_sequence(s, 7, seed=2)
    assert smp["codes"].shape == (7, 4) and len(smp["identities"]) == 7 and smp["images"] is None
    k = client.continue_sequence(s, 3, codes=seqs[1][:6], samples=2, seed=1)
    assert k["mean"].shape == (3, 4) and len(k["samples"]) == 2 and k["samples"][0].shape == (3, 4)
    assert any(x.id == s.id for x in client.iter_sessions())
    assert client.get_session(s).raw["sequences"] == 3
    assert client.export_memory(s)["kind"] == "temporal"
    with pytest.raises(vbmem.VbmemError) as e:
        client.write_sequences(s, sequences=[seqs[0][:1]])
    assert e.value.status == 422 and e.value.field == "sequences[0].mu"
    m = client.create_temporal_session(model=MODEL)
    client.write_sequences(m, images=[pngs[:4], pngs[4:8]], iterations=3)
    km = client.continue_sequence(m, 2, images=pngs[8:11], format="png")
    assert len(km["images"]) == 2
    client.delete_session(s)
    client.delete_session(m)
def test_views_per_frame(client):
    """write and read send views_per_frame: 2 views of each of 4 frames become 4 frames."""
    s = latent(client)
    views = [[t + 0.1 * j, 1.0, 2.0, 3.0] for t in range(4) for j in range(2)]
    r = client.write(s, codes=views, sigma2=0.5, seed=1, views_per_frame=2)
    assert r.frames == 4
    rd = client.read(s, codes=views[:4], sigma2=0.5, steps=1, seed=1, views_per_frame=2)
    assert rd.steps[0].codes.shape == (2, 4)
    with pytest.raises(vbmem.VbmemError) as e:
        client.write(s, codes=views[:3], sigma2=0.5, views_per_frame=2)
    assert e.value.status == 422 and e.value.field == "codes.mu"
    client.delete_session(s)


def test_list_sessions_paging(client):
    made = {latent(client).id for _ in range(5)}
    page = client.list_sessions(limit=2)
    assert isinstance(page, vbmem.SessionPage) and len(page.sessions) == 2 and page.next_cursor
    nxt = client.list_sessions(limit=2, cursor=page.next_cursor)
    assert nxt.sessions[0].id > page.sessions[-1].id  # id order
    every = [s.id for s in client.iter_sessions(page_size=2)]
    assert made <= set(every) and every == sorted(every)
    for sid in made:
        client.delete_session(sid)


def test_model_session_images(client, png_dir, pngs):
    s = client.create_session()
    assert s.model == MODEL and s.code_size == 64
    files = sorted(str(p) for p in png_dir.iterdir())[:64]
    r = client.write(s, images=files, seed=1)  # file paths: PNGs sent untouched
    assert r.frames == 64 and r.version == 2
    r = client.write(s, images=pngs[64:70], mode="append")  # PNG bytes
    assert r.frames == 70
    arr = np.frombuffer(b"".join(fashion_images(4, 70)), dtype=np.uint8).reshape(4, 1, 28, 28)
    r = client.write(s, images=arr.astype(np.float32) / 255.0, mode="append")
    assert r.frames == 74
    smp = client.sample(s, count=4, seed=1, format="uint8")
    assert smp.images.shape == (4, 1, 28, 28) and smp.codes.shape == (4, 64)
    assert smp.images.numpy().shape == (4, 1, 28, 28)
    smp_png = client.sample(s, count=4, seed=1)  # the server's default format, png
    # the same draw decoded as one batch of four: the inflated PNGs are the uint8 answer
    assert smp_png.images.format == "png" and smp_png.images.uint8() == smp.images.uint8()
    cue = pngs[0]
    rd = client.read(s, images=[cue], mask=[top_half_mask()], mode="recall", steps=3, seed=2,
                     candidates=4, format="uint8")
    assert len(rd.steps) == 3 and rd.steps[0].images.shape == (1, 1, 28, 28)
    known = fashion_images(1)[0][:392]
    for st in rd.steps:  # the known (top) pixels come back exactly
        assert st.images.uint8()[:392] == known
    for mode in ("mean", "sample"):
        assert len(client.read(s, images=cue, mode=mode, steps=2, seed=1).steps) == 2
    client.delete_session(s)


def test_read_familiarity_stopped_at_and_answer(client, pngs):
    """every read answers one finite familiarity <= 0 per frame and stopped_at within its steps;
    written images are more familiar than images never written (the mean over 8 of each); the
    answer option: blend accepted, a bad value or another mode refused with the field."""
    s = client.create_session(model=MODEL)
    client.write(s, images=pngs[:32], seed=1)
    written = client.read(s, images=pngs[:8], steps=1, seed=1)
    unseen = client.read(s, images=pngs[50:58], steps=1, seed=1)
    for r in (written, unseen):
        assert len(r.familiarity) == 8 and r.familiarity == r.raw["familiarity"]
        assert all(math.isfinite(f) and f <= 0 for f in r.familiarity)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean(written.familiarity) > mean(unseen.familiarity), (written.familiarity,
                                                                  unseen.familiarity)
    for answer in (None, "clean", "blend"):
        r = client.read(s, images=[pngs[3]], mask=[top_half_mask()], steps=4, seed=2,
                        answer=answer, cue_noise=0.1)
        assert len(r.steps) == 4 and 0 <= r.stopped_at <= 3 and r.stopped_at == r.raw["stopped_at"]
        assert len(r.familiarity) == 1 and r.familiarity[0] <= 0
    for bad in ({"answer": "noisy"}, {"answer": "blend", "mode": "mean"}):
        with pytest.raises(vbmem.VbmemError) as e:
            client.read(s, images=[pngs[3]], steps=1, **bad)
        assert e.value.status == 422 and e.value.field == "answer", e.value
    client.delete_session(s)


def test_pil_images_in_and_out(client, pngs):
    from PIL import Image  # python3-pil (deploy/install-deps.sh): missing is a failure
    import io
    ims = [Image.open(io.BytesIO(p)) for p in pngs[:2]]
    enc = client.encode(MODEL, ims)  # PIL images go as a uint8 tensor: the PNGs' pixels
    assert enc.mu.rows == client.encode(MODEL, pngs[:2]).mu.rows
    rgb = [im.convert("RGB") for im in ims]  # grey RGB images are accepted by a grey model
    assert client.encode(MODEL, rgb).mu.rows == enc.mu.rows
    out = client.decode(MODEL, enc.mu).images.pil()
    assert len(out) == 2 and out[0].size == (28, 28) and out[0].mode == "L"


def test_error_mapping(client):
    s = latent(client)
    with pytest.raises(vbmem.VbmemError) as e:
        client.write(s, codes=[[1, 2, 3]])  # 3 columns for a code size of 4
    err = e.value
    assert err.status == 422 and err.field and err.field.startswith("codes")
    assert err.detail and err.request_id and err.problem["status"] == 422
    assert "422" in str(err) and err.field in str(err)
    with pytest.raises(vbmem.VbmemError) as e:
        client.create_session(code_size=4, memory={"kind": "nonsense"})
    assert e.value.status == 422 and e.value.field.startswith("memory")
    with pytest.raises(vbmem.VbmemError) as e:
        client.read(s, codes=[[0, 0, 0, 0]], mode="mean", candidates=3)
    assert e.value.status == 422 and e.value.field == "candidates"
    with pytest.raises(vbmem.VbmemError) as e:
        client.delete_session("0" * 32)
    assert e.value.status == 404 and not isinstance(e.value, vbmem.ConnectionFailed)
    client.delete_session(s)


def test_api_keys_against_a_daemon_with_keys(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    keys.write_text("# two keys\nkey-one\nkey-two\n")
    binary = os.path.abspath(os.environ.get("VBMEMD") or os.path.join(ROOT, "build", "vbmemd"))
    d = Daemon(binary, "--threads", "1", "--api-key-file", str(keys))
    try:
        u = "http://127.0.0.1:%d" % d.port
        one = vbmem.Client(u, api_key="key-one", retries=0)
        s = latent(one)
        assert one.get_session(s).id == s.id
        with pytest.raises(vbmem.VbmemError) as e:  # another key's session is a 404
            vbmem.Client(u, api_key="key-two", retries=0).get_session(s)
        assert e.value.status == 404
        monkeypatch.delenv("VBMEM_API_KEY", raising=False)
        with pytest.raises(vbmem.VbmemError) as e:
            vbmem.Client(u, retries=0).models()
        assert e.value.status == 401
        monkeypatch.setenv("VBMEM_API_KEY", "key-one")
        assert vbmem.Client(u).get_session(s).id == s.id  # the key from the environment
        r = cli(u, "--api-key", "key-one", "--json", "session", "list")
        assert r.returncode == 0 and [x["id"] for x in json.loads(r.stdout)] == [s.id], r.stderr
        r = cli(u, "session", "list", env={"VBMEM_API_KEY": "key-one"})
        assert r.returncode == 0 and s.id in r.stdout, r.stderr
        r = cli(u, "session", "list")
        assert r.returncode == 3 and "401" in r.stderr
    finally:
        assert d.stop() == 0


# ------------------------------------------------------------------ retries, timeouts, keys


class Stub:
    """A local HTTP server answering from a script of (status, headers, body, delay) entries,
    the last repeated; records each request's method, path, headers and body. A delay of None
    holds the request unanswered until close() (or 30 s, a bound on a hang: then the connection
    is dropped unanswered)."""

    def __init__(self, script):
        self.script, self.seen = list(script), []
        self.released = threading.Event()
        stub = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body_in = self.rfile.read(n) if n else b""
                stub.seen.append((self.command, self.path, dict(self.headers), body_in))
                status, headers, body, delay = stub.script[min(len(stub.seen), len(stub.script)) - 1]
                if delay is None:  # held: never answered
                    stub.released.wait(30)
                    return
                time.sleep(delay)
                data = json.dumps(body).encode()
                self.send_response(status)
                ctype = "application/problem+json" if status >= 400 else "application/json"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def busy(status=503, retry_after="1"):
    return (status, {} if retry_after is None else {"Retry-After": retry_after},
            {"type": "urn:vbmem:problem:busy", "title": "Busy", "status": status,
             "detail": "queue full", "request_id": "r1"}, 0)


OK = (200, {}, {"status": "ok"}, 0)


class Waits:
    """The client's sleep for the retry tests: records each wait with the number of requests the
    stub had seen when it began (the order of attempts and waits), and waits nothing."""

    def __init__(self, stub=None):
        self.stub, self.waits = stub, []

    def __call__(self, seconds):
        self.waits.append((seconds, len(self.stub.seen) if self.stub else None))


def test_retry_on_503_honours_retry_after():
    stub = Stub([busy(503, "7"), OK])
    try:
        w = Waits(stub)
        assert vbmem.Client(stub.url, retries=3, sleep=w).healthz() == {"status": "ok"}
        assert [(m, p) for m, p, *_ in stub.seen] == [("GET", "/healthz")] * 2
        assert w.waits == [(7.0, 1)]  # Retry-After's 7 s, after the first attempt, before the second
    finally:
        stub.close()
    assert vbmem.Client("http://127.0.0.1:9")._sleep is time.sleep  # the default waits for real


def test_retry_on_429_then_gives_up():
    stub = Stub([busy(429, "0"), busy(429, "0"), busy(429, "0")])
    try:
        w = Waits(stub)
        with pytest.raises(vbmem.VbmemError) as e:
            vbmem.Client(stub.url, retries=2, sleep=w).create_session(code_size=4)
        assert e.value.status == 429 and e.value.request_id == "r1" and len(stub.seen) == 3
        assert all(m == "POST" and p == "/v1/sessions" and json.loads(b)["code_size"] == 4
                   for m, p, _, b in stub.seen)
        assert w.waits == [(0.0, 1), (0.0, 2)]  # attempt, wait, attempt, wait, attempt
    finally:
        stub.close()


def test_outcome_unknown_retried_only_with_if_match():
    """A 503 "outcome-unknown" (the store may hold the write): a write without If-Match is not
    sent again (it could be applied twice), the error carries the type; with If-Match it is
    (if the first attempt stood, the retry meets a 409)."""
    unknown = (503, {"Retry-After": "0"}, {"type": "urn:vbmem:problem:outcome-unknown",
                                          "title": "Write outcome unknown", "status": 503,
                                          "detail": "replicas did not confirm it", "request_id": "r1"}, 0)
    done = (200, {"ETag": '"3"'}, {"version": 3, "mode": "append", "elbo": {"per_frame": -1.0}, "iterations": 1,
                                   "converged": True, "time_limited": False, "frames": 1, "retained_codes": 0,
                                   "clusters": 1, "rows": 1, "groups": 1, "timings": {}}, 0)
    stub = Stub([unknown, done])
    try:
        with pytest.raises(vbmem.VbmemError) as e:
            vbmem.Client(stub.url, retries=3, sleep=Waits(stub)).write("s", codes=[[0.0, 1.0]], mode="append")
        assert e.value.status == 503 and e.value.type == "urn:vbmem:problem:outcome-unknown"
        assert len(stub.seen) == 1
    finally:
        stub.close()
    stub = Stub([unknown, done])
    try:
        vbmem.Client(stub.url, retries=3, sleep=Waits(stub)).write("s", codes=[[0.0, 1.0]], mode="append",
                                                                   if_match=2)
        assert len(stub.seen) == 2 and all(h.get("If-Match") == '"2"' for _, _, h, _ in stub.seen)
    finally:
        stub.close()


def test_retry_waits_capped_retry_after_else_backoff():
    """Retry-After capped at 60 s; without one (or unreadable) 0.5 s x 2^attempt +-25 %."""
    stub = Stub([busy(503, "120"), busy(503, None), busy(503, None), busy(503, "garbage"), OK])
    try:
        w = Waits(stub)
        assert vbmem.Client(stub.url, retries=4, sleep=w).healthz() == {"status": "ok"}
        assert len(stub.seen) == 5 and [n for _, n in w.waits] == [1, 2, 3, 4]
        s = [sec for sec, _ in w.waits]
        assert s[0] == 60.0
        assert 0.75 <= s[1] <= 1.25 and 1.5 <= s[2] <= 2.5 and 3.0 <= s[3] <= 5.0, s
    finally:
        stub.close()


def test_no_retry_when_retries_zero_and_not_on_422():
    stub = Stub([busy(503, "0"), (422, {}, {"type": "urn:vbmem:problem:invalid", "title": "t",
                                           "status": 422, "detail": "d", "field": "codes"}, 0)])
    try:
        w = Waits(stub)
        with pytest.raises(vbmem.VbmemError) as e:
            vbmem.Client(stub.url, retries=0, sleep=w).healthz()
        assert e.value.status == 503 and len(stub.seen) == 1
        with pytest.raises(vbmem.VbmemError) as e:
            vbmem.Client(stub.url, retries=3, sleep=w).healthz()
        assert e.value.status == 422 and e.value.field == "codes" and len(stub.seen) == 2
        assert w.waits == []  # neither waited
    finally:
        stub.close()


def test_timeout_and_connection_failure():
    # the stub never answers (held until close): only the client's own timeout ends the request
    stub = Stub([(200, {}, {"status": "ok"}, None)])
    try:
        with pytest.raises(vbmem.ConnectionFailed) as e:
            vbmem.Client(stub.url, timeout=0.3, retries=0).healthz()
        assert e.value.status is None and "timed out" in str(e.value) and len(stub.seen) == 1
    finally:
        stub.close()
    port = Stub([OK])
    dead = port.url
    port.close()  # nothing listens there now
    with pytest.raises(vbmem.ConnectionFailed):
        vbmem.Client(dead, retries=0).healthz()
    w = Waits()
    with pytest.raises(vbmem.ConnectionFailed):  # refused at connect: retried after the backoff
        vbmem.Client(dead, retries=2, sleep=w).healthz()
    s = [sec for sec, _ in w.waits]
    assert len(s) == 2 and 0.375 <= s[0] <= 0.625 and 0.75 <= s[1] <= 1.25, s


def test_api_key_url_and_if_match_headers(monkeypatch):
    stub = Stub([OK])
    try:
        monkeypatch.setenv("VBMEM_URL", stub.url)
        monkeypatch.setenv("VBMEM_API_KEY", "s3cret")
        c = vbmem.Client()
        assert c.url == stub.url and c.api_key == "s3cret"
        c.healthz()
        assert stub.seen[0][2]["Authorization"] == "Bearer s3cret"
        vbmem.Client(stub.url, api_key="other").request("POST", "/v1/sessions/x/resize", {},
                                                        headers=c._if_match(7))
        _, path, headers, body = stub.seen[1]
        assert headers["Authorization"] == "Bearer other" and headers["If-Match"] == '"7"'
        assert path == "/v1/sessions/x/resize" and json.loads(body) == {}
        monkeypatch.delenv("VBMEM_URL")
        monkeypatch.delenv("VBMEM_API_KEY")
        assert vbmem.Client().url == vbmem.DEFAULT_URL and vbmem.Client().api_key is None
    finally:
        stub.close()


def test_codes_go_as_base64_float32():
    t = vbmem.encode_codes([[1, 2], [3, 4.5]])
    assert t["dtype"] == "float32" and t["shape"] == [2, 2]
    assert struct.unpack("<4f", base64.b64decode(t["data"])) == (1, 2, 3, 4.5)
    assert vbmem.Matrix(t).rows == [[1, 2], [3, 4.5]]


def test_png_reader_and_writer():
    from PIL import Image  # PIL writes PNGs with every filter type (missing: a failure)
    import io
    import random
    rnd = random.Random(5)
    base = Image.frombytes("RGB", (37, 23), bytes(rnd.randrange(256) for _ in range(37 * 23 * 3)))
    base = base.resize((74, 46))  # smooth areas: PIL's adaptive filters pick sub, up, average, Paeth
    for mode in ("L", "LA", "RGB", "RGBA", "P"):
        im = base.convert(mode)
        buf = io.BytesIO()
        im.save(buf, format="PNG")
        px, w, h, c = vbmem.decode_png(buf.getvalue())
        want = im.convert("L" if mode in ("L", "LA") else "RGB")
        assert (w, h, c) == (74, 46, 1 if mode in ("L", "LA") else 3) and px == want.tobytes(), mode
        again = Image.open(io.BytesIO(vbmem.encode_png(px, w, h, c)))
        assert again.tobytes() == want.tobytes()
    with pytest.raises(vbmem.png.PngError):
        vbmem.decode_png(b"not a png")


def test_png_reader_every_filter():
    """Rows filtered with none, sub, up, average and Paeth in turn (RGB, 3 bytes per pixel)."""
    import random
    import zlib
    rnd = random.Random(9)
    w, h, bpp = 9, 10, 3
    rows = [bytes(rnd.randrange(256) for _ in range(w * bpp)) for _ in range(h)]

    def paeth(a, b, c):
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        return a if pa <= pb and pa <= pc else (b if pb <= pc else c)

    raw, prev = b"", bytes(w * bpp)
    for y, row in enumerate(rows):
        f = y % 5
        out = bytearray()
        for i, x in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            pred = [0, a, b, (a + b) >> 1, paeth(a, b, c)][f]
            out.append((x - pred) & 0xFF)
        raw += bytes([f]) + bytes(out)
        prev = row

    def chunk(k, body):
        return struct.pack(">I", len(body)) + k + body + struct.pack(">I", zlib.crc32(k + body))

    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    px, w2, h2, c = vbmem.decode_png(data)
    assert (w2, h2, c) == (w, h, 3) and px == b"".join(rows)


def test_docstrings_on_public_names():
    import inspect
    for name in vbmem.__all__:
        obj = getattr(vbmem, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name
            for m, f in inspect.getmembers(obj, inspect.isfunction):
                if not m.startswith("_"):
                    assert f.__doc__, "%s.%s" % (name, m)


# ----------------------------------------------------------------------------------- the CLI


def test_cli_end_to_end(url, png_dir, tmp_path):
    r = cli(url, "models")
    assert r.returncode == 0 and MODEL in r.stdout
    r = cli(url, "session", "create")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    assert len(sid) == 32
    # 100 PNGs, episodes of 64: a replace, then an append; piped, so no progress bar
    r = cli(url, "--json", "write", sid, png_dir)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    res = json.loads(r.stdout)
    assert [x["mode"] for x in res] == ["replace", "append"] and res[-1]["frames"] == 100
    r = cli(url, "write", sid, png_dir, "--episode", "40", "--mode", "append")
    assert r.returncode == 0 and "3 episodes" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "samples"
    r = cli(url, "sample", sid, "-n", "64", "-o", out, "--seed", "3")
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(out))
    assert len(names) == 65 and "contact_sheet.png" in names and "sample_063.png" in names
    px, w, h, c = vbmem.decode_png((out / "sample_000.png").read_bytes())
    assert (w, h, c) == (28, 28, 1)
    sheet, w, h, c = vbmem.decode_png((out / "contact_sheet.png").read_bytes())
    assert (w, h) == (8 * 84 + 9 * 2, 8 * 84 + 9 * 2)  # 28 x 28 images at 3x
    first, _, _, _ = vbmem.decode_png((out / "sample_000.png").read_bytes())
    assert all(sheet[(2 + y) * w + 2 + x] == first[(y // 3) * 28 + x // 3] for y in range(84) for x in range(84))
    # a masked read: every step, and the strip (cue + 5 steps)
    mask = tmp_path / "mask.png"
    mask.write_bytes(top_half_mask())
    rd = tmp_path / "read"
    cue = png_dir / "f000.png"
    r = cli(url, "--json", "read", sid, cue, "--mask", mask, "--mode", "recall", "--steps", "5",
            "-o", rd, "--seed", "1")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["steps"] == 5
    assert sorted(os.listdir(rd)) == ["step_%02d.png" % i for i in range(1, 6)] + ["strip.png"]
    _, w, h, _ = vbmem.decode_png((rd / "strip.png").read_bytes())
    assert (w, h) == (6 * 84 + 7 * 2, 84 + 2 * 2)
    step, _, _, _ = vbmem.decode_png((rd / "step_05.png").read_bytes())
    assert step[:392] == fashion_images(1)[0][:392]  # the known half, exactly
    assert len(info["familiarity"]) == 1 and info["familiarity"][0] <= 0
    assert 0 <= info["stopped_at"] <= 4
    r = cli(url, "read", sid, cue, "--mask", mask, "--answer", "blend", "--steps", "3",
            "-o", tmp_path / "read-blend", "--seed", "1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^familiarity -?[0-9.e-]+ \(<= 0", r.stdout, re.M), r.stdout
    assert re.search(r"^(stopped changing at step [1-3] of 3|still changing at its last step)",
                     r.stdout, re.M), r.stdout
    r = cli(url, "read", sid, cue, "--answer", "noisy", "-o", tmp_path / "read-bad")
    assert r.returncode == 2 and "--answer" in r.stderr
    r = cli(url, "read", sid, cue, "--answer", "blend", "--mode", "mean", "-o", tmp_path / "rb")
    assert r.returncode == 3 and "answer" in r.stderr
    # resize, export, import, show, list, delete
    r = cli(url, "resize", sid, "--clusters", "8", "--seed", "1")
    assert r.returncode == 0 and "H=8" in r.stdout, r.stdout + r.stderr
    mem = tmp_path / "memory.json"
    assert cli(url, "export", sid, "-o", mem).returncode == 0
    assert json.loads(mem.read_text())["format"] == "vbmem-memory"
    r = cli(url, "--json", "import", sid, mem)
    assert r.returncode == 0 and json.loads(r.stdout)["clusters"] == 8, r.stderr
    r = cli(url, "session", "show", sid)
    assert r.returncode == 0 and "clusters:       8" in r.stdout
    r = cli(url, "session", "list", "--json")
    assert r.returncode == 0 and sid in [s["id"] for s in json.loads(r.stdout)]
    assert cli(url, "session", "delete", sid).returncode == 0
    r = cli(url, "session", "show", sid)
    assert r.returncode == 3 and "404" in r.stderr


def test_cli_write_needs_replace_or_append(url, png_dir, pngs, tmp_path):
    """`vbmem write` into a session that holds frames is refused without --replace or --append
    (nothing is written); an empty session takes a replace. Non-PNG entries of a directory are
    named as skipped, and a server error about an image names its file."""
    sid = cli(url, "session", "create").stdout.strip()
    d = tmp_path / "episode"
    d.mkdir()
    for i in range(12):
        (d / ("a%02d.png" % i)).write_bytes(pngs[i])
    (d / "notes.txt").write_text("not an image")
    (d / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    r = cli(url, "--json", "write", sid, d)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[-1]["frames"] == 12 and json.loads(r.stdout)[0]["mode"] == "replace"
    assert "skipped %s" % (d / "notes.txt") in r.stderr and "skipped %s" % (d / "photo.jpg") in r.stderr, r.stderr
    # the session holds frames now: neither replaced nor appended without being told
    r = cli(url, "write", sid, png_dir)
    assert r.returncode == 2 and "holds 12 frames" in r.stderr and "--replace" in r.stderr \
        and "--append" in r.stderr, r.stdout + r.stderr
    s = json.loads(cli(url, "--json", "session", "show", sid).stdout)
    assert s["frames"] == 12 and s["version"] == 2, s
    r = cli(url, "write", sid, d, "--append")
    assert r.returncode == 0 and "skipped 2 files that are not .png" in r.stdout, r.stdout + r.stderr
    r = cli(url, "--json", "write", sid, d, "--replace")
    assert r.returncode == 0 and json.loads(r.stdout)[-1]["frames"] == 12, r.stderr
    assert cli(url, "write", sid, d, "--replace", "--append").returncode == 2
    # a file the server refuses is named (not only observations[k])
    (d / "a03.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    r = cli(url, "write", sid, d, "--append")
    assert r.returncode == 3 and str(d / "a03.png") in r.stderr, r.stderr
    r = cli(url, "--json", "write", sid, d, "--append")
    assert r.returncode == 3 and json.loads(r.stderr.splitlines()[-1])["file"] == str(d / "a03.png"), r.stderr
    r = cli(url, "write", "--help")
    assert "--replace" in r.stdout and "no default" in r.stdout, r.stdout
    assert cli(url, "session", "delete", sid).returncode == 0


def test_cli_converts_images_as_the_page(url, client, tmp_path):
    """`vbmem write` takes the PNGs the web page takes and converts them by the same rule
    (tests/clients/convert_fixtures.py; tests/browser/test_page.mjs checks the page on the same
    files): grey PNGs of the model's size (8 or 16 bits) go untouched; colour, alpha or another
    size are converted (named on stderr) to exactly the pixels their definition gives (a session
    written by the CLI equals one written through the API with those pixels); a 16-bit colour
    PNG is refused by name, nothing written."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from convert_fixtures import fixtures
    fx = fixtures()
    for name, (data, _) in fx.items():
        (tmp_path / name).write_bytes(data)
    names = ["rgb56.png", "rgba28.png", "grey28.png", "grey16.png", "grey14.png"] * 2  # (H = 10: 10 frames)
    a = cli(url, "session", "create").stdout.strip()
    r = cli(url, "write", a, *[tmp_path / n for n in names], "--seed", "3")
    assert r.returncode == 0, r.stderr
    ma = client.export_memory(a)
    for n in names:
        said = "converted %s" % (tmp_path / n) in r.stderr
        assert said == fx[n][1]["converted"], (n, r.stderr)
    # the same episode through the API, the converted files replaced by their expected pixels
    b = client.create_session(model=MODEL)
    want = [vbmem.png.encode_png(bytes(fx[n][1]["grey"]), 28, 28) if fx[n][1]["converted"] else fx[n][0]
            for n in names]
    client.write(b.id, images=want, seed=3)
    mb = client.export_memory(b.id)
    assert ma["posterior"] == mb["posterior"], "the CLI sent other pixels than the rule gives"
    assert "converted %s (grey 14x14 to grey 28x28)" % (tmp_path / "grey14.png") in r.stderr, r.stderr
    # 16-bit colour: refused by name, nothing written
    v = client.get_session(a).version
    r = cli(url, "write", a, tmp_path / "grey28.png", tmp_path / "rgb16.png", "--append")
    assert r.returncode == 2 and str(tmp_path / "rgb16.png") in r.stderr \
        and fx["rgb16.png"][1]["refused"] in r.stderr, r.stderr
    assert client.get_session(a).version == v
    client.delete_session(a)
    client.delete_session(b.id)


def test_cli_progress_bar_on_a_terminal(url, png_dir):
    import pty
    sid = cli(url, "session", "create").stdout.strip()
    master, slave = pty.openpty()
    e = dict(os.environ, PYTHONPATH=PKG, VBMEM_URL=url)
    p = subprocess.Popen([sys.executable, "-m", "vbmem", "write", sid, png_dir, "--episode", "50"],
                         env=e, stdout=subprocess.PIPE, stderr=slave)
    out, _ = p.communicate(timeout=120)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    assert p.returncode == 0 and b"2 episodes" in out
    assert b"50/100 frames" in err and b"100/100 frames" in err, err
    assert cli(url, "session", "delete", sid).returncode == 0


def test_cli_npy_codes(url, tmp_path):
    r = cli(url, "session", "create", "--code-size", "4", "--kind", "gaussian", "--rows", "2")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    rows = [[float(i), 0.5, -1.0, 2.0] for i in range(10)]
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (10, 4), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    npy = tmp_path / "codes.npy"
    npy.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                    + struct.pack("<40f", *[v for r in rows for v in r]))
    r = cli(url, "--json", "write", sid, npy, "--episode", "4")
    assert r.returncode == 0, r.stderr
    assert [x["frames"] for x in json.loads(r.stdout)] == [4, 8, 10]
    r = cli(url, "--json", "sample", sid, "-n", "3")
    assert r.returncode == 0 and len(json.loads(r.stdout)["codes"]) == 3, r.stderr
    assert cli(url, "session", "delete", sid).returncode == 0


def test_cli_forget(url, png_dir, tmp_path):
    """vbmem forget SESSION FILES|DIR|.npy: PNG files and a .npy of codes, its lines and --json."""
    r = cli(url, "session", "create", "--kind", "mixture", "--clusters", "2", "--retain-max", "20")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    files = sorted(png_dir.iterdir())[:6]
    assert cli(url, "write", sid, *files, "--seed", "1").returncode == 0
    r = cli(url, "forget", sid, files[4], "--seed", "1", "--if-match", "2")
    assert r.returncode == 0, r.stderr
    assert "forgot 1 item (exact" in r.stdout and "cue 0: retained code 4" in r.stdout, r.stdout
    r = cli(url, "--json", "forget", sid, files[1], files[0])
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["version"] == 4 and [x["item"] for x in out["removed"]] == [1, 0] and out["frames"] == 3
    r = cli(url, "forget", sid, files[5], "--if-match", "2")
    assert r.returncode == 3 and "409" in r.stderr, r.stderr
    r = cli(url, "session", "create", "--code-size", "4", "--kind", "gaussian", "--rows", "2")
    lat = r.stdout.strip()
    rows = [[float(i), 0.5, -1.0, 2.0] for i in range(6)]
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 4), }"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    npy = tmp_path / "cue.npy"
    npy.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                    + struct.pack("<4d", *rows[2]))
    from vbmem.cli import read_npy
    assert read_npy(str(npy)) == [rows[2]]
    assert cli(url, "write", lat, "--seed", "1", *[]).returncode != 0  # FILES are required
    c = vbmem.Client(url, retries=0)
    c.write(lat, codes=rows, seed=1)
    r = cli(url, "forget", lat, npy)
    assert r.returncode == 0 and "approximate" in r.stdout and "no retained code" in r.stdout, r.stdout
    assert c.get_session(lat).frames == 5
    r = cli(url, "forget", lat, tmp_path / "missing.png")
    assert r.returncode == 2
    for x in (sid, lat):
        assert cli(url, "session", "delete", x).returncode == 0


def test_cli_exit_codes_and_help(url, tmp_path):
    assert cli(url, "bogus").returncode == 2
    assert cli(url, "sample").returncode == 2  # SESSION missing
    assert cli(url, "write", "0" * 32, tmp_path / "missing").returncode == 2
    r = cli(url, "session", "show", "0" * 32)
    assert r.returncode == 3 and "404" in r.stderr
    r = cli(url, "--json", "session", "create", "--code-size", "4", "--kind", "tree", "--clusters", "0")
    assert r.returncode == 3 and json.loads(r.stderr)["status"] == 422
    r = cli("http://127.0.0.1:1", "--retries", "0", "models")
    assert r.returncode == 4 and "cannot reach" in r.stderr
    r = cli(url, "models", env={"VBMEM_URL": "http://127.0.0.1:1"}, )
    assert r.returncode == 4
    for cmd in ([], ["models"], ["health"], ["session"], ["session", "create"], ["session", "list"],
                ["session", "show"], ["session", "delete"], ["write"], ["sample"], ["read"],
                ["resize"], ["export"], ["import"]):
        r = cli(url, *cmd, "--help")
        assert r.returncode == 0 and "usage: vbmem" in r.stdout, cmd
    r = cli(url, "--json", "health")
    assert r.returncode == 0 and json.loads(r.stdout)["readyz"]["status"] == "ready"


# ------------------------------------------------------------------------- installation


def _pip_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONPATH": ""})
    # no network: an unreachable proxy makes any attempt to use one fail
    env.update({"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"})
    return env


def _check_installed(venv, url):
    py = os.path.join(venv, "bin", "python")
    code = ("import vbmem, sys; c = vbmem.Client(sys.argv[1]); "
            "assert vbmem.__file__.startswith(sys.prefix), vbmem.__file__; "
            "print(c.models()[0].name)")
    r = subprocess.run([py, "-c", code, url], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0 and r.stdout.strip() == MODEL, r.stderr
    r = subprocess.run([os.path.join(venv, "bin", "vbmem"), "--url", url, "models"],
                       capture_output=True, text=True, cwd="/")
    assert r.returncode == 0 and MODEL in r.stdout, r.stderr


def test_pip_install_offline(tmp_path, url):
    """pip install clients/python offline, both ways documented in clients/python/README.md."""
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    env = _pip_env()
    # 1. a venv that sees Debian's python3-setuptools and python3-wheel: pip install DIR
    v1 = str(tmp_path / "v1")
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", v1], check=True)
    r = subprocess.run([v1 + "/bin/pip", "install", "--no-index", "--no-build-isolation", str(src)],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    _check_installed(v1, url)
    # 2. a bare venv: build the wheel with Debian's pip, install the wheel
    wheels = tmp_path / "wheels"
    r = subprocess.run(["/usr/bin/python3", "-m", "pip", "wheel", "--no-index", "--no-build-isolation",
                        "--no-deps", "-w", str(wheels), str(src)], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = list(wheels.glob("vbmem-*.whl"))
    v2 = str(tmp_path / "v2")
    subprocess.run(["/usr/bin/python3", "-m", "venv", v2], check=True)
    r = subprocess.run([v2 + "/bin/pip", "install", "--no-index", str(whl)], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    _check_installed(v2, url)
    r = subprocess.run([v2 + "/bin/python", "-c", "import numpy"], capture_output=True)
    assert r.returncode != 0  # a bare environment: the client needs nothing but the standard library


# ------------------------------------------------------------------------------ https (i16)


def test_https_with_a_ca_file(tmp_path):
    """The client and the CLI over TLS: a throwaway self-signed certificate (openssl) trusted
    through ca_file / --ca-file / $VBMEM_CA_FILE or an ssl.SSLContext; without it the server's
    certificate is refused (ConnectionFailed; the CLI exits with EXIT_CONNECTION)."""
    import ssl
    from vbmem.cli import EXIT_CONNECTION
    binary = os.path.abspath(os.environ.get("VBMEMD") or os.path.join(ROOT, "build", "vbmemd"))
    crt, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    d = Daemon(binary, "--threads", "1", "--tls-cert", crt, "--tls-key", key)
    try:
        url = "https://127.0.0.1:%d" % d.port
        c = vbmem.Client(url, retries=0, ca_file=crt)
        s = latent(c)
        c.write(s.id, codes=CODES)
        assert c.get_session(s.id).version == 2
        ctx = ssl.create_default_context(cafile=crt)
        assert vbmem.Client(url, retries=0, ssl_context=ctx).get_session(s.id).id == s.id
        with pytest.raises(vbmem.ConnectionFailed) as e:
            vbmem.Client(url, retries=0).get_session(s.id)
        assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)
        with pytest.raises(vbmem.ConnectionFailed):  # plain HTTP to the TLS port
            vbmem.Client("http://127.0.0.1:%d" % d.port, retries=0).healthz()
        r = cli(url, "--ca-file", crt, "--json", "session", "list")
        assert r.returncode == 0 and s.id in r.stdout, r.stderr
        r = cli(url, "--json", "session", "list", env={"VBMEM_CA_FILE": crt})
        assert r.returncode == 0 and s.id in r.stdout, r.stderr
        r = cli(url, "--json", "session", "list")
        assert r.returncode == EXIT_CONNECTION and s.id not in r.stdout, r.returncode
    finally:
        assert d.stop() == 0, "\n".join(d.lines[-20:])
