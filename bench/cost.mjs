// The cost of a delivery: CPU time per delivery and memory, at a fixed offered rate well
// below saturation, so that the figures do not depend on how much of the machine the load
// generator leaves free.
//
//   npm run build && node bench/cost.mjs [--rates 500,1000] [--seconds 10] [--no-binary] [--only on,off] [--node-options ...] [--heaps]
//
// Side by side in one run, for each rate: a bare Hono server (bench/bare-server.mjs: reads
// the body, answers 202, stores nothing), `receiver serve` with its drain off, and `receiver
// serve` as a shop runs it: drain on, one route whose effect is a no-op module, logs at info
// (to a file). Then the same drain-on receiver from the single executable
// (dist/receiver-<platform>-<arch>, built by `npm run build:binary`) unless --no-binary.
//
// Deliveries are signed GitHub pushes of about 1.5 KB (x-hub-signature-256, a fresh
// x-github-delivery each), sent by autocannon at `overallRate` over 16 connections for
// --seconds after one second of warm-up at the same rate. Printed per server:
// - CPU per delivery: the server process's CPU time (every thread, user + system, from
//   /proc/PID/stat) from the start of the measured load until, with the drain on, every
//   event is done, divided by the deliveries answered 2xx;
// - p50 and p99 latency at that rate, as autocannon saw them;
// - RSS idle (after start-up and the warm-up's drain) and after the run;
// and the ratios the cost issue asks about: drain off against bare, drain on against off.
// --only runs some of the servers (bare, off, on, binary; comma-separated), e.g. to measure
// one quickly; the ratios are printed only when their servers ran. --node-options: NODE_OPTIONS
// for the receivers (e.g. --node-options=--max-semi-space-size=2), not the bare server.
// --heaps: each receiver thread's resident V8 heap, idle and after (bench/thread-heaps.cjs
// preloaded; it wakes every thread twice a second: read its CPU figures with that in mind).
import autocannon from 'autocannon';
import Database from 'better-sqlite3';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { cpuMs, rssMb, startLogged, stop } from './proc.mjs';

const { values: args } = parseArgs({
  options: {
    rates: { type: 'string', default: '500,1000' },
    seconds: { type: 'string', default: '10' },
    'no-binary': { type: 'boolean', default: false },
    only: { type: 'string', default: 'bare,off,on,binary' },
    'node-options': { type: 'string', default: '' },
    heaps: { type: 'boolean', default: false },
  },
});
const RATES = args.rates.split(',').map(Number);
const SECONDS = Number(args.seconds);
for (const v of [...RATES, SECONDS]) if (!(v > 0)) throw new Error('--rates and --seconds must be positive numbers');
const ROOT = new URL('..', import.meta.url).pathname;
const BINARY = join(ROOT, `dist/receiver-${process.platform}-${process.arch}`);
const ONLY = new Set(args.only.split(','));
for (const s of ONLY) if (!['bare', 'off', 'on', 'binary'].includes(s)) throw new Error(`--only: "${s}" is not one of bare, off, on, binary`);
const WITH_BINARY = !args['no-binary'] && ONLY.has('binary') && existsSync(BINARY);
const SECRET = 'bench-cost-secret';
const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-cost-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

const MODULE = join(dir, 'noop.mjs');
writeFileSync(MODULE, 'export default async function () {}\n');

const PAD = 'x'.repeat(1300);
/** A GitHub push of about 1.5 KB, signed, under a new delivery id. */
function push() {
  const body = JSON.stringify({
    ref: 'refs/heads/main',
    after: randomBytes(20).toString('hex'),
    repository: { full_name: 'shop/site' },
    head_commit: { message: PAD },
  });
  return {
    body,
    headers: {
      'content-type': 'application/json',
      'x-github-event': 'push',
      'x-github-delivery': randomUUID(),
      'x-hub-signature-256': `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`,
    },
  };
}

