#!/usr/bin/python3
"""test_mws_ca.py -- CPU tests of the memoised wake-sleep cellular-automaton experiment
(train/vbmtrain/mws.py, train/mws_ca.py): the renderer against hand-computed rows, the exact
likelihood against a brute-force count, the memory update, and a tiny MWS run on noiseless data."""
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "train"))

import torch  # noqa: E402

from vbmtrain import mws  # noqa: E402

torch.set_num_threads(1)


def row(s):
    return torch.tensor([[float(ch) for ch in s]], dtype=torch.float64)


def rows_of(img):
    return ["".join(str(int(v)) for v in r.tolist()) for r in img[0]]


class Renderer(unittest.TestCase):
    # rows worked out by hand from the rule tables (Wolfram numbering, periodic boundary)
    def test_rule_90_30_110_by_hand(self):
        want = {
            90: ["0001000", "0010100", "0100010", "1010101"],  # left xor right
            30: ["0001000", "0011100", "0110010", "1101111"],  # left xor (centre or right)
            110: ["0001000", "0011000", "0111000", "1101000"],
        }
        for rule, rws in want.items():
            img = mws.ca_render(torch.tensor([rule]), row(rws[0]), 4, 0.0)
            self.assertEqual(rows_of(img), rws, "rule %d" % rule)

    def test_periodic_boundary(self):
        img = mws.ca_render(torch.tensor([90]), row("10000"), 2, 0.0)
        self.assertEqual(rows_of(img), ["10000", "01001"])

    def test_noise_enters_the_row_read_next(self):
        # eps = 1 flips every cell; row 2 is computed from the flipped row 1
        img = mws.ca_render(torch.tensor([90]), row("0001000"), 3, 1.0)
        r1 = "1101011"  # not(0010100)
        r2 = "".join("1" if c == "0" else "0" for c in rows_of(mws.ca_render(torch.tensor([90]), row(r1), 2, 0.0))[1])
        self.assertEqual(rows_of(img), ["0001000", r1, r2])

    def test_flip_rate(self):
        g = torch.Generator()
        g.manual_seed(5)
        first = (torch.rand(40, 50, generator=g) < 0.5).double()
        rules = torch.randint(256, (40,), generator=g)
        img = mws.ca_render(rules, first, 50, 0.3, g)
        c = mws.pattern_counts(img)
        b = mws.rule_bits(rules)
        match = (c[:, :, 1] * b + c[:, :, 0] * (1 - b)).sum()
        n = c.sum()
        rate = 1 - (match / n).item()
        self.assertLess(abs(rate - 0.3), 4 * math.sqrt(0.3 * 0.7 / n.item()))

    def test_bad_shapes(self):
        with self.assertRaises(ValueError):
            mws.ca_render(torch.tensor([1, 2]), row("0101"), 3, 0.0)
        with self.assertRaises(ValueError):
            mws.ca_render(torch.tensor([1]), row("0101"), 0, 0.0)


def brute_log_lik(img, rule, eps):
    """log p(image | rule, eps) cell by cell from the definition (Sec. 4.3 of seed 001)."""
    H, W = img.shape
    lp = -W * math.log(2.0)
    for i in range(1, H):
        for j in range(W):
            left, centre, right = int(img[i - 1, (j - 1) % W]), int(img[i - 1, j]), int(img[i - 1, (j + 1) % W])
            want = (rule >> (4 * left + 2 * centre + right)) & 1
            lp += math.log(1 - eps) if int(img[i, j]) == want else math.log(eps)
    return lp


class Likelihood(unittest.TestCase):
    def test_against_brute_force(self):
        g = torch.Generator()
        g.manual_seed(11)
        imgs = (torch.rand(3, 5, 6, generator=g) < 0.5).double()
        rules = torch.tensor([[0, 30, 90, 110, 255], [1, 2, 3, 150, 200], [7, 45, 60, 99, 184]])
        for eps in (0.02, 0.3):
            got = mws.log_lik_counts(mws.pattern_counts(imgs), mws.rule_bits(rules), math.log(eps),
                                     math.log(1 - eps), 6)
            for b in range(3):
                for m in range(5):
                    self.assertAlmostEqual(got[b, m].item(), brute_log_lik(imgs[b], rules[b, m].item(), eps), 9)

    def test_sums_to_one_over_all_images(self):
        allimgs = torch.tensor(list(itertools.product([0.0, 1.0], repeat=9)), dtype=torch.float64).reshape(-1, 3, 3)
        c = mws.pattern_counts(allimgs)
        for rule in (30, 90, 204):
            bits = mws.rule_bits(torch.tensor([rule])).expand(512, 1, 8)
            lp = mws.log_lik_counts(c, bits, math.log(0.1), math.log(0.9), 3)
            self.assertAlmostEqual(torch.logsumexp(lp.flatten(), 0).item(), 0.0, 12)

    def test_joint_and_posterior_against_brute_force(self):
        model = mws.CAModel(0.07, width=6, height=5)
        with torch.no_grad():
            model.prior_logits.copy_(torch.linspace(-2, 2, 8, dtype=torch.float64))
        g = torch.Generator()
        g.manual_seed(3)
        img = mws.ca_render(torch.tensor([110]), (torch.rand(1, 6, generator=g) < 0.5).double(), 5, 0.07, g)
        lj = model.log_joint_all(mws.pattern_counts(img))[0]
        p = torch.sigmoid(model.prior_logits.detach())
        for rule in range(256):
            prior = sum(math.log(p[b].item()) if (rule >> b) & 1 else math.log(1 - p[b].item()) for b in range(8))
            self.assertAlmostEqual(lj[rule].item(), prior + brute_log_lik(img[0], rule, 0.07), 9)


