// helpers.js -- test helpers of the vbmem JavaScript client (no tests here): a real vbmemd on an
// ephemeral loopback port, Fashion-MNIST test images and PNGs written with node:zlib, and a
// scripted node:http stub server.
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const MODEL = "fashion-mnist-mixture-v2";
const FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

/** The vbmemd binary: $VBMEMD (relative to the working directory) or build/vbmemd of the tree. */
export function vbmemdPath() {
  const p = process.env.VBMEMD ? path.resolve(process.env.VBMEMD) : path.join(ROOT, "build", "vbmemd");
  if (!existsSync(p)) throw new Error(`no vbmemd at ${p} (build it, or set VBMEMD)`);
  return p;
}

/** Start vbmemd on 127.0.0.1 with a kernel-chosen port; resolves to {url, port, lines, stop()}. */
export function startDaemon(...args) {
  const proc = spawn(vbmemdPath(), ["--listen", "127.0.0.1:0", "--threads", "1", ...args],
    { stdio: ["ignore", "ignore", "pipe"] });
  const lines = [];
  return new Promise((resolve, reject) => {
    let buf = "";
    let port = null;
    const timer = setTimeout(() => { proc.kill("SIGKILL"); reject(new Error("vbmemd did not start:\n" + lines.join("\n"))); }, 60000);
    proc.stderr.on("data", (chunk) => {
      buf += chunk.toString();
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        lines.push(line);
        if (port === null && line.includes('"msg":"listening"')) {
          port = JSON.parse(line).port;
          clearTimeout(timer);
          resolve({
            port, url: `http://127.0.0.1:${port}`, lines, proc,
            stop: () => new Promise((res) => {
              if (proc.exitCode !== null) return res(proc.exitCode);
              proc.once("exit", (code, sig) => res(code ?? sig));
              proc.kill("SIGTERM");
            }),
          });
        }
      }
    });
    proc.once("exit", (code) => { clearTimeout(timer); if (port === null) reject(new Error(`vbmemd exited ${code}:\n` + lines.join("\n"))); });
    proc.once("error", reject);
  });
}

/** n Fashion-MNIST test images as Uint8Arrays of 784 bytes (row-major 28 x 28). */
export function fashionImages(n, offset = 0) {
  const data = zlib.gunzipSync(readFileSync(FASHION));
  const base = 16 + offset * 784;
  return Array.from({ length: n }, (_, i) => new Uint8Array(data.subarray(base + i * 784, base + (i + 1) * 784)));
}

function chunk(kind, body) {
  const out = Buffer.alloc(12 + body.length);
  out.writeUInt32BE(body.length, 0);
  out.write(kind, 4, "latin1");
  Buffer.from(body).copy(out, 8);
  out.writeUInt32BE(zlib.crc32 ? zlib.crc32(out.subarray(4, 8 + body.length)) : crc(out.subarray(4, 8 + body.length)), 8 + body.length);
  return out;
}

function crc(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

/**
 * An 8-bit PNG written with node:zlib (compressed), each row with filter `filters[y % len]`
 * (0 none, 1 sub, 2 up, 3 average, 4 Paeth). colorType 0 grey, 2 RGB, 4 grey+alpha, 6 RGBA.
 */
export function png(pixels, width, height, { colorType = 0, filters = [0] } = {}) {
  const spp = { 0: 1, 2: 3, 4: 2, 6: 4 }[colorType];
  const stride = width * spp;
  const raw = Buffer.alloc((stride + 1) * height);
  const paeth = (a, b, c) => {
    const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
  };
  for (let y = 0; y < height; y++) {
    const f = filters[y % filters.length];
    raw[y * (stride + 1)] = f;
    for (let x = 0; x < stride; x++) {
      const v = pixels[y * stride + x];
      const a = x >= spp ? pixels[y * stride + x - spp] : 0;
      const b = y > 0 ? pixels[(y - 1) * stride + x] : 0;
      const c = x >= spp && y > 0 ? pixels[(y - 1) * stride + x - spp] : 0;
      const pred = [0, a, b, (a + b) >> 1, paeth(a, b, c)][f];
      raw[y * (stride + 1) + 1 + x] = (v - pred) & 0xff;
    }
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; ihdr[9] = colorType;
  return new Uint8Array(Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr),
    chunk("IDAT", zlib.deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]));
}

/** An 8-bit grey 28 x 28 PNG of 784 bytes. */
export const greyPng = (pixels) => png(pixels, 28, 28);

/**
 * A local HTTP server answering from a script of [status, headers, body, delaySeconds] entries,
 * the last repeated; `seen` records {method, url, headers, body} of each request. A delay of
 * Infinity holds the request unanswered until close().
 */
export async function stub(script) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const parts = [];
    req.on("data", (c) => parts.push(c));
    req.on("end", () => {
      seen.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(parts).toString() });
      const [status, headers, body, delay] = script[Math.min(seen.length, script.length) - 1];
      if (delay === Infinity) return; // held: close() drops the connection
      setTimeout(() => {
        const data = typeof body === "string" ? body : JSON.stringify(body);
        res.writeHead(status, { "Content-Type": status >= 400 ? "application/problem+json" : "application/json",
                                "Content-Length": Buffer.byteLength(data), ...headers });
        res.end(data);
      }, (delay || 0) * 1000);
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return {
    seen, url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); }),
  };
}
