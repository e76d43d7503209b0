#!/usr/bin/python3
"""test_spread.py -- CPU tests of research/spread.py: mean, sample sd and range over seeds on
hand-worked numbers, the orderings it resolves and leaves open, and each subcommand on small run
files the test writes (RPM and MWS JSON, permuted-MNIST and continual CSVs)."""
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "research"))
sys.path.insert(1, os.path.join(ROOT, "train"))

import spread  # noqa: E402


def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        spread.main(argv)
    return out.getvalue()


class Stats(unittest.TestCase):
    def test_mean_sd_range(self):
        self.assertEqual(spread.stats([3.0, 1.0, 2.0]), {"n": 3, "mean": 2.0, "sd": 1.0, "lo": 1.0, "hi": 3.0})
        self.assertEqual(spread.stats([5.0])["sd"], 0.0)
        st = spread.stats([0.8, 0.9])
        self.assertAlmostEqual(st["sd"], math.sqrt(0.005), places=12)
        self.assertEqual(spread.fmt(st), "0.850 ± 0.071 (0.800-0.900, 2)")
        self.assertEqual(spread.fmt(spread.stats([0.01, 0.02, 0.03]), 100, 1), "2.0 ± 1.0 (1.0-3.0, 3)")

    def test_bad_values_are_errors(self):
        with self.assertRaises(ValueError):
            spread.stats([])
        with self.assertRaises(ValueError):
            spread.stats([1.0, float("nan")])

    def test_separated_only_when_ranges_do_not_overlap(self):
        a, b = spread.stats([1.0, 2.0]), spread.stats([3.0, 4.0])
        self.assertEqual(spread.separated(a, b), "<")
        self.assertEqual(spread.separated(b, a), ">")
        self.assertEqual(spread.separated(a, b, lower_is_better=False), ">")
        self.assertIsNone(spread.separated(a, spread.stats([2.0, 5.0])))  # touching ranges: open

    def test_orderings(self):
        per = {"A": {0: 1.0, 1: 2.0, 2: 3.0}, "B": {0: 2.5, 1: 2.6, 2: 2.7}, "C": {0: 5.0, 1: 6.0, 2: 7.0},
               "D": {0: 0.1}}
        cells = {k: spread.stats(list(v.values())) for k, v in per.items()}
        self.assertEqual(spread.orderings(cells, per_seed=per), [
            "A vs B: not resolved (A ahead in 2 of 3 paired seeds)",
            "A better than C", "B better than C"])  # D has one seed: no ordering
        self.assertEqual(spread.orderings(cells, lower_is_better=False, per_seed=per), [
            "C better than B", "C better than A", "B vs A: not resolved (B ahead in 2 of 3 paired seeds)"])


class Commands(unittest.TestCase):
    def test_rpm(self):
        with tempfile.TemporaryDirectory() as d:
            for seeds, vals in (([0], {"full-vae": [(0.010, 0.020)], "minimalist-amortized": [(0.011, 0.012)]}),
                                ([1, 2], {"full-vae": [(0.012, 0.030), (0.014, 0.040)],
                                          "minimalist-amortized": [(0.013, 0.013), (0.015, 0.014)]})):
                res = [{"framework": fw, "label": fw, "seed": s, "nmse_train": tr, "nmse_test": te}
                       for fw, v in vals.items() for s, (tr, te) in zip(seeds, v)]
                with open(os.path.join(d, "results-poisson-N10-s%d.json" % seeds[0]), "w") as f:
                    json.dump({"dataset": "poisson", "N": 10, "init": "match", "results": res}, f)
            out = run(["rpm", d])
        self.assertIn("| full-vae | 0.0120 ± 0.0020 (0.0100-0.0140, 3) | 0.0300 ± 0.0100 (0.0200-0.0400, 3) |", out)
        self.assertIn("held-out: minimalist-amortized better than full-vae", out)
        self.assertIn("train: full-vae vs minimalist-amortized: not resolved (full-vae ahead in 3 of 3", out)

    def test_mws(self):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for s, (m, r) in enumerate(((1e-4, 0.01), (2e-4, 0.02), (3e-4, 0.03))):
                paths.append(os.path.join(d, "s%d.json" % s))
                with open(paths[-1], "w") as f:
                    json.dump({"results": [{"method": "mws-sleep", "K": 1, "seed": s, "abs_err_eps": m},
                                           {"method": "rws-sleep", "K": 1, "seed": s, "abs_err_eps": r}]}, f)
            out = run(["mws"] + paths)
        self.assertIn("| rws-sleep K=1 | 2.000 ± 1.000 (1.000-3.000, 3) |", out)
        self.assertIn("mws-sleep K=1 better than rws-sleep K=1", out)

    def test_foovb_best_rate_per_seed(self):
        # two tasks; sgd's best rate differs between the seeds and is chosen per seed
        rows = {0: [("foovb-diag", "", 0.9, 0.8), ("sgd", "0.1", 0.5, 0.3), ("sgd", "0.01", 0.7, 0.5)],
                1: [("foovb-diag", "", 0.8, 0.6), ("sgd", "0.1", 0.6, 0.4), ("sgd", "0.01", 0.2, 0.1)]}
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for s, rs in rows.items():
                paths.append(os.path.join(d, "s%d.csv" % s))
                with open(paths[-1], "w") as f:
                    f.write("method,lr,after_task,task,acc,seconds\n")
                    for m, lr, t1, t2 in rs:
                        f.write("%s,%s,1,1,0.95,1\n%s,%s,2,1,%s,2\n%s,%s,2,2,%s,2\n" % (m, lr, m, lr, t1, m, lr, t2))
            out = run(["foovb"] + paths)
        # foovb-diag: means after task 2 are 85 and 70; task 1: 90 and 80. sgd: 60 (lr 0.01) and 50 (lr 0.1)
        self.assertIn("| foovb-diag | 77.5 ± 10.6 (70.0-85.0, 2) | 85.0 ± 7.1 (80.0-90.0, 2) |", out)
        self.assertIn("| sgd | 55.0 ± 7.1 (50.0-60.0, 2) | 65.0 ± 7.1 (60.0-70.0, 2) |", out)

    def test_continual_kept_and_nan_seed(self):
        def write(path, mnist):
            with open(path, "w") as f:
                f.write("step,task,optimizer,seconds,test_elbo_mnist,test_elbo_fashion-mnist\n")
                for i, (task, v) in enumerate(mnist):
                    f.write("%d,%d,adam,%d,%s,-50\n" % (i, task, i, v))
        with tempfile.TemporaryDirectory() as d:
            a, b, c = (os.path.join(d, n) for n in ("a.csv", "b.csv", "c.csv"))
            write(a, [(0, -100), (0, 50), (0, 50), (0, 50), (1, 20), (1, 20), (1, 20)])  # kept 0.8
            write(b, [(0, -100), (0, 50), (0, 50), (0, 50), (1, 35), (1, 35), (1, 35)])  # kept 0.9
            write(c, [(0, -100), (0, -200), (0, -200), (0, -200), (1, 0), (1, 0), (1, 0)])  # no gain: NaN
            out = run(["continual", a, b, c])
        self.assertRegex(out, r"kept +0.850 ± 0.071 \(0.800-0.900, 2\); 1 of 3 seeds NaN")


if __name__ == "__main__":
    unittest.main()
