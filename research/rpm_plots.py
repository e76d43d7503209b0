"""rpm_plots.py -- figures and the markdown table of the bouncing-ball RPM
experiments (research/rpm_balls.py --plot) from its results JSON files."""
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from vbmtrain import rpm  # noqa: E402

# colours by the seed's Fig. 2 columns: green = per-datum q, blue = VAE q, orange/brown = analytic q
COLOURS = {"aistats": "#a1d99b", "stupid": "#41ab5d", "internal": "#006d2c",
           "costly-vae": "#9ecae1", "full-vae": "#4292c6", "cheap-vae": "#08519c",
           "inference-amortized": "#fdae6b", "luxury-amortized": "#e6550d", "minimalist-amortized": "#8c510a",
           "minimalist-33": "#8c510a"}
ORDER = ["aistats", "stupid", "internal", "costly-vae", "full-vae", "cheap-vae", "inference-amortized",
         "luxury-amortized", "minimalist-amortized", "minimalist-33"]


def load(out):
    """{(dataset, N, init): [result dicts over all seeds]} from out/results-*.json."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "results-*.json"))):
        with open(path) as f:
            d = json.load(f)
        runs.setdefault((d["dataset"], d["N"], d.get("init", "match")), []).extend(d["results"])
    return runs


def by_label(results):
    g = {}
    for r in results:
        g.setdefault(r["label"], []).append(r)
    return [(lab, g[lab]) for lab in ORDER if lab in g]


def _mean(v):
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None


def table(runs):
    """Markdown table: nMSE (train / held-out) per framework x (dataset, N), means over seeds."""
    keys = sorted(runs, key=lambda k: (k[0], k[1], k[2] != "match"))
    labs = [lab for lab in ORDER if any(r["label"] == lab for k in keys for r in runs[k])]
    head = "| framework | " + " | ".join("%s N=%d%s" % (k[0], k[1], "" if k[2] == "match" else " (random init)")
                                       for k in keys) + " |"
    lines = [head, "|" + " --- |" * (len(keys) + 1)]
    for lab in labs:
        cells = []
        for k in keys:
            rs = [r for r in runs[k] if r["label"] == lab]
            if not rs:
                cells.append("–")
                continue
            ok = [r for r in rs if not r.get("diverged")]
            tr = _mean([r.get("nmse_train") for r in ok])
            te = _mean([r.get("nmse_test") for r in ok])
            c = "–" if tr is None else "%.3f" % tr
            if te is not None:
                c += " / %.3f" % te
            if len(ok) < len(rs):
                c += " (%d/%d diverged)" % (len(rs) - len(ok), len(rs))
            if len(rs) > 1:
                c += " [%d seeds]" % len(rs)
            cells.append(c)
        lines.append("| %s | %s |" % (lab, " | ".join(cells)))
    return "\n".join(lines)


def fig_data(docs):
    fig, axes = plt.subplots(2, 1, figsize=(8, 4.2))
    for ax, kind in zip(axes, ("poisson", "textured")):
        X, Z = rpm.make_balls(kind, 1, seed=1000)
        im = ax.imshow(X[0].numpy(), aspect="auto", cmap="gray", origin="lower")
        ax.plot(Z[0].numpy(), color="#e6550d", lw=1.2, label="true ball centre")
        ax.set_title("%s balls (J = 10 rows x T = 50 steps), training sequence 0" % kind, fontsize=9)
        ax.set_ylabel("row j")
        fig.colorbar(im, ax=ax, fraction=0.03)
    axes[0].legend(fontsize=7, loc="upper right")
    axes[1].set_xlabel("time step t")
    fig.tight_layout()
    fig.savefig(os.path.join(docs, "rpm-data.png"), dpi=110)
    plt.close(fig)


def fig_run(docs, key, results):
    dataset, N, init = key
    groups = by_label(results)
    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(9, 6.5), gridspec_kw={"height_ratios": [1.4, 1]})
    X, Z = rpm.make_balls(dataset, N, seed=1000 + min(r["seed"] for r in results))
    ax0.imshow(X[0].numpy(), aspect="auto", cmap="gray", origin="lower", alpha=0.55)
    ax0.plot(Z[0].numpy(), color="k", lw=2.2, label="truth")
    seed0 = min(r["seed"] for r in results)
    for lab, rs in groups:
        r = [x for x in rs if x["seed"] == seed0]
        if not r or r[0].get("diverged") or "example" not in r[0]:
            continue
        r = r[0]
        c, b = r["align"]
        mu = [c * m + b for m in r["example"]["mu"]]
        sd = [abs(c) * v ** 0.5 for v in r["example"]["var"]]
        ls = "--" if lab == "minimalist-33" else "-"
        ax0.plot(mu, ls, color=COLOURS[lab], lw=1.3, label=lab)
        if lab in ("minimalist-amortized", "full-vae"):
            ax0.fill_between(range(len(mu)), [m - 2 * s for m, s in zip(mu, sd)], [m + 2 * s for m, s in zip(mu, sd)],
                             color=COLOURS[lab], alpha=0.15)
    ax0.set_xlim(0, len(Z[0]) - 1)
    ax0.set_ylim(-1.5, 10.5)
    ax0.set_ylabel("ball position (rows)")
    ax0.set_title("%s balls, N = %d, init %s: aligned posterior means (+-2 sd: minimalist, full VAE), "
                  "training seq. 0" % (dataset, N, init), fontsize=8)
    ax0.legend(fontsize=6, ncol=4, loc="upper right")
    xs = range(len(groups))
    for i, (lab, rs) in enumerate(groups):
        ok = [r for r in rs if not r.get("diverged")]
        tr = _mean([r["nmse_train"] for r in ok])
        if tr is not None:
            ax1.bar(i, min(tr, 1.0), color=COLOURS[lab], hatch="//" if lab == "minimalist-33" else None,
                    edgecolor="k", lw=0.4)
            for r in ok:
                ax1.plot(i, min(r["nmse_train"], 1.0), "k.", ms=4)
                if r.get("nmse_test") is not None:
                    ax1.plot(i + 0.25, min(r["nmse_test"], 1.0), "x", color="0.3", ms=4)
        else:
            ax1.text(i, 0.02, "diverged", rotation=90, fontsize=7, ha="center")
    ax1.set_xticks(list(xs))
    ax1.set_xticklabels([g[0] for g in groups], rotation=30, ha="right", fontsize=7)
    ax1.set_ylabel("nMSE (train: bars/dots, held-out: x)")
    ax1.set_yscale("log")
    fig.tight_layout()
    suffix = "" if init == "match" else "-" + init
    fig.savefig(os.path.join(docs, "rpm-%s-N%d%s.png" % (dataset, N, suffix)), dpi=110)
    plt.close(fig)


def fig_losses(docs, runs):
    keys = sorted(k for k in runs if k[2] == "match")
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        seed0 = min(r["seed"] for r in runs[key])
        for lab, rs in by_label(runs[key]):
            r = [x for x in rs if x["seed"] == seed0 and "loss_curve" in x]
            if not r:
                continue
            r = r[0]
            stride = max(1, r["steps"] // 200)
            y = r["loss_curve"]
            k = 5
            ys = [sum(y[max(0, i - k):i + 1]) / len(y[max(0, i - k):i + 1]) for i in range(len(y))]
            ax.plot([i * stride for i in range(len(ys))], ys, "--" if lab == "minimalist-33" else "-",
                    color=COLOURS[lab], lw=1, label=lab)
        ax.set_title("%s N=%d (train loss, seed %d)" % (key[0], key[1], seed0), fontsize=8)
        ax.axhline(0.0, color="0.7", lw=0.5)
        ax.set_xlabel("gradient step")
        ax.set_ylim(-4, 3)
    axes[0][0].set_ylabel("-free energy / T")
    axes[0][0].legend(fontsize=5)
    fig.tight_layout()
    fig.savefig(os.path.join(docs, "rpm-losses.png"), dpi=100)
    plt.close(fig)


def make_all(out, docs):
    """Write docs/research/rpm-data.png, docs/research/rpm-<dataset>-N<N>.png, docs/research/rpm-losses.png and print the table."""
    runs = load(out)
    os.makedirs(docs, exist_ok=True)
    fig_data(docs)
    for key, results in runs.items():
        fig_run(docs, key, results)
    if runs:
        fig_losses(docs, runs)
    print(table(runs))
