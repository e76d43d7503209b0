/**
 * vbmem/png: the client's PNG codec: 8-bit grey or RGB images written with stored (uncompressed)
 * deflate blocks, and PNG files read back into pixels (encodePng, pngInfo and decodePng are
 * re-exported by index.js).
 * @module vbmem/png
 */

import { fromBase64, asBytes } from "./base64.js";
import { VbmemError } from "./errors.js";

// --------------------------------------------------------------------------------------- PNG

const PNG_SIG = [137, 80, 78, 71, 13, 10, 26, 10];
let CRC_TABLE = null;

function crc32(bytes, start, end) {
  if (!CRC_TABLE) {
    CRC_TABLE = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      CRC_TABLE[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (let i = start; i < end; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/**
 * An 8-bit PNG (greyscale for channels 1, RGB for 3, RGBA for 4) of `pixels`, height rows of
 * width pixels with the channels interleaved (HWC). Written synchronously with stored (not
 * compressed) deflate blocks, so it needs no zlib: fine for the small images of vbmem.
 * @param {Uint8Array|ArrayLike<number>} pixels
 * @param {number} width
 * @param {number} height
 * @param {1|3|4} [channels]
 * @returns {Uint8Array} the PNG file's bytes
 */
export function encodePng(pixels, width, height, channels = 1) {
  if (![1, 3, 4].includes(channels)) throw new RangeError(`channels must be 1, 3 or 4, not ${channels}`);
  const stride = width * channels;
  if (pixels.length !== stride * height) {
    throw new RangeError(`${pixels.length} bytes for a ${width}x${height}x${channels} image`);
  }
  const raw = new Uint8Array((stride + 1) * height);
  for (let y = 0; y < height; y++) {
    raw[y * (stride + 1)] = 0;
    for (let x = 0; x < stride; x++) raw[y * (stride + 1) + 1 + x] = pixels[y * stride + x];
  }
  // zlib stream of stored blocks (<= 65535 bytes each) and the Adler-32 of raw
  const nblocks = Math.max(1, Math.ceil(raw.length / 65535));
  const z = new Uint8Array(2 + raw.length + 5 * nblocks + 4);
  z[0] = 0x78; z[1] = 0x01;
  let p = 2;
  for (let b = 0; b < nblocks; b++) {
    const off = b * 65535;
    const len = Math.min(65535, raw.length - off);
    z[p++] = b === nblocks - 1 ? 1 : 0;
    z[p++] = len & 0xff; z[p++] = len >>> 8;
    z[p++] = ~len & 0xff; z[p++] = (~len >>> 8) & 0xff;
    z.set(raw.subarray(off, off + len), p);
    p += len;
  }
  let a = 1, bsum = 0;
  for (let i = 0; i < raw.length; i++) { a = (a + raw[i]) % 65521; bsum = (bsum + a) % 65521; }
  const adler = ((bsum << 16) | a) >>> 0;
  z[p++] = adler >>> 24; z[p++] = (adler >>> 16) & 0xff; z[p++] = (adler >>> 8) & 0xff; z[p++] = adler & 0xff;
  const colorType = channels === 1 ? 0 : channels === 3 ? 2 : 6;
  const ihdr = new Uint8Array(13);
  const dv = new DataView(ihdr.buffer);
  dv.setUint32(0, width); dv.setUint32(4, height);
  ihdr.set([8, colorType, 0, 0, 0], 8);
  const chunks = [["IHDR", ihdr], ["IDAT", z.subarray(0, p)], ["IEND", new Uint8Array(0)]];
  const total = 8 + chunks.reduce((n, [, body]) => n + 12 + body.length, 0);
  const out = new Uint8Array(total);
  out.set(PNG_SIG, 0);
  let q = 8;
  for (const [kind, body] of chunks) {
    const odv = new DataView(out.buffer);
    odv.setUint32(q, body.length);
    for (let i = 0; i < 4; i++) out[q + 4 + i] = kind.charCodeAt(i);
    out.set(body, q + 8);
    odv.setUint32(q + 8 + body.length, crc32(out, q + 4, q + 8 + body.length));
    q += 12 + body.length;
  }
  return out;
}

/**
 * The header of PNG bytes: width, height, bit depth, colour type, and the channels vbmem
 * decodes it to (1 for grey and grey+alpha, 3 for RGB, RGBA and palette).
 * @param {Uint8Array} png
 * @returns {{width: number, height: number, bitDepth: number, colorType: number, channels: number}}
 */
export function pngInfo(png) {
  const u8 = asBytes(png);
  if (u8.length < 33 || PNG_SIG.some((v, i) => u8[i] !== v)) throw new VbmemError({ detail: "not a PNG file" });
  const dv = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  const colorType = u8[25];
  return { width: dv.getUint32(16), height: dv.getUint32(20), bitDepth: u8[24], colorType,
           channels: colorType === 0 || colorType === 4 ? 1 : 3 };
}

async function inflate(bytes) {
  if (typeof DecompressionStream !== "function") {
    throw new VbmemError({ detail: "reading PNG pixels needs DecompressionStream (Node 18+, current browsers); ask for format \"uint8\"" });
  }
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function paeth(a, b, c) {
  const p = a + b - c;
  const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
  if (pa <= pb && pa <= pc) return a;
  return pb <= pc ? b : c;
}

/**
 * Decode PNG bytes (non-interlaced, 8-bit grey, grey+alpha, RGB, RGBA or palette; every filter)
 * into {pixels, width, height, channels}: pixels HWC, channels 1 (grey) or 3 (RGB; palette
 * expanded), alpha dropped. Asynchronous: it inflates with DecompressionStream.
 * @param {Uint8Array|ArrayBuffer|string} png PNG bytes, base64 or a data: URL
 * @returns {Promise<{pixels: Uint8Array, width: number, height: number, channels: number}>}
 */
export async function decodePng(png) {
  const u8 = typeof png === "string" ? fromBase64(png) : asBytes(png);
  const { width, height, bitDepth, colorType } = pngInfo(u8);
  const dv = new DataView(u8.buffer, u8.byteOffset, u8.byteLength);
  if (bitDepth !== 8 || u8[28] !== 0) throw new VbmemError({ detail: "only non-interlaced 8-bit PNGs are read" });
  const idat = [];
  let palette = null;
  for (let pos = 8; pos + 8 <= u8.length;) {
    const len = dv.getUint32(pos);
    const kind = String.fromCharCode(u8[pos + 4], u8[pos + 5], u8[pos + 6], u8[pos + 7]);
    const body = u8.subarray(pos + 8, pos + 8 + len);
    if (kind === "IDAT") idat.push(body);
    else if (kind === "PLTE") palette = body;
    else if (kind === "IEND") break;
    pos += 12 + len;
  }
  const spp = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 }[colorType];
  if (!spp) throw new VbmemError({ detail: `PNG colour type ${colorType} is not read` });
  const raw = await inflate(idat.length === 1 ? idat[0] : concat(idat));
  const stride = width * spp;
  if (raw.length < (stride + 1) * height) throw new VbmemError({ detail: "PNG image data is short" });
  const rows = new Uint8Array(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)];
    const src = y * (stride + 1) + 1, dst = y * stride;
    for (let x = 0; x < stride; x++) {
      const v = raw[src + x];
      const a = x >= spp ? rows[dst + x - spp] : 0;
      const b = y > 0 ? rows[dst - stride + x] : 0;
      const c = x >= spp && y > 0 ? rows[dst - stride + x - spp] : 0;
      rows[dst + x] = (f === 0 ? v : f === 1 ? v + a : f === 2 ? v + b
        : f === 3 ? v + ((a + b) >> 1) : v + paeth(a, b, c)) & 0xff;
    }
  }
  const channels = colorType === 0 || colorType === 4 ? 1 : 3;
  const pixels = new Uint8Array(width * height * channels);
  for (let i = 0; i < width * height; i++) {
    if (colorType === 3) {
      const k = rows[i] * 3;
      pixels[i * 3] = palette[k]; pixels[i * 3 + 1] = palette[k + 1]; pixels[i * 3 + 2] = palette[k + 2];
    } else {
      for (let ch = 0; ch < channels; ch++) pixels[i * channels + ch] = rows[i * spp + ch];
    }
  }
  return { pixels, width, height, channels };
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}
