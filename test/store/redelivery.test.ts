import Database from 'better-sqlite3';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/open.js';
import type { NewEvent, Store } from '../../src/store/types.js';
import { newEvent } from '../drain/helpers.js';
import { claimOne, tempDir } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * A sender's redelivery against what the store already holds: an event that is dead, and
 * (PostgreSQL) a row purged between the insert that skipped it and the read of its answer.
 */

const T0 = Date.UTC(2026, 5, 1);
const LEASE = 60_000;

const event = (deliveryId: string, body = `{"id":"${deliveryId}"}`): NewEvent =>
  newEvent({ source: 'shop', deliveryId, eventType: 'order.paid', body, receivedAt: T0 });

interface Opened {
  store: Store;
  exec(sql: string): Promise<void>;
  rows<R>(sql: string): Promise<R[]>;
  close(): Promise<void>;
}

const pgOk = await postgresAvailable();
const tmp = tempDir('receiver-redelivery-');
const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const db of databases) await db.drop();
  tmp.cleanup();
});

const backends: { name: string; skip: string | undefined; open: () => Promise<Opened & { db?: TestDatabase }> }[] = [
  {
    name: 'sqlite',
    skip: undefined,
    async open() {
      const file = join(tmp.dir, `r${databases.length}-${Date.now()}.db`);
      const store = await openStore(file, { busyTimeoutMs: 3000, server: true });
      const raw = new Database(file, { timeout: 3000 });
      return {
        store,
        exec: async (sql) => void raw.exec(sql),
        rows: async <R>(sql: string) => raw.prepare(sql).all() as R[],
        close: async () => {
          await store.close();
          raw.close();
        },
      };
    },
  },
  {
    name: 'postgres',
    skip: pgOk ? undefined : 'PostgreSQL not reachable (see the notice above)',
    async open() {
      const db = await createTestDatabase();
      databases.push(db);
      const store = await openStore(db.url, { busyTimeoutMs: 3000, server: true });
      return {
        store,
        db,
        exec: async (sql) => void (await db.query(sql)),
        rows: async <R>(sql: string) => (await db.query(sql)) as R[],
        close: () => store.close(),
      };
    },
  },
];

describe.each(backends)('$name', (backend) => {
  it('a redelivery of an event that is already dead is a duplicate: the stored answer, counted, and no new attempt', async (ctx) => {
    if (backend.skip !== undefined) ctx.skip(backend.skip);
    const o = await backend.open();
    try {
      const first = await o.store.ingest(event('a'));
      expect(first.outcome).toBe('accepted');
      // Dead after its attempts ran out.
      await o.exec(`UPDATE events SET status = 'dead', attempts = 5, finished_at = ${T0 + 1000}, last_error = 'gave up' WHERE id = ${first.eventId}`);

      const again = await o.store.ingest({ ...event('a'), receivedAt: T0 + 2000 });
      expect(again).toEqual({ ...first, outcome: 'duplicate' });
      expect(await o.rows(`SELECT status, attempts, duplicates, last_error FROM events`)).toEqual([
        { status: 'dead', attempts: 5, duplicates: 1, last_error: 'gave up' },
      ]);
      // Nothing for the drain to take: the redelivery did not bring it back.
      expect(await claimOne(o.store, 'drain', T0 + 3000, LEASE)).toBeUndefined();
      // A changed body under the same id is still a conflict of the dead event.
      const changed = await o.store.ingest(event('a', '{"id":"a","changed":true}'));
      expect(changed).toMatchObject({ outcome: 'conflict', status: 409, eventId: first.eventId });
    } finally {
      await o.close();
    }
  });
});

describe.runIf(pgOk)('postgres: a row purged between the insert that skipped it and the read of its answer', () => {
  it('the sender gets 202 for a new event: its delivery is stored afresh, not lost and not answered from a row that is gone', async () => {
    const db = await createTestDatabase();
    databases.push(db);
    const store = await openStore(db.url, { busyTimeoutMs: 5000, server: true });
    try {
      const first = await store.ingest(event('a'));
      expect(first.outcome).toBe('accepted');
      // Another session (a purge) holds the row: the redelivery's INSERT ... ON CONFLICT DO
      // NOTHING skips it, and the read that answers it waits behind this lock.
      await db.query('BEGIN');
      await db.query(`SELECT id FROM events WHERE delivery_id = 'a' FOR UPDATE`);
      const redelivery = store.ingest(event('a'));
      const until = Date.now() + 10_000;
      for (;;) {
        const waiting = await db.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'receiver' AND wait_event_type = 'Lock'`,
        );
        if (waiting[0]!.n > 0) break;
        if (Date.now() > until) throw new Error('the redelivery never waited on the row lock');
        await new Promise((r) => setTimeout(r, 10));
      }
      // The purge deletes the row and commits: the read finds nothing.
      await db.query(`DELETE FROM events WHERE delivery_id = 'a'`);
      await db.query('COMMIT');
      const answer = await redelivery;
      expect(answer.outcome).toBe('accepted');
      expect(answer.status).toBe(202);
      expect(answer.eventId).not.toBe(first.eventId);
      expect(await db.query(`SELECT id, delivery_id, status FROM events`)).toEqual([{ id: answer.eventId, delivery_id: 'a', status: 'pending' }]);
    } finally {
      await db.query('ROLLBACK').catch(() => undefined);
      await store.close();
    }
  });
});
