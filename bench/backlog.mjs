// What a backlog costs the drain's own steps: the time of one claim of a lane's next units
// (and their release, so the next claim finds them again) and of the drain's look for the
// next due time, with 16 units waiting in one lane and with many more. A drain whose steps
// grew with the backlog would fall further behind the longer it is behind; these should
// stay flat. Beside them, what a GET /metrics scrape reads (the queue and lane gauges:
// queueStats and laneStats), which on SQLite runs on serve's HTTP thread: it may grow with
// the backlog's index entries, but must not read every waiting event's row. The baseline is
// the same steps at the smallest backlog, in the same run.
//
//   npm run build && node bench/backlog.mjs [--backlogs 16,1000,10000] [--rounds 200] [--postgres URL]
//
// One route, so one lane ("deploy"), on SQLite in a temp file (and on PostgreSQL with
// --postgres, in a database the bench creates and drops). Printed per backlog: the mean
// time of a claim of 16 units, of their release (each event's status derived again, as
// when a unit is settled), of nextDueAt with the lane free, of nextDueAt with the lane
// running here (its backlog must not be walked then either), and of a scrape's reads.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { planStored } from '../dist/drain/loop.js';
import { SqliteStore } from '../dist/store/sqlite/index.js';
import { PostgresStore } from '../dist/store/postgres/index.js';

const { values: args } = parseArgs({
  options: { backlogs: { type: 'string', default: '16,1000,10000' }, rounds: { type: 'string', default: '200' }, postgres: { type: 'string' } },
});
const BACKLOGS = args.backlogs.split(',').map(Number);
const ROUNDS = Number(args.rounds);
for (const v of [...BACKLOGS, ROUNDS]) if (!(v > 0)) throw new Error('--backlogs and --rounds must be positive numbers');
const routes = [{ name: 'deploy', source: 'shop', events: ['*'], key: '{id}', effect: { exec: ['true'] } }];

function event(i, now) {
  const body = Buffer.from(JSON.stringify({ order: `o${i}`, pad: 'x'.repeat(1000) }));
  return {
    source: 'shop',
    deliveryId: `d${i}`,
    eventType: 'order',
    headers: { 'content-type': 'application/json' },
    body,
    bodySha256: createHash('sha256').update(body).digest('hex'),
    receivedAt: now,
    successStatus: 202,
    onConflict: 'reject',
  };
}

async function time(rounds, f) {
  await f();
  const t = process.hrtime.bigint();
  for (let i = 0; i < rounds; i++) await f();
  return Number(process.hrtime.bigint() - t) / rounds / 1000;
}

async function measure(store, backlog) {
  const now = Date.now();
  await Promise.all(Array.from({ length: backlog }, (_, i) => store.ingest(event(i, now))));
  while ((await planStored(store, routes, now)) > 0);
  const at = now + 1000;
  let claim = 0n;
  let release = 0n;
  await time(ROUNDS, async () => {
    const t = process.hrtime.bigint();
    const units = await store.claimUnits(`bench:1:${randomBytes(3).toString('hex')}#1`, at, 60_000, { busyLanes: [], lanes: 8, perLane: 16 });
    const claimed = process.hrtime.bigint();
    claim += claimed - t;
    if (units.length !== Math.min(16, backlog)) throw new Error(`claimed ${units.length} units`);
    await store.releaseUnits(
      units.map((u) => u.lease),
      at,
    );
    release += process.hrtime.bigint() - claimed;
  });
  claim = Number(claim) / (ROUNDS + 1) / 1000;
  release = Number(release) / (ROUNDS + 1) / 1000;
  const free = await time(ROUNDS, () => store.nextDueAt([], at));
  const busy = await time(ROUNDS, () => store.nextDueAt(['deploy'], at));
  const scrape = await time(ROUNDS, () => Promise.all([store.queueStats(), store.laneStats()]));
  return { backlog, claim, release, free, busy, scrape };
}

function print(name, results) {
  const [base] = results;
  console.log(`\n${name}: mean of ${ROUNDS} rounds, us (ratio to a backlog of ${base.backlog})`);
  console.log(
    `${'backlog'.padStart(8)}${'claim of 16'.padStart(24)}${'release of 16'.padStart(24)}${'next due, lane free'.padStart(24)}${'next due, lane busy'.padStart(24)}${'metrics scrape'.padStart(24)}`,
  );
  const cell = (v, b) => `${v.toFixed(0)} (${(v / b).toFixed(2)}x)`.padStart(24);
  for (const r of results)
    console.log(
      `${String(r.backlog).padStart(8)}${cell(r.claim, base.claim)}${cell(r.release, base.release)}${cell(r.free, base.free)}${cell(r.busy, base.busy)}${cell(r.scrape, base.scrape)}`,
    );
}

const sqlite = [];
// The first backlog measured again at the end, after the others: its first run warms up the code.
for (const backlog of [...BACKLOGS, BACKLOGS[0]]) {
  const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-backlog-'));
  // As serve's drain thread opens it: commits not synced one by one (see explicitSync).
  const store = new SqliteStore(join(dir, 'receiver.db'), { busyTimeoutMs: 5000, explicitSync: true });
  try {
    sqlite.push(await measure(store, backlog));
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
print('SQLite', [sqlite.pop(), ...sqlite.slice(1)]);

if (args.postgres !== undefined) {
  const results = [];
  for (const backlog of [...BACKLOGS, BACKLOGS[0]]) {
    const name = `receiver_bench_backlog_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: args.postgres });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    const url = new URL(args.postgres);
    url.pathname = `/${name}`;
    try {
      const store = await PostgresStore.open(url.toString(), { busyTimeoutMs: 5000 });
      try {
        results.push(await measure(store, backlog));
      } finally {
        await store.close();
      }
    } finally {
      await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
      await admin.end();
    }
  }
  print('PostgreSQL', [results.pop(), ...results.slice(1)]);
}
