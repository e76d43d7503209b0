// test_page.mjs -- the vbmemd web page in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser download). Starts vbmemd on a free loopback port, loads GET /, checks
// the embedded assets' Content-Types, writes the shipped Fashion-MNIST episode, draws samples,
// re-rolls them, paints a mask on the cue canvas with the mouse and runs a masked read (every step
// shown, the known pixels kept) beside the same read on the model alone (the identical body sent to
// an empty session of the same configuration, checked in the requests and on the server; both
// familiarities and where each read stopped shown), forgets the item (checked on the server), draws
// the usage chart and the R_h heatmap, resizes, and checks that the page's empty session is reused,
// replaced and deleted (a switch of configuration, a reload, closing the page) and never leaks; shows a
// server error (title and detail); then, against a daemon of its own, sessions of every kind (the
// options at creation and their defaults checked on the server, latent and temporal sessions
// listed and shown, each cluster's pictures, the address kept and restored by a reload and a
// shared link, export / import / delete round trips, what a resize on kept or drawn codes says, a
// temporal session's sequence, identities over time and continuation); and, against a daemon
// with API keys, asks for a key.
// Screenshots go to OUTDIR. Fails when an element is missing, a check fails, or the page logs a
// console error or a page error (outside the steps that provoke a 4xx on purpose).
//
//   node tests/browser/test_page.mjs [build/vbmemd] [build/browser]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startDaemon, stopDaemon } from './daemon.mjs';

const BIN = path.resolve(process.argv[2] || process.env.VBMEMD || 'build/vbmemd');
const OUT = path.resolve(process.argv[3] || path.join(path.dirname(BIN), 'browser'));
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
fs.mkdirSync(OUT, { recursive: true });

let failures = 0;
function check(cond, what) {
  if (cond) console.log(`   ok   ${what}`);
  else { console.log(`   FAIL ${what}`); failures++; }
}


// The image files of tests/clients/convert_fixtures.py (the command line's test takes the same):
// what the page sends for each (fitPng) against what the files' definition gives: untouched,
// converted to exactly those pixels, or refused naming the file; then through the file picker.
async function checkConversions(page, w) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vbmem-convert-'));
  const made = spawnSync('/usr/bin/python3', [path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'clients',
    'convert_fixtures.py'), dir], { encoding: 'utf8' });
  check(made.status === 0, `the conversion fixtures are written${made.status ? ': ' + made.stderr : ''}`);
  const want = JSON.parse(fs.readFileSync(path.join(dir, 'expected.json'), 'utf8'));
  const files = Object.fromEntries(Object.keys(want).map((n) => [n, fs.readFileSync(path.join(dir, n)).toString('base64')]));
  const got = await page.evaluate(async (files) => {
    const out = {};
    for (const [n, b64] of Object.entries(files)) {
      const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      try {
        const { url, how } = await window.vbmemPage.fitPng(bytes, n);
        const img = await new Promise((res, rej) => { const i = new Image(); i.onload = () => res(i); i.onerror = rej; i.src = url; });
        const c = document.createElement('canvas');
        c.width = img.width;
        c.height = img.height;
        const g = c.getContext('2d');
        g.drawImage(img, 0, 0);
        const d = g.getImageData(0, 0, c.width, c.height).data;
        const grey = [];
        let isGrey = true;
        for (let i = 0; i < d.length; i += 4) {
          grey.push(d[i]);
          if (d[i] !== d[i + 1] || d[i] !== d[i + 2] || d[i + 3] !== 255) isGrey = false;
        }
        out[n] = { how, same: url === 'data:image/png;base64,' + b64, w: img.width, h: img.height, grey, isGrey };
      } catch (e) {
        out[n] = { error: String(e.message) };
      }
    }
    return out;
  }, files);
  for (const [n, e] of Object.entries(want)) {
    const g = got[n];
    if (e.refused) check(g.error && g.error.startsWith(n + ': ') && g.error.includes(e.refused), `${n}: refused by name (${g.error})`);
    else if (!e.converted) check(!g.error && g.how === null && g.same, `${n}: sent untouched`);
    else {
      const bad = e.grey ? e.grey.filter((v, i) => g.grey[i] !== v).length : 0;
      check(!g.error && g.how && g.w === 28 && g.h === 28 && g.isGrey && bad === 0,
        `${n}: converted (${g.how || g.error}) to 28x28 grey${e.grey ? `, every pixel as defined (${bad} differ)` : ''}`);
    }
  }
  // through the file picker: the episode shows them, the converted one named
  await page.setInputFiles('#files', [path.join(dir, 'rgb56.png'), path.join(dir, 'grey28.png')]);
  await page.waitForFunction(() => document.querySelectorAll('#episode img').length === 2);
  const info = await page.textContent('#files-info');
  check(/rgb56\.png \(RGB 56x56 to grey 28x28\)/.test(info) && !/grey28/.test(info), `the picker names the converted file: "${info}"`);
  w.expecting = true;
  await page.setInputFiles('#files', [path.join(dir, 'grey28.png'), path.join(dir, 'rgb16.png')]);
  await page.waitForSelector('#error:not([hidden])');
  const detail = await page.textContent('#error');
  check(/rgb16\.png/.test(detail) && /8 bits/.test(detail) && (await page.locator('#episode img').count()) === 2,
    'a 16-bit colour PNG is refused by name, the episode kept');
  w.expecting = false;
  await page.click('#error-close');
  fs.rmSync(dir, { recursive: true, force: true });
}



// Console errors and page errors; `expecting` counts the 4xx the test provokes on purpose.
function watch(page) {
  const w = { errors: [], expecting: false };
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (w.expecting && /Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) return;
    w.errors.push('console: ' + m.text());
  });
  page.on('pageerror', (e) => w.errors.push('pageerror: ' + e.message));
  return w;
}

async function exists(page, sel, what) {
  check((await page.locator(sel).count()) > 0, `${what} (${sel})`);
}

