/**
 * vbmem: the JavaScript client of vbmemd, the episodic-memory daemon (proto/openapi.yaml).
 *
 * Plain ES module, no dependencies, no build step; runs in browsers and Node 18+ (global fetch,
 * AbortController, btoa/atob or Buffer, DecompressionStream for reading PNG pixels).
 * The same surface as the Python client (clients/python), with camelCase names and option
 * objects:
 *
 *     import { Client } from "vbmem";
 *     const c = new Client({ url: "http://127.0.0.1:8080" });
 *     const s = await c.createSession();                    // the server's default model
 *     await c.write(s, { images: pngDataUrls });            // canvas.toDataURL("image/png") ...
 *     const r = await c.read(s, { images: [cue], mask: [maskUrl], steps: 3 });
 *     img.src = r.steps.at(-1).images.dataUrl(0);
 *
 * Codes travel as base64 float32 tensors; images as base64 PNGs (strings, data: URLs or PNG
 * bytes), uint8/float32 tensors {dtype, shape, data}, or nested arrays, NCHW.
 * @module vbmem
 */

/**
 * @typedef {string|Uint8Array|ArrayBuffer|Array<string|Uint8Array|ArrayBuffer>|{dtype?: string, shape: number[], data: any}|number[][][][]|Images} ImagesInput
 *   Images: base64 PNG strings, data: URLs, PNG bytes (one or an array), a {dtype, shape, data}
 *   tensor, nested n x c x h x w arrays, or an Images result.
 * @typedef {Matrix|ArrayLike<number>[]|{shape: number[], data: any}} CodesInput
 *   Codes T x C: a Matrix, rows, or a {shape: [T, C], data} tensor (Float32Array, numbers or base64).
 * @typedef {ImagesInput|Array<Array<number|boolean>>} MaskInput
 *   A read mask (non-zero = known): a pixel mask in any ImagesInput form, or a code mask (T rows).
 */

import { VbmemError, ConnectionFailed } from "./errors.js";
import { toBase64, fromBase64, isBytes, f32ToBase64, base64ToF32 } from "./base64.js";
import { encodePng, pngInfo, decodePng } from "./png.js";

export { VbmemError, ConnectionFailed } from "./errors.js";
export { toBase64, fromBase64 } from "./base64.js";
export { encodePng, pngInfo, decodePng } from "./png.js";

/** The server used when no url is given (and no $VBMEM_URL / page origin applies). */
export const DEFAULT_URL = "http://127.0.0.1:8080";
/** The longest Retry-After honoured, in seconds (a longer one is waited this long). */
export const MAX_RETRY_WAIT = 60;
/** The problem type of a 503 whose write the store may hold: retried only with If-Match. */
export const OUTCOME_UNKNOWN = "urn:vbmem:problem:outcome-unknown";
/** The package version. */
export const VERSION = "0.1.0";

const ENV = typeof process !== "undefined" && process && process.env ? process.env : {};

// ----------------------------------------------------------------------------------- results

/**
 * A T x C matrix of float32 codes as the server returned it (a base64 tensor or nested arrays).
 * `data` is the flat row-major Float32Array (a null of a JSON matrix, a non-finite value, is NaN),
 * `shape` [T, C], `row(i)` a Float32Array view of row i, `toArray()` nested number arrays.
 * Iterating a Matrix yields its rows.
 */
export class Matrix {
  /** @param {object|number[][]} wire the Matrix of the response */
  constructor(wire) {
    /** The wire form as received. */
    this.wire = wire;
    if (Array.isArray(wire)) {
      const t = wire.length, c = t ? wire[0].length : 0;
      /** @type {Float32Array} */
      this.data = new Float32Array(t * c);
      wire.forEach((r, i) => r.forEach((v, j) => { this.data[i * c + j] = v === null ? NaN : v; }));
      /** @type {[number, number]} */
      this.shape = [t, c];
    } else {
      this.data = base64ToF32(wire.data);
      this.shape = [wire.shape[0], wire.shape[1]];
    }
  }

  /** Rows (T). */
  get length() { return this.shape[0]; }

  /**
   * Row i as a Float32Array view.
   * @param {number} i
   * @returns {Float32Array}
   */
  row(i) { return this.data.subarray(i * this.shape[1], (i + 1) * this.shape[1]); }

  /** @returns {number[][]} the rows as arrays of numbers */
  toArray() { return Array.from({ length: this.shape[0] }, (_, i) => Array.from(this.row(i))); }

  /** @returns {Iterator<Float32Array>} */
  *[Symbol.iterator]() { for (let i = 0; i < this.shape[0]; i++) yield this.row(i); }

  /** @returns {{dtype: "float32", shape: number[], data: string}} the base64 tensor form */
  toTensor() { return { dtype: "float32", shape: [...this.shape], data: f32ToBase64(this.data) }; }
}

/**
 * A batch of images as the server returned them: `wire` is the response's form (an array of
 * base64 PNG strings, a {dtype, shape, data} tensor, or nested arrays), `format` "png", "uint8",
 * "float32" or "json", `shape` [n, c, h, w]. Helpers: `dataUrl(i)` / `dataUrls()` give PNG data:
 * URLs for an <img> (synchronous, any format), `png(i)` PNG bytes, and the asynchronous
 * `uint8()`, `float32()` and `rgba(i)` (an ImageData-ready Uint8ClampedArray) give pixels.
 */
export class Images {
  /** @param {string[]|object|number[][][][]} wire the images of the response */
  constructor(wire) {
    this.wire = wire;
    this._u8 = null;
    this._f32 = null;
    if (Array.isArray(wire) && (wire.length === 0 || typeof wire[0] === "string")) {
      /** @type {"png"|"uint8"|"float32"|"json"} */
      this.format = "png";
      this._b64 = wire.map((s) => (s.startsWith("data:") ? s.slice(s.indexOf(",") + 1) : s));
      const info = this._b64.length ? pngInfo(fromBase64(this._b64[0])) : null;
      /** @type {number[]|null} [n, c, h, w] */
      this.shape = info ? [wire.length, info.channels, info.height, info.width] : [0, 0, 0, 0];
    } else if (!Array.isArray(wire)) {
      this.format = wire.dtype;
      this.shape = [...wire.shape];
      if (wire.dtype === "uint8") this._u8 = fromBase64(wire.data);
      else this._f32 = base64ToF32(wire.data);
    } else {
      this.format = "json";
      this.shape = [wire.length, wire[0].length, wire[0][0].length, wire[0][0][0].length];
      this._f32 = Float32Array.from(wire.flat(3));
    }
  }

