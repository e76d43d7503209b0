#!/usr/bin/python3
"""test_rpm.py -- CPU tests of the time-series RPM of train/vbmtrain/rpm.py:
its GP posterior against dense and grid-integrated Gaussians, the free energy
as a lower bound on the exactly integrated log-likelihood, the ball data
generators, the exported serving layers, and a tiny training run."""
import math
import os
import sys
import unittest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "train"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from vbmtrain import rpm  # noqa: E402

torch.set_num_threads(1)
CHECKPOINT = os.path.join(ROOT, "tests", "data", "rpm_poisson_minimalist.pt")


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def randomise(model, seed, scale=0.7):
    """Non-trivial parameters (the default init has zero biases)."""
    g = gen(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 0:
                p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))


def log_normal(z, mean, var):
    return -0.5 * (z - mean) ** 2 / var - 0.5 * torch.log(2 * math.pi * var)


class GPPosterior(unittest.TestCase):
    def test_against_dense_inverse(self):
        # textbook dense formulas (explicit inverses are fine in a test)
        T = 8
        K = rpm.rbf_kernel(T, 1.7, 1.3, 1e-4)
        g = gen(1)
        h = torch.randn(3, T, generator=g, dtype=torch.float64)
        d = torch.rand(3, T, generator=g, dtype=torch.float64) * 4
        d[0, :4] = 0.0  # no information at some steps
        post = rpm.gp_posterior(K, h, d)
        Kinv = torch.linalg.inv(K)
        for b in range(3):
            S = torch.linalg.inv(Kinv + torch.diag(d[b]))
            mu = S @ h[b]
            kl = 0.5 * (torch.trace(Kinv @ S) + mu @ Kinv @ mu - T + torch.logdet(K) - torch.logdet(S))
            self.assertLess(float((post["mu"][b] - mu).abs().max()), 1e-8)
            self.assertLess(float((post["var"][b] - torch.diagonal(S)).abs().max()), 1e-8)
            self.assertAlmostEqual(float(post["kl"][b]), float(kl), delta=1e-7)

    def test_rpm_posterior_against_grid(self):
        # q(Z|X) of the minimalist RPM is p(Z) prod_jt f_j(z_t|x_jt) / p(z_t)^J normalised:
        # integrate that density on a 3-D grid (T = 3) and compare mean and variance
        J, T = 3, 3
        model = rpm.TimeSeriesRPM("minimalist-amortized", J=J, T=T, hidden=5, lengthscale=1.2, seed=2)
        randomise(model, 3)
        X = torch.randn(1, J, T, generator=gen(4))
        with torch.no_grad():
            post = model.posterior(X)
            a, P = model.factors(X)
        K = model.kernel().detach()
        v0 = model.v0()
        ax = torch.linspace(-7, 7, 141, dtype=torch.float64)
        Zg = torch.stack(torch.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(-1, T)
        logp = torch.distributions.MultivariateNormal(torch.zeros(T, dtype=torch.float64), K).log_prob(Zg)
        for j in range(J):
            for t in range(T):
                m, v = a[0, j, t] / P[0, j, t], 1.0 / P[0, j, t]
                logp = logp + log_normal(Zg[:, t], m, v) - log_normal(Zg[:, t], torch.tensor(0.0), torch.tensor(v0))
        w = torch.softmax(logp, 0)
        mean = (w[:, None] * Zg).sum(0)
        var = (w[:, None] * (Zg - mean) ** 2).sum(0)
        self.assertLess(float((post["mu"][0] - mean).abs().max()), 2e-3, (post["mu"], mean))
        self.assertLess(float((post["var"][0] - var).abs().max()), 2e-3, (post["var"], var))


class FreeEnergyBound(unittest.TestCase):
    def test_every_framework_bounds_the_exact_likelihood(self):
        # log p(X) - sum log p_jt(x_jt) = log int p(Z) prod_jt f_jt(z_t) / F_jt(z_t) dZ,
        # F_jt the mixture over the N training sequences: integrate on a 2-D grid (T = 2)
        J, T, N = 2, 2, 3
        Xtr = torch.randn(N, J, T, generator=gen(5))
        ax = torch.linspace(-8, 8, 401, dtype=torch.float64)
        dz = float(ax[1] - ax[0])
        Zg = torch.stack(torch.meshgrid(ax, ax, indexing="ij"), -1).reshape(-1, T)
        for i, fw in enumerate(rpm.FRAMEWORKS):
            model = rpm.TimeSeriesRPM(fw, J=J, T=T, hidden=4, N_train=N, lengthscale=1.5, seed=10 + i)
            randomise(model, 20 + i, 0.5)
            with torch.no_grad():
                fe = model.free_energy(Xtr, torch.arange(N), Xtr)
                a, P = model.factors(Xtr)
            K = model.kernel().detach()
            logp0 = torch.distributions.MultivariateNormal(torch.zeros(T, dtype=torch.float64), K).log_prob(Zg)
            m, v = a / P, 1.0 / P  # (N, J, T)
            # log F_jt(z) on the grid: (G, J, T)
            comp = log_normal(Zg[:, None, None, :], m[None], v[None])  # (G, N, J, T)
            logF = torch.logsumexp(comp, 1) - math.log(N)
            for n in range(N):
                integrand = logp0 + (comp[:, n] - logF).sum((1, 2))
                exact = float(torch.logsumexp(integrand, 0)) + T * math.log(dz)
                self.assertTrue(math.isfinite(float(fe[n])), fw)
                self.assertLessEqual(float(fe[n]), exact + 1e-6, "%s n=%d: bound %.6f > exact %.6f" % (
                    fw, n, float(fe[n]), exact))


    def test_bound_is_exact_at_the_optimal_parameters(self):
        # one training sequence: F_jt = f_jt, the true posterior is the prior and log p(X) -
        # sum log p_jt = log int p(Z) dZ = 0. Non-parametric q at the prior (d = 0, h = 0) and
        # inner parameters h_jt = f_jt / p(z_t) (natural (a, P - 1/v0)) make every inequality
        # of the bound an equality, so the free energy must be 0; any other q is strictly below.
        J, T = 2, 3
        model = rpm.TimeSeriesRPM("aistats", J=J, T=T, hidden=4, N_train=1, variance=2.5, seed=1)
        randomise(model, 2, 0.3)
        with torch.no_grad():
            model.rows.W3[:, 1, :] *= 0.1
            model.rows.b3[:, 1] = -2.0
        X = torch.randn(1, J, T, generator=gen(3))
        with torch.no_grad():
            a, P = model.factors(X)
            v0inv = 1.0 / model.v0()
            beta = P - v0inv
            raw = torch.log(torch.expm1(v0inv - 1e-4 - beta))  # softplus^-1, beta = v0inv - sp(raw) - 1e-4
            model.inner_np[0, :, :, 0] = a[0]
            model.inner_np[0, :, :, 1] = raw[0]
            model.q_np[0, :, 0] = 0.0
            model.q_np[0, :, 1] = -50.0
            fe = float(model.free_energy(X, torch.arange(1), X)[0])
            self.assertAlmostEqual(fe, 0.0, delta=2e-5)
            model.q_np[0, :, 0] = 0.3
            self.assertLess(float(model.free_energy(X, torch.arange(1), X)[0]), -1e-3)

    def test_free_energy_terms_by_quadrature(self):
        # every term of the bound recomputed from its definition on a grid (T = 2), with the
        # dense covariance of q: E_q log p(Z) + sum E_q log f_jt + H[q]
        # + sum_jt (H[q_t] - E_q log h_jt - log int F_jt / h_jt)
        J, T, N = 2, 2, 3
        Xtr = torch.randn(N, J, T, generator=gen(7))
        ax = torch.linspace(-9, 9, 361, dtype=torch.float64)
        dz = float(ax[1] - ax[0])
        Zg = torch.stack(torch.meshgrid(ax, ax, indexing="ij"), -1).reshape(-1, T)
        for i, fw in enumerate(("aistats", "full-vae", "minimalist-amortized", "luxury-amortized")):
            model = rpm.TimeSeriesRPM(fw, J=J, T=T, hidden=4, N_train=N, lengthscale=1.3, variance=1.7, seed=i)
            randomise(model, 30 + i, 0.5)
            idx = torch.arange(N)
            with torch.no_grad():
                fe = model.free_energy(Xtr, idx, Xtr)
                a, P = model.factors(Xtr)
                h, d = model.q_params(Xtr, idx, a, P)
                if model.inner_mode == "param":
                    o = model.inner(Xtr).double().reshape(N, T, J, 2).transpose(1, 2)
                elif model.inner_mode == "np":
                    o = model.inner_np[idx]
            K = model.kernel().detach()
            v0inv = 1.0 / model.v0()
            prior = torch.distributions.MultivariateNormal(torch.zeros(T, dtype=torch.float64), K)
            for n in range(N):
                S = torch.linalg.inv(torch.linalg.inv(K) + torch.diag(d[n]))
                mu = S @ h[n]
                q = torch.distributions.MultivariateNormal(mu, S)
                w = q.log_prob(Zg).exp() * dz * dz
                total = float((w * prior.log_prob(Zg)).sum()) + float(q.entropy())
                for j in range(J):
                    for t in range(T):
                        z1 = ax
                        qt = log_normal(z1, mu[t], S[t, t]).exp() * dz
                        total += float((w * log_normal(Zg[:, t], a[n, j, t] / P[n, j, t], 1 / P[n, j, t])).sum())
                        if model.inner_mode == "hugo":
                            al, be = -mu[t] / S[t, t], v0inv - 1 / S[t, t]
                        else:
                            al, be = o[n, j, t, 0], v0inv - F.softplus(o[n, j, t, 1]) - 1e-4
                        logh = al * z1 - 0.5 * be * z1 ** 2
                        comp1 = log_normal(z1[:, None], (a / P)[:, j, t], (1 / P)[:, j, t])
                        logF = torch.logsumexp(comp1, 1) - math.log(N)
                        total += 0.5 * math.log(2 * math.pi * math.e * float(S[t, t]))
                        total -= float((qt * logh).sum())
                        total -= float(torch.logsumexp(logF - logh, 0)) + math.log(dz)
                self.assertAlmostEqual(float(fe[n]), total, delta=2e-3 * max(1.0, abs(total)),
                                       msg="%s n=%d" % (fw, n))

class Data(unittest.TestCase):
    def test_shapes_types_and_determinism(self):
        for kind in ("poisson", "textured"):
            X, Z = rpm.make_balls(kind, 7, J=10, T=50, seed=3)
            self.assertEqual(tuple(X.shape), (7, 10, 50))
            self.assertEqual(tuple(Z.shape), (7, 50))
            self.assertEqual(X.dtype, torch.float32)
            self.assertTrue(bool(((Z >= 0) & (Z <= 9)).all()))
            steps = (Z[:, 1:] - Z[:, :-1]).abs()
            self.assertTrue(bool((steps <= 0.6 + 1e-12).all()))
            self.assertTrue(bool((steps >= 0.0).all()))
            X2, Z2 = rpm.make_balls(kind, 7, J=10, T=50, seed=3)
            self.assertTrue(torch.equal(X, X2) and torch.equal(Z, Z2))
            X3, _ = rpm.make_balls(kind, 7, J=10, T=50, seed=4)
            self.assertFalse(torch.equal(X, X3))
        with self.assertRaises(ValueError):
            rpm.make_balls("square", 3)
        with self.assertRaises(ValueError):
            rpm.make_balls("poisson", 0)

    def test_balls_bounce(self):
        # the ball reaches both halves of the column and reverses direction
        _, Z = rpm.make_balls("poisson", 20, seed=1)
        v = Z[:, 1:] - Z[:, :-1]
        self.assertTrue(bool(((v[:, 1:] * v[:, :-1]) < 0).any(1).float().mean() > 0.9))
        self.assertLess(float(Z.min()), 1.0)
        self.assertGreater(float(Z.max()), 8.0)

    def test_statistics(self):
        X, Z = rpm.make_balls("poisson", 200, seed=5)
        self.assertTrue(torch.equal(X, X.round()) and bool((X >= 0).all()))
        rows = torch.arange(10, dtype=torch.float64)[None, :, None]
        rate = 0.3 + 6.0 * torch.exp(-0.5 * (rows - Z[:, None, :]) ** 2)
        # Poisson: mean and variance both equal the rate
        r = (X.double() - rate) / rate.sqrt()
        self.assertLess(abs(float(r.mean())), 0.02)
        self.assertLess(abs(float(r.var()) - 1.0), 0.03)
        # the ball is brightest on the row nearest its centre
        nearest = Z.round().long()
        self.assertGreater(float(torch.gather(X, 1, nearest[:, None, :]).mean()), 5.0)
        Xt, Zt = rpm.make_balls("textured", 200, seed=6)
        dist = rows - Zt[:, None, :]
        clean = 2.0 * torch.cos(math.pi * dist) * torch.exp(-dist ** 2 / 4.5)
        noise = Xt.double() - clean
        self.assertLess(abs(float(noise.std()) - 0.3), 0.01)
        self.assertLess(abs(float(noise.mean())), 0.01)


class Serving(unittest.TestCase):
    def test_exported_layers_match_the_row_nets(self):
        model = rpm.TimeSeriesRPM("full-vae", J=4, T=9, hidden=6, seed=3)
        randomise(model, 4)
        X = torch.randn(2, 4, 9, generator=gen(5))
        ex = rpm.export_layers(model)
        ten = ex["tensors"]

        def run(layers, img):
            for L in layers:
                if L["type"] == "relu":
                    img = torch.relu(img)
                else:
                    pad = L["kernel"] // 2 if L["padding"] == "same" else 0
                    img = F.conv2d(img, ten[L["name"] + ".weight"], ten[L["name"] + ".bias"], padding=pad)
            return img

        with torch.no_grad():
            want = model.rows(X)  # (B, J, T, 2)
            for j in range(4):
                got = run(ex["rows"][j], X[:, j][:, None, None, :])  # [B, 1, 1, T] -> [B, 2, 1, T]
                self.assertLess(float((got[:, :, 0, :].transpose(1, 2) - want[:, j]).abs().max()), 1e-5)
            got = run(ex["q"], X[:, :, None, :])
            self.assertLess(float((got[:, :, 0, :].transpose(1, 2) - model.qnet(X)).abs().max()), 1e-5)

    def test_committed_checkpoint_reproduces_its_example(self):
        ck = torch.load(CHECKPOINT, weights_only=False)
        arch = ck["arch"]
        self.assertEqual(arch["framework"], "minimalist-amortized")
        model = rpm.TimeSeriesRPM(arch["framework"], J=arch["J"], T=arch["T"], hidden=arch["hidden"])
        model.load_state_dict(ck["state_dict"])
        self.assertAlmostEqual(ck["gp"]["lengthscale"], float(model.log_ell.exp()), places=12)
        with torch.no_grad():
            post = model.posterior(ck["example"]["X"])
        # the recognition network runs in float32, whose rounding differs between CPUs (the
        # example was written on one machine; an AMD EPYC gives mu 5.9e-8 away, |mu| <= 2.2):
        # agreement to float32 precision, 1e-6, well below any change of the checkpoint
        self.assertLess(float((post["mu"] - ck["example"]["mu"]).abs().max()), 1e-6)
        self.assertLess(float((post["var"] - ck["example"]["var"]).abs().max()), 1e-6)
        self.assertLess(ck["nmse_test"], 0.05)


class Training(unittest.TestCase):
    def test_tiny_training_lowers_the_loss(self):
        X, Z = rpm.make_balls("poisson", 6, J=5, T=20, seed=1)
        for fw in ("minimalist-amortized", "full-vae"):
            model = rpm.TimeSeriesRPM(fw, J=5, T=20, hidden=8, N_train=6, seed=0)
            hist, _ = rpm.train(model, X, 60, 4, lr=1e-2, seed=0)
            first = sum(h[1] for h in hist[:10]) / 10
            last = sum(h[1] for h in hist[-10:]) / 10
            self.assertLess(last, first - 0.1, fw)

    def test_nmse_is_affine_invariant_and_normalised(self):
        z = torch.linspace(0, 5, 40, dtype=torch.float64).sin()
        self.assertLess(rpm.nmse(-3.0 * z + 2.0, z), 1e-20)
        noise = torch.randn(40, generator=gen(1), dtype=torch.float64)
        self.assertGreater(rpm.nmse(noise, z), 0.5)
        self.assertLessEqual(rpm.nmse(noise, z), 1.0)

    def test_unknown_framework(self):
        with self.assertRaises(ValueError):
            rpm.TimeSeriesRPM("vi")


if __name__ == "__main__":
    unittest.main()
