#!/usr/bin/env node
/* global performance, fetch */
/**
 * Purge beside a running server: batch time and ingest latency.
 *
 *   npm run build && node bench/purge.mjs [--events 1000000] [--rate 50] [--seconds 10]
 *                                          [--batch-sizes 500,1000,2000,5000] [--keep]
 *
 * 1. Builds a SQLite database with --events finished (done) old events, ~1 KB body each,
 *    one attempt row each, in one bulk transaction; split into slices of different ages.
 * 2. Starts `receiver serve` from dist/ (a real server, drain on) on 127.0.0.1.
 * 3. For each batch size: one slice purged without load (the bare batch time, which is
 *    how long each batch holds the write lock); then ingest only (signed deliveries at --rate per second for
 *    --seconds), then `receiver purge --days D --batch-size B --json` as a subprocess,
 *    deleting one slice while the same ingest load runs. Prints the purge batch time
 *    (median, max, as the CLI measured it) and ingest p50/p99/max in both windows.
 * Everything runs on 127.0.0.1 and is bounded in time (load stops when its purge ends,
 * at most 180 s per slice).
 *
 * What chose the CLI's default --batch-size of 1000 (src/cli/purge.ts), on 1,000,000
 * finished events (~1 KB bodies, 2 cores shared with other work): a 1000-row batch took
 * 18-64 ms (median) alone, 5000 rows 88-141 ms; under 50 deliveries/s, ingest p99 was
 * 50-105 ms while purging at 1000 against 9-22 ms without, never a 503. 2000 and 5000 hold
 * the lock longer per batch (max 180-370 ms) and raised that p99 in some runs (126-294 ms);
 * 250 and 500 did not reliably lower it and make purge 2-4 times longer (1000: about 100 s
 * per million events). Runs varied with the machine's other load.
 */
import { spawn } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { createWriteStream, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

const REPO = new URL('..', import.meta.url).pathname;
const BIN = join(REPO, 'bin/receiver.js');
const { openSqlite } = await import(join(REPO, 'dist/store/sqlite/open.js'));

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '1000000' },
    rate: { type: 'string', default: '50' },
    seconds: { type: 'string', default: '10' },
    'batch-sizes': { type: 'string', default: '500,1000,2000,5000' },
    keep: { type: 'boolean', default: false },
  },
});
const EVENTS = Number(args.events);
const RATE = Number(args.rate);
const SECONDS = Number(args.seconds);
const SIZES = args['batch-sizes'].split(',').map(Number);
const DAY = 86_400_000;
const SECRET = 'bench-secret';

const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-purge-'));
const dbFile = join(dir, 'receiver.db');
const log = (...a) => console.error(`[${new Date().toISOString().slice(11, 19)}]`, ...a);

