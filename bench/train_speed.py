#!/usr/bin/python3
"""train_speed.py -- steps per second of train/train.py on this machine with the
old thread settings (--threads -1: PyTorch's and OpenBLAS's defaults) against
the new ones (--threads 0: as many as the CPUs this process may use; and
--threads 1), measured alternately in the same run.

  nice -n 10 /usr/bin/python3 bench/train_speed.py [--kind vae] [--steps 5] [--rounds 2]

Each measurement is a fresh trainer process at full size (16 episodes of 64
Fashion-MNIST frames per step); the first step (warm-up) is not counted.
Prints steps/s, user and system CPU seconds per step for both, and the ratio."""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def one(kind, steps, threads, extra, env=None):
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.jsonl")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, os.path.join(ROOT, "train", "train.py"), "--kind", kind,
                        "--max-steps", str(steps), "--log-every", "1", "--eval-episodes", "1", "--quiet",
                        "--threads", str(threads), "--out", os.path.join(d, "m.safetensors"), "--log", log] + extra,
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, **(env or {})))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(log) as f:
            t = [json.loads(line)["seconds"] for line in f if '"train_elbo_per_frame"' in line]
    per_step = (t[-1] - t[0]) / (len(t) - 1)
    return {"steps_per_s": 1.0 / per_step, "user": (after.ru_utime - before.ru_utime) / steps,
            "sys": (after.ru_stime - before.ru_stime) / steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", default="vae")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    a, extra = p.parse_known_args()
    res = {"old": [], "new": [], "new1": []}
    for r in range(a.rounds):
        for name, threads in (("old", -1), ("new", 0), ("new1", 1)):
            res[name].append(one(a.kind, a.steps, threads, extra))
            print("round %d %s: %.4f steps/s, %.2f s user + %.2f s sys CPU per step (all steps, start included)"
                  % (r + 1, name, res[name][-1]["steps_per_s"], res[name][-1]["user"], res[name][-1]["sys"]),
                  flush=True)
    mean = {k: sum(x["steps_per_s"] for x in v) / len(v) for k, v in res.items()}
    print("%s, %d steps x %d rounds, %s, load average %s" % (a.kind, a.steps, a.rounds,
                                                            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                                            " ".join("%.2f" % x for x in os.getloadavg())))
    print("old (--threads -1): %.4f steps/s   new (--threads 0): %.4f steps/s   ratio new/old %.2f"
          % (mean["old"], mean["new"], mean["new"] / mean["old"]))
    print("new with --threads 1: %.4f steps/s   ratio new1/old %.2f" % (mean["new1"], mean["new1"] / mean["old"]))


if __name__ == "__main__":
    main()
