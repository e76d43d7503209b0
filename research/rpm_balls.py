#!/usr/bin/python3
"""rpm_balls.py -- seed 004's bouncing-ball experiments with the time-series
RPM: train the Fig. 2 frameworks on Poisson / textured balls (J = 10, T = 50,
N = 10 or 100), record losses and the nMSE of posterior means against the true
ball positions, write results JSON, plots (--plot) and a servable checkpoint
(--export)."""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before torch: its BLAS threads only contend here
os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train"))
from vbmtrain import rpm  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
AMORTISED = ["minimalist-amortized", "cheap-vae", "full-vae", "luxury-amortized"]


def run_one(fw, dataset, N, seed, steps, batch, hidden, lr, X, Z, Xt, Zt, log_every, init="match"):
    """Train one framework on (X, Z); evaluate on train and (amortised
    frameworks) on the held-out (Xt, Zt). Returns (result dict, model)."""
    model = rpm.TimeSeriesRPM(fw, J=X.shape[1], T=X.shape[2], hidden=hidden, N_train=N, seed=seed)
    t0 = time.time()
    res = {"framework": fw, "dataset": dataset, "N": N, "seed": seed, "steps": steps, "batch": batch,
           "hidden": hidden, "params": sum(p.numel() for p in model.parameters()), "init": init}
    try:
        if init == "match":
            res["match_loss"] = rpm.pretrain_match(model, X)
        hist, test_hist = rpm.train(model, X, steps, batch, lr=lr, seed=seed, log_every=log_every, X_test=Xt)
        losses = [h[1] for h in hist]
        res["diverged"] = not all(math.isfinite(v) for v in losses)
        ev = rpm.evaluate(model, X, Z, torch.arange(N))
        res["nmse_train"] = ev["nmse"]
        if model.q_mode != "np":
            evt = rpm.evaluate(model, Xt, Zt)
            res["nmse_test"] = evt["nmse"]
        res["example"] = {"z": Z[0].tolist(), "mu": ev["mu"][0].tolist(), "var": ev["var"][0].tolist()}
        # affine map of the posterior means onto the true latent (for plots)
        m = ev["mu"].reshape(-1)
        A = torch.stack([m, torch.ones_like(m)], 1)
        res["align"] = torch.linalg.lstsq(A, Z.reshape(-1, 1)).solution[:, 0].tolist()
        res["loss_curve"] = losses[:: max(1, steps // 200)]
        res["test_curve"] = test_hist
        res["final_loss"] = sum(losses[-50:]) / len(losses[-50:])
        res["lengthscale"] = float(model.log_ell.exp())
        if not math.isfinite(res["nmse_train"]):
            res["diverged"] = True
    except (RuntimeError, ValueError) as e:  # a Cholesky of a non-PD matrix, NaN parameters
        res["diverged"] = True
        res["error"] = str(e)[:200]
    res["seconds"] = time.time() - t0
    return res, model


def export(model, path, dataset, N, seed, steps, Xt, res):
    """Write the servable checkpoint (the contract of /tmp/lanes/rpm-contract.md)."""
    with torch.no_grad():
        post = model.posterior(Xt[:2])
    ck = rpm.checkpoint(model, {
        "dataset": dataset, "N": N, "seed": seed, "steps": steps,
        "nmse_train": res.get("nmse_train"), "nmse_test": res.get("nmse_test"),
        "example": {"X": Xt[:2].clone(), "mu": post["mu"].clone(), "var": post["var"].clone()}})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save(ck, path)
    print("wrote", path, os.path.getsize(path), "bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", nargs="+", default=["poisson", "textured"], choices=["poisson", "textured"])
    ap.add_argument("--N", nargs="+", type=int, default=[10, 100])
    ap.add_argument("--frameworks", nargs="+", default=AMORTISED, help="names of rpm.FRAMEWORKS or 'all'")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--steps", type=int, default=None, help="gradient steps (default 1500 for N=10, 400 for N=100)")
    ap.add_argument("--batch", type=int, default=None, help="minibatch (default 8 for N=10, 16 for N=100)")
    ap.add_argument("--hidden", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--init", default="match", choices=["match", "random"],
                    help="match: pre-train q / inner nets to the minimalist values (the seed's init iii)")
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test): N=10, 30 steps")
    ap.add_argument("--out", default=os.path.join(ROOT, "research", "runs", "rpm"))
    ap.add_argument("--export", default=None, help="save the minimalist-amortized Poisson model here")
    ap.add_argument("--plot", action="store_true", help="only make docs/research/rpm-*.png from --out's JSON files")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.plot:
        import rpm_plots
        rpm_plots.make_all(args.out, os.path.join(ROOT, "docs", "research"))
        return
    fws = []
    for fw in args.frameworks:
        fws += list(rpm.FRAMEWORKS) if fw == "all" else [fw]
    for fw in fws:
        if fw not in rpm.FRAMEWORKS and fw != "minimalist-33":
            ap.error("unknown framework %r" % fw)
    if args.quick:
        args.N, args.steps = [10], 30
    os.makedirs(args.out, exist_ok=True)
    for dataset in args.dataset:
        for N in args.N:
            steps = args.steps or (1500 if N <= 10 else 400)
            batch = args.batch or (8 if N <= 10 else 16)
            results = []
            for seed in args.seeds:
                X, Z = rpm.make_balls(dataset, N, seed=1000 + seed)
                Xt, Zt = rpm.make_balls(dataset, N, seed=2000 + seed)
                for fw in fws:
                    name, hidden = (("minimalist-amortized", 33) if fw == "minimalist-33" else (fw, args.hidden))
                    res, model = run_one(name, dataset, N, seed, steps, batch, hidden, args.lr, X, Z, Xt, Zt,
                                         max(1, steps // 10), args.init)
                    res["label"] = fw
                    results.append(res)
                    print("%-9s N=%-3d seed=%d %-21s nmse train %s test %s loss %s  %.0fs" % (
                        dataset, N, seed, fw, _f(res.get("nmse_train")), _f(res.get("nmse_test")),
                        _f(res.get("final_loss")), res["seconds"]), flush=True)
                    if (args.export and fw == "minimalist-amortized" and dataset == "poisson"
                            and seed == args.seeds[0] and not res["diverged"]):
                        export(model, args.export, dataset, N, seed, steps, Xt, res)
            if not args.quick:
                name = "results-%s-N%d-s%s-%s-%s.json" % (dataset, N, "-".join(map(str, args.seeds)), args.init,
                                                         "+".join(args.frameworks))
                path = os.path.join(args.out, name)
                with open(path, "w") as f:
                    json.dump({"dataset": dataset, "N": N, "init": args.init, "J": 10, "T": 50, "results": results,
                               "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                     time.gmtime())}, f)
                print("wrote", path)


def _f(v):
    return "-" if v is None else "%.4f" % v


if __name__ == "__main__":
    main()
