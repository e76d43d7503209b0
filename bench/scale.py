#!/usr/bin/python3
"""scale.py -- many sessions in vbmemd's SQLite store with a small resident bound: creates N small
latent sessions (code size 8, a 2x2 mixture), writes each once, lists them all and reads every one
back (version, frames and the exact ELBO its write answered); samples vbmemd's RSS all along and
compares it with the bound expected from --max-resident resident sessions; restarts the daemon on
that database (SIGTERM, start, time to /readyz 200 and to the first read of a stored session); then
takes a backup with `vbmemd --export-all` while writer threads keep writing, restores it with
`--import-all` into a fresh directory, starts a daemon there and checks every session in it.

What the backup must hold (checked session by session): a state the session had between the
export's start and its end -- at least every write acknowledged before the export started, and no
write whose request was sent after the export ended; a version in it that was acknowledged must
carry the ELBO that write answered. Writes acknowledged while the export ran may be in it or not.

Every check that fails is printed and makes the exit status 1. Prints one JSON line per phase and
a Markdown summary (with the date, commit and load average).

usage: bench/scale.py [--vbmemd build/vbmemd] [--sessions 100000] [--max-resident 1000]
                      [--clients 8] [--writers 4] [--threads 2] [--data-parent DIR] [--seed N]
                      [--quick]   (--quick: 3,000 sessions, --max-resident 100: the test-suite run)
"""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

C = 8          # code size
T = 4          # frames per write
MEM = {"kind": "mixture", "rows": 2, "clusters": 2, "retain_max": 16}
FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        if len(FAILURES) <= 20:
            print("FAIL: " + msg, file=sys.stderr, flush=True)
    return cond


MARKS = []  # (monotonic time, phase) at the end of each phase, for --plot


def emit(phase, **fields):
    MARKS.append((time.monotonic(), phase))
    fields = dict(phase=phase, **fields)
    print(json.dumps(fields), flush=True)
    return fields


class Client:
    """One keep-alive HTTP connection to 127.0.0.1:port (reconnects once on a broken one)."""

    def __init__(self, port, timeout=60):
        self.port, self.timeout, self.conn = port, timeout, None

    def request(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data,
                                  headers={"Content-Type": "application/json"} if data else {})
                r = self.conn.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw and raw[:1] in (b"{", b"[") else raw)
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def close(self):
        if self.conn is not None:
            self.conn.close()


