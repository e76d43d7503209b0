#!/usr/bin/python3
"""test_continual.py -- CPU tests of research/continual.py at tiny sizes: the stream (each dataset's
steps in order, nothing else told to the optimiser), the fixed evaluation episodes and the
determinism of the test ELBO, the kept-fraction definition on hand-made numbers, and short real runs
of both optimisers on a two-dataset stream (small IDX files made here, shaped as MNIST and
Fashion-MNIST ship) with their model files."""
import csv
import math
import os
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "research"))
sys.path.insert(1, os.path.join(ROOT, "train"))

import torch  # noqa: E402

import continual  # noqa: E402
import foovb  # noqa: E402,F401 (a missing module fails, never skips)
from vbmtrain import nets, vb  # noqa: E402,F401

torch.set_num_threads(1)


def constant_images(n, value):
    return np.full((n, 1, 4, 4), value, dtype=np.uint8)


class StreamTest(unittest.TestCase):
    def test_each_dataset_in_turn_with_full_batches(self):
        # dataset 0 is all 10s, dataset 1 all 200s: every batch must come from the right one, in order
        a, b = constant_images(50, 10), constant_images(70, 200)
        st = continual.Stream([a, b], steps=7, T=4, B=3, seed=1)
        seen = [(step, float(x.mean())) for step, x in st]
        self.assertEqual([s for s, _ in seen], list(range(14)))
        self.assertEqual(len(st), 14)
        for step, m in seen:
            want = 10.5 / 256 if step < 7 else 200.5 / 256  # dequantized: value + U(0,1), /256
            self.assertAlmostEqual(m, want, delta=0.6 / 256)
            self.assertEqual(st.task_of(step), 0 if step < 7 else 1)
        # 50 images / 4 = 12 episodes = 4 batches of 3 per pass: 7 steps need a second pass, and
        # every batch holds B episodes (the short last batch of a pass is never used)
        for _, x in continual.Stream([a], steps=7, T=4, B=5, seed=1):
            self.assertEqual(tuple(x.shape), (5, 4, 1, 4, 4))

    def test_steps_per_dataset(self):
        a, b = constant_images(50, 10), constant_images(70, 200)
        st = continual.Stream([a, b], [5, 2], T=4, B=3, seed=1)
        means = [float(x.mean()) for _, x in st]
        self.assertEqual((len(means), len(st), st.ends), (7, 7, [5, 7]))
        self.assertTrue(all(m < 0.1 for m in means[:5]) and all(m > 0.7 for m in means[5:]), means)
        self.assertEqual([st.task_of(i) for i in range(7)], [0] * 5 + [1] * 2)
        self.assertEqual(continual.parse_args(["--csv", "x", "--steps", "30,10"]).steps, [30, 10])
        self.assertEqual(continual.parse_args(["--csv", "x", "--steps", "30"]).steps, [30, 30])
        with self.assertRaises(SystemExit):
            continual.parse_args(["--csv", "x", "--steps", "30,10,5"])
        with self.assertRaises(ValueError):
            continual.Stream([a, b], [5], T=4, B=3, seed=1)

    def test_same_seed_same_stream(self):
        a, b = np.arange(64 * 16, dtype=np.int64).reshape(64, 1, 4, 4) % 251, constant_images(40, 3)
        a = a.astype(np.uint8)
        x1 = [x for _, x in continual.Stream([a, b], 3, 4, 2, seed=5)]
        x2 = [x for _, x in continual.Stream([a, b], 3, 4, 2, seed=5)]
        x3 = [x for _, x in continual.Stream([a, b], 3, 4, 2, seed=6)]
        self.assertTrue(all(torch.equal(p, q) for p, q in zip(x1, x2)))
        self.assertFalse(all(torch.equal(p, q) for p, q in zip(x1, x3)))

    def test_bad_stream_arguments(self):
        with self.assertRaises(SystemExit):
            continual.parse_args(["--csv", "x.csv", "--stream", "mnist,cifar"])
        with self.assertRaises(SystemExit):
            continual.parse_args(["--csv", "x.csv", "--steps", "0"])
        with self.assertRaises(SystemExit):
            continual.parse_args(["--csv", "x.csv", "--data-roots", "svhn=/tmp"])
        with self.assertRaises(SystemExit):
            continual.parse_args(["--csv", "x.csv", "--eval-datasets", "mnist,svhn"])
        a = continual.parse_args(["--csv", "x.csv", "--stream", "fashion-mnist", "--eval-datasets", "mnist,fashion-mnist"])
        self.assertEqual((a.stream, a.eval_datasets), (["fashion-mnist"], ["mnist", "fashion-mnist"]))
        self.assertEqual(continual.parse_args(["--csv", "x.csv"]).eval_datasets, ["mnist", "fashion-mnist"])