  /** Images in the batch (n). */
  get length() { return this.shape[0]; }

  _frameU8(i) {
    const [, c, h, w] = this.shape;
    const n = c * h * w;
    if (this._u8) return this._u8.subarray(i * n, (i + 1) * n);
    const out = new Uint8Array(n);
    for (let k = 0; k < n; k++) out[k] = Math.min(255, Math.max(0, Math.floor(256 * this._f32[i * n + k])));
    return out;
  }

  /**
   * Image i as PNG bytes: the server's PNG as sent, or one written from the pixels (8-bit grey,
   * or RGB for three channels).
   * @param {number} i
   * @returns {Uint8Array}
   */
  png(i) {
    if (this.format === "png") return fromBase64(this._b64[i]);
    const [, c, h, w] = this.shape;
    const chw = this._frameU8(i);
    if (c === 1) return encodePng(chw, w, h, 1);
    const hwc = new Uint8Array(h * w * 3);
    for (let ch = 0; ch < 3; ch++) for (let k = 0; k < h * w; k++) hwc[k * 3 + ch] = chw[ch * h * w + k];
    return encodePng(hwc, w, h, 3);
  }

  /**
   * Image i as a base64 PNG string (no data: prefix).
   * @param {number} i
   * @returns {string}
   */
  pngBase64(i) { return this.format === "png" ? this._b64[i] : toBase64(this.png(i)); }

  /**
   * Image i as a "data:image/png;base64,..." URL (for an <img> src, or a canvas).
   * @param {number} i
   * @returns {string}
   */
  dataUrl(i) { return "data:image/png;base64," + this.pngBase64(i); }

  /** @returns {string[]} every image as a PNG data: URL */
  dataUrls() { return Array.from({ length: this.length }, (_, i) => this.dataUrl(i)); }

  /**
   * Every pixel as bytes, NCHW (float pixels x become min(255, floor(256 x))). Asynchronous
   * because PNGs are inflated with DecompressionStream.
   * @returns {Promise<Uint8Array>}
   */
  async uint8() {
    if (!this._u8) {
      if (this.format === "png") {
        const [n, c, h, w] = this.shape;
        const out = new Uint8Array(n * c * h * w);
        for (let i = 0; i < n; i++) {
          const { pixels, channels } = await decodePng(this._b64[i]);
          for (let ch = 0; ch < c; ch++) {
            for (let k = 0; k < h * w; k++) out[(i * c + ch) * h * w + k] = pixels[k * channels + ch];
          }
        }
        this._u8 = out;
      } else {
        const out = new Uint8Array(this._f32.length);
        const [, c, h, w] = this.shape;
        for (let i = 0; i < this.length; i++) out.set(this._frameU8(i), i * c * h * w);
        this._u8 = out;
      }
    }
    return this._u8;
  }

  /**
   * Every pixel as float32 NCHW: the server's float values for float32/json images, else
   * (v + 0.5) / 256 of the 8-bit values (what the server reads a PNG as).
   * @returns {Promise<Float32Array>}
   */
  async float32() {
    if (this._f32) return this._f32;
    const u8 = await this.uint8();
    return Float32Array.from(u8, (v) => (v + 0.5) / 256);
  }

  /**
   * Image i as RGBA bytes, row-major, for `new ImageData(rgba, width, height)` on a canvas.
   * @param {number} i
   * @returns {Promise<Uint8ClampedArray>}
   */
  async rgba(i) {
    const [, c, h, w] = this.shape;
    const u8 = await this.uint8();
    const base = i * c * h * w;
    const out = new Uint8ClampedArray(h * w * 4);
    for (let k = 0; k < h * w; k++) {
      for (let ch = 0; ch < 3; ch++) out[k * 4 + ch] = u8[base + (c === 1 ? 0 : ch) * h * w + k];
      out[k * 4 + 3] = 255;
    }
    return out;
  }
}

function images(wire) { return wire === undefined || wire === null ? null : new Images(wire); }

/**
 * @typedef {object} Model A hosted model (GET /v1/models).
 * @property {string} name
 * @property {boolean} default
 * @property {number[]} observationShape [channels, height, width]
 * @property {number} codeSize
 * @property {number} episodeLength
 * @property {object} defaults the memory defaults (MemoryConfig)
 * @property {object} raw the whole document
 */
function toModel(d) {
  return { name: d.name, default: d.default, observationShape: d.observation_shape, codeSize: d.code_size,
           episodeLength: d.episode_length, defaults: d.defaults || {}, raw: d };
}

/**
 * @typedef {object} Session A session (GET /v1/sessions/{id}).
 * @property {string} id
 * @property {string|null} model null for a latent session
 * @property {string} kind
 * @property {number} codeSize
 * @property {number} rows
 * @property {number} clusters
 * @property {number} groups
 * @property {number} frames
 * @property {number} retainedCodes
 * @property {number|null} lastElbo
 * @property {number} version the ETag
 * @property {number} ttlSeconds
 * @property {string} created
 * @property {string} updated
 * @property {number} memoryBytes
 * @property {number[][]|null} clusterUsage
 * @property {object} config
 * @property {object} solver
 * @property {object} raw the whole document
 */
function toSession(d) {
  return { id: d.id, model: d.model ?? null, kind: d.kind, codeSize: d.code_size, rows: d.rows,
           clusters: d.clusters, groups: d.groups, frames: d.frames, retainedCodes: d.retained_codes,
           lastElbo: d.last_elbo ?? null, version: d.version, ttlSeconds: d.ttl_seconds, created: d.created,
           updated: d.updated, memoryBytes: d.memory_bytes, clusterUsage: d.cluster_usage ?? null,
           config: d.config, solver: d.solver, raw: d };
}

