"""nets.py -- the encoder/decoder of App. F built from the layer list of
proto/model-format.md, and reading/writing vbmem model files (safetensors)."""
import datetime
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

FORMAT_VERSION = "1"


# ---------------------------------------------------------------- architecture

def _res_block(name, ch, groups, act):
    """Residual block without bottleneck (He et al. 2016), pre-activation with
    group normalisation (F.2.1): x + conv(act(gn(conv(act(gn(x))))))."""
    return {"type": "residual", "body": [
        {"type": "group_norm", "name": name + ".gn1", "groups": groups, "channels": ch, "eps": 1e-5},
        {"type": act},
        {"type": "conv2d", "name": name + ".conv1", "in": ch, "out": ch, "kernel": 3, "stride": 1,
         "padding": "same"},
        {"type": "group_norm", "name": name + ".gn2", "groups": groups, "channels": ch, "eps": 1e-5},
        {"type": act},
        {"type": "conv2d", "name": name + ".conv2", "in": ch, "out": ch, "kernel": 3, "stride": 1,
         "padding": "same"},
    ]}


def default_architecture(channels=1, height=28, width=28, code_size=64, filters=32, groups=8,
                         likelihood="gaussian", act="swish", blocks=3, head="bounded"):
    """The improved architecture of App. F.2.1 (group norm, Swish-1, decoder residual
    blocks before each transposed convolution) for images of the given shape.
    Encoder: `blocks` x [conv 4x4 stride 2 'valid', residual block], flatten,
    dense to 2C, then the two-layer MLP of F.1.1 (widths 2C). Decoder: dense to
    F x s x s, `blocks` x [residual block, transposed conv 4x4 stride 2 'same'],
    center crop, act, 1x1 heads. head (gaussian only): "bounded" gives mean =
    sigmoid(raw) and scale = 0.005 + 0.5 sigmoid(raw') (bounded both ways);
    "softplus" the unbounded mean and scale = softplus(raw') + 0.001 of the
    first bundled model."""
    if head not in ("bounded", "softplus"):
        raise ValueError("head must be 'bounded' or 'softplus', not %r" % (head,))
    enc = []
    h, w, ch = height, width, channels
    for i in range(blocks):
        enc.append({"type": "conv2d", "name": "enc.down%d" % i, "in": ch, "out": filters, "kernel": 4,
                    "stride": 2, "padding": "valid"})
        h, w, ch = (h - 4) // 2 + 1, (w - 4) // 2 + 1, filters
        if h < 1 or w < 1:
            raise ValueError("image too small for %d downsampling blocks" % blocks)
        enc.append(_res_block("enc.res%d" % i, ch, groups, act))
    enc.append({"type": "flatten"})
    enc.append({"type": "dense", "name": "enc.proj", "in": ch * h * w, "out": 2 * code_size})
    enc.append({"type": "dense", "name": "enc.mlp0", "in": 2 * code_size, "out": 2 * code_size})
    enc.append({"type": "relu"})
    enc.append({"type": "dense", "name": "enc.mlp1", "in": 2 * code_size, "out": 2 * code_size})

    s = max(1, math.ceil(max(height, width) / 2 ** blocks))
    dec = [{"type": "dense", "name": "dec.proj", "in": code_size, "out": filters * s * s},
           {"type": "reshape", "shape": [filters, s, s]}]
    for i in range(blocks):
        dec.append(_res_block("dec.res%d" % i, filters, groups, act))
        dec.append({"type": "conv_transpose2d", "name": "dec.up%d" % i, "in": filters, "out": filters,
                    "kernel": 4, "stride": 2, "padding": "same"})
        s *= 2
    dec.append({"type": "center_crop", "height": height, "width": width})
    dec.append({"type": act})
    out_ch = 2 * channels if likelihood == "gaussian" else channels
    obs = {"channels": channels, "height": height, "width": width, "likelihood": likelihood, "min_scale": 1e-3}
    if likelihood == "gaussian" and head == "bounded":
        obs.update({"min_scale": 5e-3, "mean": "sigmoid", "scale_max": 0.5})
    dec.append({"type": "conv2d", "name": "dec.head", "in": filters, "out": out_ch, "kernel": 1, "stride": 1,
                "padding": "valid"})
    return {"observation": obs,
            "code_size": code_size, "log_sigma_min": -9.0, "log_sigma_max": 4.0,
            "encoder": enc, "decoder": dec}


