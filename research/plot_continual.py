#!/usr/bin/python3
"""plot_continual.py -- the table and the picture of research/continual.py's runs: test ELBO per frame
of each dataset of the stream against the step, one line per optimiser, and the fraction of the
first dataset's test ELBO gain each run keeps at the end of the stream.

  /usr/bin/python3 research/plot_continual.py [--reference FASHION_ONLY.csv] [--png docs/research/continual-mnist-fashion.png] \\
      research/runs/continual-adam.csv research/runs/continual-foovb.csv

--reference: a run on the second dataset alone (continual.py --stream fashion-mnist): its final test
ELBO on the first dataset is what training on the second alone gives there (transfer), the second
reference of the table ("kept over transfer")."""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from continual import kept_fraction  # noqa: E402


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError("%s: no rows" % path)
    return rows


def _mean(v):
    return sum(v) / len(v)


def summary(rows, reference_rows=None, last=3):
    """Dict of the table's figures for one run (kept_fraction gives the definitions; `last`
    evaluation points are averaged at the switch and at the end)."""
    keys = [k for k in rows[0] if k.startswith("test_elbo_")]
    first, second = keys[0], keys[-1]
    name = first[len("test_elbo_"):]
    t0 = [r for r in rows if int(r["task"]) == 0]
    out = {"optimizer": rows[0]["optimizer"], "run": rows[0]["optimizer"], "first": name, "last": last,
           "init": float(rows[0][first]), "boundary": _mean([float(r[first]) for r in t0[-last:]]),
           "end": _mean([float(r[first]) for r in rows[-last:]]),
           "kept": kept_fraction(rows, name, None, last),
           "second_init": float(rows[0][second]), "second_end": _mean([float(r[second]) for r in rows[-last:]]),
           "steps": int(rows[-1]["step"]), "seconds": float(rows[-1]["seconds"])}
    if reference_rows is not None:
        ref = _mean([float(r[first]) for r in reference_rows[-last:]])
        out["transfer"] = ref
        out["kept_over_transfer"] = kept_fraction(rows, name, ref, last)
        out["second_alone"] = _mean([float(r[second]) for r in reference_rows[-last:]])
        out["ref_steps"] = int(reference_rows[-1]["step"])
    return out


def table(sums):
    has_ref = all("transfer" in s for s in sums)
    s0 = sums[0]
    head = ("| run | %s test ELBO: untrained | at the switch | end of the stream | kept (over untrained)"
            % s0["first"])
    head += " | kept (over the second dataset alone) |" if has_ref else " |"
    head += " second dataset's test ELBO at the end | steps | seconds |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in sums:
        cells = [s["run"], "%.1f" % s["init"], "%.1f" % s["boundary"], "%.1f" % s["end"],
                 "**%.3f**" % s["kept"]]
        if has_ref:
            k = s["kept_over_transfer"]
            cells.append(("%.3f" % k if k == k else "n/a: at the switch below 'alone'") + " (alone: %.1f)" % s["transfer"])
        cells += ["%.1f" % s["second_end"], "%d" % s["steps"], "%.0f" % s["seconds"]]
        lines.append("| " + " | ".join(cells) + " |")
    if has_ref:
        lines.append("| (second dataset alone, Adam) | %.1f | | %.1f | | | %.1f | %d | |"
                     % (s0["init"], s0["transfer"], s0["second_alone"], s0["ref_steps"]))
    return "\n".join(lines)


def plot(runs, png, reference=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [k for k in runs[0][1][0] if k.startswith("test_elbo_")]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4.2), squeeze=False)
    reds = iter(["tab:red", "tab:orange", "tab:pink", "tab:brown"])
    blues = iter(["tab:blue", "tab:cyan", "tab:purple", "tab:green", "tab:olive", "tab:gray"])
    colors = {name: next(reds if rows[0]["optimizer"] == "adam" else blues, None) for name, rows in runs}
    for ax, k in zip(axes[0], keys):
        for name, rows in runs:
            xs = [int(r["step"]) for r in rows]
            ys = [float(r[k]) for r in rows]
            ax.plot(xs, ys, marker=".", label=name, color=colors[name])
        if reference is not None:
            ax.axhline(float(reference[-1].get(k, "nan") or "nan"), color="grey", ls=":",
                       label="second dataset alone (end)")
        # the y range starts just below the untrained networks' value: the first dataset's networks
        # score far lower on the second (down to -1e5 and beyond); those points are off the chart
        lo = min(float(rows[0][k]) for _, rows in runs) - 1000.0
        hi = max(float(r[k]) for _, rows in runs for r in rows if float(r[k]) == float(r[k]))
        ax.set_ylim(lo, hi + 0.05 * (hi - lo))
        steps0 = [int(r["step"]) for r in runs[0][1] if int(r["task"]) == 0]
        ax.axvline(steps0[-1], color="k", ls="--", lw=0.8)
        ax.set_title("test ELBO per frame, %s" % k[len("test_elbo_"):])
        ax.set_xlabel("step (dashed: the switch of dataset, not told to the optimiser)")
        ax.set_ylabel("nats per frame")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=90)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csvs", nargs="+")
    p.add_argument("--reference", default=None)
    p.add_argument("--png", default=None)
    p.add_argument("--last", type=int, default=3,
                   help="evaluation points averaged at the switch and at the end of the stream")
    a = p.parse_args(argv)
    runs = [(os.path.basename(c).replace(".csv", "").replace("continual-", ""), read_rows(c)) for c in a.csvs]
    ref = read_rows(a.reference) if a.reference else None
    sums = [summary(rows, ref, a.last) for _, rows in runs]
    for (name, _), s in zip(runs, sums):
        s["run"] = name
    print(table(sums))
    if a.png:
        plot(runs, a.png, ref)
        print("wrote %s" % a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