/**
 * @typedef {object} FitResult The result of a write or resize.
 * @property {number} version the new version
 * @property {string|null} mode replace, append or refit (a write)
 * @property {number|null} elboPerFrame
 * @property {object} elbo every ELBO term
 * @property {number} iterations
 * @property {boolean} converged
 * @property {boolean} timeLimited
 * @property {number} frames
 * @property {number} retainedCodes
 * @property {number} clusters
 * @property {number} rows
 * @property {number} groups
 * @property {number[][]|null} clusterUsage
 * @property {object} timings
 * @property {object|null} addresses
 * @property {number|null} elboBefore a resize's ELBO per frame before
 * @property {number|null} elboAfter a resize's ELBO per frame after
 * @property {object} raw the whole response
 */
function toFit(d) {
  return { version: d.version, mode: d.mode ?? null, elboPerFrame: d.elbo ? d.elbo.per_frame : null,
           elbo: d.elbo, iterations: d.iterations, converged: d.converged, timeLimited: d.time_limited,
           frames: d.frames, retainedCodes: d.retained_codes, clusters: d.clusters, rows: d.rows,
           groups: d.groups, clusterUsage: d.cluster_usage ?? null, timings: d.timings,
           addresses: d.addresses ?? null, elboBefore: d.elbo_before ?? null, elboAfter: d.elbo_after ?? null,
           raw: d };
}

/**
 * @typedef {object} Forgotten What one cue of a forget removed.
 * @property {number} cue its index in the request
 * @property {number|null} item the retained code removed (its index among the retained codes
 *   before the forget); null when the memory was downdated
 * @property {number|null} distance from the cue to that code (downdate: to the memory's
 *   posterior-mean read of the cue)
 * @property {number[]|null} clusters the cue's most probable cluster of each group
 */

/**
 * @typedef {object} ForgetResult The result of a forget.
 * @property {number} version the new version
 * @property {boolean} exact true: the memory is what it would be had the items never been
 *   written (the retained codes left were refitted); false: the approximate downdate
 * @property {Forgotten[]} removed one per cue
 * @property {number|null} elboPerFrame the refit's; null when nothing was refitted
 * @property {object|null} elbo
 * @property {number} iterations
 * @property {number} frames
 * @property {number} retainedCodes
 * @property {number[][]|null} clusterUsage
 * @property {object} timings
 * @property {object} raw the whole response
 */
function toForget(d) {
  return { version: d.version, exact: d.exact,
           removed: d.removed.map((x) => ({ cue: x.cue, item: x.item ?? null, distance: x.distance ?? null,
                                            clusters: x.clusters ?? null })),
           elboPerFrame: d.elbo ? d.elbo.per_frame : null, elbo: d.elbo ?? null, iterations: d.iterations,
           frames: d.frames, retainedCodes: d.retained_codes, clusterUsage: d.cluster_usage ?? null,
           timings: d.timings, raw: d };
}

// ----------------------------------------------------------------------------- request forms

function tensorData(data, dtype) {
  if (typeof data === "string") return data;
  if (dtype === "float32") {
    const f = data instanceof Float32Array ? data : Float32Array.from(data);
    return f32ToBase64(f);
  }
  return toBase64(data instanceof Uint8Array ? data : Uint8Array.from(data));
}

/**
 * Codes as a base64 float32 tensor: a Matrix, an array of rows (arrays or Float32Arrays), or a
 * tensor {shape: [T, C], data: Float32Array | number[] | base64 string} (dtype float32).
 * @param {CodesInput} codes
 * @returns {{dtype: "float32", shape: number[], data: string}}
 */
export function encodeCodes(codes) {
  if (codes instanceof Matrix) return codes.toTensor();
  if (codes && !Array.isArray(codes) && codes.shape && codes.data !== undefined) {
    if (codes.shape.length !== 2) throw new RangeError("codes must be 2-D (T x C)");
    return { dtype: "float32", shape: [...codes.shape], data: tensorData(codes.data, "float32") };
  }
  if (!Array.isArray(codes) || !codes.length || !codes[0] || !codes[0].length) {
    throw new RangeError("codes must be a non-empty T x C matrix (an array of rows, or {shape, data})");
  }
  const c = codes[0].length;
  const out = new Float32Array(codes.length * c);
  codes.forEach((r, i) => {
    if (r.length !== c) throw new RangeError("codes rows differ in length");
    for (let j = 0; j < c; j++) out[i * c + j] = r[j];
  });
  return { dtype: "float32", shape: [codes.length, c], data: f32ToBase64(out) };
}

function sigma2Wire(s) {
  if (s === undefined || s === null || typeof s === "number") return s;
  return encodeCodes(s);
}

function oneImage(x) {
  if (typeof x === "string") return x; // base64 PNG or a data: URL (the server takes both)
  if (isBytes(x)) return toBase64(x); // PNG file bytes
  throw new TypeError("an image is a base64 PNG string, a data: URL or PNG bytes");
}

/**
 * Images in a wire form of proto/openapi.yaml: an Images result (as it came), a base64 PNG
 * string, a data: URL (canvas.toDataURL("image/png")), PNG bytes (Uint8Array/ArrayBuffer/Buffer),
 * an array of those (one per image), a tensor {dtype: "uint8"|"float32", shape: [n, c, h, w]
 * (or [n, h, w]), data: typed array | number[] | base64}, or nested n x c x h x w arrays.
 * @param {ImagesInput} imgs
 * @returns {string[]|object|number[][][][]}
 */
export function encodeImages(imgs) {
  if (imgs instanceof Images) return imgs.wire;
  if (typeof imgs === "string" || isBytes(imgs)) return [oneImage(imgs)];
  if (Array.isArray(imgs)) {
    if (!imgs.length) throw new RangeError("no images");
    if (typeof imgs[0] === "string" || isBytes(imgs[0])) return imgs.map(oneImage);
    return imgs; // nested JSON arrays
  }
  if (imgs && imgs.shape && imgs.data !== undefined) {
    const dtype = imgs.dtype || (imgs.data instanceof Float32Array ? "float32" : "uint8");
    let shape = [...imgs.shape];
    if (shape.length === 3) shape = [shape[0], 1, shape[1], shape[2]];
    if (shape.length !== 4) throw new RangeError("an image tensor is [n, h, w] or [n, c, h, w]");
    return { dtype, shape, data: tensorData(imgs.data, dtype) };
  }
  throw new TypeError("images: PNG strings, data: URLs, PNG bytes, a {dtype, shape, data} tensor or nested arrays");
}

