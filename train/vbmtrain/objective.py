"""objective.py -- the episode ELBO of Eq. 5 (Sec. 2.3) for memory models and
for the plain VAE baseline, with the stochastic regularizer of Sec. 3.2.3."""
import math

import torch

from . import vb


def encode(encoder, x):
    """x (B,T,ch,h,w) -> code means Z and variances V, (B,T,C) float64."""
    B, T = x.shape[:2]
    mu, logsig = encoder(x.reshape(B * T, *x.shape[2:]))
    Z = mu.double().reshape(B, T, -1)
    V = torch.exp(2.0 * logsig.double()).reshape(B, T, -1)
    return Z, V


def recon(decoder, x, Z, V, gen):
    """One reparametrised sample z ~ q(z) per frame; log p(x | z) summed per episode."""
    B, T = x.shape[:2]
    eps = torch.randn(Z.shape, generator=gen, dtype=Z.dtype).to(Z.device)
    z = (Z + torch.sqrt(V) * eps).float().reshape(B * T, -1)
    out = decoder(z)
    return decoder.log_prob(out, x.reshape(B * T, *x.shape[2:])).reshape(B, T).sum(1).double()


def regularize(Z, mp, reg, gen):
    """Sec. 3.2.3: mu <- t mu + (1 - t) mu_p with t = 1 - eps + delta s,
    s ~ Beta(alpha, beta), one t per frame."""
    B, T, _ = Z.shape
    s = beta_integer(reg["alpha"], reg["beta"], (B, T, 1), gen).to(Z.device, Z.dtype)
    t = 1.0 - reg["eps"] + reg["delta"] * s
    return t * Z + (1.0 - t) * mp


def beta_integer(a, b, shape, gen):
    """Beta(a, b) draws for integer a, b from the explicit generator:
    X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b), each a sum of -log U."""
    if a != int(a) or b != int(b) or a < 1 or b < 1:
        raise ValueError("regularizer alpha and beta must be positive integers (got %r, %r)" % (a, b))
    u = torch.rand(shape + (int(a) + int(b),), generator=gen, dtype=torch.float64).clamp_min(1e-300)
    g = -torch.log(u)
    x = g[..., :int(a)].sum(-1)
    return x / (x + g[..., int(a):].sum(-1))


def memory_elbo(cfg, encoder, decoder, x, iterations, gen, reg=None, sample_memory=False):
    """ELBO per episode (B,) and a dict of its terms (per episode, summed over
    frames) for a memory model: encode, write by VB (k-means++/random start
    without gradient), optionally regularize the code means, reconstruct."""
    Z, V = encode(encoder, x)
    G = cfg["groups"] if cfg["kind"] == "tree" else 1
    mcfg = vb.as_mixture(cfg)
    Zg, Vg = vb.split_groups(Z, G), vb.split_groups(V, G)
    mem0 = vb.init_memory(mcfg, Zg.detach(), gen)
    mem, d = vb.write(mcfg, mem0, Zg, Vg, iterations)
    Zr = Zg
    if reg is not None and reg["delta"] > 0:
        Zr = regularize(Zg, vb.prior_mean_codes(mcfg, mem, d), reg, gen)
    sampled = vb.sample_memory(mcfg, mem, gen) if sample_memory and cfg["kind"] != "categorical" else None
    if Zr is Zg and sampled is None:
        ll = d["terms"]["loglik_codes"]
    else:
        ll = vb.code_loglik(mcfg, mem, Zr, Vg, d, sampled)
    rec = recon(decoder, x, vb.merge_groups(Zr, G), V, gen)
    t = {k: vb.group_sum(v, G) for k, v in d["terms"].items()}
    ll = vb.group_sum(ll, G)
    elbo = rec + ll - t["kl_w"] - t["kl_s"] - t["kl_M"] - t["kl_b"]
    theta = d["theta"]
    if cfg["kind"] == "categorical":
        usage = (theta.sum(1) >= 1.0).double().sum(-1)
    else:
        usage = (theta.sum(-1) >= 1.0).double().sum(-1)
    usage = vb.group_sum(usage, G) / G  # clusters in use per group
    terms = dict(recon=rec, loglik_codes=ll, kl_w=t["kl_w"], kl_s=t["kl_s"], kl_M=t["kl_M"], kl_b=t["kl_b"],
                 usage=usage)
    return elbo, terms


def vae_elbo(encoder, decoder, x, gen):
    """ELBO per episode (sum over frames) of the plain VAE with p(z) = N(0, I)."""
    Z, V = encode(encoder, x)
    rec = recon(decoder, x, Z, V, gen)
    kl = 0.5 * (V + Z * Z - 1.0 - torch.log(V)).sum((1, 2))
    return rec - kl, dict(recon=rec, kl_z=kl)


def episode_elbo(kind, cfg, encoder, decoder, x, iterations, gen, reg=None, sample_memory=False):
    if kind == "vae":
        return vae_elbo(encoder, decoder, x, gen)
    return memory_elbo(cfg, encoder, decoder, x, iterations, gen, reg, sample_memory)


def nats(v):
    return float(v) if not isinstance(v, torch.Tensor) else float(v.detach().mean())


__all__ = ["episode_elbo", "memory_elbo", "vae_elbo", "encode", "recon", "regularize", "nats", "math"]
