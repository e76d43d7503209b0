// client.test.js -- every method of the vbmem JavaScript client against a real vbmemd (sessions in
// memory) on an ephemeral loopback port: VBMEMD=build/vbmemd node --test clients/js/test/
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";

import {
  Client, ConnectionFailed, Images, Matrix, VbmemError, decodePng, encodeCodes, fromBase64, toBase64,
} from "../index.js";
import { MODEL, ROOT, fashionImages, greyPng, startDaemon } from "./helpers.js";

const CODES = [[0, 0, 0, 0], [0.1, 0, 0, 0], [5, 5, 5, 5], [5, 5.1, 5, 5]];
const latent = (c, mem = {}) => c.createSession({ codeSize: 4, memory: { kind: "mixture", clusters: 2, rows: 2, retainMax: 1000, ...mem } });
// Float32 network outputs compared across batch sizes. The networks' sums run in float32, and on
// the OpenBLAS path (CPUs without AVX-512, or VBMEM_NETS_NO_AVX512=1) their order depends on how
// many images share a GEMM, so bit equality across batch sizes is not promised: an image alone and the same image in a batch of three differ by a few float32
// ulps (observed 4e-7 on values near 3.4, relative 1.2e-7, on the OpenBLAS path). The tolerance,
// 1e-5 relative (the bound tests/test_nets.c asserts between frame-by-frame and batched
// encodes), is some 80 times that, and some 10^4 times below what a client mistake gives (another
// row or image, a shifted or mis-decoded float32: differences of 0.1 and more on these codes).
const F32_REL = 1e-5;
const assertFloat32Close = (got, want, what) => {
  assert.equal(got.length, want.length, what);
  for (let i = 0; i < want.length; i++) {
    assert.ok(Math.abs(got[i] - want[i]) <= F32_REL * (1 + Math.abs(want[i])),
      `${what}: element ${i} is ${got[i]}, want ${want[i]} within ${F32_REL} relative`);
  }
};
const rejects = async (p, check) => {
  let err = null;
  try { await p; } catch (e) { err = e; }
  assert.ok(err instanceof VbmemError, `expected a VbmemError, got ${err}`);
  check(err);
  return err;
};

