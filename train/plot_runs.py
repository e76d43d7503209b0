#!/usr/bin/python3
"""plot_runs.py -- learning curves (training ELBO per frame) of the trainer's JSON-lines logs,
one line per log, into a PNG: against steps for logs of train.py --log-every (lines with
"train_elbo_per_frame"), against epochs for its default per-epoch logs (lines with "epoch" and
"elbo_per_frame", the epoch's mean); the logs of one picture are all of one kind.

  /usr/bin/python3 train/plot_runs.py [--ymin Y] OUT.png LOG.jsonl[=LABEL] ...

--ymin Y cuts the vertical axis at Y (an unstable run's dips far below would flatten the rest;
the title says where the axis is cut).

A log line with "test_elbo_per_frame" (the end of a run) is marked as a dot at
the run's last step or epoch and given in the legend."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    """(x, training ELBO, test ELBO or None, "step" or "epoch") of one log."""
    steps, elbo, test, unit = [], [], None, None
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "train_elbo_per_frame" in d:
                steps.append(d["step"])
                elbo.append(d["train_elbo_per_frame"])
                unit = unit or "step"
            elif "epoch" in d and "elbo_per_frame" in d:
                steps.append(d["epoch"])
                elbo.append(d["elbo_per_frame"])
                unit = unit or "epoch"
            elif "test_elbo_per_frame" in d:
                test = d["test_elbo_per_frame"]
    return steps, elbo, test, unit


def main(argv):
    ymin = None
    if len(argv) > 2 and argv[1] == "--ymin":
        ymin = float(argv[2])
        argv = argv[:1] + argv[3:]
    if len(argv) < 3:
        raise SystemExit(__doc__)
    out = argv[1]
    panels = {}
    for arg in argv[2:]:
        path, _, label = arg.partition("=")
        label = label or path.rsplit("/", 1)[-1].replace(".jsonl", "")
        panel = "VAE" if "vae" in label.lower() else "mixture memory"
        panels.setdefault(panel, []).append((path, label))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    units = set()
    for ax, (panel, runs) in zip(axes[0], sorted(panels.items(), reverse=True)):
        top = None
        for path, label in runs:
            steps, elbo, test, unit = read(path)
            top = max([v for v in elbo + [test] if v is not None] + ([top] if top is not None else []))
            units.add(unit)
            if len(units) > 1:
                raise SystemExit("%s: logs per step and per epoch in one picture" % path)
            name = label + ("  (test %.0f)" % test if test is not None else "")
            line, = ax.plot(steps, elbo, label=name)
            if test is not None and steps:
                ax.plot([steps[-1]], [test], "o", color=line.get_color())
        if ymin is not None:
            ax.set_ylim(ymin, top + 0.05 * (top - ymin))
            ax.set_title("%s (axis cut at %g)" % (panel, ymin))
        else:
            ax.set_title(panel)
        if units == {"epoch"}:
            ax.set_xlabel("epoch (a pass over the training images)")
            ax.set_ylabel("training ELBO per frame (nats), mean of the epoch")
        else:
            ax.set_xlabel("step (2 episodes of 64 frames each)")
            ax.set_ylabel("training ELBO per frame (nats), mean of 10 steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print("wrote %s" % out)


if __name__ == "__main__":
    main(sys.argv)
