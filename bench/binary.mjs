// The single executable against `node bin/receiver.js`, in the same run: start to the first
// GET /healthz 200, RSS idle and under load, and ingest throughput.
//
//   npm run build && npm run build:binary && node bench/binary.mjs [--seconds 8] [--connections 32] [--rounds 3] [--starts 15] [--node-options ...]
//
// Both run `serve` on a fresh SQLite file with the same configuration and the same Node
// options (none), one after the other, alternating which goes first in each round: on a
// shared machine whose speed drifts, the ratio of medians says more than one pair.
// Load: autocannon on 127.0.0.1 with signed 1.5 KB bodies, one in ten a duplicate.
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { cpuMs, rssMb, stop } from './proc.mjs';

/* global fetch */

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '8' },
    connections: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '3' },
    starts: { type: 'string', default: '15' },
    // NODE_OPTIONS for both, e.g. --node-options=--max-semi-space-size=2 (what the clone route's unit passes).
    'node-options': { type: 'string', default: '' },
  },
});
const ROOT = new URL('..', import.meta.url).pathname;
const BINARY = join(ROOT, `dist/receiver-${process.platform}-${process.arch}`);
if (!existsSync(BINARY)) throw new Error(`${BINARY} is missing: npm run build:binary first`);
if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('dist/ is missing: npm run build first');
const SECRET = 'bench-secret';
const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-binary-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

const ROUTES = {
  node: { file: process.execPath, args: [join(ROOT, 'bin/receiver.js')] },
  binary: { file: BINARY, args: [] },
};

let configs = 0;
/** A config with one HMAC source and no routes (ingest only), its database in a fresh directory. */
function config() {
  const d = join(dir, `c${++configs}`);
  mkdirSync(d);
  const file = join(d, 'receiver.config.json');
  const source = { provider: 'hmac-sha256', header: 'X-Signature', prefix: 'sha256=', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' };
  writeFileSync(file, JSON.stringify({ database: join(d, 'receiver.db'), host: '127.0.0.1', sources: { shop: source }, log: { level: 'warn' } }));
  return file;
}

function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Spawns serve on a known port and resolves at its first /healthz 200, with the time it took. */
async function start(route, file) {
  const port = await freePort();
  const t0 = performance.now();
  const child = spawn(route.file, [...route.args, 'serve', '-c', file, '--port', String(port)], {
    cwd: dir,
    env: { ...process.env, XDG_CACHE_HOME: join(dir, 'cache'), ...(args['node-options'] ? { NODE_OPTIONS: args['node-options'] } : {}) },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  let exited = false;
  child.once('exit', () => (exited = true));
  for (;;) {
    if (exited) throw new Error(`${route.file} exited before /healthz answered`);
    try {
      const res = await fetch(`http://127.0.0.1:${port}/healthz`);
      await res.arrayBuffer();
      if (res.status === 200) return { child, port, startMs: performance.now() - t0 };
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 2));
  }
}

const PAD = 'x'.repeat(1400);
const pool = [];
for (let i = 0; i < 200_000; i++) {
  const id = `evt_${process.pid}_${i}_${randomBytes(4).toString('hex')}`;
  const body = JSON.stringify({ id, type: 'invoice.paid', data: { object: { id: `in_${i}`, pad: PAD } } });
  pool.push({ body, sig: `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}` });
}
let cursor = 0;
let seq = 0;
function nextBody() {
  // One in ten repeats a recent delivery (same id, same bytes), as senders retry.
  if (++seq % 10 === 0 && cursor > 100) return pool[(cursor - 1 - Math.floor(Math.random() * 100)) % pool.length];
  return pool[cursor++ % pool.length];
}

function load(port, seconds) {
  return autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: Number(args.connections),
    duration: seconds,
    requests: [
      {
        method: 'POST',
        path: '/webhooks/shop',
        setupRequest: (req) => {
          const { body, sig } = nextBody();
          return { ...req, body, headers: { 'content-type': 'application/json', 'x-signature': sig } };
        },
      },
    ],
  });
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const results = { node: { start: [], idle: [], peak: [], rps: [], cpu: [], bad: 0 }, binary: { start: [], idle: [], peak: [], rps: [], cpu: [], bad: 0 } };

// Start to /healthz 200: a restart on an existing database (each route's own), alternating.
const startFiles = { node: config(), binary: config() };
for (let i = 0; i < Number(args.starts); i++) {
  for (const name of i % 2 ? ['binary', 'node'] : ['node', 'binary']) {
    const s = await start(ROUTES[name], startFiles[name]);
    results[name].start.push(s.startMs);
    await stop(s.child);
  }
}

for (let round = 0; round < Number(args.rounds); round++) {
  for (const name of round % 2 ? ['binary', 'node'] : ['node', 'binary']) {
    const s = await start(ROUTES[name], config());
    await new Promise((r) => setTimeout(r, 1000));
    results[name].idle.push(rssMb(s.child.pid));
    await load(s.port, 2); // warm-up, not counted
    let peak = 0;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMb(s.child.pid))), 100);
    const cpu0 = cpuMs(s.child.pid);
    const r = await load(s.port, Number(args.seconds));
    const cpuPerReq = ((cpuMs(s.child.pid) - cpu0) * 1000) / r.requests.total;
    clearInterval(sampler);
    results[name].cpu.push(cpuPerReq);
    results[name].peak.push(peak);
    results[name].rps.push(r.requests.average);
    results[name].bad += r.non2xx + r.errors + r.timeouts;
    console.log(
      `round ${round + 1} ${name.padEnd(6)} ${r.requests.average.toFixed(0)} req/s, ${cpuPerReq.toFixed(0)} µs CPU/request, p99 ${r.latency.p99} ms, peak RSS ${peak.toFixed(0)} MB, non-2xx/errors ${r.non2xx + r.errors + r.timeouts}`,
    );
    await stop(s.child);
  }
}

const f = (x, d = 0) => x.toFixed(d);
console.log(
  `\nbinary: ${BINARY}, ${f(statSync(BINARY).size / 1e6, 1)} MB; ${args.rounds} rounds of ${args.seconds} s at ${args.connections} connections; ${args.starts} starts each; NODE_OPTIONS=${args['node-options']}`,
);
console.log('route   start→/healthz 200 (median, min)   idle RSS   peak RSS under load   req/s (median)   CPU µs/request (median)');
for (const name of ['node', 'binary']) {
  const r = results[name];
  console.log(
    `${name.padEnd(7)} ${f(median(r.start)).padStart(6)} ms, ${f(Math.min(...r.start)).padStart(4)} ms            ${f(median(r.idle)).padStart(4)} MB    ${f(median(r.peak)).padStart(4)} MB               ${f(median(r.rps)).padStart(6)}           ${f(median(r.cpu)).padStart(5)}`,
  );
}
const ratio = median(results.binary.rps) / median(results.node.rps);
const cpuRatio = median(results.binary.cpu) / median(results.node.cpu);
console.log(
  `\nthroughput binary/node: ${f(ratio, 3)} (target ≥ 0.95); CPU per request binary/node: ${f(cpuRatio, 3)} (≤ 1.05: the same work per request, whatever the machine's load); binary start median ${f(median(results.binary.start))} ms (target < 300)`,
);
if (results.node.bad + results.binary.bad > 0) console.log(`non-2xx or errors: node ${results.node.bad}, binary ${results.binary.bad}`);