/** A receiver's configuration file: SQLite in its own file, GitHub as the source, the drain on or off. */
function receiverConfig(name, drain) {
  const file = join(dir, `${name}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      database: join(dir, `${name}.db`),
      port: 0,
      log: { level: 'info' },
      sources: { github: { provider: 'github', secret: 'env:BENCH_GITHUB_SECRET' } },
      routes: drain ? [{ name: 'deploy', source: 'github', events: ['push'], key: '{id}', effect: { module: MODULE, timeoutSeconds: 10 } }] : [],
      drain: { enabled: drain },
    }),
  );
  return { file, database: join(dir, `${name}.db`) };
}

/** Events not done yet, read from the SQLite file (read-only; undefined for the bare server). */
function notDone(database) {
  const db = new Database(database, { readonly: true, fileMustExist: true });
  try {
    return db.prepare(`SELECT count(*) FROM events WHERE status IN ('pending', 'processing')`).pluck().get();
  } finally {
    db.close();
  }
}

async function untilDone(database) {
  if (database === undefined) return;
  const deadline = Date.now() + 120_000;
  while (notDone(database) > 0) {
    if (Date.now() > deadline) throw new Error('the drain did not finish within 120 s');
    await sleep(20);
  }
}

/** autocannon at `rate` deliveries a second for `seconds`; resolves with its result. */
function offer(port, rate, seconds) {
  return autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: 16,
    overallRate: rate,
    duration: seconds,
    requests: [{ method: 'POST', path: '/webhooks/github', setupRequest: (req) => ({ ...req, ...push() }) }],
  });
}

const fmt = (x, d = 0) => x.toFixed(d);
const MB = 1024 * 1024;
/** Each thread's resident heap in MB (young, old, the rest), as bench/thread-heaps.cjs last wrote it; '' without --heaps. */
async function heaps(pid) {
  if (!args.heaps) return '';
  await sleep(600);
  const threads = readdirSync(dir)
    .filter((f) => f.startsWith(`${pid}-`) && f.endsWith('.json'))
    .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')));
  return threads
    .map(({ thread, heap, spaces }) => {
      const young = spaces.new_space.resident + spaces.new_large_object_space.resident;
      const old = spaces.old_space.resident;
      return `${thread} ${fmt(heap.total_physical_size / MB)} (${fmt(young / MB)}/${fmt(old / MB)}/${fmt((heap.total_physical_size - young - old) / MB)})`;
    })
    .sort()
    .join(', ');
}

async function measure(name, file, argv, rate, database) {
  const receiver = name !== 'bare Hono';
  const preload = args.heaps && receiver ? `--require ${join(ROOT, 'bench/thread-heaps.cjs')}` : '';
  const nodeOptions = receiver ? [args['node-options'], preload].filter((o) => o !== '').join(' ') : '';
  const env = { BENCH_GITHUB_SECRET: SECRET, THREAD_HEAPS_DIR: dir, ...(nodeOptions === '' ? {} : { NODE_OPTIONS: nodeOptions }) };
  const { child, port } = await startLogged(file, argv, { cwd: dir, env, logDir: dir });
  try {
    await offer(port, rate, 1);
    await untilDone(database);
    await sleep(200);
    const idleRss = rssMb(child.pid);
    const idleHeaps = await heaps(child.pid);
    const before = cpuMs(child.pid);
    const r = await offer(port, rate, SECONDS);
    await untilDone(database);
    const cpu = cpuMs(child.pid) - before;
    const answered = r['2xx'];
    if (r.non2xx > 0 || r.errors > 0) console.log(`  ${name}: ${r.non2xx} answers not 2xx, ${r.errors} errors`);
    const afterRss = rssMb(child.pid);
    const afterHeaps = await heaps(child.pid);
    return { name, answered, cpuUs: (cpu * 1000) / answered, p50: r.latency.p50, p99: r.latency.p99, idleRss, afterRss, idleHeaps, afterHeaps };
  } finally {
    await stop(child);
  }
}

console.log(`cost of a delivery, ${SECONDS} s at each rate (node ${process.version}; ${WITH_BINARY ? 'with' : 'without'} the single executable)`);
for (const rate of RATES) {
  const rows = [];
  let bare, drainOff, drainOn;
  if (ONLY.has('bare')) rows.push((bare = await measure('bare Hono', process.execPath, [join(ROOT, 'bench/bare-server.mjs')], rate, undefined)));
  if (ONLY.has('off')) {
    const off = receiverConfig(`off-${rate}`, false);
    rows.push((drainOff = await measure('receiver, drain off', process.execPath, [join(ROOT, 'bin/receiver.js'), 'serve', '-c', off.file], rate, undefined)));
  }
  if (ONLY.has('on')) {
    const on = receiverConfig(`on-${rate}`, true);
    rows.push((drainOn = await measure('receiver, drain on', process.execPath, [join(ROOT, 'bin/receiver.js'), 'serve', '-c', on.file], rate, on.database)));
  }
  if (WITH_BINARY) {
    const bin = receiverConfig(`bin-${rate}`, true);
    rows.push(await measure('executable, drain on', BINARY, ['serve', '-c', bin.file], rate, bin.database));
  }
  console.log(`\n${rate} deliveries/s`);
  console.log(
    `${'server'.padEnd(22)}${'answered'.padStart(9)}${'CPU/delivery'.padStart(14)}${'p50 ms'.padStart(8)}${'p99 ms'.padStart(8)}${'RSS idle'.padStart(10)}${'RSS after'.padStart(11)}`,
  );
  for (const r of rows) {
    console.log(
      `${r.name.padEnd(22)}${String(r.answered).padStart(9)}${`${fmt(r.cpuUs)} us`.padStart(14)}${fmt(r.p50, 1).padStart(8)}${fmt(r.p99, 1).padStart(8)}${`${fmt(r.idleRss)} MB`.padStart(10)}${`${fmt(r.afterRss)} MB`.padStart(11)}`,
    );
  }
  for (const r of rows) if (r.idleHeaps) console.log(`${r.name}, V8 heaps resident, MB (young/old/rest): idle ${r.idleHeaps}; after ${r.afterHeaps}`);
  const ratios = [];
  if (bare && drainOff) ratios.push(`drain off / bare ${fmt(drainOff.cpuUs / bare.cpuUs, 2)}x`);
  if (drainOff && drainOn) ratios.push(`drain on / drain off ${fmt(drainOn.cpuUs / drainOff.cpuUs, 2)}x`);
  if (ratios.length > 0) console.log(`ratios: ${ratios.join(', ')}`);
}
