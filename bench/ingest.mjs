// Ingest benchmark: receiver serve as shipped (drain on, one route with a no-op module effect)
// against the same receiver with its drain off and against a bare Hono server, in the same run.
//
//   npm run build && node bench/ingest.mjs [--seconds 10] [--connections 16,64] [--rounds 1] [--load wrk|autocannon]
//                                          [--no-drain] [--no-route] [--db postgres://...] [--skip-1m]
//                                          [--rate 200] [--rate-seconds 5] [--drain-wait 60] [--dedupe-by-body]
//
// Per connection count it measures, one after the other: the bare Hono server (stores
// nothing), `receiver serve` with `drain.enabled: false`, and `receiver serve` as shipped:
// drain on, one route (source "shop", every event) whose effect is a no-op `module` written
// to a temp dir, logs at info to a file. --no-drain leaves the drain-on run out; --no-route
// runs both receivers without the route. --dedupe-by-body adds a fourth run after drain on: the
// same, with `dedupeByBody: true` on the source (a body key written beside every event), and
// prints its req/s against drain on's. --rounds N repeats the
// runs N times and prints medians: on a shared machine whose speed drifts, one run can be
// off by a third.
//
// Loads each server with signed 1.5 KB bodies (a tenth of them duplicates) on 127.0.0.1, from
// wrk when it is installed (bench/wrk-load.lua; `apt install wrk`), else from autocannon. The
// load generator shares the machine's cores with the server: wrk spends a fraction of
// autocannon's CPU per request, so its figures say more about the servers. Prints req/s, p50,
// p99, the server's peak RSS and its event-loop delay p99 under load, then checks that the
// stored row count equals the distinct event ids acknowledged with 2xx. On Linux it also
// prints each server's CPU time per request (its event loop, and its other threads: the
// ingest worker, GC) and how much of the run the event loop was busy or waiting for a CPU.
//
// Event-loop delay: monitorEventLoopDelay with a 10 ms resolution, as prom-client's default
// metrics sample it; the receiver's is read from GET /metrics (nodejs_eventloop_lag_p99_seconds,
// reset at each scrape: one scrape just before the measured load, one just after), the bare
// server's from the same histogram in bench/bare-server.mjs. The figure printed is the p99 minus
// the 10 ms sampling interval: how late a timer fired, 0 for an idle loop.
//
// For the drain-on receiver it also prints the backlog (pending and processing events, from
// the queue gauges of GET /metrics) when the measured load starts and at the first /metrics
// answer after it stops, and the time from the load's stop until an answer says it is empty
// (polled every 50 ms, at most --drain-wait seconds, else "not drained within N s"). A drain
// that holds the event loop delays those answers: the times are when the bench could see
// them, and the event-loop delay figure then also covers that tail. Then a
// fresh drain-on receiver gets a light steady load (--rate deliveries/s for --rate-seconds,
// after 1 s of warm-up at the same rate) and the bench prints receipt-to-effect latency
// p50/p99: the module effect appends `Date.now() - event.receivedAt` for each of these
// deliveries to a file. Last, ingest with 1,000,000 rows in the table against an empty one.
//
// Everything goes through the receiver's public surface (bin/receiver.js serve with a config
// file, HTTP, /metrics; the SQLite file only to count stored rows and to fill the 1M table).
import autocannon from 'autocannon';
import Database from 'better-sqlite3';
import { spawn, spawnSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { rssMb, startLogged, stop } from './proc.mjs';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    connections: { type: 'string', default: '16,64' },
    db: { type: 'string' },
    'skip-1m': { type: 'boolean', default: false },
    'no-drain': { type: 'boolean', default: false },
    'no-route': { type: 'boolean', default: false },
    rounds: { type: 'string', default: '1' },
    load: { type: 'string' },
    rate: { type: 'string', default: '200' },
    'rate-seconds': { type: 'string', default: '5' },
    'drain-wait': { type: 'string', default: '60' },
    'dedupe-by-body': { type: 'boolean', default: false },
  },
});
const HAS_WRK = spawnSync('wrk', ['--version']).error === undefined;
const LOAD = args.load ?? (HAS_WRK ? 'wrk' : 'autocannon');
if (LOAD !== 'wrk' && LOAD !== 'autocannon') throw new Error('--load must be wrk or autocannon');
if (LOAD === 'wrk' && !HAS_WRK) throw new Error('--load wrk: wrk is not installed (apt install wrk)');
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const CONNECTIONS = args.connections.split(',').map(Number);
const RATE = Number(args.rate);
const RATE_SECONDS = Number(args['rate-seconds']);
const DRAIN_WAIT_S = Number(args['drain-wait']);
const DRAIN_ON = !args['no-drain'];
const ROUTE = !args['no-route'];
for (const [name, v] of [
  ['--seconds', SECONDS],
  ['--rounds', ROUNDS],
  ['--rate', RATE],
  ['--rate-seconds', RATE_SECONDS],
  ['--drain-wait', DRAIN_WAIT_S],
  ...CONNECTIONS.map((c) => ['--connections', c]),
]) {
  if (!(v > 0)) throw new Error(`${name} must be a positive number`);
}
const SECRET = 'bench-secret';
const ROOT = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-'));
// The route's effect: a no-op module. It records receipt-to-effect latency only for the
// light-rate probe deliveries (body field "probe": true), one line per event, to a file.
const PROBE_FILE = join(dir, 'probe.txt');
const MODULE_FILE = join(dir, 'noop-effect.mjs');
writeFileSync(
  MODULE_FILE,
  `import { appendFileSync } from 'node:fs';
export default async function (event) {
  if (event.json?.probe === true) appendFileSync(${JSON.stringify(PROBE_FILE)}, \`\${Date.now() - event.receivedAt}\\n\`);
}
`,
);
// prom-client's collectDefaultMetrics samples the event loop every 10 ms (eventLoopMonitoringPrecision).
const ELD_RESOLUTION_MS = 10;