/**
 * A read mask: a pixel mask in any form encodeImages takes (PNGs or data: URLs, where a pixel
 * with any non-zero colour sample is known; a uint8 tensor; nested arrays), or a code mask (an
 * array of T rows of 0/1 or booleans, or a {shape: [T, C], data} tensor). Non-zero = known.
 * @param {MaskInput} mask
 * @returns {any}
 */
export function encodeMask(mask) {
  if (mask === undefined || mask === null) return undefined;
  if (Array.isArray(mask) && mask.length && Array.isArray(mask[0]) && mask[0].length && (typeof mask[0][0] === "number" || typeof mask[0][0] === "boolean")) {
    const c = mask[0].length;
    const out = new Uint8Array(mask.length * c);
    mask.forEach((r, i) => { for (let j = 0; j < c; j++) out[i * c + j] = r[j] ? 1 : 0; });
    return { dtype: "uint8", shape: [mask.length, c], data: toBase64(out) };
  }
  if (mask && !Array.isArray(mask) && !isBytes(mask) && typeof mask !== "string" && !(mask instanceof Images)
      && mask.shape && mask.data !== undefined) {
    const data = typeof mask.data === "string" ? mask.data
      : toBase64(Uint8Array.from(mask.data, (v) => (v ? 1 : 0)));
    return { dtype: "uint8", shape: [...mask.shape], data };
  }
  return encodeImages(mask);
}

function dropUndefined(o) {
  const out = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined && v !== null) out[k] = v;
  return out;
}

function snake(o) {
  if (!o) return o;
  const out = {};
  for (const [k, v] of Object.entries(o)) {
    if (v === undefined) continue;
    out[k.replace(/[A-Z]/g, (m) => "_" + m.toLowerCase())] = v;
  }
  return out;
}

const MEMORY_KEYS = { sigmaZ2: "sigma_z2", sigma2B0: "sigma2_b0", sFloor: "s_floor", dkmAddrVar: "dkm_addr_var",
                      retainMax: "retain_max", codeSize: "code_size" };

function memoryWire(m) {
  if (!m) return undefined;
  const out = {};
  for (const [k, v] of Object.entries(m)) if (v !== undefined) out[MEMORY_KEYS[k] || k] = v;
  return out;
}

function sid(session) {
  const id = session && typeof session === "object" ? session.id : String(session);
  return encodeURIComponent(id);
}

function ifMatchHeader(v) {
  if (v === undefined || v === null) return undefined;
  if (typeof v === "object") v = v.version;
  const s = String(v);
  return { "If-Match": s.startsWith('"') || s.startsWith("W/") || s === "*" ? s : `"${s}"` };
}

function retryAfter(value, attempt) {
  if (value !== null && value !== undefined && value !== "") {
    const v = Number(value);
    if (Number.isFinite(v)) return Math.min(MAX_RETRY_WAIT, Math.max(0, v));
  }
  return 0.5 * 2 ** attempt * (0.75 + 0.5 * Math.random());
}

function defaultUrl() {
  if (ENV.VBMEM_URL) return ENV.VBMEM_URL;
  const loc = globalThis.location;
  if (loc && /^https?:$/.test(loc.protocol)) return loc.origin;
  return DEFAULT_URL;
}

function refused(e) {
  for (let x = e; x; x = x.cause) {
    if (x.code === "ECONNREFUSED") return true;
    if (Array.isArray(x.errors) && x.errors.some((y) => y && y.code === "ECONNREFUSED")) return true;
  }
  return false;
}

// ------------------------------------------------------------------------------------ client

/**
 * A client of one vbmemd server. Every method returns a Promise and rejects with a VbmemError
 * (ConnectionFailed when the server cannot be reached or does not answer within `timeout`).
 */
export class Client {
  /**
   * @param {object} [opts]
   * @param {string} [opts.url] the server (default $VBMEM_URL in Node, else the page's origin in a
   *   browser, else http://127.0.0.1:8080)
   * @param {string|null} [opts.apiKey] sent as `Authorization: Bearer KEY` (default $VBMEM_API_KEY in Node)
   * @param {number} [opts.timeout] seconds per HTTP request (default 30)
   * @param {number} [opts.retries] how many times a request answered 503 or 429 (or refused at
   *   connect) is tried again, after the server's Retry-After (at most 60 s; else an exponential
   *   backoff from 0.5 s with jitter) (default 3); a write answered 503 "outcome-unknown" (the
   *   store may hold it) is tried again only when it carries If-Match, else its error is thrown
   * @param {typeof fetch} [opts.fetch] the fetch to use (default the global fetch)
   * @param {(seconds: number) => Promise<void>} [opts.sleep] waits the given seconds between two
   *   attempts of a request (default a setTimeout); a test passes its own to see the waits
   *   without spending them
   */
  constructor({ url, apiKey, timeout = 30, retries = 3, fetch: fetchFn, sleep } = {}) {
    /** The server's base URL, without a trailing slash. */
    this.url = (url || defaultUrl()).replace(/\/+$/, "");
    /** The API key, or null. */
    this.apiKey = apiKey !== undefined ? apiKey : (ENV.VBMEM_API_KEY || null);
    /** Seconds per HTTP request. */
    this.timeout = timeout;
    /** Retries on 503/429/refused connections. */
    this.retries = retries;
    /** The ETag of the last response that had one (e.g. '"5"'). */
    this.lastEtag = null;
    this._fetch = fetchFn || ((...a) => globalThis.fetch(...a));
    this._sleep = sleep || ((s) => new Promise((r) => setTimeout(r, s * 1000)));
  }

