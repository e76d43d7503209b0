// vbmem-client.js -- a small ES-module client of vbmemd's HTTP API (proto/openapi.yaml), used by the
// web page. It has the surface of clients/js (Client({url, apiKey}), models, createSession,
// getSession, write, sample, read, resize, exportMemory; VbmemError with status, title, detail,
// field); replace this file by clients/js/index.js once that client is committed.

export class VbmemError extends Error {
  constructor(status, problem) {
    const p = problem || {};
    super(`${p.title || 'HTTP ' + status}: ${p.detail || ''}`.trim());
    this.name = 'VbmemError';
    this.status = status;
    this.title = p.title || `HTTP ${status}`;
    this.detail = p.detail || '';
    this.field = p.field || null;
    this.type = p.type || null;
    this.requestId = p.request_id || null;
    this.problem = p;
  }
}

function camelToSnake(o) {
  const out = {};
  for (const [k, v] of Object.entries(o)) {
    if (v === undefined) continue;
    out[k.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase())] = v;
  }
  return out;
}

export class Client {
  constructor({ url = '', apiKey = null } = {}) {
    this.url = url.replace(/\/+$/, '');
    this.apiKey = apiKey;
  }

  async request(method, path, body) {
    const headers = {};
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (this.apiKey) headers['Authorization'] = `Bearer ${this.apiKey}`;
    const res = await fetch(this.url + path, {
      method,
      headers,
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (e) {
        data = { title: `HTTP ${res.status}`, detail: text.slice(0, 200) };
      }
    }
    if (!res.ok) throw new VbmemError(res.status, data);
    return data;
  }

  models() { return this.request('GET', '/v1/models'); }
  model(name) { return this.request('GET', `/v1/models/${encodeURIComponent(name)}`); }
  listSessions({ limit = 100, cursor } = {}) {
    const q = `?limit=${limit}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : '');
    return this.request('GET', `/v1/sessions${q}`);
  }
  createSession(opts = {}) { return this.request('POST', '/v1/sessions', camelToSnake(opts)); }
  getSession(id) { return this.request('GET', `/v1/sessions/${id}`); }
  deleteSession(id) { return this.request('DELETE', `/v1/sessions/${id}`); }
  // write(id, {observations | codes, mode, iterations, seed, ...})
  write(id, opts) { return this.request('POST', `/v1/sessions/${id}/episodes`, camelToSnake(opts)); }
  // sample(id, {count, seed, cluster, format, pixels})
  sample(id, opts = {}) { return this.request('POST', `/v1/sessions/${id}/samples`, camelToSnake(opts)); }
  // read(id, {observations | query, mode, mask, cueNoise, iterations, seed, candidates, ...})
  read(id, opts = {}) { return this.request('POST', `/v1/sessions/${id}/reads`, camelToSnake(opts)); }
  // resize(id, {clusters, rows, iterations, seed})
  resize(id, opts = {}) { return this.request('POST', `/v1/sessions/${id}/resize`, camelToSnake(opts)); }
  exportMemory(id) { return this.request('GET', `/v1/sessions/${id}/memory`); }
}
