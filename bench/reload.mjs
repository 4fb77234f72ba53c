// Reload benchmark: `receiver serve` under a steady load of signed deliveries, first without
// reloads, then while it reloads its configuration (SIGHUP) every half second.
//
//   npm run build && node bench/reload.mjs [--rate 500] [--seconds 10] [--reloads 20]
//
// serve runs as shipped (drain on, a route with a no-op module effect), on 127.0.0.1 with a
// SQLite database in a temp directory. The load is open-loop: every 10 ms it starts
// rate/100 deliveries (1.5 KB signed bodies, each unique) on keep-alive connections, whatever
// the previous ones are doing, for --seconds without reloads and then --seconds with
// --reloads SIGHUPs spread evenly over them. Each reload changes something real: it adds or
// removes a second route and rotates a `file:` secret of another source.
//
// Prints the rate reached, then per phase: deliveries sent, refused (connection errors),
// failed (any answer but 202), and p50/p99/max latency; the reloads applied and failed
// (from serve's `config reloaded` / `config reload failed` lines; SIGHUPs that arrive while a
// reload runs make one more reload after it, so there may be fewer), the p99 ratio (reloads
// against none), and lost deliveries: 202s whose event is not in the database afterwards.
// Bounded: 2 s warm-up plus 2 x --seconds of load plus start and stop, under a minute with
// the defaults.
import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    rate: { type: 'string', default: '500' },
    seconds: { type: 'string', default: '10' },
    reloads: { type: 'string', default: '20' },
  },
});
const RATE = Number(args.rate);
const SECONDS = Number(args.seconds);
const RELOADS = Number(args.reloads);
const SECRET = 'bench-reload-secret-0b1f';
const BIN = new URL('../bin/receiver.js', import.meta.url).pathname;

const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-reload-'));
const moduleFile = join(dir, 'noop.mjs');
writeFileSync(moduleFile, 'export default async function () {}\n');
const secretFile = join(dir, 'other.secret');
const configFile = join(dir, 'receiver.config.json');
const route = (name) => ({ name, source: 'shop', key: '{id}', effect: { module: moduleFile } });
function writeConfig(k) {
  writeFileSync(secretFile, `other-secret-${k}-${randomBytes(8).toString('hex')}\n`, { mode: 0o600 });
  writeFileSync(
    configFile,
    JSON.stringify({
      database: join(dir, 'receiver.db'),
      log: { level: 'info', format: 'json' },
      sources: { shop: { provider: 'github', secret: SECRET }, other: { provider: 'github', secret: `file:${secretFile}` } },
      routes: k % 2 === 0 ? [route('main')] : [route('main'), route('extra')],
    }),
  );
}
writeConfig(0);

const serve = spawn(process.execPath, [BIN, 'serve', '-c', configFile, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
let stderr = '';
let reloaded = 0;
let reloadFailed = 0;
const port = await new Promise((resolve, reject) => {
  serve.stderr.on('data', (d) => {
    const text = d.toString();
    stderr = (stderr + text).slice(-200_000);
    reloaded += text.split('"msg":"config reloaded').length - 1;
    reloadFailed += text.split('"msg":"config reload failed"').length - 1;
    const m = /"port":(\d+)[^\n]*"msg":"listening"/.exec(stderr);
    if (m !== null) resolve(Number(m[1]));
  });
  serve.on('exit', (code) => reject(new Error(`serve exited (${code}):\n${stderr}`)));
});

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
const padding = randomBytes(700).toString('hex');
let n = 0;
function deliver() {
  const body = Buffer.from(JSON.stringify({ ref: 'refs/heads/main', n: n++, padding }));
  const guid = randomUUID();
  const headers = {
    'content-type': 'application/json',
    'content-length': body.length,
    'x-hub-signature-256': `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`,
    'x-github-delivery': guid,
    'x-github-event': 'push',
  };
  const started = performance.now();
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/webhooks/shop', method: 'POST', headers, agent }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode, ms: performance.now() - started, guid }));
    });
    req.on('error', () => resolve({ status: -1, ms: performance.now() - started, guid }));
    req.end(body);
  });
}

/** Open-loop load for `seconds`: rate/100 deliveries every 10 ms; `during` runs alongside. */
async function phase(seconds, during = async () => {}) {
  const results = [];
  const inflight = [];
  const perTick = RATE / 100;
  let owed = 0;
  const until = performance.now() + seconds * 1000;
  const side = during();
  for (let next = performance.now(); next < until; next += 10) {
    owed += perTick;
    for (; owed >= 1; owed--) inflight.push(deliver().then((r) => results.push(r)));
    const wait = next + 10 - performance.now();
    if (wait > 0) await sleep(wait);
  }
  await side;
  await Promise.all(inflight);
  return results;
}

function summary(name, results, seconds) {
  const ms = results.map((r) => r.ms).sort((a, b) => a - b);
  const q = (p) => (ms.length === 0 ? NaN : ms[Math.min(ms.length - 1, Math.floor(p * ms.length))]);
  const refused = results.filter((r) => r.status === -1).length;
  const failed = results.filter((r) => r.status !== 202 && r.status !== -1).length;
  console.log(
    `${name.padEnd(16)} sent ${String(results.length).padStart(6)} (${(results.length / seconds).toFixed(0)}/s)  refused ${refused}  failed ${failed}  p50 ${q(0.5).toFixed(1)} ms  p99 ${q(0.99).toFixed(1)} ms  max ${ms.at(-1)?.toFixed(1)} ms`,
  );
  return q(0.99);
}

try {
  await phase(2);
  const steady = await phase(SECONDS);
  const reloading = await phase(SECONDS, async () => {
    for (let k = 1; k <= RELOADS; k++) {
      await sleep((SECONDS * 1000) / (RELOADS + 1));
      writeConfig(k);
      serve.kill('SIGHUP');
    }
  });
  // SIGHUPs that arrive during a reload make one more after it: wait for the outcome lines to stop.
  for (let seen = -1, i = 0; i < 30 && seen !== reloaded + reloadFailed; i++) {
    seen = reloaded + reloadFailed;
    await sleep(500);
  }

  console.log(`receiver serve, ${RATE} deliveries/s asked, ${SECONDS} s per phase, ${RELOADS} reloads in the second (node ${process.version})`);
  const p99Steady = summary('no reloads', steady, SECONDS);
  const p99Reloading = summary('during reloads', reloading, SECONDS);
  console.log(
    `${RELOADS} SIGHUPs: ${reloaded} reloads applied, ${reloadFailed} failed (signals during a reload make one more after it); p99 during reloads / without: ${(p99Reloading / p99Steady).toFixed(2)}`,
  );

  serve.kill('SIGTERM');
  await new Promise((r) => serve.on('exit', r));
  const db = new Database(join(dir, 'receiver.db'), { readonly: true });
  const stored = new Set(db.prepare('SELECT delivery_id AS d FROM events').pluck().all());
  db.close();
  const acked = [...steady, ...reloading].filter((r) => r.status === 202);
  const lost = acked.filter((r) => !stored.has(r.guid)).length;
  console.log(`lost: ${lost} of ${acked.length} acknowledged deliveries not in the database`);
} finally {
  if (serve.exitCode === null) serve.kill('SIGKILL');
  agent.destroy();
  rmSync(dir, { recursive: true, force: true });
}
