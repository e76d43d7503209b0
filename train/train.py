#!/usr/bin/python3
"""train.py -- train an encoder/decoder with a VB memory (or a plain VAE) on
episodes of a dataset and export a vbmem model file (proto/model-format.md).

  /usr/bin/python3 train/train.py --dataset fashion-mnist --kind mixture \
      --epochs 100 --out models/fashion-mnist-mixture.safetensors

Each epoch draws new episodes without replacement (App. E.2); the memory write
is the VB loop of libvbmem in PyTorch (train/vbmtrain/vb.py); the objective is
the episode ELBO of Eq. 5; Adam with beta_1 = 0 (Sec. 3.2.2)."""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from vbmtrain import data, nets, objective, vb  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "mnist", "cifar10", "png"])
    p.add_argument("--data-root", default=None, help="directory of the dataset files")
    p.add_argument("--kind", default="mixture", choices=["mixture", "tree", "gaussian", "categorical", "vae"])
    p.add_argument("--code-size", type=int, default=64)
    p.add_argument("--filters", type=int, default=32)
    p.add_argument("--norm-groups", type=int, default=8)
    p.add_argument("--likelihood", default="gaussian", choices=["gaussian", "bernoulli"])
    p.add_argument("--episode-length", type=int, default=64)
    p.add_argument("--batch", type=int, default=16, help="episodes per step")
    p.add_argument("--clusters", type=int, default=None)
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--groups", type=int, default=None, help="code partitions G of the tree memory (default 2)")
    p.add_argument("--iterations", type=int, default=10, help="VB iterations per write")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps in all (smoke tests)")
    p.add_argument("--time-limit", type=float, default=0,
                   help="stop starting new epochs after this many seconds (0: none); the second stage then "
                        "begins at --stage2 of this time")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--lr2", type=float, default=1e-4, help="second stage step size (App. F.2.2)")
    p.add_argument("--stage2", type=float, default=0.8, help="fraction of epochs before the second stage")
    p.add_argument("--reg", default="0.10,0.20,8,8", help="regularizer eps,delta,alpha,beta ('none' disables)")
    p.add_argument("--no-sample-memory", action="store_true",
                   help="exact expectation over q(Omega) instead of the App. D.2 reparametrised sample")
    p.add_argument("--eval-episodes", type=int, default=0, help="test episodes to evaluate (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--out", required=True, help="model file to write")
    p.add_argument("--log", default=None, help="JSON-lines log file (one line per epoch)")
    p.add_argument("--baseline-elbo", type=float, default=None,
                   help="test ELBO per frame of a VAE baseline, recorded in the provenance")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total, label, quiet):
        self.total, self.label, self.quiet, self.n, self.t0 = total, label, quiet, 0, time.time()

    def step(self, info):
        self.n += 1
        if self.quiet or not sys.stderr.isatty() and self.n % max(1, self.total // 10) and self.n != self.total:
            return
        frac = self.n / max(1, self.total)
        bar = "#" * int(30 * frac)
        sys.stderr.write("\r%s [%-30s] %d/%d %s %.0fs" % (self.label, bar, self.n, self.total, info,
                                                         time.time() - self.t0))
        if not sys.stderr.isatty():
            sys.stderr.write("\n")
        sys.stderr.flush()

    def done(self):
        if not self.quiet and sys.stderr.isatty():
            sys.stderr.write("\n")


def evaluate(args, cfg, enc, dec, sampler, gen):
    """Mean test ELBO per frame over test episodes (exact expectation over
    q(Omega), one reparametrised z per frame, no regularizer) and mean terms."""
    enc.eval()
    dec.eval()
    tot, n, acc = 0.0, 0, {}
    limit = args.eval_episodes or sampler.episodes_per_epoch()
    with torch.no_grad():
        for x in sampler.epoch(shuffle=False):
            x = x[:max(0, limit - n)]
            if x.shape[0] == 0:
                break
            elbo, terms = objective.episode_elbo(args.kind, cfg, enc, dec, x, args.iterations, gen)
            tot += float(elbo.sum())
            n += x.shape[0]
            for k, v in terms.items():
                acc[k] = acc.get(k, 0.0) + float(v.sum())
    enc.train()
    dec.train()
    T = args.episode_length
    return tot / (n * T), {k: v / (n * T) if k != "usage" else v / n for k, v in acc.items()}, n


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # network initialisation
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    train_x = data.load_dataset(args.dataset, args.data_root, "train")
    test_x = data.load_dataset(args.dataset, args.data_root, "test")
    ch, h, w = train_x.shape[1:]
    arch = nets.default_architecture(ch, h, w, args.code_size, args.filters, args.norm_groups, args.likelihood)
    enc, dec = nets.build_networks(arch)
    enc.to(args.device)
    dec.to(args.device)
    kind = args.kind
    cfg = vb.memory_defaults(kind if kind != "vae" else "mixture", args.code_size, args.rows, args.clusters)
    if kind == "tree" and args.groups:
        cfg["groups"] = args.groups
    if kind == "tree" and args.code_size % cfg["groups"]:
        raise SystemExit("--code-size %d is not divisible by --groups %d" % (args.code_size, cfg["groups"]))
    reg = None
    if args.reg != "none" and kind != "vae":
        e, d, a, b = (float(v) for v in args.reg.split(","))
        reg = {"eps": e, "delta": d, "alpha": a, "beta": b}
    reg_first = reg
    params = list(enc.parameters()) + list(dec.parameters())
    opt = torch.optim.Adam(params, lr=args.lr, betas=(0.0, 0.999))
    sampler = data.EpisodeSampler(train_x, args.episode_length, args.batch, args.seed, args.device)
    test_sampler = data.EpisodeSampler(test_x, args.episode_length, args.batch, args.seed + 7, args.device)
    logf = open(args.log, "a") if args.log else None
    steps_per_epoch = math.ceil(sampler.episodes_per_epoch() / args.batch)
    print("training %s on %s: %d train / %d test images %dx%dx%d, C=%d, F=%d, %d params, %d steps/epoch, device %s"
          % (kind, args.dataset, train_x.shape[0], test_x.shape[0], ch, h, w, args.code_size, args.filters,
             sum(p.numel() for p in params), steps_per_epoch, args.device), flush=True)
    step, skipped, epochs_run = 0, 0, 0
    t_start = time.time()
    for epoch in range(args.epochs):
        elapsed = time.time() - t_start
        if args.time_limit and elapsed > args.time_limit:
            break
        late = epoch >= int(args.stage2 * args.epochs) or (args.time_limit and elapsed > args.stage2 * args.time_limit)
        if late and epoch > 0 and opt.param_groups[0]["lr"] != args.lr2:
            for g in opt.param_groups:
                g["lr"] = args.lr2
            if reg is not None:
                reg = {"eps": 1e-6, "delta": 2e-6, "alpha": reg["alpha"], "beta": reg["beta"]}
        bar = Progress(steps_per_epoch, "epoch %3d" % (epoch + 1), args.quiet)
        sums, n_ep = {}, 0
        t0 = time.time()
        for x in sampler.epoch():
            try:
                elbo, terms = objective.episode_elbo(kind, cfg, enc, dec, x, args.iterations, gen, reg,
                                                     not args.no_sample_memory)
                loss = -elbo.mean() / args.episode_length
                if not torch.isfinite(loss):
                    raise RuntimeError("non-finite loss")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1000.0)
                opt.step()
            except RuntimeError as exc:  # a failed Cholesky or a NaN: skip this batch, say so
                skipped += 1
                print("\nstep %d skipped: %s" % (step, str(exc).splitlines()[0]), file=sys.stderr)
                opt.zero_grad(set_to_none=True)
                continue
            n_ep += x.shape[0]
            sums["elbo"] = sums.get("elbo", 0.0) + float(elbo.detach().sum())
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach().sum())
            step += 1
            bar.step("elbo/frame %.1f" % (float(elbo.detach().mean()) / args.episode_length))
            if args.max_steps and step >= args.max_steps:
                break
        bar.done()
        epochs_run += 1
        T = args.episode_length
        line = {"epoch": epoch + 1, "step": step, "seconds": round(time.time() - t0, 2),
                "lr": opt.param_groups[0]["lr"]}
        for k, v in sums.items():
            line[k + ("_per_episode" if k == "usage" else "_per_frame")] = round(v / max(1, n_ep) / (1 if k == "usage" else T), 4)
        print(json.dumps(line), flush=True)
        if logf:
            logf.write(json.dumps(line) + "\n")
            logf.flush()
        if args.max_steps and step >= args.max_steps:
            break
    gen_eval = torch.Generator()
    gen_eval.manual_seed(12345)
    test_elbo, test_terms, n_test = evaluate(args, cfg, enc, dec, test_sampler, gen_eval)
    result = {"test_elbo_per_frame": round(test_elbo, 4), "test_episodes": n_test,
              "test_terms_per_frame": {k: round(v, 4) for k, v in test_terms.items()},
              "train_seconds": round(time.time() - t_start, 1), "skipped_steps": skipped}
    print(json.dumps(result), flush=True)
    if logf:
        logf.write(json.dumps(result) + "\n")
        logf.close()
    memory = {k: cfg[k] for k in ("kind", "clusters", "rows", "groups", "sigma_z2", "u0", "sigma2_b0", "s_floor")}
    if kind == "vae":
        memory = {"kind": "none"}
    memory.update({"iterations": args.iterations, "episode_length": args.episode_length})
    prov = {"dataset": args.dataset, "train_frames": int(train_x.shape[0]), "epochs": epochs_run, "steps": step,
            "seed": args.seed, "batch_episodes": args.batch, "model": kind,
            "test_elbo_per_frame": round(test_elbo, 4), "test_episodes": n_test,
            "trainer": "train/train.py", "regularizer": reg_first, "regularizer_stage2": reg, "sample_memory": not args.no_sample_memory,
            "adam": {"lr": args.lr, "lr2": args.lr2, "beta1": 0.0, "beta2": 0.999}}
    if args.baseline_elbo is not None:
        prov["baseline_vae_test_elbo_per_frame"] = args.baseline_elbo
    nets.save_model(args.out, enc.cpu(), dec.cpu(), arch, memory, prov)
    print("wrote %s" % args.out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
