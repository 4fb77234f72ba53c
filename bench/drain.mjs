// Drain benchmark: events per second through `receiver serve`'s drain, for a no-op module
// effect and for an exec effect running `true`, and a bare loop spawning `true` from Node in
// the same run as the baseline of exec.
//
//   npm run build && node bench/drain.mjs [--module-events 20000] [--exec-events 1000] [--db postgres://...]
//
// Only the public surface: `bin/receiver.js serve` with a config file, HTTP, GET /metrics.
// Each effect gets a fresh SQLite file (WAL, synchronous=FULL; or the --db PostgreSQL
// database). 1. `serve` with `drain.enabled: false` and the route takes N unsigned
// deliveries (source provider "none") over HTTP, not timed, and stops. 2. `serve` with the
// drain on (every other setting its default, logs at info to a file) starts on the same
// database; the bench times from serve's "drain started" log line until an answer of GET
// /metrics (polled every 100 ms) says nothing is pending or processing, and divides the events
// the drain settled as done (receiver_events_settled_total) by that time. A /metrics answer
// may wait while the drain holds the event loop: the end is when the bench could see it, and
// the bench prints when the first answer came (on a drain that never yields to I/O while it
// has work, about when the backlog was empty).
//
// Bare spawn loop: `child_process.spawn('true', { stdio: 'ignore' })`, await its exit, the
// next, one after another, in this process; run just before and just after the exec run and
// averaged, since the machine's speed drifts. And what an exec effect must cost: the same
// loop with, before each spawn, one byte written to a file beside the database and an
// fdatasync of it (an exec's `running` mark is durable before the command starts); and that
// loop once more from a node process that first fills as much memory as `serve` had at the
// end of the exec run (libuv starts a command with fork(), whose cost grows with the
// parent's memory). Prints exec / bare spawn, exec / (spawn + fdatasync) and exec / (the
// same from a process of serve's size).
import { spawn, spawnSync } from 'node:child_process';
import { open } from 'node:fs/promises';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { rssMb, stop } from './proc.mjs';

const { values: args } = parseArgs({
  options: {
    'module-events': { type: 'string', default: '20000' },
    'exec-events': { type: 'string', default: '1000' },
    db: { type: 'string' },
  },
});
const MODULE_EVENTS = Number(args['module-events']);
const EXEC_EVENTS = Number(args['exec-events']);
for (const [name, v] of [
  ['--module-events', MODULE_EVENTS],
  ['--exec-events', EXEC_EVENTS],
]) {
  if (!(Number.isInteger(v) && v > 0)) throw new Error(`${name} must be a positive whole number`);
}
// Bounds: ingest and drain each stop by themselves within these.
const INGEST_LIMIT_S = 300;
const DRAIN_LIMIT_S = 600;

const ROOT = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-drain-'));
const MODULE_FILE = join(dir, 'noop.mjs');
writeFileSync(MODULE_FILE, 'export default async function () {}\n');
// Node's options as the systemd unit starts receiver (contrib/receiver.service's ExecStart).
const UNIT_NODE_OPTIONS =
  /^ExecStart=\S+ (.*?)\s*\S+\/bin\/receiver\.js serve$/m
    .exec(readFileSync(join(ROOT, 'contrib/receiver.service'), 'utf8'))?.[1]
    .split(/\s+/)
    .filter(Boolean) ?? [];

/** `receiver serve` on any free port, its stderr (logs, the port) in a file. */
function startServe(configFile) {
  const logFile = join(dir, `serve-${Date.now()}.log`);
  const fd = openSync(logFile, 'w');
  const child = spawn(process.execPath, [...UNIT_NODE_OPTIONS, 'bin/receiver.js', 'serve', '-c', configFile, '--port', '0'], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', fd],
  });
  closeSync(fd);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const poll = setInterval(() => {
      const m = /"port":(\d+)/.exec(readFileSync(logFile, 'utf8'));
      if (m) {
        clearInterval(poll);
        child.removeAllListeners('exit');
        resolve({ child, port: Number(m[1]), logFile });
      }
      if (performance.now() - started > 30_000) {
        clearInterval(poll);
        child.kill('SIGKILL');
        reject(new Error(`receiver serve did not log its port within 30 s : ${readFileSync(logFile, 'utf8')}`));
      }
    }, 20);
    child.on('exit', (code) => {
      clearInterval(poll);
      reject(new Error(`receiver serve exited ${code}: ${readFileSync(logFile, 'utf8')}`));
    });
  });
}

