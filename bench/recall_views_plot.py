#!/usr/bin/python3
"""recall_views_plot.py -- draws docs/research/fused-views.png from the table bench-recall-views prints:
completion accuracy of the fused recall read against the number of views J, per kind of view,
with the fused and averaged codes decoded without memory.

usage: bench-recall-views --episodes 5 > views.txt; /usr/bin/python3 bench/recall_views_plot.py views.txt docs/research/fused-views.png"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    rows = {}
    for line in open(sys.argv[1]):
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[1].isdigit():
            rows.setdefault(cells[0], []).append((int(cells[1]), float(cells[2]), float(cells[3]), float(cells[4])))
    if not rows:
        print("no table rows in %s" % sys.argv[1])
        return 1
    fig, axes = plt.subplots(1, len(rows), figsize=(5 * len(rows), 3.6), squeeze=False)
    for ax, (name, r) in zip(axes[0], rows.items()):
        J = [x[0] for x in r]
        ax.plot(J, [x[1] for x in r], "o-", label="fused recall read")
        ax.plot(J, [x[2] for x in r], "s--", label="RPM-fused code, decoded (no memory)")
        ax.plot(J, [x[3] for x in r], "^:", label="mean of the codes, decoded (no memory)")
        ax.axhline(1 / 64, color="grey", lw=0.8, label="chance")
        ax.set_xscale("log", base=2)
        ax.set_xticks(J)
        ax.set_xticklabels([str(j) for j in J])
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("views per item J")
        ax.set_ylabel("came back as its stored item")
        ax.set_title("views: %s" % name)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