describe("against vbmemd", () => {
  let d, c, pngs;

  before(async () => {
    d = await startDaemon();
    c = new Client({ url: d.url, retries: 0 });
    pngs = fashionImages(80).map(greyPng);
  });
  after(async () => { assert.equal(await d.stop(), 0, d.lines.slice(-20).join("\n")); });

  test("healthz and readyz", async () => {
    assert.deepEqual(await c.healthz(), { status: "ok" });
    const r = await c.readyz();
    assert.equal(r.status, "ready");
    assert.equal(r.checks.models_loaded, true);
  });

  test("models and model (404 for an unknown one)", async () => {
    const ms = await c.models();
    // and the first, and the second (Omniglot)
    assert.deepEqual(ms.map((m) => m.name).sort(), [MODEL, "fashion-mnist-mixture", "omniglot-mixture"].sort());
    const m = ms.find((x) => x.name === MODEL);
    assert.equal(m.default, true);
    assert.deepEqual(ms.filter((x) => x.name !== MODEL).map((x) => x.default), [false, false]);
    assert.deepEqual(m.observationShape, [1, 28, 28]);
    assert.equal(m.codeSize, 64);
    assert.equal(m.episodeLength, 64);
    assert.equal(m.defaults.kind, "mixture");
    const one = await c.model(MODEL);
    assert.equal(one.name, MODEL);
    assert.ok("architecture" in one.raw);
    await rejects(c.model("no-such-model"), (e) => assert.equal(e.status, 404));
  });

  test("encode and decode: every image form in, every format out", async () => {
    const enc = await c.encode(MODEL, pngs.slice(0, 3)); // PNG bytes
    assert.deepEqual(enc.mu.shape, [3, 64]);
    assert.deepEqual(enc.sigma2.shape, [3, 64]);
    assert.ok(enc.mu instanceof Matrix && enc.mu.data instanceof Float32Array);
    assert.ok([...enc.sigma2.row(0)].every((v) => v > 0));
    const same = (r) => assert.deepEqual(Array.from(r.mu.data), Array.from(enc.mu.data));
    same(await c.encode(MODEL, pngs.slice(0, 3).map(toBase64))); // base64 strings
    same(await c.encode(MODEL, pngs.slice(0, 3).map((p) => "data:image/png;base64," + toBase64(p)))); // data: URLs
    const raw = new Uint8Array(3 * 784);
    fashionImages(3).forEach((x, i) => raw.set(x, i * 784));
    same(await c.encode(MODEL, { dtype: "uint8", shape: [3, 28, 28], data: raw })); // uint8 tensor, [n, h, w]
    const flt = await c.encode(MODEL, { shape: [3, 1, 28, 28], data: Float32Array.from(raw, (v) => (v + 0.5) / 256) });
    flt.mu.data.forEach((v, i) => assert.ok(Math.abs(v - enc.mu.data[i]) < 1e-4));
    const one = await c.encode(MODEL, pngs[0]); // one image, not in an array
    assert.deepEqual(one.mu.shape, [1, 64]);
    assertFloat32Close(one.mu.row(0), enc.mu.row(0), "one image alone against the first of a batch of three");
    assertFloat32Close(one.sigma2.row(0), enc.sigma2.row(0), "its variances");

    const dec = await c.decode(MODEL, enc.mu); // a Matrix in, format uint8 (the default)
    assert.ok(dec.images instanceof Images);
    assert.equal(dec.images.format, "uint8");
    assert.deepEqual(dec.images.shape, [3, 1, 28, 28]);
    assert.equal(dec.images.length, 3);
    const u8 = await dec.images.uint8();
    const px = await decodePng(dec.images.png(0)); // a PNG written by the client
    assert.equal(px.width, 28); assert.equal(px.height, 28); assert.equal(px.channels, 1);
    assert.deepEqual(px.pixels, u8.subarray(0, 784));
    const pngOut = await c.decode(MODEL, enc.mu.toArray().slice(0, 2), { format: "png" }); // rows in
    assert.equal(pngOut.images.format, "png");
    assert.deepEqual(pngOut.images.shape, [2, 1, 28, 28]);
    // the server's PNGs, inflated, against its uint8 answer for the same two rows (the same batch:
    // a batch of three may round a float32 mean to the other side of a grey level)
    const u8two = await (await c.decode(MODEL, enc.mu.toArray().slice(0, 2))).images.uint8();
    assert.deepEqual(await pngOut.images.uint8(), u8two);
    assert.match(pngOut.images.dataUrl(1), /^data:image\/png;base64,iVBOR/);
    const f32 = await c.decode(MODEL, { shape: [3, 64], data: enc.mu.data }, { format: "float32" });
    assert.equal(f32.images.format, "float32");
    assert.deepEqual(await f32.images.uint8(), u8);
    const json = await c.decode(MODEL, enc.mu, { format: "json", pixels: "sample", seed: 3 });
    assert.equal(json.images.format, "json");
    assert.deepEqual(json.images.shape, [3, 1, 28, 28]);
    // the client's PNG data URLs (stored deflate) go back in: the same pixels as a uint8 tensor
    const back = await c.encode(MODEL, dec.images.dataUrls());
    const backT = await c.encode(MODEL, { dtype: "uint8", shape: [3, 1, 28, 28], data: u8 });
    assert.deepEqual(Array.from(back.mu.data), Array.from(backT.mu.data));
    const rgba = await dec.images.rgba(0);
    assert.equal(rgba.length, 784 * 4);
    assert.equal(rgba[3], 255);
    assert.equal(rgba[400 * 4 + 1], u8[400]);
  });

  test("latent session: write, append, If-Match, refit, resize, sample, read, export, import, delete", async () => {
    const s = await latent(c);
    assert.equal(s.version, 1); assert.equal(s.model, null); assert.equal(s.codeSize, 4);
    assert.equal(s.kind, "mixture"); assert.equal(s.clusters, 2); assert.equal(s.config.retain_max, 1000);
    let r = await c.write(s, { codes: CODES, sigma2: 0.01, seed: 1 });
    assert.equal(r.mode, "replace"); assert.equal(r.version, 2); assert.equal(r.frames, 4);
    assert.equal(typeof r.elboPerFrame, "number"); assert.ok(r.iterations > 0);
    assert.equal(c.lastEtag, '"2"');
    r = await c.write(s, { codes: [Float32Array.of(1, 2, 3, 4)], mode: "append", ifMatch: 2 });
    assert.equal(r.mode, "append"); assert.equal(r.version, 3); assert.equal(r.frames, 5);
    await rejects(c.write(s, { codes: [[1, 2, 3, 4]], mode: "append", ifMatch: 2 }), (e) => {
      assert.equal(e.status, 409);
    });
    r = await c.write(s.id, { mode: "refit", ifMatch: '"3"' });
    assert.equal(r.mode, "refit"); assert.equal(r.version, 4);
    r = await c.resize(s, { clusters: 3, seed: 2, ifMatch: { version: 4 } });
    assert.equal(r.clusters, 3); assert.equal(r.version, 5);
    assert.equal(typeof r.elboBefore, "number"); assert.equal(typeof r.elboAfter, "number");
    const smp = await c.sample(s, { count: 3, seed: 7 });
    assert.deepEqual(smp.codes.shape, [3, 4]); assert.equal(smp.images, null); assert.equal(smp.clusters.length, 3);
    const rd = await c.read(s, { codes: [[4, 4, 4, 4]], steps: 3, mode: "mean", seed: 1 });
    assert.equal(rd.steps.length, 3); assert.deepEqual(rd.steps[0].codes.shape, [1, 4]); assert.equal(rd.version, 5);
    assert.ok(rd.steps[0].addresses && rd.steps[0].addresses.s);
    const rc = await c.read(s, { codes: encodeCodes([[4, 4, 4, 4]]), mask: [[1, 1, 0, 0]], steps: 2, candidates: 4, seed: 1 });
    assert.equal(rc.steps.length, 2);
    assert.deepEqual(Array.from(rc.steps[1].codes.row(0).subarray(0, 2)), [4, 4]); // known values kept
    const rb = await c.read(s, { codes: [[4, 4, 4, 4]], mask: [[true, false, false, false]], cueNoise: 0.5,
                                 iterations: 1, seed: 1 });
    assert.equal(rb.steps.length, 1);
    const rs = await c.read(s, { count: 2, steps: 1, mode: "sample", seed: 3 });
    assert.deepEqual(rs.startCodes.shape, [2, 4]); assert.equal(rs.steps.length, 1); assert.equal(rs.startImages, null);
    const g = await c.getSession(s.id);
    assert.equal(g.version, 5); assert.equal(g.clusters, 3); assert.equal(c.lastEtag, '"5"');
    const mem = await c.exportMemory(s);
    assert.equal(mem.format, "vbmem-memory");
    const t = await latent(c);
    const imp = await c.importMemory(t, JSON.stringify(mem), { ifMatch: 1 });
    assert.equal(imp.version, 2); assert.equal(imp.clusters, 3);
    assert.deepEqual(await c.exportMemory(t), mem); // bit-exact through JSON
    await rejects(c.deleteSession(s, { ifMatch: 4 }), (e) => assert.equal(e.status, 409));
    assert.equal(await c.deleteSession(s, { ifMatch: g }), undefined);
    await c.deleteSession(t.id);
    const e = await rejects(c.getSession(s.id), (x) => assert.equal(x.status, 404));
    assert.ok(e.title && e.requestId);
  });

  test("forget: codes on a session that retains them (exact), on one that does not (downdate), images", async () => {
    const s = await latent(c);
    await c.write(s, { codes: CODES, seed: 1, init: "random" });
    let r = await c.forget(s, { codes: [[5, 5.1, 5, 5.02]], seed: 1, init: "random", ifMatch: 2 });
    assert.equal(r.exact, true); assert.equal(r.version, 3); assert.equal(r.frames, 3); assert.equal(r.retainedCodes, 3);
    assert.equal(typeof r.elboPerFrame, "number"); assert.equal(r.removed.length, 1);
    assert.equal(r.removed[0].cue, 0); assert.equal(r.removed[0].item, 3);
    assert.ok(Math.abs(r.removed[0].distance - 0.02) < 1e-6, `distance ${r.removed[0].distance}`);
    assert.equal(r.removed[0].clusters.length, 1); assert.equal(c.lastEtag, '"3"');
    assert.equal((await c.exportMemory(s)).codes.mu.length, 3);
    await rejects(c.forget(s, { codes: [[0, 0, 0, 0]], ifMatch: 2 }), (e) => assert.equal(e.status, 409));
    await rejects(c.forget(s, { codes: [[0, 0, 0]] }), (e) => { assert.equal(e.status, 422); assert.equal(e.field, "codes"); });
    await assert.rejects(c.forget(s, {}), TypeError);
    await assert.rejects(c.forget(s, { codes: CODES, images: pngs.slice(0, 1) }), TypeError);
    const d = await latent(c, { retainMax: 0 });
    await c.write(d, { codes: [...CODES, ...CODES, ...CODES], seed: 1 });
    r = await c.forget(d, { codes: CODES.slice(0, 1) });
    assert.equal(r.exact, false); assert.equal(r.removed[0].item, null); assert.equal(r.elbo, null);
    assert.equal(r.elboPerFrame, null); assert.equal(r.frames, 11);
    const m = await c.createSession({ memory: { kind: "mixture", clusters: 2, retainMax: 10 } });
    await c.write(m, { images: pngs.slice(0, 4), seed: 1 });
    r = await c.forget(m, { images: [pngs[2]], seed: 1 });
    assert.equal(r.exact, true); assert.equal(r.removed[0].item, 2); assert.equal(r.retainedCodes, 3);
    for (const x of [s, d, m]) await c.deleteSession(x);
  });

  test("listSessions pages and iterSessions walks them all", async () => {
    const made = new Set();
    for (let i = 0; i < 5; i++) made.add((await latent(c)).id);
    const page = await c.listSessions({ limit: 2 });
    assert.equal(page.sessions.length, 2); assert.ok(page.nextCursor);
    const next = await c.listSessions({ limit: 2, cursor: page.nextCursor });
    assert.ok(next.sessions[0].id > page.sessions[1].id); // id order
    const every = [];
    for await (const s of c.iterSessions({ pageSize: 2 })) every.push(s.id);
    for (const id of made) assert.ok(every.includes(id));
    assert.deepEqual(every, [...every].sort());
    for (const id of made) await c.deleteSession(id);
  });

  test("a session on the bundled model: PNG writes, samples, and a masked recall read", async () => {
    const s = await c.createSession();
    assert.equal(s.model, MODEL); assert.equal(s.codeSize, 64);
    let r = await c.write(s, { images: pngs.slice(0, 64), seed: 1 });
    assert.equal(r.frames, 64); assert.equal(r.version, 2);
    r = await c.write(s, { images: pngs.slice(64, 70).map((p) => "data:image/png;base64," + toBase64(p)), mode: "append" });
    assert.equal(r.frames, 70);
    const enc = await c.encode(MODEL, pngs.slice(70, 72)); // codes with their variances (Matrix each)
    r = await c.write(s, { codes: enc.mu, sigma2: enc.sigma2, mode: "append", ifMatch: r.version });
    assert.equal(r.frames, 72); assert.equal(r.version, 4);
    const smp = await c.sample(s, { count: 4, seed: 1, format: "uint8" });
    assert.deepEqual(smp.images.shape, [4, 1, 28, 28]); assert.deepEqual(smp.codes.shape, [4, 64]);
    const smpPng = await c.sample(s, { count: 4, seed: 1 }); // the server's default format, png
    assert.equal(smpPng.images.format, "png");
    // the same draw decoded as one batch of four: the inflated PNGs are the uint8 answer
    assert.deepEqual(await smpPng.images.uint8(), await smp.images.uint8());
    // a masked read: the top half known (a white/black mask PNG, as a canvas gives a data: URL)
    const mask = greyPng(new Uint8Array(784).map((_, i) => (i < 392 ? 255 : 0)));
    const rd = await c.read(s, { images: [pngs[0]], mask: ["data:image/png;base64," + toBase64(mask)], mode: "recall",
                                 steps: 3, seed: 2, candidates: 4, format: "uint8" });
    assert.equal(rd.steps.length, 3);
    const known = fashionImages(1)[0].subarray(0, 392);
    for (const st of rd.steps) {
      assert.deepEqual(st.images.shape, [1, 1, 28, 28]);
      assert.deepEqual((await st.images.uint8()).subarray(0, 392), known); // the known pixels come back exactly
    }
    // the same read with a uint8 tensor mask and PNG output
    const rt = await c.read(s, { images: pngs[0], mask: { shape: [1, 1, 28, 28], data: new Uint8Array(784).map((_, i) => (i < 392 ? 1 : 0)) },
                                 steps: 1, seed: 2, candidates: 4 });
    assert.equal(rt.steps[0].images.format, "png");
    assert.deepEqual((await rt.steps[0].images.uint8()).subarray(0, 392), known);
    for (const mode of ["mean", "sample"]) {
      assert.equal((await c.read(s, { images: pngs[0], mode, steps: 2, seed: 1 })).steps.length, 2);
    }
    const start = await c.read(s, { count: 2, mode: "sample", seed: 4 });
    assert.deepEqual(start.startImages.shape, [2, 1, 28, 28]);
    await c.deleteSession(s);
  });

  test("a read's familiarity (written images more familiar than new ones), stoppedAt and answer", async () => {
    const s = await c.createSession({ model: MODEL });
    await c.write(s, { images: pngs.slice(0, 32), seed: 1 });
    const written = await c.read(s, { images: pngs.slice(0, 8), steps: 1, seed: 1 });
    const unseen = await c.read(s, { images: pngs.slice(50, 58), steps: 1, seed: 1 });
    for (const r of [written, unseen]) {
      assert.equal(r.familiarity.length, 8);
      assert.deepEqual(r.familiarity, r.raw.familiarity);
      assert.ok(r.familiarity.every((f) => Number.isFinite(f) && f <= 0), String(r.familiarity));
    }
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
    assert.ok(mean(written.familiarity) > mean(unseen.familiarity),
      `written ${written.familiarity} vs never written ${unseen.familiarity}`);
    const mask = greyPng(new Uint8Array(784).map((_, i) => (i < 392 ? 255 : 0)));
    for (const answer of [undefined, "clean", "blend"]) {
      const r = await c.read(s, { images: [pngs[3]], mask: [mask], steps: 4, seed: 2, cueNoise: 0.1, answer });
      assert.equal(r.steps.length, 4);
      assert.ok(Number.isInteger(r.stoppedAt) && r.stoppedAt >= 0 && r.stoppedAt <= 3, String(r.stoppedAt));
      assert.equal(r.stoppedAt, r.raw.stopped_at);
      assert.equal(r.familiarity.length, 1);
    }
    for (const bad of [{ answer: "noisy" }, { answer: "blend", mode: "mean" }]) {
      await rejects(c.read(s, { images: [pngs[3]], steps: 1, ...bad }), (x) => {
        assert.equal(x.status, 422); assert.equal(x.field, "answer");
      });
    }
    await c.deleteSession(s);
  });

  test("temporal sessions: sequences, append, infer, a sampled sequence, a continuation (codes and images)", async () => {
    const seq = (n, k) => Array.from({ length: n }, (_, t) => [Math.sin(t + k), Math.cos(t * 0.7 + k), 0.1 * t, k]);
    const s = await c.createTemporalSession({ codeSize: 4, memory: { components: 2 } });
    assert.equal(s.kind, "temporal");
    assert.equal(s.raw.components, 2);
    const w = await c.writeSequences(s, { sequences: [seq(10, 0), seq(8, 1)], iterations: 10, seed: 1, start: "pca",
                                          warmStart: true });
    assert.equal(w.frames, 18);
    assert.equal(w.free_energy_trace.length, 10);
    const a = await c.writeSequences(s, { sequences: [seq(5, 2)], mode: "append", iterations: 3, ifMatch: 2 });
    assert.equal(a.sequences, 3);
    const inf = await c.inferSequence(s, { codes: seq(6, 3) });
    assert.deepEqual(inf.identities.shape, [6, 2]);
    const smp = await c.sampleSequence(s, { length: 5, seed: 2 });
    assert.deepEqual(smp.codes.shape, [5, 4]);
    const k = await c.continueSequence(s, { steps: 3, codes: seq(6, 3), samples: 2, seed: 1 });
    assert.deepEqual(k.mean.shape, [3, 4]);
    assert.equal(k.samples.length, 2);
    await rejects(c.writeSequences(s, { sequences: [seq(1, 0)] }), (e) => {
      assert.equal(e.status, 422);
      assert.equal(e.field, "sequences[0].mu");
    });
    const m = await c.createTemporalSession({ model: MODEL });
    await c.writeSequences(m, { images: [pngs.slice(0, 4), pngs.slice(4, 8)], iterations: 3 });
    const km = await c.continueSequence(m, { steps: 2, images: pngs.slice(8, 11), format: "png" });
    assert.equal(km.images.length, 2);
    await c.deleteSession(s);
    await c.deleteSession(m);
  });

  test("error mapping: 422 with field, 404, nothing retried", async () => {
    const s = await latent(c);
    const e = await rejects(c.write(s, { codes: [[1, 2, 3]] }), (x) => {
      assert.equal(x.status, 422); assert.ok(x.field && x.field.startsWith("codes"), x.field);
    });
    assert.ok(e.detail && e.requestId && e.title);
    assert.equal(e.problem.status, 422);
    assert.match(e.type, /^urn:vbmem:problem:/);
    assert.ok(e.message.includes("422") && e.message.includes(e.field));
    assert.ok(e instanceof Error && !(e instanceof ConnectionFailed));
    await rejects(c.createSession({ codeSize: 4, memory: { kind: "nonsense" } }), (x) => {
      assert.equal(x.status, 422); assert.ok(x.field.startsWith("memory"), x.field);
    });
    await rejects(c.read(s, { codes: [[0, 0, 0, 0]], mode: "mean", candidates: 3 }), (x) => {
      assert.equal(x.status, 422); assert.equal(x.field, "candidates");
    });
    await rejects(c.read(s, { codes: [[0, 0, 0, 0]], cueNoise: -1 }), (x) => assert.equal(x.field, "cue_noise"));
    await rejects(c.encode(MODEL, [toBase64(new Uint8Array([1, 2, 3]))]), (x) => {
      assert.equal(x.status, 422); assert.equal(x.field, "observations[0]");
    });
    await rejects(c.deleteSession("0".repeat(32)), (x) => assert.equal(x.status, 404));
    await assert.rejects(c.write(s, { mode: "upsert" }), RangeError); // checked before sending
    await c.deleteSession(s);
  });
});

