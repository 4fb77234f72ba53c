// Ingest benchmark: receiver serve against a bare Hono server, measured in the same run.
//
//   npm run build && node bench/ingest.mjs [--seconds 10] [--connections 16,64] [--rounds 1] [--load wrk|autocannon] [--db postgres://...] [--skip-1m]
//
// --rounds N repeats the bare/receiver pairs N times and prints the median ratio: on a shared
// machine whose speed drifts, one pair can be off by a third.
//
// Loads each server with signed 1.5 KB bodies (a tenth of them duplicates) on 127.0.0.1, from
// wrk when it is installed (bench/wrk-load.lua; `apt install wrk`), else from autocannon. The
// load generator shares the machine's cores with the server: wrk spends a fraction of
// autocannon's CPU per request, so its figures say more about the servers. Prints req/s, p50,
// p99, the ratio receiver/bare and the server's peak RSS, then checks that the stored row
// count equals the distinct event ids acknowledged with 2xx.
// On Linux it also prints each server's CPU time per request (its event loop, and its other
// threads: the ingest worker, GC) and how much of the run the event loop was busy or waiting
// for a CPU. Then it measures ingest with 1,000,000 rows in the table against an empty one.
import autocannon from 'autocannon';
import Database from 'better-sqlite3';
import { spawn, spawnSync } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import pg from 'pg';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    connections: { type: 'string', default: '16,64' },
    db: { type: 'string' },
    'skip-1m': { type: 'boolean', default: false },
    'drain': { type: 'boolean', default: false },
    rounds: { type: 'string', default: '1' },
    load: { type: 'string' },
  },
});
const HAS_WRK = spawnSync('wrk', ['--version']).error === undefined;
const LOAD = args.load ?? (HAS_WRK ? 'wrk' : 'autocannon');
if (LOAD !== 'wrk' && LOAD !== 'autocannon') throw new Error('--load must be wrk or autocannon');
if (LOAD === 'wrk' && !HAS_WRK) throw new Error('--load wrk: wrk is not installed (apt install wrk)');
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const CONNECTIONS = args.connections.split(',').map(Number);
const SECRET = 'bench-secret';
const ROOT = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-'));

/**
 * Starts a server with its stderr (logs, the port) in a file: a pipe to this process would
 * fill up whenever this process waits for a CPU, and block the server's log writes.
 */