/**
 * CPU time of each thread of a process (utime + stime, ms) and the time it spent runnable
 * but waiting for a CPU (schedstat, ms): where a request's cost goes, and whether the
 * event loop was busy, waiting for a CPU, or idle.
 */
function threadTimes(pid) {
  const out = new Map();
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const sched = readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').trim().split(' ').map(Number);
      out.set(tid, { cpuMs: (Number(f[11]) + Number(f[12])) * 10, waitMs: sched[1] / 1e6 });
    }
  } catch {
    // Not Linux, or the process is gone: no breakdown.
  }
  return out;
}

function cpuBreakdown(pid, before, after, requests, wallMs) {
  if (after.size === 0 || requests === 0) return undefined;
  const main = String(pid);
  let mainCpu = 0;
  let mainWait = 0;
  let other = 0;
  for (const [tid, a] of after) {
    const b = before.get(tid) ?? { cpuMs: 0, waitMs: 0 };
    if (tid === main) {
      mainCpu = a.cpuMs - b.cpuMs;
      mainWait = a.waitMs - b.waitMs;
    } else other += a.cpuMs - b.cpuMs;
  }
  return {
    mainUsPerReq: (mainCpu * 1000) / requests,
    otherUsPerReq: (other * 1000) / requests,
    mainBusy: mainCpu / wallMs,
    mainWaitingForCpu: mainWait / wallMs,
  };
}

