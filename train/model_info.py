#!/usr/bin/python3
"""model_info.py -- print a vbmem model file's metadata, or record extra
provenance in it (e.g. the test ELBO of the VAE baseline trained alongside):

  /usr/bin/python3 train/model_info.py models/fashion-mnist-mixture-v2.safetensors
  /usr/bin/python3 train/model_info.py MODEL --set baseline_vae_test_elbo_per_frame=1213.7734"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vbmtrain import nets  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="set a provenance key (VALUE parsed as JSON when it is valid JSON)")
    a = p.parse_args()
    tensors, meta = nets.read_safetensors(a.model)
    if a.set:
        prov = json.loads(meta["vbmem.provenance"])
        for kv in a.set:
            k, _, v = kv.partition("=")
            try:
                prov[k] = json.loads(v)
            except ValueError:
                prov[k] = v
        meta["vbmem.provenance"] = json.dumps(prov)
        nets.write_safetensors(a.model, tensors, meta)
    for k in sorted(meta):
        print("%s: %s" % (k, meta[k]))
    print("tensors: %d, parameters: %d" % (len(tensors), sum(t.numel() for t in tensors.values())))


if __name__ == "__main__":
    main()