function startProcess(argv, env = {}) {
  const logFile = join(dir, `server-${randomBytes(3).toString('hex')}.log`);
  const fd = openSync(logFile, 'w');
  const child = spawn(process.execPath, argv, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', fd] });
  closeSync(fd);
  return new Promise((resolve, reject) => {
    const poll = setInterval(() => {
      const m = /"port":(\d+)/.exec(readFileSync(logFile, 'utf8'));
      if (m) {
        clearInterval(poll);
        child.removeAllListeners('exit');
        resolve({ child, port: Number(m[1]) });
      }
    }, 50);
    child.on('exit', (code) => {
      clearInterval(poll);
      reject(new Error(`exited ${code}: ${readFileSync(logFile, 'utf8')}`));
    });
  });
}

async function stop(child) {
  const done = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await done;
}

function rssMb(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

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
  const argv = ['-t1', `-c${connections}`, `-d${seconds}s`, '-s', join(ROOT, 'bench/wrk-load.lua'), `http://127.0.0.1:${port}`, '--', POOL_FILE, String(offset), ackedFile];
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

async function measure(label, start, connections, { acked } = {}) {
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
  const { result } = await load(port, connections, SECONDS, acked, clock);
  const cpu = before === undefined || cpuAfter === undefined ? undefined : cpuBreakdown(child.pid, before, cpuAfter, result.requests.total, t1 - t0);
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
  };
}

function receiverConfig(database) {
  const file = join(dir, `config-${randomBytes(3).toString('hex')}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      database,
      sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', prefix: 'sha256=', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' } },
      drain: { enabled: args.drain },
      log: { level: 'info' },
    }),
  );
  return file;
}

const bare = () => startProcess(['bench/bare-server.mjs']);
// Node's options as the systemd unit starts receiver (contrib/receiver.service's ExecStart).
const UNIT_NODE_OPTIONS = /^ExecStart=\S+ (.*?)\s*\S+\/bin\/receiver\.js serve$/m.exec(readFileSync(join(ROOT, 'contrib/receiver.service'), 'utf8'))?.[1].split(/\s+/).filter(Boolean) ?? [];
const receiver = (database) => () => startProcess([...UNIT_NODE_OPTIONS, 'bin/receiver.js', 'serve', '-c', receiverConfig(database), '--port', '0']);

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
  return { ok, text: `${ok ? 'ok' : 'FAILED'}: ${acked.size} distinct event ids acknowledged, ${missing} of them missing; ${rows} rows (${inFlight} stored while their answer was in flight at a cut-off)` };
}

function fmt(r) {
  const line = `${r.label.padEnd(28)} c=${String(r.connections).padStart(3)}  ${r.rps.toFixed(0).padStart(7)} req/s  p50 ${String(r.p50).padStart(4)} ms  p99 ${String(r.p99).padStart(4)} ms  rss ${r.rssMb.toFixed(0).padStart(4)} MB  non2xx ${r.non2xx}  errors ${r.errors}`;
  if (r.cpu === undefined) return line;
  const pct = (x) => `${(x * 100).toFixed(0)}%`;
  return `${line}\n${' '.repeat(30)}cpu per request: event loop ${r.cpu.mainUsPerReq.toFixed(0)} us, other threads ${r.cpu.otherUsPerReq.toFixed(0)} us; event loop busy ${pct(r.cpu.mainBusy)}, waiting for a CPU ${pct(r.cpu.mainWaitingForCpu)}`;
}

async function fillMillion(database) {
  const db = new Database(database);
  db.pragma('journal_mode = WAL');
  const insert = db.prepare(`INSERT INTO events (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, response_body, next_attempt_at)
    VALUES ('shop', ?, 'invoice.paid', 'done', ?, '{}', ?, ?, 202, '{}', 0)`);
  const body = Buffer.from('{"id":"old"}');
  const t = Date.now() - 90 * 86400_000;
  db.transaction(() => {
    for (let i = 0; i < 1_000_000; i++) insert.run(`evt_old_${i}_${randomBytes(6).toString('hex')}`, t + i, body, 'x');
  })();
  db.close();
}

const results = [];
console.log(`ingest benchmark: ${SECONDS}s per run, load from ${LOAD}, receiver started as the systemd unit does (node ${UNIT_NODE_OPTIONS.join(' ')}), connections ${CONNECTIONS.join(', ')}, store ${args.db ?? 'SQLite (synchronous=FULL)'}, drain ${args.drain ? 'on' : 'off'}`);
for (let round = 1; round <= ROUNDS; round++) {
  if (ROUNDS > 1) console.log(`round ${round} of ${ROUNDS}`);
  for (const c of CONNECTIONS) {
    const b = await measure('bare hono (stores nothing)', bare, c);
    console.log(fmt(b));
    const database = args.db ?? join(dir, `ingest-${c}-${round}.db`);
    const acked = new Set();
    // A PostgreSQL database is shared by the runs: count only this run's rows.
    const sinceId = database.startsWith('postgres') ? await pgMaxId(database) : 0;
    if (!database.startsWith('postgres')) wrkOffset = 0;
    const r = await measure('receiver serve', receiver(database), c, { acked });
    console.log(fmt(r));
    const check = await checkStored(database, acked, c, sinceId);
    console.log(`  ratio receiver/bare = ${(r.rps / b.rps).toFixed(2)}   stored vs acknowledged: ${check.text}`);
    results.push({ connections: c, bare: b, receiver: r, ratio: r.rps / b.rps });
    if (!check.ok) process.exitCode = 1;
  }
}
if (ROUNDS > 1) {
  // The machine's speed drifts between runs; each round pairs bare and receiver back to back.
  const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  for (const c of CONNECTIONS) {
    const mine = results.filter((r) => r.connections === c);
    const ratios = mine.map((r) => r.ratio);
    console.log(
      `c=${String(c).padStart(3)}: median of ${ROUNDS} rounds: bare ${median(mine.map((r) => r.bare.rps)).toFixed(0)} req/s, receiver ${median(mine.map((r) => r.receiver.rps)).toFixed(0)} req/s, ratio ${median(ratios).toFixed(2)} (${ratios.map((x) => x.toFixed(2)).join(', ')}), receiver p99 ${median(mine.map((r) => r.receiver.p99))} ms`,
    );
  }
}

if (!args['skip-1m'] && args.db === undefined) {
  const c = CONNECTIONS[CONNECTIONS.length - 1];
  const empty = join(dir, 'empty.db');
  const full = join(dir, 'million.db');
  // Create the schema through the receiver itself, then fill the table.
  const { child } = await receiver(full)();
  await stop(child);
  const t0 = Date.now();
  await fillMillion(full);
  console.log(`filled 1,000,000 rows in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const e = await measure('receiver, empty table', receiver(empty), c);
  console.log(fmt(e));
  const f = await measure('receiver, 1M rows', receiver(full), c);
  console.log(fmt(f));
  console.log(`  1M rows / empty = ${(f.rps / e.rps).toFixed(2)}`);
}
rmSync(dir, { recursive: true, force: true });
