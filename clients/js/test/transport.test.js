// transport.test.js -- the vbmem JavaScript client against a local node:http stub server (retries,
// Retry-After, timeouts, refused connections, headers), and its codecs (base64 float32, PNG) offline.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import {
  Client, ConnectionFailed, DEFAULT_URL, Images, Matrix, VbmemError, decodePng, encodeCodes, encodeImages,
  encodeMask, encodePng, fromBase64, pngInfo, toBase64,
} from "../index.js";
import { png, stub } from "./helpers.js";

const busy = (status = 503, retryAfter = "1") => [status, retryAfter === null ? {} : { "Retry-After": retryAfter },
  { type: "urn:vbmem:problem:busy", title: "Busy", status, detail: "queue full", request_id: "r1" }, 0];
const OK = [200, {}, { status: "ok" }, 0];

// The waits between attempts go through the client's `sleep` option: the tests record each wait
// with the number of requests the stub had seen when it began, which gives the order of attempts
// and waits without timing anything.
const recorder = (s) => {
  const waits = [];
  return { waits, sleep: async (sec) => { waits.push([sec, s.seen.length]); } };
};

test("a 503 is retried after its Retry-After", async () => {
  const s = await stub([busy(503, "7"), OK]);
  try {
    const r = recorder(s);
    assert.deepEqual(await new Client({ url: s.url, retries: 3, sleep: r.sleep }).healthz(), { status: "ok" });
    assert.deepEqual(s.seen.map((q) => `${q.method} ${q.url}`), ["GET /healthz", "GET /healthz"]);
    assert.deepEqual(r.waits, [[7, 1]]); // Retry-After's 7 s, waited after the first attempt, before the second
  } finally { await s.close(); }
});

test("a 503 outcome-unknown write is retried only with If-Match", async () => {
  const unknown = [503, { "Retry-After": "0" }, { type: "urn:vbmem:problem:outcome-unknown",
    title: "Write outcome unknown", status: 503, detail: "replicas did not confirm it", request_id: "r1" }, 0];
  const done = [200, { ETag: '"3"' }, { version: 3, mode: "append", elbo: { per_frame: -1 }, iterations: 1,
    converged: true, time_limited: false, frames: 1, retained_codes: 0, clusters: 1, rows: 1, groups: 1,
    timings: {} }, 0];
  let s = await stub([unknown, done]);
  try {
    const c = new Client({ url: s.url, retries: 3, sleep: recorder(s).sleep });
    const e = await c.write("s", { codes: [[0, 1]], mode: "append" }).catch((x) => x);
    assert.ok(e instanceof VbmemError);
    assert.equal(e.status, 503); assert.equal(e.type, "urn:vbmem:problem:outcome-unknown");
    assert.equal(s.seen.length, 1); // not sent twice: it may have been applied
  } finally { await s.close(); }
  s = await stub([unknown, done]);
  try {
    const c = new Client({ url: s.url, retries: 3, sleep: recorder(s).sleep });
    await c.write("s", { codes: [[0, 1]], mode: "append", ifMatch: 2 });
    assert.equal(s.seen.length, 2);
    assert.ok(s.seen.every((q) => q.headers["if-match"] === '"2"'));
  } finally { await s.close(); }
});

test("the default sleep waits its seconds on a setTimeout", async () => {
  const saved = globalThis.setTimeout;
  const asked = [];
  let during;
  globalThis.setTimeout = (fn, ms, ...a) => { asked.push(ms); return saved(fn, 0, ...a); };
  try {
    const p = new Client({ url: "http://127.0.0.1:9" })._sleep(7);
    during = asked.slice(); // the timers set by the call itself (others may follow before it resolves)
    await p;
  } finally { globalThis.setTimeout = saved; }
  assert.deepEqual(during, [7000]);
});

test("429s are retried `retries` times, then the error is thrown", async () => {
  const s = await stub([busy(429, "0"), busy(429, "0"), busy(429, "0")]);
  try {
    const r = recorder(s);
    const e = await new Client({ url: s.url, retries: 2, sleep: r.sleep }).createSession({ codeSize: 4 }).catch((x) => x);
    assert.ok(e instanceof VbmemError);
    assert.equal(e.status, 429); assert.equal(e.requestId, "r1"); assert.equal(e.title, "Busy");
    assert.equal(s.seen.length, 3);
    assert.ok(s.seen.every((q) => q.method === "POST" && q.url === "/v1/sessions" && JSON.parse(q.body).code_size === 4));
    assert.deepEqual(r.waits, [[0, 1], [0, 2]]); // attempt, wait, attempt, wait, attempt
  } finally { await s.close(); }
});

