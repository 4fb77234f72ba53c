import { createHmac } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * Three `receiver serve` processes on one fresh PostgreSQL database, as behind a load
 * balancer. A bounded load whose duplicates land on other processes than their originals:
 * one row per delivery id, every acknowledged delivery stored, every business key's
 * effect run exactly once (the exec effect appends its key, and its serve's pid, to a file).
 */

const pgOk = await postgresAvailable();
if (!pgOk) {
  describe.skip('three serve processes on PostgreSQL (PostgreSQL not reachable; see the notice above)', () => {
    it('runs against PostgreSQL', () => {});
  });
}

const SECRET = 'multi-secret';
const DELIVERIES = 300;
const DISTINCT = 200; // the other 100 are duplicates (same id, same bytes)
const KEYS = 100; // two distinct events per business key: the second one's effect is skipped
const CONCURRENCY = 20;

interface Delivery {
  id: string;
  body: string;
  signature: string;
}

function delivery(i: number): Delivery {
  const id = `evt_${i}`;
  const body = JSON.stringify({ id, type: 'order.paid', key: `cus_${i % KEYS}` });
  return { id, body, signature: createHmac('sha256', SECRET).update(body).digest('hex') };
}

/** Deterministic shuffle (no flakiness from Math.random), so duplicates interleave with originals. */
function shuffled<T>(list: T[]): T[] {
  const out = [...list];
  let seed = 42;
  for (let i = out.length - 1; i > 0; i--) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    const j = seed % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe.runIf(pgOk)('three serve processes on one PostgreSQL database', () => {
  let tmp: ReturnType<typeof tempDir>;
  let db: TestDatabase;
  const serves: ServeProcess[] = [];

  beforeAll(async () => {
    tmp = tempDir('receiver-pg-multi-');
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await Promise.all(serves.map((s) => s.stop('SIGKILL')));
    await db?.drop();
    tmp?.cleanup();
  });

  // Three serves, a bounded load and the drain of every key: about 10 s idle, past 30 s on a loaded 2-core machine.
  it('stores one row per delivery id and runs every business key once, under load with duplicates spread over all three', async () => {
    const out = join(tmp.dir, 'effects.txt');
    const file = writeConfig(tmp.dir, {
      database: db.url,
      sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' } },
      drain: { leaseSeconds: 60, pollMs: 100 },
      routes: [
        {
          name: 'licence',
          source: 'shop',
          key: '{body.key}',
          // One line per run: the business key and the pid of the serve that ran it.
          effect: { exec: ['/bin/sh', '-c', 'printf "%s %s\\n" "$RECEIVER_KEY" "$PPID" >> "$1"', 'sh', out], timeoutSeconds: 20 },
        },
      ],
    });
    // Started one after another: the first migrates, the others find the schema current.
    for (let i = 0; i < 3; i++) serves.push(await startServe(file));

    const originals = Array.from({ length: DISTINCT }, (_, i) => delivery(i));
    const duplicates = Array.from({ length: DELIVERIES - DISTINCT }, (_, i) => delivery((i * 7) % DISTINCT));
    const sends = shuffled([...originals, ...duplicates]);

    const acked = new Map<string, number>(); // delivery id -> event id, from every 2xx answer
    const statuses = new Map<number, number>();
    let next = 0;
    const worker = async () => {
      while (next < sends.length) {
        const n = next++;
        const d = sends[n]!;
        // Round robin, so a duplicate usually reaches another process than its original.
        const serve = serves[n % 3]!;
        for (let attempt = 1; ; attempt++) {
          const res = await fetch(`${serve.url}/webhooks/shop`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-signature': d.signature },
            body: d.body,
          });
          const text = await res.text();
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
          // A sender retries a 503; anything else is final.
          if (res.status === 503 && attempt < 5) continue;
          if (res.status >= 200 && res.status < 300) {
            const id = (JSON.parse(text) as { id: number }).id;
            const before = acked.get(d.id);
            // Every answer for one delivery id names the same event.
            if (before !== undefined) expect(id).toBe(before);
            acked.set(d.id, id);
          }
          break;
        }
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));

    expect([...statuses.keys()].filter((s) => s !== 202 && s !== 503)).toEqual([]);
    expect(acked.size).toBe(DISTINCT);

    // One row per delivery id, and it is the event each 2xx answer named.
    const rows = await db.query<{ id: number; delivery_id: string }>('SELECT id, delivery_id FROM events');
    expect(rows).toHaveLength(DISTINCT);
    const stored = new Map(rows.map((r) => [r.delivery_id, r.id]));
    for (const [deliveryId, eventId] of acked) expect(stored.get(deliveryId)).toBe(eventId);
    const dupCount = await db.query<{ n: number }>('SELECT sum(duplicates)::bigint AS n FROM events');
    expect(dupCount[0]!.n).toBe(DELIVERIES - DISTINCT);

    // Wait (bounded) for the three drains to finish every event.
    const until = Date.now() + 60_000;
    for (;;) {
      const left = await db.query<{ n: number }>(`SELECT count(*) AS n FROM events WHERE status <> 'done'`);
      if (left[0]!.n === 0) break;
      if (Date.now() > until)
        throw new Error(`${left[0]!.n} events still not done: ${JSON.stringify(await db.query(`SELECT status, count(*) FROM events GROUP BY 1`))}`);
      await new Promise((r) => setTimeout(r, 100));
    }

    const lines = existsSync(out) ? readFileSync(out, 'utf8').trim().split('\n') : [];
    const keys = lines.map((l) => l.split(' ')[0]);
    expect(keys).toHaveLength(KEYS);
    expect(new Set(keys).size).toBe(KEYS);
    const ledger = await db.query<{ status: string; runs: number; n: number }>('SELECT status, runs, count(*)::bigint AS n FROM effects GROUP BY 1, 2');
    expect(ledger).toEqual([{ status: 'done', runs: 1, n: KEYS }]);
    // The second event of each key found its effect done, and skipped it.
    const outcomes = await db.query<{ outcome: string; n: number }>('SELECT outcome, count(*)::bigint AS n FROM attempts GROUP BY 1 ORDER BY 1');
    expect(outcomes.filter((o) => o.outcome === 'ok' || o.outcome === 'skipped')).toEqual([
      { outcome: 'ok', n: KEYS },
      { outcome: 'skipped', n: DISTINCT - KEYS },
    ]);
    // Every run was one of the serves' (each serve is the effect's parent process). The one
    // route is one lane, serial across the three: which of them runs it is left to chance (the
    // drain whose claim ends may claim the next batch at once), so the runs need not spread.
    const ranBy = new Set(lines.map((l) => l.split(' ')[1]));
    for (const pid of ranBy) expect(serves.map((s) => String(s.child.pid))).toContain(pid);

    for (const s of serves.splice(0)) expect(await s.stop('SIGTERM')).toBe(0);
  }, 90_000);
});
