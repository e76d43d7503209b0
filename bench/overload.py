#!/usr/bin/python3
"""overload.py -- owns vbmemd's overload, slowloris and soak benchmarks on loopback (wrk + the
Lua script bench/wrk_vbmem.lua) and their short versions that the test suite runs.

usage: bench/overload.py overload  [--build DIR] [--seconds S] [--factor F] [--quick]
       bench/overload.py slowloris [--build DIR] [--max-connections M] [--quick]
       bench/overload.py soak      [--build DIR] [--seconds S] [--csv F] [--png F] [--quick]
       bench/overload.py absent-readers [--build DIR] [--count N] [--levels 6,12] [--budget BYTES]
Every run starts its own vbmemd (BUILD/vbmemd) on an ephemeral loopback port and stops it.
Each prints one JSON line per measurement and a summary; with --quick it is a bounded test that
exits 1 when a check fails (only counts and status codes are checked, never a latency). absent-readers has no --quick:
its short version is test_answers_held_for_absent_readers in tests/http/test_http.py."""
import argparse
import base64
import http.client
import json
import math
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LUA = os.path.join(ROOT, "bench", "wrk_vbmem.lua")
T, C, H, K = 64, 200, 10, 6  # the paper's mixture configuration (bench-http's writes)


def log(*a):
    print(*a, flush=True)


# ---- the daemon ------------------------------------------------------------------------------


class Daemon:
    """A vbmemd on 127.0.0.1:0 with latent sessions only (no models); stderr goes to a file."""

    def __init__(self, build, *args, models=False):
        self.logf = tempfile.NamedTemporaryFile(prefix="vbmemd-", suffix=".log", delete=False)
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        cmd = [os.path.join(build, "vbmemd"), "--listen", "127.0.0.1:0", "--log-level", "warn"]
        if models:
            cmd += ["--models-dir", os.path.join(ROOT, "models")]
        else:
            cmd += ["--models-dir", "", "--default-model", ""]
        cmd += list(args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.logf, env=env)
        self.port = None
        for _ in range(400):
            with open(self.logf.name) as f:
                for line in f:
                    if '"listening"' in line:
                        self.port = json.loads(line)["port"]
            if self.port or self.proc.poll() is not None:
                break
            time.sleep(0.025)
        if not self.port:
            raise RuntimeError("vbmemd did not start: " + open(self.logf.name).read())

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def cpu_s(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.logf.name)
        return self.proc.returncode


