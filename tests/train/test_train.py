#!/usr/bin/python3
"""test_train.py -- CPU tests of the trainer (train/): the PyTorch VB loop,
gradients through it, the model file round trip, the golden file being current,
and a few training steps of the real command line on a tiny model."""
import json
import math
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "train"))

import torch  # noqa: E402

import golden_vb  # noqa: E402
import train as train_cli  # noqa: E402
from vbmtrain import data, nets, objective, vb  # noqa: E402

torch.set_num_threads(1)
FASHION = "/usr/share/datasets/fashion-mnist"


def random_codes(g, B=2, T=30, C=8, groups=3):
    centers = 2.0 * torch.randn(B, groups, C, generator=g, dtype=torch.float64)
    lab = torch.randint(groups, (B, T), generator=g)
    Z = torch.gather(centers, 1, lab[..., None].expand(B, T, C)) + 0.3 * torch.randn(B, T, C, generator=g,
                                                                                      dtype=torch.float64)
    V = 0.05 + 0.1 * torch.rand(B, T, C, generator=g, dtype=torch.float64)
    return Z, V


class VBLoop(unittest.TestCase):
    def trace(self, kind, shift=False):
        g = torch.Generator()
        g.manual_seed(3)
        Z, V = random_codes(g)
        cfg = vb.memory_defaults(kind, Z.shape[-1], 4, 3)
        cfg["s_floor"] = 0.0
        if kind == "gaussian":
            cfg["shift"] = shift
        mem = vb.init_memory(cfg, Z, g)
        d = vb.address(cfg, mem, Z, V)
        out = [d["terms"]["total"]]
        for _ in range(12):
            mem = vb.update(cfg, mem, Z, d)
            d = vb.address(cfg, mem, Z, V)
            out.append(d["terms"]["total"])
        return torch.stack(out)

    def test_elbo_monotone_every_kind(self):
        # coordinate ascent never lowers the ELBO (q(s) floor off)
        for kind, shift in (("mixture", True), ("gaussian", False), ("gaussian", True), ("categorical", False)):
            tr = self.trace(kind, shift)
            diffs = tr[1:] - tr[:-1]
            self.assertTrue(bool((diffs >= -1e-8 * tr[1:].abs()).all()), "%s: %s" % (kind, tr[:, 0].tolist()))
            self.assertGreater(float(tr[-1, 0] - tr[0, 0]), 0.0, kind)

    def test_kl_zero_at_prior(self):
        cfg = vb.memory_defaults("mixture", 5, 3, 2)
        mem = vb.prior_memory(cfg, 1, 5, "cpu")
        self.assertAlmostEqual(float(vb.kl_matrix_normal(mem.R, mem.U, cfg["u0"]).abs().max()), 0.0, places=12)
        self.assertAlmostEqual(float(vb.kl_iso(mem.mu_b, mem.s2_b, cfg["sigma2_b0"]).abs().max()), 0.0, places=12)

    def test_golden_file_is_current(self):
        # tests/data/golden_vb.json must be what train/golden_vb.py produces now
        with open(os.path.join(ROOT, "tests", "data", "golden_vb.json")) as f:
            stored = {c["name"]: c for c in json.load(f)["cases"]}
        fresh = golden_vb.case("mixture", "mixture", T=40, C=12, K=4, H=3, shift=True, iterations=6, seed=11,
                               s_floor=1e-6)
        for key in ("R", "U", "mu_b", "s"):
            a = torch.tensor(fresh["expect"][key])
            b = torch.tensor(stored["mixture"]["expect"][key])
            self.assertLessEqual(float((a - b).abs().max()), 1e-9 * max(1.0, float(b.abs().max())), key)

    def test_gradient_flows_through_write(self):
        g = torch.Generator()
        g.manual_seed(5)
        Z, V = random_codes(g, B=1, T=20, C=6)
        Z.requires_grad_(True)
        cfg = vb.memory_defaults("mixture", 6, 3, 3)
        mem = vb.init_memory(cfg, Z.detach(), g)
        mem, d = vb.write(cfg, mem, Z, V, 5)
        d["terms"]["total"].sum().backward()
        self.assertTrue(bool(torch.isfinite(Z.grad).all()))
        self.assertGreater(float(Z.grad.abs().sum()), 0.0)
        # and it agrees with a finite difference of the unrolled write
        eps = 1e-6
        idx = (0, 3, 2)

        def f(delta):
            Zp = Z.detach().clone()
            Zp[idx] += delta
            g2 = torch.Generator()
            g2.manual_seed(5)
            _, dd = vb.write(cfg, vb.Memory(*[t.detach() for t in (mem0.R, mem0.U, mem0.mu_b, mem0.s2_b)]), Zp, V, 5)
            return float(dd["terms"]["total"].sum())
        mem0 = vb.init_memory(cfg, Z.detach(), g)
        Z.grad = None
        _, d = vb.write(cfg, mem0, Z, V, 5)
        d["terms"]["total"].sum().backward()
        fd = (f(eps) - f(-eps)) / (2 * eps)
        self.assertAlmostEqual(float(Z.grad[idx]), fd, delta=1e-4 * max(1.0, abs(fd)))

    def test_beta_draws(self):
        g = torch.Generator()
        g.manual_seed(1)
        s = objective.beta_integer(8, 8, (20000,), g)
        self.assertAlmostEqual(float(s.mean()), 0.5, delta=0.01)
        self.assertAlmostEqual(float(s.var()), 8 * 8 / (16 ** 2 * 17), delta=0.002)
        with self.assertRaises(ValueError):
            objective.beta_integer(0.5, 8, (3,), g)