  /**
   * One API request with retries; resolves to the decoded JSON body (null when empty). The
   * response's ETag is kept in `lastEtag`.
   * @param {string} method
   * @param {string} path starting with "/"
   * @param {object} [o]
   * @param {any} [o.body] JSON-encoded
   * @param {Record<string, string>} [o.headers]
   * @param {Record<string, any>} [o.query] undefined/null values are left out
   * @param {AbortSignal} [o.signal] aborts the request (and its retries)
   * @returns {Promise<any>}
   */
  async request(method, path, { body, headers, query, signal } = {}) {
    let url = this.url + path;
    const q = query ? dropUndefined(query) : {};
    if (Object.keys(q).length) url += "?" + new URLSearchParams(q).toString();
    const h = { Accept: "application/json" };
    const data = body === undefined ? undefined : JSON.stringify(body);
    if (data !== undefined) h["Content-Type"] = "application/json";
    if (this.apiKey) h.Authorization = "Bearer " + this.apiKey;
    Object.assign(h, headers || {});
    for (let attempt = 0; ; attempt++) {
      let wait;
      const ctl = new AbortController();
      const onAbort = () => ctl.abort();
      if (signal) {
        if (signal.aborted) ctl.abort();
        else signal.addEventListener("abort", onAbort, { once: true });
      }
      let timedOut = false;
      const timer = this.timeout ? setTimeout(() => { timedOut = true; ctl.abort(); }, this.timeout * 1000) : null;
      try {
        let res, text;
        try {
          res = await this._fetch(url, { method, headers: h, body: data, signal: ctl.signal });
          text = await res.text();
        } catch (e) {
          if (signal && signal.aborted) throw e;
          const why = timedOut ? `no answer within ${this.timeout} s` : (e && e.cause && e.cause.message) || String(e);
          if (!timedOut && refused(e) && attempt < this.retries) {
            wait = retryAfter(null, attempt);
          } else {
            throw new ConnectionFailed({ detail: `cannot reach ${this.url}: ${why}` });
          }
        }
        if (res) {
          if (res.ok) {
            const etag = res.headers.get("ETag");
            if (etag) this.lastEtag = etag;
            return text ? JSON.parse(text) : null;
          }
          const err = problem(res.status, res.statusText, text);
          const unknown = err.type === OUTCOME_UNKNOWN && h["If-Match"] === undefined;
          if ((res.status === 429 || res.status === 503) && attempt < this.retries && !unknown) {
            wait = retryAfter(res.headers.get("Retry-After"), attempt);
          } else {
            throw err;
          }
        }
      } finally {
        if (timer) clearTimeout(timer);
        if (signal) signal.removeEventListener("abort", onAbort);
      }
      await this._sleep(wait);
    }
  }

  // -- system

  /** GET /healthz: the liveness document ({status: "ok"}). @returns {Promise<{status: string}>} */
  healthz() { return this.request("GET", "/healthz"); }

  /**
   * GET /readyz: the readiness document (status and checks); a VbmemError 503 when not ready
   * (after the retries).
   * @returns {Promise<{status: string, checks: object}>}
   */
  readyz() { return this.request("GET", "/readyz"); }

  // -- models

  /** GET /v1/models: the hosted models. @returns {Promise<Model[]>} */
  async models() { return (await this.request("GET", "/v1/models")).models.map(toModel); }

  /**
   * GET /v1/models/{name}: one model (its raw document includes the architecture).
   * @param {string} name
   * @returns {Promise<Model>}
   */
  async model(name) { return toModel(await this.request("GET", "/v1/models/" + encodeURIComponent(name))); }

  /**
   * POST /v1/models/{model}/encode: the codes (mu, sigma2) of images.
   * @param {string} model
   * @param {ImagesInput} imgs
   * @returns {Promise<{model: string, mu: Matrix, sigma2: Matrix, raw: object}>}
   */
  async encode(model, imgs) {
    const d = await this.request("POST", `/v1/models/${encodeURIComponent(model)}/encode`,
      { body: { observations: encodeImages(imgs), encoding: "base64" } });
    return { model: d.model, mu: new Matrix(d.codes.mu), sigma2: new Matrix(d.codes.sigma2), raw: d };
  }

  /**
   * POST /v1/models/{model}/decode: images of codes.
   * @param {string} model
   * @param {CodesInput} codes
   * @param {object} [o]
   * @param {number|CodesInput} [o.sigma2] ignored by the server (means are decoded)
   * @param {"png"|"uint8"|"float32"|"json"} [o.format] default "uint8"
   * @param {"mean"|"sample"} [o.pixels]
   * @param {number|string} [o.seed]
   * @returns {Promise<{model: string, images: Images, raw: object}>}
   */
  async decode(model, codes, { sigma2, format = "uint8", pixels, seed } = {}) {
    const body = dropUndefined({ codes: dropUndefined({ mu: encodeCodes(codes), sigma2: sigma2Wire(sigma2) }),
                                 format, pixels, seed });
    const d = await this.request("POST", `/v1/models/${encodeURIComponent(model)}/decode`, { body });
    return { model: d.model, images: new Images(d.observations), raw: d };
  }

  /**
   * POST /v1/models/{model}/infer: the posterior q(Z | X) of a served time-series RPM (a model
   * file of kind rpm) given J rows of T observations.
   * @param {string} model
   * @param {number[][] | number[][][] | {dtype: "float32", shape: number[], data: string}} observations
   *   J rows of T numbers (or of T vectors of D numbers), or a float32 tensor of shape [J, T]
   *   or [J, T, D] with its data in base64
   * @param {{encoding?: "json" | "base64"}} [o] how the server sends mean and variance
   * @returns {Promise<{model: string, factors: number, steps: number, latentSize: number,
   *   mean: Matrix, variance: Matrix, raw: object}>} mean and variance: T rows of latentSize values
   */
  async infer(model, observations, { encoding } = {}) {
    if (observations === undefined || observations === null) throw new TypeError("infer needs observations");
    const body = dropUndefined({ observations, encoding });
    const d = await this.request("POST", `/v1/models/${encodeURIComponent(model)}/infer`, { body });
    return { model: d.model, factors: d.factors, steps: d.steps, latentSize: d.latent_size,
             mean: new Matrix(d.mean), variance: new Matrix(d.variance), raw: d };
  }

  // -- sessions

  /**
   * POST /v1/sessions: a session on a model (`model`; neither model nor codeSize: the default
   * model) or a latent session (`codeSize`).
   * @param {object} [o]
   * @param {string} [o.model]
   * @param {number} [o.codeSize]
   * @param {object} [o.memory] {kind, rows, clusters, groups, retainMax | retain_max, sigmaZ2, ...}
   * @param {object} [o.solver] {iterations, tolerance, init}
   * @param {number} [o.ttlSeconds] idle lifetime (0: never deleted)
   * @returns {Promise<Session>}
   */
  async createSession({ model, codeSize, memory, solver, ttlSeconds } = {}) {
    const mem = memoryWire(memory);
    if (mem && Object.keys(mem).length && !mem.kind) throw new RangeError("memory needs a kind");
    const body = dropUndefined({ model, code_size: codeSize, memory: mem, solver: snake(solver),
                                 ttl_seconds: ttlSeconds });
    return toSession(await this.request("POST", "/v1/sessions", { body }));
  }