test("infer: a served RPM's posterior against rpm.py's numbers (tests/data/golden_rpm_io.json)", async () => {
  // the golden RPM of train/golden_rpm.py (J = 3 rows, latent size 1), served under a name of its own
  const data = path.join(ROOT, "tests", "data");
  const golden = JSON.parse(readFileSync(path.join(data, "golden_rpm_io.json"), "utf8"));
  const dir = mkdtempSync(path.join(os.tmpdir(), "vbmem-js-rpm-"));
  copyFileSync(path.join(data, "golden_rpm.safetensors"), path.join(dir, "balls.safetensors"));
  const d = await startDaemon("--models-dir", dir, "--default-model", "");
  try {
    const c = new Client({ url: d.url, retries: 0 });
    // rpm.py's posterior, within the served float32 networks' tolerance (tests/http/test_rpm.py's)
    const close = (got, want, what) => {
      assert.equal(got.length, want.length, what);
      for (let t = 0; t < want.length; t++) {
        assert.ok(Math.abs(got[t] - want[t]) <= 1e-4 * (Math.abs(want[t]) + 1e-3),
          `${what}[${t}]: ${got[t]}, expected ${want[t]}`);
      }
    };
    for (const [i, kase] of golden.cases.entries()) {
      for (const encoding of [undefined, "base64"]) {
        const r = await c.infer("balls", kase.X, { encoding });
        const what = `case ${i} (${encoding ?? "json"})`;
        assert.equal(r.model, "balls");
        assert.equal(r.factors, golden.J);
        assert.equal(r.steps, kase.T);
        assert.equal(r.latentSize, 1);
        assert.deepEqual(r.mean.shape, [kase.T, 1], what);
        assert.deepEqual(r.variance.shape, [kase.T, 1], what);
        close([...r.mean].map((row) => row[0]), kase.mu, what + " mean");
        close([...r.variance].map((row) => row[0]), kase.var, what + " variance");
      }
    }
    // the server's errors come back as VbmemError with the problem's field
    await rejects(c.infer("balls", [[1, 2]]), (e) => {
      assert.equal(e.status, 422);
      assert.equal(e.field, "observations");
    });
    await rejects(c.infer("no-such-model", golden.cases[0].X), (e) => assert.equal(e.status, 404));
    await assert.rejects(c.infer("balls"), TypeError); // checked before sending
  } finally {
    assert.equal(await d.stop(), 0, d.lines.slice(-20).join("\n"));
  }
});

