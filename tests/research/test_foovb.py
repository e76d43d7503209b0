#!/usr/bin/python3
"""test_foovb.py -- CPU tests of research/foovb.py (the FOO-VB optimiser)
and of the stream of research/permuted_mnist.py: the diagonal update against its
closed form and against exact online Bayes on a Gaussian linear model, Lemma 1's
matrix equation, positive definiteness of the matrix-variate factors, conv
layers, determinism, error contracts; seconds in all."""
import math
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "research"))
sys.path.insert(1, os.path.join(ROOT, "train"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import permuted_mnist  # noqa: E402
from foovb import FooVB, solve_fixed_point  # noqa: E402

torch.set_num_threads(1)
D64 = torch.float64


class Vec(nn.Module):
    """A bare parameter vector theta (the model is theta itself)."""

    def __init__(self, n):
        super().__init__()
        self.theta = nn.Parameter(torch.zeros(n, dtype=D64))


class Quadratic(unittest.TestCase):
    """L(theta) = sum_i h_i (theta_i - c_i)^2 / 2: a Gaussian likelihood in
    theta, curvature h.  Under the prior N(m, v^2), E[g_i] = h_i (m_i - c_i) and
    E[g_i eps_i] = h_i v_i exactly, so one FOO-VB step with many samples must
    give eq. 18 with these expectations."""

    def test_one_step_matches_eq18(self):
        n = 4
        h = torch.tensor([0.5, 2.0, 8.0, 30.0], dtype=D64)
        c = torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=D64)
        model = Vec(n)
        v = 0.1
        opt = FooVB(model, kind="diagonal", std_init=v, mc_samples=20000, seed=1)
        m = torch.tensor([0.3, 0.2, -0.4, 0.0], dtype=D64)
        opt.groups[0].mu = m.clone()
        opt.train_step(lambda: 0.5 * (h * (model.theta - c)**2).sum())
        mu_want = m - v * v * h * (m - c)
        e2 = h * v
        sig_want = v * torch.sqrt(1 + (0.5 * v * e2)**2) - 0.5 * v * v * e2
        g = opt.groups[0]
        # MC error (one sd) of E[g]: h v / sqrt(K); of E[g eps] = h E[(m - c + v eps) eps]:
        # h sqrt(2 v^2 + (m - c)^2) / sqrt(K); d sigma / d E[g eps] is about -v^2 / 2.
        K = 20000
        self.assertTrue(torch.all((g.mu - mu_want).abs() <= 4 * v * v * h * v / math.sqrt(K)), (g.mu, mu_want))
        tol = 4 * 0.5 * v * v * h * torch.sqrt(2 * v * v + (m - c)**2) / math.sqrt(K)
        self.assertTrue(torch.all((g.sigma - sig_want).abs() <= tol), (g.sigma, sig_want, tol))
        # the parameter now holds the mean (use_mean after step)
        self.assertTrue(torch.equal(model.theta.detach(), g.mu))
        # Theorem 1: strongly convex loss -> sigma decreased
        self.assertTrue(torch.all(g.sigma < v))

    def test_online_bayes_gaussian_linear_model(self):
        """y = x^T w + noise, noise N(0, s_y^2), streamed in mini-batches of 4.
        Exact online Bayes: precision of w = 1/v0^2 + sum x x^T / s_y^2.  With
        nearly independent features, the diagonal FOO-VB precision must track the
        diagonal of that (each step adds the batch's curvature to first order),
        so sigma shrinks as data come in, and the mean must move to the
        posterior mean (here close to the least-squares fit)."""
        g = torch.Generator()
        g.manual_seed(5)
        d, nb, B, s_y = 3, 300, 4, 0.5
        w_true = torch.tensor([1.0, -2.0, 0.5], dtype=D64)
        X = torch.randn(nb * B, d, generator=g, dtype=D64)
        Y = X @ w_true + s_y * torch.randn(nb * B, generator=g, dtype=D64)
        v0 = 0.2
        prec = torch.eye(d, dtype=D64) / v0**2 + X.T @ X / s_y**2
        w_post = torch.linalg.solve(prec, X.T @ Y / s_y**2)
        model = Vec(d)
        opt = FooVB(model, kind="diagonal", std_init=v0, mc_samples=20, seed=2)
        dist0 = float((opt.groups[0].mu - w_post).norm())
        for b in range(nb):
            xb, yb = X[b * B:(b + 1) * B], Y[b * B:(b + 1) * B]
            opt.train_step(lambda: ((yb - xb @ model.theta)**2).sum() / (2 * s_y**2))
        mu, sig = opt.groups[0].mu, opt.groups[0].sigma
        want_prec = torch.diagonal(prec)
        got_prec = 1 / sig**2
        # The MC estimate of E[g eps] carries the mini-batch gradient at the mean times
        # mean(eps) / sigma: with K = 20 its sum over the stream is good to ~1/sqrt(K)
        # relative, hence 30 % (a double-counted or missing curvature is off by 100 %).
        self.assertTrue(torch.all((got_prec / want_prec - 1).abs() < 0.3), (got_prec, want_prec))
        post_sd = 1 / want_prec.sqrt()
        self.assertLess(float((mu - w_post).norm()), 0.02 * dist0)
        self.assertTrue(torch.all((mu - w_post).abs() < 5 * post_sd), (mu, w_post, post_sd))


class MatrixVariate(unittest.TestCase):
    def test_lemma1_solves_the_matrix_equation(self):
        g = torch.Generator()
        g.manual_seed(7)
        for n in (1, 3, 17):
            R = torch.randn(n, n, generator=g, dtype=D64)
            V = R @ R.T / n + 0.1 * torch.eye(n, dtype=D64)
            E = torch.randn(n, n, generator=g, dtype=D64)
            X = solve_fixed_point(V, E)
            res = X @ X.T + V @ E @ X.T - V
            self.assertLess(float(res.abs().max()), 1e-10 * float(V.abs().max()) * 10)
            self.assertGreater(float(torch.linalg.eigvalsh(X @ X.T)[0]), 0.0)
        # E = 0: X X^T = V
        V = torch.diag(torch.tensor([1.0, 4.0], dtype=D64))
        X = solve_fixed_point(V, torch.zeros(2, 2, dtype=D64))
        self.assertTrue(torch.allclose(X @ X.T, V, atol=1e-12))
        with self.assertRaises(ValueError):
            solve_fixed_point(-torch.eye(2, dtype=D64), torch.zeros(2, 2, dtype=D64))
        with self.assertRaises(ValueError):
            solve_fixed_point(torch.eye(2, dtype=D64), torch.zeros(3, 3, dtype=D64))

    def test_factors_stay_positive_definite_on_a_network(self):
        g = torch.Generator()
        g.manual_seed(11)
        net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
        opt = FooVB(net, kind="matrix", mc_samples=4, init="paper", seed=3)
        x = torch.randn(16, 6, generator=g)
        y = torch.randint(3, (16,), generator=g)
        shapes = [(g_.M.shape, g_.A.shape, g_.B.shape) for g_ in opt.groups]
        self.assertEqual(shapes, [((5, 7), (7, 7), (5, 5)), ((3, 6), (6, 6), (3, 3))])
        tr0 = [float(torch.trace(gr.A @ gr.A.T)) * float(torch.trace(gr.B @ gr.B.T)) for gr in opt.groups]
        losses = []
        for _ in range(60):
            losses.append(opt.train_step(lambda: F.cross_entropy(net(x), y, reduction="sum")))
            for gr in opt.groups:
                for F_ in (gr.A, gr.B):
                    self.assertGreater(float(torch.linalg.eigvalsh(F_ @ F_.T)[0]), 0.0)
        tr1 = [float(torch.trace(gr.A @ gr.A.T)) * float(torch.trace(gr.B @ gr.B.T)) for gr in opt.groups]
        self.assertTrue(all(b < a for a, b in zip(tr0, tr1)), (tr0, tr1))  # the data shrank the covariance
        self.assertLess(sum(losses[-5:]), sum(losses[:5]))

    def test_scalar_weight_against_the_diagonal_version(self):
        """A 1x1 weight: A = a, B = b, sigma = ab.  Algorithm 3's mean update
        is the diagonal one (M - b^2 E[g] a^2), and A and B each take the
        diagonal std step, so the std shrinks by that factor squared."""
        c, hh = 0.7, 3.0
        res = {}
        for kind in ("diagonal", "matrix"):
            lin = nn.Linear(1, 1, bias=False).double()
            with torch.no_grad():
                lin.weight.fill_(0.2)
            opt = FooVB(lin, kind=kind, std_init=0.3, mc_samples=50, seed=9)
            opt.train_step(lambda: 0.5 * hh * ((lin.weight - c)**2).sum())
            res[kind] = opt
        d, m = res["diagonal"].groups[0], res["matrix"].groups[0]
        self.assertAlmostEqual(float(d.mu), float(m.M), places=12)  # same draws, same mean step
        ratio = float(d.sigma) / 0.3
        self.assertLess(ratio, 1.0)
        self.assertAlmostEqual(float(m.A.abs() * m.B.abs()) / 0.3, ratio**2, places=10)

    def test_isotropic_quadratic_precision_and_trace_correction(self):
        """L = c |W|^2 / 2 on a 4 x 6 weight, prior std v: exact online Bayes
        after N steps has precision 1/v^2 + N c per element.  Algorithm 3 counts
        c about twice per step (A and B both absorb it); with trace_correction
        (eq. 53 with the new A's trace) the count is right to first order."""
        v, cc, N = 0.1, 5.0, 20
        exact_inc = N * cc
        got = {}
        for tc in (False, True):
            lin = nn.Linear(6, 4, bias=False).double()
            opt = FooVB(lin, kind="matrix", std_init=v, mc_samples=100, seed=9, trace_correction=tc)
            for _ in range(N):
                opt.train_step(lambda: 0.5 * cc * (lin.weight**2).sum())
            got[tc] = float((1 / opt.stds()["weight"]**2).mean()) - 1 / v**2
        self.assertGreater(got[False], 1.6 * exact_inc, got)
        self.assertLess(abs(got[True] / exact_inc - 1), 0.15, got)

    def test_conv_and_bias_layout(self):
        net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3), nn.LayerNorm(3))
        opt = FooVB(net, kind="matrix", mc_samples=2, seed=0)
        self.assertEqual([tuple(gr.M.shape) for gr in opt.groups], [(4, 19), (3, 65), (3, 1), (3, 1)])
        # the means are the model's own weights (init="keep"), bias in the last column
        self.assertTrue(torch.equal(opt.groups[0].M[:, :18].float(), net[0].weight.detach().reshape(4, 18)))
        self.assertTrue(torch.equal(opt.groups[0].M[:, 18].float(), net[0].bias.detach()))
        x = torch.randn(5, 2, 6, 6)
        opt.train_step(lambda: net(x).pow(2).sum())
        sd = opt.stds()
        self.assertEqual(set(sd), {n for n, _ in net.named_parameters()})
        for n, p in net.named_parameters():
            self.assertEqual(sd[n].shape, p.shape)
            self.assertTrue(bool((sd[n] > 0).all()))

    def test_custom_transposed_conv_bias_not_grouped_with_in(self):
        # nets.ConvTranspose2d keeps its weight as (in, out, k, k); with in == out the bias (out
        # elements) must not be appended as a column of the (in, out*k*k) matrix
        from vbmtrain import nets
        for mod in (nets.ConvTranspose2d({"in": 3, "out": 3, "kernel": 2, "stride": 2, "padding": "same"}),
                    nn.ConvTranspose2d(3, 3, 2, stride=2)):
            with torch.no_grad():
                mod.bias.copy_(torch.tensor([1.0, 2.0, 3.0]))
            opt = FooVB(mod, kind="matrix", mc_samples=1, seed=0)
            self.assertEqual([g.names for g in opt.groups], [["weight"], ["bias"]], type(mod).__name__)
            self.assertEqual([tuple(g.M.shape) for g in opt.groups], [(3, 12), (3, 1)])
            x = torch.randn(2, 3, 4, 4)
            opt.train_step(lambda: mod(x).pow(2).sum())
            sd = opt.stds()
            self.assertEqual(sd["weight"].shape, mod.weight.shape)
            self.assertEqual(sd["bias"].shape, (3,))


