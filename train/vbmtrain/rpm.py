"""rpm.py -- the time-series recognition-parametrised model (RPM) of seed 004:
bouncing-ball data, per-row Gaussian recognition factors, the RBF GP prior,
the Gaussian posterior, the free energy of the seed's Fig. 2 frameworks, and
the normalised MSE of posterior means against the true latents.

Notation (one latent dimension, T time steps, J rows, N training sequences):
  factor   f_j(z_t | x_jt) = N(z_t; a/P, 1/P) with natural parameters
           (a_jt, P_jt), P_jt = 1/v0 + softplus(r_jt), (a, r) = row net j (x_jt)
  prior    p(Z) = N(0, K), K_tt' = s2 exp(-(t-t')^2 / (2 ell^2)) + jitter [t=t'],
           marginal variance v0 = s2 + jitter
  posterior in the family prior x diagonal Gaussian term:
           Lambda_q = K^-1 + diag(d),  Lambda_q mu_q = h
  minimalist amortized (eta_q = eta_0 - J eta_0^unc + sum_j eta_j^unc):
           h_t = sum_j a_jt,  d_t = sum_j softplus(r_jt)
The normaliser F_jt(z) = (1/N) sum_n f_j(z | x^(n)_jt) is the mixture over
the training set; -E_q log F_jt is bounded with h_jt(z) = exp(alpha z - beta z^2/2)
(inner variational parameters eta~_jt = (alpha, beta)).
Everything from the nets' outputs on is double precision."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

LOG2PI = math.log(2.0 * math.pi)

# the seed's Fig. 2: (q parametrisation, inner parametrisation) -> its name
FRAMEWORKS = {
    "aistats": ("np", "np"),
    "costly-vae": ("vae", "np"),
    "inference-amortized": ("analytic", "np"),
    "stupid": ("np", "param"),
    "full-vae": ("vae", "param"),
    "luxury-amortized": ("analytic", "param"),
    "internal": ("np", "hugo"),
    "cheap-vae": ("vae", "hugo"),
    "minimalist-amortized": ("analytic", "hugo"),
}


# ---------------------------------------------------------------- data

def bounce_path(T, J, g):
    """Ball centre (rows, in [0, J-1]) over T steps: start uniform, speed
    uniform in [0.25, 0.6] rows/step with a random sign, elastic reflection at
    rows 0 and J-1. Returns float64 (T,)."""
    lo, hi = 0.0, float(J - 1)
    pos = lo + (hi - lo) * float(torch.rand((), generator=g, dtype=torch.float64))
    v = 0.25 + 0.35 * float(torch.rand((), generator=g, dtype=torch.float64))
    if float(torch.rand((), generator=g)) < 0.5:
        v = -v
    z = torch.empty(T, dtype=torch.float64)
    for t in range(T):
        z[t] = pos
        pos += v
        if pos > hi:
            pos, v = 2 * hi - pos, -v
        if pos < lo:
            pos, v = 2 * lo - pos, -v
    return z


def make_balls(kind, N, J=10, T=50, seed=0):
    """N bouncing-ball sequences X (N, J, T) float32 and their true latents
    Z (N, T) float64 (ball centre in row units).
    kind "poisson": x_jt ~ Poisson(0.3 + 6 exp(-(j - z_t)^2 / 2)) (counts).
    kind "textured": x_jt = 2 cos(pi (j - z_t)) exp(-(j - z_t)^2 / 4.5) + 0.3 eps,
    a striped ball whose pixels are bright at its centre, dark one row off and
    near the background level in between, so one pixel alone is ambiguous.
    Raises ValueError for an unknown kind or non-positive sizes."""
    if kind not in ("poisson", "textured"):
        raise ValueError("kind must be 'poisson' or 'textured', not %r" % (kind,))
    if N < 1 or J < 2 or T < 2:
        raise ValueError("need N >= 1, J >= 2, T >= 2")
    g = torch.Generator()
    g.manual_seed(seed)
    Z = torch.stack([bounce_path(T, J, g) for _ in range(N)])
    rows = torch.arange(J, dtype=torch.float64)[None, :, None]
    dist = rows - Z[:, None, :]
    if kind == "poisson":
        rate = 0.3 + 6.0 * torch.exp(-0.5 * dist ** 2)
        X = torch.poisson(rate, generator=g)
    else:
        X = 2.0 * torch.cos(math.pi * dist) * torch.exp(-dist ** 2 / 4.5)
        X = X + 0.3 * torch.randn(X.shape, generator=g, dtype=torch.float64)
    return X.float(), Z


# ---------------------------------------------------------------- networks

class RowNets(nn.Module):
    """J independent 3-layer ReLU nets, one per row, applied to each scalar
    x_jt (a 1x1 convolution along time): x (B, J, T) -> (B, J, T, out).
    Row j is conv2d(1->H, k1), relu, conv2d(H->H, k1), relu, conv2d(H->out, k1)
    on the 1 x 1 x T image of row j."""

    def __init__(self, J, hidden=20, out=2, gen=None):
        super().__init__()
        self.J, self.hidden, self.out = J, hidden, out
        self.W1 = nn.Parameter(torch.empty(J, hidden, 1))
        self.b1 = nn.Parameter(torch.zeros(J, hidden))
        self.W2 = nn.Parameter(torch.empty(J, hidden, hidden))
        self.b2 = nn.Parameter(torch.zeros(J, hidden))
        self.W3 = nn.Parameter(torch.empty(J, out, hidden))
        self.b3 = nn.Parameter(torch.zeros(J, out))
        with torch.no_grad():
            for W in (self.W1, self.W2, self.W3):
                bound = math.sqrt(6.0 / (W.shape[1] + W.shape[2]))
                W.copy_((torch.rand(W.shape, generator=gen) * 2 - 1) * bound)

    def forward(self, x):
        h = torch.relu(torch.einsum("jhi,bjt->bjth", self.W1, x) + self.b1[None, :, None, :])
        h = torch.relu(torch.einsum("jkh,bjth->bjtk", self.W2, h) + self.b2[None, :, None, :])
        return torch.einsum("joh,bjth->bjto", self.W3, h) + self.b3[None, :, None, :]


class ColNet(nn.Module):
    """A 3-layer ReLU conv net along time on the whole J x T observation (the
    J rows are its input channels), kernel `kernel` (odd) with zero 'same'
    padding, shared over time: x (B, J, T) -> (B, T, out). Used for the VAE's
    q_psi(Z | X) and the inner parameters eta~_psi(X), which may look at all of
    X (kernel 5: each output sees 13 time steps)."""

    def __init__(self, J, hidden=20, out=2, gen=None, kernel=5):
        super().__init__()
        self.kernel = kernel
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for cin, cout in ((J, hidden), (hidden, hidden), (hidden, out)):
            bound = math.sqrt(6.0 / ((cin + cout) * kernel))
            self.weights.append(nn.Parameter((torch.rand(cout, cin, kernel, generator=gen) * 2 - 1) * bound))
            self.biases.append(nn.Parameter(torch.zeros(cout)))

    def forward(self, x):
        h = x
        for i, (W, b) in enumerate(zip(self.weights, self.biases)):
            h = F.conv1d(h, W, b, padding=self.kernel // 2)
            if i < 2:
                h = torch.relu(h)
        return h.transpose(1, 2)


# ---------------------------------------------------------------- GP prior, posterior

def rbf_kernel(T, lengthscale, variance=1.0, jitter=1e-6):
    """K (T, T) float64 over integer time steps 0..T-1:
    variance exp(-(t-t')^2 / (2 lengthscale^2)) + jitter on the diagonal.
    lengthscale may be a tensor (gradients flow)."""
    t = torch.arange(T, dtype=torch.float64)
    d2 = (t[:, None] - t[None, :]) ** 2
    ell = torch.as_tensor(lengthscale, dtype=torch.float64)
    return variance * torch.exp(-0.5 * d2 / ell ** 2) + jitter * torch.eye(T, dtype=torch.float64)


def gp_posterior(K, h, d):
    """Gaussian q(Z) with precision K^-1 + diag(d) and Lambda mu = h, computed
    without inverting K: B = I + S K S (S = diag(sqrt d)), L = chol(B),
    V = L^-1 S K (the one triangular solve), mu = K h - V^T V h,
    var_t = K_tt - |V_:t|^2. Since V S = L^-1 (B - I) = L^T - L^-1, the
    inverse factor is L^-1 = L^T - V S (no second solve), giving
    w = K^-1 mu = h - S L^-T V h and tr B^-1 = |L^-1|_F^2.
    K (T, T); h, d (Bt, T) with d >= 0. Returns dict mu, var (Bt, T) and
    kl = KL(q || N(0, K)) = (tr B^-1 + mu^T w - T + log|B|) / 2 (Bt,).
    Raises torch's error if B is not positive definite (only for d < 0)."""
    T = K.shape[0]
    s = torch.sqrt(d)
    SK = s[:, :, None] * K[None]
    Bm = torch.eye(T, dtype=K.dtype) + SK * s[:, None, :]
    L = torch.linalg.cholesky(Bm)
    V = torch.linalg.solve_triangular(L, SK, upper=False)
    Vh = (V @ h[..., None])[..., 0]
    mu = h @ K - (V.transpose(1, 2) @ Vh[..., None])[..., 0]
    var = torch.diagonal(K) - (V ** 2).sum(1)
    Linv = L.transpose(1, 2) - V * s[:, None, :]
    w = h - s * (Linv.transpose(1, 2) @ Vh[..., None])[..., 0]
    trBinv = (Linv ** 2).sum((1, 2))
    logdetB = 2.0 * torch.log(torch.diagonal(L, dim1=1, dim2=2)).sum(1)
    kl = 0.5 * (trBinv + (mu * w).sum(1) - T + logdetB)
    return {"mu": mu, "var": var, "kl": kl}


def log_partition(a, P):
    """A(a, P) = a^2 / (2P) - log(P)/2 + log(2 pi)/2, the log normaliser of
    exp(a z - P z^2 / 2)."""
    return 0.5 * a ** 2 / P - 0.5 * torch.log(P) + 0.5 * LOG2PI


def nmse(mu, z):
    """Normalised MSE of posterior means mu against true latents z (any equal
    shapes) after the best affine map z ~ c mu + b (least squares over all
    entries; the RPM latent is identified only up to such a map):
    mean((c mu + b - z)^2) / var(z), i.e. 1 - R^2. 0 is perfect, 1 is chance."""
    m = mu.reshape(-1).double()
    y = z.reshape(-1).double()
    A = torch.stack([m, torch.ones_like(m)], 1)
    coef = torch.linalg.lstsq(A, y[:, None]).solution[:, 0]
    resid = A @ coef - y
    return float((resid ** 2).mean() / y.var(unbiased=False))


# ---------------------------------------------------------------- the model

class TimeSeriesRPM(nn.Module):
    """Time-series RPM with one latent dimension and one of the nine training
    frameworks of the seed's Fig. 2 (see FRAMEWORKS). N_train is needed for the
    non-parametric (per-datum) parameters. Parameters: rows (theta_j, the
    factors), log_ell (the GP lengthscale, theta), qnet (psi, 'vae'), inner
    (psi_j, 'param'), q_np / inner_np (per-datum, 'np')."""

    def __init__(self, framework, J=10, T=50, hidden=20, N_train=1, lengthscale=3.0, variance=1.0,
                 jitter=1e-6, seed=0):
        super().__init__()
        if framework not in FRAMEWORKS:
            raise ValueError("unknown framework %r (one of %s)" % (framework, ", ".join(FRAMEWORKS)))
        g = torch.Generator()
        g.manual_seed(seed)
        self.framework = framework
        self.q_mode, self.inner_mode = FRAMEWORKS[framework]
        self.J, self.T, self.hidden = J, T, hidden
        self.variance, self.jitter = variance, jitter
        self.rows = RowNets(J, hidden, 2, g)
        self.log_ell = nn.Parameter(torch.tensor(math.log(lengthscale), dtype=torch.float64))
        if self.q_mode == "vae":
            self.qnet = ColNet(J, hidden, 2, g)
        if self.q_mode == "np":
            self.q_np = nn.Parameter(0.1 * torch.randn(N_train, T, 2, generator=g, dtype=torch.float64))
        if self.inner_mode == "param":
            self.inner = ColNet(J, hidden, 2 * J, g)
        if self.inner_mode == "np":
            self.inner_np = nn.Parameter(0.1 * torch.randn(N_train, J, T, 2, generator=g, dtype=torch.float64))

    def arch(self):
        return {"framework": self.framework, "J": self.J, "T": self.T, "hidden": self.hidden,
                "latent_dim": 1, "q_mode": self.q_mode, "inner_mode": self.inner_mode}

    def gp(self):
        return {"variance": self.variance, "lengthscale": float(self.log_ell.exp()), "jitter": self.jitter,
                "time": "integer steps 0..T-1"}

    def v0(self):
        return self.variance + self.jitter

    def factors(self, X):
        """(a, P) (B, J, T) float64 natural parameters of f_j(z_t | x_jt)."""
        o = self.rows(X).double()
        return o[..., 0], 1.0 / self.v0() + F.softplus(o[..., 1])

    def kernel(self):
        return rbf_kernel(self.T, self.log_ell.exp(), self.variance, self.jitter)

    def q_params(self, X, idx, a, P):
        """(h, d) (B, T) of q(Z | X) for the batch X whose training indices
        are idx (used only by 'np')."""
        if self.q_mode == "analytic":
            return a.sum(1), (P - 1.0 / self.v0()).sum(1)
        if self.q_mode == "vae":
            o = self.qnet(X).double()
        else:
            o = self.q_np[idx]
        return o[..., 0], F.softplus(o[..., 1])

    def posterior(self, X, idx=None):
        """dict mu, var, kl of q(Z | X) (B, T) and the factors a, P."""
        a, P = self.factors(X)
        h, d = self.q_params(X, idx, a, P)
        post = gp_posterior(self.kernel(), h, d)
        post["a"], post["P"] = a, P
        return post

    def free_energy(self, X, idx, X_train):
        """Lower bound on log p(X) (up to sum_jt log p_jt(x_jt)) per sequence,
        (B,) float64: -KL(q||p) + sum_jt E_q log f_jt
        + sum_jt [H[q_t] - E_q log h_jt - log int F_jt / h_jt]
        where F_jt is the mixture of f_j(. | x^(n)_jt) over X_train (N, J, T)."""
        post = self.posterior(X, idx)
        mu, var, a, P = post["mu"], post["var"], post["a"], post["P"]
        m2 = (mu ** 2 + var)[:, None, :]  # (B, 1, T)
        e_logf = (a * mu[:, None, :] - 0.5 * P * m2 - log_partition(a, P)).sum((1, 2))
        v0inv = 1.0 / self.v0()
        if self.inner_mode == "hugo":
            alpha = (-mu / var)[:, None, :].expand_as(a)
            beta = (v0inv - 1.0 / var)[:, None, :].expand_as(a)
        else:
            if self.inner_mode == "param":
                o = self.inner(X).double().reshape(X.shape[0], self.T, self.J, 2).transpose(1, 2)
            else:
                o = self.inner_np[idx]
            alpha, beta = o[..., 0], v0inv - F.softplus(o[..., 1]) - 1e-4
        an, Pn = self.factors(X_train)  # (N, J, T)
        An = log_partition(an, Pn)
        # the (B, N, J, T) tensor dominates the cost: single precision for it alone
        f32 = torch.float32
        da = an.to(f32)[None] - alpha.to(f32)[:, None]
        dP = Pn.to(f32)[None] - beta.to(f32)[:, None]
        inner = 0.5 * da * da / dP - 0.5 * torch.log(dP) - (An.to(f32) - 0.5 * LOG2PI)[None]
        log_int = torch.logsumexp(inner, 1).double() - math.log(X_train.shape[0])
        e_logh = alpha * mu[:, None, :] - 0.5 * beta * m2
        ent_t = 0.5 * (torch.log(var) + 1.0 + LOG2PI)[:, None, :]
        f_norm = (ent_t - e_logh - log_int).sum((1, 2))
        return -post["kl"] + e_logf + f_norm


# ---------------------------------------------------------------- training

def train(model, X, steps, batch, lr=3e-3, seed=0, log_every=0, X_test=None):
    """Adam on the mean negative free energy per sequence and time step over
    random minibatches of X (N, J, T) (drawn with an explicit generator).
    Returns the list of (step, train loss) and, if X_test is given and the
    framework is fully amortised, (step, test loss) every log_every steps."""
    g = torch.Generator()
    g.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    N = X.shape[0]
    B = min(batch, N)
    hist, test_hist = [], []
    amortised = model.q_mode != "np" and model.inner_mode != "np"
    for step in range(steps):
        idx = torch.randperm(N, generator=g)[:B]
        loss = -model.free_energy(X[idx], idx, X).mean() / model.T
        opt.zero_grad()
        loss.backward()
        opt.step()
        hist.append((step, float(loss)))
        if log_every and X_test is not None and amortised and (step % log_every == 0 or step == steps - 1):
            with torch.no_grad():
                tl = -model.free_energy(X_test, None, X).mean() / model.T
            test_hist.append((step, float(tl)))
    return hist, test_hist


def _softplus_inv(y):
    return y + torch.log(-torch.expm1(-y))


def match_targets(model, X):
    """The 'minimalist amortized' values of the recognition model and inner
    parameters for X (the seed's initialisation iii): q's (h, d) = (sum_j a_jt,
    sum_j softplus r_jt) and Hugo's eta~_jt = eta_0 - eta_q(z_t), i.e.
    alpha = -mu_t / var_t and softplus(raw) = 1/var_t - 1e-4 (beta = 1/v0 - 1/var_t)."""
    with torch.no_grad():
        a, P = model.factors(X)
        h, d = a.sum(1), (P - 1.0 / model.v0()).sum(1)
        post = gp_posterior(model.kernel(), h, d)
        alpha = (-post["mu"] / post["var"])[:, None, :].expand_as(a)
        sp = (1.0 / post["var"] - 1e-4)[:, None, :].expand_as(a)
    return h, d, alpha, sp


def pretrain_match(model, X, steps=500, lr=1e-2):
    """Initialisation (iii) of the seed: with theta fixed, fit psi (the VAE's q
    net) and psi_j (the inner nets) to match_targets by mean-square error on the
    natural parameters (Adam, full batch X (N, J, T), `steps` steps); per-datum
    parameters are set to the targets exactly. A no-op for the minimalist
    framework (nothing to match). Returns the final matching loss (0.0 if no net)."""
    h, d, alpha, sp = match_targets(model, X)
    with torch.no_grad():
        if model.q_mode == "np":
            model.q_np[..., 0] = h
            model.q_np[..., 1] = _softplus_inv(d.clamp_min(1e-6))
        if model.inner_mode == "np":
            model.inner_np[..., 0] = alpha
            model.inner_np[..., 1] = _softplus_inv(sp)
    params = []
    if model.q_mode == "vae":
        params += list(model.qnet.parameters())
    if model.inner_mode == "param":
        params += list(model.inner.parameters())
    if not params:
        return 0.0
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(steps):
        loss = torch.zeros((), dtype=torch.float64)
        if model.q_mode == "vae":
            o = model.qnet(X).double()
            loss = loss + ((o[..., 0] - h) ** 2).mean() + ((F.softplus(o[..., 1]) - d) ** 2).mean()
        if model.inner_mode == "param":
            o = model.inner(X).double().reshape(X.shape[0], model.T, model.J, 2).transpose(1, 2)
            loss = loss + ((o[..., 0] - alpha) ** 2).mean() + ((F.softplus(o[..., 1]) - sp) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss)


def evaluate(model, X, Z, idx=None):
    """Posterior means/variances on X and their nMSE against Z."""
    with torch.no_grad():
        post = model.posterior(X, idx)
    return {"mu": post["mu"], "var": post["var"], "nmse": nmse(post["mu"], Z)}


def export_layers(model):
    """The recognition nets as model-format layer lists (proto/model-format.md,
    all conv2d 1x1 + relu) with float32 tensors, for serving:
    {"rows": [layers of row j, input [1, 1, T], output [2, 1, T]],
     "q": layers of the column net (input [J, 1, T], output [2, 1, T]) or None,
     "tensors": {name: tensor}}. Row j's tensors are named row<j>.l<k>."""
    H = model.hidden
    tensors, rows = {}, []
    R = model.rows
    for j in range(model.J):
        layers = []
        for k, (W, b, cin, cout) in enumerate(((R.W1, R.b1, 1, H), (R.W2, R.b2, H, H), (R.W3, R.b3, H, 2))):
            name = "row%d.l%d" % (j, k)
            tensors[name + ".weight"] = W[j].detach().float().reshape(cout, cin, 1, 1).clone()
            tensors[name + ".bias"] = b[j].detach().float().clone()
            layers.append({"type": "conv2d", "name": name, "in": cin, "out": cout, "kernel": 1, "stride": 1,
                           "padding": "valid"})
            if k < 2:
                layers.append({"type": "relu"})
        rows.append(layers)
    q = None
    if model.q_mode == "vae":
        # conv1d along time as a k x k conv2d on the J x 1 x T image: only the middle kernel
        # row meets data ('same' padding adds k//2 zero rows above and below)
        q = []
        k = model.qnet.kernel
        for i, (W, b) in enumerate(zip(model.qnet.weights, model.qnet.biases)):
            name = "q.l%d" % i
            cout, cin = W.shape[0], W.shape[1]
            W2 = torch.zeros(cout, cin, k, k)
            W2[:, :, k // 2, :] = W.detach().float()
            tensors[name + ".weight"] = W2
            tensors[name + ".bias"] = b.detach().float().clone()
            q.append({"type": "conv2d", "name": name, "in": cin, "out": cout, "kernel": k, "stride": 1,
                      "padding": "same"})
            if i < 2:
                q.append({"type": "relu"})
    return {"rows": rows, "q": q, "tensors": tensors}


def checkpoint(model, extra=None):
    """The dict saved with torch.save: state_dict, arch, gp, layers (see
    export_layers) and any extra entries (dataset, seeds, nmse)."""
    ck = {"state_dict": model.state_dict(), "arch": model.arch(), "gp": model.gp(),
          "layers": export_layers(model)}
    ck.update(extra or {})
    return ck