def call(port, method, path, body=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data,
                  headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


# ---- request bodies and sessions ----------------------------------------------------------


def codes(rng, t, c_size=C, scale=3.0):
    """t x c_size float32 codes around H centres (bench-http's shape), little-endian base64."""
    vals = [scale * math.sin((i % H) * 1.7 + c * 0.31) + rng.random() - 0.5
            for i in range(t) for c in range(c_size)]
    return base64.b64encode(struct.pack("<%df" % len(vals), *vals)).decode()


def prepare(port, nsessions, workdir, mix, seed=1, image_sessions=0):
    """Create nsessions latent mixture sessions (and image_sessions sessions on the default
    model, code size 64), write one episode to each, and write the wrk plan (bodies and session
    ids) into workdir; returns the plan's path."""
    rng = random.Random(seed)
    ids = []
    write = {"mode": "replace", "iterations": 10, "seed": 1,
             "codes": {"mu": {"dtype": "float32", "shape": [T, C], "data": codes(rng, T)}}}
    for _ in range(nsessions):
        st, _, body = call(port, "POST", "/v1/sessions",
                           {"code_size": C, "memory": {"kind": "mixture", "clusters": H,
                                                       "rows": K}})
        assert st == 201, (st, body)
        sid = json.loads(body)["id"]
        st, _, body = call(port, "POST", "/v1/sessions/%s/episodes" % sid, write)
        assert st == 200, (st, body)
        ids.append(sid)
    bodies = {
        "write": write,
        "samples": {"count": 64, "seed": 3, "encoding": "base64"},
        "reads": {"query": {"mu": {"dtype": "float32", "shape": [4, C], "data": codes(rng, 4)}},
                  "iterations": 3, "seed": 5, "mode": "mean"},
    }
    iids = []
    if image_sessions:
        bodies["iwrite"] = {"mode": "replace", "seed": 2, "codes": {"mu": {
            "dtype": "float32", "shape": [64, 64], "data": codes(rng, 64, 64, 1.0)}}}
        bodies["isamples"] = {"count": 8, "seed": 4, "format": "png"}
        for _ in range(image_sessions):
            st, _, body = call(port, "POST", "/v1/sessions", {})
            assert st == 201, (st, body)
            iids.append(json.loads(body)["id"])
            st, _, body = call(port, "POST", "/v1/sessions/%s/episodes" % iids[-1],
                               bodies["iwrite"])
            assert st == 200, (st, body[:300])
    lines = ["mix\t" + " ".join("%s:%d" % kv for kv in mix.items())]
    for k, b in bodies.items():
        p = os.path.join(workdir, k + ".json")
        with open(p, "w") as f:
            json.dump(b, f)
        lines.append("%s\t%s" % (k, p))
        # every kind must be valid on these sessions before it is used as load
        if k in ("samples", "reads", "isamples"):
            sid = iids[0] if k == "isamples" else ids[0]
            st, _, body = call(port, "POST", "/v1/sessions/%s/%s" % (sid, k.lstrip("i")), b)
            assert st == 200, (k, st, body[:300])
    lines += ["session\t" + s for s in ids]
    lines += ["isession\t" + s for s in iids]
    plan = os.path.join(workdir, "plan.tsv")
    with open(plan, "w") as f:
        f.write("\n".join(lines) + "\n")
    return plan


def wrk(port, plan, conns, seconds, rate=0, threads=2, timing=True, path="/", timeout_s=10,
        script=LUA):
    """Run wrk against vbmemd; returns the Lua script's JSON result plus wrk's req/s."""
    out = tempfile.NamedTemporaryFile(prefix="wrk-", suffix=".json", delete=False).name
    env = dict(os.environ, VBM_PLAN=plan or "", VBM_OUT=out, VBM_RATE=str(rate),
               VBM_THREADS=str(threads), VBM_LAT="1" if timing else "0")
    cmd = ["wrk", "-t%d" % threads, "-c%d" % max(conns, threads), "-d%ds" % seconds,
           "--timeout", "%ds" % timeout_s]
    if script:
        cmd += ["-s", script]
    cmd.append("http://127.0.0.1:%d%s" % (port, path))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError("wrk failed: " + p.stdout + p.stderr)
    res = {}
    if script == LUA:
        with open(out) as f:
            res = json.loads(f.read())
    os.unlink(out)
    res["wrk_cpu_s"] = round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 2)
    for line in p.stdout.splitlines():
        if line.startswith("Requests/sec:"):
            res["wrk_rps"] = float(line.split()[1])
        if "Non-2xx or 3xx responses" in line:
            res["wrk_non2xx"] = int(line.split()[-1])
    return res


def ok_count(res):
    return sum(v for k, v in res["status"].items() if 200 <= int(k) < 300)


def only_2xx_503(res):
    """The overload contract: every answer is a 2xx or a 503 with Retry-After, and no socket
    error or timeout. Returns a list of violations (empty when it holds)."""
    bad = ["status %s x %d" % (k, v) for k, v in res["status"].items()
           if not (200 <= int(k) < 300 or int(k) == 503)]
    if res["retry_after_missing"]:
        bad.append("%d 503/429 without Retry-After" % res["retry_after_missing"])
    bad += ["%s errors: %d" % (k, v) for k, v in res["errors"].items()
            if v and k != "status"]
    return bad


# ---- overload ------------------------------------------------------------------------------


