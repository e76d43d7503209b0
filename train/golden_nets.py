#!/usr/bin/python3
"""golden_nets.py -- regenerate the network parity files of tests/data/ (checked by
tests/test_nets.c): small RANDOM models built with train/vbmtrain/nets.py, run by PyTorch on
fixed random inputs.

  golden_nets.safetensors            gaussian model, 3 x 12 x 12, C = 6, every layer type
  golden_nets_io.safetensors         x, mu, log_sigma, z, mean, scale, loglik
  golden_nets_bernoulli.safetensors  the default architecture (F.2.1) of nets.py, 1 x 28 x 28,
                                     bernoulli, C = 8, F = 8
  golden_nets_bernoulli_io.safetensors  x, mu, log_sigma, z, mean, loglik
  golden_nets_bounded.safetensors    the default architecture, 1 x 28 x 28, gaussian with the
                                     bounded head (sigmoid mean, scale 0.005 + 0.5 sigmoid(raw)),
                                     C = 8, F = 8 (and its _io file)

IO tensors: x (N, ch, h, w) in [0, 1); mu and log_sigma (N, C) = encoder(x), log_sigma clamped;
z (N, C) independent N(0, 1) codes; mean (and scale) (N, ch, h, w) = decoder(z) through the
likelihood (gaussian: mean, softplus(raw) + min_scale; bernoulli: sigmoid(logit));
loglik (N,) = log p(x | decoder(z)) summed over pixels, in float64.

Usage: /usr/bin/python3 train/golden_nets.py [--out tests/data]
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vbmtrain import nets  # noqa: E402


def conv(name, cin, cout, k, s, pad):
    return {"type": "conv2d", "name": name, "in": cin, "out": cout, "kernel": k, "stride": s, "padding": pad}


def convt(name, cin, cout, k, s, pad):
    return {"type": "conv_transpose2d", "name": name, "in": cin, "out": cout, "kernel": k, "stride": s,
            "padding": pad}


def gn(name, groups, ch):
    return {"type": "group_norm", "name": name, "groups": groups, "channels": ch, "eps": 1e-5}


def gaussian_architecture():
    """Every layer type and padding rule on a 3 x 12 x 12 image: 'same' with stride 1 and 2
    (asymmetric padding), 'valid' with stride 2, transposed 'same' with k - stride odd, transposed
    'valid', a crop, residual blocks, group norm on images and on vectors, every activation."""
    F, C = 8, 6
    enc = [
        conv("enc.c0", 3, F, 3, 1, "same"),          # [8,12,12]
        {"type": "swish"},
        conv("enc.c1", F, F, 4, 2, "valid"),         # [8,5,5]
        {"type": "residual", "body": [
            gn("enc.r0.gn1", 2, F), {"type": "relu"},
            conv("enc.r0.c1", F, F, 3, 1, "same"),
            gn("enc.r0.gn2", 4, F), {"type": "swish"},
            conv("enc.r0.c2", F, F, 3, 1, "same")]},
        conv("enc.c2", F, F, 4, 2, "same"),          # [8,3,3], padding 1 before, 2 after
        {"type": "sigmoid"},
        {"type": "flatten"},                         # [72]
        {"type": "dense", "name": "enc.d0", "in": F * 9, "out": 16},
        gn("enc.gnv", 4, 16),                        # group norm on a vector
        {"type": "relu"},
        {"type": "dense", "name": "enc.d1", "in": 16, "out": 2 * C},
    ]
    dec = [
        {"type": "dense", "name": "dec.d0", "in": C, "out": F * 9},
        {"type": "reshape", "shape": [F, 3, 3]},
        {"type": "residual", "body": [
            gn("dec.r0.gn", 4, F), {"type": "swish"},
            conv("dec.r0.c", F, F, 3, 1, "same")]},
        {"type": "relu"},
        convt("dec.t0", F, F, 3, 2, "same"),         # [8,6,6], k - stride odd
        {"type": "swish"},
        convt("dec.t1", F, F, 4, 2, "valid"),        # [8,14,14]
        {"type": "center_crop", "height": 12, "width": 12},
        {"type": "swish"},
        conv("dec.head", F, 6, 1, 1, "valid"),       # [6,12,12]: 3 means, 3 raw scales
    ]
    return {"observation": {"channels": 3, "height": 12, "width": 12, "likelihood": "gaussian",
                            "min_scale": 0.01},
            "code_size": C, "log_sigma_min": -1.5, "log_sigma_max": 0.75,
            "encoder": enc, "decoder": dec}


def randomize(module, gen):
    """Perturb every parameter so biases and group-norm affines are exercised."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("bias"):
                p.copy_(0.2 * noise)
            elif p.dim() == 1:  # group norm scale
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.add_(0.1 * noise * p.std())


