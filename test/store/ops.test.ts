import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type Database from 'better-sqlite3';
import { LANE_STATS } from '../../src/store/ops-steps.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import type { NewEvent } from '../../src/store/types.js';
import { tempDir } from '../helpers.js';
import { count, DAY, insertAttempt, insertConflict, insertEffect, insertEvent, seedDb } from './ops-seed.js';

const NOW = Date.UTC(2026, 5, 1);

describe('SQLite OpsStore', () => {
  let tmp: ReturnType<typeof tempDir>;
  let file: string;
  let db: Database.Database;
  let store: SqliteStore;

  beforeEach(() => {
    tmp = tempDir();
    file = join(tmp.dir, 'r.db');
    db = seedDb(file);
    store = new SqliteStore(file, { busyTimeoutMs: 2000 });
  });
  afterEach(async () => {
    await store.close();
    db.close();
    tmp.cleanup();
  });

  describe('purgeBatch', () => {
    it('deletes only done events older than the cutoff, oldest first, at most `limit` per batch, with their attempts and conflicts; never the ledger', async () => {
      const old = [3, 2, 1].map((i) => insertEvent(db, { deliveryId: `old-done-${i}`, status: 'done', receivedAt: NOW - (40 + i) * DAY }));
      for (const id of old) {
        insertAttempt(db, id, { startedAt: NOW - 40 * DAY });
        insertEffect(db, { effectKey: `licence:${id}`, eventId: id, at: NOW - 40 * DAY });
      }
      insertConflict(db, old[0]!, NOW - 39 * DAY);
      const kept = [
        insertEvent(db, { deliveryId: 'old-pending', status: 'pending', receivedAt: NOW - 50 * DAY }),
        insertEvent(db, { deliveryId: 'old-processing', status: 'processing', receivedAt: NOW - 50 * DAY, leaseOwner: 'x', leaseExpiresAt: NOW - DAY }),
        insertEvent(db, { deliveryId: 'old-dead', status: 'dead', receivedAt: NOW - 50 * DAY }),
        insertEvent(db, { deliveryId: 'young-done', status: 'done', receivedAt: NOW - 5 * DAY }),
      ];
      for (const id of kept) insertAttempt(db, id, { startedAt: NOW - 5 * DAY });
      insertConflict(db, kept[2]!, NOW - 49 * DAY);

      const cutoff = NOW - 30 * DAY;
      expect(await store.countPurgeable(cutoff)).toBe(3);
      // The oldest first (old-done-3 is 43 days old, with the conflict).
      expect(await store.purgeBatch(cutoff, 1)).toEqual({ events: 1, attempts: 1, conflicts: 1 });
      expect(count(db, `SELECT count(*) FROM events WHERE id = ?`, old[0])).toBe(0);
      expect(await store.purgeBatch(cutoff, 5)).toEqual({ events: 2, attempts: 2, conflicts: 0 });
      expect(await store.purgeBatch(cutoff, 5)).toEqual({ events: 0, attempts: 0, conflicts: 0 });

      expect(db.prepare(`SELECT id FROM events ORDER BY id`).pluck().all() as number[]).toEqual(kept);
      expect(count(db, `SELECT count(*) FROM attempts`)).toBe(4);
      expect(count(db, `SELECT count(*) FROM conflicts WHERE event_id = ?`, kept[2])).toBe(1);
      // The effect ledger is never purged.
      expect(count(db, `SELECT count(*) FROM effects`)).toBe(3);
    });

    it('the cost: a purged delivery id is accepted again as a new event, while its effect key stays done in the ledger', async () => {
      const body = Buffer.from('{"id":"evt_1"}');
      const ev: NewEvent = {
        source: 'stripe',
        deliveryId: 'evt_1',
        eventType: 'invoice.paid',
        headers: {},
        body,
        bodySha256: createHash('sha256').update(body).digest('hex'),
        receivedAt: NOW - 40 * DAY,
        successStatus: 202,
        onConflict: 'reject',
      };
      const first = await store.ingest(ev);
      db.prepare(`UPDATE events SET status = 'done' WHERE id = ?`).run(first.eventId);
      insertEffect(db, { effectKey: 'licence:cus_1', eventId: first.eventId, at: NOW - 40 * DAY });
      expect((await store.ingest({ ...ev, receivedAt: NOW })).outcome).toBe('duplicate');
      expect((await store.purgeBatch(NOW - 30 * DAY, 100)).events).toBe(1);
      const again = await store.ingest({ ...ev, receivedAt: NOW });
      expect(again.outcome).toBe('accepted');
      expect(again.eventId).not.toBe(first.eventId);
      expect(db.prepare(`SELECT status FROM effects WHERE effect_key = 'licence:cus_1'`).pluck().get()).toBe('done');
    });

    it('picks its batch through the partial index of done events, not a table scan', () => {
      const plan = db.prepare(`EXPLAIN QUERY PLAN SELECT id FROM events WHERE status = 'done' AND received_at < ? ORDER BY received_at LIMIT ?`).all(1, 1) as {
        detail: string;
      }[];
      expect(plan.map((p) => p.detail).join(' ')).toMatch(/USING (COVERING )?INDEX events_finished\b/);
      const bodies = db
        .prepare(`EXPLAIN QUERY PLAN SELECT id FROM events WHERE status = 'done' AND received_at < ? AND body IS NOT NULL ORDER BY received_at LIMIT ?`)
        .all(1, 1) as { detail: string }[];
      expect(bodies.map((p) => p.detail).join(' ')).toMatch(/USING (COVERING )?INDEX events_finished_bodies\b/);
    });
  });

  describe('dropBodiesBatch (tiered retention)', () => {
    it('nulls body and headers of old done events and their conflicts, keeps rows and keys, and a redelivery is still a duplicate', async () => {
      const body = Buffer.from('{"id":"evt_old"}');
      const ev: NewEvent = {
        source: 'stripe',
        deliveryId: 'evt_old',
        eventType: 'invoice.paid',
        headers: { 'content-type': 'application/json' },
        body,
        bodySha256: createHash('sha256').update(body).digest('hex'),
        receivedAt: NOW - 10 * DAY,
        successStatus: 202,
        onConflict: 'reject',
      };
      const old = (await store.ingest(ev)).eventId;
      db.prepare(`UPDATE events SET status = 'done' WHERE id = ?`).run(old);
      insertConflict(db, old, NOW - 9 * DAY);
      const dead = insertEvent(db, { deliveryId: 'dead', status: 'dead', receivedAt: NOW - 10 * DAY });
      const young = insertEvent(db, { deliveryId: 'young', status: 'done', receivedAt: NOW - DAY });

      expect(await store.countBodiesDroppable(NOW - 7 * DAY)).toBe(1);
      expect(await store.dropBodiesBatch(NOW - 7 * DAY, 10)).toEqual({ events: 1, conflicts: 1 });
      expect(await store.dropBodiesBatch(NOW - 7 * DAY, 10)).toEqual({ events: 0, conflicts: 0 });
      expect(await store.countBodiesDroppable(NOW - 7 * DAY)).toBe(0);

      const row = db.prepare(`SELECT body, headers, body_sha256, delivery_id, response_body FROM events WHERE id = ?`).get(old) as Record<string, unknown>;
      expect(row).toMatchObject({ body: null, headers: null, body_sha256: ev.bodySha256, delivery_id: 'evt_old' });
      expect(row.response_body).toBe(JSON.stringify({ status: 'accepted', id: old }));
      expect(db.prepare(`SELECT body IS NULL AND headers IS NULL FROM conflicts WHERE event_id = ?`).pluck().get(old)).toBe(1);
      for (const id of [dead, young]) expect(db.prepare(`SELECT body IS NOT NULL AND headers IS NOT NULL FROM events WHERE id = ?`).pluck().get(id)).toBe(1);

      const redelivery = await store.ingest({ ...ev, receivedAt: NOW });
      expect(redelivery).toMatchObject({ outcome: 'duplicate', eventId: old, body: JSON.stringify({ status: 'accepted', id: old }) });
    });
  });

  describe('replay', () => {
    it('puts events back to pending now, resets the retry counter, clears the lease, keeps last_error and attempt history', async () => {
      const dead = insertEvent(db, { deliveryId: 'd', status: 'dead', receivedAt: NOW - DAY, attempts: 12, lastError: 'exit 1', nextAttemptAt: NOW - DAY });
      insertAttempt(db, dead, { startedAt: NOW - DAY, outcome: 'failed', error: 'exit 1' });
      const stale = insertEvent(db, { deliveryId: 's', status: 'processing', receivedAt: NOW - DAY, leaseOwner: 'crashed', leaseExpiresAt: NOW - 1 });
      const result = await store.replayEvents([dead, stale, dead], { force: false, now: NOW });
      expect(result).toEqual({
        replayed: [
          { eventId: dead, source: 'stripe', deliveryId: 'd', previousStatus: 'dead', force: false },
          { eventId: stale, source: 'stripe', deliveryId: 's', previousStatus: 'processing', force: false },
        ],
        refused: [],
      });
      expect(
        db
          .prepare(`SELECT status, attempts, next_attempt_at, lease_owner, lease_expires_at, last_error, finished_at, force_effects FROM events WHERE id = ?`)
          .get(dead),
      ).toEqual({
        status: 'pending',
        attempts: 0,
        next_attempt_at: NOW,
        lease_owner: null,
        lease_expires_at: null,
        last_error: 'exit 1',
        finished_at: null,
        force_effects: 0,
      });
      expect(count(db, `SELECT count(*) FROM attempts WHERE event_id = ?`, dead)).toBe(1);
    });

    it('is all or nothing: an unknown id, a live lease or a dropped body refuses the whole list', async () => {
      const done = insertEvent(db, { deliveryId: 'ok', status: 'done', receivedAt: NOW - DAY });
      const live = insertEvent(db, { deliveryId: 'live', status: 'processing', receivedAt: NOW - DAY, leaseOwner: 'drain-1', leaseExpiresAt: NOW + 30_000 });
      const dropped = insertEvent(db, { deliveryId: 'dropped', status: 'done', receivedAt: NOW - DAY, body: null, headers: null });
      const result = await store.replayEvents([done, live, 9999, dropped], { force: true, now: NOW });
      expect(result.replayed).toEqual([]);
      expect(result.refused).toEqual([
        { eventId: live, reason: 'processing', leaseOwner: 'drain-1', leaseExpiresAt: NOW + 30_000 },
        { eventId: 9999, reason: 'not_found' },
        { eventId: dropped, reason: 'body_dropped' },
      ]);
      expect(db.prepare(`SELECT status, force_effects FROM events WHERE id = ?`).get(done)).toEqual({ status: 'done', force_effects: 0 });
    });

    it('--force sets force_effects, and a later plain replay does not clear it', async () => {
      const id = insertEvent(db, { deliveryId: 'f', status: 'done', receivedAt: NOW - DAY });
      await store.replayEvents([id], { force: true, now: NOW });
      expect(db.prepare(`SELECT force_effects FROM events WHERE id = ?`).pluck().get(id)).toBe(1);
      await store.replayEvents([id], { force: false, now: NOW });
      expect(db.prepare(`SELECT force_effects FROM events WHERE id = ?`).pluck().get(id)).toBe(1);
    });

    it('replayDead takes every dead event and nothing else; findEventId resolves (source, delivery id)', async () => {
      const a = insertEvent(db, { deliveryId: 'a', status: 'dead', receivedAt: NOW - DAY });
      const b = insertEvent(db, { source: 'github', deliveryId: 'b', status: 'dead', receivedAt: NOW - DAY });
      const done = insertEvent(db, { deliveryId: 'c', status: 'done', receivedAt: NOW - DAY });
      const r = await store.replayDead({ force: false, now: NOW });
      expect(r.replayed.map((e) => e.eventId)).toEqual([a, b]);
      expect(db.prepare(`SELECT status FROM events ORDER BY id`).pluck().all()).toEqual(['pending', 'pending', 'done']);
      expect(await store.replayDead({ force: false, now: NOW })).toEqual({ replayed: [], refused: [] });
      expect(await store.findEventId('github', 'b')).toBe(b);
      expect(await store.findEventId('stripe', 'b')).toBeUndefined();
      expect(done).toBeGreaterThan(0);
    });
  });

  describe('events and stats', () => {
    it('listEvents is newest first with status, source and limit filters', async () => {
      const ids = ['done', 'dead', 'pending', 'dead'].map((status, i) =>
        insertEvent(db, { source: i % 2 === 0 ? 'stripe' : 'github', deliveryId: `e${i}`, status: status as 'done', receivedAt: NOW - (10 - i) * DAY }),
      );
      expect((await store.listEvents({ limit: 10 })).map((e) => e.id)).toEqual([...ids].reverse());
      expect((await store.listEvents({ limit: 2 })).map((e) => e.id)).toEqual([ids[3], ids[2]]);
      expect((await store.listEvents({ status: 'dead', limit: 10 })).map((e) => e.id)).toEqual([ids[3], ids[1]]);
      expect((await store.listEvents({ source: 'stripe', limit: 10 })).map((e) => e.id)).toEqual([ids[2], ids[0]]);
      expect(await store.listEvents({ source: 'stripe', status: 'dead', limit: 10 })).toEqual([]);
    });

    it('getEvent joins attempts to the effect ledger and lists conflicts', async () => {
      const id = insertEvent(db, { deliveryId: 'x', status: 'done', receivedAt: NOW - DAY, headers: { 'x-a': '1' } });
      const other = insertEvent(db, { deliveryId: 'y', status: 'done', receivedAt: NOW - DAY });
      insertAttempt(db, id, { attempt: 1, effectKey: 'licence:cus_1', startedAt: NOW - DAY });
      insertAttempt(db, id, { attempt: 1, route: 'mail', effectKey: 'mail:cus_1', startedAt: NOW - DAY + 5, outcome: 'skipped', forced: true });
      insertEffect(db, { effectKey: 'licence:cus_1', eventId: id, at: NOW - DAY });
      insertEffect(db, { effectKey: 'mail:cus_1', eventId: other, at: NOW - 2 * DAY });
      insertEffect(db, { effectKey: 'unrelated:1', eventId: other, at: NOW - 2 * DAY });
      insertConflict(db, id, NOW - DAY + 100);
      const e = await store.getEvent(id);
      expect(e).toMatchObject({ id, deliveryId: 'x', headers: { 'x-a': '1' }, status: 'done' });
      expect(e!.body!.toString()).toBe('{"id":"x"}');
      expect(e!.attemptRows.map((a) => [a.route, a.outcome, a.forced])).toEqual([
        ['licence', 'ok', false],
        ['mail', 'skipped', true],
      ]);
      expect(e!.effects.map((f) => [f.effectKey, f.eventId])).toEqual([
        ['licence:cus_1', id],
        ['mail:cus_1', other],
      ]);
      expect(e!.conflicts).toHaveLength(1);
      expect(await store.getEvent(12345)).toBeUndefined();
    });

    it('stats counts statuses, duplicates, conflicts, oldest key per source and stuck claims', async () => {
      insertEvent(db, { deliveryId: 'a', status: 'done', receivedAt: NOW - 100 * 3_600_000, duplicates: 2 });
      const b = insertEvent(db, { deliveryId: 'b', status: 'dead', receivedAt: NOW - 10 * 3_600_000, duplicates: 1 });
      insertEvent(db, {
        source: 'github',
        deliveryId: 'c',
        status: 'processing',
        receivedAt: NOW - 5 * 3_600_000,
        leaseOwner: 'gone',
        leaseExpiresAt: NOW - 60_000,
      });
      insertEvent(db, {
        source: 'github',
        deliveryId: 'd',
        status: 'processing',
        receivedAt: NOW - 3_600_000,
        leaseOwner: 'live',
        leaseExpiresAt: NOW + 60_000,
      });
      insertConflict(db, b, NOW);
      insertEffect(db, { effectKey: 'licence:1', eventId: b, at: NOW, status: 'failed' });
      expect(await store.stats(NOW)).toEqual({
        byStatus: { pending: 0, processing: 2, done: 1, dead: 1 },
        duplicates: 3,
        conflicts: 1,
        sources: [
          { source: 'github', oldestReceivedAt: NOW - 5 * 3_600_000, events: 2 },
          { source: 'stripe', oldestReceivedAt: NOW - 100 * 3_600_000, events: 2 },
        ],
        stuckClaims: 1,
        oldestStuckLeaseExpiresAt: NOW - 60_000,
        effectsByStatus: { running: 0, done: 0, failed: 1 },
        ledger: { bytes: expect.any(Number), oldestFinishedAt: NOW + 10 },
        firstEventReceivedAt: NOW - 100 * 3_600_000,
        lanes: [{ lane: 'r', pending: 0, running: 2, oldestPendingReceivedAt: null }],
      });
    });

    it("the lane gauges read only the partial indexes of pending and processing units, never the done ones (a scrape's cost follows the queue)", () => {
      const plan = (db.prepare(`EXPLAIN QUERY PLAN ${LANE_STATS}`).all() as { detail: string }[]).map((p) => p.detail);
      // Either index of pending units holds every column the count needs.
      expect(plan.filter((d) => /^SCAN units/.test(d))).toEqual([
        expect.stringMatching(/^SCAN units USING COVERING INDEX units_(pending|lane_due)$/),
        'SCAN units USING INDEX units_leased',
      ]);
      expect(plan.filter((d) => /^SCAN (?!units|by_status|g$)/.test(d))).toEqual([]);
    });
  });
});
