#!/usr/bin/python3
"""train.py -- train an encoder/decoder with a VB memory (or a plain VAE) on
episodes of a dataset and export a vbmem model file (proto/model-format.md).

  /usr/bin/python3 train/train.py --dataset fashion-mnist --kind mixture \
      --epochs 100 --out models/fashion-mnist-mixture.safetensors

Each epoch draws new episodes without replacement (App. E.2); the memory write
is the VB loop of libvbmem in PyTorch (train/vbmtrain/vb.py); the objective is
the episode ELBO of Eq. 5; Adam with beta_1 = 0 for memory models (Sec. 3.2.2)
and 0.9 for the VAE baseline. --resume CHECKPOINT continues a run bit for bit
(model, optimiser, generators, epoch and step)."""
import argparse
import ctypes
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Threads that wait for work sleep instead of spinning: the trainer's OpenMP
# threads otherwise burn the CPU that other processes (or PyTorch's other
# threads) need. It must be in the environment before PyTorch loads libgomp.
_argv = " ".join(sys.argv[1:]) + " "
if "--threads -1 " not in _argv and "--threads=-1 " not in _argv:  # -1: the old defaults
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from vbmtrain import data, nets, objective, vb  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], fromfile_prefix_chars="@")
    p.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "mnist", "cifar10", "png", "omniglot"])
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
    p.add_argument("--stop-at", type=float, default=0,
                   help="stop training at this wall-clock time (seconds since the epoch, checked after each "
                        "step; at least one step runs), write the checkpoint where it stopped, then evaluate "
                        "and write the model as usual; unlike --time-limit it leaves the schedule alone")
    p.add_argument("--result", default=None, help="also write the final test result (JSON) to this file")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--lr2", type=float, default=1e-4, help="second stage step size (App. F.2.2)")
    p.add_argument("--stage2", type=float, default=0.8, help="fraction of epochs before the second stage")
    p.add_argument("--reg", default="0.10,0.20,8,8", help="regularizer eps,delta,alpha,beta ('none' disables)")
    p.add_argument("--no-sample-memory", action="store_true",
                   help="exact expectation over q(Omega) instead of the App. D.2 reparametrised sample")
    p.add_argument("--eval-episodes", type=int, default=0, help="test episodes to evaluate (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads (0: the CPUs this process may run on; -1: leave PyTorch's, "
                        "OpenBLAS's and malloc's own defaults, the old behaviour)")
    p.add_argument("--head", default="bounded", choices=["bounded", "softplus"],
                   help="gaussian decoder head: bounded (sigmoid mean, scale 0.005 + 0.5 sigmoid) or "
                        "softplus (unbounded mean, scale softplus + 0.001: the first bundled model)")
    p.add_argument("--beta1", type=float, default=None,
                   help="Adam beta_1 (default 0 for memory models as in Sec. 3.2.2, 0.9 for the VAE)")
    p.add_argument("--clip", type=float, default=100.0, help="gradient norm clip (the first model: 1000)")
    p.add_argument("--train-frames", type=int, default=0, help="use only the first N training images (tests)")
    p.add_argument("--log-every", type=int, default=0,
                   help="also log the mean training ELBO per frame every N steps (learning curves)")
    p.add_argument("--checkpoint", default=None, help="write a resumable checkpoint here (at the end, and "
                                                       "every --checkpoint-every steps)")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume", default=None, help="continue from this checkpoint (the other options must "
                                                   "be those of the run that wrote it)")
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
    with torch.inference_mode():  # no autograd state at all (not only no graph)
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


def set_threads(threads):
    """Intra-op threads = the CPUs this process may use (or `threads`) and
    OpenBLAS single-threaded (one inter-op thread is set at program start): PyTorch calls it from its
    own threads, and OpenBLAS's own pool (2 threads here by default) then
    busy-waits against them (the system time of the first trainer). Returns
    the intra-op thread count; threads < 0 leaves every default alone."""
    if threads < 0:
        return torch.get_num_threads()
    n = threads or len(os.sched_getaffinity(0))
    try:
        blas = ctypes.CDLL("libblas.so.3")
        blas.openblas_set_num_threads(1)
    except (OSError, AttributeError):  # not OpenBLAS: nothing to do
        pass
    torch.set_num_threads(n)
    return n