test("API keys against a daemon with --api-key-file: isolation, 401, $VBMEM_API_KEY", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "vbmem-js-"));
  const keys = path.join(dir, "keys");
  writeFileSync(keys, "# two keys\nkey-one\nkey-two\n");
  const d = await startDaemon("--api-key-file", keys);
  const saved = process.env.VBMEM_API_KEY;
  try {
    const one = new Client({ url: d.url, apiKey: "key-one", retries: 0 });
    const s = await latent(one);
    assert.equal((await one.getSession(s)).id, s.id);
    await rejects(new Client({ url: d.url, apiKey: "key-two", retries: 0 }).getSession(s), (e) => assert.equal(e.status, 404));
    delete process.env.VBMEM_API_KEY;
    await rejects(new Client({ url: d.url, retries: 0 }).models(), (e) => assert.equal(e.status, 401));
    process.env.VBMEM_API_KEY = "key-one";
    assert.equal((await new Client({ url: d.url }).getSession(s.id)).id, s.id);
    assert.deepEqual(await new Client({ url: d.url, apiKey: null }).healthz(), { status: "ok" }); // no key needed
  } finally {
    if (saved === undefined) delete process.env.VBMEM_API_KEY; else process.env.VBMEM_API_KEY = saved;
    assert.equal(await d.stop(), 0);
  }
});

test("fromBase64 and toBase64 agree", () => {
  const b = new Uint8Array(300).map((_, i) => (i * 7) & 0xff);
  assert.deepEqual(fromBase64(toBase64(b)), b);
});
