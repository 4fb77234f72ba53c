import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isReceiverError, ReceiverError } from '../../src/errors.js';
import type { EffectDb } from '../../src/store/drain-types.js';
import { openStore } from '../../src/store/open.js';
import { postgresError } from '../../src/store/postgres/errors.js';
import { PostgresStore } from '../../src/store/postgres/index.js';
import { LATEST_VERSION, migrations } from '../../src/store/postgres/migrations.js';
import { openSqlite } from '../../src/store/sqlite/open.js';
import { deriveEventStatus } from '../../src/store/drain/settle.js';
import { dialect } from '../../src/store/postgres/steps.js';
import type { NewEvent } from '../../src/store/types.js';
import { claimOne } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * What only PostgreSQL has to prove: its migrations, its mapping of server trouble to 503,
 * and the places where several receivers share one database without waiting on each other.
 * Everything both stores must do is in contract.test.ts.
 */

const pgOk = await postgresAvailable();
if (!pgOk) {
  describe.skip('PostgreSQL store (PostgreSQL not reachable; see the notice above)', () => {
    it('runs against PostgreSQL', () => {});
  });
}

const T0 = Date.UTC(2026, 5, 1);
const LEASE = 60_000;

function event(deliveryId: string, body = `{"id":"${deliveryId}"}`): NewEvent {
  const raw = Buffer.from(body);
  return {
    source: 'shop',
    deliveryId,
    eventType: 'order.paid',
    headers: {},
    body: raw,
    bodySha256: createHash('sha256').update(raw).digest('hex'),
    receivedAt: T0,
    successStatus: 202,
    onConflict: 'reject',
  };
}

const isUnavailable = (e: unknown) => isReceiverError(e, 'unavailable');

