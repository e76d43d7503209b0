/**
 * vbmem/base64: bytes and float32 data as base64, as vbmemd's tensors carry them (toBase64 and
 * fromBase64 are re-exported by index.js; the rest is the client's own).
 * @module vbmem/base64
 */

import { VbmemError } from "./errors.js";

const HAS_BUFFER = typeof Buffer === "function" && typeof Buffer.from === "function";
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

// ------------------------------------------------------------------------------------ base64

/**
 * Bytes (Uint8Array, ArrayBuffer or any typed array view) as a base64 string.
 * @param {Uint8Array|ArrayBuffer|ArrayBufferView} bytes
 * @returns {string}
 */
export function toBase64(bytes) {
  const u8 = asBytes(bytes);
  if (HAS_BUFFER) return Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength).toString("base64");
  let s = "";
  for (let i = 0; i < u8.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, u8.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

/**
 * A base64 string (or a data: URL) as a fresh Uint8Array.
 * @param {string} s
 * @returns {Uint8Array}
 */
export function fromBase64(s) {
  if (s.startsWith("data:")) s = s.slice(s.indexOf(",") + 1);
  if (HAS_BUFFER) {
    const b = Buffer.from(s, "base64");
    return new Uint8Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  }
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function asBytes(x) {
  if (x instanceof Uint8Array) return x;
  if (x instanceof ArrayBuffer) return new Uint8Array(x);
  if (ArrayBuffer.isView(x)) return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  throw new TypeError("expected bytes (Uint8Array or ArrayBuffer)");
}

export function isBytes(x) {
  return x instanceof ArrayBuffer || (ArrayBuffer.isView(x) && !(x instanceof DataView)
    && !(x instanceof Float32Array) && !(x instanceof Float64Array));
}

export function f32ToBase64(f32) {
  if (LITTLE) return toBase64(f32);
  const dv = new DataView(new ArrayBuffer(f32.length * 4));
  f32.forEach((v, i) => dv.setFloat32(i * 4, v, true));
  return toBase64(dv.buffer);
}

export function base64ToF32(s) {
  const u8 = fromBase64(s);
  if (u8.length % 4) throw new VbmemError({ detail: "float32 data is not a multiple of 4 bytes" });
  if (LITTLE) return new Float32Array(u8.buffer, 0, u8.length / 4);
  const dv = new DataView(u8.buffer);
  const out = new Float32Array(u8.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = dv.getFloat32(i * 4, true);
  return out;
}