test("the waits: Retry-After capped at 60 s, else exponential backoff with jitter", async () => {
  const s = await stub([busy(503, "120"), busy(503, null), busy(503, null), busy(503, "garbage"), OK]);
  try {
    const r = recorder(s);
    await new Client({ url: s.url, retries: 4, sleep: r.sleep }).healthz();
    assert.equal(s.seen.length, 5);
    assert.deepEqual(r.waits.map(([, seen]) => seen), [1, 2, 3, 4]);
    const waits = r.waits.map(([sec]) => sec);
    assert.equal(waits.length, 4);
    assert.equal(waits[0], 60);
    assert.ok(waits[1] >= 0.5 && waits[1] <= 1.5, waits[1]); // 1 s (attempt 1) +-25 %
    assert.ok(waits[2] >= 1.5 && waits[2] <= 2.5, waits[2]); // 2 s
    assert.ok(waits[3] >= 3 && waits[3] <= 5, waits[3]); // 4 s
  } finally { await s.close(); }
});

test("no retry with retries 0, nor on a 422 (its field is kept)", async () => {
  const s = await stub([busy(503, "0"), [422, {}, { type: "urn:vbmem:problem:invalid", title: "t", status: 422, detail: "d", field: "codes" }, 0]]);
  try {
    const r = recorder(s);
    let e = await new Client({ url: s.url, retries: 0, sleep: r.sleep }).healthz().catch((x) => x);
    assert.equal(e.status, 503); assert.equal(s.seen.length, 1);
    e = await new Client({ url: s.url, retries: 3, sleep: r.sleep }).healthz().catch((x) => x);
    assert.equal(e.status, 422); assert.equal(e.field, "codes"); assert.equal(s.seen.length, 2);
    assert.deepEqual(r.waits, []); // neither waited
    assert.equal(e.message, "422 t: d (field codes)");
  } finally { await s.close(); }
});

test("an error body that is not JSON still gives a VbmemError", async () => {
  const s = await stub([[502, { "Content-Type": "text/html" }, "<html>bad gateway</html>", 0]]);
  try {
    const e = await new Client({ url: s.url, retries: 0 }).healthz().catch((x) => x);
    assert.ok(e instanceof VbmemError && !(e instanceof ConnectionFailed));
    assert.equal(e.status, 502); assert.equal(e.title, "Bad Gateway"); assert.match(e.detail, /bad gateway/);
  } finally { await s.close(); }
});

// (the test's own timeout only bounds a hang: a client that ignored `timeout` would wait forever)
test("a timeout and a refused connection are ConnectionFailed (status null)", { timeout: 60000 }, async () => {
  // the stub never answers (held until close): only the client's own timeout ends the request
  const s = await stub([[200, {}, { status: "ok" }, Infinity]]);
  try {
    const e = await new Client({ url: s.url, timeout: 0.3, retries: 0 }).healthz().catch((x) => x);
    assert.ok(e instanceof ConnectionFailed, String(e)); assert.equal(e.status, null);
    assert.match(e.detail, /no answer within 0\.3 s/);
    assert.equal(s.seen.length, 1);
  } finally { await s.close(); }
  const dead = await stub([OK]);
  await dead.close(); // nothing listens there now
  let e = await new Client({ url: dead.url, retries: 0 }).healthz().catch((x) => x);
  assert.ok(e instanceof ConnectionFailed, String(e));
  const waits = [];
  const c = new Client({ url: dead.url, retries: 2, sleep: async (sec) => { waits.push(sec); } });
  e = await c.healthz().catch((x) => x);
  assert.ok(e instanceof ConnectionFailed); assert.equal(waits.length, 2); // refused: retried
  assert.ok(waits[0] >= 0.375 && waits[0] <= 0.625 && waits[1] >= 0.75 && waits[1] <= 1.25, String(waits)); // backoff
  const ac = new AbortController();
  ac.abort();
  e = await new Client({ url: dead.url }).request("GET", "/healthz", { signal: ac.signal }).catch((x) => x);
  assert.equal(e.name, "AbortError"); // the caller's own abort is not a ConnectionFailed
});

