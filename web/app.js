// app.js -- the vbmemd web page: choose, create, delete, export and import a session of any kind
// (on a model, latent, temporal; the chosen one kept in the address as #session=ID), write an
// episode of images, sample from memory, recall a masked or noisy image step by step beside the
// same read on the model alone (an empty session of the same configuration), with each read's
// familiarity, and forget the item a cue came from, look at the
// memory (each cluster's mean and samples as pictures, cluster usage, the posterior means R_h as a
// heatmap, resize), and for temporal sessions write a sequence, see its identities over time and
// continue a prefix. Plain DOM, no framework.
import { Client, VbmemError } from '/ui/vbmem-client.js';

const $ = (id) => document.getElementById(id);
const KEY_STORE = 'vbmem.apiKey';
// clients/js's Client (clients/js/index.js, served as /ui/vbmem-client.js): the page's origin, the key kept in this tab only
const client = new Client({ url: location.origin, apiKey: sessionStorage.getItem(KEY_STORE) });

const state = {
  models: [],       // the server's JSON of every hosted model
  model: null,      // the chosen session's model (observation size); null for a latent session
  sessions: [],     // the server's JSON of every session of the caller
  session: null,    // the chosen session's id
  info: null,       // the chosen session's JSON
  lastWrite: null,  // {id, version, perFrame}: the ELBO of the last write made from this page
  lastRead: null,   // {session, index, original}: the last read, for "Forget this item"
  episode: [],      // data URLs of the episode's images (grey PNGs at the model's size)
  chosen: -1,       // index of the episode image used as the cue
  maskPainted: false,
};

// ---------- status and errors ----------
function setStatus(text) { $('status').textContent = text; }

function showError(e) {
  const box = $('error');
  if (e instanceof VbmemError) {
    $('error-title').textContent = e.title;
    $('error-status').textContent = e.status ? `(HTTP ${e.status})` : '(no answer)';
    $('error-detail').textContent = e.detail;
    $('error-field').textContent = e.field ? `field: ${e.field}` : '';
    if (e.status === 401) $('key-panel').hidden = false;
  } else {
    $('error-title').textContent = 'Error';
    $('error-status').textContent = '';
    $('error-detail').textContent = String(e && e.message ? e.message : e);
    $('error-field').textContent = '';
  }
  box.hidden = false;
  setStatus('error');
}

function clearError() { $('error').hidden = true; }

// Run an action with errors shown, never swallowed.
async function act(label, fn) {
  clearError();
  setStatus(label + '…');
  try {
    const r = await fn();
    setStatus('ready');
    return r;
  } catch (e) {
    showError(e);
    return undefined;
  }
}

const fmt = (x) => (x === null || x === undefined ? '—' : typeof x === 'number' && !Number.isInteger(x) ? x.toFixed(3) : String(x));
const short = (x) => (typeof x === 'number' ? String(Number(x.toPrecision(6))) : String(x));

// ---------- images ----------
const W = () => (state.model ? state.model.observation.width : 28);
const H = () => (state.model ? state.model.observation.height : 28);
const pngUrl = (b64) => (b64.startsWith('data:') ? b64 : 'data:image/png;base64,' + b64);

function loadImage(src) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    img.onload = () => resolve(img);
    img.onerror = () => reject(new Error('cannot decode the image ' + src.slice(0, 40)));
    img.src = src;
  });
}

// Draw src (any size) at the model's size in grey with opaque alpha; returns the canvas.
function toGreyCanvas(img, sx = 0, sy = 0, sw = img.width, sh = img.height) {
  const c = document.createElement('canvas');
  c.width = W();
  c.height = H();
  const g = c.getContext('2d');
  g.fillStyle = '#000';
  g.fillRect(0, 0, c.width, c.height);
  g.drawImage(img, sx, sy, sw, sh, 0, 0, c.width, c.height);
  const d = g.getImageData(0, 0, c.width, c.height);
  for (let i = 0; i < d.data.length; i += 4) {
    const v = Math.round(0.299 * d.data[i] + 0.587 * d.data[i + 1] + 0.114 * d.data[i + 2]);
    d.data[i] = d.data[i + 1] = d.data[i + 2] = v;
    d.data[i + 3] = 255;
  }
  g.putImageData(d, 0, 0);
  return c;
}

// ---------- image files: the command line's rule (clients/python/vbmem/png.py, fit_png) ----------
// A grey PNG without alpha (an RGB one for a 3-channel model) at the model's size goes as it is,
// any bit depth (the server reads it); bytes that are not a PNG go as they are too (the server
// refuses them). Any other PNG must be 8-bit and non-interlaced and is converted: alpha over
// black and, for one channel, grey by luminance (299 R + 587 G + 114 B) x A / 255000 (for three,
// each colour x A / 255), stretched to the model's size bilinearly from the sample centres, each
// value rounded half up once at the end: the same numbers, in the same order, as the command line.
const PNG_KINDS = { 0: 'grey', 2: 'RGB', 3: 'palette', 4: 'grey+alpha', 6: 'RGBA' };

function pngHeader(b) {
  const sig = [137, 80, 78, 71, 13, 10, 26, 10];
  if (b.length < 33 || sig.some((v, i) => b[i] !== v) || String.fromCharCode(...b.subarray(12, 16)) !== 'IHDR') return null;
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return { width: v.getUint32(16), height: v.getUint32(20), depth: b[24], ctype: b[25], interlace: b[28] };
}

async function inflate(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

// An 8-bit non-interlaced PNG as { rgba, width, height } (alpha 255 where the PNG has none).
async function decodePngRgba(b) {
  const hd = pngHeader(b);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const idat = [];
  let palette = null;
  for (let pos = 8; pos + 8 <= b.length;) {
    const len = v.getUint32(pos), kind = String.fromCharCode(...b.subarray(pos + 4, pos + 8));
    const body = b.subarray(pos + 8, pos + 8 + len);
    if (body.length !== len) throw new Error('truncated PNG chunk');
    pos += 12 + len;
    if (kind === 'PLTE') palette = body;
    else if (kind === 'IDAT') idat.push(body);
    else if (kind === 'IEND') break;
  }
  const samples = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 }[hd.ctype];
  if (!samples || !idat.length || (hd.ctype === 3 && !palette)) throw new Error('a PNG this page cannot read');
  const raw = await inflate(new Uint8Array(await new Blob(idat).arrayBuffer()));
  const { width, height } = hd, stride = width * samples, bpp = samples;
  if (raw.length < (stride + 1) * height) throw new Error('truncated PNG image data');
  const out = new Uint8Array(stride * height);
  let prev = new Uint8Array(stride);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)];
    const line = raw.slice(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let i = 0; i < stride; i++) {
      const left = i >= bpp ? line[i - bpp] : 0, up = prev[i], ul = i >= bpp ? prev[i - bpp] : 0;
      if (f === 1) line[i] = (line[i] + left) & 255;
      else if (f === 2) line[i] = (line[i] + up) & 255;
      else if (f === 3) line[i] = (line[i] + ((left + up) >> 1)) & 255;
      else if (f === 4) {
        const p = left + up - ul, pa = Math.abs(p - left), pb = Math.abs(p - up), pc = Math.abs(p - ul);
        line[i] = (line[i] + (pa <= pb && pa <= pc ? left : pb <= pc ? up : ul)) & 255;
      } else if (f !== 0) throw new Error(`unknown PNG filter ${f}`);
    }
    out.set(line, y * stride);
    prev = line;
  }
  const rgba = new Uint8Array(4 * width * height).fill(255);
  for (let i = 0; i < width * height; i++) {
    const o = 4 * i;
    if (hd.ctype === 0) rgba[o] = rgba[o + 1] = rgba[o + 2] = out[i];
    else if (hd.ctype === 4) { rgba[o] = rgba[o + 1] = rgba[o + 2] = out[2 * i]; rgba[o + 3] = out[2 * i + 1]; }
    else if (hd.ctype === 2) { rgba[o] = out[3 * i]; rgba[o + 1] = out[3 * i + 1]; rgba[o + 2] = out[3 * i + 2]; }
    else if (hd.ctype === 6) rgba.set(out.subarray(o, o + 4), o);
    else {
      if (3 * out[i] + 3 > palette.length) throw new Error(`palette index ${out[i]} out of range`);
      rgba.set(palette.subarray(3 * out[i], 3 * out[i] + 3), o);
    }
  }
  return { rgba, width, height };
}