  /**
   * GET /v1/sessions: one page of the caller's sessions, in id order.
   * @param {object} [o]
   * @param {number} [o.limit] 1-1000 (server default 50)
   * @param {string} [o.cursor] nextCursor of the previous page
   * @returns {Promise<{sessions: Session[], nextCursor: string|null}>}
   */
  async listSessions({ limit, cursor } = {}) {
    const d = await this.request("GET", "/v1/sessions", { query: { limit, cursor } });
    return { sessions: d.sessions.map(toSession), nextCursor: d.next_cursor ?? null };
  }

  /**
   * Every session of the caller, following nextCursor page by page:
   * `for await (const s of client.iterSessions()) ...`.
   * @param {object} [o]
   * @param {number} [o.pageSize] sessions per request (default 100)
   * @returns {AsyncGenerator<Session>}
   */
  async *iterSessions({ pageSize = 100 } = {}) {
    let cursor;
    for (;;) {
      const page = await this.listSessions({ limit: pageSize, cursor });
      yield* page.sessions;
      cursor = page.nextCursor;
      if (!cursor) return;
    }
  }

  /**
   * GET /v1/sessions/{id} (its version is the ETag).
   * @param {string|{id: string}} session an id or a Session
   * @returns {Promise<Session>}
   */
  async getSession(session) { return toSession(await this.request("GET", "/v1/sessions/" + sid(session))); }

  /**
   * DELETE /v1/sessions/{id}; a VbmemError 404 when there is no such session.
   * @param {string|{id: string}} session
   * @param {object} [o]
   * @param {number|string|{version: number}} [o.ifMatch] the version it must be at (409 otherwise)
   * @returns {Promise<void>}
   */
  async deleteSession(session, { ifMatch } = {}) {
    await this.request("DELETE", "/v1/sessions/" + sid(session), { headers: ifMatchHeader(ifMatch) });
  }

  /**
   * POST /v1/sessions/{id}/episodes: write images (a session with a model) or codes.
   * @param {string|{id: string}} session
   * @param {object} o
   * @param {ImagesInput} [o.images]
   * @param {CodesInput} [o.codes]
   * @param {number|CodesInput} [o.sigma2] a number for every entry, or T x C
   * @param {"replace"|"append"|"refit"} [o.mode] default "replace" (refit takes neither images nor codes)
   * @param {number} [o.iterations]
   * @param {number} [o.tolerance]
   * @param {number|string} [o.seed]
   * @param {string} [o.init] auto, prior, kmeans++, current, random
   * @param {boolean} [o.addresses] return the addressing posterior
   * @param {number|string|{version: number}} [o.ifMatch] the version the session must be at (409 otherwise)
   * @returns {Promise<FitResult>}
   */
  async write(session, { images: imgs, codes, sigma2, mode = "replace", iterations, tolerance, seed, init,
                         addresses, ifMatch } = {}) {
    if (!["replace", "append", "refit"].includes(mode)) throw new RangeError(`mode is replace, append or refit, not ${mode}`);
    const body = dropUndefined({ mode, iterations, tolerance, seed, init, addresses });
    if (imgs !== undefined && imgs !== null) body.observations = encodeImages(imgs);
    if (codes !== undefined && codes !== null) body.codes = dropUndefined({ mu: encodeCodes(codes), sigma2: sigma2Wire(sigma2) });
    return toFit(await this.request("POST", `/v1/sessions/${sid(session)}/episodes`,
      { body, headers: ifMatchHeader(ifMatch) }));
  }

  /**
   * POST /v1/sessions/{id}/resize: new H (clusters) and/or K (rows), refit.
   * @param {string|{id: string}} session
   * @param {object} o
   * @param {number} [o.clusters]
   * @param {number} [o.rows]
   * @param {number} [o.iterations]
   * @param {number} [o.tolerance]
   * @param {number|string} [o.seed]
   * @param {string} [o.init]
   * @param {boolean} [o.addresses]
   * @param {number|string|{version: number}} [o.ifMatch]
   * @returns {Promise<FitResult>} with elboBefore and elboAfter
   */
  async resize(session, { clusters, rows, iterations, tolerance, seed, init, addresses, ifMatch } = {}) {
    const body = dropUndefined({ clusters, rows, iterations, tolerance, seed, init, addresses });
    return toFit(await this.request("POST", `/v1/sessions/${sid(session)}/resize`,
      { body, headers: ifMatchHeader(ifMatch) }));
  }

  /**
   * POST /v1/sessions/{id}/forget: remove the stored items nearest the cues, images (a session
   * with a model) or codes. Exact when the session retains codes (each cue's nearest retained
   * code goes and the memory is refitted over the rest with iterations, tolerance, seed and
   * init); otherwise an approximate downdate (result.exact false).
   * @param {string|{id: string}} session
   * @param {object} o
   * @param {ImagesInput} [o.images]
   * @param {CodesInput} [o.codes]
   * @param {number|CodesInput} [o.sigma2]
   * @param {number} [o.iterations]
   * @param {number} [o.tolerance]
   * @param {number|string} [o.seed]
   * @param {string} [o.init]
   * @param {number|string|{version: number}} [o.ifMatch]
   * @returns {Promise<ForgetResult>}
   */
  async forget(session, { images: imgs, codes, sigma2, iterations, tolerance, seed, init, ifMatch } = {}) {
    const hasImages = imgs !== undefined && imgs !== null, hasCodes = codes !== undefined && codes !== null;
    if (hasImages === hasCodes) throw new TypeError("give images or codes (the cues to forget), not both or neither");
    const body = dropUndefined({ iterations, tolerance, seed, init });
    if (hasImages) body.observations = encodeImages(imgs);
    else body.codes = dropUndefined({ mu: encodeCodes(codes), sigma2: sigma2Wire(sigma2) });
    return toForget(await this.request("POST", `/v1/sessions/${sid(session)}/forget`,
      { body, headers: ifMatchHeader(ifMatch) }));
  }