class Networks(unittest.TestCase):
    def test_architecture_shapes(self):
        for shape in ((1, 28, 28), (3, 32, 32)):
            arch = nets.default_architecture(*shape, code_size=10, filters=8, groups=4)
            enc, dec = nets.build_networks(arch)
            x = torch.rand(3, *shape)
            mu, ls = enc(x)
            self.assertEqual(tuple(mu.shape), (3, 10))
            out = dec(mu)
            self.assertEqual(tuple(out.shape), (3, 2 * shape[0]) + shape[1:])

    def test_model_file_round_trip(self):
        arch = nets.default_architecture(1, 16, 16, code_size=6, filters=8, groups=4, blocks=2)
        enc, dec = nets.build_networks(arch)
        x = torch.rand(4, 1, 16, 16)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "m.safetensors")
            nets.save_model(p, enc, dec, arch, {"kind": "mixture"}, {"dataset": "test"})
            enc2, dec2, arch2, mem2, prov2 = nets.load_model(p)
        self.assertEqual(arch2, arch)
        self.assertEqual(prov2["dataset"], "test")
        with torch.no_grad():
            a, b = enc(x)[0], enc2(x)[0]
            self.assertTrue(torch.equal(a, b))
            self.assertTrue(torch.equal(dec(a), dec2(a)))

    def test_bounded_head(self):
        # the default gaussian head: mean = sigmoid(raw) in (0, 1), scale = 0.005 + 0.5 sigmoid(raw')
        # in (0.005, 0.505); the softplus head of the first model stays reachable
        arch = nets.default_architecture(1, 16, 16, code_size=6, filters=8, groups=4, blocks=2)
        self.assertEqual(arch["observation"]["mean"], "sigmoid")
        _, dec = nets.build_networks(arch)
        raw = torch.tensor([-1e4, -3.0, 0.0, 2.0, 1e4]).reshape(1, 1, 1, 5).repeat(1, 2, 1, 1)
        mean, scale = dec.params(raw)
        want_mean = torch.sigmoid(raw[:, :1])
        self.assertTrue(torch.equal(mean, want_mean))
        self.assertEqual(float(mean.min()), 0.0)
        self.assertEqual(float(mean[0, 0, 0, 2]), 0.5)
        self.assertAlmostEqual(float(scale.min()), 0.005, places=7)
        self.assertAlmostEqual(float(scale.max()), 0.505, places=6)
        self.assertAlmostEqual(float(scale[0, 0, 0, 2]), 0.255, places=6)
        old = nets.default_architecture(1, 16, 16, code_size=6, filters=8, groups=4, blocks=2, head="softplus")
        self.assertNotIn("mean", old["observation"])
        _, dec = nets.build_networks(old)
        mean, scale = dec.params(raw)
        self.assertTrue(torch.equal(mean, raw[:, :1]))
        self.assertAlmostEqual(float(scale[0, 0, 0, 2]), math.log(2.0) + 1e-3, places=6)
        with self.assertRaises(ValueError):
            nets.default_architecture(1, 16, 16, head="tanh")

    def test_objective_gradients(self):
        torch.manual_seed(0)
        arch = nets.default_architecture(1, 16, 16, code_size=6, filters=8, groups=4, blocks=2)
        enc, dec = nets.build_networks(arch)
        g = torch.Generator()
        g.manual_seed(2)
        x = torch.rand(2, 12, 1, 16, 16)
        cfg = vb.memory_defaults("mixture", 6, 3, 3)
        reg = {"eps": 0.1, "delta": 0.2, "alpha": 8, "beta": 8}
        elbo, terms = objective.memory_elbo(cfg, enc, dec, x, 3, g, reg, sample_memory=True)
        (-elbo.mean()).backward()
        grads = [p.grad for p in list(enc.parameters()) + list(dec.parameters())]
        self.assertTrue(all(gr is not None and bool(torch.isfinite(gr).all()) for gr in grads))
        self.assertGreater(sum(float(gr.abs().sum()) for gr in grads), 0.0)
        self.assertEqual(tuple(elbo.shape), (2,))

    def test_tree_objective(self):
        # the tree memory: G mixtures over the code partitions, summed per episode
        torch.manual_seed(0)
        arch = nets.default_architecture(1, 16, 16, code_size=6, filters=8, groups=4, blocks=2)
        enc, dec = nets.build_networks(arch)
        g = torch.Generator()
        g.manual_seed(4)
        x = torch.rand(2, 12, 1, 16, 16)
        cfg = vb.memory_defaults("tree", 6, 2, 3)
        iterations = 3
        elbo, terms = objective.memory_elbo(cfg, enc, dec, x, iterations, g)
        self.assertEqual(tuple(elbo.shape), (2,))
        (-elbo.mean()).backward()
        self.assertTrue(all(bool(torch.isfinite(p.grad).all()) for p in enc.parameters()))
        # Theorem 5's tree with G groups factorises into G mixtures, one per partition of the code
        # columns: its ELBO terms per episode must be the sums of those of mixtures written on
        # each partition alone. The partitions are cut here by plain column slicing (not with
        # vb.split_groups), and each mixture starts from the tree's own starting memory: the
        # generator is replayed to draw it for all B*G (episode, group) blocks at once, as
        # memory_elbo does, and block b*G + g (the group-major layout of libvbmem) seeds group g
        # of episode b. Each mixture is then written on its B episodes alone.
        Z, V = objective.encode(enc, x)
        Z, V = Z.detach(), V.detach()
        B, T, C = Z.shape
        G, cg = cfg["groups"], C // cfg["groups"]
        mcfg = vb.as_mixture(cfg)
        self.assertEqual(mcfg["kind"], "mixture")
        parts = [(Z[..., cg * gi:cg * (gi + 1)], V[..., cg * gi:cg * (gi + 1)]) for gi in range(G)]
        for gi, (Zg, _) in enumerate(parts):
            self.assertTrue(torch.equal(Zg, vb.split_groups(Z, G)[gi::G]))
        g.manual_seed(4)
        start = vb.init_memory(mcfg, torch.stack([p[0] for p in parts], 1).reshape(B * G, T, cg), g)
        keys = ("loglik_codes", "kl_w", "kl_s", "kl_M", "kl_b")
        per_group = {k: torch.zeros(G, B, dtype=torch.float64) for k in keys + ("total",)}
        for gi, (Zg, Vg) in enumerate(parts):
            mem0 = vb.Memory(*[t[gi::G] for t in (start.R, start.U, start.mu_b, start.s2_b)])
            _, d = vb.write(mcfg, mem0, Zg, Vg, iterations)
            for k in per_group:
                per_group[k][gi] = d["terms"][k].detach()
        # The two computations do the same float64 arithmetic on differently batched tensors
        # (measured: equal bit for bit); 1e-9 relative leaves room for another summation order
        # in the batched kernels. A wrong partition (split_groups without its permute), a wrong
        # group sum (summing the wrong pairs, or one group G times) or a tree written as one
        # mixture moved the terms by 0.3 to 40 nats when tried, against a bound of 2e-7.
        for k in keys:
            want = per_group[k].sum(0)
            got = terms[k].detach()
            self.assertEqual(tuple(got.shape), (B,), k)
            self.assertLessEqual(float((got - want).abs().max()), 1e-9 * max(1.0, float(want.abs().max())),
                                 "%s: tree %s, per-partition mixtures %s" % (k, got.tolist(), want.tolist()))
        # the memory part of the episode ELBO is the sum of the groups' mixture ELBOs
        want = per_group["total"].sum(0)
        got = (elbo - terms["recon"]).detach()
        self.assertLessEqual(float((got - want).abs().max()), 1e-9 * max(1.0, float(want.abs().max())))