class Contracts(unittest.TestCase):
    def run_diag(self, seed, kind="diagonal"):
        g = torch.Generator()
        g.manual_seed(0)
        net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        x = torch.randn(8, 4, generator=g)
        y = torch.randint(2, (8,), generator=g)
        opt = FooVB(net, kind=kind, mc_samples=3, init="paper", seed=seed)
        for _ in range(5):
            opt.train_step(lambda: F.cross_entropy(net(x), y, reduction="sum"))
        return opt, net

    def test_determinism_given_a_seed(self):
        for kind in ("diagonal", "matrix"):
            a, na = self.run_diag(4, kind)
            b, nb = self.run_diag(4, kind)
            c, nc = self.run_diag(5, kind)
            for pa, pb, pc in zip(na.parameters(), nb.parameters(), nc.parameters()):
                self.assertTrue(torch.equal(pa, pb))
            self.assertFalse(all(torch.equal(pa, pc) for pa, pc in zip(na.parameters(), nc.parameters())))

    def test_state_dict_round_trip(self):
        for kind in ("diagonal", "matrix"):
            a, na = self.run_diag(4, kind)
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "post.pt")
                torch.save(a.state_dict(), path)
                b, nb = self.run_diag(6, kind)
                b.load_state_dict(torch.load(path))
            for pa, pb in zip(na.parameters(), nb.parameters()):
                self.assertTrue(torch.equal(pa, pb))
            sa, sb = a.stds(), b.stds()
            for k in sa:
                self.assertTrue(torch.equal(sa[k], sb[k]))
            other = FooVB(nn.Linear(2, 2), kind=kind)
            with self.assertRaises(ValueError):
                other.load_state_dict(a.state_dict())

    def test_errors(self):
        net = nn.Linear(2, 2)
        with self.assertRaises(ValueError):
            FooVB(net, kind="full")
        with self.assertRaises(ValueError):
            FooVB(net, std_init=0.0)
        with self.assertRaises(ValueError):
            FooVB(net, kind="matrix", alpha=1.0)
        with self.assertRaises(ValueError):
            FooVB(net, mc_samples=0)
        with self.assertRaises(ValueError):
            FooVB(nn.ReLU())
        opt = FooVB(net)
        with self.assertRaises(RuntimeError):
            opt.accumulate()
        with self.assertRaises(RuntimeError):
            opt.step()
        opt.sample()
        net(torch.full((1, 2), float("nan"))).sum().backward()
        with self.assertRaises(FloatingPointError):
            opt.accumulate()
        self.assertEqual(opt.count, 0)


