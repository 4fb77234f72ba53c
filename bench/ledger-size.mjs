#!/usr/bin/env node
/* global performance */
/**
 * The effect ledger's size, and what `stats` and `purge --ledger-days` cost at that size.
 *
 *   npm run build && node bench/ledger-size.mjs [--keys 1000000] [--old-share 0.1]
 *                                              [--postgres postgres://...] [--skip-sqlite]
 *
 * 1. SQLite: a new database from dist/ (the real schema), then --keys ledger rows as the
 *    drain leaves them, in random key order: done, key `stripe-licence:ch_3N...` (39
 *    characters), business key, event id, a run token (a UUID), started and finished
 *    times. --old-share of them finished 400 days ago, the rest 10 days ago; no event
 *    refers to any of them (their events were purged).
 *    Prints the ledger's bytes (dbstat: the table and its key index) and the file's size,
 *    per row.
 * 2. `receiver stats --json` as a subprocess (it also reads the ledger's size and oldest
 *    entry), then `receiver purge --ledger-days 30 --json` (deletes the old share, in
 *    batches of 1000 with the CLI's pauses), then the same purge again (nothing left to
 *    delete: the walk through the ledger alone).
 * 3. With --postgres (an admin URL): the same in a new database made for the run and
 *    dropped after it; rows inserted by generate_series; bytes from pg_total_relation_size.
 * Bounded: every subprocess is killed after 120 s.
 *
 * At 1,000,000 keys, --old-share 0.1, on 2 cores shared with other work (load average
 * 15): SQLite 211 bytes a key (201.5 MiB, the file the same), `stats` 4.0-6.6 s, purging
 * the 100,000 old keys 67-97 s (batch median 250-340 ms, pick and delete), a purge with
 * nothing left to delete 22 s (100 reads of 10,000 keys, about 220 ms each). PostgreSQL
 * 282 bytes a key (268.5 MiB), `stats` 3.6 s, purge 75 s, nothing left 20 s. Each figure
 * includes starting the CLI (about 0.5 s).
 */
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const REPO = new URL('..', import.meta.url).pathname;
const BIN = join(REPO, 'bin/receiver.js');
const { openSqlite } = await import(join(REPO, 'dist/store/sqlite/open.js'));

const { values: args } = parseArgs({
  options: {
    keys: { type: 'string', default: '1000000' },
    'old-share': { type: 'string', default: '0.1' },
    postgres: { type: 'string' },
    'skip-sqlite': { type: 'boolean', default: false },
  },
});
const KEYS = Number(args.keys);
const OLD_EVERY = Math.round(1 / Number(args['old-share']));
if (!Number.isInteger(KEYS) || KEYS < 2) throw new Error('--keys must be a whole number of at least 2');
const DAY = 86_400_000;
const now = Date.now();

const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-ledger-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
const config = join(dir, 'receiver.config.json');
writeFileSync(config, JSON.stringify({ sources: {} }));
const log = (...a) => console.error(`[${new Date().toISOString().slice(11, 19)}]`, ...a);
if (!Number.isInteger(OLD_EVERY) || OLD_EVERY < 1) throw new Error('--old-share must be between 0 and 1, e.g. 0.1');
const mb = (n) => `${(n / 1024 / 1024).toFixed(1)} MiB`;

