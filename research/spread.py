#!/usr/bin/python3
"""spread.py -- the research pages' headline cells over seeds: for each cell the mean, the sample
standard deviation and the range (min-max) of its figure over the seeds run, and the orderings of
methods that the spread resolves (one method's worst seed better than the other's best seed).

  /usr/bin/python3 research/spread.py rpm [research/runs/rpm]          # nMSE per framework
  /usr/bin/python3 research/spread.py mws research/runs/mws-ca-10k-all-seed{0,1,2}.json
  /usr/bin/python3 research/spread.py foovb SEED0.csv[,MORE.csv] SEED1.csv ...   # one argument a seed
  /usr/bin/python3 research/spread.py continual RUN.csv[:ALONE.csv] ...          # one argument a seed

Nothing is trained here: it reads the runs' files (rpm_balls.py's JSON, mws_ca.py's JSON,
permuted_mnist.py's and continual.py's CSVs)."""
import argparse
import glob
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(os.path.dirname(HERE), "train"))


def stats(values):
    """{n, mean, sd, lo, hi} of a non-empty list of finite numbers; sd is the sample standard
    deviation (n - 1 in the denominator), 0 for one value. ValueError on an empty list or a
    non-finite value (a diverged run is reported as such, not averaged)."""
    if not values:
        raise ValueError("no values")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("non-finite value in %r" % (values,))
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "mean": mean, "sd": sd, "lo": min(values), "hi": max(values)}


def fmt(st, scale=1.0, digits=3):
    """'mean ± sd (lo-hi, n seeds)' with every number multiplied by scale."""
    f = "%%.%df" % digits
    return (f + " ± " + f + " (" + f + "-" + f + ", %d)") % (
        scale * st["mean"], scale * st["sd"], scale * st["lo"], scale * st["hi"], st["n"])


def separated(a, b, lower_is_better=True):
    """'<' when a is better than b in every pair of seeds (a's worst better than b's best), '>'
    when b is, None when the ranges overlap (the ordering is not resolved)."""
    if lower_is_better:
        return "<" if a["hi"] < b["lo"] else ">" if b["hi"] < a["lo"] else None
    return "<" if a["lo"] > b["hi"] else ">" if b["lo"] > a["hi"] else None


def orderings(cells, lower_is_better=True, min_n=3, per_seed=None):
    """Lines 'A better than B' / 'A vs B: not resolved' for every pair of cells with min_n seeds,
    best mean first. per_seed ({name: {seed: value}}), when given, adds to an unresolved pair how
    many of the seeds both ran the better-mean one wins."""
    names = sorted((k for k in cells if cells[k]["n"] >= min_n),
                   key=lambda k: cells[k]["mean"] * (1 if lower_is_better else -1))
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            s = separated(cells[a], cells[b], lower_is_better)
            if s == "<":
                out.append("%s better than %s" % (a, b))
            elif s == ">":
                out.append("%s better than %s" % (b, a))
            else:
                line = "%s vs %s: not resolved" % (a, b)
                if per_seed is not None:
                    both = sorted(set(per_seed[a]) & set(per_seed[b]))
                    wins = sum(1 for x in both if (per_seed[a][x] < per_seed[b][x]) == lower_is_better)
                    line += " (%s ahead in %d of %d paired seeds)" % (a, wins, len(both))
                out.append(line)
    return out


RPM_ORDER = ["aistats", "stupid", "internal", "costly-vae", "full-vae", "cheap-vae", "inference-amortized",
             "luxury-amortized", "minimalist-amortized", "minimalist-33"]


