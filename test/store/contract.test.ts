import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isReceiverError } from '../../src/errors.js';
import type { ClaimedUnit, EffectDb, EffectStart, Lease } from '../../src/store/drain-types.js';
import { openStore } from '../../src/store/open.js';
import { acceptedAnswer, conflictAnswer, type NewEvent, type Store } from '../../src/store/types.js';
import type { FetchedEvent } from '../../src/store/catch-up-types.js';
import { claimMany, claimOne, planEach, tempDir } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * One contract, every backend: the same tests run against SQLite and PostgreSQL through
 * the Store interface alone. What differs between the engines is listed as capabilities
 * in each backend below, never as a check of the engine's name inside a test.
 */

interface Capabilities {
  /** Parameter n (1-based) in the engine's SQL dialect, for a module effect's queries. */
  placeholder: (n: number) => string;
  /** Several receivers share the database: one holds a source's catch-up at a time. */
  catchUpLockShared: boolean;
}

interface Opened {
  store: Store;
  /** Another store on the same database: a second receiver process. */
  another(): Promise<Store>;
  /** One statement written in SQL both engines accept (no parameters), to move time or inspect. */
  exec(sql: string): Promise<void>;
  rows<R = Record<string, unknown>>(sql: string): Promise<R[]>;
  close(): Promise<void>;
}

interface Backend {
  name: string;
  capabilities: Capabilities;
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /** A store on an empty database. */
  open(): Promise<Opened>;
}

const BUSY_MS = 3000;

function sqliteBackend(): Backend {
  let tmp: ReturnType<typeof tempDir> | undefined;
  let n = 0;
  return {
    name: 'sqlite',
    capabilities: { placeholder: () => '?', catchUpLockShared: false },
    async setup() {
      tmp = tempDir('receiver-contract-');
    },
    async teardown() {
      tmp?.cleanup();
    },
    async open() {
      const file = join(tmp!.dir, `r${++n}.db`);
      const stores: Store[] = [await openStore(file, { busyTimeoutMs: BUSY_MS, server: true })];
      const raw = new Database(file, { timeout: BUSY_MS });
      return {
        store: stores[0]!,
        async another() {
          const s = await openStore(file, { busyTimeoutMs: BUSY_MS, server: true });
          stores.push(s);
          return s;
        },
        async exec(sql) {
          raw.exec(sql);
        },
        async rows<R>(sql: string) {
          return raw.prepare(sql).all() as R[];
        },
        async close() {
          for (const s of stores) await s.close();
          raw.close();
        },
      };
    },
  };
}

function postgresBackend(): Backend {
  let db: TestDatabase | undefined;
  return {
    name: 'postgres',
    capabilities: { placeholder: (n) => `$${n}`, catchUpLockShared: true },
    async setup() {
      db = await createTestDatabase();
    },
    async teardown() {
      await db?.drop();
    },
    async open() {
      const d = db!;
      // One database per run; every test starts from empty tables and ids from 1.
      const exists = await d.query<{ t: string | null }>(`SELECT to_regclass('events')::text AS t`);
      if (exists[0]?.t !== null) await d.query('TRUNCATE events, units, conflicts, effects, attempts RESTART IDENTITY');
      await d.query('DROP TABLE IF EXISTS licences');
      const stores: Store[] = [await openStore(d.url, { busyTimeoutMs: BUSY_MS, server: true })];
      return {
        store: stores[0]!,
        async another() {
          const s = await openStore(d.url, { busyTimeoutMs: BUSY_MS, server: true });
          stores.push(s);
          return s;
        },
        async exec(sql) {
          await d.query(sql);
        },
        async rows<R>(sql: string) {
          return (await d.query(sql)) as R[];
        },
        async close() {
          for (const s of stores) await s.close();
        },
      };
    },
  };
}

const pgOk = await postgresAvailable();
if (!pgOk) {
  describe.skip('postgres store contract (PostgreSQL not reachable; see the notice above)', () => {
    it('runs the contract against PostgreSQL', () => {});
  });
}
const backends: Backend[] = [sqliteBackend(), ...(pgOk ? [postgresBackend()] : [])];

const T0 = Date.UTC(2026, 5, 1);
const SEC = 1000;
const DAY = 86_400_000;
const LEASE = 60 * SEC;

function event(deliveryId: string, body: string | Buffer = `{"id":"${deliveryId}"}`, extra: Partial<NewEvent> = {}): NewEvent {
  const raw = typeof body === 'string' ? Buffer.from(body) : body;
  return {
    source: 'shop',
    deliveryId,
    eventType: 'order.paid',
    headers: { 'content-type': 'application/json', 'x-request-id': deliveryId },
    body: raw,
    bodySha256: createHash('sha256').update(raw).digest('hex'),
    receivedAt: T0,
    successStatus: 202,
    onConflict: 'reject',
    ...extra,
  };
}

function start(route: string, businessKey: string, extra: Partial<EffectStart> = {}): EffectStart {
  return { route, businessKey, effectKey: `${route}:${businessKey}`, runToken: `tok-${Math.random()}`, force: false, ...extra };
}

