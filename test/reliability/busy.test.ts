import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe, tempDir, writeConfig } from '../helpers.js';
import {
  deliverUntilAcked,
  liveTarget,
  inspect,
  integrityCheck,
  newTally,
  percentile,
  printReport,
  round1,
  SECRET_ENV,
  shopSource,
  SIZES,
  TEST_TIMEOUT_MS,
} from './harness.js';

/**
 * A retry storm against a locked database: another process holds the write lock longer
 * than busyTimeoutMs (a stuck cron job, an operator's sqlite3 shell) while 32 senders
 * deliver and re-send as soon as they get a 503. Every answer is 202 or 503 with
 * Retry-After, a 503 comes within a bound, and once the lock is gone everything is stored.
 */
describe('reliability: a retry storm against a locked database', () => {
  const tmp = tempDir('receiver-busy-');
  afterAll(tmp.cleanup);

  it(
    '503 with Retry-After while another process holds the lock past busyTimeoutMs; nothing lost once it lets go',
    async () => {
      const busyTimeoutMs = 500;
      const file = writeConfig(tmp.dir, { sources: { shop: shopSource }, busyTimeoutMs, drain: { leaseSeconds: 2, pollMs: 100 } });
      const serve = await startServe(file, { env: SECRET_ENV });
      const db = inspect(join(tmp.dir, 'receiver.db'));
      const deadline = Date.now() + TEST_TIMEOUT_MS - 10_000;
      const tally = newTally();
      // Senders deliver until the holds are over (bounded by count and time).
      const cap = SIZES.load * 25;
      let next = 0;
      let holding = true;
      const unavailableMs: number[] = [];
      const senders = Promise.all(
        Array.from({ length: 32 }, async () => {
          while (holding && next < cap && Date.now() < deadline) {
            const id = `busy-${next++}`;
            await deliverUntilAcked(
              liveTarget(serve),
              '/webhooks/shop',
              { deliveryId: id, body: JSON.stringify({ id, type: 'order.paid' }) },
              tally,
              deadline,
              (a) => {
                if (a.status === 503) unavailableMs.push(a.ms);
              },
            );
          }
        }),
      );
      // Two long holds of the write lock, 3 s and 2 s, with load running before, between and after.
      let holds = 0;
      for (const holdMs of [3000, 2000]) {
        await sleep(300);
        db.exec('BEGIN IMMEDIATE');
        holds += 1;
        await sleep(holdMs);
        db.exec('COMMIT');
      }
      await sleep(300);
      holding = false;
      await senders;
      const total = next;
      await serve.stop();

      const stored = new Set((db.prepare(`SELECT delivery_id AS d FROM events`).all() as { d: string }[]).map((r) => r.d));
      const integrity = integrityCheck(db);
      db.close();
      const lost = [...tally.acked.keys()].filter((d) => !stored.has(d));
      printReport(`retry storm, busyTimeoutMs ${busyTimeoutMs}`, {
        deliveries: total,
        requests: tally.requests,
        answers: Object.fromEntries(tally.byStatus),
        lockHolds: holds,
        acknowledged: tally.acked.size,
        stored: stored.size,
        lost: lost.length,
        unavailableP50Ms: round1(percentile(unavailableMs, 50)),
        unavailableMaxMs: round1(Math.max(0, ...unavailableMs)),
        integrity,
        exitCode: serve.child.exitCode,
      });
      expect(tally.unexpected).toEqual([]);
      expect(tally.networkErrors).toBe(0);
      expect([...tally.byStatus.keys()].sort()).toEqual([202, 503]);
      expect(holds).toBe(2);
      expect(tally.acked.size).toBe(total);
      expect(lost).toEqual([]);
      expect(stored.size).toBe(total);
      // A request waits for the lock at most busyTimeoutMs from its arrival, counting the time
      // it spent queued behind batches that were themselves waiting (then 503), never the hold.
      // The margin: SQLite's busy handler sleeps up to 100 ms at a time, and HTTP; on a 2-core
      // machine shared with other test files, waiting for a CPU (seen: 1.23 s at load 13).
      // The hold itself lasts 2-3 s, so a request that waited it out would still fail this.
      expect(unavailableMs.length).toBeGreaterThan(0);
      expect(Math.max(...unavailableMs)).toBeLessThan(busyTimeoutMs + 1000);
      expect(integrity).toBe('ok');
      expect(serve.child.exitCode).toBe(0);
    },
    TEST_TIMEOUT_MS,
  );
});
