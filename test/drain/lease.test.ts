import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import type { EffectStart } from '../../src/store/drain-types.js';
import { claimOne, tempDir } from '../helpers.js';
import { clock, inspect, newEvent } from './helpers.js';

const LEASE = 300_000;

describe('leases', () => {
  let tmp: ReturnType<typeof tempDir>;
  let a: SqliteStore;
  let b: SqliteStore;
  let path: string;
  beforeEach(() => {
    tmp = tempDir('receiver-lease-');
    path = `${tmp.dir}/receiver.db`;
    // Two stores on one file: two drains, as two `serve` processes would be.
    a = new SqliteStore(path, { busyTimeoutMs: 2000 });
    b = new SqliteStore(path, { busyTimeoutMs: 2000 });
  });
  afterEach(async () => {
    await a.close();
    await b.close();
    tmp.cleanup();
  });

  const start = (key = 'o1'): EffectStart => ({ route: 'licence', businessKey: key, effectKey: `licence:${key}`, runToken: randomUUID(), force: false });

  it('claims the oldest due event in arrival order, never one held under a live lease', async () => {
    const c = clock();
    for (const d of ['d1', 'd2', 'd3']) await a.ingest(newEvent({ source: 's', deliveryId: d, eventType: 't', body: {}, receivedAt: c.now() }));
    const db = inspect(path);
    db.db.prepare('UPDATE events SET next_attempt_at = ? WHERE id = 1').run(c.now() + 1000); // event 1 waits for its retry
    expect((await claimOne(a, 'A', c.now(), LEASE))?.id).toBe(2);
    expect((await claimOne(b, 'B', c.now(), LEASE))?.id).toBe(3);
    expect(await claimOne(b, 'B', c.now(), LEASE)).toBeUndefined();
    expect(await b.nextDueAt([], c.now())).toBe(c.now() + 1000);
    c.advance(1000);
    expect((await claimOne(b, 'B', c.now(), LEASE))?.id).toBe(1);
    db.close();
  });

  it("A claims, its lease expires, B reclaims; A's late completion, retry, burial and effects change nothing", async () => {
    const c = clock();
    await a.ingest(newEvent({ source: 's', deliveryId: 'd1', eventType: 't', body: { order: 'o1' }, receivedAt: c.now() }));
    const db = inspect(path);
    const claimA = (await claimOne(a, 'A#1', c.now(), LEASE))!;
    expect(claimA).toMatchObject({ id: 1, attempt: 1, lease: { owner: 'A#1', expiresAt: c.now() + LEASE } });
    // A starts an external effect: the ledger says running, for event 1.
    const sa = start();
    const runA = await a.beginEffect(claimA.lease, claimA.attempt, sa, c.now(), LEASE);
    expect(runA).toMatchObject({ action: 'run', runs: 1 });

    // While A's lease is live, B gets nothing.
    c.advance(LEASE - 1);
    expect(await claimOne(b, 'B#1', c.now(), LEASE)).toBeUndefined();
    // A stalls past its lease (lease renewed by beginEffect at the start, so count from there).
    c.advance(2);
    const claimB = (await claimOne(b, 'B#1', c.now(), LEASE))!;
    expect(claimB).toMatchObject({ id: 1, attempt: 2, lease: { owner: 'B#1' } });

    // A wakes up late: nothing it does to the event applies.
    expect(await a.completeUnit(claimA.lease, c.now())).toBe(false);
    expect(await a.retryUnit(claimA.lease, 'late', c.now())).toBe(false);
    expect(await a.buryUnit(claimA.lease, 'late', c.now())).toBe(false);
    await a.renewLeases([claimA.lease], c.now() + 1, LEASE);
    expect(await a.beginEffect(claimA.lease, 1, start('o2'), c.now(), LEASE)).toEqual({ action: 'lost' });
    expect(db.event(1)).toMatchObject({ status: 'processing' });
    expect(db.unit(1, 'r')).toMatchObject({ status: 'processing', lease_owner: 'B#1', lease_expires_at: claimB.lease.expiresAt });

    // B repeats the effect A left running (the same event: not someone else's live run).
    const sb = start();
    const runB = await b.beginEffect(claimB.lease, claimB.attempt, sb, c.now(), LEASE);
    expect(runB).toMatchObject({ action: 'run', runs: 2 });
    // A's late finish records its own attempt, but cannot close B's run of the key.
    if (runA.action !== 'run' || runB.action !== 'run') throw new Error('expected runs');
    await a.finishEffect(
      { attemptId: runA.attemptId, effectKey: sa.effectKey, runToken: sa.runToken, outcome: 'failed', error: 'late A', wasDone: false },
      c.now(),
    );
    expect(db.effect('licence:o1')).toMatchObject({ status: 'running', runs: 2, last_error: null });
    await b.finishEffect({ attemptId: runB.attemptId, effectKey: sb.effectKey, runToken: sb.runToken, outcome: 'ok', wasDone: false }, c.now());
    expect(await b.completeUnit(claimB.lease, c.now())).toBe(true);
    expect(db.event(1)).toMatchObject({ status: 'done', lease_owner: null, attempts: 2 });
    expect(db.effect('licence:o1')).toMatchObject({ status: 'done', runs: 2 });
    expect(db.attempts(1).map((x) => [x.attempt, x.outcome, x.error])).toEqual([
      [1, 'failed', 'late A'],
      [2, 'ok', null],
    ]);
    db.close();
  });

  it('a module effect whose lease was taken over runs nothing', async () => {
    const c = clock();
    await a.ingest(newEvent({ source: 's', deliveryId: 'd1', eventType: 't', body: {}, receivedAt: c.now() }));
    const claimA = (await claimOne(a, 'A#1', c.now(), LEASE))!;
    c.advance(LEASE);
    await claimOne(b, 'B#1', c.now(), LEASE);
    let ran = false;
    const r = await a.runTransactionalEffect(
      claimA.lease,
      1,
      start(),
      async () => {
        ran = true;
      },
      c.now,
      LEASE,
    );
    expect(r).toEqual({ action: 'lost' });
    expect(ran).toBe(false);
  });
});
