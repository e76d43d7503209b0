#!/usr/bin/python3
"""nets_torch.py -- PyTorch (CPU) reference timing for bench-nets: encode and decode of a batch
of frames with a vbmem model file, the networks built by train/vbmtrain/nets.py.

The timed work matches nets_encode / nets_decode: encode = encoder forward (mu, clamped
log sigma) plus sigma^2 = exp(2 log sigma); decode = decoder forward plus the likelihood's
parameters (gaussian: mean, softplus(raw) + min_scale; bernoulli: sigmoid). Inputs are fixed
random images in [0, 1) and N(0, 1) codes; inference mode, float32, one warm-up call of each.

Two modes:
  default   `reps` timed calls of each, then one JSON line:
            {"frames": N, "threads": T, "encode_s": median seconds, "decode_s": median seconds,
             "encode_min_s": ..., "decode_min_s": ..., "torch": version}
  --serve   for bench-nets, which interleaves these calls with its own: prints one JSON line
            {"ready": true, "threads": T, "torch": version}, then for each line "encode" or
            "decode" read from stdin runs one call and prints its seconds; exits at EOF.

Usage: /usr/bin/python3 bench/ref/nets_torch.py MODEL [--frames 64] [--threads 2] [--reps 7] [--serve]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "train"))
from vbmtrain import nets  # noqa: E402


def once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--frames", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--serve", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    enc, dec, arch, _, _ = nets.load_model(args.model)
    enc.eval()
    dec.eval()
    obs = arch["observation"]
    gen = torch.Generator().manual_seed(0)
    x = torch.rand((args.frames, obs["channels"], obs["height"], obs["width"]), generator=gen)
    z = torch.randn((args.frames, arch["code_size"]), generator=gen)

    def encode():
        mu, log_sigma = enc(x)
        return mu, torch.exp(2.0 * log_sigma)

    def decode():
        return dec.params(dec(z))

    calls = {"encode": encode, "decode": decode}
    with torch.inference_mode():
        encode()
        decode()
        if args.serve:
            print(json.dumps({"ready": True, "threads": torch.get_num_threads(), "torch": torch.__version__}),
                  flush=True)
            for line in sys.stdin:
                fn = calls.get(line.strip())
                print("%.9f" % once(fn) if fn else "nan", flush=True)
            return
        te = [once(encode) for _ in range(args.reps)]
        td = [once(decode) for _ in range(args.reps)]
    print(json.dumps({"frames": args.frames, "threads": torch.get_num_threads(), "encode_s": statistics.median(te),
                      "decode_s": statistics.median(td), "encode_min_s": min(te), "decode_min_s": min(td),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
