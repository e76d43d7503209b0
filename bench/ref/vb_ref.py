#!/usr/bin/python3
"""NumPy (float64) reference implementation of two mean-field VB memory writers.

Used only as a speed / ELBO comparator for the C library.

  * ``mixture``  : H clusters, each with a linear memory R_h (K x C), row
                   covariance U_h (K x K), an isotropic shift b_h ~ N(mu_b_h, s_b_h I),
                   uniform cluster prior p(s) = 1/H.
  * ``gaussian`` : a single memory (H = 1) without shift.

Everything is batched over clusters (stacked (H,K,K), (H,K,C), (H,K,T) arrays)
and over frames; the only Python loops are over VB iterations and over the
(inherently sequential) k-means++ seeding.

Layout conventions (internal):
  Z      (T, C)   codes (exact means, variance 0)
  R      (H, K, C)
  U      (H, K, K)
  mu_b   (H, C),  s_b (H,)
  mu_w   (H, K, T)
  Sig_w  (H, K, K)
  theta, e, KLw   (H, T)
"""

import argparse
import json
import math
import sys
import time

import numpy as np


# --------------------------------------------------------------------------
# parameters
# --------------------------------------------------------------------------

def default_params(kind, K, C):
    if kind == "mixture":
        return dict(s2=0.2 * K, u0=0.4, sb0=0.4 * K, shift=True, mixture=True)
    if kind == "gaussian":
        return dict(s2=1.0, u0=1.0, sb0=None, shift=False, mixture=False)
    raise ValueError("unknown kind %r" % kind)


def kmeanspp(Z, H, rng):
    """k-means++ seeds over the rows of Z (first uniform, then prop. to d^2)."""
    T = Z.shape[0]
    centers = np.empty((H, Z.shape[1]))
    idx = rng.integers(T)
    centers[0] = Z[idx]
    d2 = np.sum((Z - centers[0]) ** 2, axis=1)
    for h in range(1, H):  # sequential by definition of k-means++
        tot = d2.sum()
        if tot > 0.0:
            idx = rng.choice(T, p=d2 / tot)
        else:
            idx = rng.integers(T)
        centers[h] = Z[idx]
        np.minimum(d2, np.sum((Z - centers[h]) ** 2, axis=1), out=d2)
    return centers


# --------------------------------------------------------------------------
# VB writer
# --------------------------------------------------------------------------