test("headers and URLs: API key, If-Match, $VBMEM_URL, query, ids, JSON body", async () => {
  const s = await stub([OK]);
  const saved = [process.env.VBMEM_URL, process.env.VBMEM_API_KEY];
  try {
    process.env.VBMEM_URL = s.url + "/";
    process.env.VBMEM_API_KEY = "s3cret";
    const c = new Client();
    assert.equal(c.url, s.url); assert.equal(c.apiKey, "s3cret");
    await c.healthz();
    assert.equal(s.seen[0].headers.authorization, "Bearer s3cret");
    assert.equal(s.seen[0].headers["content-type"], undefined);
    const o = new Client({ url: s.url, apiKey: "other" });
    await o.resize("x y", { clusters: 3, ifMatch: 7 });
    let r = s.seen[1];
    assert.equal(r.headers.authorization, "Bearer other"); assert.equal(r.headers["if-match"], '"7"');
    assert.equal(r.url, "/v1/sessions/x%20y/resize"); assert.deepEqual(JSON.parse(r.body), { clusters: 3 });
    assert.equal(r.headers["content-type"], "application/json");
    await o.write({ id: "abc", version: 4 }, { codes: [[1]], ifMatch: { version: 4 } });
    assert.equal(s.seen[2].headers["if-match"], '"4"');
    await o.write("abc", { mode: "refit", ifMatch: "*" });
    assert.equal(s.seen[3].headers["if-match"], "*");
    await o.write("abc", { mode: "refit", ifMatch: 'W/"3"' });
    assert.equal(s.seen[4].headers["if-match"], 'W/"3"');
    await o.request("GET", "/v1/sessions", { query: { limit: 5, cursor: "a/b", x: undefined } });
    assert.equal(s.seen[5].url, "/v1/sessions?limit=5&cursor=a%2Fb");
    delete process.env.VBMEM_URL;
    delete process.env.VBMEM_API_KEY;
    assert.equal(new Client().url, DEFAULT_URL); assert.equal(new Client().apiKey, null);
  } finally {
    if (saved[0] === undefined) delete process.env.VBMEM_URL; else process.env.VBMEM_URL = saved[0];
    if (saved[1] === undefined) delete process.env.VBMEM_API_KEY; else process.env.VBMEM_API_KEY = saved[1];
    await s.close();
  }
});

test("codes go as base64 float32 and come back as a Matrix", () => {
  const t = encodeCodes([[1, 2], [3, 4.5]]);
  assert.equal(t.dtype, "float32"); assert.deepEqual(t.shape, [2, 2]);
  assert.deepEqual(Array.from(new Float32Array(fromBase64(t.data).buffer)), [1, 2, 3, 4.5]);
  const m = new Matrix(t);
  assert.deepEqual(m.toArray(), [[1, 2], [3, 4.5]]); assert.equal(m.length, 2);
  assert.deepEqual([...m].map((r) => Array.from(r)), [[1, 2], [3, 4.5]]);
  assert.deepEqual(encodeCodes(m), t);
  assert.deepEqual(encodeCodes({ shape: [2, 2], data: [1, 2, 3, 4.5] }), t);
  const j = new Matrix([[1, null], [2, 3]]); // a JSON matrix; null is a non-finite value
  assert.ok(Number.isNaN(j.data[1])); assert.deepEqual(j.shape, [2, 2]);
  assert.throws(() => encodeCodes([[1, 2], [3]]), RangeError);
  assert.throws(() => encodeCodes([]), RangeError);
});

test("image and mask forms", () => {
  const p = encodePng(new Uint8Array(4), 2, 2, 1);
  assert.deepEqual(encodeImages(p), [toBase64(p)]);
  assert.deepEqual(encodeImages([p.buffer]), [toBase64(p)]);
  assert.deepEqual(encodeImages(["data:image/png;base64,AAAA"]), ["data:image/png;base64,AAAA"]);
  assert.deepEqual(encodeImages({ shape: [1, 2, 2], data: new Uint8Array([1, 2, 3, 4]) }),
    { dtype: "uint8", shape: [1, 1, 2, 2], data: toBase64(new Uint8Array([1, 2, 3, 4])) });
  assert.equal(encodeImages({ shape: [1, 1, 1, 1], data: new Float32Array([0.5]) }).dtype, "float32");
  const nested = [[[[0, 1]]]];
  assert.equal(encodeImages(nested), nested);
  assert.deepEqual(encodeMask([[1, 0], [true, false]]), { dtype: "uint8", shape: [2, 2], data: toBase64(new Uint8Array([1, 0, 1, 0])) });
  assert.deepEqual(encodeMask([p]), [toBase64(p)]); // PNG bytes are a pixel mask, not a code mask
  assert.deepEqual(encodeMask({ shape: [1, 1, 1, 2], data: [0, 7] }), { dtype: "uint8", shape: [1, 1, 1, 2], data: toBase64(new Uint8Array([0, 1])) });
  assert.equal(encodeMask(undefined), undefined);
  assert.throws(() => encodeImages([]), RangeError);
  assert.throws(() => encodeImages(42), TypeError);
});