async function mainFlow(browser) {
  const d = await startDaemon(BIN);
  try {
    // the embedded files: status and Content-Type
    for (const [p, type] of [['/', 'text/html'], ['/ui/app.js', 'text/javascript'], ['/ui/style.css', 'text/css'],
      ['/ui/vbmem-client.js', 'text/javascript'], ['/ui/fashion-mnist-episode.png', 'image/png'],
      ['/ui/fashion-mnist-episode.json', 'application/json']]) {
      const r = await fetch(d.url + p);
      check(r.status === 200 && (r.headers.get('content-type') || '').startsWith(type) && !!r.headers.get('etag'),
        `GET ${p}: 200, ${type}, ETag`);
    }
    const missing = await fetch(d.url + '/ui/nothing.js');
    check(missing.status === 404 && missing.headers.get('content-type') === 'application/problem+json', 'GET /ui/nothing.js: 404 problem');

    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    const w = watch(page);
    const log = recordApi(page);
    await page.goto(d.url + '/');
    await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
    for (const [sel, what] of [['#model option', 'a model to pick'], ['#session', 'the session picker'],
      ['#new-session', 'New session'], ['#use-shipped', 'the ready episode'], ['#drop', 'the drop zone'],
      ['#write', 'Write'], ['#sample', 'Sample'], ['#reroll', 'Re-roll'], ['#cue', 'the cue canvas'],
      ['#mask-view', 'the mask canvas'], ['#read', 'Read'], ['#usage', 'the usage chart'],
      ['#heatmap', 'the heatmap'], ['#resize', 'Resize'], ['#elbo', 'the ELBO table']])
      await exists(page, sel, what);
    check(/Fashion-MNIST/.test(await page.textContent('footer')) && /MIT/.test(await page.textContent('footer')),
      'the page credits Fashion-MNIST (MIT licence)');

    await page.click('#new-session');
    await page.waitForFunction(() => document.querySelector('#session').value.length === 32);
    check(true, 'a session was created and chosen');

    await page.selectOption('#shipped-count', '32');
    await page.click('#use-shipped');
    await page.waitForFunction(() => document.querySelectorAll('#episode img').length === 32);
    check(true, 'the shipped episode shows 32 images');

    await page.click('#write');
    await page.waitForFunction(() => /ELBO per frame/.test(document.querySelector('#elbo').textContent));
    await page.waitForFunction(() => document.querySelectorAll('#samples img').length === 16);
    const elbo = await page.textContent('#elbo');
    check(/KL\(w\)/.test(elbo) && /frames T\s*32/.test(elbo), 'the ELBO terms of the write (T = 32)');
    const info = await page.textContent('#session-info');
    check(/32 frames/.test(info), 'the session shows 32 frames');
    await page.waitForFunction(() => /clusters/.test(document.querySelector('#heatmap-info').textContent));
    check(true, 'the R_h heatmap is drawn');
    const usagePainted = await page.evaluate(() => {
      const c = document.querySelector('#usage');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let blue = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i] === 47 && d[i + 1] === 127 && d[i + 2] === 209) blue++;
      return blue;
    });
    check(usagePainted > 100, `the cluster usage bars are drawn (${usagePainted} bar pixels)`);
    await page.screenshot({ path: path.join(OUT, 'page-after-write.png'), fullPage: true });

    const before = await page.evaluate(() => [...document.querySelectorAll('#samples img')].map((i) => i.src).join());
    await page.click('#reroll');
    await page.waitForFunction((b) => {
      const now = [...document.querySelectorAll('#samples img')].map((i) => i.src).join();
      return now !== b && document.querySelectorAll('#samples img').length === 16;
    }, before);
    check(true, 're-rolling the seed changes the samples');

    // the cue: episode image 3; paint its lower half unknown with the mouse
    await page.click('#episode img:nth-child(4)');
    await page.waitForTimeout(200);
    await page.locator('#mask-view').scrollIntoViewIfNeeded(); // the mouse paints only what is in view
    const box = await page.locator('#mask-view').boundingBox();
    await page.mouse.move(box.x + 4, box.y + box.height * 0.6);
    await page.mouse.down();
    for (let y = 0.6; y <= 0.98; y += 0.06) {
      await page.mouse.move(box.x + 4, box.y + box.height * y);
      await page.mouse.move(box.x + box.width - 4, box.y + box.height * y, { steps: 8 });
    }
    await page.mouse.up();
    const maskInfo = await page.textContent('#mask-info');
    const unknown = Number((maskInfo.match(/^(\d+)/) || [0, 0])[1]);
    check(unknown > 150 && unknown < 784, `the brush painted part of the mask unknown (${unknown} pixels)`);
    await page.fill('#read-iterations', '5');
    const sid = await shownId(page);
    check((await serverSessions(d)).length === 1, 'before the first read the server holds the one session');
    let from = log.length;
    await page.click('#read');
    const aloneId = await checkReadPair(page, d, log, from, sid, 5, 'a masked read');
    const body = JSON.parse(log.filter((e) => e.path.endsWith('/reads')).pop().body);
    check(body.mask && body.seed === Number(await page.inputValue('#seed')) && body.iterations === 5 && body.mode === 'recall' && body.answer === 'clean',
      'its body: the mask, the page\'s seed, 5 steps, mode recall, answer clean');
    check((await serverSessions(d)).length === 2, 'the read made one model-alone session');
    const figs = await page.locator('#steps figure').count();
    check(figs === 8, `the read shows the original, the cue, every step and the answer (${figs} images)`);
    const orig = await page.evaluate(() => [document.querySelector('#steps figure.original img').src,
      document.querySelector('#steps-alone figure.original img').src, window.vbmemPage.state.episode[3]]);
    check(orig[0] === orig[2] && orig[1] === orig[2], 'the original is the episode image the cue came from, on both sides');
    const famBoth = await page.evaluate(() => [document.querySelector('#familiarity').dataset.familiarity,
      document.querySelector('#familiarity-alone').dataset.familiarity].map(Number));
    check(famBoth[0] > famBoth[1], `the memory finds its own image more familiar than the model alone does (${famBoth})`);
    check(/^more familiar to the memory than to the model alone/m.test(await page.textContent('#familiarity')),
      'and says so');
    check(/nearer 0 = more familiar/.test(await page.textContent('#familiarity-about')) &&
      /model alone: an empty session of the\s+same model and memory configuration/.test(await page.textContent('#read-about')),
    'the panel says what familiarity is and what the model alone is');
    // recall with a mask keeps the known pixels exactly: compare the last step with the cue
    const kept = await page.evaluate(async () => {
      const imgs = [...document.querySelectorAll('#steps img')];
      const pix = async (src) => {
        const im = new Image();
        im.src = src;
        await im.decode();
        const c = document.createElement('canvas');
        c.width = 28; c.height = 28;
        const g = c.getContext('2d');
        g.drawImage(im, 0, 0);
        return g.getImageData(0, 0, 28, 28).data;
      };
      const cue = await pix(document.querySelector('#cue').toDataURL('image/png')), last = await pix(imgs[imgs.length - 1].src);
      const mask = document.querySelector('#mask-view').getContext('2d').getImageData(0, 0, 28, 28).data;
      let known = 0, same = 0, filledDiff = 0;
      for (let i = 0; i < cue.length; i += 4) {
        if (mask[i + 3] === 0) { known++; if (cue[i] === last[i]) same++; }
        else if (cue[i] !== last[i]) filledDiff++;
      }
      return { known, same, filledDiff };
    });
    check(kept.known > 0 && kept.same === kept.known, `the read keeps the ${kept.known} known pixels (${kept.same} equal)`);
    check(kept.filledDiff > 0, `the read fills in the unknown pixels (${kept.filledDiff} changed)`);
    await page.locator('#recall-panel').screenshot({ path: path.join(OUT, 'recall.png') });
    await page.screenshot({ path: path.join(OUT, 'page.png'), fullPage: true });

    // noise instead of a mask, the blended answer, 3 steps: the same model-alone session again
    await page.click('#clear-mask');
    await page.click('#add-noise');
    await page.selectOption('#read-answer', 'blend');
    await page.fill('#read-iterations', '3');
    from = log.length;
    await page.click('#read');
    const again = await checkReadPair(page, d, log, from, sid, 3, 'a noisy read, answer blend');
    const nbody = JSON.parse(log.filter((e) => e.path.endsWith('/reads')).pop().body);
    check(nbody.answer === 'blend' && nbody.iterations === 3 && !nbody.mask, 'its body: answer blend, 3 steps, no mask');
    check(again === aloneId && (await serverSessions(d)).length === 2 &&
      log.slice(from).every((e) => !(e.method === 'POST' && e.path === '/v1/sessions')),
    'the model-alone session is reused for a session of the same configuration (none made)');
    await page.selectOption('#read-mode', 'mean');
    check(await page.isDisabled('#read-answer'), 'the answer option applies to recall only');
    await page.selectOption('#read-mode', 'recall');
    await page.selectOption('#read-answer', 'clean');

    // forget the item the cue came from (this session keeps no codes: the approximate downdate)
    const pre = (await api(d, 'GET', '/v1/sessions/' + sid)).body;
    from = log.length;
    check(!(await page.isDisabled('#forget')), 'a read of an episode image offers "Forget this item"');
    await page.click('#forget');
    await page.waitForFunction(() => /Forgot episode image 4/.test(document.querySelector('#forget-info').textContent));
    const fg = log.slice(from).find((e) => e.path === `/v1/sessions/${sid}/forget`);
    const fres = await (await fg.req.response()).json();
    const post = (await api(d, 'GET', '/v1/sessions/' + sid)).body;
    check(b64(JSON.parse(fg.body).observations[0]) === b64(await page.evaluate(() => window.vbmemPage.state.episode[3])),
      'forget sends the original episode image (not the damaged cue)');
    check(post.frames === pre.frames - 1 && post.version === pre.version + 1 && fres.version === post.version &&
      fres.removed.length === 1 && fres.exact === false,
    `the forget removed one item on the server (frames ${pre.frames} -> ${post.frames}, version ${pre.version} -> ${post.version}, approximate)`);
    await page.waitForFunction((v) => document.querySelector('#session-info').textContent.includes(`version ${v}`), post.version);
    const finfo = await page.evaluate(() => [document.querySelector('#forget-info').textContent, document.querySelector('#forget-info').dataset.exact]);
    check(finfo[1] === 'false' && /Approximate/.test(finfo[0]) && finfo[0].includes(`frames ${pre.frames} → ${post.frames}`) &&
      /31 frames/.test(await page.textContent('#session-info')),
    'the page shows what was removed, that it was approximate, and the session\'s new frames');
    await page.waitForFunction((v) => document.querySelector('#clusters').dataset.version === String(v), post.version);
    const clAfter = (await api(d, 'GET', `/v1/sessions/${sid}/clusters`)).body;
    const meansShown = await page.evaluate(() => [...document.querySelectorAll('#clusters img.mean')]
      .map((i) => [Number(i.closest('figure').dataset.cluster), i.src]));
    check(meansShown.every(([h, src]) => src === 'data:image/png;base64,' + clAfter.observations[h]),
      'the cluster pictures are redrawn from the memory after the forget');
    check(await page.evaluate(() => document.querySelectorAll('#episode img')[3].classList.contains('forgotten')) &&
      await page.isDisabled('#forget'), 'the episode image is marked forgotten and the action is spent');

    // resize: H = 4, the samples are redrawn
    const beforeResize = await page.evaluate(() => [...document.querySelectorAll('#samples img')].map((i) => i.src).join());
    await page.fill('#resize-clusters', '4');
    await page.click('#resize');
    await page.waitForFunction(() => /H=4/.test(document.querySelector('#resize-info').textContent));
    await page.waitForFunction((b) => [...document.querySelectorAll('#samples img')].map((i) => i.src).join() !== b, beforeResize);
    check(/H=4 clusters/.test(await page.textContent('#session-info')), 'resize to H = 4 shows in the session and the samples change');
    await page.screenshot({ path: path.join(OUT, 'page-after-resize.png'), fullPage: true });
    from = log.length;
    await page.click('#episode img:nth-child(2)');
    await page.click('#read');
    const resized = await checkReadPair(page, d, log, from, sid, 3, 'a read after the resize');
    check(resized !== aloneId && await gone(d, aloneId) && (await serverSessions(d)).length === 2,
      'the resize changed the configuration: a new model-alone session, the old one deleted');
    await page.locator('#recall-panel').screenshot({ path: path.join(OUT, 'recall-noisy-after-forget.png') });

    // a server error is shown with its title and detail
    w.expecting = true;
    await page.fill('#write-iterations', '-1');
    await page.click('#write');
    await page.waitForSelector('#error:not([hidden])');
    const title = await page.textContent('#error-title');
    const detail = await page.textContent('#error-detail');
    check(title.length > 0 && detail.length > 0 && /422/.test(await page.textContent('#error-status')),
      `a 422 is shown: "${title}": "${detail}"`);
    check(await page.evaluate(() => {
      const r = document.querySelector('#error').getBoundingClientRect();
      return r.top >= 0 && r.bottom <= innerHeight && r.height > 0;
    }), 'the error is in view where the page is scrolled');
    await page.screenshot({ path: path.join(OUT, 'error.png') });
    w.expecting = false;
    await page.click('#error-close');
    check(await page.locator('#error').isHidden(), 'the error can be dismissed');

    await checkConversions(page, w);

    check(w.errors.length === 0, `no console or page errors${w.errors.length ? ': ' + w.errors.join(' | ') : ''}`);
    await page.close({ runBeforeUnload: true });
    check(await gone(d, resized), 'closing the page deletes its model-alone session');
    const left = await serverSessions(d);
    check(left.length === 1 && left[0].id === sid, `no empty session is left behind (${left.length} on the server)`);
  } finally {
    const code = await stopDaemon(d);
    check(code === 0, `vbmemd exited with 0 on SIGTERM (${code})`);
  }
}