// Per destination index along one axis: [lower source index, upper, weight of the upper].
function stretchAxis(nSrc, nDst) {
  const taps = [];
  for (let x = 0; x < nDst; x++) {
    const s = Math.min(Math.max((x + 0.5) * nSrc / nDst - 0.5, 0.0), nSrc - 1.0);
    const i0 = Math.floor(s);
    taps.push([i0, Math.min(i0 + 1, nSrc - 1), s - i0]);
  }
  return taps;
}

// The file's bytes as the model takes them: { url, how } (how null when it goes untouched), or an
// Error naming the file when it needs converting and cannot be.
async function fitPng(bytes, name) {
  const w = W(), h = H(), ch = state.model ? state.model.observation.channels : 1;
  const hd = pngHeader(bytes);
  const untouched = () => {
    let bin = '';
    for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return { url: 'data:image/png;base64,' + btoa(bin), how: null };
  };
  if (!hd || (hd.width === w && hd.height === h && hd.ctype === (ch === 1 ? 0 : 2))) return untouched();
  const kind = PNG_KINDS[hd.ctype] || '?', want = `${ch === 1 ? 'grey' : 'RGB'} ${w}x${h}`;
  if (hd.depth !== 8 || hd.interlace !== 0) {
    throw new Error(`${name}: a ${hd.depth}-bit${hd.interlace ? ' interlaced' : ''} ${kind} PNG of ${hd.width}x${hd.height} ` +
      `needs converting to the model's ${want}, and only 8-bit non-interlaced PNGs are converted: convert it to 8 bits first`);
  }
  const { rgba, width: sw, height: sh } = await decodePngRgba(bytes);
  const xs = stretchAxis(sw, w), ys = stretchAxis(sh, h);
  const img = new ImageData(w, h);
  for (const c of ch === 1 ? [null] : [0, 1, 2]) {
    const src = new Float64Array(sw * sh);
    for (let i = 0; i < sw * sh; i++) {
      const o = 4 * i;
      src[i] = c === null ? (299 * rgba[o] + 587 * rgba[o + 1] + 114 * rgba[o + 2]) * rgba[o + 3] / 255000
        : rgba[o + c] * rgba[o + 3] / 255;
    }
    ys.forEach(([y0, y1, fy], y) => {
      const r0 = y0 * sw, r1 = y1 * sw;
      xs.forEach(([x0, x1, fx], x) => {
        const v = (src[r0 + x0] * (1 - fx) + src[r0 + x1] * fx) * (1 - fy)
          + (src[r1 + x0] * (1 - fx) + src[r1 + x1] * fx) * fy;
        const b = Math.min(255, Math.max(0, Math.floor(v + 0.5))), o = 4 * (y * w + x);
        if (c === null) img.data[o] = img.data[o + 1] = img.data[o + 2] = b;
        else img.data[o + c] = b;
        img.data[o + 3] = 255;
      });
    });
  }
  const cv = document.createElement('canvas');
  cv.width = w;
  cv.height = h;
  cv.getContext('2d').putImageData(img, 0, 0);
  return { url: cv.toDataURL('image/png'), how: `${kind} ${hd.width}x${hd.height} to ${want}` };
}

function imgEl(src, title) {
  const el = document.createElement('img');
  el.src = src;
  if (title) el.title = title;
  return el;
}

// ---------- models and sessions ----------
async function loadModels() {
  const list = await client.models();
  state.models = list.map((m) => m.raw); // the server's own JSON (observation size, defaults)
  const sel = $('model');
  sel.textContent = '';
  for (const m of state.models) {
    const o = document.createElement('option');
    o.value = m.name;
    o.textContent = `${m.name} (${m.observation.channels}×${m.observation.height}×${m.observation.width}, C=${m.code_size})`;
    if (m.default) o.selected = true;
    sel.appendChild(o);
  }
  const latent = document.createElement('option');
  latent.value = '';
  latent.textContent = 'none: a latent session (codes from your own encoder)';
  sel.appendChild(latent);
  if (state.models.length === 0) sel.value = '';
  showCreationForm();
}

const modelByName = (name) => state.models.find((m) => m.name === name) || null;
const formModel = () => modelByName($('model').value);

// The page's four kinds of session: which panels apply.
function sessionMode(s) {
  if (!s) return 'none';
  if (s.kind === 'temporal') return s.model ? 'temporal-image' : 'temporal-latent';
  return s.model ? 'image' : 'latent';
}

function applyMode(mode) {
  document.querySelectorAll('[data-for]').forEach((el) => { el.hidden = !el.dataset.for.split(' ').includes(mode); });
  document.body.dataset.mode = mode;
}

function sessionLabel(s) {
  const id = s.id.slice(0, 8) + '…';
  if (s.kind === 'temporal') return `${id} temporal P=${s.components} Q=${s.attributes} (${s.frames} frames, v${s.version})`;
  return `${id} ${s.kind} H=${s.clusters} K=${s.rows} (${s.frames} frames, v${s.version})`;
}

function sessionGroup(s) {
  if (s.kind === 'temporal') return s.model ? `temporal, images of ${s.model}` : 'temporal, latent (codes)';
  return s.model ? `images of ${s.model}` : 'latent (codes)';
}

// Every session of the caller, grouped by what it holds, into the session picker.
async function loadSessions() {
  const all = [];
  for await (const s of client.iterSessions({ pageSize: 1000 })) if (s.id !== alone.id) all.push(s.raw); // not the model-alone session
  state.sessions = all;
  const sel = $('session');
  sel.textContent = '';
  const none = document.createElement('option');
  none.value = '';
  none.textContent = all.length ? '— choose a session —' : '— no session yet: create one below —';
  sel.appendChild(none);
  const groups = new Map();
  for (const s of all) {
    const g = sessionGroup(s);
    if (!groups.has(g)) {
      const og = document.createElement('optgroup');
      og.label = g;
      groups.set(g, og);
    }
    const o = document.createElement('option');
    o.value = s.id;
    o.textContent = sessionLabel(s);
    o.dataset.kind = s.kind;
    groups.get(g).appendChild(o);
  }
  [...groups.keys()].sort().forEach((g) => sel.appendChild(groups.get(g)));
  sel.value = state.session && all.some((s) => s.id === state.session) ? state.session : '';
}

