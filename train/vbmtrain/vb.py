"""vb.py -- the memory write as a differentiable mean-field VB loop in PyTorch,
batched over episodes: the same updates, in the same order, as libvbmem
(src/memory/mixture.c, gaussian.c, categorical.c), in float64.

Kinds: 'mixture' (Theorem 4, k-means++ seeded shifts, Sec. 3.2.1), 'gaussian'
(Theorem 1; with shift=True Theorem 3: a one-cluster mixture) and 'categorical'
(Theorem 2). Shapes: B episodes, T frames, C code size, H clusters, K rows."""
import math

import torch

LOG2PI = math.log(2.0 * math.pi)


def memory_defaults(kind, C, K=None, H=None):
    """The defaults of vbm_config_default (include/vbmem/vbmem.h): sizes from the paper, the
    mixture/tree variances from the paper author's code, the 1e-6 q(s) floor vbmem's own."""
    if kind == "mixture":
        K = 6 if K is None else K
        return {"kind": kind, "clusters": 10 if H is None else H, "rows": K, "groups": 1, "shift": True,
                "sigma_z2": 0.2 * K, "u0": 0.4, "sigma2_b0": 0.4 * K, "s_floor": 1e-6}
    if kind == "tree":
        K = 6 if K is None else K
        return {"kind": kind, "clusters": 10 if H is None else H, "rows": K, "groups": 2, "shift": True,
                "sigma_z2": 0.2 * K, "u0": 0.4, "sigma2_b0": 0.4 * K, "s_floor": 1e-6}
    K = 32 if K is None else K
    return {"kind": kind, "clusters": 1, "rows": K, "groups": 1, "shift": False, "sigma_z2": 1.0, "u0": 1.0,
            "sigma2_b0": 1.0, "s_floor": 0.0}


# ---------------------------------------------------------------- tree (Theorem 5)
# The tree memory's VB is that of G independent mixtures, one per partition of
# the code columns (its structure matters only for generation, App. G.1), so a
# batch of B tree episodes is written as B*G mixture episodes of width C/G,
# group-major within an episode like libvbmem's [g*H + h] blocks.