class Batched(unittest.TestCase):
    """sample_batch(K) + accumulate_batch: the same posterior as K calls of
    sample()/backward()/accumulate() fed the same draws (the batched draws are
    replayed one slice at a time into a second optimiser)."""

    def nets(self):
        g = torch.Generator()
        g.manual_seed(11)
        net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
        x = torch.randn(7, 5, generator=g)
        y = torch.randint(3, (7,), generator=g)
        other = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
        other.load_state_dict(net.state_dict())
        return net, other, x, y

    def loss_of(self, ws, k, x, y, skip=()):
        h = F.relu(F.linear(x, ws["0.weight"][k], ws["0.bias"][k]))
        b = ws["2.bias"][k] if "2.bias" not in skip else None
        return F.cross_entropy(F.linear(h, ws["2.weight"][k], b), y, reduction="sum")

    def compare(self, kind, tc=False, K=4, steps=2, skip=()):
        net, other, x, y = self.nets()
        a = FooVB(net, kind=kind, mc_samples=K, init="paper", seed=3, trace_correction=tc)
        b = FooVB(other, kind=kind, mc_samples=K, init="paper", seed=3, trace_correction=tc)
        before = [p.detach().clone() for p in net.parameters()]
        for _ in range(steps):
            draws = []
            orig = a._randn
            a._randn = lambda shape: draws.append(orig(shape)) or draws[-1]
            ws = a.sample_batch(K)
            a._randn = orig
            self.assertTrue(all(torch.equal(p, q) for p, q in zip(net.parameters(), before)))  # model untouched
            self.assertEqual(len(draws), len(a.groups))
            sum(self.loss_of(ws, k, x, y, skip) for k in range(K)).backward()
            self.assertEqual(a.accumulate_batch({n: (None if n in skip else w.grad) for n, w in ws.items()}), K)
            replay = iter([d[k] for k in range(K) for d in draws])
            b._randn = lambda shape: next(replay)
            for _ in range(K):
                b.sample()
                lb = {n: p for n, p in other.named_parameters()}
                h = F.relu(F.linear(x, lb["0.weight"], lb["0.bias"]))
                out = F.linear(h, lb["2.weight"], None if "2.bias" in skip else lb["2.bias"])
                F.cross_entropy(out, y, reduction="sum").backward()
                b.accumulate()
            self.assertIsNone(next(replay, None))
            a.step()
            b.step()
            before = [p.detach().clone() for p in net.parameters()]
        keys = ("mu", "sigma") if kind == "diagonal" else ("M", "A", "B")
        for ga, gb in zip(a.groups, b.groups):
            for key in keys:
                ta, tb = getattr(ga, key), getattr(gb, key)
                if key in ("A", "B"):  # the covariance factor: A is unique up to a rotation (see below)
                    ta, tb = ta @ ta.T, tb @ tb.T
                self.assertTrue(torch.allclose(ta, tb, rtol=1e-9, atol=1e-12), (kind, key, (ta - tb).abs().max()))
        moved = max(float((p - q).abs().max()) for p, q in zip(net.parameters(), other.parameters()))
        self.assertLess(moved, 1e-6)

    def test_diagonal(self):
        self.compare("diagonal")

    def test_matrix(self):
        self.compare("matrix")

    def test_matrix_trace_corrected(self):
        self.compare("matrix", tc=True)

    def test_a_parameter_the_loss_does_not_reach(self):
        # one step: with a zero gradient column, E is singular and Lemma 1's polar factor (so A
        # itself, not A A^T) is not unique, so replayed draws give other samples after a step
        self.compare("matrix", skip=("2.bias",), steps=1)
        self.compare("diagonal", skip=("2.bias",), steps=3)

    def test_errors(self):
        net, _, x, y = self.nets()
        for kind in ("diagonal", "matrix"):
            opt = FooVB(net, kind=kind, init="paper", seed=1)
            with self.assertRaises(RuntimeError):
                opt.accumulate_batch({})
            with self.assertRaises(ValueError):
                opt.sample_batch(0)
            ws = opt.sample_batch(3)
            self.assertEqual(tuple(ws["0.weight"].shape), (3, 4, 5))
            with self.assertRaises(ValueError):
                opt.accumulate_batch({"0.weight": torch.zeros(2, 4, 5)})
            bad = {n: torch.zeros_like(w) for n, w in ws.items()}
            bad["0.bias"][1, 2] = float("inf")
            with self.assertRaises(FloatingPointError):
                opt.accumulate_batch(bad)
            self.assertEqual(opt.count, 0)
            opt.sample()
            with self.assertRaises(RuntimeError):  # a single sample() cancels the pending batch
                opt.accumulate_batch({n: torch.zeros_like(w) for n, w in ws.items()})


