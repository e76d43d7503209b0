#!/usr/bin/python3
"""test_train_fast.py -- the trainer's faster formulations against the plain
ones they replaced: each layer and VB product against a loop or plain version
written out here, and a few training steps of both from the same seed with the
loss and every parameter equal to float32 tolerance."""
import math
import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "train"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from vbmtrain import data, nets, objective, vb  # noqa: E402

torch.set_num_threads(1)


# ---------------------------------------------------------------- the plain formulations

def plain_same_pad(size, k, stride):
    out = -(-size // stride)
    p = max((out - 1) * stride + k - size, 0)
    return p // 2, p - p // 2


def plain_conv2d(mod, x):
    """Pad explicitly ('same'), then an unpadded convolution."""
    if mod.padding == "same":
        ph = plain_same_pad(x.shape[2], mod.k, mod.stride)
        pw = plain_same_pad(x.shape[3], mod.k, mod.stride)
        x = F.pad(x, (pw[0], pw[1], ph[0], ph[1]))
    return F.conv2d(x, mod.weight, mod.bias, stride=mod.stride)


def plain_conv_transpose2d(mod, x):
    """The full transposed convolution, then the 'same' window sliced out."""
    h, w = x.shape[2], x.shape[3]
    y = F.conv_transpose2d(x, mod.weight, mod.bias, stride=mod.stride)
    if mod.padding == "same":
        b = max(mod.k - mod.stride, 0) // 2
        y = y[:, :, b:b + h * mod.stride, b:b + w * mod.stride]
    return y


def plain_center_crop(x, hh, ww):
    t0 = (x.shape[2] - hh) // 2
    l0 = (x.shape[3] - ww) // 2
    return x[:, :, t0:t0 + hh, l0:l0 + ww]


def plain_run(layers, registry, x):
    """Interpret a layer list (proto/model-format.md) one layer at a time with
    the parameters of `registry`, as the trainer did before: explicit pads and
    crops, swish as x * sigmoid(x), no layers merged."""
    for spec in layers:
        t = spec["type"]
        if t == "conv2d":
            x = plain_conv2d(registry[spec["name"].replace(".", "__")], x)
        elif t == "conv_transpose2d":
            x = plain_conv_transpose2d(registry[spec["name"].replace(".", "__")], x)
        elif t == "dense":
            m = registry[spec["name"].replace(".", "__")]
            x = x @ m.weight.t() + m.bias
        elif t == "group_norm":
            m = registry[spec["name"].replace(".", "__")]
            x = F.group_norm(x, spec["groups"], m.weight, m.bias, spec["eps"])
        elif t == "relu":
            x = torch.relu(x)
        elif t == "swish":
            x = x * torch.sigmoid(x)
        elif t == "flatten":
            x = x.reshape(x.shape[0], -1)
        elif t == "reshape":
            x = x.reshape((x.shape[0],) + tuple(spec["shape"]))
        elif t == "center_crop":
            x = plain_center_crop(x, spec["height"], spec["width"])
        elif t == "residual":
            x = x + plain_run(spec["body"], registry, x)
        else:
            raise ValueError(t)
    return x


class PlainEncoder(nets.Encoder):
    def __init__(self, arch):
        super().__init__(arch)
        self.layers = arch["encoder"]

    def forward(self, x):
        out = plain_run(self.layers, self.net.registry, x)
        return out[:, :self.C], out[:, self.C:].clamp(self.lo, self.hi)


class PlainDecoder(nets.Decoder):
    def __init__(self, arch):
        super().__init__(arch)
        self.layers = arch["decoder"]

    def forward(self, z):
        return plain_run(self.layers, self.net.registry, z)


def loop_rows_times_codes(R, Z):
    """R_h Z_b^T, one episode and one cluster at a time."""
    B, H, K, C = R.shape
    out = torch.empty(B, H, K, Z.shape[1], dtype=R.dtype)
    for b in range(B):
        for h in range(H):
            out[b, h] = R[b, h] @ Z[b].t()
    return out


def loop_weights_times_codes(Wt, Z):
    B, H, K, T = Wt.shape
    out = torch.empty(B, H, K, Z.shape[-1], dtype=Wt.dtype)
    for b in range(B):
        for h in range(H):
            out[b, h] = Wt[b, h] @ Z[b]
    return out


def plain_expected_sqerr(mem, Z, V, W, Sw):
    """expected_sqerr's sum, one episode, cluster and frame at a time."""
    R, U, mb, s2b = mem.R, mem.U, mem.mu_b, mem.s2_b
    B, H, K, C = R.shape
    out = torch.empty(B, H, Z.shape[1], dtype=Z.dtype)
    for b in range(B):
        for h in range(H):
            S = R[b, h] @ R[b, h].t() + C * U[b, h]
            for t in range(Z.shape[1]):
                w = W[b, h, :, t]
                m = R[b, h].t() @ w + mb[b, h]
                out[b, h, t] = ((Z[b, t] - m) ** 2).sum() + V[b, t].sum() + C * s2b[b, h] \
                    + (S * Sw[b, h]).sum() + w @ (C * U[b, h]) @ w
    return out


# ---------------------------------------------------------------- tests

def close(test, a, b, what, rtol=1e-5, atol=1e-6):
    err = float((a - b).abs().max())
    scale = float(b.abs().max())
    test.assertLessEqual(err, atol + rtol * scale, "%s: max difference %g (scale %g)" % (what, err, scale))


class Layers(unittest.TestCase):
    """Each layer's new formulation, its output and every gradient (input,
    weight, bias), against the plain one."""

    def compare(self, fast, plain, x, params, what):
        x1 = x.clone().requires_grad_(True)
        x2 = x.clone().requires_grad_(True)
        y1, y2 = fast(x1), plain(x2)
        self.assertEqual(tuple(y1.shape), tuple(y2.shape), what)
        close(self, y1, y2, what + " output")
        g = torch.randn(y1.shape, generator=torch.Generator().manual_seed(9))
        gp1 = torch.autograd.grad(y1, [x1] + params, g)
        gp2 = torch.autograd.grad(y2, [x2] + params, g)
        for i, (a, b) in enumerate(zip(gp1, gp2)):
            close(self, a, b, "%s gradient %d" % (what, i))

    def test_conv_same(self):
        torch.manual_seed(1)
        for k, stride, size in ((3, 1, 13), (3, 1, 16), (4, 2, 13), (4, 2, 16), (3, 2, 9), (1, 1, 5), (5, 3, 9)):
            m = nets.Conv2d({"in": 3, "out": 5, "kernel": k, "stride": stride, "padding": "same"})
            with torch.no_grad():
                m.bias.normal_()
            x = torch.randn(4, 3, size, size + 1)
            self.compare(m, lambda x: plain_conv2d(m, x), x, [m.weight, m.bias], "conv k=%d s=%d" % (k, stride))

    def test_conv_transpose_same(self):
        # both forms: the input gradient of a convolution (the CPU's) and F.conv_transpose2d (other devices')
        torch.manual_seed(2)
        for form in (True, False):
            for k, stride, size in ((4, 2, 4), (4, 2, 7), (3, 2, 5), (5, 2, 6), (2, 2, 3), (3, 1, 4)):
                m = nets.ConvTranspose2d({"in": 3, "out": 4, "kernel": k, "stride": stride, "padding": "same"})
                m.input_gradient_form = form
                with torch.no_grad():
                    m.bias.normal_()
                x = torch.randn(3, 3, size, size + 2)
                self.compare(m, lambda x: plain_conv_transpose2d(m, x), x, [m.weight, m.bias],
                             "transposed k=%d s=%d form %s" % (k, stride, form))

    def test_conv_transpose_with_crop(self):
        # the merged center crop, symmetric (the decoder's 32 -> 28) and not (odd margins), both forms
        torch.manual_seed(3)
        for form in (True, False):
            for k, stride, size, crop in ((4, 2, 16, (28, 28)), (4, 2, 4, (5, 7)), (3, 2, 5, (7, 9)), (4, 2, 3, (6, 6))):
                m = nets.ConvTranspose2d({"in": 2, "out": 3, "kernel": k, "stride": stride, "padding": "same"})
                m.crop = crop
                m.input_gradient_form = form
                with torch.no_grad():
                    m.bias.normal_()
                x = torch.randn(2, 2, size, size)
                self.compare(m, lambda x: plain_center_crop(plain_conv_transpose2d(m, x), *crop), x,
                             [m.weight, m.bias], "transposed k=%d s=%d crop %s form %s" % (k, stride, crop, form))
        m.crop = (2 * 3 + 1, 6)  # larger than the window: refused, not silently misplaced
        with self.assertRaises(ValueError):
            m(torch.randn(1, 2, 3, 3))

    def test_crop_merged_only_after_transposed(self):
        arch = nets.default_architecture(1, 28, 28, code_size=8, filters=8, groups=4)
        enc, dec = nets.build_networks(arch)
        ups = [s for s in dec.net.steps if isinstance(s, nets.ConvTranspose2d)]
        self.assertEqual([u.crop for u in ups], [None, None, (28, 28)])
        self.assertEqual(len(dec.net.steps), len(arch["decoder"]) - 1)
        layers = [{"type": "reshape", "shape": [2, 6, 6]}, {"type": "center_crop", "height": 4, "width": 4}]
        self.assertEqual(len(nets.Net(layers).steps), 2)

    def test_networks_against_plain(self):
        for shape in ((1, 28, 28), (3, 32, 32), (1, 24, 31)):
            arch = nets.default_architecture(*shape, code_size=6, filters=8, groups=4)
            torch.manual_seed(4)
            enc, dec = nets.build_networks(arch)
            torch.manual_seed(4)
            penc, pdec = PlainEncoder(arch), PlainDecoder(arch)
            penc.load_state_dict(enc.state_dict())
            pdec.load_state_dict(dec.state_dict())
            x = torch.rand(5, *shape)
            for a, b in zip(enc(x), penc(x)):
                close(self, a, b, "encoder %s" % (shape,))
            z = torch.randn(5, 6)
            close(self, dec(z), pdec(z), "decoder %s" % (shape,))


class VBProducts(unittest.TestCase):
    def test_rows_times_codes(self):
        g = torch.Generator().manual_seed(5)
        R = torch.randn(3, 4, 5, 7, generator=g, dtype=torch.float64)
        Z = torch.randn(3, 9, 7, generator=g, dtype=torch.float64)
        close(self, vb.rows_times_codes(R, Z), loop_rows_times_codes(R, Z), "R Z^T", rtol=1e-13, atol=1e-13)

    def test_weights_times_codes(self):
        g = torch.Generator().manual_seed(6)
        W = torch.randn(3, 4, 5, 9, generator=g, dtype=torch.float64)
        Z = torch.randn(3, 9, 7, generator=g, dtype=torch.float64)
        close(self, vb.weights_times_codes(W, Z), loop_weights_times_codes(W, Z), "W Z", rtol=1e-13, atol=1e-13)

    def test_expected_sqerr_and_address(self):
        g = torch.Generator().manual_seed(7)
        B, T, C, H, K = 2, 11, 6, 3, 4
        Z = torch.randn(B, T, C, generator=g, dtype=torch.float64)
        V = 0.1 + torch.rand(B, T, C, generator=g, dtype=torch.float64)
        cfg = vb.memory_defaults("mixture", C, K, H)
        mem = vb.init_memory(cfg, Z, g)
        A = torch.randn(B, H, K, K, generator=g, dtype=torch.float64)
        mem.U = 0.1 * A @ A.transpose(-1, -2) + 0.3 * torch.eye(K, dtype=torch.float64)
        d = vb.address(cfg, mem, Z, V)
        close(self, d["E"], plain_expected_sqerr(mem, Z, V, d["W"], d["Sw"]), "E (address)", rtol=1e-12, atol=1e-12)
        E = vb.expected_sqerr(cfg, mem, Z, V, d)
        close(self, E, d["E"], "E (own products)", rtol=1e-12, atol=1e-12)
        # the address means against a plain solve, per episode and cluster
        for b in range(B):
            for h in range(H):
                S = mem.R[b, h] @ mem.R[b, h].t() + C * mem.U[b, h]
                A = torch.eye(K, dtype=torch.float64) + S / cfg["sigma_z2"]
                rhs = (mem.R[b, h] @ Z[b].t() - (mem.R[b, h] @ mem.mu_b[b, h])[:, None]) / cfg["sigma_z2"]
                close(self, d["W"][b, h], torch.linalg.solve(A, rhs), "W", rtol=1e-12, atol=1e-12)


def train_steps(kind, enc, dec, steps, seed):
    """`steps` training steps as train/train.py takes them (same objective,
    Adam, clip), on random 28x28 images; returns the losses."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(4 * 12 * steps, 1, 28, 28), dtype=np.uint8)
    sampler = data.EpisodeSampler(images, 12, 4, seed)
    gen = torch.Generator().manual_seed(seed)
    cfg = vb.memory_defaults("mixture", 8, 3, 4)
    reg = {"eps": 0.1, "delta": 0.2, "alpha": 8, "beta": 8} if kind != "vae" else None
    params = list(enc.parameters()) + list(dec.parameters())
    opt = torch.optim.Adam(params, lr=5e-4, betas=(0.9 if kind == "vae" else 0.0, 0.999))
    losses = []
    for x in sampler.epoch():
        elbo, _ = objective.episode_elbo(kind, cfg, enc, dec, x, 4, gen, reg, True)
        loss = -elbo.mean() / 12
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 100.0)
        opt.step()
        losses.append(float(loss))
        if len(losses) == steps:
            break
    return losses


class Trajectory(unittest.TestCase):
    """A few steps of the whole trainer, new and plain formulations (networks
    and VB write) from the same seed: the losses and parameters agree to float32
    tolerance (rounding differs, nothing else)."""

    def run_both(self, kind):
        arch = nets.default_architecture(1, 28, 28, code_size=8, filters=8, groups=4)
        torch.manual_seed(11)
        enc, dec = nets.build_networks(arch)
        penc, pdec = PlainEncoder(arch), PlainDecoder(arch)
        penc.load_state_dict(enc.state_dict())
        pdec.load_state_dict(dec.state_dict())
        start = {k: v.clone() for k, v in enc.state_dict().items()}
        fast = train_steps(kind, enc, dec, 4, 3)
        rows, weights = vb.rows_times_codes, vb.weights_times_codes
        try:  # the plain VB products, for the plain run
            vb.rows_times_codes = lambda R, Z: R @ Z.transpose(1, 2)[:, None]
            vb.weights_times_codes = lambda Wt, Z: Wt @ Z[:, None]
            plain = train_steps(kind, penc, pdec, 4, 3)
        finally:
            vb.rows_times_codes, vb.weights_times_codes = rows, weights
        self.assertEqual(len(fast), 4)
        for i, (a, b) in enumerate(zip(fast, plain)):
            self.assertTrue(math.isfinite(a))
            self.assertLessEqual(abs(a - b), 1e-5 * abs(b), "%s loss at step %d: %r against %r" % (kind, i, a, b))
        pstate = dict(penc.state_dict(), **{"dec" + k: v for k, v in pdec.state_dict().items()})
        state = dict(enc.state_dict(), **{"dec" + k: v for k, v in dec.state_dict().items()})
        for k, v in state.items():
            close(self, v, pstate[k], "%s parameter %s" % (kind, k), rtol=1e-5, atol=2e-6)
        moved = [k for k, v in enc.state_dict().items() if float((v - start[k]).abs().max()) > 1e-4]
        self.assertEqual(len(moved), len(start))  # every parameter took steps of lr = 5e-4

    def test_memory_model(self):
        self.run_both("mixture")

    def test_vae(self):
        self.run_both("vae")


FAULTS = r"""
import resource, sys
sys.path.insert(0, sys.argv[1])
import torch
import train

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        x = torch.empty(16 * 2 ** 20)  # 64 MiB: above malloc's largest mmap threshold
        x.fill_(1.0)
        del x
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults()
old = faults()
applied = train.keep_freed_memory()
faults()  # the first block comes from the heap now: faulted in once
print(old, faults(), applied)
"""


class Allocator(unittest.TestCase):
    def test_keep_freed_memory(self):
        # a 64 MiB block freed and allocated again: by default mapped afresh each
        # time (a page fault per 4 KiB page touched), kept by malloc once applied
        import subprocess
        out = subprocess.run([sys.executable, "-c", FAULTS, os.path.join(ROOT, "train")], check=True,
                             capture_output=True, text=True).stdout.split()
        before, after, applied = int(out[0]), int(out[1]), out[2]
        self.assertEqual(applied, "True")
        self.assertGreater(before, 3 * 16 * 2 ** 20 * 4 // 4096 // 2, "the default faults in every block")
        self.assertLess(after, 1000, "kept memory is not faulted in again")


if __name__ == "__main__":
    unittest.main()
