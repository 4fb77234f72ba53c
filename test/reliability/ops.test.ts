import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, startServe, tempDir, writeConfig, type CliResult } from '../helpers.js';
import {
  deliverUntilAcked,
  liveTarget,
  inspect,
  integrityCheck,
  LONG,
  newTally,
  percentile,
  printReport,
  round1,
  SECRET_ENV,
  seeded,
  shopSource,
  SIZES,
  TEST_TIMEOUT_MS,
  printSeedOnFailure,
} from './harness.js';

/**
 * `purge`, `replay`, `stats` and `events list` run again and again against the database
 * file while `serve` takes a steady load and drains it through a module effect that writes
 * to the same file in the effect's transaction. No sender may see an error, no CLI run may
 * fail, and every effect still applies exactly once (plus once per forced replay).
 */

const DAY_MS = 86_400_000;
// Writes in the drain's transaction: the row and the ledger commit together, so `n` counts applications.
// "dead-" deliveries always fail: they go dead after two attempts, for `replay --dead` to bring back.
const HANDLER = `export default async function (event, ctx) {
  if (event.deliveryId.startsWith('dead-')) throw new Error('refused by the shop');
  await ctx.db.run('INSERT INTO shipped (delivery_id) VALUES (?) ON CONFLICT (delivery_id) DO UPDATE SET n = n + 1', [event.deliveryId]);
}
`;