class EvaluationTest(unittest.TestCase):
    def test_fixed_episodes_and_deterministic_elbo(self):
        g = np.random.default_rng(3)
        imgs = g.integers(0, 256, size=(40, 1, 28, 28), dtype=np.uint8)
        e1 = continual.fixed_test_episodes(imgs, 3, 8, 77)
        e2 = continual.fixed_test_episodes(imgs, 3, 8, 77)
        self.assertEqual(tuple(e1.shape), (3, 8, 1, 28, 28))
        self.assertTrue(torch.equal(e1, e2))
        # the first images in order (no shuffle), dequantized within their pixel bin
        self.assertTrue(bool(((e1[0, 1] * 256 - torch.from_numpy(imgs[1]).float()).abs() < 1.0).all()))
        with self.assertRaises(ValueError):
            continual.fixed_test_episodes(imgs[:5], 3, 8, 77)
        torch.manual_seed(0)
        arch = nets.default_architecture(1, 28, 28, code_size=4, filters=4, groups=2)
        enc, dec = nets.build_networks(arch)
        cfg = vb.memory_defaults("mixture", 4, None, 3)
        a = continual.test_elbo("mixture", cfg, enc, dec, e1, 3, 2, 12345)
        b = continual.test_elbo("mixture", cfg, enc, dec, e1, 3, 2, 12345)
        c = continual.test_elbo("mixture", cfg, enc, dec, e1, 3, 2, 999)
        self.assertTrue(math.isfinite(a))
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)  # the z draws do depend on the seed
        self.assertTrue(enc.training and dec.training)  # back in training mode


class KeptFractionTest(unittest.TestCase):
    def rows(self, *vals):
        # (task, test ELBO on the first dataset)
        return [{"task": t, "test_elbo_mnist": v} for t, v in vals]

    def test_definition(self):
        rows = self.rows((0, -1000.0), (0, -600.0), (0, -400.0), (1, -500.0), (1, -700.0))
        # gain at the switch: 600 over the untrained networks; 300 of it left at the end
        self.assertAlmostEqual(continual.kept_fraction(rows, "mnist"), 0.5)
        # against the second dataset alone (-800 on the first): (-700 + 800) / (-400 + 800)
        self.assertAlmostEqual(continual.kept_fraction(rows, "mnist", -800.0), 0.25)
        # nothing forgotten, and more than everything forgotten
        self.assertAlmostEqual(continual.kept_fraction(self.rows((0, -10.0), (0, -4.0), (1, -4.0)), "mnist"), 1.0)
        self.assertLess(continual.kept_fraction(self.rows((0, -10.0), (0, -4.0), (1, -20.0)), "mnist"), 0.0)
        # means over the last points of each phase: switch (-600 - 400) / 2, end (-500 - 700) / 2
        self.assertAlmostEqual(continual.kept_fraction(rows, "mnist", None, 2), (-600 + 1000) / (-500 + 1000))
        # no gain to keep: undefined
        self.assertTrue(math.isnan(continual.kept_fraction(self.rows((0, -4.0), (0, -9.0), (1, -5.0)), "mnist")))


class FooVBStepperTest(unittest.TestCase):
    def test_cpu_shadow_equals_in_place(self):
        # the copy-to-device path of a GPU run (a CPU shadow of the networks for FooVB), forced on
        # the CPU, takes bit for bit the steps FooVB takes on the networks themselves
        args = continual.parse_args(["--csv", "x.csv", "--optimizer", "foovb", "--foovb-samples", "2"])
        g = torch.Generator()
        g.manual_seed(4)
        x = torch.rand(2, 8, 1, 28, 28, generator=g)
        cfg = vb.memory_defaults("mixture", 4, None, 3)
        out = []
        for shadow in (False, True):
            torch.manual_seed(2)
            enc, dec = nets.build_networks(nets.default_architecture(1, 28, 28, 4, 4, 2))
            st = continual.FooVBStepper((enc, dec), args, shadow=shadow)
            gen = torch.Generator()
            gen.manual_seed(9)
            for _ in range(2):
                st.step(lambda: -continual.objective.episode_elbo("mixture", cfg, enc, dec, x, 2, gen)[0].mean() / 8 / 784)
            st.use_mean()
            out.append([p.detach().clone() for p in list(enc.parameters()) + list(dec.parameters())])
            self.assertEqual(st.on_cpu, not shadow)
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(*out)))
        torch.manual_seed(2)  # and the two steps moved the means away from the initial weights
        enc0, dec0 = nets.build_networks(nets.default_architecture(1, 28, 28, 4, 4, 2))
        init = [p.detach() for p in list(enc0.parameters()) + list(dec0.parameters())]
        self.assertFalse(all(torch.equal(a, b) for a, b in zip(out[0], init)))


def write_idx_images(path, images):
    """images: uint8 (N, 28, 28) -> an IDX file (magic 0x0803, big-endian sizes), as MNIST ships."""
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, 3]))
        f.write(np.array(images.shape, dtype=">u4").tobytes())
        f.write(np.ascontiguousarray(images, dtype=np.uint8).tobytes())