@unittest.skipUnless(os.path.isdir(FASHION) or os.environ.get("VBMEM_REQUIRE_DATA"),
                     "dataset-fashion-mnist not installed")
class CommandLine(unittest.TestCase):
    def test_train_few_steps_and_export(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "tiny.safetensors")
            log = os.path.join(d, "log.jsonl")
            rc = train_cli.main(["--kind", "mixture", "--code-size", "8", "--filters", "8", "--norm-groups", "4",
                                 "--episode-length", "16", "--batch", "2", "--clusters", "3", "--rows", "2",
                                 "--iterations", "3", "--epochs", "1", "--max-steps", "3", "--eval-episodes", "2",
                                 "--out", out, "--log", log, "--quiet", "--threads", "1"])
            self.assertEqual(rc, 0)
            enc, dec, arch, mem, prov = nets.load_model(out)
            self.assertEqual(mem["kind"], "mixture")
            self.assertEqual(mem["clusters"], 3)
            self.assertTrue(math.isfinite(prov["test_elbo_per_frame"]))
            with open(log) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual(lines[0]["step"], 3)
            self.assertIn("usage_per_episode", lines[0])

    def test_resume_is_bit_exact(self):
        # N steps straight == k steps, a checkpoint, a resumed run to N: every parameter and
        # Adam moment equal bit for bit. 6 episodes of 16 frames, 2 per step: 3 steps per pass,
        # so k = 4 stops inside the second pass and k = 3 between passes; the regularizer and
        # the sampled memory draw from the generator every step.
        base = ["--kind", "mixture", "--code-size", "8", "--filters", "8", "--norm-groups", "4",
                "--episode-length", "16", "--batch", "2", "--clusters", "3", "--rows", "2", "--iterations", "3",
                "--epochs", "4", "--stage2", "0.5", "--train-frames", "96", "--eval-episodes", "1", "--quiet",
                "--threads", "1"]
        N = 8
        with tempfile.TemporaryDirectory() as d:
            def run(name, steps, resume=False):
                ck = os.path.join(d, name + ".ck")
                argv = base + ["--max-steps", str(steps), "--out", os.path.join(d, name + ".st"), "--checkpoint", ck]
                if resume:
                    argv += ["--resume", ck]
                self.assertEqual(train_cli.main(argv), 0)
                return torch.load(ck)

            straight = run("straight", N)
            self.assertEqual(straight["step"], N)
            for k in (3, 4):
                part = run("k%d" % k, k)
                self.assertEqual(part["step"], k)
                moved = [n for n in straight["encoder"] if not torch.equal(straight["encoder"][n], part["encoder"][n])]
                self.assertTrue(moved, "steps %d..%d changed no parameter" % (k, N))
                resumed = run("k%d" % k, N, resume=True)
                self.assertEqual(resumed["step"], N)
                for net in ("encoder", "decoder"):
                    for n, t in straight[net].items():
                        self.assertTrue(torch.equal(t, resumed[net][n]), "k=%d: %s %s differs" % (k, net, n))
                for i, st in straight["optimizer"]["state"].items():
                    for key in ("exp_avg", "exp_avg_sq"):
                        self.assertTrue(torch.equal(st[key], resumed["optimizer"]["state"][i][key]), (k, i, key))
                self.assertEqual(straight["optimizer"]["param_groups"][0]["lr"],
                                 resumed["optimizer"]["param_groups"][0]["lr"])
                self.assertTrue(torch.equal(straight["gen"], resumed["gen"]))

    def test_episodes_without_replacement(self):
        imgs = data.load_dataset("fashion-mnist", None, "test")[:640]
        s = data.EpisodeSampler(imgs, 64, 4, seed=1, dequantize=False)
        seen = torch.cat([x.reshape(-1, 784) for x in s.epoch()])
        self.assertEqual(seen.shape[0], 640)
        # every image appears exactly once: compare sorted pixel sums
        a = torch.sort(seen.sum(1))[0]
        b = torch.sort(((torch.from_numpy(imgs).float() + 0.5) / 256).reshape(-1, 784).sum(1))[0]
        self.assertTrue(torch.allclose(a, b, atol=1e-3))


