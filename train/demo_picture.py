#!/usr/bin/python3
"""demo_picture.py -- the picture of docs/guide (and README.md) for a model file: an episode of test
images, samples generated from the memory written with it (App. G.1), and
iterative reads (App. G.2) of half-masked cues, one column per step.

  /usr/bin/python3 train/demo_picture.py models/fashion-mnist-mixture-v2.safetensors docs/guide/demo-fashion-mnist.png
  /usr/bin/python3 train/demo_picture.py models/omniglot-mixture.safetensors docs/guide/demo-omniglot.png --data-root DIR

The test images are of the dataset the model was trained on (its provenance; --dataset to
choose), read from --data-root (Omniglot needs it; Fashion-MNIST defaults to Debian's package)."""
import argparse
import os
import struct
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from vbmtrain import data, nets, vb  # noqa: E402


def write_png(path, img):
    """img: (h, w) float in [0,1] -> 8-bit greyscale PNG."""
    h, w = img.shape
    px = (img.clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    raw = b"".join(b"\x00" + px[y].tobytes() for y in range(h))

    def chunk(t, body):
        return struct.pack(">I", len(body)) + t + body + struct.pack(">I", zlib.crc32(t + body) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def grid(imgs, cols, pad=2):
    n, h, w = imgs.shape
    rows = (n + cols - 1) // cols
    out = torch.ones(rows * (h + pad) + pad, cols * (w + pad) + pad)
    for i in range(n):
        r, c = divmod(i, cols)
        out[pad + r * (h + pad):pad + r * (h + pad) + h, pad + c * (w + pad):pad + c * (w + pad) + w] = imgs[i]
    return out


def sample_codes(cfg, mem, n, gen):
    """G.1 for a one-episode mixture memory: Omega ~ q(Omega) per sample, s uniform,
    w ~ N(0, I), z ~ N(M_s^T w + b_s, sigma_z^2 I)."""
    H, K, C = mem.R.shape[1:]
    out = []
    for _ in range(n):
        om = vb.sample_memory(cfg, mem, gen)
        s = int(torch.randint(H, (1,), generator=gen))
        w = torch.randn(K, generator=gen, dtype=torch.float64)
        z = om.R[0, s].T @ w + om.mu_b[0, s] + (cfg["sigma_z2"] ** 0.5) * torch.randn(C, generator=gen,
                                                                                    dtype=torch.float64)
        out.append(z)
    return torch.stack(out)


def read_step(cfg, mem, Z, V, gen):
    """G.2 steps 3-5 for query codes (1, T, C): q(y) by VB with q(Omega) fixed, then
    Omega ~ q(Omega), s ~ q(s), w ~ q(w | s), z ~ p(z | s, w, Omega)."""
    d = vb.address(cfg, mem, Z, V)
    T = Z.shape[1]
    out = []
    for t in range(T):
        om = vb.sample_memory(cfg, mem, gen)
        s = int(torch.multinomial(d["theta"][0, :, t].float(), 1, generator=gen))
        L = torch.linalg.cholesky(d["Sw"][0, s])
        w = d["W"][0, s, :, t] + L @ torch.randn(L.shape[0], generator=gen, dtype=torch.float64)
        z = om.R[0, s].T @ w + om.mu_b[0, s] + (cfg["sigma_z2"] ** 0.5) * torch.randn(Z.shape[-1], generator=gen,
                                                                                    dtype=torch.float64)
        out.append(z)
    return torch.stack(out)[None]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--reads", type=int, default=8, help="cues shown")
    p.add_argument("--dataset", default=None, help="default: the model's provenance dataset")
    p.add_argument("--data-root", default=None)
    a = p.parse_args()
    torch.set_num_threads(1)
    enc, dec, arch, memcfg, prov = nets.load_model(a.model)
    enc.eval()
    dec.eval()
    gen = torch.Generator()
    gen.manual_seed(a.seed)
    imgs = data.load_dataset(a.dataset or prov.get("dataset", "fashion-mnist"), a.data_root, "test")
    T = memcfg["episode_length"]
    idx = torch.randperm(imgs.shape[0], generator=gen)[:T]
    x = (torch.from_numpy(imgs[idx.numpy()]).float() + 0.5) / 256
    cfg = vb.memory_defaults(memcfg["kind"], arch["code_size"], memcfg["rows"], memcfg["clusters"])
    for k in ("sigma_z2", "u0", "sigma2_b0", "s_floor"):
        cfg[k] = memcfg[k]

    def decode(z):
        mean, _ = dec.params(dec(z.float()))
        return mean[:, 0].clamp(0, 1)
    with torch.no_grad():
        mu, ls = enc(x)
        Z, V = mu.double()[None], torch.exp(2 * ls.double())[None]
        mem, _ = vb.write(cfg, vb.init_memory(cfg, Z, gen), Z, V, memcfg["iterations"])
        samples = decode(sample_codes(cfg, mem, T, gen))
        cue = x[:a.reads].clone()
        cue[:, :, 14:, :] = 0.0
        cols = [x[:a.reads, 0], cue[:, 0]]
        cur = cue
        for _ in range(5):
            m, l2 = enc(cur)
            z = read_step(cfg, mem, m.double()[None], torch.exp(2 * l2.double())[None], gen)[0]
            cur = decode(z)[:, None]
            cols.append(cur[:, 0])
        reads = torch.stack(cols, 1).reshape(-1, 28, 28)
    g1, g2 = grid(x[:, 0], 8), grid(samples, 8)
    g3 = grid(reads, 7)
    sep = torch.ones(g1.shape[0], 12)
    top = torch.cat([g1, sep, g2], 1)
    pad = torch.ones(g3.shape[0], top.shape[1] - g3.shape[1]) if g3.shape[1] < top.shape[1] else None
    bottom = torch.cat([g3, pad], 1) if pad is not None else g3
    write_png(a.out, torch.cat([top, torch.ones(12, top.shape[1]), bottom], 0))
    print("wrote %s: episode (left), memory samples (right); reads: original, cue, 5 read steps" % a.out)


if __name__ == "__main__":
    main()
