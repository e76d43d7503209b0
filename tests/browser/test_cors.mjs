// test_cors.mjs -- vbmemd's --cors-origin from a real browser (Debian's /usr/bin/chromium,
// headless, driven by playwright-core): a page served from another loopback port, listed with
// --cors-origin, creates, reads and deletes a session through fetch() with an API key (the
// preflight for Authorization, Content-Type and If-Match passes, ETag is readable, a 401 is
// readable too); the same page from a port that is not listed is refused by the browser; and a
// daemon without --cors-origin refuses the listed page as well.
//
//   node tests/browser/test_cors.mjs [build/vbmemd]
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import { startDaemon, stopDaemon } from './daemon.mjs';

const BIN = path.resolve(process.argv[2] || process.env.VBMEMD || 'build/vbmemd');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const KEY = 'cors-page-key-0123456789';

let failures = 0;
function check(cond, what) {
  if (cond) console.log(`   ok   ${what}`);
  else { console.log(`   FAIL ${what}`); failures++; }
}


// A page server on a loopback port of its own: an empty HTML page (the test's script runs in it).
function pageServer() {
  return new Promise((resolve) => {
    const s = http.createServer((req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
      res.end('<!doctype html><title>another origin</title><p>a page on another origin</p>');
    });
    s.listen(0, '127.0.0.1', () => resolve({ server: s, origin: `http://127.0.0.1:${s.address().port}` }));
  });
}



// What the page at `origin` gets from the daemon at `api` through fetch(): a session created,
// read and deleted with the key (If-Match on the delete), and a request without the key.
async function fromPage(browser, origin, api) {
  const page = await browser.newPage();
  try {
    await page.goto(origin + '/');
    return await page.evaluate(async ({ api, key }) => {
      const out = {};
      try {
        const auth = { Authorization: 'Bearer ' + key };
        let r = await fetch(api + '/v1/sessions', {
          method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
          body: JSON.stringify({ code_size: 3, memory: { kind: 'gaussian', rows: 2 } }),
        });
        out.create = r.status;
        out.etag = r.headers.get('ETag');
        out.requestId = r.headers.get('X-Request-Id');
        const id = (await r.json()).id;
        r = await fetch(api + '/v1/sessions/' + id, { headers: auth });
        out.get = r.status;
        r = await fetch(api + '/v1/sessions/' + id, { method: 'DELETE', headers: { ...auth, 'If-Match': out.etag } });
        out.delete = r.status;
        r = await fetch(api + '/v1/sessions');
        out.anonymous = r.status;
        out.problem = (await r.json()).type;
      } catch (e) {
        out.blocked = String(e);
      }
      return out;
    }, { api, key: KEY });
  } finally {
    await page.close();
  }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vbmem-cors-'));
const keyFile = path.join(dir, 'keys');
fs.writeFileSync(keyFile, KEY + '\n', { mode: 0o600 });
const listed = await pageServer();
const unlisted = await pageServer();
const t0 = Date.now();
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
try {
  console.log(`== a page of ${listed.origin}, listed with --cors-origin ==`);
  let d = await startDaemon(BIN, ['--api-key-file', keyFile, '--cors-origin', 'http://app.example:8443',
    '--cors-origin', listed.origin]);
  try {
    const got = await fromPage(browser, listed.origin, d.url);
    check(got.blocked === undefined, `fetch() from the listed origin is not blocked (${got.blocked || 'ok'})`);
    check(got.create === 201 && got.get === 200 && got.delete === 204,
      `create, get, delete with the key: ${got.create}, ${got.get}, ${got.delete}`);
    check(got.etag === '"1"' && /^[A-Za-z0-9._:-]+$/.test(got.requestId || ''),
      `ETag and X-Request-Id are readable: ${got.etag}, ${got.requestId}`);
    check(got.anonymous === 401 && got.problem === 'urn:vbmem:problem:unauthorized',
      `a request without the key is a readable 401 (${got.anonymous}, ${got.problem})`);
    console.log(`== a page of ${unlisted.origin}, not listed ==`);
    const other = await fromPage(browser, unlisted.origin, d.url);
    check(typeof other.blocked === 'string' && other.create === undefined,
      `fetch() from an origin not listed is blocked by the browser (${other.blocked})`);
  } finally {
    check((await stopDaemon(d)) === 0, 'vbmemd exited with 0');
  }
  console.log('== a daemon without --cors-origin ==');
  d = await startDaemon(BIN, ['--api-key-file', keyFile]);
  try {
    const got = await fromPage(browser, listed.origin, d.url);
    check(typeof got.blocked === 'string', `fetch() from another origin is blocked (${got.blocked})`);
  } finally {
    check((await stopDaemon(d)) === 0, 'vbmemd exited with 0');
  }
} catch (e) {
  console.log(`   FAIL ${e.stack || e}`);
  failures++;
} finally {
  await browser.close();
  listed.server.close();
  unlisted.server.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
console.log(`CORS browser test: ${failures ? failures + ' failure(s)' : 'every check passed'} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
