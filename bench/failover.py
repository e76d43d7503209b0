#!/usr/bin/python3
"""failover.py -- the Redis Sentinel failover check of tests/http/test_store.py (failover_run) at a
larger size: a primary, two replicas and three sentinels (down-after-milliseconds 500) on
loopback, two vbmemd --redis-sentinel behind nginx, more writers and several rounds; each round
holds back the primary's replication stream (lagging replicas), SIGKILLs the primary, waits for
every writer to be acknowledged again, restarts the old primary and waits until it is a replica
of the new one; the next round kills the new primary.

Two runs in the same invocation, the same writers, rounds and seeds:
  wait     vbmemd's default with Sentinel, --redis-min-replicas 1: every acknowledged write must be
           stored afterwards (version, and memory export where comparable); any loss fails the run
  no-wait  the comparator, --redis-min-replicas 0 (plain asynchronous replication): acknowledged
           writes lost by the failovers are counted, not failed on

Prints per round the writers' attempts and the seconds from the SIGKILL to the last writer's
first acknowledgement (wall clock, printed, never asserted), then a Markdown table with the CPU,
the commit and the load average. Exit status 1 when the wait run fails a check.

usage: bench/failover.py [--vbmemd build/vbmemd] [--writers 8] [--rounds 5] [--seed N]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "http"))
import test_store  # noqa: E402


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def one_run(label, writers, rounds, args, check):
    tmp = tempfile.mkdtemp(prefix="vbmem-failover-")
    t0 = time.monotonic()
    try:
        f = test_store.failover_run(tmp, n_writers=writers, rounds=rounds, daemon_args=args, check=check,
                                    log=lambda s: print("  %s:%s" % (label, s), flush=True))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    f["seconds"] = time.monotonic() - t0
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vbmemd", default=os.path.join(HERE, "..", "build", "vbmemd"))
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=20240505)
    a = ap.parse_args()
    if a.writers < 1 or a.rounds < 1:
        ap.error("--writers and --rounds must be >= 1")
    test_store.BIN = os.path.abspath(a.vbmemd)
    test_store.SEED = a.seed
    results = {}
    try:
        results["wait"] = one_run("wait", a.writers, a.rounds, (), True)
    except AssertionError as e:
        print("FAIL wait run: %s" % e, flush=True)
        return 1
    results["no-wait"] = one_run("no-wait", a.writers, a.rounds, ("--redis-min-replicas", "0"), False)
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print("\nCPU: %s; commit %s; %s UTC; load average %.1f; %d writers, %d rounds, seed %d"
          % (cpu_name(), commit, time.strftime("%Y-%m-%d %H:%M", time.gmtime()), os.getloadavg()[0],
             a.writers, a.rounds, a.seed))
    print("\n| run | acknowledged writes | not acknowledged (5xx) | acknowledged writes lost "
          "| attempts to recover (max per round) | s from kill to all writers served (max per round) |")
    print("|---|---|---|---|---|---|")
    for label in ("wait", "no-wait"):
        f = results[label]
        attempts = [max(r["attempts"].values()) for r in f["rounds"]]
        secs = [r["recover_s"] for r in f["rounds"]]
        print("| %s | %d | %d | %d | %s | %s |" % (
            "`--redis-min-replicas 1`" if label == "wait" else "`--redis-min-replicas 0`", f["acked"],
            f["not_acked"], f["lost"], ", ".join(str(x) for x in attempts),
            ", ".join("%.1f" % x for x in secs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
