#!/usr/bin/python3
"""continual.py -- continual training of the hosted networks: the memory model's encoder/decoder
trained on a stream of datasets (MNIST episodes, then Fashion-MNIST episodes) with no boundary
given to the optimiser, by Adam (the trainer's default) or by FOO-VB (seed 002), evaluating the
test ELBO per frame on held-out episodes of every dataset of the stream at regular points.

  nice -n 10 /usr/bin/python3 research/continual.py --optimizer adam --csv research/runs/continual-adam.csv
  nice -n 10 /usr/bin/python3 research/continual.py --optimizer foovb --csv research/runs/continual-foovb.csv \\
      --out models/mnist-fashion-continual.safetensors --out-boundary tests/data/continual-mnist-stage.safetensors
  /usr/bin/python3 research/plot_continual.py research/runs/continual-*.csv    # table + docs/research/continual-mnist-fashion.png

The stream is one sequence of mini-batches: --steps steps of episodes of the first dataset, then
--steps of the second, ...; the optimiser sees only the batches (no task index, no reset, one
constant step size). The objective is the trainer's own (vbmtrain.objective.episode_elbo: the VB
write, the App. D.2 sampled memory, the Sec. 3.2.3 regularizer, constant over the stream). The test
ELBO is train.py's evaluation (exact expectation over q(Omega), no regularizer) on the first
--eval-episodes test episodes of each dataset, with the same dequantization noise and the same z
draws at every evaluation point (differences between points are the networks' own). FOO-VB is
evaluated and exported at its posterior mean (seed 002, App. 15: "set the weights to the learned
mean at testing")."""
import argparse
import copy
import csv
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "train"))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from vbmtrain import data, nets, objective, vb  # noqa: E402