class Stream(unittest.TestCase):
    def test_same_stream_for_every_method_and_identity_first(self):
        a = list(permuted_mnist.stream(3, 2, 50, 8, seed=1))
        b = list(permuted_mnist.stream(3, 2, 50, 8, seed=1))
        self.assertEqual(len(a), 3 * 2 * 6)
        self.assertTrue(all(ta == tb and torch.equal(ia, ib) for (ta, ia), (tb, ib) in zip(a, b)))
        self.assertEqual([t for t, _ in a], sorted(t for t, _ in a))  # tasks in order, no interleaving
        perms = permuted_mnist.make_perms(16, 4, seed=2)
        self.assertTrue(torch.equal(perms[0], torch.arange(16)))
        for p in perms[1:]:
            self.assertTrue(torch.equal(torch.sort(p).values, torch.arange(16)))
            self.assertFalse(torch.equal(p, torch.arange(16)))

    def test_summary_over_csvs_of_separate_processes(self):
        # two processes wrote the methods of one stream to two CSVs; --plot-only reads both
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.csv"), os.path.join(d, "b.csv")
            row = lambda m, lr, after, task, acc: {"method": m, "lr": lr, "after_task": after, "task": task,  # noqa
                                                   "acc": acc, "seconds": 1}
            permuted_mnist.write_rows(a, [row("foovb-diag", "", 1, 1, 0.9), row("foovb-diag", "", 2, 1, 0.8),
                                          row("foovb-diag", "", 2, 2, 0.7)], ["foovb-diag"])
            permuted_mnist.write_rows(b, [row("sgd", 0.1, 1, 1, 0.5), row("sgd", 0.1, 2, 1, 0.2),
                                          row("sgd", 0.1, 2, 2, 0.4), row("sgd", 0.01, 1, 1, 0.6),
                                          row("sgd", 0.01, 2, 1, 0.5), row("sgd", 0.01, 2, 2, 0.5)], ["sgd"])
            res = permuted_mnist.summarise(a + "," + b)
            self.assertEqual(res[("foovb-diag", "")], {1: [0.9], 2: [0.8, 0.7]})
            best = permuted_mnist.best_runs(res)
            self.assertEqual(best["sgd"][0], "0.01")  # mean 0.5 after task 2 beats 0.3
            self.assertIn("| foovb-diag | 90.0 | 75.0 |", permuted_mnist.table(a + "," + b))

    def test_batched_networks_match_the_network(self):
        g = torch.Generator()
        g.manual_seed(5)
        net = permuted_mnist.mlp(6, 5, g)
        x = torch.randn(4, 6, generator=g)
        y = torch.tensor([0, 3, 9, 3])
        sets = [{n: p.detach() + 0.1 * k * torch.randn(p.shape, generator=g) for n, p in net.named_parameters()}
                for k in range(3)]
        ws = {n: torch.stack([st[n] for st in sets]) for n in sets[0]}
        want = 0.0
        for st in sets:
            net.load_state_dict(st)
            want += float(F.cross_entropy(net(x), y, reduction="sum"))
        self.assertAlmostEqual(float(permuted_mnist.batched_loss(ws, x, y)), want, places=4)

    def test_chunked_step_equals_one_network_at_a_time(self):
        # chunk 1 draws in the looped order, so the posteriors agree to rounding; chunk 3 draws
        # the same distribution in another order
        def posterior(chunk, kind):
            g = torch.Generator()
            g.manual_seed(2)
            net = permuted_mnist.mlp(6, 5, g)
            opt = FooVB(net, kind=kind, mc_samples=3, init="paper", seed=4)
            x = torch.randn(8, 6, generator=g)
            y = torch.randint(10, (8,), generator=g)
            for _ in range(3):
                permuted_mnist.foovb_step(opt, net, x, y, chunk)
            return [t for grp in opt.groups for t in ((grp.mu, grp.sigma) if kind == "diagonal" else
                                                        (grp.M, grp.A @ grp.A.T, grp.B @ grp.B.T))]
        for kind in ("diagonal", "matrix"):
            a, b, c = posterior(0, kind), posterior(1, kind), posterior(3, kind)
            for ta, tb in zip(a, b):
                self.assertTrue(torch.allclose(ta, tb, rtol=1e-5, atol=1e-7), (kind, (ta - tb).abs().max()))
            self.assertFalse(all(torch.allclose(ta, tc, rtol=1e-5, atol=1e-7) for ta, tc in zip(a, c)))

    def test_sampled_accuracy(self):
        g = torch.Generator()
        g.manual_seed(3)
        net = permuted_mnist.mlp(6, 5, g)
        x = torch.randn(50, 6, generator=g)
        perm = torch.randperm(6, generator=g)
        y = net(x[:, perm]).argmax(1)  # labels the mean network gets all right
        y[:10] = (y[:10] + 1) % 10  # and 10 of 50 wrong
        for kind in ("diagonal", "matrix"):
            opt = FooVB(net, kind=kind, std_init=1e-12, init="keep", seed=1)
            state = opt.gen.get_state()
            acc = permuted_mnist.sampled_accuracy(opt, x, y, perm, n=7, chunk=3, seed=5, batch=16)
            self.assertAlmostEqual(acc, 0.8, places=6)  # the samples are the mean network
            self.assertTrue(torch.equal(opt.gen.get_state(), state))  # the training draws untouched
            self.assertEqual(opt._batch, 0)
        opt = FooVB(net, kind="diagonal", std_init=3.0, init="keep", seed=1)
        self.assertLess(permuted_mnist.sampled_accuracy(opt, x, y, perm, n=20, chunk=20, seed=5), 0.6)

    def test_bias_initialisations(self):
        g = torch.Generator()
        g.manual_seed(8)
        net = permuted_mnist.mlp(3, 4000, g, bias="bgd")
        self.assertAlmostEqual(float(net[0].bias.std()), math.sqrt(2.0 / 4001), delta=0.05 * math.sqrt(2.0 / 4001))
        self.assertAlmostEqual(float(net[0].weight.std()), math.sqrt(2.0 / 4003), delta=0.05 * math.sqrt(2.0 / 4003))
        self.assertTrue(bool((permuted_mnist.mlp(3, 5, g)[2].bias == 0).all()))
        with self.assertRaises(ValueError):
            permuted_mnist.mlp(3, 5, g, bias="xavier")

    def test_padded_inputs_as_the_bgd_loader(self):
        # Pad(2) with zeros, then (x - 0.1) / 0.2752, on a 28x28 image with two known pixels
        x = torch.zeros(1, 28, 28)
        x[0, 0, 0], x[0, 27, 13] = 1.0, 0.5
        y = permuted_mnist.pad32(x)
        self.assertEqual(tuple(y.shape), (1, 32, 32))
        border = (0.0 - 0.1) / 0.2752
        self.assertAlmostEqual(float(y[0, 0, 0]), border, places=6)
        self.assertAlmostEqual(float(y[0, 31, 31]), border, places=6)
        self.assertAlmostEqual(float(y[0, 1, 17]), border, places=6)
        self.assertAlmostEqual(float(y[0, 2, 2]), (1.0 - 0.1) / 0.2752, places=6)  # image (0, 0)
        self.assertAlmostEqual(float(y[0, 29, 15]), (0.5 - 0.1) / 0.2752, places=6)  # image (27, 13)
        self.assertAlmostEqual(float(y[0, 10, 10]), border, places=6)  # a zero pixel inside the image
        with self.assertRaises(ValueError):
            permuted_mnist.load_mnist("/nonexistent", 2, padded=True)
        with self.assertRaises(SystemExit):
            permuted_mnist.main(["--pad32", "--normalize", "--pool", "1", "--data", "/nonexistent"])


if __name__ == "__main__":
    unittest.main()
