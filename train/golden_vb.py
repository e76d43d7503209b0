#!/usr/bin/python3
"""golden_vb.py -- write tests/data/golden_vb.json: VB writes computed by the
trainer's PyTorch loop (train/vbmtrain/vb.py) from fixed random starting
memories, which tests/test_parity.c replays with libvbmem (VBM_INIT_CURRENT)
and compares (posteriors within 1e-6 relative, ELBO terms likewise).

  /usr/bin/python3 train/golden_vb.py [--out tests/data/golden_vb.json]"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from vbmtrain import vb  # noqa: E402


def case(name, kind, T, C, K, H, shift, iterations, seed, s_floor=0.0, sigma_z2=None, u0=None, s2b0=None,
         with_var=True):
    g = torch.Generator()
    g.manual_seed(seed)
    d = torch.float64
    cfg = vb.memory_defaults(kind, C, K, H)
    cfg["shift"] = shift
    cfg["s_floor"] = s_floor
    if sigma_z2 is not None:
        cfg["sigma_z2"] = sigma_z2
    if u0 is not None:
        cfg["u0"] = u0
    if s2b0 is not None:
        cfg["sigma2_b0"] = s2b0
    Hm = 1 if kind == "categorical" else cfg["clusters"]
    # codes: a few well separated groups so that q(s) is far from uniform
    centers = 2.0 * torch.randn(max(Hm, 2), C, generator=g, dtype=d)
    lab = torch.randint(centers.shape[0], (T,), generator=g)
    Z = (centers[lab] + 0.5 * torch.randn(T, C, generator=g, dtype=d))[None]
    V = (0.05 + 0.1 * torch.rand(T, C, generator=g, dtype=d))[None] if with_var else None
    mem = vb.prior_memory(cfg, 1, C, "cpu")
    mem.R = 0.7 * torch.randn(mem.R.shape, generator=g, dtype=d)
    A = torch.randn(Hm, K, K, generator=g, dtype=d)
    mem.U = (0.3 * A @ A.transpose(-1, -2) / K + 0.2 * torch.eye(K, dtype=d))[None]
    if shift:
        mem.mu_b = torch.randn(1, Hm, C, generator=g, dtype=d)
        mem.s2_b = 0.1 + torch.rand(1, Hm, generator=g, dtype=d)
    start = mem
    out, dd = vb.write(cfg, mem, Z, V, iterations)
    t = dd["terms"]
    if kind == "categorical":
        s = torch.ones(T, 1)
        w = dd["theta"][0]
    else:
        s = dd["theta"][0].T                                   # (T,H)
        w = dd["W"][0].permute(2, 0, 1)                        # (T,H,K)

    def flat(x):
        return [float(v) for v in x.reshape(-1)]
    return {
        "name": name, "kind": kind, "T": T, "C": C, "K": K, "H": Hm, "shift": int(shift),
        "sigma_z2": cfg["sigma_z2"], "u0": cfg["u0"], "sigma2_b0": cfg["sigma2_b0"], "s_floor": s_floor,
        "iterations": iterations,
        "codes_mu": flat(Z), "codes_s2": flat(V) if V is not None else None,
        "start": {"R": flat(start.R), "U": flat(start.U), "mu_b": flat(start.mu_b), "s2_b": flat(start.s2_b)},
        "expect": {"R": flat(out.R), "U": flat(out.U), "mu_b": flat(out.mu_b), "s2_b": flat(out.s2_b),
                   "s": flat(s), "w_mu": flat(w),
                   "loglik_codes": float(t["loglik_codes"][0]), "kl_w": float(t["kl_w"][0]),
                   "kl_s": float(t["kl_s"][0]), "kl_M": float(t["kl_M"][0]), "kl_b": float(t["kl_b"][0])},
    }


def case_tree(name, T, C, K, H, G, iterations, seed):
    """A tree memory: G independent mixtures over the code partitions (Theorem 5)."""
    g = torch.Generator()
    g.manual_seed(seed)
    d = torch.float64
    cfg = vb.memory_defaults("tree", C, K, H)
    cfg["groups"] = G
    mcfg = vb.as_mixture(cfg)
    cg = C // G
    centers = 2.0 * torch.randn(H, C, generator=g, dtype=d)
    lab = torch.randint(H, (T,), generator=g)
    Z = (centers[lab] + 0.5 * torch.randn(T, C, generator=g, dtype=d))[None]
    V = (0.05 + 0.1 * torch.rand(T, C, generator=g, dtype=d))[None]
    Zg, Vg = vb.split_groups(Z, G), vb.split_groups(V, G)           # (G, T, cg)
    mem = vb.prior_memory(mcfg, G, cg, "cpu")
    mem.R = 0.7 * torch.randn(mem.R.shape, generator=g, dtype=d)
    A = torch.randn(G, H, K, K, generator=g, dtype=d)
    mem.U = 0.3 * A @ A.transpose(-1, -2) / K + 0.2 * torch.eye(K, dtype=d)
    mem.mu_b = torch.randn(G, H, cg, generator=g, dtype=d)
    mem.s2_b = 0.1 + torch.rand(G, H, generator=g, dtype=d)
    start = mem
    out, dd = vb.write(mcfg, mem, Zg, Vg, iterations)
    t = {k: float(v.sum()) for k, v in dd["terms"].items()}
    s = dd["theta"].permute(2, 0, 1)                                # (T, G, H)
    w = dd["W"].permute(3, 0, 1, 2)                                 # (T, G, H, K)

    def flat(x):
        return [float(v) for v in x.reshape(-1)]
    return {
        "name": name, "kind": "tree", "T": T, "C": C, "K": K, "H": H, "G": G, "shift": 1,
        "sigma_z2": cfg["sigma_z2"], "u0": cfg["u0"], "sigma2_b0": cfg["sigma2_b0"], "s_floor": cfg["s_floor"],
        "iterations": iterations, "codes_mu": flat(Z), "codes_s2": flat(V),
        "start": {"R": flat(start.R), "U": flat(start.U), "mu_b": flat(start.mu_b), "s2_b": flat(start.s2_b)},
        "expect": {"R": flat(out.R), "U": flat(out.U), "mu_b": flat(out.mu_b), "s2_b": flat(out.s2_b),
                   "s": flat(s), "w_mu": flat(w), "loglik_codes": t["loglik_codes"], "kl_w": t["kl_w"],
                   "kl_s": t["kl_s"], "kl_M": t["kl_M"], "kl_b": t["kl_b"]},
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "golden_vb.json"))
    a = p.parse_args()
    cases = [
        case("mixture", "mixture", T=40, C=12, K=4, H=3, shift=True, iterations=6, seed=11, s_floor=1e-6),
        case("mixture_paper", "mixture", T=64, C=20, K=6, H=10, shift=True, iterations=10, seed=12, s_floor=1e-6),
        case("gaussian", "gaussian", T=30, C=10, K=5, H=1, shift=False, iterations=5, seed=13),
        case("gaussian_shift", "gaussian", T=30, C=10, K=5, H=1, shift=True, iterations=5, seed=14),
        case("categorical", "categorical", T=30, C=8, K=6, H=1, shift=False, iterations=5, seed=15),
        case("mixture_exact_codes", "mixture", T=25, C=6, K=3, H=4, shift=True, iterations=4, seed=16,
             with_var=False),
        case("mixture_gram", "mixture", T=16, C=40, K=4, H=3, shift=True, iterations=6, seed=17, s_floor=1e-6),
        # more than 8 rows: the daemon's address step for any K (its sweep for K <= 8 is another);
        # more than 16: its update's K x K products outside the small-product kernels
        case("mixture_rows9", "mixture", T=30, C=14, K=9, H=3, shift=True, iterations=5, seed=19, s_floor=1e-6),
        case("mixture_rows17", "mixture", T=36, C=18, K=17, H=2, shift=True, iterations=4, seed=20, s_floor=1e-6),
        case_tree("tree", T=30, C=12, K=3, H=3, G=2, iterations=5, seed=18),
    ]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"generator": "train/golden_vb.py", "torch": torch.__version__, "cases": cases}, f)
    print("wrote %s (%d cases)" % (a.out, len(cases)))


if __name__ == "__main__":
    main()