def split_groups(Z, G):
    """(B,T,C) -> (B*G, T, C/G)."""
    if Z is None or G == 1:
        return Z
    B, T, C = Z.shape
    return Z.reshape(B, T, G, C // G).permute(0, 2, 1, 3).reshape(B * G, T, C // G)


def merge_groups(Zg, G):
    """(B*G, T, C/G) -> (B,T,C)."""
    if G == 1:
        return Zg
    BG, T, cg = Zg.shape
    return Zg.reshape(BG // G, G, T, cg).permute(0, 2, 1, 3).reshape(BG // G, T, G * cg)


def group_sum(v, G):
    """(B*G,) per-group values -> (B,) per episode."""
    return v if G == 1 else v.reshape(-1, G).sum(1)


def as_mixture(cfg):
    """The per-group mixture configuration of a tree configuration."""
    return dict(cfg, kind="mixture") if cfg["kind"] == "tree" else cfg


class Memory:
    """q(Omega) for a batch of episodes: R (B,H,K,C), U (B,H,K,K), mu_b (B,H,C),
    s2_b (B,H). The prior is R0 = 0, U0 = u0 I, mu_b0 = 0, s2_b0 = sigma2_b0."""

    def __init__(self, R, U, mu_b, s2_b):
        self.R, self.U, self.mu_b, self.s2_b = R, U, mu_b, s2_b

    def detach(self):
        return Memory(self.R.detach(), self.U.detach(), self.mu_b.detach(), self.s2_b.detach())


def prior_memory(cfg, B, C, device, dtype=torch.float64):
    H = cfg["clusters"] if cfg["kind"] != "categorical" else 1
    K = cfg["rows"]
    R = torch.zeros(B, H, K, C, device=device, dtype=dtype)
    U = cfg["u0"] * torch.eye(K, device=device, dtype=dtype).expand(B, H, K, K).clone()
    mb = torch.zeros(B, H, C, device=device, dtype=dtype)
    s2b = torch.full((B, H), cfg["sigma2_b0"] if cfg["shift"] else 0.0, device=device, dtype=dtype)
    return Memory(R, U, mb, s2b)


def init_memory(cfg, Z, gen):
    """VBM_INIT_AUTO without gradient: means of q(M) drawn from p(M) (App. F.1.2
    'Random'), and for the mixture the shifts seeded by k-means++ over the code
    means (Sec. 3.2.1). Z: (B,T,C) code means. gen: a torch.Generator."""
    B, T, C = Z.shape
    mem = prior_memory(cfg, B, C, Z.device, Z.dtype)
    with torch.no_grad():
        E = torch.randn(mem.R.shape, generator=gen, dtype=Z.dtype).to(Z.device)
        mem.R = math.sqrt(cfg["u0"]) * E
        if cfg["kind"] == "mixture":
            mem.mu_b = kmeanspp(Z.detach(), cfg["clusters"], gen)
    return mem


def kmeanspp(Z, H, gen):
    """k-means++ seeds (Arthur & Vassilvitskii) per episode: (B,H,C)."""
    B, T, C = Z.shape
    if H > T:
        raise ValueError("k-means++ needs at least H = %d codes, got T = %d" % (H, T))
    ar = torch.arange(B, device=Z.device)
    first = torch.randint(T, (B,), generator=gen).to(Z.device)
    seeds = [Z[ar, first]]
    d2 = ((Z - seeds[0][:, None, :]) ** 2).sum(-1)
    for _ in range(1, H):
        w = d2.clamp_min(0).cpu()
        w = torch.where(w.sum(1, keepdim=True) > 0, w, torch.ones_like(w))
        pick = torch.multinomial(w, 1, generator=gen).squeeze(1).to(Z.device)
        seeds.append(Z[ar, pick])
        d2 = torch.minimum(d2, ((Z - seeds[-1][:, None, :]) ** 2).sum(-1))
    return torch.stack(seeds, 1)


def _eye(K, like):
    return torch.eye(K, device=like.device, dtype=like.dtype)


def _chol_inv(A):
    L = torch.linalg.cholesky(A)
    return L, torch.cholesky_inverse(L)


def rows_times_codes(R, Z):
    """R_h Z^T for every cluster of every episode: R (B,H,K,C), Z (B,T,C) ->
    (B,H,K,T), as one (H*K, C) x (C, T) product per episode (not H products
    against a broadcast copy of Z^T: the same sums, one matrix multiply)."""
    B, H, K, C = R.shape
    return (R.reshape(B, H * K, C) @ Z.transpose(1, 2)).reshape(B, H, K, Z.shape[1])


def weights_times_codes(Wt, Z):
    """Wt_h Z for every cluster of every episode: Wt (B,H,K,T), Z (B,T,C) ->
    (B,H,K,C), as one (H*K, T) x (T, C) product per episode."""
    B, H, K, T = Wt.shape
    return (Wt.reshape(B, H * K, T) @ Z).reshape(B, H, K, Z.shape[-1])


def _logdet_chol(L):
    return 2.0 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)


def code_entropy(V):
    """Sum over dimensions with positive variance of the Gaussian entropy, per episode."""
    pos = V > 0
    ent = torch.where(pos, 0.5 * (LOG2PI + 1.0 + torch.log(torch.where(pos, V, torch.ones_like(V)))),
                      torch.zeros_like(V))
    return ent.sum((1, 2))


# ---------------------------------------------------------------- mixture / gaussian

def mix_address(cfg, mem, Z, V):
    """q(y) given q(Omega) (mixgroup_address): returns a dict with theta (B,H,T),
    W (B,H,K,T) address means, Sw (B,H,K,K), E (B,H,T) expected squared errors,
    LW (B,H,T) KL of q(w|s) and the ELBO terms per episode."""
    s2, shift = cfg["sigma_z2"], cfg["shift"]
    R, U, mb, s2b = mem.R, mem.U, mem.mu_b, mem.s2_b
    B, H, K, C = R.shape
    S = R @ R.transpose(-1, -2) + C * U
    L, Sw = _chol_inv(_eye(K, R) + S / s2)
    logdetSw = -_logdet_chol(L)
    P = rows_times_codes(R, Z)                            # (B,H,K,T)
    Rmb = (R @ mb[..., None])                             # (B,H,K,1)
    W = Sw @ (P - Rmb) / s2
    d = dict(W=W, Sw=Sw, logdetSw=logdetSw, S=S)
    E = expected_sqerr(cfg, mem, Z, V, d, (S, P, Rmb))
    lwh = 0.5 * (torch.diagonal(Sw, dim1=-2, dim2=-1).sum(-1) - K - logdetSw)
    LW = lwh[..., None] + 0.5 * (W * W).sum(2)
    logits = -E / (2 * s2) - LW
    theta = torch.softmax(logits, dim=1)
    fl = cfg.get("s_floor", 0.0)
    if fl > 0 and H > 1:
        theta = (1 - fl) * theta + fl / H
    d.update(theta=theta, E=E, LW=LW)
    d["terms"] = mix_terms(cfg, mem, Z, V, d)
    return d


def expected_sqerr(cfg, mem, Z, V, d, products=None):
    """E_{q(z_t) q(w_t|s=h) q(M_h) q(b_h)} |z_t - M_h^T w - b_h|^2 for all h, t,
    with the address posteriors in d (W, Sw): (B,H,T). Works with a sampled
    memory too (U = 0, s2_b = 0, App. D.2). products: (S, P, Rmb) of this
    memory and these codes when the caller has them (mix_address), else computed."""
    R, U, mb, s2b = mem.R, mem.U, mem.mu_b, mem.s2_b
    C = R.shape[-1]
    W, Sw = d["W"], d["Sw"]
    if products is None:
        S = R @ R.transpose(-1, -2) + C * U
        P = rows_times_codes(R, Z)
        Rmb = R @ mb[..., None]
    else:
        S, P, Rmb = products
    zb = mb @ Z.transpose(1, 2)                           # (B,H,T)
    znorm = (Z * Z).sum(-1)[:, None, :]
    vsum = (V.sum(-1) if V is not None else torch.zeros_like(Z[..., 0]))[:, None, :]
    eh = (mb * mb).sum(-1) + C * s2b + (S * Sw).sum((-1, -2))
    q = (W * (S @ W)).sum(2)
    rz = (W * P).sum(2)
    mrb = (W * Rmb).sum(2)
    return znorm + vsum + eh[..., None] - 2 * zb + q - 2 * rz + 2 * mrb


def kl_matrix_normal(R, U, u0):
    """KL(MN(R, U, I) || MN(0, u0 I, I)) per block: (...)."""
    K, C = R.shape[-2], R.shape[-1]
    L = torch.linalg.cholesky(U)
    logdetU = _logdet_chol(L)
    tr = torch.diagonal(U, dim1=-2, dim2=-1).sum(-1) / u0
    quad = (R * R).sum((-1, -2)) / u0
    return 0.5 * (C * tr + quad - K * C - C * logdetU + C * K * math.log(u0))


def kl_iso(mb, s2b, s20):
    C = mb.shape[-1]
    return 0.5 * (C * s2b / s20 + (mb * mb).sum(-1) / s20 - C - C * torch.log(s2b / s20))


def mix_terms(cfg, mem, Z, V, d):
    """ELBO terms per episode (vbm_elbo): loglik_codes, kl_w, kl_s, kl_M, kl_b."""
    s2 = cfg["sigma_z2"]
    C = Z.shape[-1]
    H = mem.R.shape[1]
    theta = d["theta"]
    loglik = (theta * (-0.5 * C * math.log(2 * math.pi * s2) - d["E"] / (2 * s2))).sum((1, 2))
    if V is not None:
        loglik = loglik + code_entropy(V)
    klw = (theta * d["LW"]).sum((1, 2))
    kls = torch.xlogy(theta, H * theta).sum((1, 2)) if H > 1 else torch.zeros_like(klw)
    klM = kl_matrix_normal(mem.R, mem.U, cfg["u0"]).sum(1)
    klb = kl_iso(mem.mu_b, mem.s2_b, cfg["sigma2_b0"]).sum(1) if cfg["shift"] else torch.zeros_like(klw)
    return dict(loglik_codes=loglik, kl_w=klw, kl_s=kls, kl_M=klM, kl_b=klb,
                total=loglik - klw - kls - klM - klb)


def mix_update(cfg, mem, Z, d):
    """q(b_h) (Eq. 198-199) then q(M_h) (Eq. 206-207) from q(y) in d."""
    s2, shift = cfg["sigma_z2"], cfg["shift"]
    R = mem.R
    B, H, K, C = R.shape
    theta, W, Sw = d["theta"], d["W"], d["Sw"]
    N = theta.sum(-1)                                     # (B,H)
    Wt = W * theta[:, :, None, :]
    sw = Wt.sum(-1)                                       # (B,H,K)
    mb, s2b = mem.mu_b, mem.s2_b
    if shift:
        s20 = cfg["sigma2_b0"]
        sz = theta @ Z                                    # (B,H,C)
        sb = 1.0 / (1.0 / s20 + N / s2)
        rw = (sw[..., None] * R).sum(2)                   # (B,H,C) = R^T sw
        mb = sb[..., None] * ((sz - rw) / s2)
        s2b = sb
    Y = weights_times_codes(Wt, Z)                        # (B,H,K,C)
    P0 = _eye(K, R) / cfg["u0"]
    Q = Wt @ W.transpose(-1, -2) / s2 + P0 + N[..., None, None] * Sw / s2
    Q = 0.5 * (Q + Q.transpose(-1, -2))
    rhs = (Y - (sw[..., None] * mb[:, :, None, :] if shift else 0.0)) / s2
    L = torch.linalg.cholesky(Q)
    Rn = torch.cholesky_solve(rhs, L)
    Un = torch.cholesky_inverse(L)
    return Memory(Rn, Un, mb, s2b)


# ---------------------------------------------------------------- categorical

def cat_address(cfg, mem, Z, V):
    s2 = cfg["sigma_z2"]
    R, U = mem.R[:, 0], mem.U[:, 0]                       # (B,K,C), (B,K,K)
    C = R.shape[-1]
    diagS = (R * R).sum(-1) + C * torch.diagonal(U, dim1=-2, dim2=-1)   # (B,K)
    P = Z @ R.transpose(-1, -2)                           # (B,T,K)
    theta = torch.softmax((P - 0.5 * diagS[:, None, :]) / s2, dim=-1)
    znorm = (Z * Z).sum(-1)
    vsum = V.sum(-1) if V is not None else torch.zeros_like(znorm)
    e = znorm + vsum + (theta * (diagS[:, None, :] - 2 * P)).sum(-1)
    loglik = (-0.5 * C * math.log(2 * math.pi * s2) - e / (2 * s2)).sum(-1)
    if V is not None:
        loglik = loglik + code_entropy(V)
    K = R.shape[1]
    klw = torch.xlogy(theta, K * theta).sum((1, 2))
    klM = kl_matrix_normal(R, U, cfg["u0"])
    z = torch.zeros_like(klw)
    terms = dict(loglik_codes=loglik, kl_w=klw, kl_s=z, kl_M=klM, kl_b=z, total=loglik - klw - klM)
    return dict(theta=theta, e=e, terms=terms)


def cat_update(cfg, mem, Z, d):
    s2 = cfg["sigma_z2"]
    theta = d["theta"]
    K = theta.shape[-1]
    P0 = _eye(K, Z) / cfg["u0"]
    Q = P0 + torch.diag_embed(theta.sum(1) / s2)
    rhs = theta.transpose(1, 2) @ Z / s2                  # (B,K,C)
    L = torch.linalg.cholesky(Q)
    R = torch.cholesky_solve(rhs, L)
    U = torch.cholesky_inverse(L)
    return Memory(R[:, None], U[:, None], mem.mu_b, mem.s2_b)


# ---------------------------------------------------------------- driver

def address(cfg, mem, Z, V):
    return cat_address(cfg, mem, Z, V) if cfg["kind"] == "categorical" else mix_address(cfg, mem, Z, V)


def update(cfg, mem, Z, d):
    return cat_update(cfg, mem, Z, d) if cfg["kind"] == "categorical" else mix_update(cfg, mem, Z, d)


def write(cfg, mem, Z, V, iterations):
    """Batch VB from the starting memory: `iterations` updates of q(Omega), each
    after an address step, then a final address step (vb_fit in memory.c).
    Returns (memory, final address dict with its ELBO terms)."""
    d = address(cfg, mem, Z, V)
    for _ in range(iterations):
        mem = update(cfg, mem, Z, d)
        d = address(cfg, mem, Z, V)
    return mem, d


def prior_mean_codes(cfg, mem, d):
    """E_{q(Omega) q(y_t)}[mean of p(z_t | y_t, Omega)] per frame: (B,T,C)."""
    if cfg["kind"] == "categorical":
        return d["theta"] @ mem.R[:, 0]
    th = d["theta"]                                       # (B,H,T)
    m = torch.einsum("bht,bhkt,bhkc->btc", th, d["W"], mem.R)
    return m + torch.einsum("bht,bhc->btc", th, mem.mu_b)


def sample_memory(cfg, mem, gen):
    """Omega ~ q(Omega) by reparametrisation (App. D.2): M = R + chol(U) E,
    b = mu_b + sqrt(s2_b) e. Returned as a Memory with zero covariances."""
    E = torch.randn(mem.R.shape, generator=gen, dtype=mem.R.dtype).to(mem.R.device)
    L = torch.linalg.cholesky(mem.U)
    M = mem.R + L @ E
    e = torch.randn(mem.mu_b.shape, generator=gen, dtype=mem.R.dtype).to(mem.R.device)
    b = mem.mu_b + torch.sqrt(mem.s2_b)[..., None] * e
    return Memory(M, torch.zeros_like(mem.U), b, torch.zeros_like(mem.s2_b))


def code_loglik(cfg, mem, Z, V, d, sampled=None):
    """-E[KL(q(z_t) || p(z_t | y_t, Omega))] summed over frames, per episode, for
    codes Z (possibly regularised) with q(y) fixed in d; with `sampled` (a memory
    drawn by sample_memory) the expectation over q(Omega) is the one-sample
    reparametrised estimate, otherwise exact."""
    s2 = cfg["sigma_z2"]
    C = Z.shape[-1]
    use = sampled if sampled is not None else mem
    if cfg["kind"] == "categorical":
        R, U = use.R[:, 0], use.U[:, 0]
        diagS = (R * R).sum(-1) + C * torch.diagonal(U, dim1=-2, dim2=-1)
        P = Z @ R.transpose(-1, -2)
        e = (Z * Z).sum(-1) + (V.sum(-1) if V is not None else 0) + (d["theta"] * (diagS[:, None] - 2 * P)).sum(-1)
        ll = (-0.5 * C * math.log(2 * math.pi * s2) - e / (2 * s2)).sum(-1)
    else:
        E = expected_sqerr(cfg, use, Z, V, d)
        ll = (d["theta"] * (-0.5 * C * math.log(2 * math.pi * s2) - E / (2 * s2))).sum((1, 2))
    if V is not None:
        ll = ll + code_entropy(V)
    return ll
