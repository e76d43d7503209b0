"""data.py -- datasets as uint8 image arrays, and episodes drawn without
replacement with the dequantization of App. E.2."""
import gzip
import os
import struct

import numpy as np
import torch

FASHION_DIRS = ["/usr/share/datasets/fashion-mnist"]


def read_idx(path):
    """An IDX file (optionally gzipped) as a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError("%s: not an IDX file" % path)
    dtype = {0x08: np.uint8}.get(data[2])
    if dtype is None:
        raise ValueError("%s: unsupported IDX element type 0x%02x" % (path, data[2]))
    nd = data[3]
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    arr = np.frombuffer(data, dtype=dtype, offset=4 + 4 * nd)
    if arr.size != int(np.prod(dims)):
        raise ValueError("%s: %d elements for shape %s" % (path, arr.size, dims))
    return arr.reshape(dims)


def _find(dirname, stem):
    for suffix in ("", ".gz"):
        p = os.path.join(dirname, stem + suffix)
        if os.path.exists(p):
            return p
    raise FileNotFoundError("%s{,.gz} not found in %s" % (stem, dirname))


def load_mnist_like(dirname, split):
    """MNIST / Fashion-MNIST IDX files -> uint8 array (N, 1, 28, 28)."""
    stem = "train-images-idx3-ubyte" if split == "train" else "t10k-images-idx3-ubyte"
    x = read_idx(_find(dirname, stem))
    return x[:, None, :, :]


def load_cifar_binary(dirname, split):
    """CIFAR-10 binary version (data_batch_*.bin / test_batch.bin) -> (N, 3, 32, 32)."""
    names = ["data_batch_%d.bin" % i for i in range(1, 6)] if split == "train" else ["test_batch.bin"]
    parts = []
    for n in names:
        raw = np.fromfile(os.path.join(dirname, n), dtype=np.uint8).reshape(-1, 3073)
        parts.append(raw[:, 1:].reshape(-1, 3, 32, 32))
    return np.concatenate(parts)


def load_png_folder(dirname, split):
    """A folder with train/ and test/ subfolders of same-sized PNG images."""
    import zlib  # noqa: F401  (PNG decoding below uses only the standard library)
    sub = os.path.join(dirname, split)
    files = sorted(f for f in os.listdir(sub) if f.lower().endswith(".png"))
    if not files:
        raise FileNotFoundError("no PNG files in %s" % sub)
    imgs = [_read_png(os.path.join(sub, f)) for f in files]
    shape = imgs[0].shape
    for f, im in zip(files, imgs):
        if im.shape != shape:
            raise ValueError("%s: shape %s differs from %s" % (f, im.shape, shape))
    return np.stack(imgs)


def _read_png(path):
    """8-bit grey/RGB/RGBA non-interlaced PNG -> (channels, h, w) uint8."""
    import zlib
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("%s: not a PNG" % path)
    pos, idat, w = 8, b"", None
    while pos < len(data):
        ln, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + ln]
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, inter = struct.unpack(">IIBBBBB", body)
            if depth != 8 or inter != 0 or ctype not in (0, 2, 6):
                raise ValueError("%s: only 8-bit non-interlaced grey/RGB/RGBA PNG" % path)
        elif typ == b"IDAT":
            idat += body
        pos += 12 + ln
    ch = {0: 1, 2: 3, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = w * ch
    out = np.zeros((h, stride), dtype=np.int32)
    prev = np.zeros(stride, dtype=np.int32)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=y * (stride + 1) + 1).astype(np.int32)
        cur = np.zeros(stride, dtype=np.int32)
        for i in range(stride):
            a = cur[i - ch] if i >= ch else 0
            b = prev[i]
            c = prev[i - ch] if i >= ch else 0
            if ft == 0:
                p = 0
            elif ft == 1:
                p = a
            elif ft == 2:
                p = b
            elif ft == 3:
                p = (a + b) // 2
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[i] = (line[i] + p) & 255
        out[y] = cur
        prev = cur
    img = out.reshape(h, w, ch).astype(np.uint8)
    return np.ascontiguousarray(img[:, :, :3 if ch == 4 else ch].transpose(2, 0, 1))


OMNIGLOT_SPLITS = {"train": "images_background", "test": "images_evaluation"}


def load_omniglot(root, split, size=28, limit=0):
    """Omniglot (Lake et al. 2015) -> uint8 (N, 1, size, size), strokes bright
    (255) on a dark background. root: the folder with images_background/ and
    images_evaluation/ (30 and 20 alphabets, 105 x 105 1-bit PNGs), or a
    .tar.gz of them, or a folder holding omniglot.tar.gz. train = the
    background alphabets (19,280 images), test = the evaluation ones (13,180),
    in sorted path order; each image is inverted and area-averaged to size x
    size (PIL's box filter). limit > 0 reads only the first `limit` images.
    Raises FileNotFoundError when nothing is there, ValueError on a bad split."""
    from PIL import Image
    import io
    import tarfile
    if split not in OMNIGLOT_SPLITS:
        raise ValueError("omniglot split must be train or test, not %r" % (split,))
    prefix = OMNIGLOT_SPLITS[split] + "/"
    if os.path.isdir(root) and os.path.isfile(os.path.join(root, "omniglot.tar.gz")) \
            and not os.path.isdir(os.path.join(root, OMNIGLOT_SPLITS[split])):
        root = os.path.join(root, "omniglot.tar.gz")

    def convert(f):
        im = Image.open(f).convert("L").resize((size, size), Image.BOX)
        return 255 - np.asarray(im, dtype=np.uint8)

    imgs = []
    if os.path.isfile(root):
        with tarfile.open(root) as t:
            members = sorted((m for m in t if m.isfile() and m.name.startswith(prefix)
                              and m.name.lower().endswith(".png")), key=lambda m: m.name)
            for m in members[:limit or None]:
                imgs.append(convert(io.BytesIO(t.extractfile(m).read())))
    else:
        base = os.path.join(root, OMNIGLOT_SPLITS[split])
        paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(base) for f in fs if f.lower().endswith(".png"))
        for p in paths[:limit or None]:
            with open(p, "rb") as f:
                imgs.append(convert(f))
    if not imgs:
        raise FileNotFoundError("no Omniglot %s images under %s" % (prefix, root))
    return np.stack(imgs)[:, None, :, :]


def load_dataset(name, root, split, limit=0):
    """uint8 images (N, channels, h, w) of a named dataset under root; limit > 0:
    at most the first `limit` (Omniglot then decodes only those)."""
    if limit:
        if name == "omniglot":
            if root is None:
                raise FileNotFoundError("omniglot needs --data-root (its folder or omniglot.tar.gz)")
            return load_omniglot(root, split, limit=limit)
        return load_dataset(name, root, split)[:limit]
    if name in ("fashion-mnist", "mnist"):
        if root is None and name == "fashion-mnist":
            root = next((d for d in FASHION_DIRS if os.path.isdir(d)), None)
        if root is None:
            raise FileNotFoundError("no directory for %s (apt-get install dataset-fashion-mnist, or --data-root)" % name)
        return load_mnist_like(root, split)
    if name == "cifar10":
        return load_cifar_binary(root, split)
    if name == "png":
        return load_png_folder(root, split)
    if name == "omniglot":
        if root is None:
            raise FileNotFoundError("omniglot needs --data-root (its folder or omniglot.tar.gz)")
        return load_omniglot(root, split)
    raise ValueError("unknown dataset %r" % name)


class EpisodeSampler:
    """Episodes of T frames drawn without replacement from the dataset, regenerated
    at every pass ('epoch', App. E.2); batches of B episodes as float tensors in
    [0, 1) with uniform dequantization noise of width 1/256 added each draw."""

    def __init__(self, images, T, B, seed, device="cpu", dequantize=True):
        self.images = torch.from_numpy(np.array(images, copy=True)).to(device)
        self.T, self.B = T, B
        self.gen = torch.Generator(device="cpu")
        self.gen.manual_seed(seed)
        self.dgen = torch.Generator(device=device)
        self.dgen.manual_seed(seed + 1)
        self.device = device
        self.dequantize = dequantize
        self.epoch_start_state = self.gen.get_state().clone()

    def episodes_per_epoch(self):
        return self.images.shape[0] // self.T

    def to_float(self, idx):
        x = self.images[idx].to(torch.float32)
        if self.dequantize:
            x = x + torch.rand(x.shape, generator=self.dgen, device=self.device)
        else:
            x = x + 0.5
        return x / 256.0

    def state(self, next_pass=False):
        """The generators' states, for a checkpoint: the episode order's as it was
        when the current pass began (its permutation is drawn again on resume;
        next_pass: as it is now, for a checkpoint between passes) and the
        dequantization noise's as it is now."""
        order = self.gen.get_state() if next_pass else self.epoch_start_state
        return {"order": order.clone(), "noise": self.dgen.get_state().clone()}

    def epoch(self, shuffle=True, skip=0, state=None):
        """Yield (B, T, ch, h, w) batches covering one pass (a last partial batch too).
        Resuming: state (from state()) restores the generators and the pass
        starts after its first `skip` batches, drawing no noise for them."""
        if state is not None:
            self.gen.set_state(state["order"])
        self.epoch_start_state = self.gen.get_state().clone()
        n = self.images.shape[0]
        perm = torch.randperm(n, generator=self.gen) if shuffle else torch.arange(n)
        if state is not None:
            self.dgen.set_state(state["noise"])
        E = n // self.T
        perm = perm[:E * self.T].reshape(E, self.T).to(self.device)
        for i in range(skip * self.B, E, self.B):
            idx = perm[i:i + self.B]
            x = self.to_float(idx.reshape(-1))
            yield x.reshape(idx.shape[0], self.T, *x.shape[1:])
