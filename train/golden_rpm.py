#!/usr/bin/python3
"""golden_rpm.py -- regenerate the RPM parity files of tests/data/ (checked by tests/test_rpm.c and
tests/http/test_rpm.py): a small RANDOM time-series RPM of train/vbmtrain/rpm.py ('minimalist
amortized': analytic recognition), exported by train/rpm_export.py, and its posterior computed by
rpm.py's own PyTorch code on fixed random sequences.

  golden_rpm.safetensors   the rpm model file: J = 3 rows, hidden 5, lengthscale 2.5, jitter 1e-6
  golden_rpm_io.json       {"cases": [{"T", "X" [J][T], "a" [J][T], "P" [J][T], "mu" [T],
                           "var" [T]}, ...]}: X float32 values (as doubles), the factors a, P and
                           the posterior in float64 (TimeSeriesRPM.factors, rpm.gp_posterior)

Cases: T = 12 (the trained T), T = 2 (the shortest served), T = 30 (longer than trained; the nets
act per step, the kernel is built for the T given).

Usage: /usr/bin/python3 train/golden_rpm.py [--out tests/data]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vbmtrain import rpm  # noqa: E402
import rpm_export  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data"))
    a = ap.parse_args()
    torch.manual_seed(0)
    J, T, H = 3, 12, 5
    model = rpm.TimeSeriesRPM("minimalist-amortized", J=J, T=T, hidden=H, lengthscale=2.5, seed=3)
    assert model.q_mode == "analytic"
    g = torch.Generator()
    g.manual_seed(11)
    with torch.no_grad():  # larger random weights than the init, so that the factors vary
        for W in (model.rows.W1, model.rows.W2, model.rows.W3, model.rows.b1, model.rows.b2, model.rows.b3):
            W.copy_(torch.randn(W.shape, generator=g) * 0.8)
    ck = rpm.checkpoint(model, {"dataset": "none (random weights)", "seed": 3})
    path = os.path.join(a.out, "golden_rpm.safetensors")
    rpm_export.export(ck, path, min_steps=2, max_steps=64)
    cases = []
    for Tc, scale in ((12, 2.0), (2, 1.0), (30, 3.0)):
        X = (torch.randn(1, J, Tc, generator=g) * scale).float()
        with torch.no_grad():
            av, P = model.factors(X)
            h, d = model.q_params(X, None, av, P)
            K = rpm.rbf_kernel(Tc, model.log_ell.exp(), model.variance, model.jitter)
            post = rpm.gp_posterior(K, h, d)
        cases.append({"T": Tc, "X": X[0].double().tolist(), "a": av[0].tolist(), "P": P[0].tolist(),
                      "mu": post["mu"][0].tolist(), "var": post["var"][0].tolist()})
    with open(os.path.join(a.out, "golden_rpm_io.json"), "w") as f:
        json.dump({"model": "golden_rpm.safetensors", "J": J, "lengthscale": float(model.log_ell.exp()),
                   "cases": cases}, f)
    print("wrote %s and golden_rpm_io.json (%d cases)" % (path, len(cases)))


if __name__ == "__main__":
    main()
