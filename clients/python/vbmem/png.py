"""PNG encoding and decoding with the standard library only (zlib and struct).

Writing: 8-bit greyscale or RGB. Reading: non-interlaced 8-bit greyscale, grey+alpha, RGB,
RGBA and palette images (every filter type); alpha is dropped. The client sends PNG files to
the server untouched (the server decodes PNGs itself); these helpers serve the images the
server returns and the contact sheets and strips of the command line.
"""
import struct
import zlib

__all__ = ["encode_png", "decode_png", "PngError"]

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


def decode_png(data):
    """Decode PNG bytes: returns (pixels, width, height, channels) with pixels the bytes of the
    image in HWC order, channels 1 (grey) or 3 (RGB; palette images are expanded), alpha dropped.
    Raises PngError for what it cannot read."""
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
    rgb = bytearray()
    for i in out:
        if 3 * i + 3 > len(palette):
            raise PngError("palette index %d out of range" % i)
        rgb += palette[3 * i:3 * i + 3]
    return bytes(rgb), width, height, 3
