"""foovb.py -- FOO-VB (Zeno, Golan, Hoffer, Soudry, "Task Agnostic Continual
Learning Using Online Variational Bayes with Fixed-Point Updates"): the online
variational Bayes optimiser of a network's weights, diagonal and matrix-variate
Gaussian posteriors, one explicit fixed-point iteration per mini-batch
(Algorithm 1 with Algorithms 3 and 4 of its Appendix 14).

Usage (any nn.Module; the loss must be the SUMMED negative log-likelihood of
the mini-batch, L_n of the paper, not its mean -- or pass scale=batch size):

    from foovb import FooVB
    opt = FooVB(model, kind="diagonal", seed=0)        # or kind="matrix"
    for x, y in stream:                                  # no task boundaries
        for _ in range(opt.mc_samples):                  # Algorithm 1, steps 1-3
            opt.sample()                                 # theta = TRANSFORM(eps, phi)
            F.cross_entropy(model(x), y, reduction="sum").backward()
            opt.accumulate()
        opt.step()                                       # step 4: phi <- UPDATE(...)
    opt.use_mean()                                       # test with the mean weights
    torch.save(opt.state_dict(), path)                   # the posterior (float64)

or, equivalently, `opt.train_step(lambda: loss_of(model))` per mini-batch.
Many samples at once (the seed's 2,500 matrix-variate samples, on a GPU):
`ws = opt.sample_batch(K)` gives (K, ...) sampled parameters; backward the sum
of the K networks' summed losses, `opt.accumulate_batch({n: w.grad ...})`,
any number of times, then `opt.step()` (research/permuted_mnist.py foovb_step).

The posterior is kept in float64 on the device of the model's parameters
(the model keeps its own dtype; samples and means are cast into it). Every draw comes from the optimiser's own seeded
torch.Generator, so a run is reproducible from (seed, data order).
"""
import math

import torch

KINDS = ("diagonal", "matrix")


def solve_fixed_point(V, E):
    """The solution X of X X^T + V E X^T - V = 0 given by Lemma 1 of the
    paper (Sec. 4.1; proof in its App. 8): with C = V E,
    Bm = V + C C^T / 4, D = Bm^(1/2), D^-1 C = S Lambda W^T (SVD), Q = S W^T,
    X = D Q - C / 2.  V must be symmetric positive definite (n x n, float64)
    and E any n x n matrix.  D and D^-1 come from one symmetric eigen-
    decomposition of Bm (no general inverse).  Raises ValueError if V is not
    square, E's shape differs, or Bm is not numerically positive definite
    (V not PD), and FloatingPointError if the result is not finite."""
    if V.dim() != 2 or V.shape[0] != V.shape[1] or E.shape != V.shape:
        raise ValueError("solve_fixed_point: V must be n x n and E the same shape, got %s and %s" %
                         (tuple(V.shape), tuple(E.shape)))
    C = V @ E
    Bm = V + 0.25 * (C @ C.T)
    Bm = 0.5 * (Bm + Bm.T)
    lam, U = torch.linalg.eigh(Bm)
    if not bool(lam[0] > 0):
        raise ValueError("solve_fixed_point: V + (VE)(VE)^T/4 is not positive definite (min eigenvalue %g)" %
                         float(lam[0]))
    sq = lam.sqrt()
    D = (U * sq) @ U.T
    DinvC = (U / sq) @ (U.T @ C)
    S, _, Wh = torch.linalg.svd(DinvC)
    X = D @ (S @ Wh) - 0.5 * C
    if not bool(torch.isfinite(X).all()):
        raise FloatingPointError("solve_fixed_point: non-finite solution")
    return X


class _Diag:
    """One parameter under a diagonal Gaussian N(mu, diag(sigma^2))."""

    def __init__(self, p, name):
        self.params = [p]
        self.names = [name]
        self.mu = p.detach().to(torch.float64).clone()
        self.sigma = torch.empty_like(self.mu)
        self.eps = None
        self.e1 = torch.zeros_like(self.mu)
        self.e2 = torch.zeros_like(self.mu)


