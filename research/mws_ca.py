#!/usr/bin/python3
"""mws_ca.py -- the cellular-automaton experiment of seed 001 (Hewitt et al., memoised
wake-sleep, Sec. 4.3, Table 8, Fig. 8; with --neighbourhood 5 the harder task of its supplement
7.6, Table 9) on the CPU: learns the flip noise eps and the rule prior by MWS (Mem-r, Sleep-r)
and RWS (Sleep-r, Wake-r), prints the absolute error of the learned eps per method next to the
seed's table, writes the results as JSON and the resynthesis picture."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train"))
import mws  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# (method, K) of the run, and the seed's Table 8 figure for it (absolute error of eps, %)
# (default: MWS K = 1 against RWS K = 1 and 10; the MWS K = 10 rows run with --runs, see
# docs/research/mws-cellular-automata.md)
RUNS = [("mws-sleep", 1), ("mws-mem", 1), ("rws-sleep", 1), ("rws-sleep", 10), ("rws-wake", 10), ("exact", 1)]
# D = 5 (supplement 7.6, Table 9 reports K = 1, 3, 5)
RUNS_D5 = [("mws-sleep", 1), ("mws-mem", 1), ("rws-sleep", 1), ("mws-sleep", 5), ("mws-mem", 5), ("rws-sleep", 5),
           ("rws-wake", 5), ("exact", 1)]
SEED_TABLE8 = {("rws-sleep", 1): 4.30, ("rws-sleep", 3): 3.21, ("rws-sleep", 5): 2.24, ("rws-sleep", 10): 2.25,
               ("rws-wake", 3): 1.69, ("rws-wake", 5): 0.28, ("rws-wake", 10): 0.27,
               ("mws-sleep", 1): 0.01, ("mws-sleep", 3): 0.01, ("mws-sleep", 5): 0.01, ("mws-sleep", 10): 0.01,
               ("mws-mem", 1): 0.12, ("mws-mem", 3): 0.16, ("mws-mem", 5): 0.10, ("mws-mem", 10): 0.18}
SEED_TABLE9 = {("rws-sleep", 1): 17.96, ("rws-sleep", 3): 14.52, ("rws-sleep", 5): 12.51,
               ("mws-sleep", 1): 2.27, ("mws-sleep", 3): 1.99, ("mws-sleep", 5): 1.52,
               ("rws-wake", 3): 5.10, ("rws-wake", 5): 3.09,
               ("mws-mem", 1): 1.85, ("mws-mem", 3): 2.44, ("mws-mem", 5): 2.23}
LABEL = {"mws-sleep": "MWS (Sleep-r)", "mws-mem": "MWS (Mem-r)", "rws-sleep": "RWS (Sleep-r)",
         "rws-wake": "RWS (Wake-r)", "exact": "exact posterior (EM, reference)"}


def parse_runs(text):
    """'mws-sleep:1,rws-sleep:10' -> [("mws-sleep", 1), ("rws-sleep", 10)]."""
    out = []
    for item in text.split(","):
        m, k = item.split(":")
        if m not in mws.METHODS:
            raise SystemExit("unknown method %r (one of %s)" % (m, ", ".join(mws.METHODS)))
        out.append((m, int(k)))
    return out


def evaluate(res, method, K, images, rules, u, eps_true, eps_mle, map_rules, seed):
    """The figures of one trained method on its training images."""
    g = torch.Generator()
    g.manual_seed(seed + 7)
    model, net = res["model"], res["net"]
    eps = model.eps().item()
    inferred = mws.infer_rules(res, images, method, K, g)
    with torch.no_grad():
        qmode = mws.bits_rule((net(images) > 0).double()) if method != "exact" else inferred
    freq = mws.rule_bits(rules, model.D).mean(0)
    prior = torch.sigmoid(model.prior_logits.detach())
    return {"method": method, "K": K, "eps": eps, "abs_err_eps": abs(eps - eps_true),
            "abs_err_eps_vs_mle": abs(eps - eps_mle),
            "rule_acc_vs_map": (inferred == map_rules).double().mean().item(),
            "qmode_acc_vs_map": (qmode == map_rules).double().mean().item(),
            "prior_mae_vs_freq": (prior - freq).abs().mean().item(),
            "prior": prior.tolist(), "samples_drawn": res["samples_drawn"], "trace": res["trace"],
            "inferred": inferred.tolist()}


def print_table(runs, results, D=3):
    """The Markdown table of Table 8's rows (Table 9's for D = 5): mean and per-seed absolute
    error of eps per (method, K)."""
    table = SEED_TABLE9 if D == 5 else SEED_TABLE8 if D == 3 else {}
    print("\n| method | K | seed's Table %s | abs. error of learned eps, mean | per seed | learned eps | "
          "inferred rule = exact MAP | r's mode = exact MAP | prior: mean abs(pi_b - freq_b) |" %
          (9 if D == 5 else 8))
    print("|---|---|---|---|---|---|---|---|---|")
    for method, K in runs:
        rs = [r for r in results if r["method"] == method and r["K"] == K]
        mean = lambda key: sum(r[key] for r in rs) / len(rs)  # noqa: E731
        ref = table.get((method, K))
        print("| %s | %d | %s | %.3f%% | %s | %.3f%% | %.1f%% | %.1f%% | %.3f |" % (
            LABEL[method], K, "%.2f%%" % ref if ref is not None else "-", 100 * mean("abs_err_eps"),
            " ".join("%.3f" % (100 * r["abs_err_eps"]) for r in rs), 100 * mean("eps"), 100 * mean("rule_acc_vs_map"),
            100 * mean("qmode_acc_vs_map"), mean("prior_mae_vs_freq")))


def trace_picture(path, runs, results, eps_true):
    """The learned eps against the iteration, one line per (method, K) and seed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for ci, (method, K) in enumerate(runs):
        for si, r in enumerate(x for x in results if x["method"] == method and x["K"] == K):
            it, eps = zip(*r["trace"])
            ax.plot(it, [100 * e for e in eps], color="C%d" % ci, lw=1, alpha=0.8,
                    label="%s K=%d" % (LABEL[method], K) if si == 0 else None)
    ax.axhline(100 * eps_true, color="k", ls=":", lw=1, label="true eps")
    ax.set_yscale("log")
    ax.set_yticks([1, 2, 3, 5, 10, 20, 30, 50])
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("iteration")
    ax.set_ylabel("learned eps (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def picture(path, images, rules, results, pick, H, W, seed, D=3):
    """Fig. 8 of the seed: observed images (top row) and, per method, an image resynthesised from
    the rule it inferred, with its learned eps and one fresh first row shared by all methods."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    g = torch.Generator()
    g.manual_seed(seed)
    first = (torch.rand(len(pick), W, generator=g) < 0.5).double()
    rows = [("observed", [images[i] for i in pick], ["rule %d" % rules[i] for i in pick])]
    for r in results:
        inf = torch.tensor([r["inferred"][i] for i in pick])
        gg = torch.Generator()
        gg.manual_seed(seed + 1)
        syn = mws.ca_render(inf, first, H, r["eps"], gg, D)
        rows.append(("%s K=%d\neps=%.2f%%" % (LABEL[r["method"]].replace(" (EM, reference)", ""), r["K"],
                                             100 * r["eps"]),
                     list(syn), ["rule %d" % v for v in inf.tolist()]))
    fig, axes = plt.subplots(len(rows), len(pick), figsize=(1.6 * len(pick) + 1.2, 1.75 * len(rows)),
                             squeeze=False)
    for ri, (name, ims, caps) in enumerate(rows):
        for ci, (im, cap) in enumerate(zip(ims, caps)):
            ax = axes[ri][ci]
            ax.imshow(im.numpy(), cmap="gray_r", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(cap, fontsize=7, pad=2)
            if ci == 0:
                ax.set_ylabel(name, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: 100 images of 32 x 32, 300 iterations, --lr-p 0.03")
    ap.add_argument("--n", type=int, default=500, help="training images (seed: 500)")
    ap.add_argument("--size", type=int, default=64, help="image height = width (seed: 64)")
    ap.add_argument("--eps", type=float, default=0.02, help="true flip noise (seed: 0.02)")
    ap.add_argument("--iters", type=int, default=3000, help="iterations per method (seed: 10000)")
    ap.add_argument("--lr-p", type=float, default=0.01, help="Adam step of eps and the prior logits")
    ap.add_argument("--batch", type=int, default=25, help="images per iteration (seed: 25)")
    ap.add_argument("--data-seed", type=int, default=1)
    ap.add_argument("--seeds", default="0", help="training seeds, comma separated")
    ap.add_argument("--runs", default=None, help="method:K,... (default: the table's rows)")
    ap.add_argument("--out", default=os.path.join(ROOT, "research", "runs", "mws-ca.json"))
    ap.add_argument("--picture", default=None, help="PNG of observed and resynthesised textures")
    ap.add_argument("--trace-picture", default=None, help="PNG of the learned eps against the iteration")
    ap.add_argument("--table", default=None, help="only print the table of these result files (comma separated)")
    ap.add_argument("--neighbourhood", type=int, default=3, choices=mws.NEIGHBOURHOODS,
                    help="D, cells a cell reads in the row above (seed: 3, Table 8; 5, Table 9: 2^32 rules)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.table:
        results = []
        for path in args.table.split(","):
            with open(path) as f:
                results += json.load(f)["results"]
        runs = []
        for r in results:
            if (r["method"], r["K"]) not in runs:
                runs.append((r["method"], r["K"]))
        with open(args.table.split(",")[0]) as f:
            D = json.load(f)["args"].get("neighbourhood", 3)
        print_table(runs, results, D)
        if args.trace_picture:
            trace_picture(args.trace_picture, runs, results, args.eps)
        return
    if args.quick:
        args.n, args.size, args.iters, args.lr_p = 100, 32, 300, 0.03
    D = args.neighbourhood
    runs = parse_runs(args.runs) if args.runs else RUNS_D5 if D == 5 else RUNS
    seeds = [int(s) for s in args.seeds.split(",")]
    images, rules, u = mws.make_dataset(args.n, args.size, args.size, args.eps, args.data_seed, D)
    counts = mws.pattern_counts(images, D)
    tbits = mws.rule_bits(rules, D)
    # eps_mle: the maximum-likelihood eps given the true rules (the data's own flip rate)
    match = (counts[:, :, 1] * tbits + counts[:, :, 0] * (1 - tbits)).sum()
    eps_mle = 1.0 - (match / counts.sum()).item()
    truth = mws.CAModel(0.5, args.size, args.size, D)
    with torch.no_grad():
        truth.eps_logit.fill_(torch.logit(torch.tensor(args.eps, dtype=torch.float64)))
        truth.prior_logits.copy_(torch.logit(u))
        map_rules = mws.bits_rule((truth.posterior_bits(counts) > 0.5).double())
    print("data: %d images %dx%d, eps %.4f (flip rate given the true rules %.5f), %d distinct rules, "
          "true rule = exact MAP rule for %.1f%%" % (args.n, args.size, args.size, args.eps, eps_mle,
                                                    len(set(rules.tolist())),
                                                    100 * (map_rules == rules).double().mean().item()))
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    results = []
    for seed in seeds:
        for method, K in runs:
            t0 = time.time()
            res = mws.train(images, method, K, args.iters, seed, batch=args.batch, lr_p=args.lr_p,
                            log_every=max(1, args.iters // 10), log=lambda s: print("  " + s, flush=True), D=D)
            r = evaluate(res, method, K, images, rules, u, args.eps, eps_mle, map_rules, seed)
            r["seed"] = seed
            r["seconds"] = time.time() - t0
            results.append(r)
            print("%-32s K=%-2d seed %d: eps %.4f%%  |err| %.3f%%  rule=MAP %.1f%%  r-mode=MAP %.1f%%  %.0f s" % (
                LABEL[method], K, seed, 100 * r["eps"], 100 * r["abs_err_eps"], 100 * r["rule_acc_vs_map"],
                100 * r["qmode_acc_vs_map"], r["seconds"]), flush=True)
    print_table(runs, results, D)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "loadavg": os.getloadavg(), "eps_mle_true_rules": eps_mle, "u": u.tolist(),
                   "true_rules": rules.tolist(), "map_rules": map_rules.tolist(), "results": results}, f)
    print("wrote", args.out)
    if args.trace_picture:
        trace_picture(args.trace_picture, runs, results, args.eps)
    if args.picture:
        # six images of distinct rules, the first of each in data order, and the first seed's results
        pick, seen = [], set()
        for i, z in enumerate(rules.tolist()):
            if z not in seen and len(set(images[i].flatten().tolist())) > 1:
                seen.add(z)
                pick.append(i)
            if len(pick) == 6:
                break
        shown = [r for r in results if r["seed"] == seeds[0] and r["method"] != "exact"]
        picture(args.picture, images, rules.tolist(), shown, pick, args.size, args.size, 1234, D)
        print("wrote", args.picture)


if __name__ == "__main__":
    main()
