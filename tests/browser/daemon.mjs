// daemon.mjs -- owns the browser tests' vbmemd processes: a free loopback port, a daemon started
// on it (answering /healthz) and stopped with SIGTERM. Shared by test_page.mjs and test_cors.mjs.
import { spawn } from 'node:child_process';
import net from 'node:net';

// A loopback port free at the time of asking.
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

// Starts BIN on a free port with `extra` options; resolves to { proc, url } once /healthz answers.
// Rejects when the daemon exits first or does not answer within 100 polls 0.1 s apart (it is
// then killed).
export async function startDaemon(BIN, extra = []) {
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

// Stops a daemon of startDaemon with SIGTERM; resolves to its exit code.
export function stopDaemon(d) {
  return new Promise((resolve) => {
    if (d.proc.exitCode !== null) return resolve(d.proc.exitCode);
    d.proc.on('exit', (code) => resolve(code));
    d.proc.kill('SIGTERM');
  });
}