// ---------- the address: #session=ID ----------
function addressSession() {
  const m = /(?:^#|&)session=([0-9a-f]{32})(?:&|$)/.exec(location.hash);
  return m ? m[1] : null;
}

function setAddress(id) {
  const h = id ? '#session=' + id : '';
  if (location.hash !== h) history.replaceState(null, '', location.pathname + location.search + h);
}

// Choose a session (or none): the picker, the address and every panel follow.
async function chooseSession(id) {
  if (id && !state.sessions.some((s) => s.id === id)) await loadSessions();
  if (id && !state.sessions.some((s) => s.id === id)) {
    setAddress(null);
    state.session = null;
    $('session').value = '';
    await showSession();
    throw new Error(`no session ${id} here (deleted, expired, or another API key's)`);
  }
  state.session = id || null;
  $('session').value = id || '';
  setAddress(state.session);
  clearOutputs();
  const s = await showSession();
  await dropAlone(s && sessionMode(s) === 'image' ? s : null); // kept only for this session's configuration
}

// What the panels showed of the previous session.
function clearOutputs() {
  for (const id of ['samples', 'clusters', 'identities', 'continuation']) $(id).textContent = '';
  for (const id of ['resize-info', 'heatmap-info', 'seq-write-info', 'forget-info']) $(id).textContent = '';
  clearRead();
  $('seq-trace').hidden = true;
  $('elbo').replaceChildren(tbodyText('no write yet'));
  const c = $('heatmap');
  c.getContext('2d').clearRect(0, 0, c.width, c.height);
}

function tbodyText(text) {
  const tb = document.createElement('tbody');
  const tr = document.createElement('tr');
  const td = document.createElement('td');
  td.colSpan = 2;
  td.textContent = text;
  tr.appendChild(td);
  tb.appendChild(tr);
  return tb;
}

async function showSession() {
  if (!state.session) {
    state.info = null;
    state.model = null;
    showShipped();
    $('session-info').textContent = state.sessions.length ? 'no session chosen' : 'no session yet: create one below';
    applyMode('none');
    drawUsage(null);
    return null;
  }
  const s = (await client.getSession(state.session)).raw;
  state.info = s;
  state.model = s.model ? modelByName(s.model) : null;
  showShipped();
  const mode = sessionMode(s);
  applyMode(mode);
  const where = s.model ? `images of model ${s.model}` : `latent: codes of ${s.code_size} dimensions from your own encoder`;
  if (s.kind === 'temporal') {
    $('session-info').textContent =
      `id ${s.id}\ntemporal, P=${s.components} identities, Q=${s.attributes} attributes, C=${s.code_size}; ${where}\n` +
      `${s.sequences} sequence${s.sequences === 1 ? '' : 's'}, ${s.frames} frames, version ${s.version}, free energy ${fmt(s.free_energy)}`;
  } else {
    $('session-info').textContent =
      `id ${s.id}\n${s.kind}, H=${s.clusters} clusters, K=${s.rows} rows, G=${s.groups}, C=${s.code_size}; ${where}\n` +
      (s.config.retain_max > 0 ? `codes kept: ${s.retained_codes} of at most ${s.config.retain_max}` : 'keeps no written codes') +
      `; observation noise σz² ${short(s.config.sigma_z2)}\n` +
      `${s.frames} frames, version ${s.version}, last ELBO per frame ${fmt(s.last_elbo)}` +
      (mode === 'latent' ? '\nThis page shows a latent memory (its clusters, usage, heatmap) and resizes it; ' +
        'write its codes with the API, the CLI or the clients.' : '');
  }
  const opt = [...$('session').options].find((o) => o.value === s.id);
  if (opt) opt.textContent = sessionLabel(s);
  const i = state.sessions.findIndex((x) => x.id === s.id);
  if (i >= 0) state.sessions[i] = s;
  $('sequence-latent').hidden = mode !== 'temporal-latent';
  if (mode === 'image' || mode === 'latent') {
    $('resize-clusters').value = s.clusters;
    $('resize-rows').value = s.rows;
    $('offer-keep').hidden = s.config.retain_max > 0;
    drawUsage(s.cluster_usage);
    if (s.frames > 0 || s.version > 1) {
      await drawHeatmap();
      await drawClusters();
    } else {
      $('clusters').textContent = 'no write yet: every cluster holds the prior only';
    }
  }
  return s;
}

// ---------- a new session: the options at creation and their defaults ----------
const HAS_CLUSTERS = ['mixture', 'tree'];

// The defaults the server applies to an option left empty: a model's trained configuration for
// its own kind; libvbmem's defaults (vbm_config_default, proto/openapi.yaml MemoryConfigInput)
// otherwise: mixture/tree H = 10, K = 6, sigma_z2 = 0.2 K; gaussian/categorical/dkm K = 32,
// sigma_z2 = 1; no codes kept; temporal P = 2 identities, Q = 1 attribute.
function creationDefaults(kind, model, rows) {
  if (kind === 'temporal') return { components: 2, attributes: 1 };
  if (model && model.defaults.kind === kind) {
    const d = model.defaults;
    return { clusters: d.clusters, rows: d.rows, retain_max: d.retain_max, sigma_z2: d.sigma_z2 };
  }
  if (HAS_CLUSTERS.includes(kind)) {
    const K = rows || 6;
    return { clusters: 10, rows: 6, retain_max: 0, sigma_z2: 0.2 * K };
  }
  return { clusters: 1, rows: 32, retain_max: 0, sigma_z2: 1 };
}

const NEW_INPUTS = { clusters: 'new-clusters', rows: 'new-rows', retain_max: 'new-retain', sigma_z2: 'new-sigma-z2',
  components: 'new-components', attributes: 'new-attributes' };

function numberOf(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

function showCreationForm() {
  const kind = $('new-kind').value;
  const model = formModel();
  const temporal = kind === 'temporal';
  $('code-size-label').hidden = !!model;
  document.querySelector('.for-memory').hidden = temporal;
  document.querySelector('.for-temporal').hidden = !temporal;
  $('new-clusters').disabled = !HAS_CLUSTERS.includes(kind);
  if (!HAS_CLUSTERS.includes(kind)) $('new-clusters').value = '';
  const d = creationDefaults(kind, model, numberOf('new-rows'));
  for (const [k, id] of Object.entries(NEW_INPUTS)) $(id).placeholder = d[k] === undefined ? '' : short(d[k]);
  const from = temporal ? 'the temporal memory\'s defaults'
    : model && model.defaults.kind === kind ? `model ${model.name}'s trained configuration` : `the library's defaults for ${kind}`;
  $('new-defaults').textContent =
    `An empty field takes its default, shown in grey (${from}). ` +
    (temporal ? 'P: identities that switch on and off; Q: attributes of each.'
      : 'Codes kept (retain_max): how many written codes the session keeps, so that a refit or a resize ' +
        'works on them; 0 keeps none, and a resize then refits on codes drawn from the memory itself. ' +
        'σz²: the observation noise of a code around what the memory predicts (smaller: tighter reads).');
}

async function newSession() {
  const kind = $('new-kind').value;
  const model = formModel();
  const where = model ? { model: model.name } : { codeSize: numberOf('new-code-size') };
  if (!model && !(where.codeSize >= 1)) throw new Error('a latent session needs its code size C');
  let s;
  if (kind === 'temporal') {
    s = await client.createTemporalSession({ ...where,
      memory: { components: numberOf('new-components'), attributes: numberOf('new-attributes') } });
  } else {
    s = await client.createSession({ ...where, memory: { kind, clusters: numberOf('new-clusters'),
      rows: numberOf('new-rows'), retain_max: numberOf('new-retain'), sigma_z2: numberOf('new-sigma-z2') } });
  }
  await loadSessions();
  await chooseSession(s.id);
  return s;
}

// ---------- delete, export, import ----------
async function deleteSession() {
  if (!state.session) throw new Error('choose a session first');
  const id = state.session;
  if (!confirm(`Delete session ${id}? Its memory is gone for good unless you exported it.`)) return;
  await client.deleteSession(id);
  state.session = null;
  await loadSessions();
  await chooseSession(null);
  setStatus(`deleted ${id}`);
}

// The whole memory as a JSON file (GET /v1/sessions/{id}/memory, the form PUT takes back).
async function exportSession() {
  if (!state.session) throw new Error('choose a session first');
  const s = state.info;
  const mem = await client.exportMemory(s.id);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([JSON.stringify(mem)], { type: 'application/json' }));
  a.download = `vbmem-${s.kind}-${s.model || 'latent'}-${s.id.slice(0, 8)}.json`;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 60000);
}