class VBWriter:
    def __init__(self, Z, H, K, kind, seed=0, params=None):
        self.Z = np.ascontiguousarray(Z, dtype=np.float64)
        self.T, self.C = self.Z.shape
        self.kind = kind
        p = default_params(kind, K, self.C)
        if params:
            p.update(params)
        self.mixture = p["mixture"]
        self.shift = p["shift"]
        self.H = H if self.mixture else 1
        self.K = K
        self.s2 = float(p["s2"])
        self.u0 = float(p["u0"])
        self.sb0 = p["sb0"]
        self.seed = seed

        H, C = self.H, self.C
        self.I_K = np.eye(K)
        # prior
        self.R0 = np.zeros((K, C))
        self.U0 = self.u0 * self.I_K
        self.U0inv = np.linalg.inv(self.U0)
        self.logdetU0 = np.linalg.slogdet(self.U0)[1]
        self.U0invR0 = self.U0inv @ self.R0
        self.mu_b0 = np.zeros(C)
        # precomputed data quantities
        self.Zt = np.ascontiguousarray(self.Z.T)       # (C, T)
        self.zz = np.einsum("tc,tc->t", self.Z, self.Z)  # (T,)

    # ---- initialisation ---------------------------------------------------
    def init(self):
        H, K, C = self.H, self.K, self.C
        self.R = np.broadcast_to(self.R0, (H, K, C)).copy()
        self.U = np.broadcast_to(self.U0, (H, K, K)).copy()
        self.logdetU = np.full(H, self.logdetU0)
        if self.shift:
            rng = np.random.default_rng(self.seed)
            self.mu_b = kmeanspp(self.Z, H, rng)
            self.s_b = np.full(H, float(self.sb0))
        else:
            self.mu_b = np.zeros((H, C))
            self.s_b = np.zeros(H)

    # ---- R_h Z^T for all h as one (H*K, C) x (C, T) GEMM -----------------------
    def _RZ(self, R):
        H, K, C = R.shape
        return (R.reshape(H * K, C) @ self.Zt).reshape(H, K, self.T)

    # ---- expected squared error for fixed q(w) -----------------------------
    def _sq_err(self, mu_w, Sig_w):
        """e[h,t] and helpers for the current (R, U, mu_b, s_b) and given q(w)."""
        C = self.C
        R, U, mu_b = self.R, self.U, self.mu_b
        S = R @ R.transpose(0, 2, 1) + C * U                       # (H,K,K)
        a = self._RZ(R) - (R @ mu_b[:, :, None])                    # (H,K,T) = R_h (z_t - mu_b_h)
        sq = self.zz[None, :] - 2.0 * (mu_b @ self.Zt) \
            + np.einsum("hc,hc->h", mu_b, mu_b)[:, None]            # ||z_t - mu_b_h||^2
        quad = np.einsum("hkt,hkt->ht", mu_w, S @ mu_w)
        cross = np.einsum("hkt,hkt->ht", mu_w, a)
        trSSig = np.einsum("hij,hji->h", S, Sig_w)
        e = sq - 2.0 * cross + quad + trSSig[:, None]
        if self.shift:
            e += C * self.s_b[:, None]
        return e

    # ---- (1) address step --------------------------------------------------
    def address(self):
        H, K, C, s2 = self.H, self.K, self.C, self.s2
        R, U, mu_b = self.R, self.U, self.mu_b
        S = R @ R.transpose(0, 2, 1) + C * U                       # (H,K,K)
        A = self.I_K + S / s2
        L = np.linalg.cholesky(A)
        Linv = np.linalg.inv(L)                                     # small KxK only
        Sig = Linv.transpose(0, 2, 1) @ Linv                        # A^{-1}
        logdetA = 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
        a = self._RZ(R) - (R @ mu_b[:, :, None])                    # (H,K,T)
        mu_w = (Sig @ a) / s2                                       # (H,K,T)

        sq = self.zz[None, :] - 2.0 * (mu_b @ self.Zt) \
            + np.einsum("hc,hc->h", mu_b, mu_b)[:, None]
        quad = np.einsum("hkt,hkt->ht", mu_w, S @ mu_w)
        cross = np.einsum("hkt,hkt->ht", mu_w, a)
        trSSig = np.einsum("hij,hji->h", S, Sig)
        e = sq - 2.0 * cross + quad + trSSig[:, None]
        if self.shift:
            e += C * self.s_b[:, None]
        trSig = np.einsum("hii->h", Sig)
        KLw = 0.5 * (trSig[:, None] + np.einsum("hkt,hkt->ht", mu_w, mu_w)
                     - K + logdetA[:, None])

        if self.mixture:
            logit = -e / (2.0 * s2) - KLw
            logit -= logit.max(axis=0, keepdims=True)
            theta = np.exp(logit)
            theta /= theta.sum(axis=0, keepdims=True)
            theta *= (1.0 - 1e-6)
            theta += 1e-6 / H
        else:
            theta = np.ones((1, self.T))

        self.mu_w, self.Sig_w, self.theta = mu_w, Sig, theta
        self.e, self.KLw = e, KLw
        self.trSig, self.logdetA = trSig, logdetA

    # ---- (2) shift update --------------------------------------------------
    def update_b(self):
        s2, sb0 = self.s2, self.sb0
        theta = self.theta
        N = theta.sum(axis=1)                                       # (H,)
        tm = np.einsum("hkt,ht->hk", self.mu_w, theta)              # sum_t theta mu_w
        thZ = theta @ self.Z                                        # (H,C)
        resid = thZ - np.einsum("hkc,hk->hc", self.R, tm)
        self.s_b = 1.0 / (1.0 / sb0 + N / s2)
        self.mu_b = self.s_b[:, None] * (self.mu_b0[None, :] / sb0 + resid / s2)

    # ---- (3) memory update -------------------------------------------------
    def update_M(self):
        s2 = self.s2
        theta, mu_w = self.theta, self.mu_w
        N = theta.sum(axis=1)
        W = mu_w * theta[:, None, :]                                # (H,K,T)
        G = W @ mu_w.transpose(0, 2, 1)                             # (H,K,K)
        Q = self.U0inv + (G + N[:, None, None] * self.Sig_w) / s2
        tm = W.sum(axis=2)                                          # (H,K)
        H, K = W.shape[0], W.shape[1]
        WZ = (W.reshape(H * K, self.T) @ self.Z).reshape(H, K, self.C)  # one big GEMM
        Y = self.U0invR0 + (WZ - tm[:, :, None] * self.mu_b[:, None, :]) / s2
        L = np.linalg.cholesky(Q)
        X = np.linalg.solve(L, Y)                                   # L X = Y
        Lt = L.transpose(0, 2, 1)
        self.R = np.linalg.solve(Lt, X)                             # L^T R = X
        Linv = np.linalg.inv(L)
        self.U = Linv.transpose(0, 2, 1) @ Linv                     # Q^{-1}
        self.logdetU = -2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)

    # ---- ELBO --------------------------------------------------------------
    def elbo(self, e=None):
        """Total ELBO for the current state; e defaults to the address-step e."""
        K, C, s2 = self.K, self.C, self.s2
        theta = self.theta
        if e is None:
            e = self.e
        total = np.sum(theta * (-0.5 * C * math.log(2.0 * math.pi * s2)
                                - e / (2.0 * s2) - self.KLw))
        if self.mixture:
            total -= np.sum(theta * np.log(self.H * theta))
        D = self.R - self.R0
        trU0iU = np.einsum("ij,hji->h", self.U0inv, self.U)
        trD = np.einsum("hkc,kj,hjc->h", D, self.U0inv, D)
        KL_M = 0.5 * (C * trU0iU + trD - K * C - C * self.logdetU + C * self.logdetU0)
        total -= KL_M.sum()
        if self.shift:
            sb0 = self.sb0
            db = self.mu_b - self.mu_b0
            KL_b = 0.5 * (C * self.s_b / sb0 + np.einsum("hc,hc->h", db, db) / sb0
                          - C - C * np.log(self.s_b / sb0))
            total -= KL_b.sum()
        return float(total)

    def elbo_fixed_qw(self):
        """ELBO with q(w), theta held fixed but (R,U,b) at their current values."""
        return self.elbo(self._sq_err(self.mu_w, self.Sig_w))

    # ---- full write --------------------------------------------------------
    def write(self, iters, trace=False):
        self.init()
        tr, fine = [], []
        for _ in range(iters):
            self.address()
            if trace:
                tr.append(self.elbo())
                fine.append(tr[-1])
            if self.shift:
                self.update_b()
                if trace:
                    fine.append(self.elbo_fixed_qw())
            self.update_M()
            if trace:
                fine.append(self.elbo_fixed_qw())
        self.address()
        el = self.elbo()
        if trace:
            tr.append(el)
            fine.append(el)
            return el, tr, fine
        return el


