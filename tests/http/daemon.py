"""daemon.py -- owns starting a real vbmemd on an ephemeral loopback port, talking HTTP/1.1 to it
(keep-alive, stdlib only) and validating every response against proto/openapi.yaml."""
import base64
import http.client
import json
import os
import re
import signal
import struct
import subprocess
import threading
import time

try:
    import jsonschema
    import yaml
except ImportError as e:  # never a skip: without them no response would be checked
    raise SystemExit("%s: every response is validated against proto/openapi.yaml, which needs "
                     "python3-jsonschema and python3-yaml (deploy/install-deps.sh installs them)" % e)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPENAPI = os.path.join(ROOT, "proto", "openapi.yaml")


class Contract:
    """The OpenAPI document: route templates and response schemas."""

    def __init__(self):
        self.routes = []
        with open(OPENAPI) as f:
            self.doc = yaml.safe_load(f)
        for path, item in self.doc["paths"].items():
            regex = "^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"
            for method in ("get", "post", "put", "delete", "patch"):
                if method in item:
                    self.routes.append((method.upper(), path, re.compile(regex)))
        self.checked = 0

    def route_set(self):
        return {(m, p) for m, p, _ in self.routes}

    def _resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            parts = node["$ref"].lstrip("#/").split("/")
            node = self.doc
            for p in parts:
                node = node[p]
        return node

    def validate(self, method, path, status, ctype, body):
        """Raise AssertionError when the response is not what the document says."""
        path = path.split("?")[0]
        ops = [(m, p) for m, p, rx in self.routes if rx.match(path)]
        methods = [m for m, _ in ops]
        if not ops or method not in methods:
            want = 404 if not ops else 405
            assert status == want, f"{method} {path}: expected {want}, got {status}"
            schema = self.doc["components"]["schemas"]["Problem"]
            ctype_want = "application/problem+json"
        else:
            tmpl = [p for m, p in ops if m == method][0]
            op = self.doc["paths"][tmpl][method.lower()]
            resp = op["responses"].get(str(status))
            assert resp is not None, f"{method} {tmpl}: status {status} is not documented"
            resp = self._resolve(resp)
            if "content" not in resp:
                assert not body, f"{method} {tmpl} {status}: unexpected body"
                return
            ctype_want, media = next(iter(resp["content"].items()))
            schema = media["schema"]
        got = ctype.split(";")[0].strip()
        if ctype_want.endswith("/*"):  # '*/*' (the web page's files): any type, any body
            if ctype_want == "*/*" or got.startswith(ctype_want[:-1]):
                self.checked += 1
                return
        assert got == ctype_want, \
            f"{method} {path} {status}: content type {ctype}, documented {ctype_want}"
        if ctype_want.endswith("json"):
            resolver = jsonschema.RefResolver.from_schema(self.doc)
            jsonschema.Draft202012Validator(schema, resolver=resolver).validate(json.loads(body))
        self.checked += 1


CONTRACT = Contract()


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None


class Client:
    """One keep-alive connection; every response is checked against the contract."""

    def __init__(self, port, key=None, timeout=60):
        self.port = port
        self.key = key
        self.timeout = timeout
        self.conn = None

    def request(self, method, path, body=None, headers=None, raw=None, ctype="application/json",
                validate=True):
        h = {}
        if self.key is not None:
            h["Authorization"] = "Bearer " + self.key
        data = None
        if raw is not None:
            data = raw
        elif body is not None:
            data = json.dumps(body).encode()
        if data is not None and ctype is not None:
            h["Content-Type"] = ctype
        h.update(headers or {})
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=h)
                r = self.conn.getresponse()
                payload = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                break
            except (ConnectionError, http.client.RemoteDisconnected, BrokenPipeError):
                self.close()
                if attempt == 1:
                    raise
        resp = Response(r.status, r.getheaders(), payload)
        if validate:
            CONTRACT.validate(method, path, r.status, resp.header("Content-Type") or "", payload)
            if r.status >= 400:
                p = resp.json()
                assert p["status"] == r.status, p
        return resp

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Daemon:
    """A vbmemd process on 127.0.0.1 with a kernel-chosen port; stderr is collected."""

    def __init__(self, binary, *args, env=None, wrapper=None):
        cmd = list(wrapper or []) + [binary, "--listen", "127.0.0.1:0"] + list(args)
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=full_env)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def pump():
            for raw in self.proc.stderr:
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                if self.port is None and '"msg":"listening"' in line:
                    self.port = json.loads(line)["port"]
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=pump, daemon=True)
        self.thread.start()
        if not ready.wait(60) or self.port is None:
            self.proc.kill()
            raise RuntimeError("vbmemd did not start: " + "\n".join(self.lines[-20:]))

    def client(self, key=None):
        return Client(self.port, key)

    def logs(self):
        out = []
        for line in list(self.lines):
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"raw": line})
        return out

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=30):
        """SIGTERM and wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise AssertionError("vbmemd did not stop within %ss" % timeout)
        self.thread.join(5)
        return rc

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


# ---- the daemon's test hook: a write held until the test releases it ----

class Holds:
    """vbmemd's test hook, --test-hold-writes DIR (hidden from --help, command line only, never
    set in production): a write (episodes) of session ID that finds DIR/ID.hold creates
    DIR/ID.held and waits there, its session's write lock held, until DIR/ID.hold is removed.
    Tests show with it what is served while a write runs, by events instead of durations."""

    def __init__(self):
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="vbmem-hold-")

    def args(self):
        """The daemon's options that turn the hook on for this directory."""
        return ("--test-hold-writes", self.dir)

    def hold(self, sid):
        """Writes of session sid that start from now on wait until release(sid)."""
        open(os.path.join(self.dir, sid + ".hold"), "w").close()

    def wait_held(self, sid, timeout=120):
        """Wait until a write of sid waits in the hook (a bound on a hang: fails after timeout s)."""
        path = os.path.join(self.dir, sid + ".held")
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            expect(time.monotonic() < deadline, "no write of %s reached the hook in %d s" % (sid, timeout))
            time.sleep(0.002)

    def release(self, sid):
        """Let the held write of sid (and later ones) go on."""
        for ext in (".hold", ".held"):
            try:
                os.remove(os.path.join(self.dir, sid + ext))
            except FileNotFoundError:
                pass

    def cleanup(self):
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