// An exported memory into a new session: on the model chosen under "New session" when its code
// size is the memory's, else a latent session of the memory's code size.
async function importSession(file) {
  let mem;
  try { mem = JSON.parse(await file.text()); } catch (e) { throw new Error(`${file.name} is not JSON: ${e.message}`); }
  const C = mem && mem.config ? mem.config.code_size : undefined;
  if (!Number.isInteger(C)) throw new Error(`${file.name} is not an exported vbmem memory (no config.code_size)`);
  const model = formModel();
  const where = model && model.code_size === C ? { model: model.name } : { codeSize: C };
  const s = mem.kind === 'temporal'
    ? await client.createTemporalSession(where)
    : await client.createSession({ ...where, memory: { kind: mem.config.kind } });
  try {
    await client.importMemory(s.id, mem);
  } catch (e) {
    await client.deleteSession(s.id).catch(() => {}); // no half-made session left behind
    throw e;
  }
  await loadSessions();
  await chooseSession(s.id);
  setStatus(`imported ${file.name} into ${s.id.slice(0, 8)}… (${where.model ? 'images of ' + where.model : 'latent'})`);
  return s;
}

// ---------- episode ----------
// The ready episodes, by the dataset a model was trained on (its provenance); Fashion-MNIST for
// any other model and before a session is chosen.
const SHIPPED = {
  'fashion-mnist': { file: 'fashion-mnist-episode', label: 'Fashion-MNIST test images',
    credit: '(Fashion-MNIST © Zalando SE, MIT licence)' },
  omniglot: { file: 'omniglot-episode', label: 'Omniglot test characters',
    credit: '(Omniglot © 2015 Brenden Lake, MIT licence; alphabets the model never saw)' },
};
function shippedEpisode() {
  const ds = state.model && state.model.provenance ? state.model.provenance.dataset : null;
  return SHIPPED[ds] || SHIPPED['fashion-mnist'];
}
function showShipped() {
  const e = shippedEpisode();
  $('use-shipped').textContent = e.label;
  $('shipped-credit').textContent = e.credit;
}

async function useShipped() {
  const e = shippedEpisode();
  const meta = await (await fetch(`/ui/${e.file}.json`)).json();
  const sprite = await loadImage(`/ui/${e.file}.png`);
  const n = Number($('shipped-count').value);
  const urls = [];
  for (let i = 0; i < n; i++) {
    const c = toGreyCanvas(sprite, (i % meta.columns) * meta.tile, Math.floor(i / meta.columns) * meta.tile, meta.tile, meta.tile);
    urls.push(c.toDataURL('image/png'));
  }
  setEpisode(urls, urls.map((_, i) => meta.classes[meta.labels[i]]));
}

// The chosen files as the model takes them (fitPng); every converted file is named in the
// images' titles and in the status line. A file that cannot be converted refuses them all.
async function addFiles(files) {
  const urls = [], titles = [], converted = [];
  for (const f of files) {
    const { url, how } = await fitPng(new Uint8Array(await f.arrayBuffer()), f.name);
    urls.push(url);
    titles.push(how ? `${f.name} (converted: ${how})` : f.name);
    if (how) converted.push(`${f.name} (${how})`);
  }
  if (urls.length) setEpisode(urls, titles);
  $('files-info').textContent = converted.length ? `Converted: ${converted.join(', ')}.` : '';
}

function setEpisode(urls, titles) {
  state.episode = urls;
  const grid = $('episode');
  grid.textContent = '';
  urls.forEach((u, i) => {
    const el = imgEl(u, titles ? titles[i] : `image ${i}`);
    el.addEventListener('click', () => chooseCue(i));
    grid.appendChild(el);
  });
  if (urls.length) chooseCue(0);
}

async function writeEpisode() {
  if (!state.session) throw new Error('choose or create a session first');
  if (!state.episode.length) throw new Error('the episode is empty: drop PNGs or pick the ready episode');
  const r = await client.write(state.session, {
    images: state.episode,
    mode: $('write-mode').value,
    iterations: Number($('write-iterations').value),
    seed: Number($('seed').value),
  });
  state.lastWrite = { id: state.session, version: r.version, perFrame: r.elboPerFrame };
  showElbo(r);
  await showSession();
  await drawSamples();
  return r;
}

function showElbo(r) {
  const e = r.elbo;
  const rows = [
    ['ELBO per frame', e.per_frame], ['ELBO total', e.total], ['log-likelihood of the codes', e.loglik_codes],
    ['KL(w)', e.kl_w], ['KL(s)', e.kl_s], ['KL(M)', e.kl_M], ['KL(b)', e.kl_b], ['frames T', e.T],
    ['iterations', r.iterations], ['converged', r.converged], ['version', r.version],
  ];
  const tb = document.createElement('tbody');
  for (const [k, v] of rows) {
    const tr = document.createElement('tr');
    const a = document.createElement('td');
    const b = document.createElement('td');
    a.textContent = k;
    b.textContent = fmt(v);
    tr.append(a, b);
    tb.appendChild(tr);
  }
  $('elbo').replaceChildren(tb);
}

// ---------- samples ----------
async function drawSamples() {
  if (!state.session) throw new Error('choose or create a session first');
  const r = (await client.sample(state.session, {
    count: Number($('sample-count').value),
    seed: Number($('seed').value),
  })).raw; // observations: base64 PNGs
  const grid = $('samples');
  grid.textContent = '';
  r.observations.forEach((b64, i) => grid.appendChild(imgEl(pngUrl(b64), `sample ${i}, cluster ${r.clusters[i].join(',')}`)));
  return r;
}

// ---------- recall: cue, mask brush, noise, read ----------
const maskCanvas = document.createElement('canvas'); // what is sent: white = known, black = unknown

function resetMask() {
  maskCanvas.width = W();
  maskCanvas.height = H();
  const g = maskCanvas.getContext('2d');
  g.fillStyle = '#fff';
  g.fillRect(0, 0, maskCanvas.width, maskCanvas.height);
  state.maskPainted = false;
  renderMaskView();
}

function renderMaskView() {
  const v = $('mask-view');
  v.width = maskCanvas.width;
  v.height = maskCanvas.height;
  const g = v.getContext('2d');
  const m = maskCanvas.getContext('2d').getImageData(0, 0, v.width, v.height);
  const out = g.createImageData(v.width, v.height);
  let unknown = 0;
  for (let i = 0; i < m.data.length; i += 4) {
    if (m.data[i] === 0) {
      out.data[i] = 230; out.data[i + 1] = 60; out.data[i + 2] = 40; out.data[i + 3] = 200;
      unknown++;
    }
  }
  g.putImageData(out, 0, 0);
  $('mask-info').textContent = `${unknown} of ${v.width * v.height} pixels unknown (red)`;
}

