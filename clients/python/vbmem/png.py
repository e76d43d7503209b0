"""PNG encoding and decoding with the standard library only (zlib and struct).

Writing: 8-bit greyscale or RGB. Reading: non-interlaced 8-bit greyscale, grey+alpha, RGB,
RGBA and palette images (every filter type); alpha is dropped, or kept by decode_png_rgba.
fit_png is the command line's (and the web page's, web/app.js fitPng) rule for image files:
a file the server takes as it is goes untouched, any other PNG is converted to the model's
shape (alpha over black, grey by luminance, a bilinear stretch) by the same arithmetic as the
page's. These helpers also serve the images the server returns and the contact sheets and
strips of the command line.
"""
import math
import struct
import zlib

__all__ = ["encode_png", "decode_png", "decode_png_rgba", "png_header", "fit_png", "PngError"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class PngError(ValueError):
    """A PNG this module cannot read (corrupt, interlaced, or not 8 bits per sample)."""


def _chunk(kind, body):
    return (struct.pack(">I", len(body)) + kind + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))


def encode_png(pixels, width, height, channels=1):
    """An 8-bit PNG (greyscale for channels=1, RGB for channels=3) of `pixels`: bytes (or any
    sequence of 0-255 integers) of height rows of width pixels, channels interleaved (HWC)."""
    if channels not in (1, 3):
        raise ValueError("channels must be 1 or 3, not %r" % (channels,))
    pixels = bytes(pixels)
    stride = width * channels
    if len(pixels) != stride * height:
        raise ValueError("%d bytes for a %dx%dx%d image" % (len(pixels), width, height, channels))
    raw = b"".join(b"\x00" + pixels[y * stride:(y + 1) * stride] for y in range(height))
    color_type = 0 if channels == 1 else 2
    return (_SIGNATURE
            + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b""))


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def png_header(data):
    """(width, height, bit depth, colour type, interlace) of PNG bytes from their IHDR; raises
    PngError when the bytes do not begin as a PNG does."""
    data = bytes(data[:33])
    if not data.startswith(_SIGNATURE) or len(data) < 33 or data[12:16] != b"IHDR":
        raise PngError("not a PNG file")
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", data[16:29])
    return width, height, depth, ctype, interlace


def decode_png(data):
    """Decode PNG bytes: returns (pixels, width, height, channels) with pixels the bytes of the
    image in HWC order, channels 1 (grey) or 3 (RGB; palette images are expanded), alpha dropped.
    Raises PngError for what it cannot read."""
    out, width, height, ctype, palette = _decode_rows(data)
    if ctype == 0:
        return bytes(out), width, height, 1
    if ctype == 4:
        return bytes(out[0::2]), width, height, 1
    if ctype == 2:
        return bytes(out), width, height, 3
    if ctype == 6:
        rgb = bytearray(width * height * 3)
        rgb[0::3], rgb[1::3], rgb[2::3] = out[0::4], out[1::4], out[2::4]
        return bytes(rgb), width, height, 3
    return _expand_palette(out, palette, 3), width, height, 3


def decode_png_rgba(data):
    """Decode PNG bytes (as decode_png reads them) into (rgba, width, height): 4 bytes a pixel,
    alpha 255 where the PNG has none (a palette's tRNS is not read)."""
    out, width, height, ctype, palette = _decode_rows(data)
    n = width * height
    rgba = bytearray(b"\xff" * (4 * n))
    if ctype == 0:
        rgba[0::4], rgba[1::4], rgba[2::4] = out, out, out
    elif ctype == 4:
        rgba[0::4] = rgba[1::4] = rgba[2::4] = out[0::2]
        rgba[3::4] = out[1::2]
    elif ctype == 2:
        rgba[0::4], rgba[1::4], rgba[2::4] = out[0::3], out[1::3], out[2::3]
    elif ctype == 6:
        rgba = bytearray(out)
    else:
        rgb = _expand_palette(out, palette, 3)
        rgba[0::4], rgba[1::4], rgba[2::4] = rgb[0::3], rgb[1::3], rgb[2::3]
    return bytes(rgba), width, height


def _expand_palette(out, palette, n):
    rgb = bytearray()
    for i in out:
        if 3 * i + 3 > len(palette):
            raise PngError("palette index %d out of range" % i)
        rgb += palette[3 * i:3 * i + n]
    return bytes(rgb)