class Daemon:
    """vbmemd on 127.0.0.1 (kernel-chosen port) with --data-dir; RSS sampled every 0.1 s."""

    def __init__(self, binary, data, max_resident, threads, max_sessions):
        self.t_spawn = time.monotonic()
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--data-dir", data, "--max-resident", str(max_resident),
             "--threads", str(threads), "--max-sessions", str(max_sessions), "--queue-depth", "1024",
             "--log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        self.port, self.lines, self.rss_max, self.samples = None, [], 0, []
        ready = threading.Event()

        def pump():
            for raw in self.proc.stderr:
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                if self.port is None and '"listening"' in line:
                    self.port = json.loads(line)["port"]
                    ready.set()
            ready.set()

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        if not ready.wait(120) or self.port is None:
            self.proc.kill()
            raise RuntimeError("vbmemd did not start: " + "\n".join(self.lines[-20:]))
        self.stop_sampling = threading.Event()
        self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.sampler.start()

    def rss_kib(self):
        try:
            with open("/proc/%d/status" % self.proc.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def sample(self):
        while not self.stop_sampling.wait(0.1):
            rss = self.rss_kib()
            self.rss_max = max(self.rss_max, rss)
            self.samples.append((time.monotonic(), rss))

    def stop(self):
        """SIGTERM; returns (exit status, seconds to exit)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(120)
        self.stop_sampling.set()
        self.pump.join(5)
        return rc, time.monotonic() - t0


def run_parallel(n_threads, fn):
    """fn(k) in n_threads threads; an exception in one is a failure."""
    errors = []

    def wrap(k):
        try:
            fn(k)
        except Exception as e:  # noqa: BLE001
            errors.append("thread %d: %s: %s" % (k, type(e).__name__, e))

    threads = [threading.Thread(target=wrap, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        check(False, e)


def write_body(rnd, seed):
    return {"mode": "replace", "seed": seed, "iterations": 5,
            "codes": {"mu": [[round(rnd.gauss(3.0 * (t % 2), 1.0), 4) for _ in range(C)] for t in range(T)],
                      "sigma2": 0.05}}


def metric(client, name):
    st, body = client.request("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def create_sessions(d, n, n_clients, rnd, rss_at=None):
    """Create n sessions and write each once (n_clients threads); returns id -> expected state.
    rss_at: RSS samples (KiB) by sessions done, at 10 % and 50 %."""
    expected, lock, done = {}, threading.Lock(), [0]
    seeds = [rnd.randrange(1 << 30) for _ in range(n_clients)]

    def creator(k):
        wr = random.Random(seeds[k])
        cl = Client(d.port)
        for i in range(k, n, n_clients):
            st, s = cl.request("POST", "/v1/sessions", {"code_size": C, "memory": MEM})
            if not check(st == 201, "create %d: %s %s" % (i, st, s)):
                continue
            st, w = cl.request("POST", "/v1/sessions/%s/episodes" % s["id"], write_body(wr, i))
            if not check(st == 200 and w.get("version") == 2, "write %s: %s %s" % (s["id"], st, w)):
                continue
            with lock:
                expected[s["id"]] = {"min": 2, "max": 2, "elbo": {2: w["elbo"]["per_frame"]}}
                done[0] += 1
                if rss_at is not None and done[0] in (n // 10, n // 2):
                    rss_at[done[0]] = d.rss_kib()
        cl.close()

    run_parallel(n_clients, creator)
    return expected


def list_all(c, ids, label):
    """GET /v1/sessions page by page (1000 a page); checks the ids are exactly ids, in order."""
    listed, cursor = [], None
    while True:
        st, page = c.request("GET", "/v1/sessions?limit=1000" + ("&cursor=" + cursor if cursor else ""))
        if not check(st == 200, "%s: %s %s" % (label, st, page)):
            break
        listed += [s["id"] for s in page["sessions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    check(listed == ids, "%s: %d ids listed, %d created; same set: %s"
          % (label, len(listed), len(ids), set(listed) == set(ids)))
    return listed


def read_all(port, ids, expected, n_clients, label):
    """GET every id (n_clients threads) and compare version, frames and ELBO with expected[id]
    (a dict: version -> elbo, plus "min"/"max" allowed versions). Returns seconds."""
    t0 = time.monotonic()

    def reader(k):
        c = Client(port)
        for sid in ids[k::n_clients]:
            st, info = c.request("GET", "/v1/sessions/" + sid)
            if not check(st == 200, "%s: GET %s: %s %s" % (label, sid, st, info)):
                continue
            e = expected[sid]
            v = info["version"]
            if not check(e["min"] <= v <= e["max"], "%s: %s at version %d, allowed %d..%d"
                         % (label, sid, v, e["min"], e["max"])):
                continue
            if v in e["elbo"]:
                check(info["last_elbo"] == e["elbo"][v] and info["frames"] == T,
                      "%s: %s v%d: ELBO %r frames %r, acknowledged %r" % (label, sid, v, info["last_elbo"],
                                                                        info["frames"], e["elbo"][v]))
        c.close()

    run_parallel(n_clients, reader)
    return time.monotonic() - t0


def plot(path, samples, results, a):
    """RSS of the first daemon over time, with the phase ends and the bound."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t0 = samples[0][0]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([t - t0 for t, _ in samples], [r / 1024 for _, r in samples], label="vbmemd RSS")
    ax.axhline(results["rss"]["bound_kib"] / 1024, color="red", linestyle="--", label="bound")
    ax.axhline(results["rss"]["calibration_rss_max_kib"] / 1024, color="gray", linestyle=":",
               label="same work on %d sessions (max)" % results["calibration"]["sessions"])
    for t, phase in MARKS:
        if samples[0][0] <= t <= samples[-1][0] and phase in ("calibration", "create_and_write", "list", "read_back"):
            ax.axvline(t - t0, color="black", linewidth=0.5)
            ax.text(t - t0, 1, " end of " + phase.replace("_", " "), rotation=90, fontsize=7, va="bottom")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_ylim(0, None)
    ax.set_title("vbmemd RSS: %d sessions in SQLite, --max-resident %d (%s)"
                 % (a.sessions, a.max_resident, time.strftime("%Y-%m-%d", time.gmtime())), fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vbmemd_pos", nargs="?", help="path to vbmemd (same as --vbmemd)")
    ap.add_argument("--vbmemd", default="build/vbmemd")
    ap.add_argument("--sessions", type=int, default=100000)
    ap.add_argument("--max-resident", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-parent", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--seed", type=int, default=20261125)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plot", help="write a PNG of the main daemon's RSS over time here (python3-matplotlib)")
    a = ap.parse_args()
    binary = a.vbmemd_pos or a.vbmemd
    if a.quick:
        a.sessions, a.max_resident, a.clients = int(os.environ.get("SCALE_N", 3000)), 100, 4
    rnd = random.Random(a.seed)
    root = tempfile.mkdtemp(prefix="vbmem-scale-", dir=a.data_parent)
    data, restored = os.path.join(root, "data"), os.path.join(root, "restored")
    backup = os.path.join(root, "backup.db")
    os.mkdir(data)
    os.mkdir(restored)
    results = {}
    d = None
    try:
        d = Daemon(binary, data, a.max_resident, a.threads, a.sessions + 10)
        c = Client(d.port)
        time.sleep(0.3)
        rss0 = d.rss_kib()
        results["start"] = emit("start", rss_kib=rss0)

        # ---- calibration: the same work on (threads + 3) x max_resident sessions, so that reads
        # and list pages load and evict as they do at full size, and list pages (max_resident
        # sessions each, the largest transient) have passed through each of the threads + 2
        # malloc arenas, each of which keeps its peak ----
        cal_dir = os.path.join(root, "calibration")
        os.mkdir(cal_dir)
        cd = Daemon(binary, cal_dir, a.max_resident, a.threads, a.sessions + 10)
        cal = create_sessions(cd, min((a.threads + 3) * a.max_resident, a.sessions), a.clients,
                              random.Random(a.seed + 1))
        cal_ids = sorted(cal)
        cc = Client(cd.port)
        list_all(cc, cal_ids, "calibration")
        read_all(cd.port, cal_ids, cal, a.clients, "calibration")
        cc.close()
        cal_rss = cd.rss_max
        rc, _ = cd.stop()
        check(rc == 0, "calibration daemon: exit status %d" % rc)
        shutil.rmtree(cal_dir, ignore_errors=True)
        results["calibration"] = emit("calibration", sessions=len(cal_ids), rss_max_kib=cal_rss)

        # ---- create and write every session ----
        t0 = time.monotonic()
        rss_at = {}
        expected = create_sessions(d, a.sessions, a.clients, rnd, rss_at)
        dt = time.monotonic() - t0
        rss_end = d.rss_kib()
        ids = sorted(expected)
        n = len(ids)
        check(n == a.sessions, "%d of %d sessions created and written" % (n, a.sessions))
        resident_bytes = metric(c, "vbmemd_memory_bytes")
        stored = metric(c, "vbmemd_sessions")
        check(stored == a.sessions, "vbmemd_sessions %s, want %d" % (stored, a.sessions))
        per_session = resident_bytes / min(a.max_resident, n) if n else 0
        results["create"] = emit("create_and_write", sessions=n, seconds=round(dt, 1),
                                 requests_per_s=round(2 * n / dt, 1), rss_kib=rss_end,
                                 rss_kib_at={str(k): v for k, v in rss_at.items()},
                                 resident_accounted_bytes=resident_bytes,
                                 accounted_bytes_per_session=round(per_session))

        # ---- list every session (pages of 1000) ----
        t0 = time.monotonic()
        listed = list_all(c, ids, "listing")
        results["list"] = emit("list", sessions=len(listed), seconds=round(time.monotonic() - t0, 1))

        # ---- read every session back, in a seeded random order ----
        order = list(ids)
        rnd.shuffle(order)
        dt = read_all(d.port, order, expected, a.clients, "read back")
        results["read"] = emit("read_back", sessions=n, seconds=round(dt, 1), reads_per_s=round(n / dt, 1),
                               rss_kib=d.rss_kib(), rss_max_kib=d.rss_max)

        # The bound: what the same daemon reached doing the same work on (threads + 3) x
        # max_resident sessions (the calibration run), plus SQLite's page cache (2 MiB, cache_size -2000: the
        # calibration's smaller database may not fill it) and a quarter for allocator noise. RSS
        # that grew with the number of stored sessions would pass it.
        bound = 1.25 * cal_rss + 2048
        rss_max = d.rss_max
        check(rss_max <= bound, "max RSS %d KiB above the bound %d KiB" % (rss_max, bound))
        results["rss"] = emit("rss", rss_start_kib=rss0, rss_max_kib=rss_max, bound_kib=round(bound),
                              calibration_rss_max_kib=cal_rss,
                              max_resident=a.max_resident, sessions=n)

        # ---- restart on that database ----
        main_samples = list(d.samples)
        rc, stop_s = d.stop()
        check(rc == 0, "exit status %d after SIGTERM" % rc)
        t0 = time.monotonic()
        d = Daemon(binary, data, a.max_resident, a.threads, a.sessions + 10)
        c = Client(d.port)
        while True:
            st, _ = c.request("GET", "/readyz")
            if st == 200 or time.monotonic() - t0 > 120:
                break
            time.sleep(0.01)
        ready_s = time.monotonic() - t0
        check(st == 200, "/readyz %s after restart" % st)
        sid = rnd.choice(ids)
        st, info = c.request("GET", "/v1/sessions/" + sid)
        first_s = time.monotonic() - t0
        check(st == 200 and info["last_elbo"] == expected[sid]["elbo"][2], "first read after restart: %s" % st)
        sample = rnd.sample(ids, min(1000, n))
        t1 = time.monotonic()
        for sid in sample:
            st, info = c.request("GET", "/v1/sessions/" + sid)
            check(st == 200 and info["version"] == 2, "read after restart %s: %s" % (sid, st))
        cold = (time.monotonic() - t1) / len(sample)
        results["restart"] = emit("restart", stop_s=round(stop_s, 3), ready_s=round(ready_s, 3),
                                  first_read_s=round(first_s, 3), cold_read_ms=round(1000 * cold, 3))

        # ---- backup while writers write ----
        n_written = min(len(ids), 250 * a.writers)
        targets = rnd.sample(ids, n_written)
        log = {sid: [] for sid in targets}   # sid -> [(sent, acked or None, version, elbo)]
        stop = threading.Event()
        wseeds = [rnd.randrange(1 << 30) for _ in range(a.writers)]
        lock = threading.Lock()
        writes = [0]

        def writer(k):
            wr = random.Random(wseeds[k])
            cl = Client(d.port)
            mine = targets[k::a.writers]
            version = {sid: 2 for sid in mine}
            while not stop.is_set():
                sid = wr.choice(mine)
                sent = time.monotonic()
                entry = [sent, None, version[sid] + 1, None]
                log[sid].append(entry)
                st, w = cl.request("POST", "/v1/sessions/%s/episodes" % sid, write_body(wr, wr.randrange(1 << 20)))
                if not check(st == 200 and w["version"] == version[sid] + 1, "write during backup %s: %s %s"
                             % (sid, st, w)):
                    return
                entry[1], entry[3] = time.monotonic(), w["elbo"]["per_frame"]
                version[sid] += 1
                with lock:
                    writes[0] += 1
            cl.close()

        wthreads = [threading.Thread(target=writer, args=(k,)) for k in range(a.writers)]
        for t in wthreads:
            t.start()
        time.sleep(1.0)
        w_before = writes[0]
        t_start = time.monotonic()
        p = subprocess.run([binary, "--data-dir", data, "--export-all", backup], capture_output=True, timeout=3600)
        t_end = time.monotonic()
        w_during = writes[0] - w_before
        time.sleep(0.5)
        stop.set()
        for t in wthreads:
            t.join(120)
        check(p.returncode == 0, "export: %d %s" % (p.returncode, p.stderr.decode()[-500:]))
        results["export"] = emit("export_during_writes", seconds=round(t_end - t_start, 2),
                                 writes_during_export=w_during, writes_total=writes[0],
                                 backup_bytes=os.path.getsize(backup) if os.path.exists(backup) else 0)
        # What the backup must hold, per written session.
        for sid, entries in log.items():
            acked_before = [e[2] for e in entries if e[1] is not None and e[1] < t_start]
            sent_before_end = [e[2] for e in entries if e[0] < t_end]
            expected[sid] = {"min": max(acked_before, default=2), "max": max(sent_before_end, default=2),
                             "elbo": dict([(2, expected[sid]["elbo"][2])]
                                          + [(e[2], e[3]) for e in entries if e[1] is not None])}
        rc, _ = d.stop()
        check(rc == 0, "exit status %d after SIGTERM" % rc)
        d = None

        # ---- restore into a fresh directory and check every session ----
        t0 = time.monotonic()
        p = subprocess.run([binary, "--data-dir", restored, "--import-all", backup], capture_output=True,
                           timeout=3600)
        import_s = time.monotonic() - t0
        check(p.returncode == 0, "import: %d %s" % (p.returncode, p.stderr.decode()[-500:]))
        d = Daemon(binary, restored, a.max_resident, a.threads, a.sessions + 10)
        c = Client(d.port)
        stored = metric(c, "vbmemd_sessions")
        check(stored == n, "restored store holds %s sessions, want %d" % (stored, n))
        dt = read_all(d.port, ids, expected, a.clients, "restored")
        newer = 0
        for sid in targets:
            st, info = c.request("GET", "/v1/sessions/" + sid)
            if st == 200 and info["version"] > expected[sid]["min"]:
                newer += 1
        results["restore"] = emit("restore", import_s=round(import_s, 2), check_s=round(dt, 1), sessions=n,
                                  written_sessions=len(targets), newer_than_required=newer)
        rc, _ = d.stop()
        check(rc == 0, "exit status %d after SIGTERM" % rc)
        d = None
    finally:
        if d is not None:
            d.proc.kill()
            d.proc.wait()
        shutil.rmtree(root, ignore_errors=True)

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = "?"
    print()
    print("%s UTC, commit %s, load average %s, %d cores; %d sessions, --max-resident %d, %d clients"
          % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), commit,
             " ".join(open("/proc/loadavg").read().split()[:3]), os.cpu_count(), a.sessions, a.max_resident,
             a.clients))
    if "restore" in results:
        r = results
        print("| phase | figure |")
        print("|---|---|")
        print("| create + write | %d sessions in %.1f s (%.0f requests/s) |"
              % (r["create"]["sessions"], r["create"]["seconds"], r["create"]["requests_per_s"]))
        print("| list (pages of 1000) | %.1f s |" % r["list"]["seconds"])
        print("| read back every session | %.1f s (%.0f reads/s) |" % (r["read"]["seconds"], r["read"]["reads_per_s"]))
        print("| RSS | start %.1f MiB, max %.1f MiB; the same work on %d sessions: max %.1f MiB; bound %.1f MiB |"
              % (r["rss"]["rss_start_kib"] / 1024, r["rss"]["rss_max_kib"] / 1024, r["calibration"]["sessions"],
                 r["rss"]["calibration_rss_max_kib"] / 1024, r["rss"]["bound_kib"] / 1024))
        print("| restart | stop %.2f s, /readyz 200 after %.3f s, first read after %.3f s, cold reads %.2f ms |"
              % (r["restart"]["stop_s"], r["restart"]["ready_s"], r["restart"]["first_read_s"],
                 r["restart"]["cold_read_ms"]))
        print("| export during writes | %.2f s, %d writes acknowledged meanwhile, %.1f MB |"
              % (r["export"]["seconds"], r["export"]["writes_during_export"], r["export"]["backup_bytes"] / 1e6))
        print("| import + check | %.2f s import, %.1f s to check %d sessions |"
              % (r["restore"]["import_s"], r["restore"]["check_s"], r["restore"]["sessions"]))
    if a.plot and "rss" in results:
        plot(a.plot, main_samples, results, a)
    if FAILURES:
        print("scale: %d checks failed" % len(FAILURES))
        return 1
    print("scale: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
