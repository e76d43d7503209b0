#!/usr/bin/python3
"""rpm_export.py -- a trained time-series RPM checkpoint (train/vbmtrain/rpm.py, torch.save dict:
state_dict, arch, gp, layers, ...) -> a vbmem model file of kind "rpm" (proto/model-format.md,
section "Kind rpm") that vbmemd serves at POST /v1/models/{name}/infer.

Only the 'analytic' recognition (the 'minimalist amortized' framework, eta_q = eta_0 - J eta_0^unc +
sum_j eta_j^unc) is served: the row networks give the factors, the GP prior and the J factors give
the posterior. The safetensors file is written by vbmtrain.nets.write_safetensors (the trainer's
model-file writer).

Usage: /usr/bin/python3 train/rpm_export.py CHECKPOINT.pt OUT.safetensors [--min-steps 2]
       [--max-steps 1024] [--check]
--check recomputes the checkpoint's "example" posterior with rpm.py's own code after the export
and prints the largest difference (a sanity check of the checkpoint, not of the C code).
"""
import argparse
import datetime
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vbmtrain import nets  # noqa: E402


def rpm_metadata(J, latent, rows, gp, min_steps=2, max_steps=1024, provenance=None):
    """The metadata of an rpm model file: J per-row recognition layer lists (each on one
    observation, a 1 x 1 image of 1 channel, to [2 L, 1, 1]: a = channels 0..L-1, r = L..2L-1),
    factor precision 1/v0 + softplus(r) with v0 = variance + jitter, an RBF GP prior over integer
    steps, and eta_0 - J eta_0^unc (subtract_marginals)."""
    v0 = float(gp["variance"]) + float(gp["jitter"])
    arch = {
        "factors": J, "observation_size": 1, "latent_size": latent,
        "min_steps": min_steps, "max_steps": max_steps,
        "shared": False, "recognition": rows,
        "factor": {"parameters": "natural", "precision": "softplus", "min_precision": 1.0 / v0},
        "prior": {"kernel": "rbf", "variance": [float(gp["variance"])] * latent,
                  "lengthscale": [float(gp["lengthscale"])] * latent, "jitter": float(gp["jitter"]),
                  "time_step": 1.0, "subtract_marginals": True},
    }
    prov = dict(provenance or {})
    prov.setdefault("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    prov.setdefault("torch", torch.__version__)
    return {"vbmem.format": "vbmem-model", "vbmem.format_version": nets.FORMAT_VERSION,
            "vbmem.kind": "rpm", "vbmem.architecture": json.dumps(arch),
            "vbmem.provenance": json.dumps(prov)}


def export(ck, out, min_steps=2, max_steps=1024):
    """Write checkpoint dict ck as an rpm model file at out; returns the metadata."""
    arch = ck["arch"]
    if arch.get("q_mode") != "analytic":
        raise ValueError("only the analytic ('minimalist amortized') recognition is served; this "
                         "checkpoint has q_mode %r" % (arch.get("q_mode"),))
    if arch.get("latent_dim", 1) != 1:
        raise ValueError("rpm.py checkpoints have one latent dimension")
    prov = {k: ck[k] for k in ("dataset", "N", "steps", "seed", "nmse_train", "nmse_test") if k in ck}
    prov.update({"framework": arch.get("framework"), "trainer": "train/vbmtrain/rpm.py",
                 "exporter": "train/rpm_export.py", "trained_T": arch.get("T")})
    meta = rpm_metadata(arch["J"], 1, ck["layers"]["rows"], ck["gp"], min_steps, max_steps, prov)
    tensors = {k: v for k, v in ck["layers"]["tensors"].items() if k.startswith("row")}
    nets.write_safetensors(out, tensors, meta)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--min-steps", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=1024)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    ck = torch.load(a.checkpoint, map_location="cpu", weights_only=False)
    export(ck, a.out, a.min_steps, a.max_steps)
    print("wrote %s (J = %d, lengthscale %.4f)" % (a.out, ck["arch"]["J"], ck["gp"]["lengthscale"]))
    if a.check and "example" in ck:
        from vbmtrain import rpm
        m = rpm.TimeSeriesRPM(ck["arch"]["framework"], J=ck["arch"]["J"], T=ck["arch"]["T"],
                              hidden=ck["arch"]["hidden"], variance=ck["gp"]["variance"],
                              jitter=ck["gp"]["jitter"])
        m.load_state_dict(ck["state_dict"], strict=False)
        with torch.no_grad():
            p = m.posterior(ck["example"]["X"])
        print("example: max |mu - stored| %.3g, max |var - stored| %.3g" % (
            float((p["mu"] - ck["example"]["mu"]).abs().max()),
            float((p["var"] - ck["example"]["var"]).abs().max())))


if __name__ == "__main__":
    main()
