#!/usr/bin/python3
"""online_plot.py -- owns the picture of bench-online-stream's CSV (--csv): recall of the
stream's first piece after every append, per cue, for N appends, a batch write of all seen
and appends + refit (bars: one binomial standard error over the cues of all seeds), with
encode-decode as the no-memory line (bench/figures/online-stream.png).

usage: /usr/bin/python3 bench/online_plot.py STREAM.csv OUT.png
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    hits = defaultdict(int)  # (cue, pieces, condition) -> hits over seeds
    total = defaultdict(int)
    per_seed = defaultdict(float)  # (seed, cue, pieces, condition) -> fraction
    with open(sys.argv[1], newline="") as f:
        for row in csv.DictReader(f):
            key = (row["cue"], int(row["pieces_written"]), row["condition"])
            hits[key] += int(row["hits"])
            total[key] += int(row["of"])
            per_seed[(row["seed"],) + key] = int(row["hits"]) / int(row["of"])
    # paired differences: per seed, the mean over the pieces written after the first of
    # (condition - batch); then their mean and standard error over the seeds
    seeds = sorted({k[0] for k in per_seed})
    pieces = sorted({k[2] for k in per_seed if k[2] > 1})
    for cue in ("top", "noise35"):
        for cond in ("appends", "appends+refit"):
            d = [sum(per_seed[(sd, cue, k, cond)] - per_seed[(sd, cue, k, "batch")]
                     for k in pieces) / len(pieces) for sd in seeds]
            m = sum(d) / len(d)
            se = (sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d)) ** 0.5 if len(d) > 1 else 0
            print(f"cue {cue}: {cond} - batch over pieces {pieces[0]}..{pieces[-1]}: "
                  f"{m:+.3f} (standard error over {len(d)} seeds {se:.3f})")
    cues = [("top", "top half blanked (mask)"), ("noise35", "noise sd 0.35 (no mask)")]
    conds = [("appends", "N appends", "tab:red", "o-"),
             ("batch", "batch write of all seen", "tab:blue", "s--"),
             ("appends+refit", "appends + refit", "tab:green", "^-")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (cue, title) in zip(axes, cues):
        for cond, label, color, style in conds:
            ks = sorted(k for (c, k, d) in hits if c == cue and d == cond)
            ys = [hits[(cue, k, cond)] / total[(cue, k, cond)] for k in ks]
            se = [(y * (1 - y) / total[(cue, k, cond)]) ** 0.5 for y, k in zip(ys, ks)]
            off = {"appends": -0.08, "batch": 0.0, "appends+refit": 0.08}[cond]
            ax.errorbar([k + off for k in ks], ys, yerr=se, fmt=style, color=color,
                        label=label, capsize=2)
        ed = (cue, 0, "encode-decode")
        if total.get(ed):
            ax.axhline(hits[ed] / total[ed], color="gray", linestyle=":",
                       label="encode-decode (no memory)")
        ax.set_title("recall of the first piece, cue: " + title, fontsize=10)
        ax.set_xlabel("pieces written (16 frames each; classes drift 0 -> 9)")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction nearest to own original")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)


if __name__ == "__main__":
    main()