def answered(what, fn, *args, **kw):
    """fn(*args, **kw) (a request); a client timeout (the Client's, a bound on a hang) becomes a
    failure naming what was not answered."""
    import socket
    try:
        return fn(*args, **kw)
    except (socket.timeout, TimeoutError) as e:
        raise AssertionError("%s: not answered (%s)" % (what, e))


# ---- independent computations: vbmem-solve, and the read's random streams ----

def vbmem_solve(vbmemd, job):
    """Run the vbmem-solve built next to vbmemd (one libvbmem call in a process of its own, job
    and result in the JSON of proto/solve-job.md) on job; returns the result object. A missing
    vbmem-solve is a failure (ninja -C build builds it), never a skip."""
    solve = os.path.join(os.path.dirname(vbmemd), "vbmem-solve")
    expect(os.access(solve, os.X_OK), "%s is missing: build it (ninja -C build)" % solve)
    p = subprocess.run([solve], input=json.dumps(job), capture_output=True, text=True, timeout=600)
    expect(p.returncode == 0, "vbmem-solve %s: exit %d: %s %s" % (job.get("op"), p.returncode,
                                                                 p.stdout[-400:], p.stderr[-400:]))
    return json.loads(p.stdout)


_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _splitmix64_mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def derive_seed(seed, stream):
    """The seed of random stream `stream` derived from a request's seed, as the engine's
    eng_derive_seed (src/engine/recall.c) defines it: the first output of the xoshiro256**
    generator (src/numerics/rng.c: state seeded by splitmix64) seeded with
    seed ^ (stream * 0x9E3779B97F4A7C15), written out here from the algorithms' definitions."""
    x = (seed ^ ((stream * _GOLDEN) & _M64)) & _M64
    s1 = _splitmix64_mix((x + 2 * _GOLDEN) & _M64)  # state word 1 (rng_next's output uses it alone)
    r = (s1 * 5) & _M64
    r = ((r << 7) | (r >> 57)) & _M64
    return (r * 9) & _M64


# The read's random streams (src/engine/recall.h)
STREAM_START, STREAM_PIXELS, STREAM_STEP_PIXELS = 1, 2, 3


def pixel_seed_for_decode(seed, stream):
    """The seed to give POST /v1/models/{name}/decode (which draws its pixels from stream
    STREAM_PIXELS of its seed) so that it draws the pixels of stream `stream` of `seed`:
    derive_seed depends on seed ^ stream * golden only, so the streams' xor moves one onto the
    other. A string (seeds above 2^63 - 1 are sent as decimal strings)."""
    return str((seed ^ ((stream * _GOLDEN) & _M64) ^ ((STREAM_PIXELS * _GOLDEN) & _M64)) & _M64)