// The API itself, from the test (not through the page): to set up sessions and to check what the
// page did on the server.
async function api(d, method, p, body) {
  const r = await fetch(d.url + p, { method, headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

// Every session of the server (the test's daemons have no API keys: one caller).
const serverSessions = async (d) => (await api(d, 'GET', '/v1/sessions?limit=1000')).body.sessions;

// The page's POST/PUT/DELETE requests to the API, each with its body and (later) its response.
function recordApi(page) {
  const log = [];
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (r.method() !== 'GET' && u.pathname.startsWith('/v1/')) log.push({ method: r.method(), path: u.pathname, body: r.postData(), req: r });
  });
  return log;
}

const b64 = (x) => String(x).replace(/^data:image\/png;base64,/, '');
const famText = (f) => String(Number(f.toPrecision(3)));

// Wait until a session is gone from the server (a DELETE the page sent, perhaps as it unloaded).
async function gone(d, id, ms = 5000) {
  for (let t = 0; t < ms; t += 100) {
    if ((await api(d, 'GET', '/v1/sessions/' + id)).status === 404) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

// After a read from the page: the model-alone read ran with the same body on an empty session of
// the chosen session's model and configuration, and both columns show every step, the answer,
// the familiarity and where the read stopped, as the server answered them. Returns the empty
// session's id.
async function checkReadPair(page, d, log, from, sid, steps, what) {
  await page.waitForSelector('#read-result[data-done="1"]', { timeout: 20000 });
  const reads = log.slice(from).filter((e) => e.method === 'POST' && e.path.endsWith('/reads'));
  const aloneId = await page.evaluate(() => window.vbmemPage.alone.id);
  const main = (await api(d, 'GET', '/v1/sessions/' + sid)).body;
  const solo = (await api(d, 'GET', '/v1/sessions/' + aloneId)).body;
  check(reads.length === 2 && reads.some((e) => e.path === `/v1/sessions/${sid}/reads`) &&
    reads.some((e) => e.path === `/v1/sessions/${aloneId}/reads`) && aloneId !== sid,
  `${what}: two reads, on the session and on the model-alone session`);
  check(reads.length === 2 && reads[0].body === reads[1].body, `${what}: the two reads sent the identical body`);
  check(solo.model === main.model && JSON.stringify(solo.config) === JSON.stringify(main.config) &&
    solo.frames === 0 && solo.version === 1 && solo.last_elbo === null && solo.ttl_seconds > 0,
  `${what}: the model-alone session is empty (version 1, 0 frames) with the session's model and configuration ` +
    `(${JSON.stringify(solo.config)}), deleted by the server if left idle (ttl ${solo.ttl_seconds} s)`);
  check(!(await optionIds(page)).includes(aloneId), `${what}: the page does not list the model-alone session`);
  for (const [box, fam, e] of [['#steps', '#familiarity', reads.find((x) => x.path.includes(sid))],
    ['#steps-alone', '#familiarity-alone', reads.find((x) => x.path.includes(aloneId))]]) {
    const r = await (await e.req.response()).json();
    const shown = await page.evaluate(([b, f]) => ({
      steps: [...document.querySelectorAll(`${b} figure.step img`)].map((i) => i.src),
      answer: document.querySelector(`${b} figure.answer img`) ? document.querySelector(`${b} figure.answer img`).src : null,
      cue: document.querySelectorAll(`${b} figure.cue`).length,
      session: document.querySelector(b).dataset.session,
      famText: document.querySelector(f).textContent, fam: document.querySelector(f).dataset.familiarity,
      stopped: document.querySelector(f).dataset.stoppedAt,
      same: [...document.querySelectorAll(`${b} figure.step`)].map((x) => x.classList.contains('same')),
    }), [box, fam]);
    const want = r.steps.map((x) => 'data:image/png;base64,' + x.observations[0]);
    const side = box === '#steps' ? 'memory' : 'model alone';
    check(shown.steps.length === steps && JSON.stringify(shown.steps) === JSON.stringify(want) &&
      shown.answer === want[want.length - 1] && shown.cue === 1 && shown.session === (box === '#steps' ? sid : aloneId),
    `${what} (${side}): the cue, the ${steps} steps the server answered, and the last as the answer`);
    check(r.familiarity.length === 1 && r.familiarity[0] <= 0 && shown.fam === String(r.familiarity[0]) &&
      shown.famText.includes('familiarity ' + famText(r.familiarity[0])),
    `${what} (${side}): familiarity ${famText(r.familiarity[0])} shown`);
    check(shown.stopped === String(r.stopped_at) && shown.same.every((x, i) => x === i > r.stopped_at) &&
      (r.stopped_at >= steps - 1 ? /still changing/ : new RegExp(`stopped changing at step ${r.stopped_at + 1} of ${steps}`)).test(shown.famText),
    `${what} (${side}): where the read stopped changing (stopped_at ${r.stopped_at}) shown`);
  }
  return aloneId;
}

const optionIds = (page) => page.evaluate(() => [...document.querySelectorAll('#session option')].map((o) => o.value).filter(Boolean));
const shownId = (page) => page.evaluate(() => document.querySelector('#session').value);

// Sessions of every kind: the options at creation reach the server (and the defaults shown are the
// server's), latent and temporal sessions are listed and shown, each cluster's pictures render,
// the address holds the session (reload and a shared link restore it), export / import / delete
// round-trip, a resize says on which codes it ran, and a temporal session writes a sequence,
// infers its identities over time and continues a prefix.
async function sessionsFlow(browser) {
  const d = await startDaemon(BIN);
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'vbmem-browser-'));
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    const w = watch(page);
    const log = recordApi(page);
    await page.goto(d.url + '/');
    await page.waitForSelector('body[data-ready="1"]');
    check(await page.evaluate(() => [...document.querySelectorAll('main > section')].filter((s) => !s.hidden).length) === 1,
      'with no session only the session panel is shown');
    check(await page.evaluate(() => [...document.querySelectorAll('main > section')].every((s) =>
      (s.querySelector('p.about') || { textContent: '' }).textContent.trim().length > 40)),
    'every panel says in a few lines what it shows');

    // defaults: a session created with every option empty has the configuration the page showed
    const shown = await page.evaluate(() => Object.fromEntries(['new-clusters', 'new-rows', 'new-retain', 'new-sigma-z2']
      .map((id) => [id, Number(document.getElementById(id).placeholder)])));
    await page.click('#new-session');
    await page.waitForFunction(() => document.querySelector('#session').value.length === 32);
    const plain = (await api(d, 'GET', '/v1/sessions/' + await shownId(page))).body;
    const plainId = plain.id;
    check(plain.config.clusters === shown['new-clusters'] && plain.config.rows === shown['new-rows'] &&
      plain.config.retain_max === shown['new-retain'] && Math.abs(plain.config.sigma_z2 - shown['new-sigma-z2']) < 1e-9,
    `the defaults shown are the server's (H=${shown['new-clusters']}, K=${shown['new-rows']}, ` +
      `codes kept ${shown['new-retain']}, σz²=${shown['new-sigma-z2']})`);
    await page.selectOption('#new-kind', 'gaussian');
    const gshown = await page.evaluate(() => [document.getElementById('new-rows').placeholder,
      document.getElementById('new-sigma-z2').placeholder, document.getElementById('new-clusters').disabled]);
    check(gshown[0] === '32' && gshown[1] === '1' && gshown[2], `gaussian: defaults K=32, σz²=1, no clusters (${gshown})`);

    // options at creation: kind, clusters, rows, codes kept, observation noise
    await page.selectOption('#new-kind', 'mixture');
    await page.fill('#new-clusters', '5');
    await page.fill('#new-rows', '4');
    await page.fill('#new-retain', '200');
    await page.fill('#new-sigma-z2', '0.5');
    const beforeId = await shownId(page);
    await page.click('#new-session');
    await page.waitForFunction((b) => document.querySelector('#session').value !== b, beforeId);
    const keepId = await shownId(page);
    const keep = (await api(d, 'GET', '/v1/sessions/' + keepId)).body;
    check(keep.kind === 'mixture' && keep.config.clusters === 5 && keep.config.rows === 4 &&
      keep.config.retain_max === 200 && keep.config.sigma_z2 === 0.5 && keep.model === 'fashion-mnist-mixture-v2',
    `the options at creation reach the server (${JSON.stringify(keep.config)})`);
    check(await page.evaluate(() => location.hash) === '#session=' + keepId, 'the address holds the chosen session');

    // write the episode into it: the clusters' pictures
    await page.selectOption('#shipped-count', '32');
    await page.click('#use-shipped');
    await page.waitForFunction(() => document.querySelectorAll('#episode img').length === 32);
    await page.click('#write');
    await page.waitForFunction(() => document.querySelectorAll('#clusters img.mean').length === 5, null, { timeout: 20000 });
    const pics = await page.evaluate(async () => {
      const means = [...document.querySelectorAll('#clusters img.mean')];
      const samples = [...document.querySelectorAll('#clusters img.sample')];
      await Promise.all([...means, ...samples].map((i) => i.decode()));
      const lit = (img) => {
        const c = document.createElement('canvas');
        c.width = img.naturalWidth; c.height = img.naturalHeight;
        const g = c.getContext('2d');
        g.drawImage(img, 0, 0);
        const px = g.getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 0; i < px.length; i += 4) if (px[i] > 40) n++;
        return n;
      };
      return { means: means.map((i) => ({ src: i.src, w: i.naturalWidth, h: i.naturalHeight, lit: lit(i),
        cluster: Number(i.closest('figure').dataset.cluster) })),
      samples: samples.length, samplesSized: samples.every((i) => i.naturalWidth === 28 && i.naturalHeight === 28) };
    });
    check(pics.means.every((m) => m.src.startsWith('data:image/png;base64,') && m.src.length > 200 && m.w === 28 && m.h === 28),
      'each cluster shows the image of its mean code (a 28×28 PNG)');
    check(pics.means.some((m) => m.lit > 50), `the cluster pictures are not blank (${pics.means.map((m) => m.lit)} lit pixels)`);
    check(new Set(pics.means.map((m) => m.src)).size > 1, 'clusters that hold frames show different pictures');
    check(pics.samples === 20 && pics.samplesSized, `each cluster shows 4 of its samples (${pics.samples} 28×28 images)`);
    const cl = (await api(d, 'GET', `/v1/sessions/${keepId}/clusters`)).body;
    check(pics.means.every((m) => m.src === 'data:image/png;base64,' + cl.observations[m.cluster]),
      'the pictures are the server\'s decodes of the cluster means (GET .../clusters)');
    await page.locator('#memory-panel').screenshot({ path: path.join(OUT, 'clusters.png') });

    // resize on kept codes
    const writeElbo = (await api(d, 'GET', '/v1/sessions/' + keepId)).body.last_elbo;
    await page.fill('#resize-clusters', '3');
    await page.click('#resize');
    await page.waitForFunction(() => /H=3/.test(document.querySelector('#resize-info').textContent));
    const keptInfo = await page.evaluate(() => [document.querySelector('#resize-info').dataset.codes,
      document.querySelector('#resize-info').textContent]);
    check(keptInfo[0] === 'kept' && /32 codes this session kept/.test(keptInfo[1]),
      'a resize of a session that keeps codes says it refit on the written codes');
    check(keptInfo[1].includes(writeElbo.toFixed(3)), 'and shows the write\'s own ELBO beside the resize\'s');

    // a read of episode image 6 beside the model alone, then forget it: this session keeps its
    // codes, so the forget is exact and removes the code written for that very image
    await page.click('#episode img:nth-child(6)');
    await page.fill('#read-iterations', '2');
    let from = log.length;
    await page.click('#read');
    const aloneKeep = await checkReadPair(page, d, log, from, keepId, 2, 'a read on a session that keeps codes');
    const pre = (await api(d, 'GET', '/v1/sessions/' + keepId)).body;
    from = log.length;
    await page.click('#forget');
    await page.waitForFunction(() => /Forgot episode image 6/.test(document.querySelector('#forget-info').textContent));
    const fres = await (await log.slice(from).find((e) => e.path === `/v1/sessions/${keepId}/forget`).req.response()).json();
    const post = (await api(d, 'GET', '/v1/sessions/' + keepId)).body;
    check(fres.exact === true && fres.removed.length === 1 && fres.removed[0].item === 5 && fres.removed[0].distance < 1e-6 &&
      post.retained_codes === pre.retained_codes - 1 && post.frames === pre.frames - 1 && post.version === pre.version + 1,
    `forget on a session that keeps codes: exact, the code written for image 6 removed (item ${fres.removed[0].item}, ` +
      `distance ${fres.removed[0].distance}), kept codes ${pre.retained_codes} -> ${post.retained_codes}`);
    const finfo = await page.evaluate(() => [document.querySelector('#forget-info').textContent, document.querySelector('#forget-info').dataset.exact]);
    check(finfo[1] === 'true' && /Exact/.test(finfo[0]) && finfo[0].includes('kept code no. 5') &&
      finfo[0].includes(`kept codes ${pre.retained_codes} → ${post.retained_codes}`), 'the page says the forget was exact and which code went');
    await page.locator('#recall-panel').screenshot({ path: path.join(OUT, 'forget.png') });

    // another session of another configuration: the model-alone session goes; a session of the
    // same configuration as the one chosen reuses it
    await page.selectOption('#session', plainId);
    await page.waitForFunction((id) => document.querySelector('#session-info').textContent.includes(id), plainId);
    check(await gone(d, aloneKeep) && await page.evaluate(() => window.vbmemPage.alone.id) === null,
      'choosing a session of another configuration deletes the model-alone session');
    await page.click('#episode img:nth-child(2)');
    from = log.length;
    await page.click('#read');
    const alonePlain = await checkReadPair(page, d, log, from, plainId, 2, 'a read on a session of the default configuration');
    const twin = (await api(d, 'POST', '/v1/sessions', { model: plain.model, memory: plain.config })).body;
    await page.click('#refresh-session');
    await page.waitForFunction((id) => [...document.querySelectorAll('#session option')].some((o) => o.value === id), twin.id);
    await page.selectOption('#session', twin.id);
    await page.waitForFunction((id) => document.querySelector('#session-info').textContent.includes(id), twin.id);
    from = log.length;
    await page.click('#read');
    check(await checkReadPair(page, d, log, from, twin.id, 2, 'a read on another session of that configuration') === alonePlain,
      'a session of the same configuration reuses the model-alone session');
    const helpers = (await serverSessions(d)).filter((x) => x.frames === 0 && x.version === 1 && x.ttl_seconds > 0);
    check(helpers.length === 1 && helpers[0].id === alonePlain, `exactly one model-alone session on the server (${helpers.length})`);
    // its idle lifetime ran out (deleted here through the API): the next read makes it again
    await api(d, 'DELETE', '/v1/sessions/' + alonePlain);
    w.expecting = true; // the read on the deleted session is a 404
    from = log.length;
    await page.click('#read');
    await page.waitForSelector('#read-result[data-done="1"]', { timeout: 20000 });
    const remade = await checkReadPair(page, d, log.slice(from).filter((e) => !e.path.endsWith(`${alonePlain}/reads`)), 0,
      twin.id, 2, 'a read after the model-alone session expired');
    w.expecting = false;
    check(remade !== alonePlain && log.slice(from).some((e) => e.path === `/v1/sessions/${alonePlain}/reads`) &&
      (await page.isHidden('#error')), 'an expired model-alone session is made again, the read shown without an error');
    await page.selectOption('#session', keepId);
    await page.waitForFunction((id) => document.querySelector('#session-info').textContent.includes(id), keepId);
    await api(d, 'DELETE', '/v1/sessions/' + twin.id);
    check(await gone(d, remade), 'back on the session that keeps codes, that model-alone session is deleted too');
    await page.click('#episode img:nth-child(3)');
    await page.click('#read');
    await page.waitForSelector('#read-result[data-done="1"]', { timeout: 20000 });
    const beforeReload = await page.evaluate(() => window.vbmemPage.alone.id);

    // reload: the address brings the session back
    await page.reload();
    await page.waitForSelector('body[data-ready="1"]');
    check(await shownId(page) === keepId && (await page.textContent('#session-info')).includes(keepId),
      'a reload returns to the session in the address');
    check(beforeReload && await gone(d, beforeReload), 'a reload deletes the page\'s model-alone session');

    // latent and temporal sessions made elsewhere are listed; a shared link opens one
    const lat = (await api(d, 'POST', '/v1/sessions', { code_size: 6, memory: { kind: 'mixture', clusters: 3, rows: 2 } })).body;
    const codes = Array.from({ length: 24 }, (_, t) => Array.from({ length: 6 }, (_, c) => ((t % 3) - 1) * 3 + 0.3 * Math.sin(7 * t + c)));
    check((await api(d, 'POST', `/v1/sessions/${lat.id}/episodes`, { codes: { mu: codes }, iterations: 10 })).status === 200, 'a latent session written through the API');
    const tlat = (await api(d, 'POST', '/v1/sessions', { code_size: 4, memory: { kind: 'temporal' } })).body;
    await page.click('#refresh-session');
    await page.waitForFunction((ids) => ids.every((id) => [...document.querySelectorAll('#session option')].some((o) => o.value === id)),
      [lat.id, tlat.id]);
    const groups = await page.evaluate(() => [...document.querySelectorAll('#session optgroup')].map((g) => g.label));
    check(groups.includes('latent (codes)') && groups.includes('temporal, latent (codes)') && groups.includes('images of fashion-mnist-mixture-v2'),
      `the session list shows image, latent and temporal sessions, by kind (${groups.join(' | ')})`);
    const shared = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
    const w2 = watch(shared);
    await shared.goto(`${d.url}/#session=${lat.id}`);
    await shared.waitForSelector('body[data-ready="1"]');
    await shared.waitForFunction(() => document.querySelectorAll('#clusters canvas.code').length === 3);
    check(await shownId(shared) === lat.id && await shared.evaluate(() => document.body.dataset.mode) === 'latent',
      'a shared link opens its latent session');
    check(await shared.evaluate(() => document.querySelector('#episode-panel').hidden && document.querySelector('#recall-panel').hidden &&
      !document.querySelector('#memory-panel').hidden), 'a latent session shows its memory, not the image panels');
    check(/latent/.test(await shared.textContent('#session-info')), 'and says it is latent');
    await shared.screenshot({ path: path.join(OUT, 'page-latent.png'), fullPage: true });
    await shared.goto(`${d.url}/#session=${tlat.id}`);
    await shared.waitForFunction((id) => document.querySelector('#session').value === id && /temporal/.test(document.querySelector('#session-info').textContent), tlat.id);
    check(await shared.evaluate(() => !document.querySelector('#sequence-latent').hidden && document.querySelector('#memory-panel').hidden),
      'a latent temporal session is shown with its kind');
    check(w2.errors.length === 0, `no console or page errors on shared links${w2.errors.length ? ': ' + w2.errors.join(' | ') : ''}`);
    await shared.close();

    // export, import, delete
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-session')]);
    const file = path.join(tmp, download.suggestedFilename());
    await download.saveAs(file);
    const exported = JSON.parse(fs.readFileSync(file, 'utf8'));
    const onServer = (await api(d, 'GET', `/v1/sessions/${keepId}/memory`)).body;
    check(JSON.stringify(exported) === JSON.stringify(onServer), `Export downloads the session's memory (${download.suggestedFilename()})`);
    await page.setInputFiles('#import-file', file);
    await page.waitForFunction((k) => { const v = document.querySelector('#session').value; return v.length === 32 && v !== k; }, keepId);
    const importedId = await shownId(page);
    const imported = (await api(d, 'GET', `/v1/sessions/${importedId}/memory`)).body;
    check(JSON.stringify(imported) === JSON.stringify(onServer), 'Import makes a new session holding the exported memory, bit for bit');
    check((await api(d, 'GET', `/v1/sessions/${importedId}`)).body.model === 'fashion-mnist-mixture-v2', 'the imported session is on the model');
    check(await page.evaluate(() => location.hash) === '#session=' + importedId, 'the address follows the imported session');
    page.once('dialog', (dl) => dl.dismiss());
    await page.click('#delete-session');
    await page.waitForTimeout(300);
    check((await api(d, 'GET', '/v1/sessions/' + importedId)).status === 200, 'Delete asks first: dismissed, the session stays');
    page.once('dialog', (dl) => dl.accept());
    await page.click('#delete-session');
    await page.waitForFunction(() => document.querySelector('#session').value === '' && document.body.dataset.mode === 'none');
    check((await api(d, 'GET', '/v1/sessions/' + importedId)).status === 404 && !(await optionIds(page)).includes(importedId),
      'Delete removes the session from the server and the list');
    check(await page.evaluate(() => location.hash) === '', 'and from the address');

    // a session that keeps no codes: the resize says its ELBOs are on drawn codes
    await page.selectOption('#new-kind', 'mixture');
    for (const id of ['#new-clusters', '#new-rows', '#new-retain', '#new-sigma-z2']) await page.fill(id, '');
    await page.click('#new-session');
    await page.waitForFunction(() => document.querySelector('#session').value.length === 32);
    await page.selectOption('#shipped-count', '32'); // (the reload emptied the episode)
    await page.click('#use-shipped');
    await page.waitForFunction(() => document.querySelectorAll('#episode img').length === 32);
    await page.click('#write');
    await page.waitForFunction(() => document.querySelectorAll('#clusters img.mean').length === 10, null, { timeout: 20000 });
    const perFrame = await page.evaluate(() => [...document.querySelectorAll('#elbo td')].find((t) => t.textContent === 'ELBO per frame').nextSibling.textContent);
    await page.fill('#resize-clusters', '4');
    await page.click('#resize');
    await page.waitForFunction(() => /H=4/.test(document.querySelector('#resize-info').textContent));
    const drawn = await page.evaluate(() => [document.querySelector('#resize-info').dataset.codes, document.querySelector('#resize-info').textContent]);
    check(drawn[0] === 'drawn' && /drawn from the memory itself/.test(drawn[1]) && /not the codes you wrote/.test(drawn[1]),
      'a resize of a session that keeps no codes says its ELBOs are on codes drawn from the memory');
    check(drawn[1].includes(`on the codes you wrote: ${perFrame}`), `and shows the write's own ELBO per frame (${perFrame}) beside them`);
    check(!(await page.locator('#offer-keep').isHidden()), 'and offers a session that keeps codes');
    await page.click('#offer-keep');
    check(await page.inputValue('#new-retain') !== '' && Number(await page.inputValue('#new-retain')) >= 32 &&
      await page.inputValue('#new-clusters') === '4', 'the offer fills "New session" with codes kept');

    // a session on the second bundled model (Omniglot): the ready episode follows the model
    await page.selectOption('#model', 'omniglot-mixture');
    for (const id of ['#new-clusters', '#new-rows', '#new-retain', '#new-sigma-z2']) await page.fill(id, '');
    const before0 = await shownId(page);
    await page.click('#new-session');
    await page.waitForFunction((b) => { const v = document.querySelector('#session').value; return v.length === 32 && v !== b; }, before0);
    const omniOffered = await page.waitForFunction(() => document.querySelector('#use-shipped').textContent === 'Omniglot test characters',
      null, { timeout: 10000 }).then(() => true, () => false);
    check(omniOffered && /Brenden Lake/.test(await page.textContent('#shipped-credit')),
      `a session on the Omniglot model offers the Omniglot episode ("${await page.textContent('#use-shipped')}")`);
    await page.selectOption('#shipped-count', '16');
    await page.click('#use-shipped');
    await page.waitForFunction(() => document.querySelectorAll('#episode img').length === 16);
    check(/^Angelic, character01$/.test(await page.getAttribute('#episode img', 'title') || ''),
      'its images are named by alphabet and character');
    await page.click('#write');
    await page.waitForFunction(() => document.querySelectorAll('#clusters img.mean').length > 0, null, { timeout: 20000 });
    const os = (await api(d, 'GET', '/v1/sessions/' + await shownId(page))).body;
    check(os.model === 'omniglot-mixture' && os.frames === 16, `the Omniglot episode written to a session on that model (${os.model}, ${os.frames} frames)`);

    // a latent session from the page: no model, its code size
    await page.selectOption('#model', '');
    check(await page.locator('#new-code-size').isVisible(), 'a latent session asks for its code size');
    await page.fill('#new-code-size', '12');
    await page.selectOption('#new-kind', 'gaussian');
    await page.fill('#new-rows', '5');
    await page.fill('#new-retain', '');
    await page.fill('#new-sigma-z2', '');
    const before1 = await shownId(page);
    await page.click('#new-session');
    await page.waitForFunction((b) => document.body.dataset.mode === 'latent' && document.querySelector('#session').value !== b, before1);
    const ls = (await api(d, 'GET', '/v1/sessions/' + await shownId(page))).body;
    check(ls.model === null && ls.code_size === 12 && ls.kind === 'gaussian' && ls.rows === 5,
      `a latent session created from the page (C=${ls.code_size}, ${ls.kind}, K=${ls.rows})`);
    await page.selectOption('#model', 'fashion-mnist-mixture-v2');

    // a temporal session on the model: a sequence, the identities over time, a continuation
    await page.selectOption('#new-kind', 'temporal');
    check(await page.evaluate(() => document.querySelector('.for-memory').hidden && !document.querySelector('.for-temporal').hidden),
      'a temporal session is created with its own options (identities, attributes)');
    await page.fill('#new-components', '3');
    const before2 = await shownId(page);
    await page.click('#new-session');
    await page.waitForFunction((b) => { const v = document.querySelector('#session').value; return v.length === 32 && v !== b; }, before2);
    const tid = await shownId(page);
    const ts = (await api(d, 'GET', '/v1/sessions/' + tid)).body;
    check(ts.kind === 'temporal' && ts.components === 3 && ts.model === 'fashion-mnist-mixture-v2', 'a temporal session on the model, P = 3');
    await page.waitForFunction(() => document.body.dataset.mode === 'temporal-image');
    check(await page.textContent('#use-shipped') === 'Fashion-MNIST test images', 'a session on the Fashion-MNIST model offers its episode again');
    await page.selectOption('#shipped-count', '32'); // (the Omniglot session above left 16 of its own drawings)
    await page.click('#use-shipped');
    await page.waitForFunction(() => document.querySelectorAll('#episode img').length === 32);
    check(await page.evaluate(() => !document.querySelector('#sequence-panel').hidden && document.querySelector('#samples-panel').hidden &&
      !document.querySelector('#episode-panel').hidden), 'a temporal session shows the episode and the sequence panels');
    await page.click('#seq-write');
    await page.waitForFunction(() => /free energy/.test(document.querySelector('#seq-write-info').textContent));
    check((await api(d, 'GET', '/v1/sessions/' + tid)).body.frames === 32 && await page.locator('#seq-trace').isVisible(),
      'the episode is written as one sequence of 32 frames, with its free-energy trace');
    await page.click('#seq-infer');
    await page.waitForFunction(() => document.querySelectorAll('#identities .cell').length === 96);
    const qs = await page.evaluate(() => [...document.querySelectorAll('#identities .cell')].map((c) => Number(c.dataset.q)));
    check(qs.every((v) => v >= 0 && v <= 1) && new Set(qs.map((v) => v.toFixed(2))).size > 1,
      'the identities over time: 32 frames × 3 identities, each a probability');
    check(await page.locator('#identities img.frame').count() === 32, 'above them, the 32 frames');
    await page.fill('#seq-prefix', '4');
    await page.fill('#seq-steps', '5');
    await page.click('#seq-continue');
    await page.waitForFunction(() => document.querySelectorAll('#continuation figure.predicted img').length === 5);
    const cont = await page.evaluate(() => ({ given: document.querySelectorAll('#continuation figure.given').length,
      ok: [...document.querySelectorAll('#continuation figure.predicted img')].every((i) => i.src.startsWith('data:image/png;base64,') && i.src.length > 200) }));
    check(cont.given === 4 && cont.ok, 'a prefix of 4 frames continued by 5 decoded frames');
    await page.locator('#sequence-panel').screenshot({ path: path.join(OUT, 'sequences.png') });
    await page.screenshot({ path: path.join(OUT, 'page-temporal.png'), fullPage: true });

    // temporal export and import
    const [dl2] = await Promise.all([page.waitForEvent('download'), page.click('#export-session')]);
    const file2 = path.join(tmp, dl2.suggestedFilename());
    await dl2.saveAs(file2);
    await page.setInputFiles('#import-file', file2);
    await page.waitForFunction((k) => { const v = document.querySelector('#session').value; return v.length === 32 && v !== k; }, tid);
    const tImported = await shownId(page);
    const a = (await api(d, 'GET', `/v1/sessions/${tid}/memory`)).body, b = (await api(d, 'GET', `/v1/sessions/${tImported}/memory`)).body;
    check(a.export === b.export && b.kind === 'temporal', 'a temporal session round-trips through Export and Import');

    // an address edited by hand (or a link followed in this tab) chooses its session
    await page.evaluate((id) => { location.hash = 'session=' + id; }, keepId);
    await page.waitForFunction((id) => document.querySelector('#session').value === id && document.body.dataset.mode === 'image', keepId);
    check(true, 'a new address (hashchange) chooses its session');

    check(w.errors.length === 0, `no console or page errors${w.errors.length ? ': ' + w.errors.join(' | ') : ''}`);
    await page.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
    const code = await stopDaemon(d);
    check(code === 0, `vbmemd exited with 0 on SIGTERM (${code})`);
  }
}

