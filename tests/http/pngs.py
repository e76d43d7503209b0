"""pngs.py -- owns the test-side image helpers of vbmemd's image tests: the Fashion-MNIST test set
(Debian's dataset-fashion-mnist IDX files), and a small PNG writer (every colour type, 1-16 bits) and
reader (8/16-bit grey, grey+alpha, RGB, RGBA; every filter) with Python's zlib and struct only."""
import base64
import gzip
import os
import struct
import zlib

FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def fashion_images(n, offset=0):
    """n test-set images as lists of 784 bytes (row-major 28x28)."""
    if not os.path.exists(FASHION):
        raise RuntimeError("%s is missing: apt-get install dataset-fashion-mnist" % FASHION)
    with gzip.open(FASHION, "rb") as f:
        magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
        assert magic == 2051 and rows == 28 and cols == 28, "not an IDX image file"
        assert offset + n <= count
        f.read(offset * 784)
        data = f.read(n * 784)
    return [data[i * 784:(i + 1) * 784] for i in range(n)]


def _chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xffffffff)


def png(width, height, rows, color_type=0, bit_depth=8, palette=None, trns=None):
    """A PNG of raw scanlines `rows` (bytes per row already packed for color_type/bit_depth), filter 0."""
    raw = b"".join(b"\x00" + r for r in rows)
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0))
    if palette is not None:
        out += _chunk(b"PLTE", b"".join(bytes(p) for p in palette))
    if trns is not None:
        out += _chunk(b"tRNS", trns)
    return out + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def grey_png(pixels, width=28, height=28):
    """An 8-bit greyscale PNG of width*height bytes."""
    return png(width, height, [bytes(pixels[y * width:(y + 1) * width]) for y in range(height)])


def b64(data):
    return base64.b64encode(data).decode()


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_png(data):
    """Decode a non-interlaced 8/16-bit PNG of colour type 0, 2, 4 or 6: (width, height, channels,
    bit_depth, rows as lists of samples)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad PNG signature"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xffffffff, "bad CRC in %r" % kind
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    assert interlace == 0 and depth in (8, 16) and ctype in (0, 2, 4, 6), ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    bpp = channels * depth // 8
    stride = w * bpp
    raw = zlib.decompress(idat)
    assert len(raw) == h * (stride + 1), "IDAT size"
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                line[i] = (line[i] + _paeth(a, b, c)) & 255
            else:
                assert ft == 0, "filter type %d" % ft
        prev = line
        if depth == 16:
            rows.append([line[2 * i] << 8 | line[2 * i + 1] for i in range(w * channels)])
        else:
            rows.append(list(line))
    return w, h, channels, depth, rows