test("PNG: the client's writer and reader, and PNGs of every colour type and filter from node:zlib", async () => {
  const w = 13, h = 9;
  const grey = new Uint8Array(w * h).map((_, i) => (i * 37) & 0xff);
  const rgb = new Uint8Array(w * h * 3).map((_, i) => (i * 11 + (i >> 4)) & 0xff);
  const g = await decodePng(encodePng(grey, w, h, 1));
  assert.deepEqual([g.width, g.height, g.channels], [w, h, 1]); assert.deepEqual(g.pixels, grey);
  const big = new Uint8Array(300 * 300).map((_, i) => i & 0xff); // > 65535 bytes: several stored blocks
  assert.deepEqual((await decodePng(encodePng(big, 300, 300, 1))).pixels, big);
  assert.deepEqual((await decodePng(toBase64(encodePng(rgb, w, h, 3)))).pixels, rgb);
  for (const colorType of [0, 2, 4, 6]) {
    const spp = { 0: 1, 2: 3, 4: 2, 6: 4 }[colorType];
    const px = new Uint8Array(w * h * spp).map((_, i) => (i * 29 + (i >> 3) * 5) & 0xff);
    const d = await decodePng(png(px, w, h, { colorType, filters: [0, 1, 2, 3, 4] }));
    const ch = colorType === 0 || colorType === 4 ? 1 : 3;
    assert.equal(d.channels, ch);
    const want = new Uint8Array(w * h * ch);
    for (let i = 0; i < w * h; i++) for (let c = 0; c < ch; c++) want[i * ch + c] = px[i * spp + c];
    assert.deepEqual(d.pixels, want, `colour type ${colorType}`);
  }
  assert.deepEqual(pngInfo(png(rgb, w, h, { colorType: 2 })), { width: w, height: h, bitDepth: 8, colorType: 2, channels: 3 });
  // Images of a uint8 RGB tensor: PNG data URLs and RGBA
  const chw = new Uint8Array(3 * 2 * 2).map((_, i) => i * 10);
  const im = new Images({ dtype: "uint8", shape: [1, 3, 2, 2], data: toBase64(chw) });
  const d = await decodePng(im.dataUrl(0));
  assert.deepEqual(Array.from(d.pixels), [0, 40, 80, 10, 50, 90, 20, 60, 100, 30, 70, 110]);
  assert.deepEqual(Array.from(await im.rgba(0)).slice(0, 8), [0, 40, 80, 255, 10, 50, 90, 255]);
  const f = new Images({ dtype: "float32", shape: [1, 1, 1, 3], data: toBase64(new Float32Array([0, 0.5, 1])) });
  assert.deepEqual(Array.from(await f.uint8()), [0, 128, 255]);
});

test("without Buffer (the browser path: btoa/atob) the codecs give the same bytes", () => {
  const url = new URL("../index.js", import.meta.url).href;
  const script = `delete globalThis.Buffer;
    const m = await import(${JSON.stringify(url)});
    const b = new Uint8Array(70000).map((_, i) => (i * 13) & 0xff);
    const s = m.toBase64(b);
    const back = m.fromBase64(s);
    const t = m.encodeCodes([[1.5, -2], [3, 1e-3]]);
    console.log(JSON.stringify([s.length, back.length === b.length && back.every((v, i) => v === b[i]),
      t.data, new m.Matrix(t).toArray(), m.fromBase64("data:x;base64,AQID").join()]));`;
  const out = JSON.parse(execFileSync(process.execPath, ["--input-type=module", "-e", script]).toString());
  const b = new Uint8Array(70000).map((_, i) => (i * 13) & 0xff);
  assert.deepEqual(out, [Buffer.from(b).toString("base64").length, true, encodeCodes([[1.5, -2], [3, 1e-3]]).data,
    [[1.5, -2], [3, Math.fround(1e-3)]], "1,2,3"]);
  assert.ok(fileURLToPath(url).endsWith("index.js"));
});
