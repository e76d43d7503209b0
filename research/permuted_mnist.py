#!/usr/bin/python3
"""permuted_mnist.py -- the discrete task-agnostic permuted-MNIST experiment of
FOO-VB (Zeno et al., Sec. 6.1, Fig. 1 and 2) on the CPU: FOO-VB diagonal,
FOO-VB matrix-variate, Adam and SGD on one stream of mini-batches with no task
boundaries given to the algorithms; after each task, the test accuracy on
every task seen so far.  Writes a CSV (rows replaced per method) and a plot.

    nice -n 10 /usr/bin/python3 research/permuted_mnist.py --methods foovb-diag
    nice -n 10 /usr/bin/python3 research/permuted_mnist.py --methods foovb-matrix
    nice -n 10 /usr/bin/python3 research/permuted_mnist.py --methods adam,sgd
    /usr/bin/python3 research/permuted_mnist.py --plot-only

Task 1 is unpermuted MNIST (as in the authors' code); tasks 2..T use fixed
random pixel permutations drawn from --seed.  See docs/research/foovb-permuted-mnist.md for
what is reduced against the paper and why.
"""
import argparse
import csv
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(ROOT, "train"))

from vbmtrain import data  # noqa: E402
from foovb import FooVB  # noqa: E402

DATA_DIRS = [os.path.join(ROOT, "..", "shared", "data", "mnist"), "/work/shared/data/mnist"]
METHODS = ("foovb-diag", "foovb-matrix", "foovb-matrix-tc", "adam", "sgd")
FIELDS = ["method", "lr", "after_task", "task", "acc", "seconds"]


# The BGD code's padded permuted MNIST (github.com/igolan/bgd, utils/datasets.py, the
# diagonal FOO-VB code the seed's authors point to): Pad(2) with zeros, then
# Normalize(mean=0.1, std=0.2752) -- the padded images' own mean and std.
PAD32_MEAN, PAD32_STD = 0.1, 0.2752


def pad32(x):
    """(N, 28, 28) images in [0, 1] -> (N, 32, 32): two rows/columns of zeros on
    every side, then (x - PAD32_MEAN) / PAD32_STD (the border becomes -0.1/0.2752)."""
    return (F.pad(x, (2, 2, 2, 2)) - PAD32_MEAN) / PAD32_STD


def load_mnist(dirname, pool, padded=False):
    """(x_train, y_train, x_test, y_test): images as float32 (N, D) in [0, 1],
    average-pooled pool x pool (pool=1: 28x28, D=784; pool=2: 14x14, D=196);
    padded=True (pool must be 1): pad32's 32x32 images, D=1024."""
    if padded and pool != 1:
        raise ValueError("padded inputs are 32x32 from the full 28x28 images: pool must be 1")
    out = []
    for split in ("train", "t10k"):
        imgs = data.read_idx(data._find(dirname, "%s-images-idx3-ubyte" % split))
        labs = data.read_idx(data._find(dirname, "%s-labels-idx1-ubyte" % split))
        x = torch.from_numpy(imgs.astype(np.float32) / 255.0)
        if pool > 1:
            x = F.avg_pool2d(x[:, None], pool)[:, 0]
        if padded:
            x = pad32(x)
        out += [x.reshape(x.shape[0], -1).contiguous(), torch.from_numpy(labs.astype(np.int64))]
    return out


def make_perms(D, T, seed):
    """T pixel permutations of D pixels: the identity first, then T-1 drawn
    from a numpy generator seeded with `seed`."""
    rng = np.random.default_rng(seed)
    return [torch.arange(D)] + [torch.from_numpy(rng.permutation(D)) for _ in range(T - 1)]