// Paint the unknown region (black on the mask) with the brush from canvas pixel `from` (or a dot)
// to (x, y); the mask is then made strictly black and white, so that what is shown in red is
// exactly what the server takes as unknown (0), antialiased edges included.
function paintMask(x, y, from = null) {
  const g = maskCanvas.getContext('2d');
  const r = Number($('brush').value) / 2;
  g.fillStyle = g.strokeStyle = '#000';
  g.lineWidth = 2 * r;
  g.lineCap = 'round';
  g.beginPath();
  if (from) {
    g.moveTo(from[0], from[1]);
    g.lineTo(x, y);
    g.stroke();
  } else {
    g.arc(x, y, r, 0, 2 * Math.PI);
    g.fill();
  }
  const d = g.getImageData(0, 0, maskCanvas.width, maskCanvas.height);
  for (let i = 0; i < d.data.length; i += 4) {
    const v = d.data[i] < 128 ? 0 : 255;
    d.data[i] = d.data[i + 1] = d.data[i + 2] = v;
    d.data[i + 3] = 255;
  }
  g.putImageData(d, 0, 0);
  state.maskPainted = true;
  renderMaskView();
}

function setupBrush() {
  const v = $('mask-view');
  let last = null; // the previous point of the stroke, null when the button is up
  const at = (ev) => {
    const r = v.getBoundingClientRect();
    const p = [((ev.clientX - r.left) / r.width) * v.width, ((ev.clientY - r.top) / r.height) * v.height];
    paintMask(p[0], p[1], last);
    last = p;
  };
  v.addEventListener('pointerdown', (ev) => { last = null; v.setPointerCapture(ev.pointerId); at(ev); });
  v.addEventListener('pointermove', (ev) => { if (last) at(ev); });
  v.addEventListener('pointerup', () => { last = null; });
  v.addEventListener('pointercancel', () => { last = null; });
}

async function chooseCue(i) {
  state.chosen = i;
  document.querySelectorAll('#episode img').forEach((el, j) => el.classList.toggle('chosen', j === i));
  await setCueFrom(state.episode[i]);
}

async function setCueFrom(src) {
  const img = await loadImage(src);
  const grey = toGreyCanvas(img);
  const c = $('cue');
  c.width = grey.width;
  c.height = grey.height;
  c.getContext('2d').drawImage(grey, 0, 0);
  resetMask();
  clearRead();
}

// What the read panel showed of the last read.
function clearRead() {
  for (const id of ['steps', 'steps-alone', 'familiarity', 'familiarity-alone']) $(id).textContent = '';
  $('read-result').hidden = true;
  $('forget').disabled = true;
  state.lastRead = null;
}

function addNoise() {
  const c = $('cue');
  const g = c.getContext('2d');
  const d = g.getImageData(0, 0, c.width, c.height);
  const sigma = Number($('noise').value) * 255;
  for (let i = 0; i < d.data.length; i += 4) {
    // Box-Muller
    const n = Math.sqrt(-2 * Math.log(1 - Math.random())) * Math.cos(2 * Math.PI * Math.random());
    const v = Math.max(0, Math.min(255, Math.round(d.data[i] + sigma * n)));
    d.data[i] = d.data[i + 1] = d.data[i + 2] = v;
    d.data[i + 3] = 255;
  }
  g.putImageData(d, 0, 0);
}