class _Matrix:
    """A weight (out, ...) reshaped to (out, in) and, when given, its bias as
    an extra last column, under a matrix-variate Gaussian: W = M + B Phi A^T,
    cov(vec W) = (A A^T) kron (B B^T), B (out x out) among rows, A (in x in)
    among columns (paper Sec. 4.2, App. 14)."""

    def __init__(self, params, names):
        self.params = params
        self.names = names
        w = params[0]
        cols = [w.detach().reshape(w.shape[0] if w.dim() else 1, -1)]
        if len(params) > 1:
            cols.append(params[1].detach().reshape(-1, 1))
        self.M = torch.cat(cols, 1).to(torch.float64).clone()
        p, n = self.M.shape
        dev = self.M.device
        self.A = torch.eye(n, dtype=torch.float64, device=dev)
        self.B = torch.eye(p, dtype=torch.float64, device=dev)
        self.bphi = None  # B Phi and Phi A^T of the last sample ((K, p, n) after a batch)
        self.phiat = None
        self.e1 = torch.zeros_like(self.M)
        self.e2 = torch.zeros(n, n, dtype=torch.float64, device=dev)
        self.e3 = torch.zeros(p, p, dtype=torch.float64, device=dev)

    def write(self, W):
        w = self.params[0]
        nw = w[0].numel() if w.dim() > 1 else 1
        with torch.no_grad():
            w.copy_(W[:, :nw].reshape(w.shape).to(w.dtype))
            if len(self.params) > 1:
                self.params[1].copy_(W[:, nw].to(self.params[1].dtype))

    def grad(self):
        cols = []
        for p in self.params:
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            cols.append(g.detach().reshape(self.M.shape[0], -1).to(torch.float64))
        return torch.cat(cols, 1)

    def split(self, W):
        """(K, out, in[+1]) samples -> one (K, *shape) tensor per parameter."""
        w = self.params[0]
        nw = w[0].numel() if w.dim() > 1 else 1
        out = [W[:, :, :nw].reshape((W.shape[0],) + tuple(w.shape))]
        if len(self.params) > 1:
            out.append(W[:, :, nw])
        return out

    def join(self, grads):
        """One (K, *shape) gradient per parameter (None: zero) -> (K, out, in[+1]) float64."""
        K = next(g.shape[0] for g in grads if g is not None)
        cols = []
        for p, g in zip(self.params, grads):
            if g is None:
                g = torch.zeros((K,) + tuple(p.shape), dtype=torch.float64, device=self.M.device)
            cols.append(g.detach().reshape(K, self.M.shape[0], -1).to(torch.float64))
        return torch.cat(cols, 2)


def _is_transposed(mod):
    """True if `mod`'s weight is laid out (in, out, ...) (a transposed
    convolution), so its bias (out elements) runs along dim 1, not dim 0.
    The hook: a module (class or instance) attribute `transposed` that is
    True -- torch's ConvNd/ConvTransposeNd set it (False/True), and any custom
    transposed layer must set it too (train/vbmtrain/nets.py ConvTranspose2d
    does).  Without it a custom (in, out, ...) weight with in == out would get
    its bias appended along the wrong dimension."""
    return getattr(mod, "transposed", False) is True or isinstance(mod, torch.nn.modules.conv._ConvTransposeNd)


