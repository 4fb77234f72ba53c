import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GroupCommit } from '../../src/store/group-commit.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import type { NewEvent } from '../../src/store/types.js';
import { tempDir } from '../helpers.js';

const tmp = tempDir();
afterAll(tmp.cleanup);

const nextTurn = () => new Promise((r) => setImmediate(r));

function event(deliveryId: string, body: string): NewEvent {
  return {
    source: 's',
    deliveryId,
    eventType: 't',
    headers: {},
    body: Buffer.from(body),
    bodySha256: createHash('sha256').update(body).digest('hex'),
    receivedAt: 1_700_000_000_000,
    successStatus: 202,
    onConflict: 'reject',
  };
}

describe.each([
  ['inline', false],
  ['worker thread', true],
])('group commit (%s)', (_, ingestThread) => {
  it('decides duplicates inside one batch in order: the first wins, the others get its answer', async () => {
    const store = new SqliteStore(join(tmp.dir, `dup-${ingestThread}.db`), { busyTimeoutMs: 1000, ingestThread });
    await store.ready();
    const results = await Promise.all([event('a', '1'), event('a', '1'), event('b', '2'), event('a', '1'), event('a', 'other')].map((e) => store.ingest(e)));
    expect(results.map((r) => r.outcome)).toEqual(['accepted', 'duplicate', 'accepted', 'duplicate', 'conflict']);
    expect(results[1]?.body).toBe(results[0]?.body);
    expect(results[3]?.body).toBe(results[0]?.body);
    expect(results[4]?.status).toBe(409);
    expect((store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n).toBe(2);
    await store.close();
  });

  it('a failing item does not fail the innocent requests of its batch', async () => {
    const store = new SqliteStore(join(tmp.dir, `bad-${ingestThread}.db`), { busyTimeoutMs: 1000, ingestThread });
    await store.ready();
    // A NOT NULL violation: INSERT OR IGNORE skips it, and no row exists to answer from.
    const bad = { ...event('bad', 'x'), eventType: null } as unknown as NewEvent;
    const settled = await Promise.allSettled([event('g1', '1'), bad, event('g2', '2')].map((e) => store.ingest(e)));
    expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((store.db.prepare('SELECT delivery_id FROM events ORDER BY id').all() as { delivery_id: string }[]).map((r) => r.delivery_id)).toEqual(['g1', 'g2']);
    await store.close();
  });

  it('close() waits for in-flight inserts: every resolved ingest is in the file', async () => {
    const file = join(tmp.dir, `close-${ingestThread}.db`);
    const store = new SqliteStore(file, { busyTimeoutMs: 1000, ingestThread });
    await store.ready();
    const pending = Array.from({ length: 200 }, (_, i) => store.ingest(event(`e${i}`, String(i))));
    await store.close();
    const results = await Promise.all(pending);
    expect(results.every((r) => r.outcome === 'accepted')).toBe(true);
    const again = new SqliteStore(file, { busyTimeoutMs: 1000 });
    expect((again.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n).toBe(200);
    await again.close();
  });
});

describe('GroupCommit: batches in flight', () => {
  it.each([
    [1, [[0]]],
    [2, [[0], [1]]],
  ])('with maxInFlight %i, the batches handed to commit before the first returns are %j', async (maxInFlight, expected) => {
    const calls: { items: number[]; done: (o: number[]) => void }[] = [];
    const group = new GroupCommit<number, number>((items) => new Promise((resolve) => calls.push({ items, done: resolve })), 512, maxInFlight);
    // One request per event-loop turn, none of them committed yet.
    const results: Promise<number>[] = [];
    for (let turn = 0; turn < 3; turn++) {
      results.push(group.submit(turn));
      await nextTurn();
    }
    expect(calls.map((c) => c.items)).toEqual(expected);
    // Committing them in order lets the rest through; each request gets its own result.
    let settled = false;
    void group.settled().then(() => (settled = true));
    for (let i = 0; i < 3 && calls[i] !== undefined; i++) {
      calls[i]?.done(calls[i]?.items.map((x) => x * 10) ?? []);
      await nextTurn();
      await nextTurn();
    }
    expect(await Promise.all(results)).toEqual([0, 10, 20]);
    expect(calls.flatMap((c) => c.items)).toEqual([0, 1, 2]);
    await nextTurn();
    expect(settled).toBe(true);
  });

  it('commit is told when the oldest item of its batch was submitted, not when the batch was posted', async () => {
    const calls: { items: string[]; since: number; done: (o: string[]) => void }[] = [];
    const group = new GroupCommit<string, string>((items, since) => new Promise((resolve) => calls.push({ items, since, done: resolve })));
    const first = group.submit('a');
    await nextTurn();
    // 'b' waits on this side while the only batch in flight is pending.
    const submittedB = Date.now();
    const second = group.submit('b');
    await new Promise((r) => setTimeout(r, 80));
    calls[0]?.done(['A']);
    await first;
    while (calls.length < 2) await nextTurn();
    calls[1]?.done(['B']);
    expect(await second).toBe('B');
    expect(calls[1]?.items).toEqual(['b']);
    expect(calls[1]?.since).toBeGreaterThanOrEqual(submittedB);
    expect(calls[1]?.since).toBeLessThan(submittedB + 40);
  });

  it('the SQLite ingest worker decides duplicates across batches in flight together', async () => {
    const store = new SqliteStore(join(tmp.dir, 'inflight.db'), { busyTimeoutMs: 1000, ingestThread: true });
    await store.ready();
    const first = store.ingest(event('x', '1'));
    await nextTurn();
    // Posted while the first batch may still be committing.
    const rest = [event('x', '1'), event('x', 'changed'), event('y', '2')].map((e) => store.ingest(e));
    const results = await Promise.all([first, ...rest]);
    expect(results.map((r) => r.outcome)).toEqual(['accepted', 'duplicate', 'conflict', 'accepted']);
    expect(results[1]?.body).toBe(results[0]?.body);
    expect(results[2]?.status).toBe(409);
    await store.close();
    const again = new SqliteStore(join(tmp.dir, 'inflight.db'), { busyTimeoutMs: 1000 });
    expect((again.db.prepare('SELECT delivery_id FROM events ORDER BY id').all() as { delivery_id: string }[]).map((r) => r.delivery_id)).toEqual(['x', 'y']);
    await again.close();
  });
});