// The cue as sent, with the unknown pixels in red.
function cueShown() {
  const c = document.createElement('canvas');
  c.width = $('cue').width;
  c.height = $('cue').height;
  const g = c.getContext('2d');
  g.drawImage($('cue'), 0, 0);
  if (state.maskPainted) g.drawImage($('mask-view'), 0, 0);
  return c.toDataURL('image/png');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------- the model alone: an empty session of the same model and memory configuration ----------
// The read panel runs every read twice: on the chosen session and, with the identical body, on a
// session of the same model and memory configuration into which nothing is written (the model
// alone). The page keeps at most one such session: made on the first read, reused while the chosen
// session has that model and configuration, deleted when the page chooses a session of another
// configuration (or none), and on leaving or reloading the page (a keepalive DELETE). It is made
// with an idle lifetime of ALONE_TTL_S, so that a tab that dies without unloading leaks nothing
// for long; the page leaves it out of its session list.
const ALONE_TTL_S = 3600;
const alone = { id: null, key: null, pending: null };

const aloneKey = (s) => JSON.stringify([s.model, s.config]);

// The empty session for session s, made when there is none for its configuration (the one of
// another configuration deleted first).
async function aloneSession(s) {
  const key = aloneKey(s);
  if (alone.pending) await alone.pending.catch(() => {});
  if (alone.id && alone.key === key) return alone.id;
  await dropAlone();
  alone.pending = client.createSession({ model: s.model, memory: s.config, ttlSeconds: ALONE_TTL_S })
    .then((e) => { alone.id = e.id; alone.key = key; return e.id; })
    .finally(() => { alone.pending = null; });
  return alone.pending;
}

// Delete the empty session (when the chosen session's configuration is not its own, or none).
async function dropAlone(keepFor = null) {
  if (alone.pending) await alone.pending.catch(() => {});
  if (!alone.id || (keepFor && alone.key === aloneKey(keepFor))) return;
  const id = alone.id;
  alone.id = alone.key = null;
  try {
    await client.deleteSession(id);
  } catch (e) {
    if (!(e instanceof VbmemError && e.status === 404)) throw e; // already gone (its lifetime ran out)
  }
}

// Leaving or reloading the page: a DELETE that outlives the page (fetch keepalive).
function dropAloneOnUnload() {
  if (!alone.id) return;
  const headers = client.apiKey ? { Authorization: 'Bearer ' + client.apiKey } : {};
  fetch(`/v1/sessions/${alone.id}`, { method: 'DELETE', keepalive: true, headers }).catch(() => {});
  alone.id = alone.key = null;
}

// ---------- the read: memory and model alone, side by side ----------
function figure(box, src, caption, cls) {
  const f = document.createElement('figure');
  if (cls) f.className = cls;
  const cap = document.createElement('figcaption');
  cap.textContent = caption;
  f.append(imgEl(src, caption), cap);
  box.appendChild(f);
  return f;
}

const famText = (f) => (typeof f === 'number' ? String(Number(f.toPrecision(3))) : '—');

function stoppedText(r) {
  const n = r.steps.length;
  if (n === 1) return 'one step';
  if (r.stopped_at >= n - 1) return `still changing at its last step (${n})`;
  return `stopped changing at step ${r.stopped_at + 1} of ${n}: every later step is the same`;
}

// One column of the comparison: the original (a cue taken from the episode), the cue, each step
// (greyed from where the read stopped changing), the answer, its familiarity and where it stopped.
async function showRead(box, famBox, r, given, sessionId) {
  box.textContent = '';
  box.dataset.steps = '';
  box.dataset.session = sessionId;
  if (given.original) figure(box, given.original, `original (episode image ${given.index + 1})`, 'original');
  figure(box, given.cue, given.masked ? 'cue (red: unknown)' : 'cue', 'cue');
  for (let i = 0; i < r.steps.length; i++) {
    await sleep(120); // one step at a time, so the read is seen converging
    const st = r.steps[i];
    const same = i > r.stopped_at;
    figure(box, pngUrl(st.observations[0]), `step ${i + 1} · s=${st.clusters[0].join(',')}${same ? ' · same' : ''}`,
      same ? 'step same' : 'step');
  }
  figure(box, pngUrl(r.steps[r.steps.length - 1].observations[0]), 'answer', 'answer');
  const f = r.familiarity[0];
  famBox.textContent = `familiarity ${famText(f)}\n${stoppedText(r)}`;
  famBox.dataset.familiarity = String(f);
  famBox.dataset.stoppedAt = String(r.stopped_at);
  box.dataset.steps = String(r.steps.length);
}

async function readCue() {
  if (!state.session) throw new Error('choose or create a session first');
  const s = state.info;
  const mode = $('read-mode').value;
  // one body for both reads: the same cue, mask, seed, steps, mode and answer
  const req = {
    images: [$('cue').toDataURL('image/png')],
    iterations: Number($('read-iterations').value),
    seed: Number($('seed').value),
    mode,
  };
  if (mode === 'recall') req.answer = $('read-answer').value;
  if (state.maskPainted) req.mask = [maskCanvas.toDataURL('image/png')];
  const given = {
    cue: cueShown(),
    masked: state.maskPainted,
    index: state.chosen,
    original: state.chosen >= 0 ? state.episode[state.chosen] : null,
  };
  state.lastRead = null;
  $('forget').disabled = true;
  $('read-result').hidden = false;
  $('read-result').dataset.done = '';
  for (const id of ['steps', 'steps-alone', 'familiarity', 'familiarity-alone']) $(id).textContent = '';
  $('steps').dataset.steps = $('steps-alone').dataset.steps = '';
  // the model alone: its empty session made (or made again when its idle lifetime ran out); a
  // failure there (a quota of sessions, say) is shown in its column, the memory's read still shown
  const readAlone = async () => {
    try {
      return await client.read(await aloneSession(s), req);
    } catch (e) {
      if (!(e instanceof VbmemError && e.status === 404 && alone.id)) throw e;
      alone.id = alone.key = null;
      return client.read(await aloneSession(s), req);
    }
  };
  const [mem, solo] = await Promise.all([
    client.read(s.id, req),
    readAlone().then((r) => ({ r }), (error) => ({ error })),
  ]);
  if (solo.error) {
    await showRead($('steps'), $('familiarity'), mem.raw, given, s.id);
    $('familiarity-alone').textContent = 'the same read on the model alone failed: ' +
      (solo.error instanceof VbmemError ? `${solo.error.title} (HTTP ${solo.error.status}): ${solo.error.detail}` : String(solo.error));
  } else {
    await Promise.all([
      showRead($('steps'), $('familiarity'), mem.raw, given, s.id),
      showRead($('steps-alone'), $('familiarity-alone'), solo.r.raw, given, alone.id),
    ]);
    const fm = mem.raw.familiarity[0], fa = solo.r.raw.familiarity[0];
    $('familiarity').textContent += '\n' + (fm > fa
      ? 'more familiar to the memory than to the model alone (the memory holds something like it)'
      : 'no more familiar to the memory than to the model alone');
  }
  state.lastRead = { session: s.id, index: given.index, original: given.original };
  $('forget').disabled = !given.original;
  $('forget').title = given.original ? `forget episode image ${given.index + 1}` : 'the cue did not come from the episode';
  $('read-result').dataset.done = '1';
  return { memory: mem.raw, alone: solo.r ? solo.r.raw : null, aloneId: alone.id };
}

// Forget the item the last read's cue came from: POST .../forget with its episode image, then the
// session, its clusters' pictures and samples are shown again with what was removed.
async function forgetItem() {
  const lr = state.lastRead;
  if (!lr || !lr.original || lr.session !== state.session) throw new Error('read a cue taken from the episode first');
  const before = state.info;
  const r = await client.forget(state.session, { images: [lr.original], seed: Number($('seed').value) });
  const x = r.removed[0];
  const what = x.item !== null
    ? `kept code no. ${x.item} (oldest first, from 0), at distance ${fmt(x.distance)} from the image's code`
    : `its term, addressed to cluster ${x.clusters ? x.clusters.join(',') : '—'} (the memory's read of it lay at distance ${fmt(x.distance)})`;
  const lines = [
    `Forgot episode image ${lr.index + 1}: removed ${what}.`,
    r.exact
      ? 'Exact: the memory is now what writing the other kept codes alone would give.'
      : 'Approximate: this session keeps no codes, so the item was subtracted from the memory\'s sums ' +
        '(one update with every other item\'s cluster held fixed), not refitted.',
    `Version ${before.version} → ${r.version}, frames ${before.frames} → ${r.frames}` +
      (before.config.retain_max > 0 ? `, kept codes ${before.retained_codes} → ${r.retainedCodes}` : '') +
      '. Read the same cue again to see how the memory fares without it.',
  ];
  $('forget-info').textContent = lines.join('\n');
  $('forget-info').dataset.exact = String(r.exact);
  $('forget').disabled = true;
  const img = document.querySelectorAll('#episode img')[lr.index];
  if (img) { img.classList.add('forgotten'); img.title += ' (forgotten)'; }
  state.lastRead = null;
  await showSession();
  await drawSamples();
  return r.raw;
}

// ---------- memory: usage bars, R_h heatmap, resize ----------
function drawUsage(usage) {
  const c = $('usage');
  const g = c.getContext('2d');
  g.clearRect(0, 0, c.width, c.height);
  g.font = '11px sans-serif';
  g.fillStyle = '#55616e';
  if (!usage) {
    g.fillText('no frames written since the last replace, refit or resize', 10, 20);
    return;
  }
  const bars = [];
  usage.forEach((row, gi) => row.forEach((v, h) => bars.push({ label: usage.length > 1 ? `${gi}:${h}` : String(h), v })));
  const max = Math.max(1e-9, ...bars.map((b) => b.v));
  const bw = (c.width - 30) / bars.length;
  const top = 28, base = c.height - 18;
  bars.forEach((b, i) => {
    const h = ((base - top) * b.v) / max;
    const x = 24 + i * bw;
    g.fillStyle = '#2f7fd1';
    g.fillRect(x + 2, base - h, Math.max(1, bw - 4), h);
    g.fillStyle = '#1d232b';
    g.textAlign = 'center';
    g.fillText(b.label, x + bw / 2, c.height - 5);
    if (bw > 26) g.fillText(b.v.toFixed(1), x + bw / 2, base - h - 3);
  });
  g.textAlign = 'left';
  g.fillStyle = '#55616e';
  g.fillText('expected frames per cluster', 26, 11);
}

async function drawHeatmap() {
  const mem = await client.exportMemory(state.session);
  const blocks = mem.posterior.clusters;
  const K = mem.config.rows;
  const cg = blocks[0].R[0].length;
  // colour scale: the 99th percentile of |R| (a few large entries would wash out the rest)
  const mags = [];
  for (const b of blocks) for (const row of b.R) for (const v of row) if (v !== null) mags.push(Math.abs(v));
  mags.sort((a, b) => a - b);
  const max = Math.max(1e-12, mags.length ? mags[Math.floor(0.99 * (mags.length - 1))] : 1);
  const gap = 1;
  const rowsTotal = blocks.length * K + (blocks.length - 1) * gap;
  const c = $('heatmap');
  c.width = cg;
  c.height = rowsTotal;
  const px = Math.max(4, Math.min(24, Math.floor(512 / cg))); // a few code dimensions get wider cells
  c.style.width = Math.min(512, cg * px) + 'px';
  c.style.height = Math.min(480, rowsTotal * Math.max(4, px / 2)) + 'px';
  const g = c.getContext('2d');
  const im = g.createImageData(cg, rowsTotal);
  let y = 0;
  for (const b of blocks) {
    for (const row of b.R) {
      for (let x = 0; x < cg; x++) {
        const t = row[x] === null ? 0 : Math.max(-1, Math.min(1, row[x] / max)); // blue .. white .. red
        const o = (y * cg + x) * 4;
        im.data[o] = t > 0 ? 255 : Math.round(255 * (1 + t));
        im.data[o + 1] = Math.round(255 * (1 - Math.abs(t)));
        im.data[o + 2] = t < 0 ? 255 : Math.round(255 * (1 - t));
        im.data[o + 3] = 255;
      }
      y++;
    }
    for (let k = 0; k < gap && y < rowsTotal; k++, y++)
      for (let x = 0; x < cg; x++) im.data[(y * cg + x) * 4 + 3] = 255; // a black line between clusters
  }
  g.putImageData(im, 0, 0);
  $('heatmap-info').textContent =
    `${mem.config.kind}: ${blocks.length} clusters × K=${K} rows, ${cg} code dimensions; ` +
    `blue ≤ −${max.toFixed(2)} … white 0 … red ≥ +${max.toFixed(2)} (99th percentile of |R|); ${mem.frames} frames`;
}

// ---------- memory: what each cluster holds ----------
const SAMPLES_PER_CLUSTER = 4;

// A code as a strip of coloured cells (blue < 0 < red, scaled by max), for latent sessions.
function codeStrip(code, max) {
  const c = document.createElement('canvas');
  c.width = code.length;
  c.height = 1;
  c.className = 'code';
  const g = c.getContext('2d');
  const im = g.createImageData(code.length, 1);
  code.forEach((v, x) => {
    const t = v === null ? 0 : Math.max(-1, Math.min(1, v / max));
    im.data[4 * x] = t > 0 ? 255 : Math.round(255 * (1 + t));
    im.data[4 * x + 1] = Math.round(255 * (1 - Math.abs(t)));
    im.data[4 * x + 2] = t < 0 ? 255 : Math.round(255 * (1 - t));
    im.data[4 * x + 3] = 255;
  });
  g.putImageData(im, 0, 0);
  return c;
}

// GET /v1/sessions/{id}/clusters (each cluster's mean code, its image, its usage) and, on a model
// session, a few samples of each cluster (POST .../samples with `cluster`); the clusters that
// hold most frames first.
async function drawClusters() {
  const s = state.info;
  const r = await client.request('GET', `/v1/sessions/${encodeURIComponent(s.id)}/clusters`);
  const H = r.clusters;
  const held = (h) => (r.usage ? r.usage.reduce((a, row) => a + row[h], 0) / r.usage.length : 0);
  const images = r.observations || null;
  const seed = Number($('seed').value);
  const samples = images
    ? await Promise.all([...Array(H).keys()].map((h) =>
      client.sample(s.id, { count: SAMPLES_PER_CLUSTER, seed: seed + h, cluster: h }).then((x) => x.raw.observations)))
    : null;
  let max = 1e-12;
  for (const m of r.means) for (const v of m) if (v !== null) max = Math.max(max, Math.abs(v));
  const box = $('clusters');
  box.textContent = '';
  const order = [...Array(H).keys()].sort((a, b) => held(b) - held(a) || a - b);
  for (const h of order) {
    const card = document.createElement('figure');
    card.className = 'cluster';
    card.dataset.cluster = String(h);
    if (held(h) < 0.5) card.classList.add('unused');
    if (images) {
      const el = imgEl(pngUrl(images[h]), `cluster ${h}: the image of its mean code`);
      el.className = 'mean';
      card.appendChild(el);
      const row = document.createElement('div');
      row.className = 'cluster-samples';
      samples[h].forEach((b64, i) => {
        const im = imgEl(pngUrl(b64), `cluster ${h}: sample ${i}`);
        im.className = 'sample';
        row.appendChild(im);
      });
      card.appendChild(row);
    } else {
      card.appendChild(codeStrip(r.means[h], max));
    }
    const cap = document.createElement('figcaption');
    const per = r.usage && r.groups > 1 ? ` (${r.usage.map((row) => row[h].toFixed(1)).join(' + ')} by group)` : '';
    cap.textContent = H > 1 ? `cluster ${h}: ${held(h).toFixed(1)} frames${per}` : `${held(h).toFixed(1)} frames`;
    card.appendChild(cap);
    box.appendChild(card);
  }
  $('clusters-about').dataset.kind = images ? 'images' : 'codes';
  if (!images) {
    const note = document.createElement('p');
    note.className = 'info';
    note.textContent = `Each strip is a cluster's mean code, ${s.code_size} dimensions left to right ` +
      `(blue ≤ −${max.toFixed(2)} … white 0 … red ≥ +${max.toFixed(2)}): a latent session has no decoder to draw it.`;
    box.appendChild(note);
  }
  box.dataset.clusters = String(H);
  box.dataset.version = String(r.version); // the version the pictures are of
  return r;
}

// Resize, saying on which codes the refit ran and what its ELBOs compare.
async function resize() {
  if (!state.session) throw new Error('choose or create a session first');
  const before = state.info;
  const H = Number($('resize-clusters').value);
  const r = await client.resize(state.session, {
    clusters: H,
    rows: Number($('resize-rows').value),
    seed: Number($('seed').value),
  });
  const kept = before.retained_codes;
  const drawn = Math.min(100000, Math.max(before.frames, 4 * r.clusters));
  const lines = [`H=${r.clusters}, K=${r.rows}, version ${r.version}.`];
  if (kept > 0) {
    lines.push(`Refit on the ${kept} codes this session kept from your writes.`,
      `ELBO per frame on those codes: ${fmt(r.elboBefore)} before, ${fmt(r.elboAfter)} after.`);
  } else {
    lines.push(`This session keeps no codes: the refit ran on ${drawn} codes drawn from the memory itself, ` +
      'so the new memory learned only what the old one generates.',
    `ELBO per frame on those drawn codes: ${fmt(r.elboBefore)} before, ${fmt(r.elboAfter)} after. ` +
      'These are not the codes you wrote: a higher value here does not mean the memory holds your episode better.');
  }
  const w = state.lastWrite;
  if (w && w.id === before.id) lines.push(`Your write's own ELBO per frame, on the codes you wrote: ${fmt(w.perFrame)}.`);
  else lines.push(`The session's last fit before the resize had ELBO per frame ${fmt(before.last_elbo)}.`);
  if (kept === 0) lines.push('To resize on what you wrote, create a session with “Codes kept” at least the frames you write.');
  $('resize-info').textContent = lines.join('\n');
  $('resize-info').dataset.codes = kept > 0 ? 'kept' : 'drawn';
  await showSession();
  await drawSamples();
  return r;
}

// Fill "New session" with this session's model, kind and sizes, keeping codes.
function offerKeep() {
  const s = state.info;
  $('model').value = s.model || '';
  if (!s.model) $('new-code-size').value = s.code_size;
  $('new-kind').value = s.kind;
  showCreationForm();
  if (HAS_CLUSTERS.includes(s.kind)) $('new-clusters').value = s.clusters;
  $('new-rows').value = s.rows;
  $('new-retain').value = Math.max(1000, s.frames);
  $('new-sigma-z2').value = s.config.sigma_z2;
  $('session-panel').scrollIntoView({ behavior: 'smooth' });
  $('new-session').focus();
}

// ---------- temporal sessions: a sequence of images ----------
function drawTrace(trace) {
  const c = $('seq-trace');
  const g = c.getContext('2d');
  const ys = trace.filter((v) => v !== null);
  c.hidden = ys.length < 2;
  g.clearRect(0, 0, c.width, c.height);
  if (ys.length < 2) return;
  const lo = Math.min(...ys), hi = Math.max(...ys), pad = 12;
  g.strokeStyle = '#2f7fd1';
  g.lineWidth = 2;
  g.beginPath();
  ys.forEach((v, i) => {
    const x = pad + ((c.width - 2 * pad) * i) / (ys.length - 1);
    const y = c.height - pad - ((c.height - 2 * pad) * (v - lo)) / Math.max(1e-12, hi - lo);
    if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
  });
  g.stroke();
  g.fillStyle = '#55616e';
  g.font = '11px sans-serif';
  g.fillText(`free energy per iteration: ${lo.toFixed(1)} … ${hi.toFixed(1)}`, pad, 11);
}

async function writeSequence() {
  if (!state.episode.length) throw new Error('the episode is empty: drop PNGs or pick the ready episode');
  if (state.episode.length < 2) throw new Error('a sequence needs at least 2 frames');
  const d = await client.writeSequences(state.session, {
    images: [state.episode],
    iterations: Number($('seq-iterations').value),
    seed: Number($('seed').value),
  });
  $('seq-write-info').textContent =
    `wrote ${state.episode.length} frames as one sequence (version ${d.version}): free energy ${fmt(d.free_energy)} ` +
    `after ${d.iterations} iterations (higher is better; it never decreases from one iteration to the next)`;
  drawTrace(d.free_energy_trace);
  await showSession();
  return d;
}

// The identities of every frame of the episode (POST .../infer): a grid of T columns, one row of
// cells per identity, brightness = q(b = 1).
async function inferSequence() {
  if (!state.episode.length) throw new Error('the episode is empty: drop PNGs or pick the ready episode');
  const r = await client.inferSequence(state.session, { images: state.episode });
  const q = r.identities.toArray();
  const T = q.length, P = T ? q[0].length : 0;
  const box = $('identities');
  box.textContent = '';
  const cw = Math.max(8, Math.min(22, Math.floor((box.clientWidth - 90) / Math.max(1, T)) - 2)); // fit the panel
  box.style.gridTemplateColumns = `5.5em repeat(${T}, ${cw}px)`;
  box.style.setProperty('--cell', cw + 'px');
  box.appendChild(document.createElement('span'));
  state.episode.forEach((u, t) => { const im = imgEl(u, `frame ${t}`); im.className = 'frame'; box.appendChild(im); });
  for (let p = 0; p < P; p++) {
    const lab = document.createElement('span');
    lab.className = 'label';
    lab.textContent = `identity ${p}`;
    box.appendChild(lab);
    for (let t = 0; t < T; t++) {
      const cell = document.createElement('span');
      cell.className = 'cell';
      const v = Math.max(0, Math.min(1, q[t][p]));
      const g = Math.round(30 + 225 * v);
      cell.style.background = `rgb(${g}, ${Math.round(g * 0.85)}, ${Math.round(g * 0.4)})`;
      cell.title = `frame ${t}, identity ${p}: q(b = 1) = ${v.toFixed(3)}`;
      cell.dataset.q = String(v);
      box.appendChild(cell);
    }
  }
  box.dataset.frames = String(T);
  box.dataset.identities = String(P);
  return r;
}

// The first frames of the episode continued (POST .../continue): the prefix, then the decoded
// predictive mean of each next frame.
async function continueSequence() {
  if (!state.episode.length) throw new Error('the episode is empty: drop PNGs or pick the ready episode');
  const n = Math.max(1, Math.min(state.episode.length, Number($('seq-prefix').value)));
  const steps = Number($('seq-steps').value);
  const r = await client.continueSequence(state.session, { images: state.episode.slice(0, n), steps });
  const box = $('continuation');
  box.textContent = '';
  const fig = (src, caption, cls) => {
    const f = document.createElement('figure');
    f.className = cls;
    const cap = document.createElement('figcaption');
    cap.textContent = caption;
    f.append(imgEl(src, caption), cap);
    box.appendChild(f);
  };
  state.episode.slice(0, n).forEach((u, t) => fig(u, `given ${t + 1}`, 'given'));
  r.images.dataUrls().forEach((u, i) => fig(u, `next ${i + 1}`, 'predicted'));
  box.dataset.steps = String(r.images.length);
  return r;
}

// ---------- wiring ----------
async function start() {
  setupBrush();
  resetMask();
  drawUsage(null);
  $('error-close').addEventListener('click', clearError);
  $('api-key-save').addEventListener('click', () => {
    const k = $('api-key').value.trim();
    if (k) sessionStorage.setItem(KEY_STORE, k);
    else sessionStorage.removeItem(KEY_STORE);
    client.apiKey = k || null;
    $('key-panel').hidden = true;
    act('loading', boot);
  });
  $('model').addEventListener('change', showCreationForm);
  $('new-kind').addEventListener('change', showCreationForm);
  $('new-rows').addEventListener('input', showCreationForm);
  $('session').addEventListener('change', () => act('loading session', () => chooseSession($('session').value || null)));
  window.addEventListener('hashchange', () => {
    const id = addressSession();
    if (id !== state.session) act('loading session', () => chooseSession(id));
  });
  $('new-session').addEventListener('click', () => act('creating a session', newSession));
  $('refresh-session').addEventListener('click', () => act('loading sessions', async () => {
    await loadSessions();
    await chooseSession(state.session);
  }));
  $('delete-session').addEventListener('click', () => act('deleting', deleteSession));
  $('export-session').addEventListener('click', () => act('exporting', exportSession));
  $('import-file').addEventListener('change', (ev) => act('importing', async () => {
    const f = ev.target.files[0];
    ev.target.value = '';
    if (f) await importSession(f);
  }));
  $('use-shipped').addEventListener('click', () => act('loading the episode', useShipped));
  $('files').addEventListener('change', (ev) => act('reading images', () => addFiles(ev.target.files)));
  const drop = $('drop');
  drop.addEventListener('dragover', (ev) => { ev.preventDefault(); drop.classList.add('over'); });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (ev) => {
    ev.preventDefault();
    drop.classList.remove('over');
    act('reading images', () => addFiles(ev.dataTransfer.files));
  });
  $('write').addEventListener('click', () => act('writing', writeEpisode));
  $('sample').addEventListener('click', () => act('sampling', drawSamples));
  $('reroll').addEventListener('click', () => {
    $('seed').value = Math.floor(Math.random() * 1e6);
    act('sampling', drawSamples);
  });
  $('cue-file').addEventListener('change', (ev) => act('reading the image', async () => {
    const f = ev.target.files[0];
    if (!f) return;
    state.chosen = -1; // not an image of the episode: no original, nothing to forget
    document.querySelectorAll('#episode img').forEach((el) => el.classList.remove('chosen'));
    const { url, how } = await fitPng(new Uint8Array(await f.arrayBuffer()), f.name);
    await setCueFrom(url);
    $('files-info').textContent = how ? `Converted: ${f.name} (${how}).` : '';
  }));
  $('clear-mask').addEventListener('click', resetMask);
  $('add-noise').addEventListener('click', addNoise);
  $('read').addEventListener('click', () => act('reading', readCue));
  $('read-mode').addEventListener('change', () => { $('read-answer').disabled = $('read-mode').value !== 'recall'; });
  $('forget').addEventListener('click', () => act('forgetting', forgetItem));
  window.addEventListener('pagehide', dropAloneOnUnload);
  $('resize').addEventListener('click', () => act('resizing', resize));
  $('offer-keep').addEventListener('click', offerKeep);
  $('seq-write').addEventListener('click', () => act('writing the sequence', writeSequence));
  $('seq-infer').addEventListener('click', () => act('inferring the identities', inferSequence));
  $('seq-continue').addEventListener('click', () => act('continuing', continueSequence));
  applyMode('none');
  await act('loading', boot);
}

async function boot() {
  await loadModels();
  await loadSessions();
  try {
    await chooseSession(addressSession());
  } finally {
    document.body.dataset.ready = '1';
  }
}

// For the browser test and the console: the page's state and actions.
window.vbmemPage = { state, alone, client, paintMask, useShipped, addFiles, fitPng, writeEpisode, drawSamples, readCue, forgetItem, resize, drawClusters,
  chooseSession, newSession, exportSession, importSession, writeSequence, inferSequence, continueSequence };
start();
