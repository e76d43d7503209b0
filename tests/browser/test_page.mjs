// test_page.mjs -- the vbmemd web page in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser download). Starts vbmemd on a free loopback port, loads GET /, checks
// the embedded assets' Content-Types, writes the shipped Fashion-MNIST episode, draws samples,
// re-rolls them, paints a mask on the cue canvas with the mouse and runs a masked read (every step
// shown, the known pixels kept), draws the usage chart and the R_h heatmap, resizes, shows a
// server error (title and detail), and, against a second daemon with API keys, asks for a key.
// Screenshots go to OUTDIR. Fails when an element is missing, a check fails, or the page logs a
// console error or a page error (outside the steps that provoke a 4xx on purpose).
//
//   node tests/browser/test_page.mjs [build/vbmemd] [build/browser]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const BIN = path.resolve(process.argv[2] || process.env.VBMEMD || 'build/vbmemd');
const OUT = path.resolve(process.argv[3] || path.join(path.dirname(BIN), 'browser'));
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
fs.mkdirSync(OUT, { recursive: true });

let failures = 0;
function check(cond, what) {
  if (cond) console.log(`   ok   ${what}`);
  else { console.log(`   FAIL ${what}`); failures++; }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

async function startDaemon(extra = []) {
  const port = await freePort();
  const proc = spawn(BIN, ['--listen', `127.0.0.1:${port}`, '--threads', '2', '--log-level', 'warn', ...extra],
    { stdio: ['ignore', 'inherit', 'inherit'] });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    if (proc.exitCode !== null) throw new Error(`vbmemd exited with ${proc.exitCode}`);
    try { if ((await fetch(url + '/healthz')).ok) return { proc, url }; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill('SIGTERM');
  throw new Error('vbmemd did not answer /healthz in 10 s');
}

function stopDaemon(d) {
  return new Promise((resolve) => {
    if (d.proc.exitCode !== null) return resolve(d.proc.exitCode);
    d.proc.on('exit', (code) => resolve(code));
    d.proc.kill('SIGTERM');
  });
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
  const d = await startDaemon();
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
    await page.click('#read');
    await page.waitForFunction(() => document.querySelector('#steps').dataset.steps === '5', null, { timeout: 15000 });
    const figs = await page.locator('#steps figure').count();
    check(figs === 6, `the read shows the cue and every step (${figs} images)`);
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

    // noise instead of a mask
    await page.click('#clear-mask');
    await page.click('#add-noise');
    await page.click('#read');
    await page.waitForFunction(() => document.querySelector('#steps').dataset.steps === '', null, { timeout: 15000 });
    await page.waitForFunction(() => document.querySelector('#steps').dataset.steps === '5', null, { timeout: 15000 });
    check(true, 'a read of a noisy cue');

    // resize: H = 4, the samples are redrawn
    const beforeResize = await page.evaluate(() => [...document.querySelectorAll('#samples img')].map((i) => i.src).join());
    await page.fill('#resize-clusters', '4');
    await page.click('#resize');
    await page.waitForFunction(() => /H=4/.test(document.querySelector('#resize-info').textContent));
    await page.waitForFunction((b) => [...document.querySelectorAll('#samples img')].map((i) => i.src).join() !== b, beforeResize);
    check(/H=4 clusters/.test(await page.textContent('#session-info')), 'resize to H = 4 shows in the session and the samples change');
    await page.screenshot({ path: path.join(OUT, 'page-after-resize.png'), fullPage: true });

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

    check(w.errors.length === 0, `no console or page errors${w.errors.length ? ': ' + w.errors.join(' | ') : ''}`);
    await page.close();
  } finally {
    const code = await stopDaemon(d);
    check(code === 0, `vbmemd exited with 0 on SIGTERM (${code})`);
  }
}

async function keyFlow(browser) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vbmem-browser-'));
  const keyFile = path.join(dir, 'keys');
  fs.writeFileSync(keyFile, 'browser-test-key-0123456789\n', { mode: 0o600 });
  const d = await startDaemon(['--api-key-file', keyFile]);
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