// --- 1. The database -------------------------------------------------------------------
// Two slices per batch size: slice 2k is purged without load, slice 2k+1 under ingest load.
const slices = 2 * SIZES.length;
const sliceAgeDays = (k) => 200 - 10 * k; // slice k: received about (200 - 10k) days ago
{
  const started = performance.now();
  const db = openSqlite(dbFile, { busyTimeoutMs: 5000 });
  db.pragma('synchronous = OFF'); // building only; the server and purge run with FULL
  const ev = db.prepare(`INSERT INTO events (id, source, delivery_id, event_type, status, received_at, headers, body, body_sha256,
      response_status, response_body, attempts, next_attempt_at, finished_at)
    VALUES (?, 'shop', ?, 'order.paid', 'done', ?, ?, ?, ?, 202, ?, 1, ?, ?)`);
  const at = db.prepare(`INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome) VALUES (?, 1, 'fulfil', ?, ?, ?, 'ok')`);
  const headers = JSON.stringify({ 'content-type': 'application/json', 'user-agent': 'Shop-Webhooks/1.0', 'x-request-id': 'x'.repeat(36) });
  const filler = 'lorem ipsum dolor sit amet '.repeat(34);
  db.transaction(() => {
    for (let i = 1; i <= EVENTS; i++) {
      const slice = (i - 1) % slices;
      const receivedAt = Date.now() - sliceAgeDays(slice) * DAY - i;
      const body = Buffer.from(JSON.stringify({ id: `old-${i}`, type: 'order.paid', data: { order: i, note: filler } }));
      ev.run(
        i,
        `old-${i}`,
        receivedAt,
        headers,
        body,
        randomBytes(32).toString('hex'),
        JSON.stringify({ status: 'accepted', id: i }),
        receivedAt,
        receivedAt + 50,
      );
      at.run(i, `fulfil:order-${i}`, receivedAt + 10, receivedAt + 50);
    }
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  log(`built ${EVENTS} done events in ${((performance.now() - started) / 1000).toFixed(1)} s; file ${(statSync(dbFile).size / 1e6).toFixed(0)} MB`);
}

// --- 2. The server ---------------------------------------------------------------------
const configFile = join(dir, 'receiver.config.json');
writeFileSync(
  configFile,
  JSON.stringify({
    database: dbFile,
    host: '127.0.0.1',
    port: 0,
    log: { level: 'warn' },
    sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: SECRET, deliveryId: '{body.id}', retryHorizonHours: 72 } },
  }),
);

function startServer() {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, 'serve', '-c', configFile, '--port', '0', '--log-level', 'info'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    let found = false;
    // The server's log (one line per delivery, with its duration) stays beside the database for --keep.
    const serverLog = createWriteStream(join(dir, 'serve.log'));
    child.stderr.on('data', (d) => {
      serverLog.write(d);
      err += d.toString();
      const m = /"port":(\d+)[^\n]*"msg":"listening"/.exec(err);
      if (!found && m) {
        found = true;
        resolve({ child, url: `http://127.0.0.1:${m[1]}/webhooks/shop` });
      }
      if (err.length > 1e6) err = err.slice(-1e5);
    });
    child.on('exit', (code) => {
      if (!found) reject(new Error(`serve exited ${code}: ${err}`));
    });
  });
}

// --- 3. Load: an open loop at RATE per second, latency of each signed delivery ------------
let seq = 0;
const runTag = randomBytes(4).toString('hex');
async function load(url, until) {
  const latencies = [];
  const statuses = new Map();
  let inFlight = 0;
  let dropped = 0;
  const pending = new Set();
  const interval = 1000 / RATE;
  let next = performance.now();
  while (!until()) {
    if (inFlight >= 256) dropped++;
    else {
      const body = JSON.stringify({ id: `new-${runTag}-${++seq}`, type: 'order.paid', data: { order: seq, note: 'x'.repeat(600) } });
      const sig = createHmac('sha256', SECRET).update(body).digest('hex');
      const t0 = performance.now();
      inFlight++;
      const p = fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-signature': sig }, body })
        .then(async (res) => {
          await res.arrayBuffer();
          latencies.push(performance.now() - t0);
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        })
        .catch(() => statuses.set('error', (statuses.get('error') ?? 0) + 1))
        .finally(() => {
          inFlight--;
          pending.delete(p);
        });
      pending.add(p);
    }
    next += interval;
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
  }
  await Promise.all(pending);
  return summarize(latencies, statuses, dropped);
}

function pct(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

function summarize(latencies, statuses, dropped) {
  const s = [...latencies].sort((a, b) => a - b);
  return { requests: s.length, p50: pct(s, 50), p99: pct(s, 99), max: s[s.length - 1] ?? NaN, statuses: Object.fromEntries(statuses), dropped };
}

function runPurge(days, batchSize) {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, [BIN, 'purge', '-c', configFile, '--days', String(days), '--batch-size', String(batchSize), '--json'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`purge exited ${code}: ${err}`));
      resolve({ ...JSON.parse(out), seconds: (performance.now() - started) / 1000 });
    });
  });
}

