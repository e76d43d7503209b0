#!/usr/bin/python3
"""session_precision.py -- measure the observation noise sessions of a model should use by
default, and record it in the model file (its tensors are not touched):

  /usr/bin/python3 train/session_precision.py MODEL [--data DIR] [--write]

sigma_z^2 of p(z | y, Omega) says how far a written code may lie from the memory's
reconstruction of it. The trainer's value (0.2 K, from the paper author's code) suits the
training objective; a session that must give back what was written is better served by
the precision the encoder itself gives a code: the mean, over every test image and code
dimension, of the encoder's variance exp(2 log sigma). With --write the value (rounded to
three significant digits) goes into vbmem.memory as session_sigma_z2, and the measurement
into vbmem.provenance; without it the value is printed only."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from vbmtrain import data, nets  # noqa: E402


def mean_encoder_variance(encoder, images, batch=1000):
    """Mean over images and code dimensions of exp(2 log sigma)."""
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(images), batch):
            x = images[i:i + batch]
            _, log_sigma = encoder(x)
            v = torch.exp(2.0 * log_sigma.double())
            total += v.sum().item()
            n += v.numel()
    return total / n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--data", default=None,
                   help="the dataset folder (default: Debian's dataset-fashion-mnist)")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--write", action="store_true", help="record the value in the model file")
    a = p.parse_args()
    torch.set_num_threads(1)
    enc, _, arch, memory, prov = nets.load_model(a.model)
    enc.eval()
    raw = data.load_dataset(a.dataset, a.data, "test")
    images = (torch.tensor(raw).float() + 0.5) / 256.0  # bin centres, as the benchmarks
    v = mean_encoder_variance(enc, images)
    value = float("%.3g" % v)
    print("mean encoder variance over %d test images: %.6f -> session_sigma_z2 %g (trained sigma_z2 %g)"
          % (len(images), v, value, memory["sigma_z2"]))
    if not a.write:
        return 0
    tensors, meta = nets.read_safetensors(a.model)
    memory = json.loads(meta["vbmem.memory"])
    memory["session_sigma_z2"] = value
    prov = json.loads(meta["vbmem.provenance"])
    prov["session_sigma_z2"] = {"value": value, "mean_encoder_variance": round(v, 6),
                                "test_images": len(images), "script": "train/session_precision.py"}
    meta["vbmem.memory"] = json.dumps(memory)
    meta["vbmem.provenance"] = json.dumps(prov)
    nets.write_safetensors(a.model, tensors, meta)
    print("wrote session_sigma_z2 = %g into %s" % (value, a.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
