// Drain benchmark: events per second through the real drain loop on a real SQLite file
// (WAL, synchronous=FULL), for a no-op module effect and for an exec effect running `true`.
//
//   npm run build && node bench/drain.mjs [--module-events 5000] [--exec-events 1000] [--db postgres://...]
//
// Each run stores N events first (not timed), starts the drain, and times until every event
// is done. Per event the module path commits 3 transactions (claim, effect + ledger, done);
// the exec path commits 4 (claim, ledger "running", ledger "done", done) and forks a process.
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';

const ROOT = new URL('..', import.meta.url).pathname;
const { resolveConfig } = await import(join(ROOT, 'dist/config/load.js'));
const { startDrain } = await import(join(ROOT, 'dist/drain/loop.js'));
const { openStore } = await import(join(ROOT, 'dist/store/open.js'));
const { createLogger } = await import(join(ROOT, 'dist/log.js'));

const { values: args } = parseArgs({
  options: {
    'module-events': { type: 'string', default: '5000' },
    'exec-events': { type: 'string', default: '1000' },
    db: { type: 'string' },
  },
});

const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-drain-'));
writeFileSync(join(dir, 'noop.mjs'), 'export default async function () {}\n');

async function run(name, effect, n) {
  const database = args.db ?? join(dir, `${name}.db`);
  const config = resolveConfig(
    {
      database,
      sources: { bench: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' } },
      drain: { pollMs: 1000, leaseSeconds: 60 },
      routes: [{ name, source: 'bench', events: ['*'], key: '{body.id}', effect }],
    },
    join(dir, 'receiver.config.json'),
  );
  const store = await openStore(config.database, { busyTimeoutMs: 5000, server: true });
  const run = `${name}-${Date.now()}`;
  const pending = [];
  for (let i = 0; i < n; i++) {
    const body = Buffer.from(JSON.stringify({ id: `${run}-${i}`, type: 'bench.event', data: { n: i, pad: 'x'.repeat(400) } }));
    pending.push(
      store.ingest({
        source: 'bench', deliveryId: `${run}-${i}`, eventType: 'bench.event', headers: { 'content-type': 'application/json' }, body,
        bodySha256: createHash('sha256').update(body).digest('hex'), receivedAt: Date.now(), successStatus: 202, onConflict: 'reject',
      }),
    );
  }
  await Promise.all(pending);

  let done = 0;
  let failed = 0;
  let finish;
  const all = new Promise((r) => (finish = r));
  const t0 = performance.now();
  const drain = startDrain({
    config,
    store,
    logger: createLogger('silent'),
    onEvent: (e) => {
      if (e.status !== 'done') failed++;
      if (++done === n) finish();
    },
  });
  await all;
  const seconds = (performance.now() - t0) / 1000;
  await drain.stop(1000);
  await store.close();
  const rate = n / seconds;
  console.log(`${name.padEnd(12)} ${String(n).padStart(6)} events  ${seconds.toFixed(2).padStart(6)} s  ${rate.toFixed(0).padStart(6)} events/s  ${(1000 / rate).toFixed(2)} ms/event${failed ? `  (${failed} not done!)` : ''}`);
  return rate;
}

console.log(`node ${process.version}, ${args.db ? 'postgres' : 'SQLite (WAL, synchronous=FULL)'} in ${args.db ? args.db.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@') : dir}`);
try {
  const mod = await run('module-noop', { module: './noop.mjs' }, Number(args['module-events']));
  const exec = await run('exec-true', { exec: ['true'] }, Number(args['exec-events']));
  console.log(`module/exec ratio: ${(mod / exec).toFixed(1)}x`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