async function keyFlow(browser) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vbmem-browser-'));
  const keyFile = path.join(dir, 'keys');
  fs.writeFileSync(keyFile, 'browser-test-key-0123456789\n', { mode: 0o600 });
  const d = await startDaemon(BIN, ['--api-key-file', keyFile]);
  try {
    const page = await browser.newPage();
    const w = watch(page);
    w.expecting = true; // the first GET /v1/models is a 401
    await page.goto(d.url + '/');
    await page.waitForSelector('#key-panel:not([hidden])');
    check(/401/.test(await page.textContent('#error-status')), 'without a key the page shows the 401 and asks for one');
    w.expecting = false;
    await page.fill('#api-key', 'browser-test-key-0123456789');
    await page.click('#api-key-save');
    await page.waitForSelector('body[data-ready="1"]');
    check(await page.evaluate(() => sessionStorage.getItem('vbmem.apiKey')) === 'browser-test-key-0123456789',
      'the key is kept in sessionStorage (this tab only)');
    check(await page.evaluate(() => localStorage.length) === 0, 'nothing is kept in localStorage');
    await page.click('#new-session');
    await page.waitForFunction(() => document.querySelector('#session').value.length === 32);
    check(true, 'with the key a session is created');
    check(w.errors.length === 0, `no console or page errors with API keys${w.errors.length ? ': ' + w.errors.join(' | ') : ''}`);
    await page.close();
  } finally {
    await stopDaemon(d);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const t0 = Date.now();
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
try {
  console.log('== the page, end to end ==');
  await mainFlow(browser);
  console.log('== sessions of every kind, clusters, the address, export / import / delete ==');
  await sessionsFlow(browser);
  console.log('== the page with API keys ==');
  await keyFlow(browser);
} catch (e) {
  console.log(`   FAIL ${e.stack || e}`);
  failures++;
} finally {
  await browser.close();
}
console.log(`browser test: ${failures ? failures + ' failure(s)' : 'every check passed'} in ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${OUT}`);
process.exit(failures ? 1 : 0);