# ---------------------------------------------------------------- modules

def _same_pad(size, k, stride):
    out = -(-size // stride)
    p = max((out - 1) * stride + k - size, 0)
    return p // 2, p - p // 2


class Conv2d(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.k, self.stride, self.padding = spec["kernel"], spec["stride"], spec["padding"]
        self.weight = nn.Parameter(torch.empty(spec["out"], spec["in"], self.k, self.k))
        self.bias = nn.Parameter(torch.zeros(spec["out"]))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x):
        if self.padding == "same":
            ph = _same_pad(x.shape[2], self.k, self.stride)
            pw = _same_pad(x.shape[3], self.k, self.stride)
            if ph[0] == ph[1] and pw[0] == pw[1]:
                # symmetric: the convolution pads by itself (no padded copy, no pad backward)
                return F.conv2d(x, self.weight, self.bias, stride=self.stride, padding=(ph[0], pw[0]))
            x = F.pad(x, (pw[0], pw[1], ph[0], ph[1]))
        return F.conv2d(x, self.weight, self.bias, stride=self.stride)


class TransposedConvolution(torch.autograd.Function):
    """conv_transpose2d (stride, padding; no dilation, one group) computed as
    what it is, the input gradient of the ordinary convolution whose weight it
    shares, and its backward as that convolution and its weight gradient. The
    same sums as F.conv_transpose2d; on the CPU this takes oneDNN's kernels
    for whole batches where PyTorch's own transposed convolution (1.13) runs
    an unfold and a small matrix product per image (two to three times the
    time of a step's largest layer)."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        ctx.save_for_backward(x, weight)
        ctx.stride, ctx.padding = stride, padding
        k = weight.shape[2:]
        size = [x.shape[0], weight.shape[1]] + [(x.shape[2 + i] - 1) * stride[i] - 2 * padding[i] + k[i]
                                                for i in (0, 1)]
        # only the shape of the convolution's input is read
        y = torch.ops.aten.convolution_backward(x, x.new_empty(size), weight, None, list(stride), list(padding),
                                                [1, 1], False, [0, 0], 1, [True, False, False])[0]
        return y + bias[:, None, None]

    @staticmethod
    def backward(ctx, gy):
        x, weight = ctx.saved_tensors
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = F.conv2d(gy, weight, None, stride=ctx.stride, padding=ctx.padding)
        if ctx.needs_input_grad[1]:
            gw = torch.ops.aten.convolution_backward(x, gy, weight, None, list(ctx.stride), list(ctx.padding),
                                                     [1, 1], False, [0, 0], 1, [False, True, False])[1]
        if ctx.needs_input_grad[2]:
            gb = gy.sum((0, 2, 3))
        return gx, gw, gb, None, None


class ConvTranspose2d(nn.Module):
    # weight is (in, out, k, k); FooVB (research/foovb.py) reads this flag to group the bias correctly
    transposed = True

    def __init__(self, spec):
        super().__init__()
        self.k, self.stride, self.padding = spec["kernel"], spec["stride"], spec["padding"]
        self.weight = nn.Parameter(torch.empty(spec["in"], spec["out"], self.k, self.k))
        self.bias = nn.Parameter(torch.zeros(spec["out"]))
        nn.init.xavier_uniform_(self.weight)
        self.crop = None  # (height, width) of a center_crop layer merged into this one (Net)
        # on the CPU, TransposedConvolution; elsewhere (or False) F.conv_transpose2d
        self.input_gradient_form = True

    def window(self, size, crop):
        """(first, count) of the output rows (or columns) this layer returns, within
        the full transposed convolution of an input of `size` rows: the 'same'
        window (size * stride), then the centre `crop` of it if set."""
        first, count = 0, (size - 1) * self.stride + self.k
        if self.padding == "same":
            first, count = max(self.k - self.stride, 0) // 2, size * self.stride
        if crop is not None:
            if not 0 < crop <= count:
                raise ValueError("center crop of %d rows from a transposed convolution output of %d" % (crop, count))
            first, count = first + (count - crop) // 2, crop
        return first, count

    def forward(self, x):
        t, h = self.window(x.shape[2], self.crop[0] if self.crop else None)
        l, w = self.window(x.shape[3], self.crop[1] if self.crop else None)
        # the rows and columns before the window (never more than those after it) are
        # left out by the convolution itself, its `padding`, which leaves out as many
        # after it: those outputs are never computed, and no crop's backward fills
        # a full-size gradient with zeros; what remains after the window is sliced
        if self.input_gradient_form and x.device.type == "cpu":
            y = TransposedConvolution.apply(x, self.weight, self.bias, (self.stride, self.stride), (t, l))
        else:
            y = F.conv_transpose2d(x, self.weight, self.bias, stride=self.stride, padding=(t, l))
        if y.shape[2] != h or y.shape[3] != w:
            y = y[:, :, :h, :w]
        return y


class Dense(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(spec["out"], spec["in"]))
        self.bias = nn.Parameter(torch.zeros(spec["out"]))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class GroupNorm(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.groups, self.eps = spec["groups"], spec["eps"]
        self.weight = nn.Parameter(torch.ones(spec["channels"]))
        self.bias = nn.Parameter(torch.zeros(spec["channels"]))

    def forward(self, x):
        return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class Net(nn.Module):
    """A sequence of layers from a layer list; parameters are registered under the
    layers' names so state_dict() keys are '<name>.weight' / '<name>.bias'."""

    def __init__(self, layers, registry=None):
        super().__init__()
        top = registry is None
        self.registry = nn.ModuleDict() if top else None
        reg = self.registry if top else registry
        self.steps = []
        for spec in layers:
            prev = self.steps[-1] if self.steps else None
            if spec["type"] == "center_crop" and isinstance(prev, ConvTranspose2d) and prev.crop is None:
                # a crop right after a transposed convolution: that layer computes only the crop
                prev.crop = (spec["height"], spec["width"])
                continue
            self.steps.append(_build(spec, reg))

    def forward(self, x):
        for step in self.steps:
            x = step(x)
        return x


def _build(spec, reg):
    t = spec["type"]
    if t in ("conv2d", "conv_transpose2d", "dense", "group_norm"):
        cls = {"conv2d": Conv2d, "conv_transpose2d": ConvTranspose2d, "dense": Dense, "group_norm": GroupNorm}[t]
        mod = cls(spec)
        reg[spec["name"].replace(".", "__")] = mod
        return mod
    if t == "relu":
        return F.relu
    if t == "swish":
        return F.silu  # x * sigmoid(x), one fused operation forward and backward
    if t == "sigmoid":
        return torch.sigmoid
    if t == "flatten":
        return lambda x: x.reshape(x.shape[0], -1)
    if t == "reshape":
        shape = tuple(spec["shape"])
        return lambda x: x.reshape((x.shape[0],) + shape)
    if t == "center_crop":
        hh, ww = spec["height"], spec["width"]

        def crop(x):
            t0 = (x.shape[2] - hh) // 2
            l0 = (x.shape[3] - ww) // 2
            return x[:, :, t0:t0 + hh, l0:l0 + ww]
        return crop
    if t == "residual":
        body = Net(spec["body"], reg)
        return Residual(body)
    raise ValueError("unknown layer type %r" % t)


def _he_init_residuals(layers, reg):
    """He initialisation for the convolutions inside residual blocks (F.1.1)."""
    for spec in layers:
        if spec["type"] == "residual":
            for inner in spec["body"]:
                if inner["type"] == "conv2d":
                    nn.init.kaiming_normal_(reg[inner["name"].replace(".", "__")].weight, nonlinearity="relu")
            _he_init_residuals(spec["body"], reg)


class Encoder(nn.Module):
    """image (N, ch, h, w) in [0,1) -> (mu, log_sigma), each (N, C)."""

    def __init__(self, arch):
        super().__init__()
        self.net = Net(arch["encoder"])
        _he_init_residuals(arch["encoder"], self.net.registry)
        self.C = arch["code_size"]
        self.lo, self.hi = arch["log_sigma_min"], arch["log_sigma_max"]

    def forward(self, x):
        out = self.net(x)
        return out[:, :self.C], out[:, self.C:].clamp(self.lo, self.hi)


class Decoder(nn.Module):
    """code (N, C) -> likelihood parameters (N, P, h, w)."""

    def __init__(self, arch):
        super().__init__()
        self.net = Net(arch["decoder"])
        _he_init_residuals(arch["decoder"], self.net.registry)
        obs = arch["observation"]
        self.likelihood = obs["likelihood"]
        self.channels = obs["channels"]
        self.min_scale = obs.get("min_scale", 1e-3)
        self.sigmoid_mean = obs.get("mean", "identity") == "sigmoid"
        self.scale_max = obs.get("scale_max")  # None: softplus scale

    def forward(self, z):
        return self.net(z)

    def params(self, out):
        """(mean, scale) for gaussian, (probabilities, None) for bernoulli."""
        if self.likelihood == "gaussian":
            mean, raw = out[:, :self.channels], out[:, self.channels:]
            if self.sigmoid_mean:
                mean = torch.sigmoid(mean)
            if self.scale_max is not None:
                return mean, self.scale_max * torch.sigmoid(raw) + self.min_scale
            return mean, F.softplus(raw) + self.min_scale
        return torch.sigmoid(out), None

    def log_prob(self, out, x):
        """Sum over pixels of log p(x | z), one value per image."""
        if self.likelihood == "gaussian":
            mean, scale = self.params(out)
            lp = -0.5 * ((x - mean) / scale) ** 2 - torch.log(scale) - 0.5 * math.log(2 * math.pi)
        else:
            lp = -F.binary_cross_entropy_with_logits(out, x, reduction="none")
        return lp.reshape(lp.shape[0], -1).sum(1)


def build_networks(arch):
    """(encoder, decoder) modules that follow the architecture's layer lists."""
    return Encoder(arch), Decoder(arch)


def named_tensors(encoder, decoder):
    """{tensor name in the model file: tensor} for both networks."""
    out = {}
    for net in (encoder.net, decoder.net):
        for key, mod in net.registry.items():
            name = key.replace("__", ".")
            out[name + ".weight"] = mod.weight.detach()
            out[name + ".bias"] = mod.bias.detach()
    return out


# ---------------------------------------------------------------- safetensors

def write_safetensors(path, tensors, metadata):
    """Write float32 tensors (name -> torch tensor) and string metadata."""
    header = {"__metadata__": metadata}
    blobs, off = [], 0
    for name in sorted(tensors):
        a = tensors[name].detach().to("cpu", torch.float32).contiguous()
        b = a.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """(tensors: name -> float32 torch tensor, metadata: dict of str)."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, d in header.items():
        if d["dtype"] != "F32":
            raise ValueError("tensor %s: dtype %s unsupported" % (name, d["dtype"]))
        b, e = d["data_offsets"]
        arr = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(d["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


def save_model(path, encoder, decoder, arch, memory, provenance):
    """Write a vbmem model file (proto/model-format.md)."""
    prov = dict(provenance)
    prov.setdefault("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    prov.setdefault("torch", torch.__version__)
    meta = {"vbmem.format": "vbmem-model", "vbmem.format_version": FORMAT_VERSION,
            "vbmem.architecture": json.dumps(arch), "vbmem.memory": json.dumps(memory),
            "vbmem.provenance": json.dumps(prov)}
    write_safetensors(path, named_tensors(encoder, decoder), meta)


def load_model(path, map_location="cpu"):
    """(encoder, decoder, arch, memory, provenance) from a vbmem model file."""
    tensors, meta = read_safetensors(path)
    if meta.get("vbmem.format") != "vbmem-model":
        raise ValueError("%s is not a vbmem model file" % path)
    arch = json.loads(meta["vbmem.architecture"])
    memory = json.loads(meta["vbmem.memory"])
    prov = json.loads(meta["vbmem.provenance"])
    enc, dec = build_networks(arch)
    with torch.no_grad():
        for net in (enc.net, dec.net):
            for key, mod in net.registry.items():
                name = key.replace("__", ".")
                mod.weight.copy_(tensors[name + ".weight"])
                mod.bias.copy_(tensors[name + ".bias"])
    return enc.to(map_location), dec.to(map_location), arch, memory, prov