const PAD = 'x'.repeat(1400);
// Bodies are signed before the clock starts, so the load generator (on the same two cores)
// spends its time sending, not hashing.
const POOL_SIZE = Number(process.env.BENCH_POOL ?? 300_000);
const pool = [];
for (let i = 0; i < POOL_SIZE; i++) {
  const id = `evt_${process.pid}_${i}_${randomBytes(4).toString('hex')}`;
  const body = JSON.stringify({ id, type: 'invoice.paid', created: 1700000000, data: { object: { id: `in_${i}`, pad: PAD } } });
  pool.push({ body, sig: `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}` });
}
// wrk reads the same pool from a file. A receiver run on a fresh SQLite file starts at its top;
// runs on one PostgreSQL database go on from where the previous run stopped.
const POOL_FILE = join(dir, 'pool.txt');
if (LOAD === 'wrk') writeFileSync(POOL_FILE, pool.map((p) => `${p.sig}\t${p.body}\n`).join(''));
let wrkOffset = 0;
let cursor = 0;
let seq = 0;
function nextBody() {
  seq++;
  // One in ten is a duplicate of a recent delivery (same id, same bytes), as senders retry.
  if (cursor > 100 && seq % 10 === 0) return pool[(cursor - 1 - Math.floor(Math.random() * 100)) % POOL_SIZE];
  const entry = pool[cursor % POOL_SIZE];
  cursor++;
  return entry;
}

/** One wrk run; returns the figures in autocannon's shape. */
function loadWrk(port, connections, seconds, acked, clock) {
  const ackedFile = acked ? join(dir, 'acked.txt') : '-';
  // The bare server stores nothing: it always starts at the top of the pool.
  const offset = acked ? wrkOffset : 0;
  const argv = [
    '-t1',
    `-c${connections}`,
    `-d${seconds}s`,
    '-s',
    join(ROOT, 'bench/wrk-load.lua'),
    `http://127.0.0.1:${port}`,
    '--',
    POOL_FILE,
    String(offset),
    ackedFile,
  ];
  return new Promise((resolve, reject) => {
    // Line-buffered, so that "Running" arrives when wrk prints it (coreutils' stdbuf).
    const child = spawn('stdbuf', ['-oL', 'wrk', ...argv], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    // wrk prints "Running" when the load starts (after its threads' init), and "Thread Stats"
    // when it has stopped: the CPU figures cover the load only.
    child.stdout.on('data', (d) => {
      out += d;
      if (out.includes('Running')) clock.start();
      if (out.includes('Thread Stats')) clock.stop();
    });
    child.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('{"requests"'));
      if (code !== 0 || line === undefined) return reject(new Error(`wrk exited ${code}: ${out}`));
      const r = JSON.parse(line);
      if (acked && r.wrapped) console.log(`  (the pool of ${POOL_SIZE} bodies wrapped around: BENCH_POOL=... for a larger one)`);
      if (acked) wrkOffset = r.cursor;
      if (acked) for (const id of readFileSync(ackedFile, 'utf8').split('\n')) if (id !== '') acked.add(Number(id));
      resolve({
        result: {
          requests: { total: r.requests, average: r.requests / r.seconds },
          latency: { p50: r.p50, p99: r.p99 },
          errors: r.errors,
          timeouts: 0,
          non2xx: r.non2xx,
        },
      });
    });
  });
}

async function load(port, connections, seconds, acked, clock) {
  if (LOAD === 'wrk') return loadWrk(port, connections, seconds, acked, clock);
  clock.start();
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    duration: seconds,
    requests: [
      {
        method: 'POST',
        path: '/webhooks/shop',
        setupRequest: (req) => {
          const { body, sig } = nextBody();
          return { ...req, body, headers: { 'content-type': 'application/json', 'x-signature': sig } };
        },
        onResponse: (status, body) => {
          if (acked && status >= 200 && status < 300) {
            const id = /"id":(\d+)/.exec(body);
            if (id) acked.add(Number(id[1]));
          }
        },
      },
    ],
  });
  clock.stop();
  return { result };
}

/** GET /metrics of a server on 127.0.0.1 as { name or name{labels}: value }. */
function scrape(port, timeoutS = 10) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/metrics', agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`GET /metrics: ${res.statusCode} ${text.slice(0, 200)}`));
        const out = {};
        for (const line of text.split('\n')) {
          const m = /^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
          if (m) out[m[1]] = Number(m[2]);
        }
        resolve(out);
      });
    });
    req.setTimeout(timeoutS * 1000, () => req.destroy(Object.assign(new Error(`GET /metrics: no answer within ${timeoutS} s`), { code: 'BENCH_TIMEOUT' })));
    req.on('error', reject);
  });
}