def fit_png(data, width, height, channels=1):
    """The rule by which the command line and the web page send a PNG file to a model whose
    observations are channels x height x width: returns (png, how) with how None when the file
    goes untouched (a grey PNG without alpha, channels 1, or an RGB one, channels 3, at the
    model's size, any bit depth: the server reads it as it is), else a text saying what was
    converted; bytes that do not begin as a PNG does go untouched too (the server refuses
    them). Any other PNG must be 8-bit and non-interlaced (PngError otherwise) and is
    converted: alpha over black and, for one channel, grey by luminance, (299 R + 587 G +
    114 B) x A / 255000 (a grey pixel keeps its value; for three channels each colour x A /
    255); then stretched to width x height bilinearly (sample centres: source x = (x + 0.5) *
    sw / width - 0.5, clamped to the image), each value rounded half up once at the end; the
    page computes the same numbers in the same order."""
    try:
        sw, sh, depth, ctype, interlace = png_header(data)
    except PngError:  # not a PNG: the server's refusal names it
        return bytes(data), None
    kinds = {0: "grey", 2: "RGB", 3: "palette", 4: "grey+alpha", 6: "RGBA"}
    if sw == width and sh == height and ctype == (0 if channels == 1 else 2):
        return bytes(data), None
    if depth != 8 or interlace != 0:
        raise PngError("a %d-bit%s %s PNG of %dx%d needs converting to the model's %s %dx%d, and "
                       "only 8-bit non-interlaced PNGs are converted: convert it to 8 bits first"
                       % (depth, " interlaced" if interlace else "", kinds.get(ctype, "?"), sw, sh,
                          "grey" if channels == 1 else "RGB", width, height))
    rgba, sw, sh = decode_png_rgba(data)
    planes = []
    for c in ([None] if channels == 1 else [0, 1, 2]):
        src = []
        for i in range(0, len(rgba), 4):
            if c is None:  # (integers summed exactly, one division: a grey pixel stays itself)
                src.append((299 * rgba[i] + 587 * rgba[i + 1] + 114 * rgba[i + 2]) * rgba[i + 3] / 255000)
            else:
                src.append(rgba[i + c] * rgba[i + 3] / 255)
        planes.append(_stretch(src, sw, sh, width, height))
    if channels == 1:
        out = bytes(planes[0])
    else:
        out = bytearray(3 * width * height)
        out[0::3], out[1::3], out[2::3] = planes
        out = bytes(out)
    how = "%s %dx%d to %s %dx%d" % (kinds.get(ctype, "?"), sw, sh, "grey" if channels == 1 else "RGB",
                                    width, height)
    return encode_png(out, width, height, channels), how


def _axis(n_src, n_dst):
    """Per destination index: (i0, i1, f) of the bilinear stretch along one axis."""
    taps = []
    for x in range(n_dst):
        s = (x + 0.5) * n_src / n_dst - 0.5
        s = min(max(s, 0.0), n_src - 1.0)
        i0 = int(math.floor(s))
        taps.append((i0, min(i0 + 1, n_src - 1), s - i0))
    return taps


def _stretch(src, sw, sh, width, height):
    """src (sh x sw floats) stretched to height x width bytes (fit_png's arithmetic)."""
    out = bytearray(width * height)
    xs, ys = _axis(sw, width), _axis(sh, height)
    for y, (y0, y1, fy) in enumerate(ys):
        r0, r1 = y0 * sw, y1 * sw
        for x, (x0, x1, fx) in enumerate(xs):
            v = ((src[r0 + x0] * (1 - fx) + src[r0 + x1] * fx) * (1 - fy)
                 + (src[r1 + x0] * (1 - fx) + src[r1 + x1] * fx) * fy)
            out[y * width + x] = min(255, max(0, int(math.floor(v + 0.5))))
    return out


def _decode_rows(data):
    """The unfiltered image bytes of an 8-bit non-interlaced PNG: (bytes, width, height, colour
    type, palette)."""
    data = bytes(data)
    if not data.startswith(_SIGNATURE):
        raise PngError("not a PNG file")
    pos, idat, palette, header = 8, [], None, None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if len(body) != length:
            raise PngError("truncated PNG chunk")
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = body
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None or not idat:
        raise PngError("PNG without IHDR or IDAT")
    width, height, depth, ctype, _, _, interlace = header
    if depth != 8 or interlace != 0:
        raise PngError("only non-interlaced 8-bit PNGs are read (bit depth %d, interlace %d)"
                       % (depth, interlace))
    samples = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(ctype)
    if samples is None:
        raise PngError("unknown PNG colour type %d" % ctype)
    if ctype == 3 and palette is None:
        raise PngError("palette PNG without PLTE")
    try:
        raw = zlib.decompress(b"".join(idat))
    except zlib.error as e:
        raise PngError("corrupt PNG data: %s" % e) from None
    stride = width * samples
    if len(raw) < (stride + 1) * height:
        raise PngError("truncated PNG image data")
    out = bytearray(stride * height)
    prev = bytearray(stride)
    bpp = samples
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                upleft = prev[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + _paeth(left, prev[i], upleft)) & 0xFF
        elif f != 0:
            raise PngError("unknown PNG filter %d" % f)
        out[y * stride:(y + 1) * stride] = line
        prev = line
    return out, width, height, ctype, palette