/** Runs the CLI against `db`; its wall time and JSON output. */
function cli(db, ...cmd) {
  const started = performance.now();
  const r = spawnSync(process.execPath, [BIN, ...cmd, '-c', config, '--db', db, '--json'], { encoding: 'utf8', timeout: 120_000 });
  const ms = performance.now() - started;
  if (r.status !== 0) throw new Error(`receiver ${cmd.join(' ')} exited ${r.status}: ${r.stderr}`);
  return { ms, out: JSON.parse(r.stdout) };
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** A Stripe charge id as a business key: `ch_3N` and 19 more characters. */
function chargeId(i) {
  let s = '';
  for (let k = 0, x = i * 2654435761; k < 19; k++, x = Math.floor(x / 7) + k * 131) s += ALNUM[x % ALNUM.length];
  return `ch_3N${s}`;
}

function measure(name, db, bytes, fileBytes) {
  const results = { backend: name, keys: KEYS, ledgerBytes: bytes, bytesPerKey: Math.round(bytes / KEYS) };
  if (fileBytes !== undefined) results.fileBytesPerKey = Math.round(fileBytes / KEYS);
  const stats = cli(db, 'stats');
  results.statsMs = Math.round(stats.ms);
  results.statsLedger = stats.out.ledger;
  const purge = cli(db, 'purge', '--ledger-days', '30');
  results.purge = { ms: Math.round(purge.ms), removed: purge.out.ledgerPurged, batches: purge.out.batches, batchMs: purge.out.batchMs };
  const again = cli(db, 'purge', '--ledger-days', '30');
  results.purgeNothingLeft = { ms: Math.round(again.ms), removed: again.out.ledgerPurged, batchMs: again.out.batchMs };
  return results;
}

// --- SQLite ------------------------------------------------------------------------------
const file = join(dir, 'receiver.db');
if (!args['skip-sqlite']) {
  const started = performance.now();
  const db = openSqlite(file, { busyTimeoutMs: 5000 });
  // Building only; the CLI runs with the receiver's settings.
  db.pragma('synchronous = OFF');
  db.pragma('cache_size = -524288');
  const ins = db.prepare(`INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, run_token, started_at, finished_at)
    VALUES (?, 'stripe-licence', ?, 'done', ?, 1, ?, ?, ?)`);
  const bytesOfEffects = () =>
    db
      .prepare(`SELECT coalesce(sum(pgsize), 0) FROM dbstat('main', 1) WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name = 'effects')`)
      .pluck()
      .get();
  const empty = bytesOfEffects();
  for (let from = 0; from < KEYS; from += 100_000) {
    db.transaction(() => {
      for (let i = from; i < Math.min(KEYS, from + 100_000); i++) {
        const business = chargeId(i);
        const finished = now - (i % OLD_EVERY === 0 ? 400 : 10) * DAY - i;
        ins.run(`stripe-licence:${business}`, business, 10_000_000 + i, randomUUID(), finished - 150, finished);
      }
    })();
  }
  db.pragma('wal_checkpoint(TRUNCATE)');
  const bytes = bytesOfEffects() - empty;
  const pageBytes = db.pragma('page_count', { simple: true }) * db.pragma('page_size', { simple: true });
  db.close();
  log(`sqlite: ${KEYS} keys inserted in ${Math.round(performance.now() - started)} ms; ledger ${mb(bytes)}, file ${mb(statSync(file).size)}`);
  const r = measure('sqlite', file, bytes, pageBytes);
  console.log(JSON.stringify(r));
}

// --- PostgreSQL --------------------------------------------------------------------------
if (args.postgres !== undefined) {
  const { default: pg } = await import('pg');
  const admin = new pg.Client({ connectionString: args.postgres });
  await admin.connect();
  const name = `receiver_bench_ledger_${process.pid}`;
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(args.postgres);
  url.pathname = `/${name}`;
  try {
    // Creates the schema: the CLI migrates a new PostgreSQL database when it opens it.
    cli(url.href, 'stats');
    const c = new pg.Client({ connectionString: url.href });
    await c.connect();
    const size = async () => Number((await c.query(`SELECT pg_total_relation_size('effects') AS n`)).rows[0].n);
    const empty = await size();
    const started = performance.now();
    await c.query(
      `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, run_token, started_at, finished_at)
       SELECT 'stripe-licence:ch_3N' || k, 'stripe-licence', 'ch_3N' || k, 'done', 10000000 + i, 1, gen_random_uuid()::text,
              $1 - (CASE WHEN i % $4 = 0 THEN 400 ELSE 10 END) * $2::bigint - i - 150, $1 - (CASE WHEN i % $4 = 0 THEN 400 ELSE 10 END) * $2::bigint - i
       FROM (SELECT i, substr(md5(i::text), 1, 19) AS k FROM generate_series(0, $3 - 1) AS i) AS g`,
      [now, DAY, KEYS, OLD_EVERY],
    );
    await c.query('VACUUM ANALYZE effects');
    const bytes = (await size()) - empty;
    await c.end();
    log(`postgres: ${KEYS} keys inserted in ${Math.round(performance.now() - started)} ms; ledger ${mb(bytes)}`);
    console.log(JSON.stringify(measure('postgres', url.href, bytes)));
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
}