/** Event-loop delay p99 in ms since the previous scrape (which reset the histogram), the sampling interval taken off. */
const eldP99Ms = (m) => {
  const v = m.nodejs_eventloop_lag_p99_seconds;
  return v === undefined ? undefined : Math.max(0, v * 1000 - ELD_RESOLUTION_MS);
};

/** Events the drain has still to do, from the queue gauges (processing is absent where the store does not report it). */
const backlogOf = (m) => (m['receiver_events{status="pending"}'] ?? 0) + (m['receiver_events{status="processing"}'] ?? 0);

/**
 * Polls GET /metrics every 50 ms until no event is pending or processing, for at most
 * DRAIN_WAIT_S from `since` (performance.now() when the load stopped); `first` is the scrape
 * taken right after the load and when its answer came. Returns the backlog that scrape saw
 * and when, and the seconds from `since` until an answer said the backlog was empty (null: not
 * within the bound). An answer may wait while the drain holds the event loop: the times are
 * when the bench could see it.
 */
async function waitDrained(port, since, first) {
  const atFirst = { left: backlogOf(first.m), seconds: (first.at - since) / 1000 };
  let m = first.m;
  for (;;) {
    const left = backlogOf(m);
    const seconds = (performance.now() - since) / 1000;
    if (left === 0) return { atFirst, seconds, left };
    if (seconds >= DRAIN_WAIT_S) return { atFirst, seconds: null, left };
    await sleep(50);
    // The drain may hold the event loop while it has a backlog: wait for the answer up to the bound.
    const remaining = DRAIN_WAIT_S - (performance.now() - since) / 1000;
    try {
      m = await scrape(port, Math.max(1, remaining));
    } catch (e) {
      if (e.code !== 'BENCH_TIMEOUT') throw e;
      return { atFirst, seconds: null, left: 'unknown (no /metrics answer)' };
    }
    if (m.receiver_database_up === 0) throw new Error('receiver_database_up is 0: the queue gauges cannot be read');
  }
}

/**
 * Starts a server, warms it up, loads it for SECONDS and stops it. `drained`: wait until the
 * receiver's backlog is drained after the load (drain-on runs).
 */
async function measure(label, start, connections, { acked, drained = false } = {}) {
  const { child, port } = await start();
  // Warm up (JIT, page cache) with the same load for 2 s, not counted: a warm-up of other
  // requests leaves the accepting path to be compiled during the measured run. Its stored
  // rows are checked with the run's.
  const idle = { start() {}, stop() {} };
  await load(port, connections, 2, acked, idle);
  let peak = 0;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMb(child.pid))), 200);
  let before;
  let t0 = 0;
  let cpuAfter;
  let t1 = 0;
  const clock = {
    start: () => {
      if (before !== undefined) return;
      before = threadTimes(child.pid);
      t0 = performance.now();
    },
    stop: () => {
      if (cpuAfter !== undefined) return;
      cpuAfter = threadTimes(child.pid);
      t1 = performance.now();
    },
  };
  // This scrape resets the event-loop delay histogram: the next one covers the load.
  const m0 = await scrape(port, DRAIN_WAIT_S + 10);
  const { result } = await load(port, connections, SECONDS, acked, clock);
  const m1 = await scrape(port, DRAIN_WAIT_S + 10);
  const m1At = performance.now();
  const cpu = before === undefined || cpuAfter === undefined ? undefined : cpuBreakdown(child.pid, before, cpuAfter, result.requests.total, t1 - t0);
  const backlog = drained ? await waitDrained(port, t1, { m: m1, at: m1At }) : undefined;
  clearInterval(sampler);
  await stop(child);
  const non2xx = result.non2xx;
  return {
    label,
    connections,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts,
    non2xx,
    total: result.requests.total,
    rssMb: peak,
    cpu,
    eldP99Ms: eldP99Ms(m1),
    backlogBefore: backlogOf(m0),
    backlog,
  };
}