def cmd_rpm(a):
    runs = {}
    for path in sorted(glob.glob(os.path.join(a.dir, "results-*.json"))):
        with open(path) as f:
            d = json.load(f)
        runs.setdefault((d["dataset"], d["N"], d.get("init", "match")), []).extend(d["results"])
    for key in sorted(runs, key=lambda k: (k[0], k[1], k[2] != "match")):
        by = {}
        for r in runs[key]:
            by.setdefault(r["label"], {})[r["seed"]] = r
        print("\n%s N=%d init=%s" % key)
        print("| framework | nMSE train: mean ± sd (min-max, seeds) | held-out |")
        print("|---|---|---|")
        train, test, seeds = {}, {}, {"train": {}, "held-out": {}}
        for lab in [x for x in RPM_ORDER if x in by]:
            seeds["train"][lab] = {s: by[lab][s]["nmse_train"] for s in by[lab]}
            train[lab] = stats(list(seeds["train"][lab].values()))
            ts = {s: by[lab][s]["nmse_test"] for s in by[lab] if by[lab][s].get("nmse_test") is not None}
            if ts:
                seeds["held-out"][lab] = ts
                test[lab] = stats(list(ts.values()))
            held = fmt(test[lab], digits=4) if lab in test else "-"
            print("| %s | %s | %s |" % (lab, fmt(train[lab], digits=4), held))
        for what, cells in (("train", train), ("held-out", test)):
            for line in orderings(cells, per_seed=seeds[what]):
                print("  %s: %s" % (what, line))


def cmd_mws(a):
    cells = {}
    for path in a.files:
        with open(path) as f:
            d = json.load(f)
        for r in d["results"]:
            cells.setdefault((r["method"], r["K"]), {})[r["seed"]] = r["abs_err_eps"]
    st = {"%s K=%d" % k: stats([v[s] for s in sorted(v)]) for k, v in cells.items()}
    print("| method | abs. error of learned eps (%): mean ± sd (min-max, seeds) |")
    print("|---|---|")
    for k in st:
        print("| %s | %s |" % (k, fmt(st[k], 100, 3)))
    for line in orderings(st):
        print("  " + line)


def cmd_foovb(a):
    import permuted_mnist
    after, task1 = {}, {}
    for seed_csvs in a.seeds:
        best = permuted_mnist.best_runs(permuted_mnist.summarise(seed_csvs))
        for m, (lr, d, score) in best.items():
            last = d[max(d)]
            after.setdefault(m, []).append(score)
            task1.setdefault(m, []).append(last[0])
    print("| method | mean accuracy after the last task (%) | task 1 after the last task (%) |")
    print("|---|---|---|")
    sa = {m: stats(v) for m, v in after.items()}
    st = {m: stats(v) for m, v in task1.items()}
    for m in sa:
        print("| %s | %s | %s |" % (m, fmt(sa[m], 100, 1), fmt(st[m], 100, 1)))
    for what, cells in (("after the last task", sa), ("task 1", st)):
        for line in orderings(cells, lower_is_better=False):
            print("  %s: %s" % (what, line))


def cmd_continual(a):
    import plot_continual
    figs = {}
    for arg in a.seeds:
        run, _, ref = arg.partition(":")
        rows = plot_continual.read_rows(run)
        s = plot_continual.summary(rows, plot_continual.read_rows(ref) if ref else None)
        for k in ("boundary", "end", "kept", "kept_over_transfer", "second_end"):
            if k in s:
                figs.setdefault(k, []).append(s[k])
    for k, v in figs.items():
        finite = [x for x in v if math.isfinite(x)]
        print("%-20s %s%s" % (k, fmt(stats(finite)) if finite else "-",
                              "; %d of %d seeds NaN" % (len(v) - len(finite), len(v)) if len(finite) < len(v) else ""))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rpm")
    r.add_argument("dir", nargs="?", default=os.path.join(HERE, "runs", "rpm"))
    m = sub.add_parser("mws")
    m.add_argument("files", nargs="+")
    f = sub.add_parser("foovb")
    f.add_argument("seeds", nargs="+", help="one argument per seed: its CSV(s), comma separated")
    c = sub.add_parser("continual")
    c.add_argument("seeds", nargs="+", help="one argument per seed: RUN.csv or RUN.csv:ALONE.csv")
    a = p.parse_args(argv)
    {"rpm": cmd_rpm, "mws": cmd_mws, "foovb": cmd_foovb, "continual": cmd_continual}[a.cmd](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