describe.runIf(pgOk)('PostgreSQL store', () => {
  const databases: TestDatabase[] = [];
  const fresh = async () => {
    const db = await createTestDatabase();
    databases.push(db);
    return db;
  };
  afterAll(async () => {
    for (const db of databases) await db.drop();
  });

  describe('migrations', () => {
    it('migrates an empty database once, even when three receivers start together; reopening changes nothing', async () => {
      const db = await fresh();
      const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open(db.url, { busyTimeoutMs: 5000 })));
      for (const s of stores) await s.close();
      const versions = await db.query<{ version: number; name: string }>('SELECT version, name FROM schema_version ORDER BY version');
      expect(versions.map((v) => v.version)).toEqual(Array.from({ length: LATEST_VERSION }, (_, i) => i + 1));
      await (await PostgresStore.open(db.url, { busyTimeoutMs: 5000 })).close();
      expect(await db.query('SELECT version FROM schema_version')).toHaveLength(LATEST_VERSION);
    });

    it('version 2 folds the conflict rows version 1 kept per repeat into one per differing body, counting the rest', async () => {
      const db = await fresh();
      await db.query('CREATE TABLE schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
      await db.query(migrations.find((m) => m.version === 1)!.sql);
      await db.query(`INSERT INTO schema_version (version, name) VALUES (1, 'initial')`);
      await db.query(
        `INSERT INTO events (source, delivery_id, event_type, received_at, body_sha256, response_status, next_attempt_at) VALUES ('s', 'd', 't', 1, 'a', 202, 1)`,
      );
      for (const [at, sha] of [
        [10, 'b'],
        [11, 'c'],
        [12, 'b'],
        [13, 'b'],
      ] as const) {
        await db.query(`INSERT INTO conflicts (event_id, source, delivery_id, received_at, body_sha256, body) SELECT id, 's', 'd', $1, $2, $3 FROM events`, [
          at,
          sha,
          Buffer.from(sha),
        ]);
      }
      await (await PostgresStore.open(db.url, { busyTimeoutMs: 5000 })).close();
      expect(await db.query(`SELECT received_at::int AS received_at, body_sha256, repeats FROM conflicts ORDER BY id`)).toEqual([
        { received_at: 10, body_sha256: 'b', repeats: 2 },
        { received_at: 11, body_sha256: 'c', repeats: 0 },
      ]);
    });

    it('refuses a database written by a newer receiver and leaves it untouched', async () => {
      const db = await fresh();
      await db.query('CREATE TABLE schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())');
      await db.query(`INSERT INTO schema_version (version, name) VALUES ($1, 'from the future')`, [LATEST_VERSION + 1]);
      await db.query('CREATE TABLE future (x int)');
      const before = await db.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`);
      const err = await PostgresStore.open(db.url, { busyTimeoutMs: 2000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ReceiverError);
      expect((err as ReceiverError).kind).toBe('schema');
      expect((err as Error).message).toMatch(
        new RegExp(
          `written by a newer receiver \\(schema version ${LATEST_VERSION + 1}; this receiver knows up to ${LATEST_VERSION}\\)\\. It was not changed\\.`,
        ),
      );
      expect(await db.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`)).toEqual(before);
      expect(await db.query('SELECT version FROM schema_version')).toEqual([{ version: LATEST_VERSION + 1 }]);
    });

    it('mirrors the SQLite schema column for column, with the PostgreSQL keys and indexes', async () => {
      const db = await fresh();
      await (await PostgresStore.open(db.url, { busyTimeoutMs: 2000 })).close();
      const sqlite = openSqlite(':memory:', { busyTimeoutMs: 0 });
      for (const table of ['events', 'conflicts', 'effects', 'attempts']) {
        const want = (sqlite.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map((c) => c.name);
        const got = await db.query<{ column_name: string }>(
          `SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`,
          [table],
        );
        expect(
          got.map((c) => c.column_name),
          table,
        ).toEqual(want);
      }
      sqlite.close();
      const indexes = (await db.query<{ indexdef: string }>(`SELECT indexdef FROM pg_indexes WHERE tablename = 'events'`)).map((i) => i.indexdef);
      expect(indexes).toContainEqual(expect.stringMatching(/UNIQUE INDEX events_pkey ON public\.events USING btree \(source, delivery_id\)/));
      expect(indexes).toContainEqual(expect.stringMatching(/USING brin \(received_at\)/));
      expect(indexes).toContainEqual(expect.stringMatching(/events_leased .*WHERE \(status = 'processing'::text\)/));
      expect(indexes).toContainEqual(expect.stringMatching(/events_due .*WHERE \(status = 'pending'::text\)/));
    });
  });

  describe('unavailable is 503', () => {
    it('maps connection loss, shutdown, disk full and timeouts to unavailable, and other errors to runtime', () => {
      for (const code of ['08006', '08001', '53100', '53300', '57P01', '57P03', '57014', '55P03', '40P01', 'ECONNREFUSED', 'ECONNRESET']) {
        expect(postgresError(Object.assign(new Error('x'), { code }), 'ingest').kind, code).toBe('unavailable');
      }
      expect(postgresError(new Error('Connection terminated unexpectedly'), 'ingest').kind).toBe('unavailable');
      for (const code of ['23505', '42P01', '22P02']) expect(postgresError(Object.assign(new Error('x'), { code }), 'ingest').kind, code).toBe('runtime');
    });

    it('a server that does not answer is unavailable at open, with the password hidden', async () => {
      const err = await openStore('postgres://postgres:s3cret@127.0.0.1:1/none', { busyTimeoutMs: 1000 }).catch((e: unknown) => e);
      expect(isUnavailable(err)).toBe(true);
      expect((err as Error).message).toContain('postgres://postgres:***@127.0.0.1:1/none');
      expect((err as Error).message).not.toContain('s3cret');
    });

    it('an insert that waits on a lock past the busy timeout is a 503, and nothing of it is stored', async () => {
      const db = await fresh();
      const store = await openStore(db.url, { busyTimeoutMs: 300, server: true });
      await db.query('BEGIN');
      await db.query('LOCK TABLE events IN EXCLUSIVE MODE');
      const started = Date.now();
      await expect(store.ingest(event('a'))).rejects.toSatisfy(isUnavailable);
      expect(Date.now() - started).toBeLessThan(3000);
      await db.query('ROLLBACK');
      expect(await store.findEventId('shop', 'a')).toBeUndefined();
      expect((await store.ingest(event('a'))).outcome).toBe('accepted');
      await store.close();
    });

    it('survives the server dropping its connections (57P01): the next delivery reconnects', async () => {
      const db = await fresh();
      const store = await openStore(db.url, { busyTimeoutMs: 2000, server: true });
      await store.ingest(event('a'));
      const killed = await db.query<{ ok: boolean }>(
        `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'receiver'`,
      );
      expect(killed.length).toBeGreaterThan(0);
      // The pool may hand out a connection it has not yet seen die: one 503 at most (for the
      // first delivery after the drop), never a crash; every later delivery is stored.
      const outcomes: string[] = [];
      for (const id of ['b', 'c', 'd', 'e']) {
        const outcome = await store.ingest(event(id)).then(
          (r) => r.outcome,
          (e: unknown) => (isUnavailable(e) ? 'unavailable' : `${String(e)}`),
        );
        outcomes.push(outcome);
      }
      expect(['accepted', 'unavailable']).toContain(outcomes[0]);
      expect(outcomes.slice(1)).toEqual(['accepted', 'accepted', 'accepted']);
      // A delivery answered 503 is not stored; the sender's retry is accepted.
      if (outcomes[0] === 'unavailable') {
        expect(await store.findEventId('shop', 'b')).toBeUndefined();
        expect((await store.ingest(event('b'))).outcome).toBe('accepted');
      }
      await store.ping();
      await store.close();
    });
  });

  describe('ingest batches', () => {
    it('a batch larger than one INSERT statement holds is split, and the first arrival of an id still wins', async () => {
      const db = await fresh();
      const store = await PostgresStore.open(db.url, { busyTimeoutMs: 5000, server: true });
      const items = Array.from({ length: 450 }, (_, i) => event(`d-${String(i).padStart(3, '0')}`));
      // Same ids as the first and the 300th, arriving last: a duplicate and a conflict across chunks.
      items.push(event('d-000'), event('d-299', '{"other":true}'));
      const results = await Promise.all(items.map((e) => store.ingest(e)));
      expect(results.slice(0, 450).every((r) => r.outcome === 'accepted')).toBe(true);
      expect(results[450]).toEqual({ ...results[0], outcome: 'duplicate' });
      expect(results[451]).toMatchObject({ outcome: 'conflict', status: 409, eventId: results[299]!.eventId });
      // Ids in arrival order.
      const ids = results.slice(0, 450).map((r) => r.eventId);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
      expect(await db.query<{ n: number }>('SELECT count(*) AS n FROM events')).toEqual([{ n: 450 }]);
      await store.close();
    });
  });

  describe('several receivers, one database', () => {
    let db: TestDatabase;
    beforeAll(async () => {
      db = await fresh();
      await (await PostgresStore.open(db.url, { busyTimeoutMs: 2000 })).close();
      await db.query('CREATE TABLE licences (key text PRIMARY KEY)');
    });

    /** A module effect whose handler waits for release() while holding its transaction. */
    function gated() {
      let entered!: () => void;
      const inside = new Promise<void>((r) => (entered = r));
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const handler = async (h: EffectDb) => {
        entered();
        await gate;
        await h.run('INSERT INTO licences (key) VALUES ($1)', [`k-${Math.random()}`]);
      };
      return { inside, release, handler };
    }

    it('while a module effect holds its transaction, ingest of a duplicate of that event and claims of other events do not wait', async () => {
      await db.query('TRUNCATE events, units, effects, attempts, licences RESTART IDENTITY');
      const store = await openStore(db.url, { busyTimeoutMs: 1000, server: true });
      const other = await openStore(db.url, { busyTimeoutMs: 1000, server: true });
      await store.ingest(event('a'));
      await store.ingest(event('b'));
      const a = await claimOne(store, 'mine', T0, LEASE);
      const g = gated();
      const run = store.runTransactionalEffect(
        a!.lease,
        1,
        { route: 'licence', businessKey: 'k', effectKey: 'licence:k', runToken: 't', force: false },
        g.handler,
        () => T0,
        LEASE,
      );
      await g.inside;
      expect((await other.ingest(event('a'))).outcome).toBe('duplicate');
      expect((await claimOne(other, 'theirs', T0, LEASE))?.deliveryId).toBe('b');
      g.release();
      expect(await run).toMatchObject({ action: 'ok' });
      await store.close();
      await other.close();
    });

    it('a module effect whose lease is taken over while its handler runs commits nothing', async () => {
      await db.query('TRUNCATE events, units, effects, attempts, licences RESTART IDENTITY');
      const store = await openStore(db.url, { busyTimeoutMs: 1000, server: true });
      const other = await openStore(db.url, { busyTimeoutMs: 1000, server: true });
      await store.ingest(event('a'));
      const a = await claimOne(store, 'slow', T0, LEASE);
      const g = gated();
      const run = store.runTransactionalEffect(
        a!.lease,
        1,
        { route: 'licence', businessKey: 'k', effectKey: 'licence:k', runToken: 't', force: false },
        g.handler,
        () => T0,
        LEASE,
      );
      await g.inside;
      // The slow drain's lease expires; another receiver takes the event.
      expect((await claimOne(other, 'fast', T0 + 2 * LEASE, LEASE))?.lease.owner).toBe('fast');
      g.release();
      expect(await run).toEqual({ action: 'lost' });
      expect(await db.query('SELECT key FROM licences')).toEqual([]);
      expect(await db.query('SELECT effect_key FROM effects')).toEqual([]);
      await store.close();
      await other.close();
    });

    it('a second receiver deciding a key that a module effect is running waits on the key lock, then skips it', async () => {
      await db.query('TRUNCATE events, units, effects, attempts, licences RESTART IDENTITY');
      const store = await openStore(db.url, { busyTimeoutMs: 1000, server: true });
      const other = await openStore(db.url, { busyTimeoutMs: 1000, server: true });
      await store.ingest(event('a'));
      await store.ingest(event('b'));
      const a = await claimOne(store, 'mine', T0, LEASE);
      const b = await claimOne(other, 'theirs', T0, LEASE);
      const g = gated();
      const start = { route: 'licence', businessKey: 'k', effectKey: 'licence:k', runToken: 't', force: false };
      const first = store.runTransactionalEffect(a!.lease, 1, start, g.handler, () => T0, LEASE);
      await g.inside;
      const second = other.beginEffect(b!.lease, 1, { ...start, runToken: 'u' }, T0, LEASE);
      // Deterministic: wait until the server shows the second one waiting on an advisory lock.
      for (;;) {
        const waiting = await db.query(`SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`);
        if (waiting.length > 0) break;
        await new Promise((r) => setImmediate(r));
      }
      g.release();
      expect(await first).toMatchObject({ action: 'ok' });
      expect(await second).toMatchObject({ action: 'skipped' });
      await store.close();
      await other.close();
    });
  });

  describe('a backlog PostgreSQL has not analyzed yet', () => {
    it("deriving an event's status reads that event's units, not the lane's whole backlog", async () => {
      const db = await fresh();
      await (await PostgresStore.open(db.url, { busyTimeoutMs: 2000 })).close();
      // 20,000 events with a pending unit each in one lane, inserted at once: the planner's
      // statistics still describe empty tables, as after a burst.
      await db.query(
        `INSERT INTO events (source, delivery_id, event_type, received_at, body_sha256, response_status, next_attempt_at, planned)
          SELECT 'shop', 'd' || i, 'order.paid', $1, 'x', 202, $1, 1 FROM generate_series(1, 20000) AS i`,
        [T0],
      );
      await db.query(`INSERT INTO units (event_id, route, lane, next_attempt_at) SELECT id, 'deploy', 'deploy', next_attempt_at FROM events`);
      const [newest] = await db.query<{ id: number }>('SELECT max(id) AS id FROM events');
      // The steps run on the test's connection; the status update with EXPLAIN ANALYZE, which
      // counts the pages it read.
      let pages: number | undefined;
      const steps = deriveEventStatus(dialect, [newest!.id], T0);
      for (let step = steps.next(); step.done !== true;) {
        const { sql, params } = step.value;
        if (!sql.trimStart().startsWith('UPDATE events')) {
          const rows = await db.query(sql, [...params]);
          step = steps.next({ rows, changes: rows.length });
          continue;
        }
        type Plan = { 'Shared Hit Blocks': number; 'Shared Read Blocks': number };
        const [explained] = await db.query<{ 'QUERY PLAN': { Plan: Plan }[] }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql}`, [...params]);
        const plan = explained!['QUERY PLAN'][0]!.Plan;
        pages = plan['Shared Hit Blocks'] + plan['Shared Read Blocks'];
        step = steps.next({ rows: [], changes: 1 });
      }
      // A few index and table pages per look-up; reading the lane's pending units was hundreds.
      expect(pages).toBeGreaterThan(0);
      expect(pages).toBeLessThan(60);
      const [derived] = await db.query<{ status: string }>('SELECT status FROM events WHERE id = $1', [newest!.id]);
      expect(derived!.status).toBe('pending');
    });
  });
});