def mlp(D, width, generator, bias="zero"):
    """D-width-width-10 ReLU MLP; weights N(0, 2/(fan_in+fan_out)) drawn from
    `generator`; biases 0 (bias="zero") or, bias="bgd", N(0, 2/(1+fan_out))
    drawn after each layer's weights (the BGD code's default `bias_type
    xavier`, nn_utils/init_utils.py init_bias_lin_xavier)."""
    if bias not in ("zero", "bgd"):
        raise ValueError("mlp: bias must be 'zero' or 'bgd', got %r" % (bias,))
    net = nn.Sequential(nn.Linear(D, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
    with torch.no_grad():
        for m in net:
            if isinstance(m, nn.Linear):
                fi, fo = m.in_features, m.out_features
                m.weight.copy_(torch.randn(m.weight.shape, generator=generator) * math.sqrt(2.0 / (fi + fo)))
                if bias == "bgd":
                    m.bias.copy_(torch.randn(m.bias.shape, generator=generator) * math.sqrt(2.0 / (1 + fo)))
                else:
                    m.bias.zero_()
    return net


def stream(T, epochs, N, batch, seed):
    """The mini-batch stream shared by every method: (task, index tensor)
    per batch, task by task, `epochs` shuffled passes over the task's N
    training images each.  The task index is only used to permute the images
    (the algorithms never see it)."""
    for t in range(T):
        for e in range(epochs):
            order = torch.from_numpy(np.random.default_rng([seed, t, e]).permutation(N))
            for i in range(0, N - batch + 1, batch):
                yield t, order[i:i + batch]


def batched_loss(ws, x, y):
    """The sum over K sampled networks of mlp()'s layout of each one's summed
    cross-entropy on the mini-batch (x, y): ws maps mlp()'s parameter names
    ("0.weight", "0.bias", "2.weight", ..., as FooVB.sample_batch returns
    them) to (K, *shape) tensors; the K networks run as batched matrix
    products.  Its gradient with respect to ws[name][k] is network k's."""
    h = batched_logits(ws, x)
    return F.cross_entropy(h.reshape(-1, h.shape[-1]), y.repeat(h.shape[0]), reduction="sum")


def batched_logits(ws, x):
    """(K, N, 10) logits of the K networks in ws (batched_loss's layout) on x (N, D)."""
    h = x.unsqueeze(0).expand(ws["0.weight"].shape[0], -1, -1)
    for i in (0, 2, 4):
        h = torch.baddbmm(ws["%d.bias" % i].unsqueeze(1), h, ws["%d.weight" % i].transpose(1, 2))
        if i < 4:
            h = F.relu(h)
    return h


def foovb_step(opt, net, x, y, chunk=0):
    """One mini-batch of Algorithm 1 for FooVB `opt` over mlp() `net`:
    chunk=0, opt.mc_samples networks one after another (FooVB.train_step);
    chunk>0, the same number in batches of `chunk` networks (batched_loss;
    the seed's 2,500 matrix-variate samples on a GPU).  chunk=1 draws in the
    same order as chunk=0 (tested); larger chunks draw the same distribution
    in another order."""
    if chunk <= 0:
        opt.train_step(lambda: F.cross_entropy(net(x), y, reduction="sum"))
        return
    left = opt.mc_samples
    while left:
        k = min(left, chunk)
        left -= k
        ws = opt.sample_batch(k)
        batched_loss(ws, x, y).backward()
        opt.accumulate_batch({n: w.grad for n, w in ws.items()})
    opt.step()


def accuracy(net, x, y, perm):
    with torch.no_grad():
        return float((net(x[:, perm]).argmax(1) == y).float().mean())


def sampled_accuracy(opt, x, y, perm, n, chunk, seed, batch=2000):
    """The accuracy averaged over n networks sampled from FooVB `opt`'s
    posterior (the seed's test of the matrix-variate version, App. 15: 2,500
    networks), evaluated `chunk` at a time with batched_loss's layout.  The
    draws come from a generator seeded with `seed`, swapped in for the
    optimiser's own and restored, so testing does not change the training
    stream's draws."""
    own = opt.gen
    opt.gen = torch.Generator(device=opt.device)
    opt.gen.manual_seed(int(seed))
    correct, left = 0.0, n
    try:
        with torch.no_grad():
            while left:
                k = min(left, chunk)
                left -= k
                ws = {name: w.detach() for name, w in opt.sample_batch(k).items()}
                opt._batch = 0
                for i in range(0, x.shape[0], batch):
                    h = batched_logits(ws, x[i:i + batch][:, perm])
                    correct += float((h.argmax(2) == y[i:i + batch].unsqueeze(0)).sum())
    finally:
        opt.gen = own
    return correct / (n * x.shape[0])


def run(method, lr, args, xs, perms):
    """Trains one method on the stream; returns rows (dicts of FIELDS)."""
    x_tr, y_tr, x_te, y_te = xs
    g = torch.Generator()
    g.manual_seed(args.seed)
    net = mlp(x_tr.shape[1], args.width, g, bias="bgd" if args.init == "bgd" else "zero").to(x_tr.device)
    if method == "foovb-diag":
        # init "paper": FooVB re-draws the means (App. 15; biases 0); "bgd": the network's own
        opt = FooVB(net, kind="diagonal", std_init=args.std_init, mc_samples=args.mc,
                    init="keep" if args.init == "bgd" else "paper", seed=args.seed)
    elif method in ("foovb-matrix", "foovb-matrix-tc"):
        opt = FooVB(net, kind="matrix", alpha=args.alpha, mc_samples=args.mc, init="paper", seed=args.seed,
                    trace_correction=method.endswith("-tc"))
    elif method == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=lr)
    rows = []
    t0 = time.time()
    cur = 0

    def evaluate(after):
        if method.startswith("foovb") and args.test_samples:
            accs = [sampled_accuracy(opt, x_te, y_te, perms[k], args.test_samples, args.mc_chunk or 1,
                                     seed=1000003 * args.seed + 1009 * after + k) for k in range(after + 1)]
        else:
            accs = [accuracy(net, x_te, y_te, perms[k]) for k in range(after + 1)]
        for k, a in enumerate(accs):
            rows.append({"method": method, "lr": lr, "after_task": after + 1, "task": k + 1, "acc": a,
                         "seconds": round(time.time() - t0, 1)})
        print("%-13s lr=%-7s after task %2d: mean %.4f  task1 %.4f  (%.0f s)" %
              (method, lr, after + 1, sum(accs) / len(accs), accs[0], time.time() - t0), flush=True)

    for t, idx in stream(args.tasks, args.epochs, x_tr.shape[0] if not args.train_limit else args.train_limit,
                         args.batch, args.seed):
        if t != cur:
            evaluate(cur)
            cur = t
        idx = idx.to(x_tr.device)
        x = x_tr[idx][:, perms[t]]
        y = y_tr[idx]
        if method.startswith("foovb"):
            # L_n: the summed negative log-likelihood of the mini-batch (paper Sec. 3).
            foovb_step(opt, net, x, y, args.mc_chunk)
        else:
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
    evaluate(cur)
    return rows


def write_rows(path, rows, methods):
    old = []
    if os.path.exists(path):
        with open(path) as f:
            old = [r for r in csv.DictReader(f) if r["method"] not in methods]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in old + rows:
            w.writerow({k: r[k] for k in FIELDS})


def summarise(path):
    """{(method, lr): {after_task: [acc per task 1..after]}} from the CSV, or from several CSVs
    of the same stream given as one comma-separated string (runs of different methods written
    by separate processes)."""
    res = {}
    for one in path.split(","):
        with open(one) as f:
            for r in csv.DictReader(f):
                d = res.setdefault((r["method"], r["lr"]), {})
                d.setdefault(int(r["after_task"]), {})[int(r["task"])] = float(r["acc"])
    return {k: {a: [v[t] for t in sorted(v)] for a, v in d.items()} for k, d in res.items()}


def best_runs(res):
    """Per method, the lr with the highest mean accuracy after the last task
    (the paper's selection: tuned for the average over all 10 tasks)."""
    best = {}
    for (m, lr), d in res.items():
        last = d[max(d)]
        score = sum(last) / len(last)
        if m not in best or score > best[m][2]:
            best[m] = (lr, d, score)
    return best


def plot(path_csv, path_png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = summarise(path_csv)
    best = best_runs(res)
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    names = {"foovb-diag": "FOO-VB diagonal", "foovb-matrix": "FOO-VB matrix-variate",
             "foovb-matrix-tc": "FOO-VB matrix-variate, trace-corrected (ours)", "adam": "Adam",
             "sgd": "SGD"}
    for m in METHODS:
        if m not in best:
            continue
        lr, d, _ = best[m]
        ts = sorted(d)
        lab = names[m] + ("" if lr in ("", "None") else " (lr %s)" % lr)
        ax[0].plot(ts, [100 * sum(d[t]) / len(d[t]) for t in ts], "o-", label=lab)
        ax[1].plot(ts, [100 * d[t][0] for t in ts], "o-", label=lab)
        ax[2].plot(ts, [100 * d[t][-1] for t in ts], "o-", label=lab)
    ax[0].set_title("average test accuracy on the tasks seen so far (cf. Fig. 1)")
    ax[1].set_title("test accuracy on task 1 (cf. Fig. 2)")
    ax[2].set_title("test accuracy on the task just learned")
    for a in ax:
        a.set_xlabel("number of tasks")
        a.set_ylabel("accuracy (%)")
        a.grid(alpha=0.3)
        a.set_xticks(range(1, 1 + max(max(b[1]) for b in best.values())))
    ax[0].legend(loc="lower left", fontsize=8)
    fig.suptitle("discrete task-agnostic permuted MNIST, CPU reproduction (see docs/research)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path_png)), exist_ok=True)
    fig.savefig(path_png, dpi=110)
    return best


def plot_compare(specs, path_png, methods=("foovb-diag", "adam", "sgd")):
    """One figure over several CSVs of this script: specs is a list of
    (label, csv path); per CSV and method in `methods`, the best learning rate
    (best_runs) -- mean accuracy over the tasks seen and task 1's accuracy.
    Returns {label: best_runs(...)}."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.6))
    styles = ["o-", "s--", "^:", "d-."]
    colours = {"foovb-diag": "C0", "adam": "C2", "sgd": "C3"}
    out = {}
    for i, (label, path) in enumerate(specs):
        best = best_runs(summarise(path))
        out[label] = best
        for m in methods:
            if m not in best:
                continue
            lr, d, _ = best[m]
            ts = sorted(d)
            lab = "%s%s, %s" % (m, "" if lr in ("", "None") else " (lr %s)" % lr, label)
            st = styles[i % len(styles)]
            ax[0].plot(ts, [100 * sum(d[t]) / len(d[t]) for t in ts], st, color=colours.get(m), label=lab)
            ax[1].plot(ts, [100 * d[t][0] for t in ts], st, color=colours.get(m), label=lab)
    ax[0].set_title("average test accuracy on the tasks seen so far (cf. Fig. 1)")
    ax[1].set_title("test accuracy on task 1 (cf. Fig. 2)")
    for a in ax:
        a.set_xlabel("number of tasks")
        a.set_ylabel("accuracy (%)")
        a.grid(alpha=0.3)
    ax[0].legend(loc="lower left", fontsize=7)
    fig.suptitle("discrete task-agnostic permuted MNIST, CPU reproduction (see docs/research)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path_png)), exist_ok=True)
    fig.savefig(path_png, dpi=110)
    return out


def table(path_csv):
    """A markdown table: mean accuracy over tasks seen after each task."""
    best = best_runs(summarise(path_csv))
    T = max(max(b[1]) for b in best.values())
    lines = ["| method | " + " | ".join(str(t) for t in range(1, T + 1)) + " |",
             "|---|" + "---:|" * T]
    for m in METHODS:
        if m in best:
            lr, d, _ = best[m]
            lab = m + ("" if lr in ("", "None") else " (lr %s)" % lr)
            lines.append("| %s | " % lab + " | ".join("%.1f" % (100 * sum(d[t]) / len(d[t])) if t in d else ""
                                                      for t in range(1, T + 1)) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="foovb-diag,foovb-matrix,adam,sgd")
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=1, help="passes over each task's training set (paper: 20)")
    ap.add_argument("--pool", type=int, default=2, help="average-pool the 28x28 images by this (1: full size)")
    ap.add_argument("--width", type=int, default=100)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--mc", type=int, default=10, help="Monte-Carlo samples per mini-batch, both FOO-VB versions")
    ap.add_argument("--mc-chunk", type=int, default=0,
                    help="FOO-VB: evaluate the Monte-Carlo samples in batches of this many networks (batched "
                         "matrix products; 0: one after another). For the seed's 2,500 matrix-variate samples "
                         "on a GPU: --mc 2500 --mc-chunk 500 --device cuda")
    ap.add_argument("--test-samples", type=int, default=0,
                    help="FOO-VB: test accuracy averaged over this many sampled networks (the seed's "
                         "matrix-variate test: 2500), --mc-chunk at a time; 0: the posterior mean's")
    ap.add_argument("--device", default="cpu", help="torch device of the data, networks and FOO-VB posterior")
    ap.add_argument("--std-init", type=float, default=0.047)
    ap.add_argument("--init", choices=("paper", "bgd"), default="paper",
                    help="initial weights: paper (App. 15; FOO-VB diagonal re-draws its means, biases 0) or bgd "
                         "(the BGD code's default: the same weights, biases N(0, 2/(1+fan_out)), the network's "
                         "initial weights the FOO-VB means); the matrix versions always use App. 15's")
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--lrs-adam", default="0.1,0.01,0.001,0.0001")
    ap.add_argument("--lrs-sgd", default="0.1,0.01,0.001,0.0001")
    ap.add_argument("--train-limit", type=int, default=0, help="use the first N training images (0: all 60000)")
    ap.add_argument("--test-limit", type=int, default=0, help="use the first N test images (0: all 10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="")
    ap.add_argument("--out", default=os.path.join(HERE, "runs", "foovb-permuted-mnist.csv"),
                    help="the CSV written; with --plot-only, the CSV(s) read (comma separated: one stream's runs "
                         "written by separate processes)")
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "research", "foovb-permuted-mnist.png"))
    ap.add_argument("--normalize", action="store_true",
                    help="standardise pixels as the authors' code does: (x - 0.1307) / 0.3081 (default: x in [0, 1])")
    ap.add_argument("--pad32", action="store_true",
                    help="the BGD code's padded permuted MNIST: 32x32 with zeros, then (x - 0.1) / 0.2752, "
                         "permutations over all 1024 pixels (needs --pool 1; not with --normalize)")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--compare", default="",
                    help="with --plot-only: 'LABEL=CSV;LABEL=CSV;...' -> one figure of those runs (--png), "
                         "and a table per CSV")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.plot_only and args.compare:
        specs = [tuple(kv.split("=", 1)) for kv in args.compare.split(";") if kv]
        if any(len(kv) != 2 for kv in specs):
            ap.error("--compare: expected LABEL=CSV;LABEL=CSV, got %r" % args.compare)
        plot_compare(specs, args.png)
        for label, path in specs:
            print("%s (%s)\n%s" % (label, path, table(path)))
        return 0
    if args.plot_only:
        plot(args.out, args.png)
        print(table(args.out))
        return 0
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            ap.error("unknown method %r (one of %s)" % (m, ", ".join(METHODS)))
    dirs = [args.data] if args.data else DATA_DIRS
    dirname = next((d for d in dirs if os.path.isdir(d)), None)
    if dirname is None:
        ap.error("MNIST not found in %s (--data)" % ", ".join(dirs))
    if args.mc_chunk < 0 or args.test_samples < 0:
        ap.error("--mc-chunk and --test-samples must be >= 0, got %d and %d" % (args.mc_chunk, args.test_samples))
    if args.pad32 and (args.pool != 1 or args.normalize):
        ap.error("--pad32 pads the full 28x28 images and normalises them itself: use --pool 1, not --normalize")
    x_tr, y_tr, x_te, y_te = load_mnist(dirname, args.pool, padded=args.pad32)
    if args.normalize:
        # the authors' permuted-MNIST loader: transforms.Normalize((0.1307,), (0.3081,)) after ToTensor
        x_tr, x_te = (x_tr - 0.1307) / 0.3081, (x_te - 0.1307) / 0.3081
    if args.train_limit:
        x_tr, y_tr = x_tr[:args.train_limit], y_tr[:args.train_limit]
    if args.test_limit:
        x_te, y_te = x_te[:args.test_limit], y_te[:args.test_limit]
    dev = torch.device(args.device)
    x_tr, y_tr, x_te, y_te = x_tr.to(dev), y_tr.to(dev), x_te.to(dev), y_te.to(dev)
    perms = [p.to(dev) for p in make_perms(x_tr.shape[1], args.tasks, args.seed)]
    rows = []
    for m in methods:
        lrs = {"adam": args.lrs_adam, "sgd": args.lrs_sgd}.get(m)
        for lr in ([float(v) for v in lrs.split(",")] if lrs else [""]):
            rows += run(m, lr, args, (x_tr, y_tr, x_te, y_te), perms)
    write_rows(args.out, rows, methods)
    print("wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