def cmd_overload(a):
    mix = {"write": 1} if a.mix == "write" else {"write": 4, "samples": 2, "reads": 1, "get": 1}
    qd = str(a.queue_depth)
    d = Daemon(a.build, "--threads", str(a.threads), "--queue-depth", qd,
               "--max-connections", str(a.max_connections), *a.extra)
    failures = []
    try:
        with tempfile.TemporaryDirectory() as wd:
            plan = prepare(d.port, a.sessions, wd, mix)
            if not a.quick:
                # what wrk's Lua callbacks cost: /healthz (answered inline) without a script and
                # with this script's request()/response() (a plan of GET kinds is not needed:
                # request() is replaced by a plain GET through path)
                plain = wrk(d.port, None, 16, 5, path="/healthz", script=None)
                hz_plan = os.path.join(wd, "hz.lua")
                with open(hz_plan, "w") as f:
                    f.write('counts = {}\nfunction response(status, headers, body)\n'
                            '  counts[status] = (counts[status] or 0) + 1\nend\n')
                scripted = wrk(d.port, None, 16, 5, path="/healthz", script=hz_plan)
                log(json.dumps({"step": "wrk-cost", "healthz_rps_plain": plain["wrk_rps"],
                                "healthz_rps_with_response_cb": scripted["wrk_rps"],
                                "ratio": plain["wrk_rps"] / scripted["wrk_rps"]}))
            # capacity: closed loop, enough connections to keep every worker busy
            cap_conns = 4 * a.threads
            cap = wrk(d.port, plan, cap_conns, a.cap_seconds)
            capacity = ok_count(cap) / cap["duration_s"]
            cpu0 = d.cpu_s()
            log(json.dumps(dict(step="capacity", connections=cap_conns, ok_per_s=capacity, **cap)))
            failures += ["capacity run: " + b for b in only_2xx_503(cap)]
            if ok_count(cap) == 0:
                failures.append("capacity run: no request succeeded")
            # overload: open loop at factor x capacity over many connections; --closed: no
            # pacing at all (every connection sends again as soon as it has its answer, 503s
            # included: clients that ignore Retry-After), which overloads whatever the capacity
            rate = 0 if a.closed else a.factor * capacity
            ov = wrk(d.port, plan, a.connections, a.seconds, rate=rate)
            served = ok_count(ov) / ov["duration_s"]
            log(json.dumps(dict(step="overload", factor=a.factor, offered_per_s=rate,
                                connections=a.connections, ok_per_s=served,
                                offered_actual_per_s=ov["requests"] / ov["duration_s"],
                                daemon_cpu_s=d.cpu_s() - cpu0, **ov)))
            failures += ["overload run: " + b for b in only_2xx_503(ov)]
            n503 = ov["status"].get("503", 0)
            if n503 == 0:
                failures.append("overload run: no 503 (the load did not overload the daemon)")
            if ok_count(ov) == 0:
                failures.append("overload run: no request was admitted")
            # the daemon recovers: /readyz is 200 again once the queue has drained (it is 503
            # while the queue is full, which it may still be right after the load stops)
            t_end = time.monotonic() + 60
            while True:
                st, _, _ = call(d.port, "GET", "/readyz")
                if st == 200 or time.monotonic() > t_end:
                    break
                time.sleep(0.2)
            if st != 200:
                failures.append("after overload: /readyz still answered %d after 60 s" % st)
            log("summary: capacity %.0f ok/s at %d connections; at %s (%.0f offered/s, %d "
                "connections): %.0f ok/s, 503 %d of %d answers, admitted p50 %s ms p99 %s ms "
                "max %s ms (server side, writes: queue wait p99 %s ms, headers to answer p99 %s ms); "
                "other statuses/errors: %s" % (
                    capacity, cap_conns, "closed loop" if a.closed else "%.1fx" % a.factor,
                    ov["requests"] / ov["duration_s"], a.connections, served, n503,
                    ov["requests"], ov["admitted_p50_ms"], ov["admitted_p99_ms"],
                    ov["admitted_max_ms"], ov["server_queue_p99_ms"], ov["server_total_p99_ms"],
                    only_2xx_503(ov) or "none"))
    finally:
        rc = d.stop()
        if rc != 0:
            failures.append("vbmemd exited %d on SIGTERM" % rc)
    return failures


# ---- slowloris -----------------------------------------------------------------------------