SHARED = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))
DEFAULT_ROOTS = {"mnist": os.path.join(SHARED, "mnist"), "fashion-mnist": os.path.join(SHARED, "fashion-mnist")}
EVAL_SEED_INDEX = {"mnist": 0, "fashion-mnist": 1}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stream", default="mnist,fashion-mnist",
                   help="datasets in the order the stream presents them (comma separated)")
    p.add_argument("--eval-datasets", default=None,
                   help="datasets whose test episodes are evaluated (comma separated; default: the stream's)")
    p.add_argument("--data-roots", default=None,
                   help="name=dir,... folders of the datasets (default ../shared/data/<name>)")
    p.add_argument("--optimizer", default="adam", choices=["adam", "foovb"])
    p.add_argument("--steps", default="300",
                   help="steps (mini-batches) of each dataset of the stream: one number for all, or one per "
                        "dataset (comma separated)")
    p.add_argument("--batch", type=int, default=4, help="episodes per step")
    p.add_argument("--episode-length", type=int, default=32)
    p.add_argument("--code-size", type=int, default=16)
    p.add_argument("--filters", type=int, default=16)
    p.add_argument("--norm-groups", type=int, default=4)
    p.add_argument("--kind", default="mixture", choices=["mixture", "gaussian"])
    p.add_argument("--iterations", type=int, default=10, help="VB iterations per write")
    p.add_argument("--reg", default="0.10,0.20,8,8", help="regularizer eps,delta,alpha,beta ('none' disables)")
    p.add_argument("--lr", type=float, default=5e-4, help="Adam step size (constant: no schedule, no boundary)")
    p.add_argument("--beta1", type=float, default=0.0, help="Adam beta_1 (the trainer's default for memory models)")
    p.add_argument("--clip", type=float, default=100.0, help="gradient norm clip of the Adam runs")
    # (only the diagonal one, the one measured: FooVB's matrix-variate grouping appends a bias of
    # weight.shape[0] elements as the last column of the weight; vbmtrain.nets' transposed
    # convolutions store theirs as (in, out, k, k), so with in == out, as here, the bias would share
    # the row factor of the input channels, not of the output channels it belongs to)
    p.add_argument("--foovb-variant", default="diagonal", choices=["diagonal"], help="FOO-VB variant")
    p.add_argument("--foovb-samples", type=int, default=2, help="Monte Carlo weight samples K per step")
    p.add_argument("--foovb-sigma-init", type=float, default=None, help="initial std of the weights (diagonal)")
    p.add_argument("--foovb-eta", type=float, default=None, help="step size on the mean (1 in the seed)")
    p.add_argument("--loss-scale", type=float, default=196.0,
                   help="FOO-VB's L_n is (-ELBO per frame, mean over the batch) / loss-scale: a tempered "
                        "likelihood (196 learned fastest of 1, 32, 196, 784 on MNIST alone; 1 and 32 diverge; "
                        "docs/research/continual.md); Adam's loss is the trainer's, unscaled")
    p.add_argument("--eval-every", type=int, default=25, help="evaluate every N steps (and at 0 and the end)")
    p.add_argument("--eval-episodes", type=int, default=16, help="held-out test episodes per dataset")
    p.add_argument("--train-frames", type=int, default=0, help="use only the first N training images (tests)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="torch device of the networks and batches (cuda on a GPU)")
    p.add_argument("--csv", required=True, help="CSV of the evaluation points")
    p.add_argument("--out", default=None, help="model file of the networks at the end of the stream")
    p.add_argument("--out-boundary", default=None,
                   help="model file of the networks at the end of the first dataset's steps")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    a.stream = [s.strip() for s in a.stream.split(",") if s.strip()]
    a.eval_datasets = [s.strip() for s in a.eval_datasets.split(",") if s.strip()] if a.eval_datasets else \
        list(a.stream)
    for opt, names in (("--stream", a.stream), ("--eval-datasets", a.eval_datasets)):
        if not names:
            p.error("%s: no dataset" % opt)
        for s in names:
            if s not in DEFAULT_ROOTS:
                p.error("%s: unknown dataset %r (mnist, fashion-mnist)" % (opt, s))
    roots = dict(DEFAULT_ROOTS)
    if a.data_roots:
        for item in a.data_roots.split(","):
            k, _, v = item.partition("=")
            if k not in DEFAULT_ROOTS or not v:
                p.error("--data-roots: expected name=dir with name mnist or fashion-mnist, got %r" % item)
            roots[k] = v
    a.roots = roots
    try:
        a.steps = [int(v) for v in a.steps.split(",")]
    except ValueError:
        p.error("--steps: integers, comma separated, not %r" % a.steps)
    if len(a.steps) == 1:
        a.steps = a.steps * len(a.stream)
    if len(a.steps) != len(a.stream):
        p.error("--steps: %d numbers for a stream of %d datasets" % (len(a.steps), len(a.stream)))
    if min(a.steps) < 1 or a.batch < 1 or a.eval_every < 1 or a.eval_episodes < 1 or a.foovb_samples < 1 \
            or not a.loss_scale > 0:
        p.error("--steps, --batch, --eval-every, --eval-episodes, --foovb-samples and --loss-scale must be positive")
    return a


class Stream:
    """The training stream: steps[i] batches of dataset i in turn (steps: an int for all, or a
    list), each from its own EpisodeSampler (episodes without replacement, new passes as needed).
    Iterating yields (step, batch); the task a batch came from is known only to the caller's log."""

    def __init__(self, trains, steps, T, B, seed, device="cpu"):
        self.samplers = [data.EpisodeSampler(x, T, B, seed + 101 * i, device) for i, x in enumerate(trains)]
        self.steps = list(steps) if isinstance(steps, (list, tuple)) else [steps] * len(trains)
        if len(self.steps) != len(trains):
            raise ValueError("Stream: %d step counts for %d datasets" % (len(self.steps), len(trains)))
        self.ends = [sum(self.steps[:i + 1]) for i in range(len(self.steps))]  # cumulative

    def task_of(self, step):
        """Index of the dataset that batch `step` (0-based) comes from."""
        return next((i for i, e in enumerate(self.ends) if step < e), len(self.samplers) - 1)

    def __len__(self):
        return self.ends[-1]

    def __iter__(self):
        step = 0
        for s, want in zip(self.samplers, self.steps):
            n = 0
            while n < want:
                for x in s.epoch():
                    if x.shape[0] < s.B:  # the short last batch of a pass: keep every step the same size
                        continue
                    yield step, x
                    step += 1
                    n += 1
                    if n == want:
                        break


def fixed_test_episodes(images, n_episodes, T, seed, device="cpu"):
    """The first n_episodes * T test images as (n_episodes, T, ch, h, w), dequantized once with a
    fixed seed: every evaluation point sees the same inputs."""
    n = min(n_episodes, images.shape[0] // T)
    if n < 1:
        raise ValueError("a test set of %d images has no episode of %d" % (images.shape[0], T))
    s = data.EpisodeSampler(images[:n * T], T, n, seed)
    return next(s.epoch(shuffle=False)).to(device)


def test_elbo(kind, cfg, enc, dec, episodes, iterations, batch, seed):
    """Mean test ELBO per frame of the fixed episodes (exact expectation over q(Omega), one
    reparametrised z per frame from a generator seeded with `seed`, no regularizer); NaN when the
    networks have diverged so far that the VB write fails."""
    enc.eval()
    dec.eval()
    gen = torch.Generator()
    gen.manual_seed(seed)
    tot = 0.0
    with torch.no_grad():
        for i in range(0, episodes.shape[0], batch):
            try:
                elbo, _ = objective.episode_elbo(kind, cfg, enc, dec, episodes[i:i + batch], iterations, gen)
            except RuntimeError:  # diverged networks (a failed Cholesky of the write): no finite ELBO
                tot = float("nan")
                break
            tot += float(elbo.sum())
    enc.train()
    dec.train()
    return tot / (episodes.shape[0] * episodes.shape[1])


class AdamStepper:
    """Adam on the networks' parameters, one gradient per batch (train.py's update)."""

    def __init__(self, params, args):
        self.params = params
        self.clip = args.clip
        self.opt = torch.optim.Adam(params, lr=args.lr, betas=(args.beta1, 0.999))

    def step(self, loss_fn):
        """One update from loss_fn() (a scalar to minimise); returns its value."""
        loss = loss_fn()
        if not torch.isfinite(loss):
            raise RuntimeError("non-finite loss")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.opt.step()
        return float(loss)

    def use_mean(self):
        """The parameters to evaluate are the parameters."""

    def describe(self):
        g = self.opt.param_groups[0]
        return {"name": "adam", "lr": g["lr"], "betas": list(g["betas"]), "clip": self.clip}


class FooVBStepper:
    """FOO-VB (foovb.FooVB, Algorithm 1) over both networks: per batch K Monte Carlo
    weight samples from the current posterior, the gradient of L_n at each, one explicit
    fixed-point update; the networks hold the posterior mean between steps. No clipping (the
    update is the seed's). A step whose loss or gradient is not finite is dropped whole (its
    Monte Carlo sums cleared) and reported to the caller as a RuntimeError."""

    def __init__(self, modules, args, shadow=False):
        """modules: the networks; args: continual.py's options (foovb_*, seed); shadow: work on a
        CPU copy even when the networks are on the CPU (what a GPU run does; tests)."""
        from foovb import FooVB
        kw = {"kind": args.foovb_variant, "mc_samples": args.foovb_samples, "seed": args.seed + 17,
              "init": "keep"}
        if args.foovb_sigma_init is not None:
            kw["std_init"] = args.foovb_sigma_init
        if args.foovb_eta is not None:
            kw["mean_eta"] = args.foovb_eta
        self.nets = torch.nn.ModuleList(modules)
        self.on_cpu = next(self.nets.parameters()).device.type == "cpu" and not shadow
        # FooVB keeps its posterior on the CPU: on another device it works on a CPU copy of the
        # networks, whose samples and means are copied to the device and gradients back
        self.model = self.nets if self.on_cpu else copy.deepcopy(self.nets).to("cpu")
        self.opt = FooVB(self.model, **kw)

    def _to_device(self):
        if not self.on_cpu:
            with torch.no_grad():
                for p, q in zip(self.nets.parameters(), self.model.parameters()):
                    p.copy_(q)

    def _grads_from_device(self):
        if not self.on_cpu:
            for p, q in zip(self.nets.parameters(), self.model.parameters()):
                q.grad = None if p.grad is None else p.grad.detach().cpu()
                p.grad = None

    def _clear(self):
        for g in self.opt.groups:
            for k in ("e1", "e2", "e3"):
                if hasattr(g, k):
                    getattr(g, k).zero_()
        self.opt.count = 0
        self.opt._sampled = False

    def step(self, loss_fn):
        total = 0.0
        try:
            for _ in range(self.opt.mc_samples):
                self.opt.sample()
                self._to_device()
                loss = loss_fn()
                if not torch.isfinite(loss):
                    raise RuntimeError("non-finite loss")
                loss.backward()
                self._grads_from_device()
                self.opt.accumulate()
                total += float(loss)
            self.opt.step()
            self._to_device()
        except (RuntimeError, FloatingPointError, ValueError):
            self._clear()
            self.opt.use_mean()
            self._to_device()
            raise RuntimeError("FOO-VB step dropped (non-finite loss or gradient, or a failed solve)")
        return total / self.opt.mc_samples

    def use_mean(self):
        """Write the posterior mean into the networks (evaluation and export, seed App. 15)."""
        self.opt.use_mean()
        self._to_device()

    def sigma_summary(self):
        """Median and 5th/95th percentiles of the posterior stds (diagonal) over all weights."""
        s = torch.cat([v.reshape(-1) for v in self.opt.stds().values()]).float()
        q = torch.quantile(s[torch.randperm(s.numel(), generator=torch.Generator().manual_seed(0))[:100000]],
                           torch.tensor([0.05, 0.5, 0.95]))
        return [round(float(v), 5) for v in q]

    def describe(self):
        o = self.opt
        return {"name": "foovb", "variant": o.kind, "std_init": o.std_init, "mc_samples": o.mc_samples,
                "mean_eta": o.mean_eta, "alpha": o.alpha}


def make_stepper(args, modules, params):
    if args.optimizer == "adam":
        return AdamStepper(params, args)
    return FooVBStepper(modules, args)


def run(args):
    """Train along the stream, write the CSV (and the model files); return {"rows": the CSV's rows
    (dicts), "stepper": the optimiser, "encoder", "decoder": the networks (at the posterior mean
    for FOO-VB)}."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # network initialisation: the same for every optimiser
    gen = torch.Generator()
    gen.manual_seed(args.seed)
    limit_test = args.eval_episodes * args.episode_length
    trains = [data.load_dataset(s, args.roots[s], "train", args.train_frames) for s in args.stream]
    tests = [data.load_dataset(s, args.roots[s], "test", limit_test) for s in args.eval_datasets]
    ch, h, w = trains[0].shape[1:]
    arch = nets.default_architecture(ch, h, w, args.code_size, args.filters, args.norm_groups, "gaussian")
    enc, dec = nets.build_networks(arch)
    enc.to(args.device)
    dec.to(args.device)
    params = list(enc.parameters()) + list(dec.parameters())
    cfg = vb.memory_defaults(args.kind, args.code_size)
    reg = None
    if args.reg != "none":
        e, d, a, b = (float(v) for v in args.reg.split(","))
        reg = {"eps": e, "delta": d, "alpha": a, "beta": b}
    T = args.episode_length
    scale = args.loss_scale
    # the evaluation episodes' noise depends on the dataset only: every run sees the same ones
    evals = [fixed_test_episodes(x, args.eval_episodes, T, 9000 + 13 * EVAL_SEED_INDEX[s], args.device)
             for s, x in zip(args.eval_datasets, tests)]
    stream = Stream(trains, args.steps, T, args.batch, args.seed, args.device)
    stepper = make_stepper(args, (enc, dec), params)
    print("continual %s on %s: %s steps of %d episodes of %d, C=%d, F=%d, %d params"
          % (args.optimizer, " -> ".join(args.stream), "+".join(map(str, args.steps)), args.batch, T, args.code_size, args.filters,
             sum(p.numel() for p in params)), flush=True)
    fields = ["optimizer", "step", "task", "dataset", "frames_seen", "seconds", "train_elbo_per_frame"] + \
        ["test_elbo_%s" % s for s in args.eval_datasets] + ["sigma_p05", "sigma_p50", "sigma_p95"]
    rows = []
    t0 = time.time()
    recent = []
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    csv_file = open(args.csv, "w", newline="")  # a row per evaluation point, flushed as it comes
    writer = csv.DictWriter(csv_file, fieldnames=fields)
    writer.writeheader()

    def evaluate(step):
        stepper.use_mean()
        row = {"optimizer": args.optimizer, "step": step, "task": stream.task_of(max(0, step - 1)),
               "dataset": args.stream[stream.task_of(max(0, step - 1))], "frames_seen": step * args.batch * T,
               "seconds": round(time.time() - t0, 1),
               "train_elbo_per_frame": round(sum(recent) / len(recent), 3) if recent else ""}
        for s, ep in zip(args.eval_datasets, evals):
            row["test_elbo_%s" % s] = round(test_elbo(args.kind, cfg, enc, dec, ep, args.iterations, args.batch,
                                                      12345), 3)
        if hasattr(stepper, "sigma_summary"):
            row["sigma_p05"], row["sigma_p50"], row["sigma_p95"] = stepper.sigma_summary()
        rows.append(row)
        writer.writerow(row)
        csv_file.flush()
        recent.clear()
        if not args.quiet:
            print(json.dumps(row), flush=True)

    def export(path, step):
        stepper.use_mean()
        memory = {k: cfg[k] for k in ("kind", "clusters", "rows", "groups", "sigma_z2", "u0", "sigma2_b0",
                                      "s_floor")}
        memory.update({"iterations": args.iterations, "episode_length": T})
        last = rows[-1] if rows else {}
        prov = {"dataset": "+".join(args.stream[:stream.task_of(step - 1) + 1]), "stream": args.stream,
                "steps_per_dataset": args.steps, "steps": step, "seed": args.seed, "batch_episodes": args.batch,
                "model": args.kind, "trainer": "research/continual.py", "optimizer": stepper.describe(),
                "regularizer": reg, "sample_memory": True,
                "test_elbo_per_frame": {s: last.get("test_elbo_%s" % s) for s in args.eval_datasets}}
        nets.save_model(path, enc, dec, arch, memory, prov)  # (save_model copies the tensors to the CPU)
        print("wrote %s" % path, flush=True)

    evaluate(0)
    skipped = 0
    for step, x in stream:
        def loss_fn():
            elbo, _ = objective.episode_elbo(args.kind, cfg, enc, dec, x, args.iterations, gen, reg, True)
            return -elbo.mean() / T / (1.0 if args.optimizer == "adam" else scale)
        try:
            loss = stepper.step(loss_fn)
            recent.append(-loss * (1.0 if args.optimizer == "adam" else scale))
        except RuntimeError as exc:  # a failed Cholesky or a NaN: skip the batch, say so (as train.py)
            skipped += 1
            print("step %d skipped: %s" % (step, str(exc).splitlines()[0]), file=sys.stderr)
        done = step + 1
        if done % args.eval_every == 0 or done in stream.ends:
            evaluate(done)
        if done == stream.ends[0] and args.out_boundary:
            export(args.out_boundary, done)
    if args.out:
        export(args.out, len(stream))
    csv_file.close()
    print(json.dumps({"optimizer": args.optimizer, "seconds": round(time.time() - t0, 1), "skipped": skipped,
                      "csv": args.csv}), flush=True)
    stepper.use_mean()
    return {"rows": rows, "stepper": stepper, "encoder": enc, "decoder": dec}


def kept_fraction(rows, first, reference=None, last=1):
    """The fraction of the first dataset's test ELBO gain that the end of the stream keeps:
    (E_end - E_ref) / (E_switch - E_ref), with E the test ELBO per frame on `first`, E_switch the
    mean of the last `last` evaluation points of the first dataset's steps (task 0; the last one is
    the switch), E_end the mean of the last `last` rows, E_ref `reference` or, when None, the value
    of the first row (step 0: the untrained networks). 1 = nothing forgotten, 0 = back to the
    reference, < 0 below it; NaN when there is no gain (E_switch <= E_ref)."""
    key = "test_elbo_%s" % first
    by_task0 = [float(r[key]) for r in rows if int(r["task"]) == 0]
    e_ref = float(rows[0][key]) if reference is None else float(reference)
    e_b = sum(by_task0[-last:]) / len(by_task0[-last:])
    ends = [float(r[key]) for r in rows[-last:]]
    e_end = sum(ends) / len(ends)
    if not math.isfinite(e_b - e_ref) or e_b <= e_ref:
        return float("nan")
    return (e_end - e_ref) / (e_b - e_ref)


def main(argv=None):
    args = parse_args(argv)
    run(args)
    return 0


if __name__ == "__main__":
    torch.set_num_interop_threads(1)
    sys.exit(main())