def same_bits(a, b):
    """1 when two JSON values are equal bit for bit: every number with the same repr (shortest
    round-trip decimal of a double, so -0.0 differs from 0.0), strings and shapes equal."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def tensor(rows):
    """A float32 base64 tensor of a list of equal-length rows."""
    T, C = len(rows), len(rows[0])
    data = struct.pack("<%df" % (T * C), *[x for r in rows for x in r])
    return {"dtype": "float32", "shape": [T, C], "data": base64.b64encode(data).decode()}


def untensor(t):
    T, C = t["shape"]
    vals = struct.unpack("<%df" % (T * C), base64.b64decode(t["data"]))
    return [list(vals[i * C:(i + 1) * C]) for i in range(T)]


# ---- assertions and the runner shared by the integration test scripts ----

def expect(cond, msg="assertion failed"):
    if not cond:
        raise AssertionError(msg)


def ok(resp, status=200):
    """The response has this status; its JSON body (or None)."""
    expect(resp.status == status, "expected %d, got %d: %s" % (status, resp.status, resp.body[:400]))
    return resp.json() if resp.body else None


def problem(resp, status, field=None, detail=None):
    """An RFC 9457 problem with this status (and field prefix, and detail substring when given);
    429 and 503 carry Retry-After. Returns the problem object."""
    expect(resp.status == status, "expected %d, got %d: %s" % (status, resp.status, resp.body[:300]))
    expect((resp.header("Content-Type") or "").startswith("application/problem+json"),
           "not problem+json: %s" % resp.header("Content-Type"))
    p = resp.json()
    for k in ("type", "title", "status", "detail"):
        expect(k in p, "problem lacks %s: %s" % (k, p))
    if field is not None:
        expect(p.get("field", "").startswith(field), "field %r, expected %r (%s)" % (p.get("field"), field, p))
    if detail is not None:
        expect(detail in p["detail"], "detail %r lacks %r" % (p["detail"], detail))
    if p.get("field"):
        # the error record's invariant: the detail starts with its field, once
        f = p["field"] + ": "
        expect(p["detail"].startswith(f) and not p["detail"][len(f):].startswith(f),
               "detail %r does not start with its field %r once" % (p["detail"], p["field"]))
    if status in (429, 503):
        expect(resp.header("Retry-After") is not None, "no Retry-After on %d" % status)
    return p


def run_tests(tests, only=None, skip=(), after_each=None):
    """Run each test function (those named in only, by full or short name, when given), print
    one line each; after_each() runs after every test. A name in only that names no test is a
    failure, and so is a run in which no test ran (a selection that matches nothing, or only
    tests in skip). Returns (passed, failed)."""
    passed = failed = 0
    if only is not None:
        known = {t.__name__ for t in tests} | {t.__name__[5:] for t in tests}
        for name in only:
            if name not in known:
                failed += 1
                print("FAIL %-48s  no such test (--only)" % name, flush=True)
    for t in tests:
        if only is not None and t.__name__ not in only and t.__name__[5:] not in only:
            continue
        if t in skip:
            print("skip %-48s  (not run in this configuration)" % t.__name__, flush=True)
            continue
        t0 = time.time()
        try:
            t()
            passed += 1
            print("ok   %-48s %6.2fs" % (t.__name__, time.time() - t0), flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print("FAIL %-48s %6.2fs  %s: %s" % (t.__name__, time.time() - t0, type(e).__name__, e), flush=True)
        if after_each is not None:
            after_each()
    if passed + failed == 0:
        failed += 1
        print("FAIL no test ran", flush=True)
    return passed, failed


def usage_error(msg):
    """A SystemExit with status 2 for a bad command line (the message on stderr)."""
    import sys
    print(msg, file=sys.stderr)
    return SystemExit(2)


def parse_args(args):
    """The scripts' command line: [--quick] [--wrapper "CMD ARGS"] [--only a,b] VBMEMD.
    Returns (absolute path of VBMEMD or None, wrapper argv or None, quick, only or None); an
    unknown option, an option without its value or a second VBMEMD exits with status 2."""
    binary, wrapper, quick, only = None, None, False, None
    args = list(args)
    while args:
        a = args.pop(0)
        if a == "--quick":
            quick = True
        elif a in ("--wrapper", "--only") and not args:
            raise usage_error("%s needs a value" % a)
        elif a == "--wrapper":
            wrapper = args.pop(0).split()
        elif a == "--only":
            only = args.pop(0).split(",")
        elif a.startswith("-") or binary is not None:
            raise usage_error("unexpected argument %r" % a)
        else:
            binary = a
    return (os.path.abspath(binary) if binary else None), wrapper, quick, only


def run_with_shared_daemon(shared, tests, only=None):
    """run_tests with a daemon the tests share, stopped at the end (a non-zero exit of it is a
    failure); prints the totals. Returns the process exit code (0 when everything passed)."""
    passed = failed = 0
    t_all = time.time()
    try:
        passed, failed = run_tests(tests, only)
    finally:
        rc = shared.stop()
        if rc != 0:
            failed += 1
            print("FAIL shared daemon exited with %s" % rc)
            print("\n".join(shared.lines[-20:]))
    print("responses validated against proto/openapi.yaml: %d (%.1fs)" % (CONTRACT.checked, time.time() - t_all))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0