describe.each(backends)('$name store contract', (backend) => {
  let o: Opened;
  let store: Store;
  beforeAll(() => backend.setup());
  afterAll(() => backend.teardown());
  beforeEach(async () => {
    o = await backend.open();
    store = o.store;
  });
  afterEach(async () => {
    await o.close();
  });

  /** Ingests and claims one event; returns its lease. */
  async function claimed(deliveryId: string, owner = 'drain-a', now = T0): Promise<{ id: number; lease: Lease; attempt: number }> {
    const r = await store.ingest(event(deliveryId));
    const c = await claimOne(store, owner, now, LEASE);
    expect(c?.id).toBe(r.eventId);
    return { id: c!.id, lease: c!.lease, attempt: c!.attempt };
  }

  describe('ingest', () => {
    it('accepts a first delivery with the stored answer, and stores it whole', async () => {
      const body = Buffer.from([0x7b, 0x00, 0xff, 0x0a, 0x7d]);
      const r = await store.ingest(event('d-1', body, { extraIds: { idempotencyKey: 'k1' } }));
      expect(r).toEqual({ outcome: 'accepted', eventId: r.eventId, status: 202, body: acceptedAnswer(r.eventId) });
      expect(r.eventId).toBeGreaterThan(0);
      const shown = await store.getEvent(r.eventId);
      expect(shown).toMatchObject({
        id: r.eventId,
        source: 'shop',
        deliveryId: 'd-1',
        eventType: 'order.paid',
        status: 'pending',
        attempts: 0,
        receivedAt: T0,
        responseStatus: 202,
      });
      expect(shown!.body!.equals(body)).toBe(true);
      expect(shown!.headers).toEqual({ 'content-type': 'application/json', 'x-request-id': 'd-1' });
      expect(shown!.extraIds).toEqual({ idempotencyKey: 'k1' });
    });

    it('answers a duplicate with the first answer byte for byte, storing nothing new', async () => {
      const first = await store.ingest(event('d-1', '{"a":1}', { successStatus: 200 }));
      // A later duplicate under a changed successStatus still gets the first answer.
      const dup = await store.ingest(event('d-1', '{"a":1}', { successStatus: 202, receivedAt: T0 + SEC }));
      expect(dup).toEqual({ outcome: 'duplicate', eventId: first.eventId, status: 200, body: first.body });
      const list = await store.listEvents({ limit: 10 });
      expect(list).toHaveLength(1);
      expect(list[0]).toMatchObject({ id: first.eventId, duplicates: 1, receivedAt: T0 });
    });

    it('records a conflict (same delivery id, different body) and answers 409, or the stored answer with onConflict accept', async () => {
      const first = await store.ingest(event('d-1', '{"a":1}'));
      const rejected = await store.ingest(event('d-1', '{"a":2}', { receivedAt: T0 + SEC }));
      expect(rejected).toEqual({ outcome: 'conflict', eventId: first.eventId, status: 409, body: conflictAnswer(first.eventId, 'd-1') });
      const accepted = await store.ingest(event('d-1', '{"a":3}', { onConflict: 'accept', receivedAt: T0 + 2 * SEC }));
      expect(accepted).toEqual({ outcome: 'conflict', eventId: first.eventId, status: 202, body: first.body });
      const shown = await store.getEvent(first.eventId);
      expect(shown!.body!.toString()).toBe('{"a":1}');
      expect(shown!.conflicts.map((c) => c.receivedAt)).toEqual([T0 + SEC, T0 + 2 * SEC]);
      expect(shown!.conflicts.map((c) => c.body?.toString())).toEqual(['{"a":2}', '{"a":3}']);
      // With the headers it came with, as `events show` prints them.
      expect(shown!.conflicts.map((c) => c.headers)).toEqual([0, 1].map(() => ({ 'content-type': 'application/json', 'x-request-id': 'd-1' })));
      expect((await store.stats(T0)).conflicts).toBe(2);
    });

    it('stores a differing body once per event and counts its repeats, sequential or in one batch', async () => {
      const first = await store.ingest(event('d-1', '{"a":1}'));
      // A sender repeating one conflicting delivery: every repeat is still answered 409.
      for (let i = 1; i <= 3; i++) expect((await store.ingest(event('d-1', '{"a":2}', { receivedAt: T0 + i * SEC }))).status).toBe(409);
      const batch = await Promise.all(
        [event('d-1', '{"a":2}'), event('d-1', '{"a":3}'), event('d-1', '{"a":2}')].map((e) => store.ingest({ ...e, receivedAt: T0 + 9 * SEC })),
      );
      expect(batch.map((r) => r.outcome)).toEqual(['conflict', 'conflict', 'conflict']);
      const shown = await store.getEvent(first.eventId);
      expect(shown!.conflicts.map((c) => ({ receivedAt: c.receivedAt, repeats: c.repeats }))).toEqual([
        { receivedAt: T0 + SEC, repeats: 4 },
        { receivedAt: T0 + 9 * SEC, repeats: 0 },
      ]);
      const rows = await o.rows<{ n: number; bodies: number }>(`SELECT count(*) AS n, count(DISTINCT body) AS bodies FROM conflicts`);
      expect(rows.map((r) => [Number(r.n), Number(r.bodies)])).toEqual([[2, 2]]);
      // stats counts conflicting deliveries, repeats included.
      expect((await store.stats(T0)).conflicts).toBe(6);
    });

    it('decides one batch in arrival order: the first delivery of an id wins, later ones are duplicates or conflicts of it', async () => {
      // Submitted in one event-loop turn: one group-commit batch.
      const results = await Promise.all([
        store.ingest(event('b')),
        store.ingest(event('a', '{"v":1}')),
        store.ingest(event('a', '{"v":1}')),
        store.ingest(event('a', '{"v":2}')),
        store.ingest(event('b')),
        store.ingest(event('c')),
      ]);
      expect(results.map((r) => r.outcome)).toEqual(['accepted', 'accepted', 'duplicate', 'conflict', 'duplicate', 'accepted']);
      const [b, a, aDup, aConflict, bDup, c] = results;
      expect(aDup).toEqual({ ...a, outcome: 'duplicate' });
      expect(bDup).toEqual({ ...b, outcome: 'duplicate' });
      expect(aConflict.status).toBe(409);
      // Event ids follow arrival order (the drain's order), whatever order rows were written in.
      expect(b.eventId).toBeLessThan(a.eventId);
      expect(a.eventId).toBeLessThan(c.eventId);
      expect((await store.getEvent(a.eventId))!.body!.toString()).toBe('{"v":1}');
      expect(await store.listEvents({ limit: 10 })).toHaveLength(3);
    });

    it('two receivers on one database ingesting the same ids in opposite orders: one row per id, every answer the stored one', async () => {
      const other = await o.another();
      const ids = Array.from({ length: 60 }, (_, i) => `d-${i}`);
      const [mine, theirs] = await Promise.all([
        Promise.all(ids.map((id) => store.ingest(event(id)))),
        Promise.all([...ids].reverse().map((id) => other.ingest(event(id)))),
      ]);
      theirs.reverse();
      ids.forEach((_, i) => {
        const pair = [mine[i]!, theirs[i]!];
        expect(pair.map((r) => r.outcome).sort()).toEqual(['accepted', 'duplicate']);
        expect(pair[0]!.body).toBe(pair[1]!.body);
        expect(pair[0]!.eventId).toBe(pair[1]!.eventId);
      });
      const rows = await o.rows<{ n: number }>('SELECT count(*) AS n FROM events');
      expect(Number(rows[0]!.n)).toBe(ids.length);
      expect((await store.stats(T0)).duplicates).toBe(ids.length);
    });

    it('answers ping while open; after close, ping and ingest are unavailable (503)', async () => {
      await store.ping();
      const s = await o.another();
      await s.ping();
      await s.close();
      await s.close(); // twice is fine
      await expect(s.ping()).rejects.toSatisfy((e) => isReceiverError(e, 'unavailable'));
      await expect(s.ingest(event('late'))).rejects.toSatisfy((e) => isReceiverError(e, 'unavailable'));
    });

    it('an event no route applies to is stored done on arrival and never claimed', async () => {
      const r = await store.ingest(event('unrouted', undefined, { unrouted: 'no route for source "shop"' }));
      expect(r.outcome).toBe('accepted');
      expect(await store.getEvent(r.eventId)).toMatchObject({ status: 'done', attempts: 0, finishedAt: T0 });
      expect(await claimMany(store, 'd', T0, LEASE, 8)).toEqual([]);
      expect((await store.ingest(event('unrouted', undefined, { unrouted: 'no route for source "shop"' }))).body).toBe(r.body);
    });

    it('close() finishes deliveries already submitted before it closes', async () => {
      const s = await o.another();
      const pending = [s.ingest(event('x-1')), s.ingest(event('x-2'))];
      await s.close();
      expect((await Promise.all(pending)).map((r) => r.outcome)).toEqual(['accepted', 'accepted']);
      expect(await store.findEventId('shop', 'x-2')).toBe((await pending[1])!.eventId);
    });
  });

  describe('route decisions: why each route did or did not apply, stored with the event', () => {
    it('an event stored done at ingest keeps its decisions; a routed one has none until the drain plans it', async () => {
      const unrouted = await store.ingest(
        event('u', undefined, { unrouted: 'deploy: event type "ping" not in [push]\nlicence: filter body.ref = "x", wanted "y"' }),
      );
      const routed = await store.ingest(event('r'));
      expect(await store.getEvent(unrouted.eventId)).toMatchObject({
        status: 'done',
        routeDecisions: ['deploy: event type "ping" not in [push]', 'licence: filter body.ref = "x", wanted "y"'],
      });
      expect((await store.getEvent(routed.eventId))!.routeDecisions).toBeNull();
    });

    it('planning stores the units and the decisions; an event none applies to is done; an event planned once is not planned again', async () => {
      const a = await store.ingest(event('a'));
      const b = await store.ingest(event('b'));
      expect((await store.unplannedEvents(10)).map((e) => e.id)).toEqual([a.eventId, b.eventId]);
      const decisions = 'deploy: applies (key "c1")\nlicence: applies (key "cus_1")';
      await store.planEvents(
        [
          {
            eventId: a.eventId,
            units: [
              { route: 'deploy', lane: 'deploys' },
              { route: 'licence', lane: 'licence' },
            ],
            decisions,
          },
          { eventId: b.eventId, units: [], decisions: 'deploy: event type "ping" not in [push]' },
        ],
        T0 + SEC,
      );
      expect(await store.unplannedEvents(10)).toEqual([]);
      expect(await store.getEvent(a.eventId)).toMatchObject({ status: 'pending', routeDecisions: decisions.split('\n') });
      expect(await store.getEvent(b.eventId)).toMatchObject({
        status: 'done',
        finishedAt: T0 + SEC,
        routeDecisions: ['deploy: event type "ping" not in [push]'],
      });
      // A replay of an event without units (none applied, or done before units existed) has it planned again, with the routes of the day.
      expect((await store.replayEvents([b.eventId], { force: false, now: T0 + SEC })).replayed).toHaveLength(1);
      expect((await store.unplannedEvents(10)).map((e) => e.id)).toEqual([b.eventId]);
      await store.planEvents([{ eventId: b.eventId, units: [], decisions: 'deploy: event type "ping" not in [push]' }], T0 + SEC);
      expect(await store.getEvent(b.eventId)).toMatchObject({ status: 'done' });
      // A second receiver planning the same event (it read it before the first planned it) changes nothing.
      await store.planEvents([{ eventId: a.eventId, units: [{ route: 'other', lane: 'other' }], decisions: 'other: applies' }], T0);
      const units = await store.claimUnits('d', T0, LEASE, { busyLanes: [], lanes: 8, perLane: 8 });
      expect(units.map((u) => [u.id, u.route, u.lane]).sort()).toEqual([
        [a.eventId, 'deploy', 'deploys'],
        [a.eventId, 'licence', 'licence'],
      ]);
      expect((await store.getEvent(a.eventId))!.status).toBe('processing');
      // Its status is derived from its units': processing while one is, dead when one is and none is left to run.
      expect(await store.buryUnit(units[0]!.lease, 'exit 1', T0)).toBe(true);
      expect((await store.getEvent(a.eventId))!.status).toBe('processing');
      expect(await store.completeUnit(units[1]!.lease, T0)).toBe(true);
      expect(await store.getEvent(a.eventId)).toMatchObject({ status: 'dead', finishedAt: T0 });
    });
    it("the drain's look finds events to plan, else the next due time; a claim stores plans and takes their units in one call", async () => {
      const a = await store.ingest(event('a'));
      const look = await store.lookForWork(10, [], T0);
      expect(look.events.map((e) => e.id)).toEqual([a.eventId]);
      expect(look.due).toBeUndefined();
      const plans = [{ eventId: a.eventId, units: [{ route: 'deploy', lane: 'deploys' }], decisions: 'deploy: applies' }];
      // Plans only (no lane free): the units wait, pending.
      expect(await store.claimUnits('d', T0, LEASE, { busyLanes: [], lanes: 0, perLane: 0 }, plans)).toEqual([]);
      expect(await store.getEvent(a.eventId)).toMatchObject({ status: 'pending', routeDecisions: ['deploy: applies'] });
      expect(await store.lookForWork(10, [], T0)).toEqual({ events: [], due: T0 });
      // The lane busy here: nothing due outside it; no lane free: not asked.
      expect(await store.lookForWork(10, ['deploys'], T0)).toEqual({ events: [], due: undefined });
      expect(await store.lookForWork(10, undefined, T0)).toEqual({ events: [], due: undefined });
      const b = await store.ingest(event('b'));
      const units = await store.claimUnits('d', T0, LEASE, { busyLanes: [], lanes: 8, perLane: 8 }, [
        { eventId: b.eventId, units: [{ route: 'deploy', lane: 'deploys' }], decisions: 'deploy: applies' },
      ]);
      // Planned and claimed at once, oldest first within the lane.
      expect(units.map((u) => u.id)).toEqual([a.eventId, b.eventId]);
      expect((await store.getEvent(b.eventId))!.status).toBe('processing');
    });

    it('a replay of one route starts its unit over and leaves the others, even while another runs; a route the event lacks, or one a drain holds, is refused', async () => {
      const a = await store.ingest(event('a'));
      await store.planEvents(
        [
          {
            eventId: a.eventId,
            units: [
              { route: 'deploy', lane: 'deploys' },
              { route: 'licence', lane: 'licence' },
            ],
            decisions: 'deploy: applies\nlicence: applies',
          },
        ],
        T0,
      );
      for (const u of await store.claimUnits('d', T0, LEASE, { busyLanes: [], lanes: 8, perLane: 8 })) expect(await store.completeUnit(u.lease, T0)).toBe(true);
      expect((await store.getEvent(a.eventId))!.status).toBe('done');
      const unitRows = () =>
        o.rows<{ route: string; status: string; replays: number }>(`SELECT route, status, replays FROM units WHERE event_id = ${a.eventId} ORDER BY route`);

      expect(await store.replayEvents([a.eventId], { force: false, now: T0 + SEC, route: 'refund' })).toEqual({
        replayed: [],
        refused: [{ eventId: a.eventId, reason: 'no_route', route: 'refund', routes: ['deploy', 'licence'] }],
      });
      expect((await store.getEvent(a.eventId))!.status).toBe('done');

      const r = await store.replayEvents([a.eventId], { force: true, now: T0 + SEC, route: 'licence' });
      expect(r).toEqual({
        replayed: [{ eventId: a.eventId, source: 'shop', deliveryId: 'a', previousStatus: 'done', force: true, route: 'licence' }],
        refused: [],
      });
      expect(await unitRows()).toEqual([
        { route: 'deploy', status: 'done', replays: 0 },
        { route: 'licence', status: 'pending', replays: 1 },
      ]);
      expect((await store.getEvent(a.eventId))!.status).toBe('pending');
      const again = await store.claimUnits('d2', T0 + SEC, LEASE, { busyLanes: [], lanes: 8, perLane: 8 });
      expect(again.map((u) => u.route)).toEqual(['licence']);
      expect((await store.replayEvents([a.eventId], { force: false, now: T0 + SEC, route: 'licence' })).refused).toMatchObject([
        { eventId: a.eventId, reason: 'processing' },
      ]);
      // Another route of the event may be replayed while this one runs; the event stays
      // processing until both are done.
      expect((await store.replayEvents([a.eventId], { force: false, now: T0 + SEC, route: 'deploy' })).replayed).toHaveLength(1);
      expect(await unitRows()).toEqual([
        { route: 'deploy', status: 'pending', replays: 1 },
        { route: 'licence', status: 'processing', replays: 1 },
      ]);
      expect((await store.getEvent(a.eventId))!.status).toBe('processing');
      // A replay of the whole event still waits for the running route.
      expect((await store.replayEvents([a.eventId], { force: false, now: T0 + SEC })).refused).toMatchObject([{ eventId: a.eventId, reason: 'processing' }]);
      expect(await store.completeUnit(again[0]!.lease, T0 + SEC)).toBe(true);
      expect((await store.getEvent(a.eventId))!.status).toBe('pending');
      const deploy = await store.claimUnits('d3', T0 + SEC, LEASE, { busyLanes: [], lanes: 8, perLane: 8 });
      expect(deploy.map((u) => u.route)).toEqual(['deploy']);
      expect(await store.completeUnit(deploy[0]!.lease, T0 + SEC)).toBe(true);
      expect((await store.getEvent(a.eventId))!.status).toBe('done');
    });
    it("each route's unit as events show lists it (lane, status, attempts, next attempt, last error, lease); lanes counted; the list filters by the derived status", async () => {
      const a = await store.ingest(event('a'));
      const b = await store.ingest(event('b', undefined, { receivedAt: T0 + SEC }));
      const units = [
        { route: 'deploy', lane: 'deploys' },
        { route: 'licence', lane: 'licence' },
      ];
      await store.planEvents(
        [a, b].map((r) => ({ eventId: r.eventId, units, decisions: 'deploy: applies\nlicence: applies' })),
        T0 + 2 * SEC,
      );
      const unit = (route: string, lane: string, more: object = {}) => ({
        route,
        lane,
        status: 'pending',
        attempts: 0,
        // Due when its event is.
        nextAttemptAt: T0,
        lastError: null,
        leaseOwner: null,
        leaseExpiresAt: null,
        replays: 0,
        finishedAt: null,
        ...more,
      });
      expect((await store.getEvent(a.eventId))!.units).toEqual([unit('deploy', 'deploys'), unit('licence', 'licence')]);
      expect(await store.laneStats()).toEqual([
        { lane: 'deploys', pending: 2, running: 0, oldestPendingReceivedAt: T0 },
        { lane: 'licence', pending: 2, running: 0, oldestPendingReceivedAt: T0 },
      ]);

      // One unit of each lane claimed: a's.
      const claimed = await store.claimUnits('drain-1', T0 + 2 * SEC, LEASE, { busyLanes: [], lanes: 8, perLane: 1 });
      expect(claimed.map((u) => [u.id, u.route]).sort()).toEqual([
        [a.eventId, 'deploy'],
        [a.eventId, 'licence'],
      ]);
      expect((await store.getEvent(a.eventId))!.units).toEqual([
        unit('deploy', 'deploys', { status: 'processing', attempts: 1, leaseOwner: 'drain-1', leaseExpiresAt: T0 + 2 * SEC + LEASE }),
        unit('licence', 'licence', { status: 'processing', attempts: 1, leaseOwner: 'drain-1', leaseExpiresAt: T0 + 2 * SEC + LEASE }),
      ]);
      expect(await store.laneStats()).toEqual([
        { lane: 'deploys', pending: 1, running: 1, oldestPendingReceivedAt: T0 + SEC },
        { lane: 'licence', pending: 1, running: 1, oldestPendingReceivedAt: T0 + SEC },
      ]);

      // The deploy fails and waits for its retry; the licence gives up: the event stays pending while a unit is.
      const byRoute = new Map(claimed.map((u) => [u.route, u]));
      expect(await store.retryUnit(byRoute.get('deploy')!.lease, 'exit 1', T0 + 30 * SEC)).toBe(true);
      expect(await store.buryUnit(byRoute.get('licence')!.lease, 'smtp refused', T0 + 3 * SEC)).toBe(true);
      const shown = await store.getEvent(a.eventId);
      expect(shown!.units).toEqual([
        unit('deploy', 'deploys', { attempts: 1, nextAttemptAt: T0 + 30 * SEC, lastError: 'exit 1' }),
        unit('licence', 'licence', { status: 'dead', attempts: 1, lastError: 'smtp refused', finishedAt: T0 + 3 * SEC }),
      ]);
      expect(shown!.status).toBe('pending');
      const listed = async (status: 'pending' | 'dead') => (await store.listEvents({ status, limit: 10 })).map((e) => e.id);
      expect(await listed('pending')).toEqual([b.eventId, a.eventId]);
      expect(await listed('dead')).toEqual([]);
      expect(await store.laneStats()).toEqual([
        { lane: 'deploys', pending: 2, running: 0, oldestPendingReceivedAt: T0 },
        { lane: 'licence', pending: 1, running: 0, oldestPendingReceivedAt: T0 + SEC },
      ]);

      // Its retry fails for good: no unit is left to run, one is dead, so the event is dead.
      const retried = await store.claimUnits('drain-2', T0 + 30 * SEC, LEASE, { busyLanes: ['licence'], lanes: 8, perLane: 1 });
      expect(retried.map((u) => [u.id, u.route, u.attempt])).toEqual([[a.eventId, 'deploy', 2]]);
      expect(await store.buryUnit(retried[0]!.lease, 'exit 1 again', T0 + 31 * SEC)).toBe(true);
      expect((await store.getEvent(a.eventId))!.status).toBe('dead');
      expect(await listed('dead')).toEqual([a.eventId]);
      expect(await listed('pending')).toEqual([b.eventId]);
      const lanes = [
        { lane: 'deploys', pending: 1, running: 0, oldestPendingReceivedAt: T0 + SEC },
        { lane: 'licence', pending: 1, running: 0, oldestPendingReceivedAt: T0 + SEC },
      ];
      expect(await store.laneStats()).toEqual(lanes);
      expect((await store.stats(T0 + 31 * SEC)).lanes).toEqual(lanes);
      // An event before planning has no units yet.
      expect((await store.getEvent((await store.ingest(event('c'))).eventId))!.units).toEqual([]);
    });
  });

  describe('drain: claims and leases', () => {
    it('claims the oldest due event first, skipping ones not yet due, and reports when the next one is due', async () => {
      const a = await store.ingest(event('a'));
      const b = await store.ingest(event('b'));
      expect(await store.nextDueAt([], T0)).toBe(T0);
      await o.exec(`UPDATE events SET next_attempt_at = ${T0 + 10 * SEC} WHERE id = ${a.eventId}`);
      const c1 = await claimOne(store, 'drain-a', T0, LEASE);
      expect(c1).toMatchObject({ id: b.eventId, source: 'shop', deliveryId: 'b', eventType: 'order.paid', attempt: 1, forceEffects: false });
      expect(c1!.lease).toEqual({ unitId: c1!.unitId, eventId: b.eventId, owner: 'drain-a', expiresAt: T0 + LEASE });
      expect(c1!.body.toString()).toBe('{"id":"b"}');
      expect(c1!.headers['x-request-id']).toBe('b');
      expect(await claimOne(store, 'drain-a', T0, LEASE)).toBeUndefined();
      expect(await store.nextDueAt([], T0)).toBe(T0 + 10 * SEC);
      expect((await claimOne(store, 'drain-a', T0 + 10 * SEC, LEASE))?.id).toBe(a.eventId);
      expect(await store.nextDueAt([], T0)).toBe(T0 + LEASE); // b's lease expiry
    });

    it('several drains on two receivers claim every event exactly once', async () => {
      const other = await o.another();
      const n = 40;
      for (let i = 0; i < n; i += 10) await Promise.all(Array.from({ length: 10 }, (_, j) => store.ingest(event(`e-${i + j}`))));
      const taken: number[] = [];
      const worker = async (s: Store, owner: string) => {
        for (;;) {
          const c = await claimOne(s, owner, T0, LEASE);
          if (c === undefined) return;
          taken.push(c.id);
          expect(await s.completeUnit(c.lease, T0)).toBe(true);
        }
      };
      await Promise.all([worker(store, 'a1'), worker(store, 'a2'), worker(other, 'b1'), worker(other, 'b2')]);
      expect(taken).toHaveLength(n);
      expect(new Set(taken).size).toBe(n);
      expect((await store.stats(T0)).byStatus).toEqual({ pending: 0, processing: 0, done: n, dead: 0 });
    });

    it("an expired lease is claimed again; the old holder's renew, complete, retry and bury change nothing", async () => {
      const { id, lease } = await claimed('a', 'old');
      expect(await claimOne(store, 'new', T0 + LEASE - 1, LEASE)).toBeUndefined();
      const again = await claimOne(store, 'new', T0 + LEASE, LEASE);
      expect(again).toMatchObject({ id, attempt: 2, lease: { owner: 'new' } });
      await store.renewLeases([lease], T0 + LEASE + 1, LEASE);
      expect(await store.completeUnit(lease, T0 + LEASE)).toBe(false);
      expect(await store.retryUnit(lease, 'late', T0 + 2 * LEASE)).toBe(false);
      expect(await store.buryUnit(lease, 'late', T0 + LEASE)).toBe(false);
      const shown = await store.getEvent(id);
      expect(shown).toMatchObject({ status: 'processing', leaseOwner: 'new', leaseExpiresAt: T0 + LEASE + LEASE, lastError: null });
      await store.renewLeases([again!.lease], T0 + LEASE + 5, LEASE);
      expect((await store.getEvent(id))!.leaseExpiresAt).toBe(T0 + LEASE + 5 + LEASE);
    });

    it('an attempt left running by a claim whose lease ran out ends as interrupted (failed) when its unit is taken back', async () => {
      const { id, lease } = await claimed('a', 'old');
      const started = await store.beginEffect(lease, 1, start('r', 'k1'), T0, LEASE);
      expect(started.action).toBe('run');
      expect((await store.getEvent(id))!.attemptRows.map((a) => a.outcome)).toEqual(['running']);
      // Not yet: the lease still holds.
      expect(await claimOne(store, 'new', T0 + LEASE - 1, LEASE)).toBeUndefined();
      expect((await store.getEvent(id))!.attemptRows.map((a) => a.outcome)).toEqual(['running']);
      expect(await claimOne(store, 'new', T0 + LEASE, LEASE)).toMatchObject({ id, attempt: 2 });
      expect((await store.getEvent(id))!.attemptRows).toMatchObject([
        { outcome: 'failed', finishedAt: T0 + LEASE, error: expect.stringMatching(/^interrupted: /) },
      ]);
    });

    it('claims a batch oldest first under one owner; the heartbeat renews what is still held; unstarted claims go back uncounted', async () => {
      const ids: number[] = [];
      for (const d of ['a', 'b', 'c', 'd']) ids.push((await store.ingest(event(d))).eventId);
      const batch = await claimMany(store, 'batch-1', T0, LEASE, 3);
      expect(batch.map((e) => e.id)).toEqual(ids.slice(0, 3));
      expect(batch.every((e) => e.lease.owner === 'batch-1' && e.attempt === 1)).toBe(true);
      expect((await claimMany(store, 'batch-2', T0, LEASE, 3)).map((e) => e.id)).toEqual([ids[3]]);
      expect(await claimMany(store, 'batch-3', T0, LEASE, 3)).toEqual([]);

      // The heartbeat moves every held lease forward; one taken over meanwhile is left alone.
      await o.exec(`UPDATE units SET lease_owner = 'thief' WHERE event_id = ${ids[2]}`);
      await store.renewLeases(
        batch.map((e) => e.lease),
        T0 + 20 * SEC,
        LEASE,
      );
      expect((await store.getEvent(ids[0]!))!.leaseExpiresAt).toBe(T0 + 20 * SEC + LEASE);
      expect((await store.getEvent(ids[1]!))!.leaseExpiresAt).toBe(T0 + 20 * SEC + LEASE);
      expect((await store.getEvent(ids[2]!))!.leaseExpiresAt).toBe(T0 + LEASE);

      // Stopping before b was started: b is pending again, its claim not counted; the thief's claim stays.
      await store.releaseUnits(
        batch.slice(1).map((e) => e.lease),
        T0,
      );
      expect(await store.getEvent(ids[1]!)).toMatchObject({ status: 'pending', attempts: 0, leaseOwner: null });
      expect(await store.getEvent(ids[2]!)).toMatchObject({ status: 'processing', leaseOwner: 'thief' });
      expect((await claimMany(store, 'batch-4', T0 + 20 * SEC, LEASE, 8)).map((e) => [e.id, e.attempt])).toEqual([[ids[1], 1]]);
    });

    it("the heartbeat during a module effect's transaction neither waits for it nor goes with its rollback", async () => {
      for (const d of ['a', 'b']) await store.ingest(event(d));
      const [a, b] = await claimMany(store, 'batch-1', T0, LEASE, 2);
      const beat = T0 + 20 * SEC;
      const out = await store.runTransactionalEffect(
        a!.lease,
        a!.attempt,
        start('licence', 'k'),
        // The drain's heartbeat comes while the handler runs; the handler waits for it, then
        // throws: its writes roll back, the heartbeat's renewal does not.
        async () => {
          await store.renewLeases([a!.lease, b!.lease], beat, LEASE);
          throw new Error('no');
        },
        () => T0,
        LEASE,
      );
      expect(out).toMatchObject({ action: 'failed', error: 'no' });
      expect((await store.getEvent(b!.id))!.leaseExpiresAt).toBe(beat + LEASE);
    });

    it("a dead process's claims are ended by owner prefix and claimed again at once; others' are not", async () => {
      for (const d of ['a', 'b', 'c']) await store.ingest(event(d));
      const [a, b] = await claimMany(store, 'host:41:aa#1', T0, LEASE, 2);
      const [c] = await claimMany(store, 'host:4:bb#7', T0, LEASE, 1);
      expect((await store.claimOwners()).sort()).toEqual(['host:41:aa#1', 'host:4:bb#7']);
      expect(await store.expireClaims('host:4:bb#', T0 + SEC)).toBe(1);
      const again = await claimMany(store, 'new#1', T0 + SEC, LEASE, 8);
      expect(again.map((e) => [e.id, e.attempt])).toEqual([[c!.id, 2]]);
      expect(await store.getEvent(a!.id)).toMatchObject({ status: 'processing', leaseOwner: 'host:41:aa#1' });
      expect(await store.getEvent(b!.id)).toMatchObject({ status: 'processing', leaseOwner: 'host:41:aa#1' });
    });

    it('retry puts an event back until its time, bury makes it dead, complete makes it done', async () => {
      const first = await claimed('a');
      expect(await store.retryUnit(first.lease, 'boom', T0 + 30 * SEC)).toBe(true);
      // The event's last error names the unit's route.
      expect(await store.getEvent(first.id)).toMatchObject({ status: 'pending', nextAttemptAt: T0 + 30 * SEC, lastError: 'r: boom', leaseOwner: null });
      expect(await claimOne(store, 'd', T0 + 29 * SEC, LEASE)).toBeUndefined();
      const second = await claimOne(store, 'd', T0 + 30 * SEC, LEASE);
      expect(second?.attempt).toBe(2);
      expect(await store.buryUnit(second!.lease, 'gave up', T0 + 31 * SEC)).toBe(true);
      expect(await store.getEvent(first.id)).toMatchObject({ status: 'dead', lastError: 'r: gave up', finishedAt: T0 + 31 * SEC });

      const other = await claimed('b', 'd', T0 + 40 * SEC);
      expect(await store.completeUnit(other.lease, T0 + 41 * SEC)).toBe(true);
      expect(await store.getEvent(other.id)).toMatchObject({ status: 'done', finishedAt: T0 + 41 * SEC, leaseOwner: null, leaseExpiresAt: null });
    });
  });

  describe('drain: the effect ledger', () => {
    it('runs a key once: a second event with the same key is busy while the first runs, skipped once it is done', async () => {
      const e1 = await claimed('a');
      const s1 = start('licence', 'cus_1');
      const d1 = await store.beginEffect(e1.lease, e1.attempt, s1, T0, LEASE);
      expect(d1).toMatchObject({ action: 'run', runs: 1, wasDone: false });

      const e2 = await claimed('b');
      const busy = await store.beginEffect(e2.lease, e2.attempt, start('licence', 'cus_1'), T0, LEASE);
      expect(busy).toMatchObject({ action: 'busy', heldByEventId: e1.id });

      if (d1.action !== 'run') throw new Error('expected run');
      await store.finishEffect(
        { attemptId: d1.attemptId, effectKey: s1.effectKey, runToken: s1.runToken, outcome: 'ok', output: 'issued', wasDone: false },
        T0 + 1,
      );
      expect(await store.beginEffect(e2.lease, e2.attempt, start('licence', 'cus_1'), T0 + 2, LEASE)).toMatchObject({ action: 'skipped' });

      const shown = await store.getEvent(e1.id);
      expect(shown!.attemptRows).toMatchObject([
        { route: 'licence', effectKey: 'licence:cus_1', outcome: 'ok', output: 'issued', finishedAt: T0 + 1, forced: false },
      ]);
      expect(shown!.effects).toMatchObject([{ effectKey: 'licence:cus_1', status: 'done', eventId: e1.id, runs: 1 }]);
      expect((await store.getEvent(e2.id))!.attemptRows.map((a) => a.outcome)).toEqual(['busy', 'skipped']);
      expect((await store.stats(T0)).effectsByStatus).toEqual({ running: 0, done: 1, failed: 0 });
    });

    it('a running row whose event lost its lease may run again (a crash mid-effect repeats at most once)', async () => {
      const e1 = await claimed('a');
      await store.beginEffect(e1.lease, e1.attempt, start('licence', 'k'), T0, LEASE);
      // e1's drain crashed: its lease expires and another drain takes it.
      const again = await claimOne(store, 'drain-b', T0 + LEASE, LEASE);
      const d = await store.beginEffect(again!.lease, again!.attempt, start('licence', 'k'), T0 + LEASE, LEASE);
      expect(d).toMatchObject({ action: 'run', runs: 2 });
    });

    it("a late finish by a run that is no longer the key's current run leaves the ledger alone", async () => {
      const e1 = await claimed('a');
      const old = start('licence', 'k');
      const d1 = await store.beginEffect(e1.lease, 1, old, T0, LEASE);
      const again = await claimOne(store, 'drain-b', T0 + LEASE, LEASE);
      const fresh = start('licence', 'k');
      await store.beginEffect(again!.lease, 2, fresh, T0 + LEASE, LEASE);
      if (d1.action !== 'run') throw new Error('expected run');
      await store.finishEffect(
        { attemptId: d1.attemptId, effectKey: 'licence:k', runToken: old.runToken, outcome: 'failed', error: 'late', wasDone: false },
        T0 + LEASE + 1,
      );
      expect((await store.getEvent(e1.id))!.effects).toMatchObject([{ status: 'running', runs: 2, lastError: null }]);
    });

    it('a forced replay runs a done key again; an older version is stale, a newer one runs', async () => {
      const e1 = await claimed('a');
      const s1 = start('sub', 'k', { version: '10' });
      const d1 = await store.beginEffect(e1.lease, 1, s1, T0, LEASE);
      if (d1.action !== 'run') throw new Error('expected run');
      await store.finishEffect({ attemptId: d1.attemptId, effectKey: 'sub:k', runToken: s1.runToken, outcome: 'ok', version: '10', wasDone: false }, T0);
      await store.completeUnit(e1.lease, T0);

      const e2 = await claimed('b');
      expect(await store.beginEffect(e2.lease, 1, start('sub', 'k', { version: '9' }), T0, LEASE)).toMatchObject({ action: 'stale', appliedVersion: '10' });
      const s3 = start('sub', 'k', { version: '11' });
      expect(await store.beginEffect(e2.lease, 1, s3, T0, LEASE)).toMatchObject({ action: 'run', wasDone: true, runs: 2 });

      const e3 = await claimed('c');
      const forced = await store.beginEffect(e3.lease, 1, start('sub', 'k', { force: true }), T0, LEASE);
      // The key is running for e2 under a live lease: even a forced run waits its turn.
      expect(forced).toMatchObject({ action: 'busy' });
    });

    it('two receivers deciding the same keys at the same moment: each key runs once, the other event is busy', async () => {
      const other = await o.another();
      const keys = Array.from({ length: 15 }, (_, i) => `cus_${i}`);
      for (const k of keys) {
        await store.ingest(event(`${k}-a`));
        await store.ingest(event(`${k}-b`));
      }
      await planEach(store, T0);
      // Claimed first, one receiver after the other (thirty claims at once on PostgreSQL may
      // find every free lane locked by another claim for a moment, and take none: a drain
      // claims again at its next turn); then every decision at once.
      const claims: [ClaimedUnit, ClaimedUnit][] = [];
      for (const k of keys) claims.push([(await claimOne(store, `mine-${k}`, T0, LEASE))!, (await claimOne(other, `theirs-${k}`, T0, LEASE))!]);
      const decisions = await Promise.all(
        keys.map((k, i) => {
          const [a, b] = claims[i]!;
          return Promise.all([store.beginEffect(a.lease, 1, start('licence', k), T0, LEASE), other.beginEffect(b.lease, 1, start('licence', k), T0, LEASE)]);
        }),
      );
      for (const pair of decisions) expect(pair.map((d) => d.action).sort()).toEqual(['busy', 'run']);
      expect((await store.stats(T0)).effectsByStatus.running).toBe(keys.length);
    });

    describe('run keys: what each run is sent as', () => {
      /** Runs `s` for the claimed event to the end: ok, or failed. */
      async function run(e: { lease: Lease; attempt: number }, s: EffectStart, outcome: 'ok' | 'failed' = 'ok', now = T0) {
        const d = await store.beginEffect(e.lease, e.attempt, s, now, LEASE);
        if (d.action !== 'run') throw new Error(`expected run, got ${d.action}`);
        await store.finishEffect(
          {
            attemptId: d.attemptId,
            effectKey: s.effectKey,
            runToken: s.runToken,
            outcome,
            ...(outcome === 'failed' ? { error: 'no' } : {}),
            wasDone: d.wasDone,
          },
          now,
        );
        return d.runKey;
      }
      const runKeys = async (id: number) => (await store.getEvent(id))!.attemptRows.map((a) => a.runKey);

      it('an ordinary run is the effect key, on a retry and after a crash; a forced run has its own key, kept until it ends ok', async () => {
        const e1 = await claimed('a');
        expect(await run(e1, start('licence', 'k'), 'failed')).toBe('licence:k');
        // The drain crashed in the retry: the lease expires, another drain claims it and runs it again.
        const crashed = await store.beginEffect(e1.lease, 2, start('licence', 'k'), T0, LEASE);
        expect(crashed).toMatchObject({ action: 'run', runKey: 'licence:k' });
        const again = await claimOne(store, 'drain-b', T0 + LEASE, LEASE);
        expect(again?.id).toBe(e1.id);
        expect(await run(again!, start('licence', 'k'), 'ok', T0 + LEASE)).toBe('licence:k');
        await store.completeUnit(again!.lease, T0 + LEASE);
        expect(await runKeys(e1.id)).toEqual(['licence:k', 'licence:k', 'licence:k']);

        // replay --force: a run of its own, whose failure and crash repeat it under the same key.
        await store.replayEvents([e1.id], { force: true, now: T0 + LEASE });
        const f1 = await claimOne(store, 'drain-c', T0 + LEASE, LEASE);
        const forced = (extra: Partial<EffectStart> = {}) => start('licence', 'k', { force: true, ...extra });
        expect(await run(f1!, forced(), 'failed', T0 + LEASE)).toBe('licence:k#forced-1');
        const crash = await store.beginEffect(f1!.lease, f1!.attempt, forced(), T0 + LEASE, LEASE);
        expect(crash).toMatchObject({ action: 'run', runKey: 'licence:k#forced-1', wasDone: true });
        const f2 = await claimOne(store, 'drain-d', T0 + 2 * LEASE, LEASE);
        expect(await run(f2!, forced(), 'ok', T0 + 2 * LEASE)).toBe('licence:k#forced-1');
        await store.completeUnit(f2!.lease, T0 + 2 * LEASE);

        // Another forced replay: a new key, unlike the first run's and the earlier forced run's.
        await store.replayEvents([e1.id], { force: true, now: T0 + 2 * LEASE });
        const f3 = await claimOne(store, 'drain-e', T0 + 2 * LEASE, LEASE);
        const third = await run(f3!, forced(), 'ok', T0 + 2 * LEASE);
        expect(third).toMatch(/^licence:k#forced-\d+$/);
        expect(third).not.toBe('licence:k#forced-1');
        // A plain replay after it: the key is done, nothing runs, no run key.
        await store.completeUnit(f3!.lease, T0 + 2 * LEASE);
        await store.replayEvents([e1.id], { force: false, now: T0 + 2 * LEASE });
        const plain = await claimOne(store, 'drain-f', T0 + 2 * LEASE, LEASE);
        expect(await store.beginEffect(plain!.lease, plain!.attempt, start('licence', 'k'), T0 + 2 * LEASE, LEASE)).toMatchObject({ action: 'skipped' });
        expect(await runKeys(e1.id)).toEqual([
          'licence:k',
          'licence:k',
          'licence:k',
          'licence:k#forced-1',
          'licence:k#forced-1',
          'licence:k#forced-1',
          third,
          null,
        ]);
        // A done key that failed a forced run stays done; the ledger counts every forced run.
        expect((await store.getEvent(e1.id))!.effects).toMatchObject([{ status: 'done', forcedRuns: 4 }]);
      });

      it('a forced replay retried for one route does not run the route that already ran in it again; the next forced replay does', async () => {
        const e1 = await claimed('a');
        expect(await run(e1, start('licence', 'k'))).toBe('licence:k');
        expect(await run(e1, start('mail', 'k'))).toBe('mail:k');
        await store.completeUnit(e1.lease, T0);

        await store.replayEvents([e1.id], { force: true, now: T0 });
        const forced = (route: string) => start(route, 'k', { force: true });
        const f1 = await claimOne(store, 'drain-b', T0, LEASE);
        expect(await run(f1!, forced('licence'))).toBe('licence:k#forced-1');
        expect(await run(f1!, forced('mail'), 'failed')).toBe('mail:k#forced-1');
        await store.retryUnit(f1!.lease, 'mail failed', T0);
        // The retry: licence already ran in this replay (skipped), mail repeats its own forced run.
        const f2 = await claimOne(store, 'drain-c', T0, LEASE);
        expect(await store.beginEffect(f2!.lease, f2!.attempt, forced('licence'), T0, LEASE)).toMatchObject({ action: 'skipped' });
        expect(await run(f2!, forced('mail'))).toBe('mail:k#forced-1');
        await store.completeUnit(f2!.lease, T0);

        // A new forced replay runs both again, each under a new key.
        await store.replayEvents([e1.id], { force: true, now: T0 });
        const f3 = await claimOne(store, 'drain-d', T0, LEASE);
        expect(await run(f3!, forced('licence'))).toBe('licence:k#forced-2');
        expect(await run(f3!, forced('mail'))).toMatch(/^mail:k#forced-\d+$/);
        expect((await store.getEvent(e1.id))!.effects).toMatchObject([
          { effectKey: 'licence:k', status: 'done', forcedRuns: 2 },
          { effectKey: 'mail:k', status: 'done' },
        ]);
      });

      it("a module effect's handler gets the run key, and the database's dialect", async () => {
        const e1 = await claimed('a');
        const seen: string[] = [];
        const handler = async (db: EffectDb, r: { runKey: string }) => void seen.push(`${db.dialect} ${r.runKey}`);
        expect(await store.runTransactionalEffect(e1.lease, 1, start('licence', 'k'), handler, () => T0, LEASE)).toMatchObject({ action: 'ok' });
        const fail = async () => {
          throw new Error('no');
        };
        expect(await store.runTransactionalEffect(e1.lease, 1, start('licence', 'k', { force: true }), fail, () => T0, LEASE)).toMatchObject({
          action: 'failed',
        });
        // The failed forced run is repeated under its key, then a new forced run has a new one.
        expect(await store.runTransactionalEffect(e1.lease, 1, start('licence', 'k', { force: true }), handler, () => T0, LEASE)).toMatchObject({
          action: 'ok',
        });
        expect(await store.runTransactionalEffect(e1.lease, 1, start('licence', 'k', { force: true }), handler, () => T0, LEASE)).toMatchObject({
          action: 'ok',
        });
        expect(seen).toEqual([`${backend.name} licence:k`, `${backend.name} licence:k#forced-1`, `${backend.name} licence:k#forced-3`]);
        expect(await runKeys(e1.id)).toEqual(['licence:k', 'licence:k#forced-1', 'licence:k#forced-1', 'licence:k#forced-3']);
      });

      it("the README's module example (placeholders by ctx.db.dialect, an upsert both accept) runs here, and its repeat changes nothing", async () => {
        // As in the README's module effect section.
        const readme = async (event: { json: { data: { object: { customer_email: string } } } }, ctx: { db: EffectDb; key: string }) => {
          const p = (n: number) => (ctx.db.dialect === 'postgres' ? `$${n}` : '?');
          await ctx.db.run('CREATE TABLE IF NOT EXISTS licences (order_id TEXT PRIMARY KEY, email TEXT NOT NULL)');
          await ctx.db.run(`INSERT INTO licences (order_id, email) VALUES (${p(1)}, ${p(2)}) ON CONFLICT (order_id) DO NOTHING`, [
            ctx.key,
            event.json.data.object.customer_email,
          ]);
        };
        const e1 = await claimed('a');
        for (const [email, force] of [
          ['a@example.com', false],
          ['b@example.com', true],
        ] as const) {
          const out = await store.runTransactionalEffect(
            e1.lease,
            1,
            start('licence', 'o1', { force }),
            (db) => readme({ json: { data: { object: { customer_email: email } } } }, { db, key: 'o1' }),
            () => T0,
            LEASE,
          );
          expect(out).toMatchObject({ action: 'ok' });
        }
        expect(await o.rows('SELECT order_id, email FROM licences')).toEqual([{ order_id: 'o1', email: 'a@example.com' }]);
      });
    });

    it('beginEffect after the lease was lost records nothing', async () => {
      const { id, lease } = await claimed('a', 'old');
      await claimOne(store, 'new', T0 + LEASE, LEASE);
      expect(await store.beginEffect(lease, 1, start('licence', 'k'), T0 + LEASE, LEASE)).toEqual({ action: 'lost' });
      expect((await store.getEvent(id))!.attemptRows).toEqual([]);
    });

    it('records an attempt that ran no effect', async () => {
      const { id } = await claimed('a');
      await store.recordAttempt({
        eventId: id,
        attempt: 1,
        route: 'licence',
        outcome: 'failed',
        error: 'key template {body.x} resolved to nothing',
        startedAt: T0,
        finishedAt: T0 + 1,
      });
      expect((await store.getEvent(id))!.attemptRows).toMatchObject([
        { route: 'licence', effectKey: null, outcome: 'failed', error: 'key template {body.x} resolved to nothing' },
      ]);
    });
  });

  describe('drain: module effects share the transaction that marks them done', () => {
    const p = backend.capabilities.placeholder;
    beforeEach(async () => {
      await o.exec('CREATE TABLE licences (key TEXT PRIMARY KEY, n INTEGER NOT NULL)');
    });
    const licences = async () => (await o.rows<{ key: string; n: number }>('SELECT key, n FROM licences ORDER BY key')).map((r) => `${r.key}=${Number(r.n)}`);

    it("commits the handler's writes with the ledger row; a second event's run of the key is skipped", async () => {
      const e1 = await claimed('a');
      const handler = async (db: EffectDb) => {
        await db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_1', 1]);
        const rows = await db.query<{ n: number }>(`SELECT n FROM licences WHERE key = ${p(1)}`, ['cus_1']);
        expect(Number(rows[0]!.n)).toBe(1);
      };
      const out = await store.runTransactionalEffect(e1.lease, 1, start('licence', 'cus_1'), handler, () => T0, LEASE);
      expect(out).toMatchObject({ action: 'ok', runs: 1 });
      expect(await licences()).toEqual(['cus_1=1']);

      const e2 = await claimed('b');
      let ran = false;
      const out2 = await store.runTransactionalEffect(
        e2.lease,
        1,
        start('licence', 'cus_1'),
        async () => void (ran = true),
        () => T0,
        LEASE,
      );
      expect(out2).toMatchObject({ action: 'skipped' });
      expect(ran).toBe(false);
      expect((await store.getEvent(e1.id))!.effects).toMatchObject([{ status: 'done', runs: 1 }]);
    });

    it('completeOnOk: the event is marked done in the commit of its last effect; not when the handler throws', async () => {
      const e1 = await claimed('a');
      const out = await store.runTransactionalEffect(
        e1.lease,
        1,
        start('licence', 'cus_1'),
        async (db) => {
          await db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_1', 1]);
        },
        () => T0 + 5,
        LEASE,
        { completeOnOk: true },
      );
      expect(out).toMatchObject({ action: 'ok', completed: true });
      expect(await store.getEvent(e1.id)).toMatchObject({ status: 'done', finishedAt: T0 + 5, leaseOwner: null });
      expect(await licences()).toEqual(['cus_1=1']);

      const e2 = await claimed('b');
      const failed = await store.runTransactionalEffect(
        e2.lease,
        1,
        start('licence', 'cus_2'),
        async () => {
          throw new Error('no');
        },
        () => T0,
        LEASE,
        { completeOnOk: true },
      );
      expect(failed).toMatchObject({ action: 'failed' });
      expect(await store.getEvent(e2.id)).toMatchObject({ status: 'processing' });
      const e3 = await claimed('c');
      const plain = await store.runTransactionalEffect(
        e3.lease,
        1,
        start('licence', 'cus_3'),
        async () => {},
        () => T0,
        LEASE,
      );
      expect(plain).toMatchObject({ action: 'ok', completed: false });
      expect(await store.getEvent(e3.id)).toMatchObject({ status: 'processing' });
    });

    it("a failed module run leaves another run's running ledger row exactly as it was", async () => {
      // Event a started an external run of the key, then its process stalled past the lease.
      const e1 = await claimed('a');
      const s1 = start('licence', 'cus_1');
      expect(await store.beginEffect(e1.lease, e1.attempt, s1, T0, LEASE)).toMatchObject({ action: 'run' });
      const e2 = await claimed('b', 'drain-b');
      const out = await store.runTransactionalEffect(
        e2.lease,
        e2.attempt,
        start('licence', 'cus_1'),
        async () => {
          throw new Error('card declined');
        },
        () => T0 + LEASE,
        LEASE,
      );
      expect(out).toMatchObject({ action: 'failed', error: 'card declined' });
      const [row] = (await store.getEvent(e1.id))!.effects;
      expect(row).toMatchObject({ status: 'running', eventId: e1.id, runs: 1, finishedAt: null, lastError: null });
    });

    it("rolls the handler's writes back when it throws, and records the failure", async () => {
      const { id, lease } = await claimed('a');
      const out = await store.runTransactionalEffect(
        lease,
        1,
        start('licence', 'cus_1'),
        async (db) => {
          await db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_1', 1]);
          throw new Error('card declined');
        },
        () => T0,
        LEASE,
      );
      expect(out).toMatchObject({ action: 'failed', error: 'card declined' });
      expect(await licences()).toEqual([]);
      const shown = await store.getEvent(id);
      expect(shown!.attemptRows).toMatchObject([{ outcome: 'failed', error: 'card declined' }]);
      expect(shown!.effects).toMatchObject([{ status: 'failed', lastError: 'card declined' }]);
    });

    it('a failed statement the handler catches leaves its earlier writes in the transaction', async () => {
      await o.exec(`INSERT INTO licences (key, n) VALUES ('taken', 0)`);
      const { lease } = await claimed('a');
      const out = await store.runTransactionalEffect(
        lease,
        1,
        start('licence', 'cus_2'),
        async (db) => {
          await db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_2', 1]);
          await expect(db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['taken', 1])).rejects.toThrow();
          await db.run(`UPDATE licences SET n = n + 1 WHERE key = ${p(1)}`, ['cus_2']);
        },
        () => T0,
        LEASE,
      );
      expect(out).toMatchObject({ action: 'ok' });
      expect(await licences()).toEqual(['cus_2=2', 'taken=0']);
    });

    it('a statement the handler started but did not await still belongs to the transaction', async () => {
      const { lease } = await claimed('a');
      const out = await store.runTransactionalEffect(
        lease,
        1,
        start('licence', 'cus_3'),
        async (db) => {
          void db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_3', 1]);
        },
        () => T0,
        LEASE,
      );
      expect(out).toMatchObject({ action: 'ok' });
      expect(await licences()).toEqual(['cus_3=1']);
      expect(await o.rows('SELECT effect_key FROM effects')).toHaveLength(1);
    });

    it('refuses transaction control from the handler, and a handle used after the transaction ended', async () => {
      const { lease } = await claimed('a');
      let kept: EffectDb | undefined;
      const out = await store.runTransactionalEffect(
        lease,
        1,
        start('licence', 'k'),
        async (db) => {
          kept = db;
          await expect(db.run('COMMIT')).rejects.toThrow(/do not BEGIN, COMMIT or ROLLBACK/);
        },
        () => T0,
        LEASE,
      );
      expect(out).toMatchObject({ action: 'ok' });
      await expect(kept!.query('SELECT 1')).rejects.toThrow(/closed/);
    });

    it('two receivers running the same key as a module effect: one commits, the other is skipped after it', async () => {
      const other = await o.another();
      await store.ingest(event('a'));
      await store.ingest(event('b'));
      const a = await claimOne(store, 'mine', T0, LEASE);
      const b = await claimOne(other, 'theirs', T0, LEASE);
      let entered!: () => void;
      const inside = new Promise<void>((r) => (entered = r));
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const handler = async (db: EffectDb) => {
        entered();
        await gate;
        await db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_1', 1]);
      };
      const first = store.runTransactionalEffect(a!.lease, 1, start('licence', 'cus_1'), handler, () => T0, LEASE);
      await inside;
      // The first holds its transaction open; the second must wait for it, then see it done.
      const second = other.runTransactionalEffect(b!.lease, 1, start('licence', 'cus_1'), handler, () => T0, LEASE);
      release();
      const outcomes = await Promise.all([first, second]);
      expect(outcomes.map((x) => x.action)).toEqual(['ok', 'skipped']);
      expect(await licences()).toEqual(['cus_1=1']);
    });

    it('runs nothing when the lease was lost before it started', async () => {
      const { lease } = await claimed('a', 'old');
      await claimOne(store, 'new', T0 + LEASE, LEASE);
      let ran = false;
      const out = await store.runTransactionalEffect(
        lease,
        1,
        start('licence', 'k'),
        async () => void (ran = true),
        () => T0 + LEASE,
        LEASE,
      );
      expect(out).toEqual({ action: 'lost' });
      expect(ran).toBe(false);
    });

    it("a handler holds no lock before its first statement: another receiver's delivery is stored meanwhile", async () => {
      // A handler that calls an API before it writes: ingest must not wait for it (on
      // SQLite, a transaction opened before the handler held the one write lock, and this
      // ingest failed as unavailable after busyTimeoutMs).
      const other = await o.another();
      const { lease } = await claimed('a');
      const out = await store.runTransactionalEffect(
        lease,
        1,
        start('licence', 'cus_1'),
        async (db) => {
          const waited = Date.now();
          expect(await other.ingest(event('b'))).toMatchObject({ outcome: 'accepted' });
          expect(Date.now() - waited).toBeLessThan(BUSY_MS / 2);
          await db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_1', 1]);
        },
        () => T0,
        LEASE,
      );
      expect(out).toMatchObject({ action: 'ok', runs: 1 });
      expect(await licences()).toEqual(['cus_1=1']);
    });

    it('a lease taken over while the handler runs: nothing of the run commits, and the new holder runs the key', async () => {
      const { lease } = await claimed('a', 'old');
      const out = await store.runTransactionalEffect(
        lease,
        1,
        start('licence', 'cus_1'),
        async (db) => {
          // The old drain stalled past its lease before its first statement: another takes the unit.
          expect(await claimOne(store, 'new', T0 + 3 * LEASE, LEASE)).toMatchObject({ lease: { owner: 'new' } });
          await db.run(`INSERT INTO licences (key, n) VALUES (${p(1)}, ${p(2)})`, ['cus_1', 1]);
        },
        () => T0 + LEASE,
        LEASE,
      );
      expect(out).toEqual({ action: 'lost' });
      expect(await licences()).toEqual([]);
      expect(await o.rows('SELECT effect_key FROM effects')).toEqual([]);
    });
  });

  describe('operations', () => {
    /** Ingests, then moves the event to `status`, received `ageDays` before T0. */
    async function seeded(deliveryId: string, status: 'pending' | 'processing' | 'done' | 'dead', ageDays: number, extra = ''): Promise<number> {
      const r = await store.ingest(event(deliveryId, undefined, { receivedAt: T0 - ageDays * DAY }));
      await o.exec(`UPDATE events SET status = '${status}'${extra} WHERE id = ${r.eventId}`);
      return r.eventId;
    }

    it('purges only finished events older than the cutoff, in bounded batches, with their attempts and conflicts, never the ledger', async () => {
      const old = [await seeded('old-1', 'done', 40), await seeded('old-2', 'done', 41), await seeded('old-3', 'done', 42)];
      await store.ingest(event('old-1', '{"other":1}', { receivedAt: T0 - 39 * DAY })); // a conflict of old-1
      const kept = [
        await seeded('old-pending', 'pending', 50),
        await seeded('old-processing', 'processing', 50, `, lease_owner = 'x', lease_expires_at = ${T0 - DAY}`),
        await seeded('old-dead', 'dead', 50),
        await seeded('young-done', 'done', 5),
      ];
      for (const id of [...old, ...kept]) {
        await store.recordAttempt({ eventId: id, attempt: 1, route: 'r', outcome: 'failed', error: 'x', startedAt: T0 - 40 * DAY, finishedAt: T0 - 40 * DAY });
      }
      await o.exec(`INSERT INTO effects (effect_key, route, business_key, status, event_id, runs) VALUES ('r:1', 'r', '1', 'done', ${old[0]}, 1)`);

      const cutoff = T0 - 30 * DAY;
      expect(await store.countPurgeable(cutoff)).toBe(3);
      const first = await store.purgeBatch(cutoff, 2);
      expect(first.events).toBe(2);
      const second = await store.purgeBatch(cutoff, 2);
      expect(second.events).toBe(1);
      expect(await store.purgeBatch(cutoff, 2)).toEqual({ events: 0, attempts: 0, conflicts: 0 });
      expect(first.attempts + second.attempts).toBe(3);
      expect(first.conflicts + second.conflicts).toBe(1);

      expect((await store.listEvents({ limit: 10 })).map((e) => e.id).sort((a, b) => a - b)).toEqual(kept);
      expect(Number((await o.rows<{ n: number }>('SELECT count(*) AS n FROM attempts'))[0]!.n)).toBe(4);
      expect(Number((await o.rows<{ n: number }>('SELECT count(*) AS n FROM effects'))[0]!.n)).toBe(1);
      // A purged delivery id is forgotten: a redelivery is a new event.
      expect((await store.ingest(event('old-1'))).outcome).toBe('accepted');
    });

    it('purges finished ledger rows older than the cutoff that no stored event refers to, in key order and batches; keeps the rest', async () => {
      const ledgerRow = (key: string, status: string, eventId: number | null, finishedAt: number | null) =>
        o.exec(
          `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at)
           VALUES ('${key}', 'r', '${key.slice(2)}', '${status}', ${eventId ?? 'NULL'}, 1, ${finishedAt ?? 'NULL'}, ${finishedAt ?? 'NULL'})`,
        );
      const kept = await seeded('kept', 'done', 40);
      const dead = await seeded('dead', 'dead', 50);
      // The event that last ran it is still stored.
      await ledgerRow('r:by-event', 'done', kept, T0 - 60 * DAY);
      // Its last run's event is gone, but a stored (dead) event decided about the key.
      await ledgerRow('r:by-attempt', 'done', 9_999, T0 - 60 * DAY);
      await o.exec(
        `INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome) VALUES (${dead}, 1, 'r', 'r:by-attempt', ${T0}, ${T0}, 'skipped')`,
      );
      // Running: a run in progress, or one that crashed and must repeat (finished_at is its previous run's).
      await ledgerRow('r:running', 'running', 9_998, T0 - 60 * DAY);
      await ledgerRow('r:young', 'done', null, T0 - 10 * DAY);
      await ledgerRow('r:unfinished', 'done', null, null);
      // No stored event refers to these two.
      await ledgerRow('r:gone', 'done', 9_997, T0 - 60 * DAY);
      await ledgerRow('r:gone-failed', 'failed', null, T0 - 45 * DAY);

      const cutoff = T0 - 30 * DAY;
      expect((await store.stats(T0)).ledger).toEqual({ bytes: expect.any(Number), oldestFinishedAt: T0 - 60 * DAY });
      expect(await store.countLedgerPurgeable(cutoff)).toBe(2);
      // Key order: r:by-attempt, r:by-event, r:gone (the first purgeable: one delete's worth), ...
      expect(await store.purgeLedgerBatch(cutoff, '', 1)).toEqual({ examined: 3, picked: 1, removed: 1, lastKey: 'r:gone' });
      expect(await store.purgeLedgerBatch(cutoff, 'r:gone', 1)).toEqual({ examined: 1, picked: 1, removed: 1, lastKey: 'r:gone-failed' });
      expect(await store.purgeLedgerBatch(cutoff, 'r:gone-failed', 1)).toEqual({ examined: 3, picked: 0, removed: 0, lastKey: null });
      const keys = async () => (await o.rows<{ effect_key: string }>('SELECT effect_key FROM effects ORDER BY effect_key')).map((r) => r.effect_key);
      expect(await keys()).toEqual(['r:by-attempt', 'r:by-event', 'r:running', 'r:unfinished', 'r:young']);

      // Once its event is purged, nothing refers to the key any more: the next ledger purge takes it.
      expect((await store.purgeBatch(cutoff, 10)).events).toBe(1);
      expect(await store.purgeLedgerBatch(cutoff, '', 10)).toEqual({ examined: 5, picked: 1, removed: 1, lastKey: null });
      expect(await keys()).toEqual(['r:by-attempt', 'r:running', 'r:unfinished', 'r:young']);

      // The cost: an event that brings a purged key again runs its effect again.
      const again = await claimed('kept-again');
      expect(await store.beginEffect(again.lease, again.attempt, start('r', 'by-event'), T0, LEASE)).toMatchObject({ action: 'run' });
      // A key still in the ledger stays skipped.
      const other = await claimed('other', 'drain-b');
      await o.exec(`UPDATE effects SET status = 'done' WHERE effect_key = 'r:young'`);
      expect(await store.beginEffect(other.lease, other.attempt, start('r', 'young'), T0, LEASE)).toMatchObject({ action: 'skipped' });
    });

    it('a ledger purge batch reads at most ten keys per key it may delete, and the next goes on from there', async () => {
      const values = Array.from({ length: 12 }, (_, i) => `('y:${String(i).padStart(2, '0')}', 'y', '${i}', 'done', NULL, 1, ${T0}, ${T0})`);
      await o.exec(`INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at) VALUES ${values.join(', ')}`);
      await o.exec(
        `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at) VALUES ('z:old', 'z', 'old', 'done', NULL, 1, 0, 0)`,
      );
      const cutoff = T0 - 30 * DAY;
      expect(await store.purgeLedgerBatch(cutoff, '', 1)).toEqual({ examined: 10, picked: 0, removed: 0, lastKey: 'y:09' });
      expect(await store.purgeLedgerBatch(cutoff, 'y:09', 1)).toEqual({ examined: 3, picked: 1, removed: 1, lastKey: 'z:old' });
      expect(await store.purgeLedgerBatch(cutoff, 'z:old', 1)).toEqual({ examined: 0, picked: 0, removed: 0, lastKey: null });
      expect((await store.stats(T0)).effectsByStatus.done).toBe(12);
    });

    it('drops bodies and headers of old finished events in batches; dedupe still answers from the stored row', async () => {
      const a = await seeded('a', 'done', 40);
      await seeded('b', 'done', 41);
      await seeded('c', 'pending', 41);
      const cutoff = T0 - 30 * DAY;
      expect(await store.countBodiesDroppable(cutoff)).toBe(2);
      expect((await store.dropBodiesBatch(cutoff, 1)).events).toBe(1);
      expect((await store.dropBodiesBatch(cutoff, 5)).events).toBe(1);
      expect((await store.dropBodiesBatch(cutoff, 5)).events).toBe(0);
      const shown = await store.getEvent(a);
      expect(shown).toMatchObject({ body: null, headers: null });
      expect(await store.ingest(event('a', undefined, { receivedAt: T0 }))).toMatchObject({ outcome: 'duplicate', eventId: a });
      expect(await store.replayEvents([a], { force: false, now: T0 })).toEqual({ replayed: [], refused: [{ eventId: a, reason: 'body_dropped' }] });
    });

    it('replays all or nothing: refuses unknown ids and live claims; resets the retry counter; force and dead', async () => {
      const done = await seeded('done', 'done', 1, ', attempts = 3');
      const dead = await seeded('dead', 'dead', 1, `, attempts = 12, last_error = 'gave up'`);
      const live = await seeded('live', 'processing', 1);
      // A lease is a unit's: the live claim is on one of the event's units.
      await o.exec(
        `INSERT INTO units (event_id, route, lane, status, next_attempt_at, lease_owner, lease_expires_at) VALUES (${live}, 'r', 'r', 'processing', ${T0}, 'x', ${T0 + LEASE})`,
      );

      const refused = await store.replayEvents([done, 999_999, live], { force: false, now: T0 });
      expect(refused.replayed).toEqual([]);
      expect(refused.refused).toEqual([
        { eventId: 999_999, reason: 'not_found' },
        { eventId: live, reason: 'processing', leaseOwner: 'x', leaseExpiresAt: T0 + LEASE },
      ]);
      expect(await store.getEvent(done)).toMatchObject({ status: 'done', attempts: 3 });

      const ok = await store.replayEvents([done], { force: true, now: T0 });
      expect(ok).toEqual({ replayed: [{ eventId: done, source: 'shop', deliveryId: 'done', previousStatus: 'done', force: true }], refused: [] });
      expect(await store.getEvent(done)).toMatchObject({ status: 'pending', attempts: 0, nextAttemptAt: T0, forceEffects: true, finishedAt: null });
      expect((await claimOne(store, 'd', T0, LEASE))?.forceEffects).toBe(true);

      const deadReplay = await store.replayDead({ force: false, now: T0 });
      expect(deadReplay.replayed.map((r) => [r.eventId, r.previousStatus])).toEqual([[dead, 'dead']]);
      expect(await store.getEvent(dead)).toMatchObject({ status: 'pending', attempts: 0, lastError: 'gave up' });
      expect(await store.findEventId('shop', 'dead')).toBe(dead);
      expect(await store.findEventId('shop', 'nope')).toBeUndefined();
    });

    it('lists newest first with filters, and counts everything in stats and queueStats', async () => {
      const a = await seeded('a', 'done', 3);
      const b = await seeded('b', 'dead', 2);
      const c = await store.ingest(event('c', undefined, { source: 'github', receivedAt: T0 - DAY }));
      await store.ingest(event('c', undefined, { source: 'github' }));
      const d = await seeded('d', 'processing', 1);
      // A lease is a unit's: the stuck claim (its lease ran out, nobody took it back) is on the event's unit.
      await o.exec(
        `INSERT INTO units (event_id, route, lane, status, attempts, next_attempt_at, lease_owner, lease_expires_at) VALUES (${d}, 'r', 'r', 'processing', 1, ${T0}, 'gone', ${T0 - 5})`,
      );

      expect((await store.listEvents({ limit: 10 })).map((e) => e.deliveryId)).toEqual(['d', 'c', 'b', 'a']);
      expect((await store.listEvents({ limit: 2 })).map((e) => e.deliveryId)).toEqual(['d', 'c']);
      expect((await store.listEvents({ limit: 10, status: 'dead' })).map((e) => e.id)).toEqual([b]);
      expect((await store.listEvents({ limit: 10, source: 'github' }))[0]).toMatchObject({ id: c.eventId, duplicates: 1, status: 'pending' });
      expect((await store.listEvents({ limit: 10, source: 'shop', status: 'done' })).map((e) => e.id)).toEqual([a]);

      const s = await store.stats(T0);
      expect(s).toEqual({
        byStatus: { pending: 1, processing: 1, done: 1, dead: 1 },
        duplicates: 1,
        conflicts: 0,
        sources: [
          { source: 'github', oldestReceivedAt: T0 - DAY, events: 1 },
          { source: 'shop', oldestReceivedAt: T0 - 3 * DAY, events: 3 },
        ],
        stuckClaims: 1,
        oldestStuckLeaseExpiresAt: T0 - 5,
        effectsByStatus: { running: 0, done: 0, failed: 0 },
        ledger: { bytes: expect.any(Number), oldestFinishedAt: null },
        // Event 1 ('a') is still stored: nothing older was ever purged.
        firstEventReceivedAt: T0 - 3 * DAY,
        // The stuck claim's unit is the one unit there is.
        lanes: [{ lane: 'r', pending: 0, running: 1, oldestPendingReceivedAt: null }],
      });
      expect(s.ledger.bytes).toBeGreaterThan(0);
      if (store.queueStats !== undefined) {
        expect(await store.queueStats()).toEqual({ pending: 1, processing: 1, dead: 1, oldestPendingReceivedAt: T0 - DAY });
      }
      expect(await store.getEvent(123_456)).toBeUndefined();
    });

    it("reads the oldest pending event's age from the first stored of them, not from every pending row", async () => {
      // The clock stepped back between two deliveries: the gauge follows the order they were
      // stored in (one look-up in the pending index; min(received_at) read every pending row).
      await store.ingest(event('first', undefined, { receivedAt: T0 }));
      await store.ingest(event('second', undefined, { receivedAt: T0 - DAY }));
      expect(await store.queueStats()).toEqual({ pending: 2, processing: 0, dead: 0, oldestPendingReceivedAt: T0 });
    });

    it('lists by every admin filter, and pages by keyset (id) through the whole list', async () => {
      const HOUR = 3_600_000;
      const ids: number[] = [];
      for (let i = 0; i < 7; i++) {
        const source = i % 2 === 0 ? 'shop' : 'github';
        const r = await store.ingest(event(`evt_${i}`, undefined, { source, eventType: i < 3 ? 'order.paid' : 'order.refunded', receivedAt: T0 + i * HOUR }));
        ids.push(r.eventId);
      }
      await store.ingest(event('other_%_1', undefined, { source: 'shop', eventType: 'ping', receivedAt: T0 + 10 * HOUR }));
      const list = async (q: Omit<Parameters<Store['listEvents']>[0], 'limit'>, limit = 100) =>
        (await store.listEvents({ limit, ...q })).map((e) => e.deliveryId);

      expect(await list({ deliveryId: 'evt_3' })).toEqual(['evt_3']);
      expect(await list({ deliveryId: 'evt_3', source: 'shop' })).toEqual([]);
      expect(await list({ deliveryId: 'evt' })).toEqual([]);
      expect(await list({ deliveryIdPrefix: 'evt_' }, 3)).toEqual(['evt_6', 'evt_5', 'evt_4']);
      // % and _ are plain characters, not LIKE patterns.
      expect(await list({ deliveryIdPrefix: 'other_%' })).toEqual(['other_%_1']);
      expect(await list({ deliveryIdPrefix: 'e%' })).toEqual([]);
      expect(await list({ eventType: 'order.paid' })).toEqual(['evt_2', 'evt_1', 'evt_0']);
      expect(await list({ eventType: 'order.paid', source: 'github' })).toEqual(['evt_1']);
      expect(await list({ receivedFrom: T0 + 2 * HOUR, receivedBefore: T0 + 4 * HOUR })).toEqual(['evt_3', 'evt_2']);

      // Keyset pages: each starts below the previous page's last id; together they are the list.
      const pages: string[][] = [];
      let beforeId: number | undefined;
      for (;;) {
        const page = await store.listEvents({ limit: 3, deliveryIdPrefix: 'evt_', beforeId });
        if (page.length === 0) break;
        pages.push(page.map((e) => e.deliveryId));
        beforeId = page[page.length - 1]!.id;
      }
      expect(pages).toEqual([['evt_6', 'evt_5', 'evt_4'], ['evt_3', 'evt_2', 'evt_1'], ['evt_0']]);
      expect((await store.listEvents({ limit: 10, beforeId: ids[1] })).map((e) => e.id)).toEqual([ids[0]]);
    });

    it('lists by an event type glob: * and ? are wildcards, case-sensitive, every other character plain', async () => {
      const types = ['invoice.paid', 'invoice.payment_failed', 'Invoice.paid', 'invoice%x', 'invoice[1]', 'charge.refunded', 'a_b'];
      for (const [i, eventType] of types.entries()) await store.ingest(event(`t${i}`, undefined, { eventType }));
      const list = async (eventTypeGlob: string) => (await store.listEvents({ limit: 100, eventTypeGlob })).map((e) => e.eventType).sort();
      expect(await list('invoice.*')).toEqual(['invoice.paid', 'invoice.payment_failed']);
      expect(await list('*.paid')).toEqual(['Invoice.paid', 'invoice.paid']);
      expect(await list('invoice.pai?')).toEqual(['invoice.paid']);
      // LIKE's and GLOB's own specials match only themselves.
      expect(await list('invoice%*')).toEqual(['invoice%x']);
      expect(await list('invoice[1]')).toEqual(['invoice[1]']);
      expect(await list('a_b')).toEqual(['a_b']);
      expect(await list('a?b')).toEqual(['a_b']);
      expect(await list('invoice')).toEqual([]);
      expect((await store.listEvents({ limit: 100, eventTypeGlob: 'invoice.*', source: 'other' })).length).toBe(0);
    });

    it('searches bodies for a text among the newest events matching the other filters, and says when the bound left older ones unsearched', async () => {
      const ids: number[] = [];
      for (let i = 0; i < 6; i++) {
        const body = i % 2 === 0 ? `{"id":"s${i}","email":"ann@example.com"}` : `{"id":"s${i}","email":"bob@example.com"}`;
        ids.push((await store.ingest(event(`s${i}`, body, { eventType: i < 3 ? 'old' : 'new' }))).eventId);
      }
      // Bytes that are not UTF-8 are searched as bytes; a dropped body never matches.
      const binary = (await store.ingest(event('bin', Buffer.from([0xff, 0x00, 0x61, 0x6e, 0x6e, 0x40])))).eventId;
      const dropped = (await store.ingest(event('dropped', '{"email":"ann@example.com"}'))).eventId;
      await o.exec(`UPDATE events SET body = NULL WHERE id = ${dropped}`);
      const search = (bodyContains: string, q: { scanLimit?: number; limit?: number; eventType?: string } = {}) =>
        store.searchEvents({ bodyContains, scanLimit: q.scanLimit ?? 1000, limit: q.limit ?? 100, eventType: q.eventType });
      expect(await search('ann@')).toEqual({ events: expect.any(Array), scanLimitReached: false });
      expect((await search('ann@')).events.map((e) => e.id)).toEqual([binary, ids[4], ids[2], ids[0]]);
      expect((await search('ANN@')).events).toEqual([]);
      expect((await search('bob@', { eventType: 'old' })).events.map((e) => e.id)).toEqual([ids[1]]);
      // The 3 newest (dropped, binary, s5): only the binary body matches, and older events were not searched.
      expect(await search('ann@', { scanLimit: 3 })).toEqual({ events: [expect.objectContaining({ id: binary })], scanLimitReached: true });
      // A full page needs no older events: nothing was missed.
      expect(await search('ann@', { scanLimit: 3, limit: 1 })).toEqual({ events: [expect.objectContaining({ id: binary })], scanLimitReached: false });
      // The bound covers every event of that type: complete.
      expect(await search('ann@', { scanLimit: 3, eventType: 'old' })).toEqual({
        events: [expect.objectContaining({ id: ids[2] }), expect.objectContaining({ id: ids[0] })],
        scanLimitReached: false,
      });
      // Texts with LIKE's and GLOB's special characters are plain text here.
      expect((await search('%')).events).toEqual([]);
      expect((await search('"s3"')).events.map((e) => e.id)).toEqual([ids[3]]);
    });

    it('finds a delivery id by its stored forms (an exact id in one source or any, a suffix in one source), and lists by origin', async () => {
      const guid = '6f1e2d3c-aaaa-bbbb-cccc-0123456789ab';
      const a = (await store.ingest(event(`111:${guid}`, undefined, { source: 'gh' }))).eventId;
      const b = (await store.ingest(event(`222:${guid}`, undefined, { source: 'gh' }))).eventId;
      const c = (await store.ingest(event(guid, undefined, { source: 'shop', origin: 'test' }))).eventId;
      // A suffix longer than a stored id, or one in another source, matches nothing.
      const other = (await store.ingest(event(`:${guid}`, undefined, { source: 'gh' }))).eventId;
      const ids = async (deliveryIdForms: Parameters<Store['listEvents']>[0]['deliveryIdForms'], extra = {}) =>
        (await store.listEvents({ limit: 10, deliveryIdForms, ...extra })).map((e) => e.id);
      expect(await ids([{ source: 'gh', suffix: `:${guid}` }])).toEqual([b, a]);
      expect(await ids([{ exact: guid }, { source: 'gh', suffix: `:${guid}` }])).toEqual([c, b, a]);
      expect(await ids([{ source: 'gh', exact: guid }])).toEqual([]);
      expect(await ids([{ source: 'gh', exact: `:${guid}` }])).toEqual([other]);
      expect(await ids([{ source: 'shop', suffix: `:${guid}` }])).toEqual([]);
      expect(await ids([])).toEqual([]);
      // With the other filters and the keyset.
      expect(await ids([{ source: 'gh', suffix: `:${guid}` }], { beforeId: b })).toEqual([a]);
      expect(await ids([{ exact: guid }, { source: 'gh', suffix: `:${guid}` }], { origin: 'test' })).toEqual([c]);
      expect((await store.listEvents({ limit: 10, origin: 'webhook' })).map((e) => e.id)).toEqual([other, b, a]);
      expect((await store.listEvents({ limit: 10, origin: 'catch-up' })).map((e) => e.id)).toEqual([]);
      expect((await store.listEvents({ limit: 1 }))[0]!.origin).toBe('webhook');
    });

    it('near matches for a delivery id never received: containing it or its beginning, ignoring ASCII case, newest first, among the newest', async () => {
      const mk = async (deliveryId: string, source = 'shop') => (await store.ingest(event(deliveryId, undefined, { source }))).eventId;
      const a = await mk('123:ABCDEF12-3456-7890', 'gh');
      const b = await mk('evt_1PqRsT2eZvKYlo2C');
      const c = await mk('evt_1PqRsT2eZvKYlo2C_other');
      await mk('unrelated');
      await mk('50%_off');
      const near = async (given: string, o: { source?: string; limit?: number; scanLimit?: number } = {}) =>
        (await store.nearDeliveryIds(given, { limit: o.limit ?? 5, scanLimit: o.scanLimit ?? 1000, source: o.source })).map((m) => m.id);
      expect(await near('abcdef12-3456-7890')).toEqual([a]);
      expect(await store.nearDeliveryIds('abcdef12-3456-7890', { limit: 5, scanLimit: 1000 })).toEqual([
        { id: a, source: 'gh', deliveryId: '123:ABCDEF12-3456-7890' },
      ]);
      // A paste cut or mistyped at its end: found by its first characters.
      expect(await near('evt_1PqRsT2eZvKYlo2X')).toEqual([c, b]);
      expect(await near('evt_1PqRsT2eZvKYlo2X', { limit: 1 })).toEqual([c]);
      expect(await near('evt_1PqRsT2eZvKYlo2X', { source: 'gh' })).toEqual([]);
      // Only the newest `scanLimit` are read.
      expect(await near('abcdef12-3456-7890', { scanLimit: 4 })).toEqual([]);
      // LIKE's own characters are plain.
      expect(await near('%')).toEqual([(await store.listEvents({ limit: 1 }))[0]!.id]);
      expect(await near('nothing-like-it')).toEqual([]);
    });

    it("keeps the admin pages' sessions: live until they expire or end; a login forgets the expired ones", async () => {
      await store.startAdminSession('s1', T0 + 1000, T0);
      await store.startAdminSession('s2', T0 + 5000, T0);
      expect(await store.isAdminSessionLive('s1', T0 + 999)).toBe(true);
      expect(await store.isAdminSessionLive('s1', T0 + 1000)).toBe(false);
      expect(await store.isAdminSessionLive('unknown', T0)).toBe(false);
      await store.endAdminSession('s2');
      expect(await store.isAdminSessionLive('s2', T0)).toBe(false);
      await store.startAdminSession('s3', T0 + 9000, T0 + 2000);
      expect(await o.rows('SELECT id FROM admin_sessions ORDER BY id')).toEqual([{ id: 's3' }]);
    });

    it('counts deliveries per hour by outcome and failed attempts per route, within the window only', async () => {
      const HOUR = 3_600_000;
      const now = T0 + 48 * HOUR;
      const old = await store.ingest(event('old', undefined, { receivedAt: now - 60 * HOUR }));
      const a = await store.ingest(event('a', undefined, { receivedAt: now - 2 * HOUR + 5 }));
      const b = await store.ingest(event('b', undefined, { receivedAt: now - 2 * HOUR + 10 }));
      await store.ingest(event('c', undefined, { receivedAt: now - HOUR + 1 }));
      await store.ingest(event('c', '{"different":1}', { receivedAt: now - HOUR + 2 }));
      await store.ingest(event('c', '{"different":1}', { receivedAt: now - HOUR + 3 }));
      await o.exec(`UPDATE events SET status = 'done' WHERE id IN (${old.eventId}, ${a.eventId})`);
      await o.exec(`UPDATE events SET status = 'dead' WHERE id = ${b.eventId}`);
      const since = now - 48 * HOUR;
      const hourOf = (t: number) => Math.floor(t / HOUR) * HOUR;
      expect(await store.deliveriesPerHour(since)).toEqual([
        { hour: hourOf(now - 2 * HOUR + 5), outcome: 'dead', count: 1 },
        { hour: hourOf(now - 2 * HOUR + 5), outcome: 'done', count: 1 },
        { hour: hourOf(now - HOUR + 1), outcome: 'conflict', count: 2 },
        { hour: hourOf(now - HOUR + 1), outcome: 'pending', count: 1 },
      ]);

      await store.recordAttempt({
        eventId: old.eventId,
        attempt: 1,
        route: 'mail',
        outcome: 'failed',
        error: 'old',
        startedAt: now - 50 * HOUR,
        finishedAt: now - 50 * HOUR,
      });
      await store.recordAttempt({ eventId: a.eventId, attempt: 1, route: 'mail', outcome: 'failed', error: 'x', startedAt: now - 90, finishedAt: now - 80 });
      // An attempt that did not fail is not counted.
      await o.exec(
        `INSERT INTO attempts (event_id, attempt, route, started_at, finished_at, outcome) VALUES (${a.eventId}, 2, 'mail', ${now - 70}, ${now - 60}, 'ok')`,
      );
      await store.recordAttempt({ eventId: b.eventId, attempt: 1, route: 'crm', outcome: 'failed', error: 'y', startedAt: now - 50, finishedAt: now - 40 });
      await store.recordAttempt({ eventId: b.eventId, attempt: 2, route: 'crm', outcome: 'failed', error: 'z', startedAt: now - 30, finishedAt: now - 20 });
      expect(await store.effectFailuresByRoute(since)).toEqual([
        { route: 'crm', failures: 2, lastFailedAt: now - 30 },
        { route: 'mail', failures: 1, lastFailedAt: now - 90 },
      ]);
      expect(await store.effectFailuresByRoute(now)).toEqual([]);
    });
  });

  describe("catch-up: events fetched from the sender's API, and where a source resumes", () => {
    const fetched = (deliveryId: string, body = `{"id":"${deliveryId}","api":true}`, extra: Partial<FetchedEvent> = {}): FetchedEvent => ({
      source: 'shop',
      deliveryId,
      eventType: 'order.paid',
      body: Buffer.from(body),
      bodySha256: createHash('sha256').update(body).digest('hex'),
      receivedAt: T0,
      successStatus: 202,
      ...extra,
    });

    it('stores a fetched event once, pending for the drain; a second store of the id changes nothing', async () => {
      const first = await store.storeFetched(fetched('evt_1'));
      expect(first.stored).toBe(true);
      const again = await store.storeFetched(fetched('evt_1', '{"other":1}'));
      expect(again).toEqual({ stored: false, eventId: first.eventId });
      expect(await o.rows(`SELECT delivery_id, origin, status, duplicates FROM events`)).toEqual([
        { delivery_id: 'evt_1', origin: 'catch-up', status: 'pending', duplicates: 0 },
      ]);
      expect(await o.rows(`SELECT count(*) AS n FROM conflicts`)).toEqual([{ n: 0 }]);
      const c = await claimOne(store, 'drain-a', T0, LEASE);
      expect(c?.id).toBe(first.eventId);
      // An unrouted fetched event is done at once, as ingest stores it.
      const unrouted = await store.storeFetched(fetched('evt_2', undefined, { unrouted: 'licence: event type "charge.refunded" not in [invoice.paid]' }));
      expect(await store.getEvent(unrouted.eventId)).toMatchObject({
        status: 'done',
        routeDecisions: ['licence: event type "charge.refunded" not in [invoice.paid]'],
      });
    });

    it('a signed delivery of a fetched event is a duplicate with the stored answer, even with a different body hash', async () => {
      const stored = await store.storeFetched(fetched('evt_1', '{"id":"evt_1","pretty":false}'));
      const late = await store.ingest(event('evt_1', '{\n  "id": "evt_1",\n  "pretty": true\n}'));
      expect(late).toEqual({ outcome: 'duplicate', eventId: stored.eventId, status: 202, body: acceptedAnswer(stored.eventId) });
      expect((await store.listEvents({ limit: 10 }))[0]).toMatchObject({ duplicates: 1 });
      expect(await o.rows(`SELECT count(*) AS n FROM conflicts`)).toEqual([{ n: 0 }]);
      // A webhook-stored event keeps the rule: a different body is a conflict.
      await store.ingest(event('w-1', '{"a":1}'));
      expect((await store.ingest(event('w-1', '{"a":2}'))).outcome).toBe('conflict');
    });

    it('a fetched event already delivered by webhook is not stored again', async () => {
      const hook = await store.ingest(event('evt_9'));
      expect(await store.storeFetched(fetched('evt_9'))).toEqual({ stored: false, eventId: hook.eventId });
      expect(await store.storedDeliveryIds('shop', ['evt_9', 'evt_x'])).toEqual(new Set(['evt_9']));
      expect(await store.storedDeliveryIds('other', ['evt_9'])).toEqual(new Set());
      expect(await o.rows(`SELECT origin FROM events`)).toEqual([{ origin: 'webhook' }]);
    });

    it('keeps when catch-up was first configured, and moves the resume point only when told', async () => {
      expect(await store.catchUpState('shop')).toBeUndefined();
      const begun = await store.beginCatchUp('shop', T0);
      expect(begun).toEqual({
        source: 'shop',
        configuredAt: T0,
        resumeAt: null,
        partial: null,
        lastRunAt: null,
        lastOkAt: null,
        lastError: null,
        lastCounts: null,
      });
      expect((await store.beginCatchUp('shop', T0 + DAY)).configuredAt).toBe(T0);
      const counts = { listed: 3, alreadyStored: 1, storedNow: 2, redeliveryAsked: 0, failed: 0, skipped: 0 };
      await store.recordCatchUp('shop', { at: T0 + SEC, resumeAt: T0 + 500, error: null, counts });
      await store.recordCatchUp('shop', { at: T0 + 2 * SEC, error: 'stripe answered 500', counts: { ...counts, failed: 1 } });
      expect(await store.catchUpState('shop')).toEqual({
        source: 'shop',
        configuredAt: T0,
        resumeAt: T0 + 500,
        partial: null,
        lastRunAt: T0 + 2 * SEC,
        lastOkAt: T0 + SEC,
        lastError: 'stripe answered 500',
        lastCounts: { ...counts, failed: 1 },
      });
      // The older part a run stopped short of: kept until a run says otherwise, then cleared.
      await store.recordCatchUp('shop', { at: T0 + 3 * SEC, error: 'stopped', counts, partial: { until: T0 - DAY, end: T0 + 400 } });
      await store.recordCatchUp('shop', { at: T0 + 4 * SEC, error: 'down', counts });
      expect((await store.catchUpState('shop'))?.partial).toEqual({ until: T0 - DAY, end: T0 + 400 });
      await store.recordCatchUp('shop', { at: T0 + 5 * SEC, resumeAt: T0 + 400, partial: null, error: null, counts });
      expect(await store.catchUpState('shop')).toMatchObject({ partial: null, resumeAt: T0 + 400, lastOkAt: T0 + 5 * SEC });
      await store.beginCatchUp('github', T0);
      expect((await store.catchUpStates()).map((s) => s.source)).toEqual(['github', 'shop']);
    });

    it("a listing left unfinished keeps its cursor (the page's URL) and its span; an old row without one still reads", async () => {
      await store.beginCatchUp('paged', T0);
      const partial = { cursor: 'https://api.example/v1/events?limit=100&starting_after=evt_9', from: T0 - DAY, until: T0, end: T0 - 300 };
      await store.recordCatchUp('paged', {
        at: T0,
        error: 'stopped',
        counts: { listed: 100, alreadyStored: 0, storedNow: 99, redeliveryAsked: 0, failed: 0, skipped: 1 },
        partial,
      });
      expect(await store.catchUpState('paged')).toMatchObject({ partial, lastCounts: { skipped: 1 } });
      await store.recordCatchUp('paged', {
        at: T0,
        error: 'stopped',
        counts: { listed: 0, alreadyStored: 0, storedNow: 0, redeliveryAsked: 0, failed: 0, skipped: 0 },
        partial: { ...partial, cursor: null },
      });
      expect((await store.catchUpState('paged'))?.partial?.cursor).toBeNull();
    });

    it("one receiver holds a source's catch-up at a time where receivers share the database; released, another takes it", async () => {
      const other = await o.another();
      const lock = await store.lockCatchUp('shop');
      expect(lock).toBeDefined();
      const second = await other.lockCatchUp('shop');
      if (backend.capabilities.catchUpLockShared) {
        expect(second).toBeUndefined();
        // Another source is free.
        const github = await other.lockCatchUp('github');
        expect(github).toBeDefined();
        await github!.release();
        await lock!.release();
        const now = await other.lockCatchUp('shop');
        expect(now).toBeDefined();
        await now!.release();
      } else {
        expect(second).toBeDefined();
        await second!.release();
        await lock!.release();
      }
    });
  });
});
