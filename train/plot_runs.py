#!/usr/bin/python3
"""plot_runs.py -- learning curves (training ELBO per frame against steps) of the
trainer's JSON-lines logs (train.py --log-every), one line per log, into a PNG.

  /usr/bin/python3 train/plot_runs.py OUT.png LOG.jsonl[=LABEL] ...

A log line with "test_elbo_per_frame" (the end of a run) is marked as a dot at
the run's last step and given in the legend."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    steps, elbo, test = [], [], None
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "train_elbo_per_frame" in d:
                steps.append(d["step"])
                elbo.append(d["train_elbo_per_frame"])
            elif "test_elbo_per_frame" in d:
                test = d["test_elbo_per_frame"]
    return steps, elbo, test


def main(argv):
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
    for ax, (panel, runs) in zip(axes[0], sorted(panels.items(), reverse=True)):
        for path, label in runs:
            steps, elbo, test = read(path)
            name = label + ("  (test %.0f)" % test if test is not None else "")
            line, = ax.plot(steps, elbo, label=name)
            if test is not None and steps:
                ax.plot([steps[-1]], [test], "o", color=line.get_color())
        ax.set_title(panel)
        ax.set_xlabel("step (2 episodes of 64 frames each)")
        ax.set_ylabel("training ELBO per frame (nats), mean of 10 steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print("wrote %s" % out)


if __name__ == "__main__":
    main(sys.argv)