class Memory(unittest.TestCase):
    def test_keeps_best_k_distinct(self):
        g = torch.Generator()
        g.manual_seed(2)
        B, K, P = 6, 4, 5
        table = torch.randn(B, 256, generator=g, dtype=torch.float64)  # fixed scores log p(z, x_i)
        mem = torch.full((B, K), -1, dtype=torch.long)
        ms = torch.full((B, K), -math.inf, dtype=torch.float64)
        seen = [set() for _ in range(B)]
        best = torch.full((B,), -math.inf, dtype=torch.float64)
        for step in range(60):
            # few distinct rules per step, so proposals repeat each other and the memory
            props = torch.randint(40, (B, P), generator=g)
            ps = torch.gather(table, 1, props)
            mem, ms = mws.memory_merge(mem, ms, props, ps)
            for b in range(B):
                seen[b].update(props[b].tolist())
                want = sorted(seen[b], key=lambda z: -table[b, z].item())[:K]
                got = [z for z in mem[b].tolist() if z >= 0]
                self.assertEqual(got, want)
                self.assertEqual(len(set(got)), len(got))
                for z, s in zip(mem[b].tolist(), ms[b].tolist()):
                    self.assertEqual(s, table[b, z].item() if z >= 0 else -math.inf)
            self.assertTrue(bool((ms[:, 0] >= best).all()))
            best = ms[:, 0].clone()

    def test_empty_slots_until_enough_distinct(self):
        mem = torch.full((1, 3), -1, dtype=torch.long)
        ms = torch.full((1, 3), -math.inf, dtype=torch.float64)
        props = torch.tensor([[7, 7, 7]])
        mem, ms = mws.memory_merge(mem, ms, props, torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64))
        self.assertEqual(mem.tolist(), [[7, -1, -1]])
        self.assertEqual(ms[0, 1].item(), -math.inf)


class Training(unittest.TestCase):
    def test_tiny_mws_recovers_known_rules_noiseless(self):
        g = torch.Generator()
        g.manual_seed(4)
        truth = torch.tensor([110, 30, 90, 184] * 4)
        images = mws.ca_render(truth, (torch.rand(16, 16, generator=g) < 0.5).double(), 16, 0.0)
        # the patterns each image shows (the rule's other bits are not identified by it)
        seen = mws.pattern_counts(images).sum(2) > 0
        for method in ("mws-sleep", "mws-mem"):
            res = mws.train(images, method, 5, 300, seed=1, batch=8, lr_p=0.03, channels=(8, 8, 8, 8))
            top = res["memory"][:, 0]
            tb, gb = mws.rule_bits(truth), mws.rule_bits(top)
            # the recovered rule agrees with the true one on every pattern the image shows
            self.assertTrue(bool(((tb == gb) | ~seen).all()), "%s: %s vs %s" % (method, top.tolist(), truth.tolist()))
            self.assertLess(res["model"].eps().item(), 0.01)
        self.assertGreater(seen.double().mean().item(), 0.9)

    def test_rejects_bad_arguments(self):
        images = torch.zeros(4, 5, 5, dtype=torch.float64)
        with self.assertRaises(ValueError):
            mws.train(images, "rws-wake", 1, 1, seed=0)
        with self.assertRaises(ValueError):
            mws.train(images, "nope", 2, 1, seed=0)
        with self.assertRaises(ValueError):
            mws.CAModel(0.0)

    def test_command_line_tiny(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            png = os.path.join(d, "t.png")
            p = subprocess.run([sys.executable, os.path.join(ROOT, "train", "mws_ca.py"), "--n", "12", "--size", "12",
                                "--iters", "4", "--batch", "4", "--runs", "mws-sleep:1,rws-wake:2,exact:1", "--out",
                                out, "--picture", png], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                r = json.load(f)
            self.assertEqual([(x["method"], x["K"]) for x in r["results"]],
                             [("mws-sleep", 1), ("rws-wake", 2), ("exact", 1)])
            self.assertTrue(os.path.getsize(png) > 0)


if __name__ == "__main__":
    unittest.main()
