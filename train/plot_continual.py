#!/usr/bin/python3
"""plot_continual.py -- the table and the picture of train/continual.py's runs: test ELBO per frame
of each dataset of the stream against the step, one line per optimiser, and the fraction of the
first dataset's test ELBO gain each run keeps at the end of the stream.

  /usr/bin/python3 train/plot_continual.py [--reference FASHION_ONLY.csv] [--png docs/continual-mnist-fashion.png] \\
      train/runs/continual-adam.csv train/runs/continual-foovb.csv

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


def summary(rows, reference_rows=None):
    """Dict of the table's figures for one run (see kept_fraction for the definitions)."""
    keys = [k for k in rows[0] if k.startswith("test_elbo_")]
    first, last = keys[0], keys[-1]
    t0 = [r for r in rows if int(r["task"]) == 0]
    out = {"optimizer": rows[0]["optimizer"], "first": first[len("test_elbo_"):],
           "init": float(rows[0][first]), "boundary": float(t0[-1][first]), "end": float(rows[-1][first]),
           "kept": kept_fraction(rows, first[len("test_elbo_"):]),
           "second_end": float(rows[-1][last]), "second_boundary": float(t0[-1][last]),
           "steps": int(rows[-1]["step"]), "seconds": float(rows[-1]["seconds"])}
    if reference_rows is not None:
        ref = float(reference_rows[-1][first])
        out["transfer"] = ref
        out["kept_over_transfer"] = kept_fraction(rows, out["first"], ref)
    return out


def table(sums):
    has_ref = all("transfer" in s for s in sums)
    head = "| optimiser | %s test ELBO: untrained | at the switch | end of stream | kept (vs untrained)" % sums[0]["first"]
    head += " | kept (vs second dataset alone) |" if has_ref else " |"
    head += " second dataset's test ELBO at the end | steps | seconds |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in sums:
        cells = [s["optimizer"], "%.1f" % s["init"], "%.1f" % s["boundary"], "%.1f" % s["end"], "%.3f" % s["kept"]]
        if has_ref:
            cells.append("%.3f (alone: %.1f)" % (s["kept_over_transfer"], s["transfer"]))
        cells += ["%.1f" % s["second_end"], "%d" % s["steps"], "%.0f" % s["seconds"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs, png, reference=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [k for k in runs[0][1][0] if k.startswith("test_elbo_")]
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4.2), squeeze=False)
    colors = {"adam": "tab:red", "foovb": "tab:blue"}
    for ax, k in zip(axes[0], keys):
        for name, rows in runs:
            xs = [int(r["step"]) for r in rows]
            ys = [float(r[k]) for r in rows]
            ax.plot(xs, ys, marker=".", label=name, color=colors.get(rows[0]["optimizer"]))
        if reference is not None:
            ax.axhline(float(reference[-1].get(k, "nan") or "nan"), color="grey", ls=":",
                       label="second dataset alone (end)")
        steps0 = [int(r["step"]) for r in runs[0][1] if int(r["task"]) == 0]
        ax.axvline(steps0[-1], color="k", ls="--", lw=0.8)
        ax.set_title("test ELBO per frame, %s" % k[len("test_elbo_"):])
        ax.set_xlabel("step (switch to the second dataset at the dashed line; not told to the optimiser)")
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
    a = p.parse_args(argv)
    runs = [(os.path.basename(c).replace(".csv", ""), read_rows(c)) for c in a.csvs]
    ref = read_rows(a.reference) if a.reference else None
    sums = [summary(rows, ref) for _, rows in runs]
    print(table(sums))
    if a.png:
        plot(runs, a.png, ref)
        print("wrote %s" % a.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