describe('reliability: purge and replay while serve takes load', () => {
  const tmp = tempDir('receiver-ops-');
  afterAll(tmp.cleanup);

  it(
    'no 5xx reaches a sender, every CLI run succeeds, effects apply exactly once',
    async () => {
      printSeedOnFailure('test/reliability/ops.test.ts');
      const random = seeded(SIZES.seed);
      writeFileSync(join(tmp.dir, 'ship.mjs'), HANDLER);
      const file = writeConfig(tmp.dir, {
        sources: { shop: shopSource },
        routes: [{ name: 'ship', source: 'shop', events: ['*'], key: '{body.id}', effect: { module: './ship.mjs', timeoutSeconds: 5 } }],
        drain: { leaseSeconds: 30, pollMs: 100 },
        retry: { maxAttempts: 2, baseSeconds: 0.1, maxSeconds: 0.2 },
      });
      const dbPath = join(tmp.dir, 'receiver.db');
      const serve = await startServe(file, { env: SECRET_ENV });
      const db = inspect(dbPath);
      db.exec('CREATE TABLE shipped (delivery_id TEXT PRIMARY KEY, n INTEGER NOT NULL DEFAULT 1)');
      const deadline = Date.now() + TEST_TIMEOUT_MS - 20_000;

      // Load: 8 senders, until the hammering is over (bounded). Even deliveries are aged and
      // purged, one in ten of the others fails until it is dead.
      let hammering = true;
      let n = 0;
      const tally = newTally();
      const senders = Promise.all(
        Array.from({ length: 8 }, async () => {
          while (hammering && n < SIZES.load * 20 && Date.now() < deadline) {
            const i = n++;
            const id = i % 2 === 0 ? `age-${i}` : i % 10 === 1 ? `dead-${i}` : `keep-${i}`;
            await deliverUntilAcked(liveTarget(serve), '/webhooks/shop', { deliveryId: id, body: JSON.stringify({ id, type: 'order.paid' }) }, tally, deadline);
            // ~10 deliveries a second per sender: a steady load the drain can keep up with.
            await sleep(100);
          }
        }),
      );

      const cli = (args: string[]) => runCli([...args, '-c', file], { env: SECRET_ENV, timeoutMs: 60_000 });
      const failures: { args: string[]; result: CliResult }[] = [];
      const runs: Record<string, number> = {};
      const run = async (args: string[]) => {
        const r = await cli(args);
        const name = args[0] === 'events' ? 'events list' : args[0]!;
        runs[name] = (runs[name] ?? 0) + 1;
        if (r.code !== 0) failures.push({ args, result: r });
        return r;
      };
      let purged = 0;
      let revived = 0;
      const replayed = new Set<string>();
      const forced = new Map<string, number>();
      // Three rounds (the third forces its replays) are every combination the short run needs.
      const rounds = LONG ? 60 : 3;
      const age = db.prepare(`UPDATE events SET received_at = received_at - ? WHERE status = 'done' AND delivery_id LIKE 'age-%' AND received_at > ?`);
      const doneKeep = db.prepare(`SELECT id, delivery_id AS d FROM events WHERE status = 'done' AND delivery_id LIKE 'keep-%' ORDER BY random() LIMIT 40`);
      for (let round = 0; round < rounds && Date.now() < deadline; round++) {
        // Time moves in SQL: finished "age-" events become 40 days old.
        age.run(40 * DAY_MS, Date.now() - DAY_MS);
        // Replay done "keep-" events not replayed before (only this loop replays, so each is done when picked).
        const picks = (doneKeep.all() as { id: number; d: string }[]).filter((r) => !replayed.has(r.d)).slice(0, 5);
        for (const p of picks) replayed.add(p.d);
        const force = round % 3 === 2;
        if (force) for (const p of picks) forced.set(p.d, (forced.get(p.d) ?? 0) + 1);
        const [purge, , dead] = await Promise.all([
          run(['purge', '--days', '30', '--batch-size', '20', '--json']),
          picks.length > 0 ? run(['replay', ...picks.map((p) => String(p.id)), ...(force ? ['--force'] : []), '--json']) : Promise.resolve(undefined),
          run(['replay', '--dead', '--json']),
          run(['stats', '--json']),
          run(['events', 'list', '--limit', '5', '--json']),
        ]);
        if (purge.code === 0) purged += (JSON.parse(purge.stdout) as { purged: number }).purged;
        if (dead.code === 0) revived += (JSON.parse(dead.stdout) as { replayed: unknown[] }).replayed.length;
        await sleep(random() * 200);
      }
      hammering = false;
      await senders;

      // The drain finishes everything, replays included (bounded wait); "dead-" events end dead again.
      const notDone = db.prepare(`SELECT count(*) AS c FROM events WHERE status <> CASE WHEN delivery_id LIKE 'dead-%' THEN 'dead' ELSE 'done' END`);
      for (const t = Date.now(); (notDone.get() as { c: number }).c > 0 && Date.now() - t < 30_000;) await sleep(100);
      const left = (notDone.get() as { c: number }).c;
      const exit = await serve.stop();

      const stored = new Set((db.prepare(`SELECT delivery_id AS d FROM events`).all() as { d: string }[]).map((r) => r.d));
      const shipped = new Map((db.prepare(`SELECT delivery_id AS d, n FROM shipped`).all() as { d: string; n: number }[]).map((r) => [r.d, r.n]));
      const integrity = integrityCheck(db);
      db.close();
      const acked = [...tally.acked.keys()];
      const lostKeep = acked.filter((d) => d.startsWith('keep-') && !stored.has(d));
      const ackedAge = acked.filter((d) => d.startsWith('age-'));
      const storedAge = ackedAge.filter((d) => stored.has(d)).length;
      const wrongCounts = acked.filter((d) => shipped.get(d) !== (d.startsWith('dead-') ? undefined : 1 + (forced.get(d) ?? 0)));
      printReport(`purge and replay under load (seed ${SIZES.seed}${LONG ? ', long' : ''})`, {
        deliveries: tally.requests,
        answers: Object.fromEntries(tally.byStatus),
        p99Ms: round1(percentile(tally.latenciesMs, 99)),
        cliRuns: runs,
        cliFailures: failures.length,
        purged,
        replayed: replayed.size,
        forcedReplays: [...forced.values()].reduce((a, b) => a + b, 0),
        deadReplayed: revived,
        ackedAged: ackedAge.length,
        storedAged: storedAge,
        lostKept: lostKeep.length,
        effectsAppliedWrongly: wrongCounts.length,
        notDone: left,
        integrity,
        exitCode: exit,
      });
      expect(failures.map((f) => ({ args: f.args, code: f.result.code, stderr: f.result.stderr.slice(0, 500) }))).toEqual([]);
      expect(tally.unexpected).toEqual([]);
      expect([...tally.byStatus.keys()]).toEqual([202]);
      expect(lostKeep).toEqual([]);
      // Purge removed exactly the aged events it reported, no more.
      expect(storedAge + purged).toBe(ackedAge.length);
      expect(purged).toBeGreaterThan(0);
      expect(replayed.size).toBeGreaterThan(0);
      expect(revived).toBeGreaterThan(0);
      expect(wrongCounts.slice(0, 10).map((d) => ({ d, n: shipped.get(d), forced: forced.get(d) ?? 0 }))).toEqual([]);
      expect(left).toBe(0);
      expect(integrity).toBe('ok');
      expect(exit).toBe(0);
    },
    TEST_TIMEOUT_MS,
  );
});