class Slow:
    """Holds n connections of one kind: 'idle' (connect, send nothing), 'headers' (a request
    line and headers one byte per interval, never finished) or 'body' (full headers announcing
    a 100 kB body, then one byte per interval). Every interval it also reconnects the ones the
    server closed, so n stay open or in the backlog (an attacker that keeps its connections)."""

    def __init__(self, port, kind, n, interval=1.0):
        self.port, self.kind, self.interval, self.n = port, kind, interval, n
        self.socks, self.refused, self.closed_by_server, self.opened = [], 0, 0, 0
        self.stop_ev = threading.Event()
        self.top_up()
        self.pos = 0
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def top_up(self):
        while len(self.socks) < self.n:
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", self.port))
                if self.kind == "body":
                    s.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              b"application/json\r\nContent-Length: 100000\r\n\r\n{")
            except OSError:
                self.refused += 1
                s.close()
                return
            self.opened += 1
            self.socks.append(s)

    def run(self):
        text = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 4000
        while not self.stop_ev.wait(self.interval):
            byte = text[self.pos % len(text):self.pos % len(text) + 1] if self.kind == "headers" \
                else b" "
            self.pos += 1
            for s in list(self.socks):
                try:
                    s.setblocking(False)
                    try:
                        gone = s.recv(65536) == b""
                    except BlockingIOError:
                        gone = False
                    s.settimeout(2)
                    if not gone and self.kind != "idle":
                        s.send(byte)
                except OSError:
                    gone = True
                if gone:
                    self.closed_by_server += 1
                    self.socks.remove(s)
                    s.close()
            self.top_up()

    def still_open(self):
        """Connections held (open, or connected and waiting in the backlog) at the last check."""
        return len(self.socks)

    def close(self):
        self.stop_ev.set()
        self.th.join()
        for s in self.socks:
            s.close()