function request(port, method, path, body, agent, timeoutS = 30) {
  return new Promise((resolve, reject) => {
    const headers = body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
    const req = http.request({ host: '127.0.0.1', port, method, path, agent, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.setTimeout(timeoutS * 1000, () => req.destroy(new Error(`${method} ${path}: no answer within ${timeoutS} s`)));
    req.on('error', reject);
    req.end(body);
  });
}

async function scrape(port) {
  // The drain may hold the event loop until its backlog is empty: wait as long as the bound.
  const { status, text } = await request(port, 'GET', '/metrics', undefined, false, DRAIN_LIMIT_S);
  if (status !== 200) throw new Error(`GET /metrics: ${status}`);
  const out = {};
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m) out[m[1]] = Number(m[2]);
  }
  if (out.receiver_database_up === 0) throw new Error('receiver_database_up is 0: the queue gauges cannot be read');
  return out;
}
const backlogOf = (m) => (m['receiver_events{status="pending"}'] ?? 0) + (m['receiver_events{status="processing"}'] ?? 0);
const settled = (m, status) => m[`receiver_events_settled_total{status="${status}"}`] ?? 0;

function config(name, database, effect, drain) {
  const file = join(dir, `${name}-${drain ? 'drain' : 'ingest'}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      database,
      sources: { bench: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' } },
      routes: [{ name, source: 'bench', events: ['*'], key: '{body.id}', effect }],
      drain: { enabled: drain },
      // As shipped; the bench reads the port and the drain's start from the info lines.
      log: { level: 'info' },
    }),
  );
  return file;
}

async function run(name, effect, n) {
  const database = args.db ?? join(dir, `${name}.db`);
  // 1. Store n events through HTTP with the drain off (not timed).
  {
    const { child, port } = await startServe(config(name, database, effect, false));
    const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
    const id = `${name}-${Date.now()}`;
    let next = 0;
    const deadline = performance.now() + INGEST_LIMIT_S * 1000;
    const worker = async () => {
      while (next < n) {
        if (performance.now() > deadline) throw new Error(`storing ${n} events took more than ${INGEST_LIMIT_S} s`);
        const i = next++;
        const body = JSON.stringify({ id: `${id}-${i}`, type: 'bench.event', data: { n: i, pad: 'x'.repeat(400) } });
        const { status, text } = await request(port, 'POST', '/webhooks/bench', body, agent);
        if (status !== 202) throw new Error(`delivery ${i}: ${status} ${text}`);
      }
    };
    try {
      await Promise.all(Array.from({ length: 16 }, worker));
    } finally {
      agent.destroy();
      await stop(child);
    }
  }
  // 2. The drain on: from its "drain started" log line until a /metrics answer says nothing
  //    is pending or processing. (An answer may wait while the drain holds the event loop:
  //    the end is when the bench could see it.)
  const { child, port, logFile } = await startServe(config(name, database, effect, true));
  try {
    const started = /^.*"msg":"drain started".*$/m.exec(readFileSync(logFile, 'utf8'));
    const t0 = started ? Date.parse(JSON.parse(started[0]).time) : undefined;
    if (t0 === undefined || Number.isNaN(t0)) throw new Error(`${name}: no "drain started" line with an ISO time in ${logFile}`);
    let m = await scrape(port);
    // How long HTTP waited for its first answer while the drain had work.
    const firstAnswerS = (Date.now() - t0) / 1000;
    while (backlogOf(m) > 0) {
      if (Date.now() - t0 > DRAIN_LIMIT_S * 1000) throw new Error(`${name}: not drained within ${DRAIN_LIMIT_S} s (${backlogOf(m)} left)`);
      await sleep(100);
      m = await scrape(port);
    }
    const seconds = (Date.now() - t0) / 1000;
    // The drain thread reports outcomes to the metrics in batches (every 100 ms): the last
    // may arrive just after the queue gauges read 0.
    for (const until = Date.now() + 1000; settled(m, 'done') + settled(m, 'retry') + settled(m, 'dead') < n && Date.now() < until;) {
      await sleep(50);
      m = await scrape(port);
    }
    const done = settled(m, 'done');
    const other = settled(m, 'retry') + settled(m, 'dead');
    const rate = done / seconds;
    console.log(
      `${name.padEnd(26)} ${String(done).padStart(6)} events  ${seconds.toFixed(2).padStart(6)} s  ${rate.toFixed(0).padStart(6)} events/s  ${(1000 / rate).toFixed(2)} ms/event` +
        `  (first /metrics answer ${firstAnswerS.toFixed(2)} s after the drain started)${other ? `  (${other} retried or dead!)` : ''}${done !== n && !args.db ? `  (${n} stored, ${done} done!)` : ''}`,
    );
    if (other || (done !== n && !args.db)) process.exitCode = 1;
    return { rate, rss: rssMb(child.pid) };
  } finally {
    await stop(child);
  }
}

/**
 * `true` spawned n times from Node, one after another, each awaited to its exit; with
 * `sync`, each after one byte written to a file in the bench's directory and fdatasynced.
 */
async function bareSpawn(label, n, { sync = false } = {}) {
  const mark = sync ? await open(join(dir, 'running-mark'), 'w') : undefined;
  const byte = Buffer.from('x');
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    if (mark !== undefined) {
      await mark.write(byte, 0, 1, i);
      await mark.datasync();
    }
    await new Promise((resolve, reject) => {
      const child = spawn('true', [], { stdio: 'ignore' });
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`true exited ${code}`))));
    });
  }
  const seconds = (performance.now() - t0) / 1000;
  await mark?.close();
  const rate = n / seconds;
  console.log(
    `${label.padEnd(26)} ${String(n).padStart(6)} spawns  ${seconds.toFixed(2).padStart(6)} s  ${rate.toFixed(0).padStart(6)} spawns/s  ${(1000 / rate).toFixed(2)} ms/spawn`,
  );
  return rate;
}

/**
 * The spawn + fdatasync loop in a node process that first fills `mb` MB of memory (touched,
 * so it is resident), as a process of serve's size would run it.
 */
function sizedSpawn(label, mb, n) {
  const script = `
    import { spawn } from 'node:child_process';
    import { open } from 'node:fs/promises';
    const fill = [];
    const more = ${Math.round(mb)} - Math.round(process.memoryUsage().rss / 2 ** 20);
    for (let i = 0; i < more; i++) fill.push(Buffer.alloc(2 ** 20, i));
    const mark = await open(${JSON.stringify(join(dir, 'running-mark-sized'))}, 'w');
    const byte = Buffer.from('x');
    const t0 = performance.now();
    for (let i = 0; i < ${n}; i++) {
      await mark.write(byte, 0, 1, i);
      await mark.datasync();
      await new Promise((resolve, reject) => spawn('true', [], { stdio: 'ignore' }).once('error', reject).once('exit', resolve));
    }
    console.log(JSON.stringify({ seconds: (performance.now() - t0) / 1000, rss: process.memoryUsage().rss / 2 ** 20, kept: fill.length }));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: DRAIN_LIMIT_S * 1000 });
  if (r.status !== 0) throw new Error(`${label}: ${r.error?.message ?? r.stderr}`);
  const { seconds, rss } = JSON.parse(r.stdout);
  const rate = n / seconds;
  console.log(
    `${label.padEnd(26)} ${String(n).padStart(6)} spawns  ${seconds.toFixed(2).padStart(6)} s  ${rate.toFixed(0).padStart(6)} spawns/s  ${(1000 / rate).toFixed(2)} ms/spawn  (RSS ${rss.toFixed(0)} MB)`,
  );
  return rate;
}

