#!/usr/bin/python3
"""images_e2e.py -- end-to-end latency of vbmemd with images over loopback HTTP, on the bundled
Fashion-MNIST model: per round, write a 64-image episode (PNG, replace mode), draw 64 samples
(returned as PNG), and run a 5-step iterative read (App. G.2) of the 64 episode images (every step's
images returned as PNG). Rounds run back to back on one keep-alive connection per client; with
--clients N, N clients run rounds at once (each on its own session). Bounded by --rounds per client
and --seconds. Prints one JSON line per configuration and a Markdown table (latency measured by the
client from sending the request to having read the whole response; server-side seconds from the
responses' timings).

usage: bench/images_e2e.py [BUILD_DIR] [--rounds N] [--seconds S] [--threads T] [--clients 1,4]"""
import argparse
import json
import os
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
from daemon import Client, Daemon  # noqa: E402
import pngs  # noqa: E402

OPS = ("write64", "samples64", "read5x64", "round")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def client_loop(port, images, rounds, deadline, out, errors):
    c = Client(port, timeout=300)
    try:
        r = c.request("POST", "/v1/sessions", {}, validate=False)
        assert r.status == 201, r.body[:200]
        base = "/v1/sessions/" + r.json()["id"]
        write = json.dumps({"observations": images, "seed": 1}).encode()
        samples = json.dumps({"count": 64, "seed": 2, "format": "png"}).encode()
        read = json.dumps({"observations": images, "iterations": 5, "seed": 3, "addresses": False,
                           "format": "png"}).encode()
        for i in range(rounds):
            if time.time() > deadline:
                break
            t = {}
            t0 = time.perf_counter()
            for name, path, body in (("write64", "/episodes", write), ("samples64", "/samples", samples),
                                     ("read5x64", "/reads", read)):
                s = time.perf_counter()
                r = c.request("POST", base + path, raw=body, validate=False)
                t[name] = (time.perf_counter() - s) * 1000.0
                assert r.status == 200, (name, r.status, r.body[:200])
                doc = r.json()
                if name == "write64":
                    t["write_encode_ms"] = doc["timings"]["encode_s"] * 1000.0
                    t["write_solve_ms"] = doc["timings"]["solve_s"] * 1000.0
                elif name == "samples64":
                    assert len(doc["observations"]) == 64
                    t["samples_nets_ms"] = doc["timings"]["nets_s"] * 1000.0
                else:
                    assert len(doc["steps"]) == 5 and len(doc["steps"][4]["observations"]) == 64
                    t["read_nets_ms"] = doc["timings"]["nets_s"] * 1000.0
                    t["read_vb_ms"] = doc["timings"]["read_s"] * 1000.0
            t["round"] = (time.perf_counter() - t0) * 1000.0
            out.append(t)
        c.request("DELETE", base, validate=False)
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))
    finally:
        c.close()


def run(d, images, clients, rounds, seconds):
    out, errors = [], []
    deadline = time.time() + seconds
    t0 = time.time()
    threads = [threading.Thread(target=client_loop, args=(d.port, images, rounds, deadline, out, errors))
               for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    if errors:
        raise RuntimeError("client errors: %s" % errors[:3])
    res = {"clients": clients, "rounds": len(out), "wall_s": wall, "rounds_per_s": len(out) / wall}
    for k in OPS + ("write_encode_ms", "write_solve_ms", "samples_nets_ms", "read_nets_ms", "read_vb_ms"):
        xs = [t[k] for t in out]
        res[k] = {"p50": statistics.median(xs), "p99": pct(xs, 0.99), "mean": statistics.fmean(xs)}
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=50, help="rounds per client")
    p.add_argument("--seconds", type=float, default=60.0, help="time bound per configuration")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--clients", default="1,4")
    a = p.parse_args()
    images = [pngs.b64(pngs.grey_png(img)) for img in pngs.fashion_images(64)]
    env = {"OPENBLAS_NUM_THREADS": "1"}
    d = Daemon(os.path.join(a.build, "vbmemd"), "--threads", str(a.threads), "--log-level", "warn", env=env)
    try:
        cpu = ""
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        print("vbmemd --threads %d; %d cores (%s); request bytes: write %d, read %d"
              % (a.threads, os.cpu_count(), cpu, len(json.dumps({"observations": images})),
                 len(json.dumps({"observations": images, "iterations": 5}))))
        results = []
        run(d, images, 1, 2, 30)  # warm-up
        for c in [int(x) for x in a.clients.split(",")]:
            r = run(d, images, c, a.rounds, a.seconds)
            print(json.dumps(r))
            results.append(r)
    finally:
        d.stop()
    print()
    print("| clients | rounds | rounds/s | write 64 p50 / p99 ms | samples 64 p50 / p99 ms | read 5x64 p50 / p99 ms "
          "| round p50 / p99 ms | encode 64 ms | VB write ms | decode 64 ms | read: nets / VB ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        f = lambda k: "%.1f / %.1f" % (r[k]["p50"], r[k]["p99"])  # noqa: E731
        print("| %d | %d | %.1f | %s | %s | %s | %s | %.1f | %.1f | %.1f | %.1f / %.1f |"
              % (r["clients"], r["rounds"], r["rounds_per_s"], f("write64"), f("samples64"), f("read5x64"),
                 f("round"), r["write_encode_ms"]["p50"], r["write_solve_ms"]["p50"], r["samples_nets_ms"]["p50"],
                 r["read_nets_ms"]["p50"], r["read_vb_ms"]["p50"]))


if __name__ == "__main__":
    main()
