#!/usr/bin/python3
"""test_mws_ca.py -- CPU tests of the memoised wake-sleep cellular-automaton experiment
(research/mws.py, research/mws_ca.py): the renderer against hand-computed rows, the exact
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
sys.path.insert(0, os.path.join(ROOT, "research"))
sys.path.insert(1, os.path.join(ROOT, "train"))

import torch  # noqa: E402

import mws  # noqa: E402

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

    def test_neighbourhood_5_by_hand(self):
        # D = 5: pattern b = 16 x[j-2] + 8 x[j-1] + 4 x[j] + 2 x[j+1] + x[j+2]. The rule whose bit b
        # is b's highest bit copies x[j-2] (a shift right by 2); the one whose bit b is b's lowest
        # bit copies x[j+2] (a shift left by 2); the one whose bit is the middle bit is the identity
        copy_left2 = sum(1 << b for b in range(32) if b & 16)
        copy_right2 = sum(1 << b for b in range(32) if b & 1)
        identity = sum(1 << b for b in range(32) if b & 4)
        want = {copy_left2: ["1100100", "0011001", "0100110"], copy_right2: ["1100100", "0010011", "1001100"],
                identity: ["1100100", "1100100", "1100100"]}
        for rule, rws in want.items():
            img = mws.ca_render(torch.tensor([rule]), row(rws[0]), 3, 0.0, D=5)
            self.assertEqual(rows_of(img), rws, "rule %x" % rule)
        # D = 3 by the same general formula: bit b of rule 204 (0b11001100) is b's middle bit
        img = mws.ca_render(torch.tensor([204]), row("0110100"), 2, 0.0, D=3)
        self.assertEqual(rows_of(img), ["0110100", "0110100"])

    def test_rule_numbers_round_trip(self):
        rules = torch.tensor([0, 1, 0xDEADBEEF, 2**32 - 1])
        self.assertEqual(mws.bits_rule(mws.rule_bits(rules, 5)).tolist(), rules.tolist())
        self.assertEqual(tuple(mws.rule_bits(rules, 5).shape), (4, 32))
        with self.assertRaises(ValueError):
            mws.rule_bits(rules, 4)

    def test_bad_shapes(self):
        with self.assertRaises(ValueError):
            mws.ca_render(torch.tensor([1, 2]), row("0101"), 3, 0.0)
        with self.assertRaises(ValueError):
            mws.ca_render(torch.tensor([1]), row("0101"), 0, 0.0)


def brute_log_lik(img, rule, eps, D=3):
    """log p(image | rule, eps) cell by cell from the definition (Sec. 4.3 of seed 001): the
    pattern of cell j reads the D cells j - D//2 .. j + D//2 above it, leftmost as the high bit."""
    H, W = img.shape
    lp = -W * math.log(2.0)
    for i in range(1, H):
        for j in range(W):
            pat = 0
            for o in range(-(D // 2), D // 2 + 1):
                pat = 2 * pat + int(img[i - 1, (j + o) % W])
            want = (rule >> pat) & 1
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

    def test_neighbourhood_5_against_brute_force(self):
        g = torch.Generator()
        g.manual_seed(12)
        imgs = (torch.rand(2, 4, 7, generator=g) < 0.5).double()
        rules = torch.tensor([[0, 0xDEADBEEF, 2**32 - 1], [12345, 0x0F0F0F0F, 0x80000001]])
        got = mws.log_lik_counts(mws.pattern_counts(imgs, 5), mws.rule_bits(rules, 5), math.log(0.1),
                                 math.log(0.9), 7)
        for b in range(2):
            for m in range(3):
                self.assertAlmostEqual(got[b, m].item(), brute_log_lik(imgs[b], rules[b, m].item(), 0.1, 5), 9)

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
        c = mws.pattern_counts(img)
        lj = model.log_joint(c, mws.rule_bits(torch.arange(256))[None])[0].detach()
        p = torch.sigmoid(model.prior_logits.detach())
        for rule in range(256):
            prior = sum(math.log(p[b].item()) if (rule >> b) & 1 else math.log(1 - p[b].item()) for b in range(8))
            self.assertAlmostEqual(lj[rule].item(), prior + brute_log_lik(img[0], rule, 0.07), 9)
        # the exact posterior's bit marginals against the normalised enumeration of all 256 rules
        post = torch.softmax(lj, 0)
        marg = (post[:, None] * mws.rule_bits(torch.arange(256))).sum(0)
        got = model.posterior_bits(c)[0].detach()
        self.assertTrue(torch.allclose(got, marg, atol=1e-12, rtol=0), (got, marg))
        # the exact-EM objective E_q[log p(z, x)] is log p at q's bit probabilities (linearity)
        self.assertAlmostEqual(model.log_joint(c, got[None, None])[0, 0].item(), (post * lj).sum().item(), 9)

    def test_posterior_factorises_at_neighbourhood_5(self):
        # 2^32 rules cannot be enumerated: check that flipping any one bit b of any rule changes
        # log p(z, x) by the posterior log-odds of b, whatever the other bits (the factorisation)
        model = mws.CAModel(0.04, width=9, height=6, D=5)
        with torch.no_grad():
            model.prior_logits.copy_(torch.linspace(-1.5, 1.5, 32, dtype=torch.float64))
        g = torch.Generator()
        g.manual_seed(8)
        img = mws.ca_render(torch.tensor([0x6A09E667]), (torch.rand(1, 9, generator=g) < 0.5).double(), 6, 0.04, g,
                            D=5)
        c = mws.pattern_counts(img, 5)
        q = model.posterior_bits(c)[0].detach()
        for rule in (0, 0x6A09E667, 0xFFFFFFFF, 0x12345678):
            for b in (0, 5, 17, 31):
                one, zero = rule | (1 << b), rule & ~(1 << b)
                lj = model.log_joint(c, mws.rule_bits(torch.tensor([[one, zero]]), 5))[0].detach()
                self.assertAlmostEqual((lj[0] - lj[1]).item(), torch.logit(q[b]).item(), 9)


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

    def test_tiny_run_at_neighbourhood_5(self):
        # noiseless D = 5 data (2^32 rules). The exact reference recovers every rule on the
        # patterns each image shows and learns eps near 0. MWS is slow here (as in the seed's
        # Table 9); after 300 iterations its memory must be well-formed -- distinct rules whose
        # scores are log p(z, x) under the learned model -- and its best rules must
        # agree with the truth on shown patterns far above the 0.5 of guessing (0.77 measured)
        g = torch.Generator()
        g.manual_seed(6)
        truth = torch.tensor([0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A] * 3)
        images = mws.ca_render(truth, (torch.rand(12, 24, generator=g) < 0.5).double(), 24, 0.0, D=5)
        c = mws.pattern_counts(images, 5)
        seen = c.sum(2) > 0
        tb = mws.rule_bits(truth, 5)
        ex = mws.train(images, "exact", 1, 300, seed=2, batch=6, lr_p=0.03, channels=(8, 8, 8, 8), D=5)
        self.assertLess(ex["model"].eps().item(), 0.01)
        self.assertTrue(bool(((mws.rule_bits(mws.infer_rules(ex, images, "exact", 1, g), 5) == tb) | ~seen).all()))
        res = mws.train(images, "mws-sleep", 8, 300, seed=2, batch=6, lr_p=0.03, channels=(8, 8, 8, 8), D=5)
        mem = res["memory"]
        self.assertTrue(bool((mem >= 0).all()))
        for i in range(mem.shape[0]):
            self.assertEqual(len(set(mem[i].tolist())), mem.shape[1])
        with torch.no_grad():
            sc = mws.memory_scores(res["model"], c, mem)
            self.assertTrue(torch.allclose(sc, res["model"].log_joint(c, mws.rule_bits(mem, 5))))
        agree = ((tb == mws.rule_bits(mem[:, 0], 5)) | ~seen).double().mean().item()
        self.assertGreater(agree, 0.7)

    def test_command_line_tiny(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.json")
            png = os.path.join(d, "t.png")
            p = subprocess.run([sys.executable, os.path.join(ROOT, "research", "mws_ca.py"), "--n", "12", "--size", "12",
                                "--iters", "4", "--batch", "4", "--runs", "mws-sleep:1,rws-wake:2,exact:1", "--out",
                                out, "--picture", png], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                r = json.load(f)
            self.assertEqual([(x["method"], x["K"]) for x in r["results"]],
                             [("mws-sleep", 1), ("rws-wake", 2), ("exact", 1)])
            self.assertTrue(os.path.getsize(png) > 0)

    def test_command_line_neighbourhood_5(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r5.json")
            cmd = [sys.executable, os.path.join(ROOT, "research", "mws_ca.py")]
            p = subprocess.run(cmd + ["--n", "8", "--size", "12", "--iters", "3", "--batch", "4", "--neighbourhood",
                                      "5", "--runs", "mws-sleep:2,exact:1", "--out", out, "--picture",
                                      os.path.join(d, "t5.png")], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out) as f:
                r = json.load(f)
            self.assertEqual(r["args"]["neighbourhood"], 5)
            self.assertEqual(len(r["u"]), 32)
            self.assertTrue(all(0 <= z < 2**32 for z in r["true_rules"]))
            p = subprocess.run(cmd + ["--table", out], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("seed's Table 9", p.stdout)
            self.assertIn("| MWS (Sleep-r) | 2 | - |", p.stdout)
            p = subprocess.run(cmd + ["--neighbourhood", "4"], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2)
            self.assertIn("--neighbourhood", p.stderr)


if __name__ == "__main__":
    unittest.main()