const where = args.db ? args.db.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@') : `SQLite (WAL, synchronous=FULL) in ${dir}`;
console.log(`drain benchmark: node ${process.version}, receiver serve (node ${UNIT_NODE_OPTIONS.join(' ')}), logs at info, ${where}`);
try {
  const { rate: mod } = await run('module-noop', { module: MODULE_FILE }, MODULE_EVENTS);
  const before = await bareSpawn('bare spawn loop', EXEC_EVENTS);
  const syncedBefore = await bareSpawn('spawn + fdatasync loop', EXEC_EVENTS, { sync: true });
  const { rate: exec, rss } = await run('exec-true', { exec: ['true'] }, EXEC_EVENTS);
  const syncedAfter = await bareSpawn('spawn + fdatasync again', EXEC_EVENTS, { sync: true });
  const sized = sizedSpawn(`the same at serve's ${rss.toFixed(0)} MB`, rss, EXEC_EVENTS);
  const after = await bareSpawn('bare spawn loop again', EXEC_EVENTS);
  const bare = (before + after) / 2;
  const synced = (syncedBefore + syncedAfter) / 2;
  console.log(
    `no-op module: ${mod.toFixed(0)} events/s; exec true: ${exec.toFixed(0)} events/s; bare spawn loop: ${bare.toFixed(0)} spawns/s; spawn + fdatasync: ${synced.toFixed(0)} a second (means of before and after)`,
  );
  console.log(
    `exec / bare spawn = ${(exec / bare).toFixed(2)}   exec / (spawn + fdatasync) = ${(exec / synced).toFixed(2)}   exec / (the same at serve's size) = ${(exec / sized).toFixed(2)}   module / exec = ${(mod / exec).toFixed(1)}x`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