def tiny_datasets(tmp):
    """Two small IDX datasets of 28 x 28 images (train and test) that differ in kind -- blobs for
    'mnist', bars for 'fashion-mnist' -- so that the runs need no downloaded data; returns the
    --data-roots value."""
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[0:28, 0:28]
    roots = []
    for name in ("mnist", "fashion-mnist"):
        d = os.path.join(tmp, name)
        os.makedirs(d)
        for stem, n in (("train-images-idx3-ubyte", 256), ("t10k-images-idx3-ubyte", 128)):
            imgs = np.zeros((n, 28, 28), dtype=np.uint8)
            for i in range(n):
                cy, cx = rng.integers(6, 22, size=2)
                if name == "mnist":
                    m = (yy - cy) ** 2 + (xx - cx) ** 2 < rng.integers(9, 36)
                else:
                    m = (abs(yy - cy) < rng.integers(3, 10)) & (abs(xx - cx) < rng.integers(2, 5))
                imgs[i][m] = 255
            write_idx_images(os.path.join(d, stem), imgs)
        roots.append("%s=%s" % (name, d))
    return ",".join(roots)


class RunTest(unittest.TestCase):
    def tiny(self, tmp, optimizer, extra=()):
        argv = ["--data-roots", tiny_datasets(os.path.join(tmp, "data")),
                "--optimizer", optimizer, "--steps", "2", "--batch", "2", "--episode-length", "16",
                "--code-size", "4", "--filters", "4", "--norm-groups", "2", "--iterations", "2",
                "--eval-every", "1", "--eval-episodes", "1", "--train-frames", "128", "--quiet",
                "--csv", os.path.join(tmp, optimizer + ".csv"), "--out", os.path.join(tmp, optimizer + ".safetensors"),
                "--out-boundary", os.path.join(tmp, optimizer + "-b.safetensors")] + list(extra)
        return continual.run(continual.parse_args(argv))

    def check_run(self, tmp, optimizer, res):
        with open(os.path.join(tmp, optimizer + ".csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([int(r["step"]) for r in rows], [0, 1, 2, 3, 4])
        self.assertEqual([r["dataset"] for r in rows], ["mnist"] * 3 + ["fashion-mnist"] * 2)
        for r in rows:
            self.assertTrue(math.isfinite(float(r["test_elbo_mnist"])), r)
            self.assertTrue(math.isfinite(float(r["test_elbo_fashion-mnist"])), r)
        # the end-of-stream file holds the returned networks; the boundary file differs from it
        enc, dec, arch, memory, prov = nets.load_model(os.path.join(tmp, optimizer + ".safetensors"))
        self.assertEqual(prov["stream"], ["mnist", "fashion-mnist"])
        self.assertEqual(prov["dataset"], "mnist+fashion-mnist")
        self.assertEqual(prov["optimizer"]["name"], optimizer)
        self.assertEqual(memory["kind"], "mixture")
        for name, t in nets.named_tensors(res["encoder"], res["decoder"]).items():
            self.assertTrue(torch.equal(t, nets.named_tensors(enc, dec)[name]), name)
        encb, decb, _, _, provb = nets.load_model(os.path.join(tmp, optimizer + "-b.safetensors"))
        self.assertEqual(provb["dataset"], "mnist")
        self.assertEqual(provb["steps"], 2)
        self.assertFalse(torch.equal(encb.net.registry["enc__proj"].weight, enc.net.registry["enc__proj"].weight))
        return rows

    def test_adam_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            res = self.tiny(tmp, "adam")
            self.check_run(tmp, "adam", res)

    def test_foovb_run_exports_the_posterior_mean(self):
        with tempfile.TemporaryDirectory() as tmp:
            res = self.tiny(tmp, "foovb", ["--foovb-samples", "2", "--loss-scale", "196"])
            rows = self.check_run(tmp, "foovb", res)
            self.assertTrue(all(float(r["sigma_p50"]) > 0 for r in rows))
            # the exported weights are the posterior means, not the last Monte Carlo sample
            opt = res["stepper"].opt
            enc, dec, _, _, _ = nets.load_model(os.path.join(tmp, "foovb.safetensors"))
            model = torch.nn.ModuleList([enc, dec])
            params = dict(model.named_parameters())
            for g in opt.groups:
                name = g.names[0]
                self.assertTrue(torch.equal(params[name].detach(), g.mu.float()), name)
            # and the posterior moved from where it started (the networks' initial weights)
            torch.manual_seed(1)
            enc0, dec0 = nets.build_networks(nets.default_architecture(1, 28, 28, 4, 4, 2))
            self.assertFalse(torch.equal(enc0.net.registry["enc__proj"].weight, enc.net.registry["enc__proj"].weight))


if __name__ == "__main__":
    unittest.main()