const f = (n) => (Number.isNaN(n) ? '-' : n.toFixed(1));
const rows = [];
const windowLoad = (url, ms) => {
  const end = performance.now() + ms;
  return load(url, () => performance.now() > end);
};
const server = await startServer();
try {
  log(`server up; warm-up`);
  await windowLoad(server.url, 3000);

  // Each purge is paired with an ingest-only window just before it, so drift in the
  // machine's load (other processes, page cache) shows in both halves of the pair.
  for (let k = 0; k < SIZES.length; k++) {
    const size = SIZES[k];
    log(`purge slice ${2 * k} with --batch-size ${size}, no load: the bare batch time`);
    const bare = await runPurge(sliceAgeDays(2 * k) - 5, size);
    rows.push({
      phase: 'purge only',
      batchSize: size,
      purged: bare.purged,
      batches: bare.batches,
      batchMedian: bare.batchMs.median,
      batchMax: bare.batchMs.max,
      purgeSeconds: bare.seconds,
      requests: 0,
      p50: NaN,
      p99: NaN,
      max: NaN,
      statuses: {},
      dropped: 0,
    });
    log(`ingest only at ${RATE}/s for ${SECONDS} s`);
    const base = await windowLoad(server.url, SECONDS * 1000);
    rows.push({ phase: 'ingest only', batchSize: '-', purged: '-', batches: '-', batchMedian: NaN, batchMax: NaN, purgeSeconds: NaN, ...base });
    log(`purge slice ${2 * k + 1} with --batch-size ${size} under ingest at ${RATE}/s`);
    let done = false;
    const loadDone = load(server.url, () => done);
    const p = await runPurge(sliceAgeDays(2 * k + 1) - 5, size).finally(() => (done = true));
    const l = await loadDone;
    rows.push({
      phase: 'purge + ingest',
      batchSize: size,
      purged: p.purged,
      batches: p.batches,
      batchMedian: p.batchMs.median,
      batchMax: p.batchMs.max,
      purgeSeconds: p.seconds,
      ...l,
      baseP99: base.p99,
      bare,
    });
  }
} finally {
  server.child.kill('SIGTERM');
  await new Promise((r) => server.child.on('exit', r));
  if (!args.keep) rmSync(dir, { recursive: true, force: true });
  else log(`kept ${dir}`);
}

console.log(`\nreceiver purge bench: ${EVENTS} done events (~1 KB body, 1 attempt each), ingest at ${RATE}/s, node ${process.version}\n`);
console.log('phase           batch  purged  batches  batch median ms  batch max ms  purge s  requests  ingest p50 ms  ingest p99 ms  ingest max ms  statuses');
for (const r of rows) {
  console.log(
    [
      r.phase.padEnd(15),
      String(r.batchSize).padStart(5),
      String(r.purged).padStart(7),
      String(r.batches).padStart(8),
      f(r.batchMedian).padStart(16),
      f(r.batchMax).padStart(13),
      f(r.purgeSeconds).padStart(8),
      String(r.requests).padStart(9),
      f(r.p50).padStart(14),
      f(r.p99).padStart(14),
      f(r.max).padStart(14),
      ` ${JSON.stringify(r.statuses)}${r.dropped ? ` dropped ${r.dropped}` : ''}`,
    ].join(' '),
  );
}
console.log('');
for (const r of rows.filter((x) => x.baseP99 !== undefined)) {
  console.log(
    `batch ${r.batchSize}: batch median ${f(r.bare.batchMs.median)} ms, max ${f(r.bare.batchMs.max)} ms alone; ${f(r.batchMedian)} / ${f(r.batchMax)} ms under load; ingest p99 ${f(r.p99)} ms while purging vs ${f(r.baseP99)} ms just before without (x${(r.p99 / r.baseP99).toFixed(2)})`,
  );
}
