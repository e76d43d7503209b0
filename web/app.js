// app.js -- the vbmemd web page: choose a model and a session, write an episode of images, sample
// from memory, recall a masked or noisy image step by step, and look at the memory (cluster usage,
// the posterior means R_h as a heatmap, resize, the ELBO of the last write). Plain DOM, no framework.
import { Client, VbmemError } from '/ui/vbmem-client.js';

const $ = (id) => document.getElementById(id);
const KEY_STORE = 'vbmem.apiKey';
// clients/js's Client (clients/js/index.js, served as /ui/vbmem-client.js): the page's origin, the key kept in this tab only
const client = new Client({ url: location.origin, apiKey: sessionStorage.getItem(KEY_STORE) });

const state = {
  models: [],
  model: null,      // the chosen model's description (observation size)
  session: null,    // the chosen session's id
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

function imgEl(src, title) {
  const el = document.createElement('img');
  el.src = src;
  if (title) el.title = title;
  return el;
}

// ---------- models and sessions ----------
async function loadModels() {
  const list = await client.models();
  state.models = list.map((m) => m.raw); // the server's own JSON (observation size)
  const sel = $('model');
  sel.textContent = '';
  for (const m of state.models) {
    const o = document.createElement('option');
    o.value = m.name;
    o.textContent = `${m.name} (${m.observation.channels}×${m.observation.height}×${m.observation.width}, C=${m.code_size})`;
    if (m.default) o.selected = true;
    sel.appendChild(o);
  }
  if (list.length === 0) throw new Error('this server hosts no model: the page needs one (GET /v1/models)');
  chooseModel(sel.value);
}

function chooseModel(name) {
  state.model = state.models.find((m) => m.name === name) || null;
}

const sessionLabel = (s) => `${s.id.slice(0, 8)}… ${s.kind} H=${s.clusters} K=${s.rows} (${s.frames} frames, v${s.version})`;

async function loadSessions(select) {
  const page = await client.listSessions({ limit: 1000 });
  const sel = $('session');
  sel.textContent = '';
  // (temporal sessions of seed 003 take sequences: this page works with the other kinds)
  const mine = page.sessions.filter((s) => s.model === (state.model && state.model.name) && s.kind !== 'temporal');
  for (const { raw: s } of mine) {
    const o = document.createElement('option');
    o.value = s.id;
    o.textContent = sessionLabel(s);
    sel.appendChild(o);
  }
  if (select) sel.value = select;
  state.session = sel.value || null;
}

async function newSession() {
  const s = await client.createSession({ model: state.model.name });
  await loadSessions(s.id);
  await showSession();
}

async function showSession() {
  if (!state.session) {
    $('session-info').textContent = 'no session: create one';
    drawUsage(null);
    return null;
  }
  const s = (await client.getSession(state.session)).raw;
  $('session-info').textContent =
    `id ${s.id}\n${s.kind}, H=${s.clusters} clusters, K=${s.rows} rows, G=${s.groups}, C=${s.code_size}; ` +
    `${s.frames} frames, version ${s.version}, last ELBO per frame ${fmt(s.last_elbo)}`;
  $('resize-clusters').value = s.clusters;
  $('resize-rows').value = s.rows;
  const opt = [...$('session').options].find((o) => o.value === s.id);
  if (opt) opt.textContent = sessionLabel(s);
  drawUsage(s.cluster_usage);
  if (s.frames > 0 || s.version > 1) await drawHeatmap();
  return s;
}

// ---------- episode ----------
async function useShipped() {
  const meta = await (await fetch('/ui/fashion-mnist-episode.json')).json();
  const sprite = await loadImage('/ui/fashion-mnist-episode.png');
  const n = Number($('shipped-count').value);
  const urls = [];
  for (let i = 0; i < n; i++) {
    const c = toGreyCanvas(sprite, (i % meta.columns) * meta.tile, Math.floor(i / meta.columns) * meta.tile, meta.tile, meta.tile);
    urls.push(c.toDataURL('image/png'));
  }
  setEpisode(urls, urls.map((_, i) => meta.classes[meta.labels[i]]));
}

async function addFiles(files) {
  const urls = [];
  for (const f of files) {
    const src = URL.createObjectURL(f);
    try {
      urls.push(toGreyCanvas(await loadImage(src)).toDataURL('image/png'));
    } finally {
      URL.revokeObjectURL(src);
    }
  }
  if (urls.length) setEpisode(urls, null);
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
  showElbo(r);
  await showSession();
  await drawSamples();
  return r;
}

const fmt = (x) => (x === null || x === undefined ? '—' : typeof x === 'number' && !Number.isInteger(x) ? x.toFixed(3) : String(x));

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
  $('steps').textContent = '';
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

async function readCue() {
  if (!state.session) throw new Error('choose or create a session first');
  const req = {
    images: [$('cue').toDataURL('image/png')],
    iterations: Number($('read-iterations').value),
    seed: Number($('seed').value),
    mode: $('read-mode').value,
  };
  if (state.maskPainted) req.mask = [maskCanvas.toDataURL('image/png')];
  const steps = $('steps');
  steps.dataset.steps = '';
  const r = (await client.read(state.session, req)).raw; // every step's images: base64 PNGs
  steps.textContent = '';
  const fig = (src, caption) => {
    const f = document.createElement('figure');
    const cap = document.createElement('figcaption');
    cap.textContent = caption;
    f.append(imgEl(src, caption), cap);
    steps.appendChild(f);
  };
  fig(cueShown(), state.maskPainted ? 'cue (red: unknown)' : 'cue');
  for (let i = 0; i < r.steps.length; i++) {
    await sleep(120); // one step at a time, so the read is seen converging
    const s = r.steps[i];
    fig(pngUrl(s.observations[0]), `step ${i + 1} · s=${s.clusters[0].join(',')}`);
  }
  steps.dataset.steps = String(r.steps.length);
  return r;
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
  const top = 14, base = c.height - 18;
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
  c.style.width = Math.min(512, cg * 8) + 'px';
  c.style.height = Math.min(480, rowsTotal * 4) + 'px';
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

async function resize() {
  if (!state.session) throw new Error('choose or create a session first');
  const r = await client.resize(state.session, {
    clusters: Number($('resize-clusters').value),
    rows: Number($('resize-rows').value),
    seed: Number($('seed').value),
  });
  $('resize-info').textContent =
    `H=${r.clusters}, K=${r.rows}: ELBO per frame ${fmt(r.elboBefore)} before, ${fmt(r.elboAfter)} after (version ${r.version})`;
  await showSession();
  await drawSamples();
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
  $('model').addEventListener('change', () => act('loading sessions', async () => {
    chooseModel($('model').value);
    await loadSessions();
    await showSession();
  }));
  $('session').addEventListener('change', () => act('loading session', async () => {
    state.session = $('session').value || null;
    await showSession();
  }));
  $('new-session').addEventListener('click', () => act('creating a session', newSession));
  $('refresh-session').addEventListener('click', () => act('loading session', showSession));
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
    const src = URL.createObjectURL(f);
    try { await setCueFrom(src); } finally { URL.revokeObjectURL(src); }
  }));
  $('clear-mask').addEventListener('click', resetMask);
  $('add-noise').addEventListener('click', addNoise);
  $('read').addEventListener('click', () => act('reading', readCue));
  $('resize').addEventListener('click', () => act('resizing', resize));
  await act('loading', boot);
}

async function boot() {
  await loadModels();
  await loadSessions();
  await showSession();
  document.body.dataset.ready = '1';
}

// For the browser test and the console: the page's state and actions.
window.vbmemPage = { state, client, paintMask, useShipped, writeEpisode, drawSamples, readCue, resize };
start();