OMNIGLOT_SHARED = os.path.join(ROOT, "..", "shared", "data", "omniglot")


def make_small_omniglot(path, seed=7):
    """A small Omniglot of our own, shaped as the real one ships (omniglot.tar.gz of
    images_background/ALPHABET/characterNN/*.png and images_evaluation/..., 105 x 105 1-bit
    PNGs, dark strokes on white): 4 background and 3 evaluation characters of 20 drawings each,
    every drawing its character's 3 strokes with endpoints moved by up to 3 pixels."""
    import io
    import random
    import tarfile
    from PIL import Image, ImageDraw
    rnd = random.Random(seed)
    with tarfile.open(path, "w:gz") as tar:
        for split, alphabet, chars in (("images_background", "Synthetic_A", 4),
                                       ("images_evaluation", "Synthetic_B", 3)):
            for c in range(chars):
                strokes = [[(rnd.randint(15, 90), rnd.randint(15, 90)) for _ in range(2)] for _ in range(3)]
                for k in range(20):
                    im = Image.new("1", (105, 105), 1)
                    d = ImageDraw.Draw(im)
                    for s in strokes:
                        d.line([(x + rnd.randint(-3, 3), y + rnd.randint(-3, 3)) for x, y in s], fill=0, width=5)
                    buf = io.BytesIO()
                    im.save(buf, "PNG")
                    info = tarfile.TarInfo("%s/%s/character%02d/%04d_%02d.png" % (split, alphabet, c + 1, c, k + 1))
                    info.size = len(buf.getvalue())
                    tar.addfile(info, io.BytesIO(buf.getvalue()))