  /**
   * POST /v1/sessions/{id}/samples: codes generated from the memory and (a session with a
   * model) their images.
   * @param {string|{id: string}} session
   * @param {object} [o]
   * @param {number} [o.count] default 1
   * @param {number|string} [o.seed]
   * @param {number} [o.cluster] fix s (-1 draws it)
   * @param {"png"|"uint8"|"float32"|"json"|"none"} [o.format] server default: png with a model
   * @param {"mean"|"sample"} [o.pixels]
   * @returns {Promise<{version: number, codes: Matrix, clusters: number[][], images: Images|null, raw: object}>}
   */
  async sample(session, { count = 1, seed, cluster, format, pixels } = {}) {
    const body = dropUndefined({ count, seed, cluster, encoding: "base64", format, pixels });
    const d = await this.request("POST", `/v1/sessions/${sid(session)}/samples`, { body });
    return { version: d.version, codes: new Matrix(d.codes), clusters: d.clusters,
             images: images(d.observations), raw: d };
  }

  /**
   * POST /v1/sessions/{id}/reads: an iterative read (App. G.2). The query is images (a session
   * with a model) or codes; with neither, `count` frames start from memory (result `start`).
   * @param {string|{id: string}} session
   * @param {object} [o]
   * @param {ImagesInput} [o.images] query images
   * @param {CodesInput} [o.codes] query codes
   * @param {number|CodesInput} [o.sigma2] the query codes' variances
   * @param {"recall"|"mean"|"sample"} [o.mode] server default recall
   * @param {MaskInput} [o.mask] which query pixels (or code dimensions) are known; non-zero = known
   * @param {number|"auto"} [o.cueNoise] recall mode only
   * @param {number} [o.candidates] recall mode only (1-256)
   * @param {"clean"|"blend"} [o.answer] recall mode only: "clean" (the server's default: the
   *   decoder's mean at the chosen code, a mask's known values kept) or "blend" (each known value
   *   combined with the prediction given cueNoise)
   * @param {number} [o.steps] read steps (alias iterations)
   * @param {number} [o.iterations] read steps (alias steps)
   * @param {number} [o.count] frames of a read without a query
   * @param {number|string} [o.seed]
   * @param {boolean} [o.addresses]
   * @param {"png"|"uint8"|"float32"|"json"|"none"} [o.format]
   * @param {"mean"|"sample"} [o.pixels]
   * @returns {Promise<ReadResult>}
   */
  async read(session, { images: imgs, codes, sigma2, mode, mask, cueNoise, candidates, answer, steps, iterations,
                        count, seed, addresses, format, pixels } = {}) {
    if (steps !== undefined && iterations !== undefined && steps !== iterations) {
      throw new RangeError("give steps or iterations, not both");
    }
    const body = dropUndefined({ iterations: steps ?? iterations, mode, cue_noise: cueNoise, candidates, answer, count,
                                 seed, addresses, format, pixels, encoding: "base64", mask: encodeMask(mask) });
    if (imgs !== undefined && imgs !== null) body.observations = encodeImages(imgs);
    if (codes !== undefined && codes !== null) body.query = dropUndefined({ mu: encodeCodes(codes), sigma2: sigma2Wire(sigma2) });
    const d = await this.request("POST", `/v1/sessions/${sid(session)}/reads`, { body });
    const start = d.start || {};
    return {
      version: d.version,
      steps: d.steps.map((s) => ({ codes: new Matrix(s.codes), clusters: s.clusters, addresses: s.addresses ?? null,
                                   images: images(s.observations) })),
      startCodes: start.codes ? new Matrix(start.codes) : null,
      startImages: images(start.observations),
      familiarity: d.familiarity ?? [],
      stoppedAt: d.stopped_at ?? null,
      raw: d,
    };
  }

  /**
   * GET /v1/sessions/{id}/memory: the whole memory (the vbmem-memory JSON form; give it to
   * importMemory). Doubles round-trip bit-exactly through JSON.parse/JSON.stringify.
   * @param {string|{id: string}} session
   * @returns {Promise<object>}
   */
  exportMemory(session) { return this.request("GET", `/v1/sessions/${sid(session)}/memory`); }

  /**
   * PUT /v1/sessions/{id}/memory: replace the session's memory with an exported one.
   * @param {string|{id: string}} session
   * @param {object|string} memory the exported object, or its JSON text
   * @param {object} [o]
   * @param {number|string|{version: number}} [o.ifMatch]
   * @returns {Promise<Session>}
   */
  async importMemory(session, memory, { ifMatch } = {}) {
    const body = typeof memory === "string" ? JSON.parse(memory) : memory;
    return toSession(await this.request("PUT", `/v1/sessions/${sid(session)}/memory`,
      { body, headers: ifMatchHeader(ifMatch) }));
  }

  // ---- temporal sessions (the identity/attribute sequence memory of seed 003) ----

  /**
   * POST /v1/sessions with memory kind "temporal": a latent session (codeSize) or one on a
   * hosted model (images). memory: components, attributes, pi0, u_T, sigma_a2, lambda_prior,
   * lambda_grid, rho_d, rho_e, gamma0, gamma_max, vbe ("eq18" or "eq19"), as the server spells them.
   * @param {object} o
   * @param {string} [o.model]
   * @param {number} [o.codeSize]
   * @param {object} [o.memory]
   * @param {number} [o.ttlSeconds]
   * @returns {Promise<Session>} (raw holds components, attributes, sequences, free_energy)
   */
  async createTemporalSession({ model, codeSize, memory, ttlSeconds } = {}) {
    const body = dropUndefined({ model, code_size: codeSize, ttl_seconds: ttlSeconds,
                                 memory: { ...(memory || {}), kind: "temporal" } });
    return toSession(await this.request("POST", "/v1/sessions", { body }));
  }

