#!/usr/bin/python3
"""train_speed.py -- steps per second and CPU seconds per step of train/train.py
on this machine: this tree's trainer against another revision's, measured
alternately in the same run.

  nice -n 10 /usr/bin/python3 bench/train_speed.py --baseline-ref REV [--kind mixture,vae] [--steps 5] [--rounds 2] [--threads 0]

--baseline-ref REV: the trainer of git revision REV (its train/ folder, from
`git archive` into a temporary directory) against this tree's, with the same
options. Without it, the old comparison of thread settings of this tree's
trainer (--threads -1: every library's defaults, 0, and 1).
Each measurement is a fresh trainer process at full size (16 episodes of 64
Fashion-MNIST frames per step); the first step (warm-up) is not timed. CPU
seconds per step are those of the whole process (start included) divided by
its steps. Prints each round, the means, the ratios, the CPU and the load
average at the start and end. Other options go to train.py unchanged."""
import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def load():
    return " ".join("%.2f" % x for x in os.getloadavg())


def one(trainer, kind, steps, threads, extra):
    """Run `trainer` (a train.py) for `steps` steps; steps/s after the first, CPU s/step."""
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log.jsonl")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, trainer, "--kind", kind,
                        "--max-steps", str(steps), "--log-every", "1", "--eval-episodes", "1", "--quiet",
                        "--threads", str(threads), "--out", os.path.join(d, "m.safetensors"), "--log", log] + extra,
                       check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(log) as f:
            t = [json.loads(line)["seconds"] for line in f if '"train_elbo_per_frame"' in line]
    per_step = (t[-1] - t[0]) / (len(t) - 1)
    return {"steps_per_s": 1.0 / per_step, "user": (after.ru_utime - before.ru_utime) / steps,
            "sys": (after.ru_stime - before.ru_stime) / steps}


def export_trainer(ref, dest):
    """train/ of git revision `ref` under dest; returns its train.py."""
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", ref + "^{commit}"], check=True,
                         capture_output=True, text=True).stdout.strip()
    tar = os.path.join(dest, "train.tar")
    subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", "-o", tar, rev, "train"], check=True)
    with tarfile.open(tar) as t:
        t.extractall(dest)
    return os.path.join(dest, "train", "train.py"), rev


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kind", default="vae", help="trainer kinds, comma separated (mixture, vae, ...)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="--threads of both trainers (with --baseline-ref)")
    p.add_argument("--baseline-ref", default=None, help="git revision whose trainer is the comparator")
    a, extra = p.parse_known_args()
    if a.steps < 2 or a.rounds < 1:
        p.error("--steps must be at least 2 (the first is not timed) and --rounds at least 1")
    here = os.path.join(ROOT, "train", "train.py")
    with tempfile.TemporaryDirectory() as tmp:
        if a.baseline_ref:
            old, rev = export_trainer(a.baseline_ref, tmp)
            head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                  text=True).stdout.strip()
            dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "train"], capture_output=True,
                                   text=True).stdout.strip()
            variants = [("baseline %s (%s)" % (a.baseline_ref, rev[:10]), old, a.threads),
                        ("this tree (%s%s)" % (head, ", modified" if dirty else ""), here, a.threads)]
        else:
            variants = [("old (--threads -1)", here, -1), ("new (--threads 0)", here, 0), ("new, --threads 1", here, 1)]
        start = "%s, %s UTC, load average %s" % (cpu_name(), time.strftime("%Y-%m-%d %H:%M", time.gmtime()), load())
        print("%s, %d cores; %s steps x %d rounds; --threads %s" % (
            start, os.cpu_count(), a.steps, a.rounds, a.threads if a.baseline_ref else "as named"), flush=True)
        for kind in a.kind.split(","):
            res = {name: [] for name, _, _ in variants}
            for r in range(a.rounds):
                for name, trainer, threads in variants:
                    res[name].append(one(trainer, kind, a.steps, threads, extra))
                    x = res[name][-1]
                    print("%s round %d %s: %.4f steps/s, %.2f s user + %.2f s sys CPU per step (load %s)"
                          % (kind, r + 1, name, x["steps_per_s"], x["user"], x["sys"], load()), flush=True)
            base = variants[0][0]
            mean = {k: {f: sum(x[f] for x in v) / len(v) for f in ("steps_per_s", "user", "sys")}
                    for k, v in res.items()}
            for name, _, _ in variants:
                m = mean[name]
                print("%s %s: %.4f steps/s (ratio to %s %.2f), CPU %.2f s/step (%.2f user + %.2f sys; ratio %.2f)"
                      % (kind, name, m["steps_per_s"], base.split(" (")[0],
                         m["steps_per_s"] / mean[base]["steps_per_s"], m["user"] + m["sys"], m["user"], m["sys"],
                         (m["user"] + m["sys"]) / (mean[base]["user"] + mean[base]["sys"])), flush=True)
        print("load average at the end %s" % load())


if __name__ == "__main__":
    main()