def write(Z, H, K, iters, kind="mixture", seed=0, trace=False, params=None):
    """Functional entry point: returns total ELBO (and traces if trace=True)."""
    return VBWriter(Z, H, K, kind, seed=seed, params=params).write(iters, trace=trace)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def cmd_time(args):
    rng = np.random.default_rng(args.seed)
    Z = rng.standard_normal((args.T, args.C))
    H = args.H if args.kind == "mixture" else 1
    w = VBWriter(Z, H, args.K, args.kind, seed=args.seed)
    el = w.write(args.iters)                   # warm-up
    times = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        el = w.write(args.iters)               # init + iters + final address + ELBO
        times.append(time.perf_counter() - t0)
    out = {"kind": args.kind, "T": args.T, "H": H, "K": args.K, "C": args.C,
           "iters": args.iters, "median_s": float(np.median(times)),
           "elbo_per_frame": el / args.T}
    if args.trace:
        _, tr, fine = w.write(args.iters, trace=True)
        tol = 1e-9 * max(1.0, abs(tr[-1]))
        out["elbo_trace_per_frame"] = [x / args.T for x in tr]
        out["trace_nondecreasing"] = bool(np.all(np.diff(tr) >= -tol))
        out["trace_min_diff_total"] = float(np.min(np.diff(tr))) if len(tr) > 1 else 0.0
        out["substep_nondecreasing"] = bool(np.all(np.diff(fine) >= -tol))
        out["substep_min_diff_total"] = float(np.min(np.diff(fine))) if len(fine) > 1 else 0.0
    print(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("time", help="time one write (median over reps)")
    t.add_argument("--kind", choices=["mixture", "gaussian"], default="mixture")
    t.add_argument("--T", type=int, default=64)
    t.add_argument("--H", type=int, default=10)
    t.add_argument("--K", type=int, default=6)
    t.add_argument("--C", type=int, default=200)
    t.add_argument("--iters", type=int, default=10)
    t.add_argument("--reps", type=int, default=5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--trace", action="store_true",
                   help="also report the ELBO after each iteration (untimed run)")
    args = ap.parse_args(argv)
    if args.cmd == "time":
        cmd_time(args)


if __name__ == "__main__":
    sys.exit(main())