  /**
   * POST /v1/sessions/{id}/episodes on a temporal session: sequences of codes (each T x D, frames
   * in order) or, on a model session, sequences of images (one ImagesInput per sequence).
   * @param {string|{id: string}} session
   * @param {object} o
   * @param {CodesInput[]} [o.sequences]
   * @param {ImagesInput[]} [o.images]
   * @param {"replace"|"append"} [o.mode]
   * @param {number} [o.iterations]
   * @param {number} [o.sweeps]
   * @param {number} [o.restarts]
   * @param {"windows"|"pca"|"random"} [o.start]
   * @param {boolean} [o.warmStart] eq. 19 sessions: start from an eq. 18 fit (the server's default)
   * @param {number} [o.tolerance]
   * @param {number|string} [o.seed]
   * @param {number|string|{version: number}} [o.ifMatch]
   * @returns {Promise<object>} version, mode, free_energy, free_energy_trace, sequences, frames, timings
   */
  async writeSequences(session, { sequences, images: imgs, mode = "replace", iterations, sweeps, restarts,
                                  start, warmStart, tolerance, seed, ifMatch } = {}) {
    if (!["replace", "append"].includes(mode)) throw new RangeError(`mode is replace or append, not ${mode}`);
    const body = dropUndefined({ mode, iterations, sweeps, restarts, start, warm_start: warmStart, tolerance,
                                 seed });
    if (sequences) body.sequences = sequences.map((q) => ({ mu: encodeCodes(q) }));
    if (imgs) body.observations = imgs.map((q) => encodeImages(q));
    return this.request("POST", `/v1/sessions/${sid(session)}/episodes`, { body, headers: ifMatchHeader(ifMatch) });
  }

  /**
   * POST /v1/sessions/{id}/infer: identities (T x P, q(b = 1)) and attribute means of a query
   * sequence (codes, or images on a model session).
   * @param {string|{id: string}} session
   * @param {object} o
   * @param {CodesInput} [o.codes]
   * @param {ImagesInput} [o.images]
   * @param {number} [o.sweeps]
   * @returns {Promise<{version: number, identities: Matrix, attributes: Matrix, freeEnergy: number|null, raw: object}>}
   */
  async inferSequence(session, { codes, images: imgs, sweeps } = {}) {
    const body = dropUndefined({ sweeps });
    if (codes) body.sequence = { mu: encodeCodes(codes) };
    if (imgs) body.observations = encodeImages(imgs);
    const d = await this.request("POST", `/v1/sessions/${sid(session)}/infer`, { body });
    return { version: d.version, identities: new Matrix(d.identities), attributes: new Matrix(d.attributes),
             freeEnergy: d.free_energy ?? null, raw: d };
  }

  /**
   * POST /v1/sessions/{id}/samples on a temporal session: one sequence drawn ancestrally.
   * @param {string|{id: string}} session
   * @param {object} o
   * @param {number} o.length frames
   * @param {number|string} [o.seed]
   * @param {"png"|"uint8"|"float32"|"json"|"none"} [o.format]
   * @param {"mean"|"sample"} [o.pixels]
   * @returns {Promise<{version: number, codes: Matrix, identities: number[][], attributes: Matrix, images: Images|null, raw: object}>}
   */
  async sampleSequence(session, { length, seed, format, pixels } = {}) {
    const body = dropUndefined({ length, seed, encoding: "base64", format, pixels });
    const d = await this.request("POST", `/v1/sessions/${sid(session)}/samples`, { body });
    return { version: d.version, codes: new Matrix(d.codes), identities: d.identities,
             attributes: new Matrix(d.attributes), images: images(d.observations), raw: d };
  }

  /**
   * POST /v1/sessions/{id}/continue: a prefix (codes, or images on a model session) continued by
   * `steps` frames: the predictive mean, P(b = 1) per identity, and seeded sampled continuations.
   * @param {string|{id: string}} session
   * @param {object} o
   * @param {number} o.steps
   * @param {CodesInput} [o.codes]
   * @param {ImagesInput} [o.images]
   * @param {number} [o.samples]
   * @param {number|string} [o.seed]
   * @param {number} [o.sweeps]
   * @param {"png"|"uint8"|"float32"|"json"|"none"} [o.format]
   * @param {"mean"|"sample"} [o.pixels]
   * @returns {Promise<{version: number, mean: Matrix, identities: Matrix, samples: Matrix[], images: Images|null, sampleImages: Images[], raw: object}>}
   */
  async continueSequence(session, { steps, codes, images: imgs, samples, seed, sweeps, format, pixels } = {}) {
    const body = dropUndefined({ steps, samples, seed, sweeps, encoding: "base64", format, pixels });
    if (codes) body.prefix = { mu: encodeCodes(codes) };
    if (imgs) body.observations = encodeImages(imgs);
    const d = await this.request("POST", `/v1/sessions/${sid(session)}/continue`, { body });
    const obs = d.observations || {};
    return { version: d.version, mean: new Matrix(d.mean), identities: new Matrix(d.identities),
             samples: (d.samples || []).map((m) => new Matrix(m)), images: images(obs.mean),
             sampleImages: (obs.samples || []).map(images), raw: d };
  }
}

/**
 * @typedef {object} ReadResult An iterative read.
 * @property {number} version the version read
 * @property {{codes: Matrix, clusters: number[][], addresses: object|null, images: Images|null}[]} steps
 *   each the state after that step
 * @property {Matrix|null} startCodes a read without a query: the codes sampled from memory
 * @property {Images|null} startImages and their images
 * @property {number[]} familiarity one number per query frame (<= 0, larger = more familiar):
 *   -|z - zhat|^2 / (2 sigma_z^2 n) of the cue's code z against the memory's reconstruction zhat,
 *   0 when the memory holds z exactly; compare it within one session (or sessions of one
 *   configuration)
 * @property {number|null} stoppedAt the first step from which every later step is identical
 *   (steps.length - 1: still changing at the last step)
 * @property {object} raw the whole response
 */

function problem(status, reason, text) {
  let p;
  try {
    p = JSON.parse(text);
    if (!p || typeof p !== "object" || Array.isArray(p)) throw new Error();
  } catch {
    p = { title: reason || "", detail: (text || "").slice(0, 500) };
  }
  return new VbmemError({ status: p.status ?? status, title: p.title ?? "", detail: p.detail ?? "",
                          field: p.field ?? null, requestId: p.request_id ?? null, type: p.type ?? null,
                          problem: p });
}

export default Client;
