import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type Database from 'better-sqlite3';
import { runCli, runInProcess, tempDir, writeConfig } from '../helpers.js';
import { HOUR, insertConflict, insertEffect, insertEvent, seedDb } from '../store/ops-seed.js';

/** `receiver stats`, as a subprocess and in-process: the JSON document's shape and figures. */
describe('receiver stats', () => {
  const tmp = tempDir();
  let config: string;
  let db: Database.Database;
  const now = Date.now();

  beforeAll(() => {
    config = writeConfig(tmp.dir, {
      sources: {
        stripe: { provider: 'stripe', secret: 'whsec_test' },
        github: { provider: 'github', secret: 'gh', retryHorizonHours: 8 },
        polar: { provider: 'standard-webhooks', secret: 'whsec_dGVzdA==' },
      },
    });
    db = seedDb(join(tmp.dir, 'receiver.db'));
    insertEvent(db, { deliveryId: 'a', status: 'done', receivedAt: now - 10 * HOUR, duplicates: 3 });
    const dead = insertEvent(db, { deliveryId: 'b', status: 'dead', receivedAt: now - 5 * HOUR });
    insertEvent(db, { deliveryId: 'c', status: 'pending', receivedAt: now - HOUR, duplicates: 1 });
    insertEvent(db, {
      source: 'github',
      deliveryId: 'd',
      status: 'processing',
      receivedAt: now - 20 * HOUR,
      leaseOwner: 'gone',
      leaseExpiresAt: now - 2 * HOUR,
    });
    insertEvent(db, { source: 'github', deliveryId: 'e', status: 'processing', receivedAt: now - HOUR, leaseOwner: 'live', leaseExpiresAt: now + HOUR });
    // A source no longer in the configuration still shows.
    insertEvent(db, { source: 'old-shop', deliveryId: 'f', status: 'done', receivedAt: now - HOUR });
    insertConflict(db, dead, now);
    insertConflict(db, dead, now);
    insertEffect(db, { effectKey: 'licence:1', eventId: dead, at: now - 48 * HOUR });
  });
  afterAll(() => {
    db.close();
    tmp.cleanup();
  });

  it('--json: counts by status, duplicates, conflicts, dead, stuck claims and oldest key age against each horizon', async () => {
    const r = await runCli(['stats', '-c', config, '--json']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    const s = JSON.parse(r.stdout);
    expect(s).toEqual({
      at: expect.any(String),
      alerts: [],
      // Event 1 is still stored: the database is as old as its oldest event.
      firstEventAt: new Date(now - 20 * HOUR).toISOString(),
      events: { pending: 1, processing: 2, done: 2, dead: 1, total: 6 },
      duplicates: 4,
      conflicts: 2,
      dead: 1,
      stuckClaims: { count: 1, oldestLeaseExpiredAt: new Date(now - 2 * HOUR).toISOString() },
      sources: [
        {
          source: 'github',
          configured: true,
          events: 2,
          oldestReceivedAt: new Date(now - 20 * HOUR).toISOString(),
          oldestKeyAgeHours: expect.closeTo(20, 0),
          retryHorizonHours: 8,
          keysCoverHorizon: true,
        },
        {
          source: 'old-shop',
          configured: false,
          events: 1,
          oldestReceivedAt: new Date(now - HOUR).toISOString(),
          oldestKeyAgeHours: expect.closeTo(1, 0),
          retryHorizonHours: null,
          keysCoverHorizon: null,
        },
        { source: 'polar', configured: true, events: 0, oldestReceivedAt: null, oldestKeyAgeHours: null, retryHorizonHours: 72, keysCoverHorizon: null },
        {
          source: 'stripe',
          configured: true,
          events: 3,
          oldestReceivedAt: new Date(now - 10 * HOUR).toISOString(),
          oldestKeyAgeHours: expect.closeTo(10, 0),
          retryHorizonHours: 72,
          keysCoverHorizon: false,
        },
      ],
      effects: { running: 0, done: 1, failed: 0 },
      ledger: {
        entries: 1,
        bytes: expect.any(Number),
        bytesPerEntry: expect.any(Number),
        oldestFinishedAt: new Date(now - 48 * HOUR + 10).toISOString(),
        oldestFinishedAgeDays: 2,
      },
      catchUp: [],
      // The seeded claims are on units of route "r", which this configuration does not have.
      lanes: [{ lane: 'r', routes: [], configured: false, pending: 0, running: 2, oldestPendingReceivedAt: null, oldestPendingAgeSeconds: null }],
    });
    // Two pages at least (the table and its key index).
    expect(s.ledger.bytes).toBeGreaterThanOrEqual(8192);
    expect(s.ledger.bytesPerEntry).toBe(s.ledger.bytes);
  });

  it('human output names stuck claims, dead events and the horizons', async () => {
    const r = await runInProcess(['stats', '-c', config]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('events: 6 (pending 1, processing 2, done 2, dead 1)');
    expect(r.stdout).toContain('stuck claims: 1 processing event(s) past their lease');
    expect(r.stdout).toContain('dead: 1 event(s)');
    // A young database says so, and does not suggest anything was purged.
    expect(r.stdout).toMatch(
      /stripe: 10(\.\d)? h old \(3 event\(s\)\), horizon 72 h; the database itself is younger than the horizon \(its first event arrived 20(\.\d)? h ago\), so no key is missing\n/,
    );
    expect(r.stdout).not.toContain('purge');
    expect(r.stdout).toMatch(/\nledger: 1 effect key\(s\), \d+\.\d KiB, oldest finished \d{4}-\d\d-\d\dT[\d:.]+Z \(2 days ago\)\n/);
    expect(r.stdout).toMatch(/github: 20(\.\d)? h old \(2 event\(s\)\), horizon 8 h, covered/);
  });

  it('a claim is stuck once its lease has run out, not at the moment it ends: the oldest expired lease is named', async () => {
    const stuck = async (at: number) =>
      (JSON.parse((await runInProcess(['stats', '-c', config, '--json'], { now: () => at })).stdout) as { stuckClaims: unknown }).stuckClaims;
    const oldest = new Date(now - 2 * HOUR).toISOString();
    // Event e's lease ends at now + 1 h: at that very moment it still holds.
    expect(await stuck(now + HOUR)).toEqual({ count: 1, oldestLeaseExpiredAt: oldest });
    expect(await stuck(now + HOUR + 1)).toEqual({ count: 2, oldestLeaseExpiredAt: oldest });
    // Before d's lease ran out, nothing is stuck.
    expect(await stuck(now - 2 * HOUR)).toEqual({ count: 0, oldestLeaseExpiredAt: null });
  });

  it('once the first event is gone, a source younger than its horizon is told apart from a young database', async () => {
    const other = tempDir();
    try {
      const odb = seedDb(join(other.dir, 'receiver.db'));
      const first = insertEvent(odb, { deliveryId: 'first', status: 'done', receivedAt: now - 90 * HOUR });
      insertEvent(odb, { deliveryId: 'late', status: 'done', receivedAt: now - 10 * HOUR });
      odb.prepare('DELETE FROM events WHERE id = ?').run(first);
      odb.close();
      const db2 = ['--db', join(other.dir, 'receiver.db')];
      const json = JSON.parse((await runInProcess(['stats', '-c', config, ...db2, '--json'])).stdout);
      expect(json.firstEventAt).toBeNull();
      expect(json.ledger).toEqual({ entries: 0, bytes: expect.any(Number), bytesPerEntry: null, oldestFinishedAt: null, oldestFinishedAgeDays: null });
      const text = (await runInProcess(['stats', '-c', config, ...db2])).stdout;
      expect(text).toMatch(
        /stripe: 10(\.\d)? h old \(1 event\(s\)\), horizon 72 h, younger than the horizon: no older event of this source is stored \(a new or quiet source, or events purged with --force\)/,
      );
      expect(text).toMatch(/\nledger: 0 effect key\(s\), \d+\.\d KiB\n/);
    } finally {
      other.cleanup();
    }
  });

  it('reads the time from its clock: key ages and "at" follow it, nothing else does', async () => {
    const later = now + 100 * HOUR;
    const r = await runInProcess(['stats', '-c', config, '--json'], { now: () => later });
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout) as { at: string; sources: { source: string; oldestKeyAgeHours: number | null; keysCoverHorizon: boolean | null }[] };
    expect(s.at).toBe(new Date(later).toISOString());
    expect(s.sources.find((x) => x.source === 'stripe')).toMatchObject({ oldestKeyAgeHours: 110, keysCoverHorizon: true });
  });
});

describe('receiver stats: lanes', () => {
  const tmp = tempDir();
  let config: string;
  const now = Date.UTC(2026, 5, 1, 12);

  beforeAll(() => {
    config = writeConfig(tmp.dir, {
      sources: { shop: { provider: 'none', deliveryId: '{body.id}' } },
      routes: [
        { name: 'deploy', source: 'shop', key: '{body.id}', lane: 'deploys', effect: { exec: ['/bin/true'] } },
        { name: 'migrate', source: 'shop', key: '{body.id}', lane: 'deploys', effect: { exec: ['/bin/true'] } },
        { name: 'licence', source: 'shop', key: '{body.id}', effect: { exec: ['/bin/true'] } },
      ],
    });
    const db = seedDb(join(tmp.dir, 'receiver.db'));
    const unit = db.prepare(`INSERT INTO units (event_id, route, lane, status, next_attempt_at, lease_owner, lease_expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`);
    const a = insertEvent(db, { source: 'shop', deliveryId: 'a', status: 'processing', receivedAt: now - 2 * HOUR });
    const b = insertEvent(db, { source: 'shop', deliveryId: 'b', status: 'pending', receivedAt: now - 75_000 });
    const c = insertEvent(db, { source: 'shop', deliveryId: 'c', status: 'pending', receivedAt: now - 1000 });
    unit.run(a, 'deploy', 'deploys', 'processing', now, 'drain-1', now + 30_000);
    unit.run(a, 'migrate', 'deploys', 'done', now, null, null);
    unit.run(b, 'deploy', 'deploys', 'pending', now, null, null);
    unit.run(c, 'migrate', 'deploys', 'pending', now, null, null);
    unit.run(a, 'licence', 'licence', 'done', now, null, null);
    db.close();
  });
  afterAll(tmp.cleanup);

  it('--json: every configured lane with its routes, pending and running units, and the age of its oldest pending one', async () => {
    const r = await runInProcess(['stats', '-c', config, '--json'], { now: () => now });
    expect(JSON.parse(r.stdout).lanes).toEqual([
      {
        lane: 'deploys',
        routes: ['deploy', 'migrate'],
        configured: true,
        pending: 2,
        running: 1,
        oldestPendingReceivedAt: new Date(now - 75_000).toISOString(),
        oldestPendingAgeSeconds: 75,
      },
      { lane: 'licence', routes: ['licence'], configured: true, pending: 0, running: 0, oldestPendingReceivedAt: null, oldestPendingAgeSeconds: null },
    ]);
  });

  it('text: one line per lane', async () => {
    const out = (await runInProcess(['stats', '-c', config], { now: () => now })).stdout;
    const start = out.indexOf('lanes (');
    expect(out.slice(start).split('\n').slice(0, 3)).toEqual([
      'lanes (units of work: one route of one event):',
      `  deploys (deploy, migrate): pending 2, running 1, oldest pending received ${new Date(now - 75_000).toISOString()} (1 min 15 s ago)`,
      '  licence: pending 0, running 0',
    ]);
  });
});