class SecondModel(unittest.TestCase):
    """The second model's dataset, Omniglot: ../shared/data/omniglot where it is present, else a
    small one this test writes (make_small_omniglot), so that the tests never skip; with
    VBMEM_REQUIRE_OMNIGLOT set, the real data missing is an error."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        if os.path.isdir(OMNIGLOT_SHARED):
            cls.root = OMNIGLOT_SHARED
            print("Omniglot: %s" % cls.root, file=sys.stderr)
        elif os.environ.get("VBMEM_REQUIRE_OMNIGLOT"):
            raise FileNotFoundError("VBMEM_REQUIRE_OMNIGLOT is set but %s is missing" % OMNIGLOT_SHARED)
        else:
            cls.root = os.path.join(cls.tmp.name, "omniglot.tar.gz")
            make_small_omniglot(cls.root)
            print("Omniglot: %s absent, a small one written by the test" % OMNIGLOT_SHARED, file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_omniglot_reader(self):
        OMNIGLOT = self.root
        x = data.load_dataset("omniglot", OMNIGLOT, "test", limit=40)
        self.assertEqual(x.shape, (40, 1, 28, 28))
        self.assertEqual(x.dtype.name, "uint8")
        # strokes bright on a dark background: a character covers a minority of the pixels
        frac = float((x > 127).mean())
        self.assertGreater(frac, 0.02)
        self.assertLess(frac, 0.4)
        # the first 20 are the 20 drawings of one character: closer to each other than to the next 20
        f = x.reshape(40, -1).astype("float64")
        same = sum(float(((f[i] - f[j]) ** 2).sum()) for i in range(20) for j in range(20) if i != j) / 380
        other = sum(float(((f[i] - f[20 + j]) ** 2).sum()) for i in range(20) for j in range(20)) / 400
        self.assertLess(same, other)
        with self.assertRaises(ValueError):
            data.load_dataset("omniglot", OMNIGLOT, "validation", limit=1)

    def test_omniglot_trains_and_vbmemd_serves_it(self):
        # a few steps of the second model's configuration (smaller), exported, loaded by vbmemd
        OMNIGLOT = self.root
        vbmemd = os.environ.get("VBMEMD") or os.path.join(ROOT, "build", "vbmemd")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "omniglot-mixture.safetensors")
            log = os.path.join(d, "log.jsonl")
            rc = train_cli.main(["--dataset", "omniglot", "--data-root", OMNIGLOT, "--kind", "mixture",
                                 "--code-size", "8", "--filters", "8", "--norm-groups", "4", "--episode-length", "16",
                                 "--batch", "2", "--clusters", "3", "--rows", "2", "--iterations", "3",
                                 "--train-frames", "64", "--max-steps", "2", "--eval-episodes", "1",
                                 "--out", out, "--log", log, "--quiet", "--threads", "1"])
            self.assertEqual(rc, 0)
            enc, dec, arch, mem, prov = nets.load_model(out)
            self.assertEqual(prov["dataset"], "omniglot")
            self.assertEqual(arch["observation"]["mean"], "sigmoid")
            self.assertTrue(math.isfinite(prov["test_elbo_per_frame"]))
            self.assertTrue(os.path.exists(vbmemd), "no vbmemd at %s (build it, or set VBMEMD)" % vbmemd)
            sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
            from daemon import Daemon, ok
            os.mkdir(os.path.join(d, "data"))
            dmn = Daemon(vbmemd, "--models-dir", d, "--default-model", "", "--data-dir", os.path.join(d, "data"))
            try:
                c = dmn.client()
                listed = ok(c.request("GET", "/v1/models"))
                names = json.dumps(listed)
                self.assertIn("omniglot-mixture", names)
                one = ok(c.request("GET", "/v1/models/omniglot-mixture"))
                self.assertIn("omniglot", json.dumps(one))
                # the bounded head in C: the daemon's mean images are PyTorch's sigmoid means (the raw
                # outputs, which an identity head would return, differ from them by far more)
                codes = [[0.0] * 8, [1.5, -1.0, 0.5, 2.0, -2.0, 0.0, 1.0, -0.5]]
                got = ok(c.request("POST", "/v1/models/omniglot-mixture/decode",
                                   {"codes": {"mu": codes}, "format": "json"}))

                def flat(v):
                    return [w for u in v for w in flat(u)] if isinstance(v, list) else [v]
                got = torch.tensor(flat(got["observations"]), dtype=torch.float64)
                with torch.no_grad():
                    raw = dec(torch.tensor(codes))
                    want = dec.params(raw)[0].reshape(-1).double()
                self.assertEqual(got.shape, want.shape)
                self.assertLess(float((got - want).abs().max()), 1e-4)
                self.assertGreater(float((raw[:, :1].reshape(-1).double() - want).abs().max()), 0.1)
            finally:
                self.assertEqual(dmn.stop(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