/** The receiver's configuration: the route with the no-op module unless --no-route. */
function receiverConfig(database, { drain, dedupeByBody = false }) {
  const file = join(dir, `config-${randomBytes(3).toString('hex')}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      database,
      sources: {
        shop: {
          provider: 'hmac-sha256',
          header: 'X-Signature',
          prefix: 'sha256=',
          secret: SECRET,
          deliveryId: '{body.id}',
          eventType: '{body.type}',
          dedupeByBody,
        },
      },
      routes: ROUTE ? [{ name: 'noop', source: 'shop', events: ['*'], key: '{body.id}', effect: { module: MODULE_FILE } }] : [],
      drain: { enabled: drain },
      log: { level: 'info' },
    }),
  );
  return file;
}

const bare = () => startLogged(process.execPath, ['bench/bare-server.mjs'], { cwd: ROOT, logDir: dir });
// Node's options as the systemd unit starts receiver (contrib/receiver.service's ExecStart).
const UNIT_NODE_OPTIONS =
  /^ExecStart=\S+ (.*?)\s*\S+\/bin\/receiver\.js serve$/m
    .exec(readFileSync(join(ROOT, 'contrib/receiver.service'), 'utf8'))?.[1]
    .split(/\s+/)
    .filter(Boolean) ?? [];
const receiver = (database, options) => () =>
  startLogged(process.execPath, [...UNIT_NODE_OPTIONS, 'bin/receiver.js', 'serve', '-c', receiverConfig(database, options), '--port', '0'], {
    cwd: ROOT,
    logDir: dir,
  });

/** PostgreSQL: the highest event id before a run (the database is the caller's: nothing is deleted). */
async function pgMaxId(database) {
  const client = new pg.Client({ connectionString: database });
  await client.connect();
  try {
    const exists = await client.query(`SELECT to_regclass('events') IS NOT NULL AS t`);
    if (!exists.rows[0].t) return 0;
    return Number((await client.query('SELECT coalesce(max(id), 0) AS n FROM events')).rows[0].n);
  } finally {
    await client.end();
  }
}

async function storedRows(database, acked, sinceId) {
  if (database.startsWith('postgres')) {
    const client = new pg.Client({ connectionString: database });
    await client.connect();
    try {
      const rows = Number((await client.query('SELECT count(*) AS n FROM events WHERE id > $1', [sinceId])).rows[0].n);
      const found = await client.query('SELECT count(*) AS n FROM events WHERE id = ANY($1::bigint[])', [[...acked]]);
      return { rows, missing: acked.size - Number(found.rows[0].n) };
    } finally {
      await client.end();
    }
  }
  const db = new Database(database, { readonly: true });
  const rows = db.prepare('SELECT count(*) AS n FROM events').get().n;
  const has = db.prepare('SELECT 1 FROM events WHERE id = ?');
  let missing = 0;
  for (const id of acked) if (has.get(id) === undefined) missing++;
  db.close();
  return { rows, missing };
}

/**
 * Every event id acknowledged with 2xx must be stored. The table may hold a few more rows:
 * requests still in flight when the warm-up or the load stopped were stored but their
 * answers not read (at most one per connection each time); the sender would retry those and
 * get the duplicate answer.
 */
async function checkStored(database, acked, connections, sinceId = 0) {
  const { rows, missing } = await storedRows(database, acked, sinceId);
  const inFlight = rows - acked.size;
  // Two cut-offs: the warm-up's and the run's.
  const ok = missing === 0 && inFlight >= 0 && inFlight <= 2 * connections;
  return {
    ok,
    text: `${ok ? 'ok' : 'FAILED'}: ${acked.size} distinct event ids acknowledged, ${missing} of them missing; ${rows} rows (${inFlight} stored while their answer was in flight at a cut-off)`,
  };
}

const ms = (x) => (x === undefined ? '-' : x < 10 ? x.toFixed(1) : x.toFixed(0));

function fmt(r) {
  const line = `${r.label.padEnd(28)} c=${String(r.connections).padStart(3)}  ${r.rps.toFixed(0).padStart(7)} req/s  p50 ${String(r.p50).padStart(4)} ms  p99 ${String(r.p99).padStart(4)} ms  rss ${r.rssMb.toFixed(0).padStart(4)} MB  non2xx ${r.non2xx}  errors ${r.errors}`;
  const lines = [line];
  const pct = (x) => `${(x * 100).toFixed(0)}%`;
  const eld = `event-loop delay p99 ${ms(r.eldP99Ms)} ms`;
  if (r.cpu === undefined) lines.push(`${' '.repeat(30)}${eld}`);
  else
    lines.push(
      `${' '.repeat(30)}cpu per request: event loop ${r.cpu.mainUsPerReq.toFixed(0)} us, other threads ${r.cpu.otherUsPerReq.toFixed(0)} us; event loop busy ${pct(r.cpu.mainBusy)}, waiting for a CPU ${pct(r.cpu.mainWaitingForCpu)}; ${eld}`,
    );
  if (r.backlog !== undefined) {
    const b = r.backlog;
    const drained = b.seconds === null ? `not drained within ${DRAIN_WAIT_S} s (${b.left} left)` : `drained ${b.seconds.toFixed(2)} s after the load stopped`;
    lines.push(
      `${' '.repeat(30)}backlog (pending + processing): ${r.backlogBefore} when the measured load started, ${b.atFirst.left} at the first /metrics answer after it (${b.atFirst.seconds.toFixed(2)} s after it stopped); ${drained}`,
    );
  }
  return lines.join('\n');
}

async function fillMillion(database) {
  const db = new Database(database);
  db.pragma('journal_mode = WAL');
  const insert =
    db.prepare(`INSERT INTO events (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, response_body, next_attempt_at)
    VALUES ('shop', ?, 'invoice.paid', 'done', ?, '{}', ?, ?, 202, '{}', 0)`);
  const body = Buffer.from('{"id":"old"}');
  const t = Date.now() - 90 * 86400_000;
  db.transaction(() => {
    for (let i = 0; i < 1_000_000; i++) insert.run(`evt_old_${i}_${randomBytes(6).toString('hex')}`, t + i, body, 'x');
  })();
  db.close();
}

const percentile = (sorted, p) =>
  sorted.length === 0 ? undefined : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];

/**
 * Receipt to effect at a light steady rate: a fresh drain-on receiver gets RATE signed
 * deliveries a second, each sent at its time whatever the answers do (an open loop, over a
 * keep-alive pool), 1 s of warm-up and then RATE_SECONDS of probe deliveries, whose
 * receipt-to-effect-start latency the module effect appends to PROBE_FILE.
 */
async function probeLatency() {
  const database = args.db ?? join(dir, 'probe.db');
  const { child, port } = await receiver(database, { drain: true })();
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const run = `probe_${process.pid}_${randomBytes(3).toString('hex')}`;
  let n = 0;
  const post = (probe) => {
    const id = `${run}_${n++}`;
    const body = JSON.stringify({ id, type: 'invoice.paid', created: 1700000000, probe, data: { object: { id: `in_${id}`, pad: PAD } } });
    const sig = `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`;
    const t = performance.now();
    return new Promise((resolve) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: '/webhooks/shop',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-signature': sig },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode, ms: performance.now() - t }));
        },
      );
      req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
      req.on('error', () => resolve({ status: 0, ms: performance.now() - t }));
      req.end(body);
    });
  };
  const paced = async (seconds, probe) => {
    const count = Math.round(RATE * seconds);
    const t0 = performance.now();
    const answers = [];
    for (let i = 0; i < count; i++) {
      const wait = t0 + (i * 1000) / RATE - performance.now();
      if (wait > 0) await sleep(wait);
      answers.push(post(probe));
    }
    // The sending rate: from the first send to the last.
    const sendSeconds = ((performance.now() - t0) / 1000) * (count / Math.max(1, count - 1));
    return { all: await Promise.all(answers), seconds: sendSeconds };
  };
  try {
    await paced(1, false);
    rmSync(PROBE_FILE, { force: true });
    const { all, seconds } = await paced(RATE_SECONDS, true);
    // The module appends before its event is marked done: every line is in once nothing is left.
    const since = performance.now();
    const drained = await waitDrained(port, since, { m: await scrape(port, DRAIN_WAIT_S + 10), at: performance.now() });
    const effects = (existsSync(PROBE_FILE) ? readFileSync(PROBE_FILE, 'utf8') : '')
      .split('\n')
      .filter(Boolean)
      .map(Number)
      .sort((x, y) => x - y);
    const http2xx = all.filter((a) => a.status >= 200 && a.status < 300).length;
    const answerMs = all.map((a) => a.ms).sort((x, y) => x - y);
    return { sent: all.length, rate: all.length / seconds, http2xx, answerMs, effects, drained };
  } finally {
    agent.destroy();
    await stop(child);
  }
}

const results = [];
const BODY_KEYS = DRAIN_ON && args['dedupe-by-body'];
const runs = ['bare', 'off', ...(DRAIN_ON ? ['on'] : []), ...(BODY_KEYS ? ['body'] : [])];
const LABEL = { bare: 'bare hono (stores nothing)', off: 'receiver, drain off', on: 'receiver, drain on', body: 'drain on, dedupeByBody' };
console.log(
  `ingest benchmark: ${SECONDS}s per run, load from ${LOAD}, receiver started as the systemd unit does (node ${UNIT_NODE_OPTIONS.join(' ')}), ` +
    `connections ${CONNECTIONS.join(', ')}, store ${args.db ?? 'SQLite (synchronous=FULL)'}, ${ROUTE ? 'one route with a no-op module effect' : 'no route'}, ` +
    `runs: ${runs.map((r) => LABEL[r]).join(' / ')}`,
);
for (let round = 1; round <= ROUNDS; round++) {
  if (ROUNDS > 1) console.log(`round ${round} of ${ROUNDS}`);
  for (const c of CONNECTIONS) {
    const row = { connections: c };
    row.bare = await measure(LABEL.bare, bare, c);
    console.log(fmt(row.bare));
    for (const kind of runs.slice(1)) {
      const database = args.db ?? join(dir, `ingest-${c}-${round}-${kind}.db`);
      const acked = new Set();
      // A PostgreSQL database is shared by the runs: count only this run's rows.
      const sinceId = database.startsWith('postgres') ? await pgMaxId(database) : 0;
      if (!database.startsWith('postgres')) wrkOffset = 0;
      const drain = kind === 'on' || kind === 'body';
      const r = await measure(LABEL[kind], receiver(database, { drain, dedupeByBody: kind === 'body' }), c, { acked, drained: drain });
      console.log(fmt(r));
      const check = await checkStored(database, acked, c, sinceId);
      console.log(`  stored vs acknowledged: ${check.text}`);
      if (!check.ok) process.exitCode = 1;
      row[kind] = r;
    }
    results.push(row);
    console.log(summary(`c=${c}, side by side`, [row]));
  }
}

/** The runs of one connection count side by side (medians over rounds when there are several). */
function summary(title, rows) {
  const med = (f) => median(rows.map(f).filter((x) => x !== undefined));
  const out = [`${title}:${' '.repeat(Math.max(1, 36 - title.length))}req/s  p50 ms  p99 ms  loop delay p99 ms  x bare`];
  for (const kind of runs) {
    let line = `  ${LABEL[kind].padEnd(33)} ${med((r) => r[kind].rps)
      .toFixed(0)
      .padStart(
        6,
      )}  ${ms(med((r) => r[kind].p50)).padStart(6)}  ${ms(med((r) => r[kind].p99)).padStart(6)}  ${ms(med((r) => r[kind].eldP99Ms)).padStart(17)}  ${med(
      (r) => r[kind].rps / r.bare.rps,
    )
      .toFixed(2)
      .padStart(6)}`;
    if (kind === 'on' || kind === 'body') {
      line +=
        kind === 'on'
          ? `   drain on / drain off ${med((r) => r.on.rps / r.off.rps).toFixed(2)}`
          : `   dedupeByBody / drain on ${med((r) => r.body.rps / r.on.rps).toFixed(2)}`;
      const secs = rows.map((r) => r[kind].backlog.seconds);
      line += `; backlog drained ${secs.map((x) => (x === null ? `not within ${DRAIN_WAIT_S} s` : `${x.toFixed(2)} s`)).join(', ')} after the load`;
    }
    out.push(line);
  }
  return out.join('\n');
}

if (ROUNDS > 1) {
  // The machine's speed drifts between runs; each round runs bare, drain off and drain on back to back.
  for (const c of CONNECTIONS) {
    const mine = results.filter((r) => r.connections === c);
    console.log(summary(`c=${c}, median of ${ROUNDS} rounds`, mine));
    const ratios = (f) =>
      mine
        .map(f)
        .map((x) => x.toFixed(2))
        .join(', ');
    console.log(
      `  per round: drain off / bare ${ratios((r) => r.off.rps / r.bare.rps)}${DRAIN_ON ? `; drain on / bare ${ratios((r) => r.on.rps / r.bare.rps)}; drain on / drain off ${ratios((r) => r.on.rps / r.off.rps)}` : ''}` +
        (BODY_KEYS ? `; dedupeByBody / drain on ${ratios((r) => r.body.rps / r.on.rps)}` : ''),
    );
  }
}

if (DRAIN_ON && ROUTE) {
  const p = await probeLatency();
  const effectLine =
    p.effects.length === 0
      ? 'no effect recorded'
      : `receipt to effect start p50 ${percentile(p.effects, 50)} ms, p99 ${percentile(p.effects, 99)} ms, max ${p.effects[p.effects.length - 1]} ms (${p.effects.length} effects, Date.now() resolution: 1 ms)`;
  console.log(
    `light steady load, drain on: ${p.sent} deliveries at ${p.rate.toFixed(0)}/s (${p.http2xx} answered 2xx, answer p50 ${ms(percentile(p.answerMs, 50))} ms, p99 ${ms(percentile(p.answerMs, 99))} ms)\n  ${effectLine}` +
      (p.drained.seconds === null ? `; NOT drained within ${DRAIN_WAIT_S} s (${p.drained.left} left)` : ''),
  );
  if (p.effects.length !== p.http2xx) console.log(`  (${p.http2xx - p.effects.length} acknowledged deliveries without a recorded effect)`);
} else console.log(`receipt-to-effect latency not measured: ${DRAIN_ON ? '--no-route (no effect to time)' : '--no-drain'}`);

if (!args['skip-1m'] && args.db === undefined) {
  const c = CONNECTIONS[CONNECTIONS.length - 1];
  const empty = join(dir, 'empty.db');
  const full = join(dir, 'million.db');
  const options = { drain: DRAIN_ON };
  // Create the schema through the receiver itself, then fill the table.
  const { child } = await receiver(full, options)();
  await stop(child);
  const t0 = Date.now();
  await fillMillion(full);
  console.log(`filled 1,000,000 rows in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  wrkOffset = 0;
  const e = await measure(`receiver, empty table`, receiver(empty, options), c);
  console.log(fmt(e));
  wrkOffset = 0;
  const f = await measure('receiver, 1M rows', receiver(full, options), c);
  console.log(fmt(f));
  console.log(`  1M rows / empty = ${(f.rps / e.rps).toFixed(2)} (drain ${DRAIN_ON ? 'on' : 'off'})`);
}
rmSync(dir, { recursive: true, force: true });
