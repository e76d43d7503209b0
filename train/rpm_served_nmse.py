#!/usr/bin/python3
"""rpm_served_nmse.py -- the served RPM against PyTorch on held-out bouncing balls: export a trained
checkpoint of train/vbmtrain/rpm.py (train/rpm_export.py), start vbmemd with it in a models
directory, post every held-out sequence to POST /v1/models/{name}/infer, and print the nMSE of the
served posterior means against the true ball positions next to the nMSE of rpm.py's own posterior
(TimeSeriesRPM.posterior) on the same sequences, and the largest differences between the two.

The held-out set is the one research/rpm_balls.py scores (rpm.make_balls(dataset, N, seed=2000 +
seed)); nMSE is rpm.nmse (after the best affine map of the means onto the truth: the RPM latent is
identified only up to one).

Usage: /usr/bin/python3 train/rpm_served_nmse.py build/vbmemd CHECKPOINT.pt [--n 100]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vbmtrain import rpm  # noqa: E402
import rpm_export  # noqa: E402


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vbmemd")
    ap.add_argument("checkpoint")
    ap.add_argument("--n", type=int, default=None, help="held-out sequences (default: the checkpoint's N)")
    ap.add_argument("--port", type=int, default=18765)
    a = ap.parse_args()
    torch.set_num_threads(1)
    ck = torch.load(a.checkpoint, map_location="cpu", weights_only=False)
    arch = ck["arch"]
    n = a.n or ck.get("N", 100)
    Xt, Zt = rpm.make_balls(ck["dataset"], n, J=arch["J"], T=arch["T"], seed=2000 + ck.get("seed", 0))
    model = rpm.TimeSeriesRPM(arch["framework"], J=arch["J"], T=arch["T"], hidden=arch["hidden"],
                              variance=ck["gp"]["variance"], jitter=ck["gp"]["jitter"])
    model.load_state_dict(ck["state_dict"], strict=False)
    with torch.no_grad():
        ref = model.posterior(Xt)
    tmp = tempfile.mkdtemp()
    d = None
    try:
        rpm_export.export(ck, os.path.join(tmp, "balls.safetensors"))
        d = subprocess.Popen([os.path.abspath(a.vbmemd), "--models-dir", tmp, "--default-model", "",
                              "--listen", "127.0.0.1:%d" % a.port, "--threads", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        url = "http://127.0.0.1:%d" % a.port
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        mu = torch.empty(n, arch["T"], dtype=torch.float64)
        var = torch.empty(n, arch["T"], dtype=torch.float64)
        t0 = time.time()
        for i in range(n):
            r = post(url + "/v1/models/balls/infer", {"observations": Xt[i].tolist()})
            mu[i] = torch.tensor([row[0] for row in r["mean"]], dtype=torch.float64)
            var[i] = torch.tensor([row[0] for row in r["variance"]], dtype=torch.float64)
        secs = time.time() - t0
    finally:
        if d is not None:
            d.terminate()
            d.wait()
        shutil.rmtree(tmp)
    print("held-out %s balls: N = %d sequences of J x T = %d x %d (make_balls seed %d)" % (
        ck["dataset"], n, arch["J"], arch["T"], 2000 + ck.get("seed", 0)))
    print("nMSE served (vbmemd infer)  %.6f" % rpm.nmse(mu, Zt))
    print("nMSE PyTorch (rpm.py)       %.6f   (checkpoint's nmse_test %s)" % (
        rpm.nmse(ref["mu"], Zt), ck.get("nmse_test")))
    print("max |mean served - PyTorch| %.3g, max |variance served - PyTorch| %.3g" % (
        float((mu - ref["mu"]).abs().max()), float((var - ref["var"]).abs().max())))
    print("%d infer requests in %.2f s (one at a time, JSON, loopback)" % (n, secs))


if __name__ == "__main__":
    main()