class FooVB:
    """FOO-VB over the parameters of `model` (an nn.Module).

    kind="diagonal" (Algorithm 4, eq. 18): every parameter tensor has a mean
    mu and a standard deviation sigma per element;
      mu    <- mu - mean_eta * sigma^2 * E[g]
      sigma <- sigma * sqrt(1 + (sigma E[g eps] / 2)^2) - sigma^2 E[g eps] / 2.
    kind="matrix" (Algorithm 3, eq. 54-56): each module with a `weight` of 2
    or more dimensions (nn.Linear, nn.ConvNd: conv weights are reshaped to
    (out, in*kh*kw)) is one matrix W (out x in), its `bias` appended as the
    last column when it has `out` elements (not for transposed convolutions,
    whose weight is (in, out, ...): modules with `transposed = True`, see
    `_is_transposed`; their bias is a matrix of its own); any other parameter is a matrix of
    its own (a 1-D one of shape (n, 1)).  Per matrix, with V1 = A A^T and
    V2 = B B^T:
      M <- M - mean_eta * V2 E[Psi] V1
      A <- X with X X^T + V1 E2 X^T - V1 = 0,  E2 = E[Psi^T B Phi] / out
      B <- X with X X^T + V2 E3 X^T - V2 = 0,  E3 = E[Psi A Phi^T] / in
    (Lemma 1, `solve_fixed_point`); A and B both from the prior (one explicit
    iteration).  Note: Algorithm 3 sets Tr(V2^-1 Sigma2) = out and
    Tr(V1^-1 Sigma1) = in in eq. 52-53, so A and B each absorb the whole
    curvature and cov(W) shrinks about twice as fast as exact online Bayes to
    first order (a 1x1 weight: the diagonal step squared; tests/research/
    test_foovb.py).  trace_correction=True (not in the paper) solves A as
    above, then B from eq. 53 with Tr(V1^-1 Sigma1) of the new A (one
    Cholesky solve): A takes the curvature, B only what A's shrinkage leaves,
    which removes the double count to first order.

    Defaults are the seed's (its App. 15, discrete permuted MNIST, Sec. 6.1):
    std_init = 0.047 (diagonal), alpha = 0.5 (matrix), mc_samples = 10
    (diagonal; the paper uses 2500 for the matrix version, which a CPU cannot
    afford: pass it explicitly), mean_eta = 1 (the plain fixed point).

    init="keep": the model's current weights become the means (e.g. a trained
    network); sigma = std_init everywhere (diagonal), A = I * s, B = I * s with
    s = sqrt(std_init) (matrix: every element's std is s^2 = std_init).
    init="paper": the means are re-drawn as in App. 15: diagonal weights
    mu ~ N(0, 2/(fan_in + fan_out)), 1-D parameters (biases) 0; matrix
    M ~ N(0, 2 alpha/(n_in + 2)) and A = B = I * (2 (1-alpha)/(n_in+2))^(1/4),
    so that every sample has variance 2/(n_in + 2) per weight (the paper
    draws the diagonals of A and B at random with that second moment; we use
    the constant, as the authors' code does).

    Raises ValueError on an unknown kind/init, a non-positive std_init,
    alpha outside (0, 1), mc_samples < 1, or a model without parameters.
    """

    def __init__(self, model, kind="diagonal", std_init=0.047, alpha=0.5, mc_samples=10, mean_eta=1.0,
                 init="keep", seed=0, generator=None, trace_correction=False):
        if kind not in KINDS:
            raise ValueError("FooVB: kind must be one of %s, got %r" % (KINDS, kind))
        if init not in ("keep", "paper"):
            raise ValueError("FooVB: init must be 'keep' or 'paper', got %r" % (init,))
        if not std_init > 0:
            raise ValueError("FooVB: std_init must be > 0, got %r" % (std_init,))
        if not 0 < alpha < 1:
            raise ValueError("FooVB: alpha must be in (0, 1), got %r" % (alpha,))
        if int(mc_samples) < 1:
            raise ValueError("FooVB: mc_samples must be >= 1, got %r" % (mc_samples,))
        self.model = model
        self.kind = kind
        self.std_init = float(std_init)
        self.alpha = float(alpha)
        self.mc_samples = int(mc_samples)
        self.mean_eta = float(mean_eta)
        self.trace_correction = bool(trace_correction)
        first = next(iter(model.parameters()), None)
        # the posterior lives where the model's parameters are (float64); draws come from a
        # generator on that device
        self.device = first.device if first is not None else torch.device("cpu")
        if generator is None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(int(seed))
        self.gen = generator
        self.groups = self._make_groups(model)
        if not self.groups:
            raise ValueError("FooVB: the model has no parameters")
        self.count = 0
        self._sampled = False
        self._batch = 0  # K of the last sample_batch() not yet accumulated
        self._init(init)
        self.use_mean()

    # -- construction --------------------------------------------------------
    def _make_groups(self, model):
        names = {id(p): n for n, p in model.named_parameters()}
        seen = set()
        groups = []
        if self.kind == "matrix":
            for mname, mod in model.named_modules():
                w = mod._parameters.get("weight")
                if w is None or not w.requires_grad or w.dim() < 2 or id(w) in seen:
                    continue
                ps = [w]
                b = mod._parameters.get("bias")
                transposed = _is_transposed(mod)  # weight (in, out, ...): the bias is along dim 1
                if (b is not None and b.requires_grad and not transposed and b.numel() == w.shape[0] and
                        id(b) not in seen):
                    ps.append(b)
                for p in ps:
                    seen.add(id(p))
                groups.append(_Matrix(ps, [names[id(p)] for p in ps]))
        for p in model.parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            groups.append(_Diag(p, names[id(p)]) if self.kind == "diagonal" else _Matrix([p], [names[id(p)]]))
        return groups

    def _randn(self, shape):
        """N(0, I) of `shape` (float64, on the posterior's device) from the optimiser's generator:
        every draw of sample(), sample_batch() and init goes through here."""
        return torch.randn(shape, generator=self.gen, dtype=torch.float64, device=self.device)

    def _normal(self, shape, std):
        return std * self._randn(shape)

    def _init(self, init):
        for g in self.groups:
            if isinstance(g, _Diag):
                g.sigma.fill_(self.std_init)
                if init == "paper":
                    p = g.params[0]
                    if p.dim() >= 2:
                        fan_in, fan_out = p[0].numel(), p.shape[0]
                        g.mu = self._normal(p.shape, math.sqrt(2.0 / (fan_in + fan_out)))
                    else:
                        g.mu.zero_()
            else:
                p, n = g.M.shape
                n_in = n - 1 if len(g.params) > 1 else n
                if init == "paper":
                    g.M = self._normal((p, n), math.sqrt(2.0 * self.alpha / (n_in + 2.0)))
                    s = (2.0 * (1.0 - self.alpha) / (n_in + 2.0))**0.25
                else:
                    s = math.sqrt(self.std_init)
                g.A = s * torch.eye(n, dtype=torch.float64, device=self.device)
                g.B = s * torch.eye(p, dtype=torch.float64, device=self.device)

    # -- Algorithm 1 -----------------------------------------------------------
    def sample(self):
        """Step 1-2 of Algorithm 1: draws eps ~ N(0, I) for every parameter
        from the optimiser's generator, writes theta = TRANSFORM(eps, phi) into
        the model's parameters and clears their .grad.  Call backward() on the
        mini-batch's summed loss next, then accumulate()."""
        for g in self.groups:
            if isinstance(g, _Diag):
                g.eps = self._randn(g.mu.shape)
                p = g.params[0]
                with torch.no_grad():
                    p.copy_((g.mu + g.sigma * g.eps).to(p.dtype))
            else:
                phi = self._randn(g.M.shape)
                g.bphi = g.B @ phi
                g.phiat = phi @ g.A.T
                g.write(g.M + g.bphi @ g.A.T)
            for p in g.params:
                p.grad = None
        self._sampled = True
        self._batch = 0

    def accumulate(self, scale=1.0):
        """Step 3: adds the gradient terms of the sample drawn by the last
        sample() (the .grad of the parameters times `scale`; a parameter the
        loss does not reach counts as gradient 0) to the Monte-Carlo sums.
        Raises RuntimeError if sample() was not called since the last
        accumulate(), FloatingPointError on a non-finite gradient (nothing is
        added then)."""
        if not self._sampled:
            raise RuntimeError("FooVB.accumulate: call sample() (and backward()) first")
        grads = []
        for g in self.groups:
            if isinstance(g, _Diag):
                p = g.params[0]
                gr = p.grad.detach().to(torch.float64) if p.grad is not None else torch.zeros_like(g.mu)
            else:
                gr = g.grad()
            if scale != 1.0:
                gr = gr * scale
            if not bool(torch.isfinite(gr.sum())):
                raise FloatingPointError("FooVB.accumulate: non-finite gradient in %s" % ", ".join(g.names))
            grads.append(gr)
        for g, gr in zip(self.groups, grads):
            g.e1 += gr
            if isinstance(g, _Diag):
                g.e2 += gr * g.eps
            else:
                g.e2.addmm_(gr.T, g.bphi, alpha=1.0 / g.M.shape[0])  # Psi^T B Phi / out
                g.e3.addmm_(gr, g.phiat.T, alpha=1.0 / g.M.shape[1])  # Psi A Phi^T / in
        self.count += 1
        self._sampled = False

    def sample_batch(self, K):
        """Steps 1-2 of Algorithm 1 for K samples at once (for a caller that
        evaluates K networks in one batched computation, e.g. the seed's 2,500
        matrix-variate samples on a GPU): draws eps (or Phi) of shape (K, ...)
        for every group, in group order, from the optimiser's generator, and
        returns {parameter name: (K, *shape) tensor of the K sampled values}
        in the parameter's dtype and device, leaves with requires_grad=True.
        The model's own parameters are not touched.  Compute the SUM over the
        K samples of each sample's summed mini-batch loss, backward(), then
        pass the tensors' .grad to accumulate_batch().  Raises ValueError if
        K < 1."""
        K = int(K)
        if K < 1:
            raise ValueError("FooVB.sample_batch: K must be >= 1, got %r" % (K,))
        out = {}
        for g in self.groups:
            if isinstance(g, _Diag):
                g.eps = self._randn((K,) + tuple(g.mu.shape))
                vals = [g.mu + g.sigma * g.eps]
            else:
                phi = self._randn((K,) + tuple(g.M.shape))
                g.bphi = torch.matmul(g.B, phi)
                g.phiat = torch.matmul(phi, g.A.T)
                # B Phi A^T as B (Phi A^T): one (in x in) product per sample, not two
                vals = g.split(g.M + torch.matmul(g.B, g.phiat))
            for p, name, v in zip(g.params, g.names, vals):
                out[name] = v.detach().to(p.dtype).requires_grad_(True)
        self._batch = K
        self._sampled = False
        return out

    def accumulate_batch(self, grads, scale=1.0):
        """Step 3 for the K samples of the last sample_batch(K): `grads` maps
        parameter names to (K, *shape) gradients of each sample's summed loss
        (times `scale`; a missing name or None counts as zero, like a
        parameter the loss does not reach).  The same sums as K calls of
        sample()/backward()/accumulate() with the same draws (tested).
        Raises RuntimeError if sample_batch() was not called since the last
        accumulate, ValueError on a gradient of the wrong shape, and
        FloatingPointError on a non-finite gradient (nothing is added then)."""
        K = self._batch
        if not K:
            raise RuntimeError("FooVB.accumulate_batch: call sample_batch() (and backward()) first")
        per = []
        for g in self.groups:
            gs = []
            for p, name in zip(g.params, g.names):
                gr = grads.get(name)
                if gr is not None and tuple(gr.shape) != (K,) + tuple(p.shape):
                    raise ValueError("FooVB.accumulate_batch: gradient of %s has shape %s, expected %s" %
                                     (name, tuple(gr.shape), (K,) + tuple(p.shape)))
                gs.append(gr)
            if isinstance(g, _Diag):
                gr = (gs[0].detach().to(self.device, torch.float64) if gs[0] is not None else
                      torch.zeros_like(g.eps))
            else:
                gr = g.join(gs) if any(x is not None for x in gs) else torch.zeros_like(g.bphi)
            if scale != 1.0:
                gr = gr * scale
            if not bool(torch.isfinite(gr.sum())):
                raise FloatingPointError("FooVB.accumulate_batch: non-finite gradient in %s" % ", ".join(g.names))
            per.append(gr)
        for g, gr in zip(self.groups, per):
            g.e1 += gr.sum(0)
            if isinstance(g, _Diag):
                g.e2 += (gr * g.eps).sum(0)
            else:
                p, n = g.M.shape
                # sum_k Psi_k^T B Phi_k / out and sum_k Psi_k A Phi_k^T / in, as two GEMMs
                g.e2.addmm_(gr.reshape(-1, n).T, g.bphi.reshape(-1, n), alpha=1.0 / p)
                g.e3.addmm_(gr.transpose(0, 1).reshape(p, -1), g.phiat.transpose(0, 1).reshape(p, -1).T,
                            alpha=1.0 / n)
        self.count += K
        self._batch = 0
        return K

    def step(self):
        """Step 4: phi <- UPDATE(phi, eps, g) with the Monte-Carlo averages of
        the samples accumulated since the last step (any number >= 1, not
        necessarily mc_samples), then resets the sums and writes the new means
        into the model.  Raises RuntimeError if nothing was accumulated; on a
        failure of the matrix solve (ValueError / FloatingPointError) the
        posterior is left unchanged."""
        if self.count == 0:
            raise RuntimeError("FooVB.step: no Monte-Carlo sample accumulated")
        k = float(self.count)
        new = []
        for g in self.groups:
            e1 = g.e1 / k
            e2 = g.e2 / k
            if isinstance(g, _Diag):
                s = g.sigma
                mu = g.mu - self.mean_eta * s * s * e1
                h = 0.5 * s * e2
                sigma = s * torch.sqrt(1.0 + h * h) - s * h
                new.append((mu, sigma))
            else:
                V1 = g.A @ g.A.T
                V2 = g.B @ g.B.T
                M = g.M - self.mean_eta * (V2 @ e1 @ V1)
                A = solve_fixed_point(V1, e2)
                if self.trace_correction:
                    # eq. 53 with tau1 = Tr(V1^-1 A A^T) of the new A (Cholesky solve), not n
                    L1 = torch.linalg.cholesky(V1)
                    tau1 = float(torch.linalg.solve_triangular(L1, A, upper=False).pow(2).sum())
                    B = solve_fixed_point(V2 * (g.M.shape[1] / tau1), g.e3 / k)
                else:
                    B = solve_fixed_point(V2, g.e3 / k)
                new.append((M, A, B))
        for g, st in zip(self.groups, new):
            if isinstance(g, _Diag):
                g.mu, g.sigma = st
                g.e1.zero_()
                g.e2.zero_()
            else:
                g.M, g.A, g.B = st
                g.e1.zero_()
                g.e2.zero_()
                g.e3.zero_()
        self.count = 0
        self._sampled = False
        self._batch = 0
        self.use_mean()

    def train_step(self, closure, scale=1.0):
        """One mini-batch of Algorithm 1: mc_samples times sample(), loss =
        closure() (the summed negative log-likelihood of the batch, computed
        with the model), loss.backward(), accumulate(scale); then step().
        Returns the mean of the closure's losses (a float)."""
        total = 0.0
        for _ in range(self.mc_samples):
            self.sample()
            loss = closure()
            loss.backward()
            self.accumulate(scale)
            total += float(loss.detach())
        self.step()
        return total / self.mc_samples

    # -- read-out --------------------------------------------------------------
    def use_mean(self):
        """Writes the posterior means into the model's parameters (how the
        paper tests the diagonal version)."""
        for g in self.groups:
            if isinstance(g, _Diag):
                p = g.params[0]
                with torch.no_grad():
                    p.copy_(g.mu.to(p.dtype))
            else:
                g.write(g.M)

    def stds(self):
        """{parameter name: tensor of each element's marginal posterior std}
        (float64, the parameter's shape).  Matrix groups: sqrt of diag(B B^T)_i
        * diag(A A^T)_j."""
        out = {}
        for g in self.groups:
            if isinstance(g, _Diag):
                out[g.names[0]] = g.sigma.clone()
            else:
                sd = torch.sqrt(torch.outer((g.B * g.B).sum(1), (g.A * g.A).sum(1)))
                w = g.params[0]
                nw = w[0].numel() if w.dim() > 1 else 1
                out[g.names[0]] = sd[:, :nw].reshape(w.shape).clone()
                if len(g.params) > 1:
                    out[g.names[1]] = sd[:, nw].clone()
        return out

    def state_dict(self):
        """The posterior and settings as a dict of tensors and numbers
        (torch.save-able); the generator's state included."""
        st = {"kind": self.kind, "std_init": self.std_init, "alpha": self.alpha, "mc_samples": self.mc_samples,
              "mean_eta": self.mean_eta, "trace_correction": self.trace_correction,
              "generator": self.gen.get_state(), "groups": []}
        for g in self.groups:
            if isinstance(g, _Diag):
                st["groups"].append({"names": list(g.names), "mu": g.mu.clone(), "sigma": g.sigma.clone()})
            else:
                st["groups"].append({"names": list(g.names), "M": g.M.clone(), "A": g.A.clone(), "B": g.B.clone()})
        return st

    def load_state_dict(self, st):
        """Restores a state_dict() of an optimiser over the same model layout
        and writes the means into the model.  Raises ValueError if the kind,
        the parameter names or a shape differ (nothing is changed then)."""
        if st.get("kind") != self.kind or len(st.get("groups", ())) != len(self.groups):
            raise ValueError("FooVB.load_state_dict: kind or number of parameter groups differs")
        keys = ("mu", "sigma") if self.kind == "diagonal" else ("M", "A", "B")
        for g, sg in zip(self.groups, st["groups"]):
            if list(sg["names"]) != g.names:
                raise ValueError("FooVB.load_state_dict: parameters %s, expected %s" % (sg["names"], g.names))
            for k in keys:
                if tuple(sg[k].shape) != tuple(getattr(g, k).shape):
                    raise ValueError("FooVB.load_state_dict: %s of %s has shape %s, expected %s" %
                                     (k, g.names, tuple(sg[k].shape), tuple(getattr(g, k).shape)))
        for g, sg in zip(self.groups, st["groups"]):
            for k in keys:
                setattr(g, k, sg[k].to(self.device, torch.float64).clone())
        self.std_init, self.alpha = float(st["std_init"]), float(st["alpha"])
        self.mc_samples, self.mean_eta = int(st["mc_samples"]), float(st["mean_eta"])
        self.trace_correction = bool(st.get("trace_correction", False))
        self.gen.set_state(st["generator"])
        self.count = 0
        self._sampled = False
        self._batch = 0
        for g in self.groups:
            g.e1.zero_()
            g.e2.zero_()
            if not isinstance(g, _Diag):
                g.e3.zero_()
        self.use_mean()