def keep_freed_memory():
    """Let glibc's malloc serve every block from its heap and keep what is freed
    there (no mmap per large block, no trimming): PyTorch's CPU tensors are
    malloc'ed and freed at every step, and a step's activations (up to about
    150 MB each at 16 x 64 frames) are above malloc's largest mmap threshold,
    so by default each is mapped, faulted in page by page and unmapped again:
    about a million page faults and half the CPU time of a step in the kernel.
    The heap then stays at the peak a step needs. Process-wide; it overrides
    MALLOC_MMAP_MAX_ and MALLOC_TRIM_THRESHOLD_ of the environment. Returns
    True if applied, False where there is no glibc malloc (nothing changed)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1))


def save_checkpoint(path, state):
    """Write a checkpoint atomically (a temporary file renamed over path)."""
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    if args.threads >= 0:  # -1: the old defaults, malloc's included
        keep_freed_memory()
    torch.manual_seed(args.seed)  # network initialisation
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    train_x = data.load_dataset(args.dataset, args.data_root, "train", args.train_frames)
    test_x = data.load_dataset(args.dataset, args.data_root, "test",
                               args.eval_episodes * args.episode_length if args.train_frames else 0)
    ch, h, w = train_x.shape[1:]
    arch = nets.default_architecture(ch, h, w, args.code_size, args.filters, args.norm_groups, args.likelihood,
                                     head=args.head)
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
    beta1 = args.beta1 if args.beta1 is not None else (0.9 if kind == "vae" else 0.0)
    opt = torch.optim.Adam(params, lr=args.lr, betas=(beta1, 0.999))
    sampler = data.EpisodeSampler(train_x, args.episode_length, args.batch, args.seed, args.device)
    test_sampler = data.EpisodeSampler(test_x, args.episode_length, args.batch, args.seed + 7, args.device)
    logf = open(args.log, "a") if args.log else None
    steps_per_epoch = math.ceil(sampler.episodes_per_epoch() / args.batch)
    print("training %s on %s: %d train / %d test images %dx%dx%d, C=%d, F=%d, %d params, %d steps/epoch, device %s"
          % (kind, args.dataset, train_x.shape[0], test_x.shape[0], ch, h, w, args.code_size, args.filters,
             sum(p.numel() for p in params), steps_per_epoch, args.device), flush=True)
    step, skipped, epochs_run, start_epoch, skip, resume_state = 0, 0, 0, 0, 0, None
    deadline_hit = False
    sums, n_ep, elapsed0 = {}, 0, 0.0
    if args.resume:
        ck = torch.load(args.resume, map_location="cpu")
        enc.load_state_dict(ck["encoder"])
        dec.load_state_dict(ck["decoder"])
        opt.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["torch_rng"])
        gen.set_state(ck["gen"])
        step, skipped, epochs_run, start_epoch, skip = (ck[k] for k in ("step", "skipped", "epochs_run", "epoch",
                                                                         "batches_done"))
        reg, sums, n_ep, elapsed0, resume_state = ck["reg"], ck["sums"], ck["n_ep"], ck["elapsed"], ck["sampler"]
        print("resumed from %s at step %d (epoch %d, batch %d)" % (args.resume, step, start_epoch + 1, skip),
              flush=True)
    t_start = time.time() - elapsed0
    curve = {"elbo": torch.zeros((), dtype=torch.float64, device=args.device), "n": 0}

    def checkpoint(epoch, batches_done):
        save_checkpoint(args.checkpoint, {
            "encoder": enc.state_dict(), "decoder": dec.state_dict(), "optimizer": opt.state_dict(),
            "torch_rng": torch.get_rng_state(), "gen": gen.get_state(),
            "sampler": sampler.state(next_pass=batches_done == 0),
            "epoch": epoch, "batches_done": batches_done, "step": step, "skipped": skipped,
            "epochs_run": epochs_run, "reg": reg, "sums": sums, "n_ep": n_ep,
            "elapsed": time.time() - t_start, "args": vars(args)})

    stop = bool(args.max_steps and step >= args.max_steps)
    for epoch in range(start_epoch, args.epochs):
        if stop:
            break
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
        if resume_state is None:
            sums, n_ep = {}, 0
        t0 = time.time()
        batches = skip
        for x in sampler.epoch(skip=skip, state=resume_state):
            resume_state, skip = None, 0
            batches += 1
            try:
                elbo, terms = objective.episode_elbo(kind, cfg, enc, dec, x, args.iterations, gen, reg,
                                                     not args.no_sample_memory)
                loss = -elbo.mean() / args.episode_length
                if not torch.isfinite(loss):
                    raise RuntimeError("non-finite loss")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, args.clip)
                opt.step()
            except RuntimeError as exc:  # a failed Cholesky or a NaN: skip this batch, say so
                skipped += 1
                print("\nstep %d skipped: %s" % (step, str(exc).splitlines()[0]), file=sys.stderr)
                opt.zero_grad(set_to_none=True)
                continue
            n_ep += x.shape[0]
            # sums stay tensors on the device: no host synchronisation per step
            esum = elbo.detach().sum()
            sums["elbo"] = sums.get("elbo", 0.0) + esum
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + v.detach().sum()
            step += 1
            if args.log_every:
                curve["elbo"] += esum
                curve["n"] += x.shape[0]
                if step % args.log_every == 0:
                    line = {"step": step, "train_elbo_per_frame": round(float(curve["elbo"]) / curve["n"]
                                                                         / args.episode_length, 4),
                            "seconds": round(time.time() - t_start, 2)}
                    curve = {"elbo": torch.zeros_like(curve["elbo"]), "n": 0}
                    if logf:
                        logf.write(json.dumps(line) + "\n")
                        logf.flush()
            if not args.quiet:
                bar.step("elbo/frame %.1f" % (float(esum) / x.shape[0] / args.episode_length))
            if args.checkpoint and args.checkpoint_every and step % args.checkpoint_every == 0:
                checkpoint(epoch, batches)
            if args.max_steps and step >= args.max_steps:
                stop = True
                break
            if args.stop_at and time.time() >= args.stop_at:
                stop = deadline_hit = True
                break
        bar.done()
        if stop and batches < steps_per_epoch:
            if args.checkpoint:
                checkpoint(epoch, batches)
            # a partial pass: its log line below, its rest in a resumed run
        epochs_run += 1
        T = args.episode_length
        line = {"epoch": epoch + 1, "step": step, "seconds": round(time.time() - t0, 2),
                "lr": opt.param_groups[0]["lr"]}
        for k, v in sums.items():
            line[k + ("_per_episode" if k == "usage" else "_per_frame")] = round(float(v) / max(1, n_ep) / (1 if k == "usage" else T), 4)
        print(json.dumps(line), flush=True)
        if logf:
            logf.write(json.dumps(line) + "\n")
            logf.flush()
        if args.checkpoint and not (stop and batches < steps_per_epoch):
            sums, n_ep = {}, 0
            checkpoint(epoch + 1, 0)
    gen_eval = torch.Generator()
    gen_eval.manual_seed(12345)
    test_elbo, test_terms, n_test = evaluate(args, cfg, enc, dec, test_sampler, gen_eval)
    result = {"test_elbo_per_frame": round(test_elbo, 4), "test_episodes": n_test,
              "test_terms_per_frame": {k: round(v, 4) for k, v in test_terms.items()},
              "train_seconds": round(time.time() - t_start, 1), "skipped_steps": skipped,
              "steps": step, "stopped_at_deadline": deadline_hit}
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
            "adam": {"lr": args.lr, "lr2": args.lr2, "beta1": beta1, "beta2": 0.999}, "clip": args.clip}
    if args.baseline_elbo is not None:
        prov["baseline_vae_test_elbo_per_frame"] = args.baseline_elbo
    if deadline_hit:
        prov["stopped_at_deadline"] = True
        prov["planned_epochs"] = args.epochs
    nets.save_model(args.out, enc.cpu(), dec.cpu(), arch, memory, prov)
    print("wrote %s" % args.out, flush=True)
    if args.result:
        result.update({"model": os.path.basename(args.out), "epochs": epochs_run, "device": str(args.device)})
        tmp = args.result + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.result)
    return 0


if __name__ == "__main__":
    # one inter-op thread; PyTorch allows this once, before any parallel work (so not in
    # main(), which tests call several times in one process)
    if " --threads -1 " not in " " + " ".join(sys.argv[1:]) + " " and "--threads=-1" not in sys.argv:
        torch.set_num_interop_threads(1)
    sys.exit(main())