def log_prob(dec, out, x):
    out, x = out.double(), x.double()
    if dec.likelihood == "gaussian":
        mean, scale = dec.params(out.float())
        mean, scale = mean.double(), scale.double()
        lp = -0.5 * ((x - mean) / scale) ** 2 - torch.log(scale) - 0.5 * math.log(2 * math.pi)
    else:
        p = torch.sigmoid(out.float()).double()
        lp = x * torch.log(p.clamp(min=1e-30)) + (1 - x) * torch.log((1 - p).clamp(min=2.0 ** -25))
    return lp.reshape(lp.shape[0], -1).sum(1)


def make(out_dir, stem, arch, n, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    enc, dec = nets.build_networks(arch)
    randomize(enc, gen)
    randomize(dec, gen)
    enc.eval()
    dec.eval()
    obs = arch["observation"]
    C = arch["code_size"]
    x = torch.rand((n, obs["channels"], obs["height"], obs["width"]), generator=gen)
    if obs["likelihood"] == "bernoulli":
        x = (x > 0.5).float()
    z = torch.randn((n, C), generator=gen)
    with torch.no_grad():
        mu, log_sigma = enc(x)
        raw = dec(z)
        mean, scale = dec.params(raw)
        ll = log_prob(dec, raw, x)
    memory = {"kind": "mixture", "clusters": 3, "rows": 2, "groups": 1, "iterations": 4, "sigma_z2": 0.4,
              "u0": 0.4, "sigma2_b0": 0.8, "s_floor": 1e-6, "episode_length": 8}
    provenance = {"dataset": "random", "train_frames": 0, "epochs": 0, "seed": seed,
                  "trainer": "train/golden_nets.py", "note": "random weights for the parity test"}
    model_path = os.path.join(out_dir, stem + ".safetensors")
    nets.save_model(model_path, enc, dec, arch, memory, provenance)
    io = {"x": x, "mu": mu, "log_sigma": log_sigma, "z": z, "mean": mean, "loglik": ll.float()}
    if scale is not None:
        io["scale"] = scale
    # loglik is stored in float32 too (the reader is F32 only); the test allows for that.
    nets.write_safetensors(os.path.join(out_dir, stem + "_io.safetensors"), io,
                           {"vbmem.golden": "io for " + stem + ".safetensors"})
    clamped = ((log_sigma <= arch["log_sigma_min"]) | (log_sigma >= arch["log_sigma_max"])).float().mean()
    print("%s: %d params, mu in [%.3f, %.3f], log_sigma clamped %.0f%%, mean in [%.3f, %.3f], loglik %s" % (
        stem, sum(p.numel() for p in list(enc.parameters()) + list(dec.parameters())),
        mu.min(), mu.max(), 100 * clamped, mean.min(), mean.max(),
        ", ".join("%.2f" % v for v in ll.tolist())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    make(args.out, "golden_nets", gaussian_architecture(), n=5, seed=20240611)
    arch = nets.default_architecture(channels=1, height=28, width=28, code_size=8, filters=8, groups=2,
                                     likelihood="bernoulli", act="swish", blocks=3)
    make(args.out, "golden_nets_bernoulli", arch, n=3, seed=7)
    # the bounded gaussian head (sigmoid mean, scale 0.005 + 0.5 sigmoid) of the trainer's default
    arch = nets.default_architecture(channels=1, height=28, width=28, code_size=8, filters=8, groups=2,
                                     likelihood="gaussian", act="swish", blocks=3, head="bounded")
    make(args.out, "golden_nets_bounded", arch, n=3, seed=8)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out)
                if f.startswith("golden_nets"))
    print("golden files: %d bytes in %s" % (total, os.path.abspath(args.out)))


if __name__ == "__main__":
    main()