def normal_client(port, sid, seconds, body):
    """A well-behaved client for `seconds`: a fresh connection per request (the case that needs
    a free connection slot), alternating GET session and an episode write. Returns counts."""
    res = {"ok": 0, "503": 0, "other": {}, "errors": {}, "lat_ms": []}
    t_end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        try:
            if i % 2 == 0:
                st, hd, _ = call(port, "GET", "/v1/sessions/" + sid, timeout=10)
            else:
                st, hd, _ = call(port, "POST", "/v1/sessions/%s/episodes" % sid, body,
                                 timeout=10)
        except (OSError, http.client.HTTPException) as e:
            k = type(e).__name__
            res["errors"][k] = res["errors"].get(k, 0) + 1
            time.sleep(0.05)
            i += 1
            continue
        dt = (time.monotonic() - t0) * 1000
        if 200 <= st < 300:
            res["ok"] += 1
            res["lat_ms"].append(dt)
        elif st == 503 and "Retry-After" in hd:
            res["503"] += 1
        else:
            res["other"][str(st)] = res["other"].get(str(st), 0) + 1
        i += 1
        time.sleep(0.02)
    lat = sorted(res.pop("lat_ms"))
    res["p50_ms"] = round(lat[len(lat) // 2], 2) if lat else None
    res["p99_ms"] = round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2) if lat else None
    res["max_ms"] = round(lat[-1], 2) if lat else None
    return res


def cmd_slowloris(a):
    failures = []
    for build in [a.build] + ([a.compare] if a.compare else []):
        log("== slowloris against %s/vbmemd" % build)
        f = slowloris_one(a, build)
        # the comparator (an older build) may fail: that is what it is there to show
        failures += f if build == a.build else []
    return failures


def slowloris_one(a, build):
    m = a.max_connections
    d = Daemon(build, "--threads", str(a.threads), "--max-connections", str(m), *a.extra)
    failures = []
    try:
        with tempfile.TemporaryDirectory() as wd:
            prepare(d.port, 1, wd, {"write": 1})
            sid = open(os.path.join(wd, "plan.tsv")).read().split("session\t")[1].split()[0]
            body = json.load(open(os.path.join(wd, "write.json")))
        base = normal_client(d.port, sid, a.seconds, body)
        log(json.dumps({"step": "baseline", "build": build, "slow": 0, **base}))
        levels = [(k, n) for n in a.levels(m) for k in a.kinds]
        for kind, n in levels:
            slow = Slow(d.port, kind, n)
            time.sleep(1.0)
            held0 = slow.still_open()
            res = normal_client(d.port, sid, a.seconds, body)
            held1 = slow.still_open()
            slow.close()
            rec = {"step": "slow", "build": build, "kind": kind, "slow": n, "max_connections": m,
                   "slow_refused": slow.refused, "slow_opened": slow.opened,
                   "slow_closed_by_server": slow.closed_by_server, "slow_open_at_start": held0,
                   "slow_open_at_end": held1, **res}
            log(json.dumps(rec))
            if res["ok"] == 0:
                failures.append("%d %s connections: the normal client got no answer" % (n, kind))
            time.sleep(0.5)
        if not d.alive():
            failures.append("vbmemd died")
    finally:
        rc = d.stop()
        if rc != 0:
            failures.append("vbmemd exited %d on SIGTERM" % rc)
    return failures


# ---- soak ----------------------------------------------------------------------------------


def cmd_soak(a):
    """At the measured capacity (open loop) for a.seconds with a mix of latent writes, samples,
    reads and GETs and image-model writes and PNG samples; RSS sampled every a.interval s from
    the daemon's start."""
    mix = {"write": 4, "samples": 2, "reads": 1, "get": 1, "iwrite": 1, "isamples": 1}
    d = Daemon(a.build, "--threads", str(a.threads), *a.extra, models=True)
    failures = []
    samples = []
    t0 = time.monotonic()
    stop = threading.Event()

    def sampler():
        while True:
            try:
                samples.append((time.monotonic() - t0, d.rss_kb()))
            except OSError:
                return
            if stop.wait(a.interval):
                return

    st = threading.Thread(target=sampler)
    st.start()
    try:
        with tempfile.TemporaryDirectory() as wd:
            plan = prepare(d.port, a.sessions, wd, mix, image_sessions=4)
            cap = wrk(d.port, plan, 4 * a.threads, a.cap_seconds)
            capacity = ok_count(cap) / cap["duration_s"]
            log(json.dumps(dict(step="capacity", ok_per_s=capacity, **cap)))
            t_load = time.monotonic() - t0
            cpu0 = d.cpu_s()
            result = wrk(d.port, plan, 8 * a.threads, a.seconds, rate=capacity)
            log(json.dumps(dict(step="soak", rate=capacity, seconds=a.seconds,
                                ok_per_s=ok_count(result) / result["duration_s"],
                                daemon_cpu_s=d.cpu_s() - cpu0, **result)))
            failures += ["soak: " + b for b in only_2xx_503(result)]
            if ok_count(result) == 0:
                failures.append("soak: no request succeeded")
    finally:
        stop.set()
        st.join()
        rc = d.stop()
        if rc != 0:
            failures.append("vbmemd exited %d on SIGTERM" % rc)
    # times from the start of the soak load
    samples = [(t - t_load, r) for t, r in samples]
    capacity_title = capacity
    warm = a.warmup
    after = [(t, r) for t, r in samples if t >= warm]
    # least-squares slope of RSS over time after warm-up, in kB per minute
    n = len(after)
    mt = sum(t for t, _ in after) / n
    mr = sum(r for _, r in after) / n
    slope = sum((t - mt) * (r - mr) for t, r in after) / max(1e-9, sum((t - mt) ** 2
                                                                       for t, _ in after))
    rss_start = [r for t, r in samples if t >= 0][0]
    rss_warm, rss_end = after[0][1], samples[-1][1]
    rss_max = max(r for _, r in after)
    third = max(1, len(after) // 3)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    rss_first = med([r for _, r in after[:third]])
    rss_last = med([r for _, r in after[-third:]])
    floor_first = min(r for _, r in after[:third])
    floor_last = min(r for _, r in after[-third:])
    summary = {"step": "rss", "samples": len(samples), "warmup_s": warm,
               "rss_daemon_start_kb": samples[0][1], "rss_start_kb": rss_start, "rss_after_warmup_kb": rss_warm,
               "rss_end_kb": rss_end, "rss_max_after_warmup_kb": rss_max,
               "slope_kb_per_min": round(slope * 60, 1),
               "median_first_third_kb": rss_first, "median_last_third_kb": rss_last,
               "floor_first_third_kb": floor_first, "floor_last_third_kb": floor_last,
               "growth_after_warmup_kb": floor_last - floor_first}
    log(json.dumps(summary))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("seconds,rss_kb\n")
            for t, r in samples:
                f.write("%.2f,%d\n" % (t, r))
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
        ax.plot([t / 60 for t, _ in samples], [r / 1024 for _, r in samples], lw=1)
        ax.axvline(warm / 60, color="grey", ls="--", lw=0.8)
        ax.axvline(0, color="grey", ls=":", lw=0.8)
        ax.set_xlabel("minutes from the start of the load (before 0: start-up, sessions, "
                      "capacity run; dashed: end of warm-up)", fontsize=8)
        ax.set_ylabel("vbmemd RSS (MiB)")
        ax.set_ylim(0, max(r for _, r in samples) / 1024 * 1.15)
        ax.set_title(a.title or "vbmemd RSS at capacity (%.0f req/s offered)" % capacity_title,
                     fontsize=10)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(a.png)
    # the check: after warm-up, the floor of RSS (the smallest sample) in the last third of the
    # samples exceeds the floor of the first third by at most max(growth_frac of it, 4 MiB). Memory
    # that is kept raises the floor; transient buffers of the requests in flight (several MiB under
    # 8 connections, held for seconds at a time) raise single samples and even the median of a
    # short run's third (a 25 s quick soak once ended with a last-third median 4.1 MiB above the
    # first while its last sample was 24 kB above the first after warm-up), never the floor.
    allowed = max(a.growth_frac * floor_first, 4096)
    if floor_last - floor_first > allowed:
        failures.append("RSS floor grew by %d kB after warm-up (smallest sample of the last third "
                        "against the first; allowed %d kB)" % (floor_last - floor_first, allowed))
    return failures

# ---- absent readers ------------------------------------------------------------------------


def metric(port, name):
    st, _, body = call(port, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            yield line


def absent_one(a, budget, n):
    """One daemon with --max-answer-memory budget; n clients with a read-only key ask for
    samples {"count": a.count} of a 64-dimension session and never read (a 4 KiB receive
    window); the daemon's RSS sampled every 0.1 s until every request is answered, then the
    answers held, refused and the RSS; then a normal client's small and large requests; then
    the readers leave."""
    with tempfile.TemporaryDirectory() as wd:
        keys = os.path.join(wd, "keys")
        with open(keys, "w") as f:
            f.write("w-key owner=b\nr-key scope=read owner=b\n")
        d = Daemon(a.build, "--threads", str(a.threads), "--api-key-file", keys,
                   "--max-answer-memory", str(budget), "--connection-timeout", "600", *a.extra)
        socks = []
        try:
            def req(key, method, path, body=None):
                c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=600)
                try:
                    data = json.dumps(body).encode() if body is not None else None
                    c.request(method, path, body=data, headers={
                        "Authorization": "Bearer " + key, "Content-Type": "application/json"})
                    r = c.getresponse()
                    return r.status, r.read()
                finally:
                    c.close()

            rng = random.Random(1)
            st, b = req("w-key", "POST", "/v1/sessions", {"code_size": 64, "memory": {"kind": "gaussian", "rows": 4}})
            sid = json.loads(b)["id"]
            sp = "/v1/sessions/%s/samples" % sid
            st, b = req("w-key", "POST", "/v1/sessions/%s/episodes" % sid, {"codes": {"mu": {
                "dtype": "float32", "shape": [10, 64], "data": codes(rng, 10, 64)}}})
            assert st == 200, b[:300]
            big = {"count": a.count, "seed": 5}
            st, b = req("r-key", "POST", sp, big)
            assert st == 200, b[:300]
            size = len(b)
            del b
            rss0 = d.rss_kb()
            body = json.dumps(big).encode()
            head = ("POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer r-key\r\n"
                    "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (sp, len(body))).encode()

            def answered():
                return sum(int(float(l.split()[1])) for l in metric(d.port, "vbmemd_requests_total")
                           if 'route="samples"' in l)
            seen = answered()
            t0 = time.monotonic()
            for _ in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(("127.0.0.1", d.port))
                s.sendall(head + body)
                socks.append(s)
            peak = rss0
            while answered() < seen + n:
                peak = max(peak, d.rss_kb())
                time.sleep(0.1)
            rss1 = d.rss_kb()
            held = float(next(metric(d.port, "vbmemd_answer_bytes")).split()[1])
            refused = float(next(metric(d.port, "vbmemd_answers_refused_total")).split()[1])
            statuses = [l for l in metric(d.port, "vbmemd_requests_total") if 'route="samples"' in l]
            small = req("r-key", "POST", sp, {"count": 5})[0]
            large = req("r-key", "POST", sp, big)[0]
            for s in socks:
                s.close()
            socks = []
            time.sleep(2.0)
            rec = {"step": "absent-readers", "budget": budget, "clients": n, "answer_bytes": size,
                   "threads": a.threads, "rss_before_mb": rss0 / 1024.0, "rss_peak_mb": peak / 1024.0,
                   "rss_held_mb": rss1 / 1024.0, "rss_after_close_mb": d.rss_kb() / 1024.0,
                   "held_bytes": held, "refused": refused, "small_status": small,
                   "large_status": large, "statuses": statuses, "seconds": time.monotonic() - t0}
            log(json.dumps(rec))
            return rec
        finally:
            for s in socks:
                s.close()
            d.stop()


def cmd_absent(a):
    """absent_one at each level of clients with the budget, and with the budget off (1 TiB, as
    before --max-answer-memory existed) as the comparator in the same run."""
    failures = []
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    log("== absent readers on %s, %d threads" % (cpu, a.threads))
    rows = []
    for n in a.levels:
        on = absent_one(a, a.budget, n)
        off = absent_one(a, 1 << 40, n)
        rows.append((n, on, off))
        if on["held_bytes"] > max(a.budget, on["answer_bytes"]) + n * 65536:
            failures.append("%d clients: %d bytes held past the budget" % (n, on["held_bytes"]))
        if on["small_status"] != 200:
            failures.append("%d clients: a small request got %d" % (n, on["small_status"]))
    log("| absent readers | answer | budget: held, RSS peak / held | budget off: held, RSS peak / held | ratio of held RSS growth |")
    for n, on, off in rows:
        g_on = on["rss_held_mb"] - on["rss_before_mb"]
        g_off = off["rss_held_mb"] - off["rss_before_mb"]
        log("| %d | %.0f MB | %.0f MB, %.0f / %.0f MB | %.0f MB, %.0f / %.0f MB | %.2f |"
            % (n, on["answer_bytes"] / 1e6, on["held_bytes"] / 1e6, on["rss_peak_mb"], on["rss_held_mb"],
               off["held_bytes"] / 1e6, off["rss_peak_mb"], off["rss_held_mb"], g_off / max(g_on, 1.0)))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["overload", "slowloris", "soak", "absent-readers"])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true", help="the short test-suite version")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--cap-seconds", type=int, default=10)
    ap.add_argument("--factor", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=512)
    ap.add_argument("--closed", action="store_true",
                    help="overload: no pacing (the --quick default), instead of factor x capacity")
    ap.add_argument("--queue-depth", type=int, default=256)
    ap.add_argument("--max-connections", type=int, default=None)
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--mix", choices=["write", "mixed"], default="write")
    ap.add_argument("--compare", help="slowloris: also run against DIR/vbmemd (e.g. a build of "
                    "an older commit), in the same run")
    ap.add_argument("--csv")
    ap.add_argument("--png")
    ap.add_argument("--title")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--warmup", type=float, default=None)
    ap.add_argument("--growth-frac", type=float, default=0.05)
    ap.add_argument("--kinds", default="idle,headers,body")
    ap.add_argument("--count", type=int, default=100000, help="absent-readers: samples asked for")
    ap.add_argument("--budget", type=int, default=256 << 20, help="absent-readers: --max-answer-memory")
    ap.add_argument("--levels", default="6,12", help="absent-readers: numbers of clients")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="further vbmemd options (last)")
    a = ap.parse_args()
    a.kinds = a.kinds.split(",")
    if a.what == "absent-readers":
        a.levels = [int(x) for x in a.levels.split(",")]
        failures = cmd_absent(a)
        for f in failures:
            log("FAIL: " + f)
        log("%s: %s" % (a.what, "FAIL" if failures else "ok"))
        return 1 if failures else 0
    if a.what == "overload":
        a.seconds = int(a.seconds or (15 if a.quick else 30))
        a.cap_seconds = 5 if a.quick else a.cap_seconds
        if a.quick:
            # deterministic overload whatever the machine's speed: 256 closed-loop connections
            # against the workers and a queue of 32
            a.closed, a.connections, a.queue_depth = True, 256, 32
        a.max_connections = a.max_connections or 1024
        failures = cmd_overload(a)
    elif a.what == "slowloris":
        a.max_connections = a.max_connections or (64 if a.quick else 256)
        a.seconds = a.seconds or (3 if a.quick else 8)
        if a.quick:
            a.levels = lambda m: [m + m // 2]
        else:
            a.levels = lambda m: [m // 2, m - 4, m, 2 * m]
        failures = cmd_slowloris(a)
    else:
        a.seconds = int(a.seconds or (25 if a.quick else 600))
        a.cap_seconds = 5 if a.quick else a.cap_seconds
        a.warmup = a.warmup if a.warmup is not None else (10 if a.quick else 60)
        a.sessions = 16 if a.quick else a.sessions
        failures = cmd_soak(a)
    for f in failures:
        log("FAIL: " + f)
    log("%s: %s" % (a.what, "FAIL" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
