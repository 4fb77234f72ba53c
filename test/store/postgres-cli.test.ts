import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresStore } from '../../src/store/postgres/index.js';
import type { NewEvent } from '../../src/store/types.js';
import { runInProcess, tempDir, writeConfig } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/** purge, replay, events and stats, in-process, against a postgres:// database (`--db`). */

const pgOk = await postgresAvailable();
if (!pgOk) {
  describe.skip('CLI on PostgreSQL (PostgreSQL not reachable; see the notice above)', () => {
    it('runs against PostgreSQL', () => {});
  });
}

const DAY = 86_400_000;

function event(deliveryId: string, receivedAt: number): NewEvent {
  const body = Buffer.from(JSON.stringify({ id: deliveryId }));
  return {
    source: 'shop',
    deliveryId,
    eventType: 'order.paid',
    headers: { 'content-type': 'application/json' },
    body,
    bodySha256: createHash('sha256').update(body).digest('hex'),
    receivedAt,
    successStatus: 202,
    onConflict: 'reject',
  };
}

describe.runIf(pgOk)('CLI on PostgreSQL', () => {
  let tmp: ReturnType<typeof tempDir>;
  let db: TestDatabase;
  let config: string;
  const ids: Record<string, number> = {};
  const cli = async (...args: string[]) => {
    const r = await runInProcess([...args, '-c', config, '--db', db.url]);
    expect(r.stderr).not.toMatch(/error/i);
    expect(r.code).toBe(0);
    return JSON.parse(r.stdout) as unknown;
  };

  beforeAll(async () => {
    tmp = tempDir('receiver-pg-cli-');
    db = await createTestDatabase();
    // The file's database is a SQLite path: --db must win.
    config = writeConfig(tmp.dir, { sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', secret: 's', deliveryId: '{body.id}' } } });
    const store = await PostgresStore.open(db.url, { busyTimeoutMs: 2000 });
    const now = Date.now();
    for (const [name, age] of [
      ['old-done', 40],
      ['old-dead', 40],
      ['young-done', 1],
      ['pending', 0],
    ] as const) {
      ids[name] = (await store.ingest(event(name, now - age * DAY))).eventId;
    }
    await store.close();
    await db.query(`UPDATE events SET status = 'done', finished_at = received_at WHERE delivery_id IN ('old-done', 'young-done')`);
    await db.query(`UPDATE events SET status = 'dead', finished_at = received_at, last_error = 'gave up' WHERE delivery_id = 'old-dead'`);
  });
  afterAll(async () => {
    await db?.drop();
    tmp?.cleanup();
  });

  it('events list, events show and stats read the PostgreSQL database', async () => {
    const list = (await cli('events', 'list', '--json')) as { id: number; deliveryId: string; status: string }[];
    expect(list.map((e) => e.deliveryId)).toEqual(['pending', 'young-done', 'old-dead', 'old-done']);
    expect(list[0]).toEqual(
      expect.objectContaining({ id: ids.pending, source: 'shop', eventType: 'order.paid', status: 'pending', attempts: 0, lastError: null }),
    );
    // --type pattern, --since age and --search run as SQL on PostgreSQL too.
    const found = (await cli('events', 'list', '--type', 'order.*', '--since', '2d', '--search', '"young-', '--json')) as { deliveryId: string }[];
    expect(found.map((e) => e.deliveryId)).toEqual(['young-done']);
    const shown = (await cli('events', 'show', String(ids['old-dead']), '--json')) as { status: string; lastError: string };
    expect(shown).toMatchObject({ status: 'dead', lastError: 'gave up' });
    const stats = (await cli('stats', '--json')) as { events: Record<string, number> };
    expect(stats.events).toMatchObject({ pending: 1, processing: 0, done: 2, dead: 1, total: 4 });
  });

  it('replay --dead puts the dead event back; purge removes only the old finished one', async () => {
    const replay = (await cli('replay', '--dead', '--json')) as { replayed: { id: number }[] };
    expect(replay.replayed.map((r) => r.id)).toEqual([ids['old-dead']]);
    const purge = (await cli('purge', '--days', '30', '--force', '--json')) as { purged: number };
    expect(purge.purged).toBe(1);
    const left = await db.query<{ delivery_id: string; status: string }>('SELECT delivery_id, status FROM events ORDER BY id');
    expect(left).toEqual([
      { delivery_id: 'old-dead', status: 'pending' },
      { delivery_id: 'young-done', status: 'done' },
      { delivery_id: 'pending', status: 'pending' },
    ]);
  });

  it('purge --ledger-days forgets an old ledger entry no stored event refers to; stats shows the ledger', async () => {
    const old = Date.now() - 60 * DAY;
    await db.query(
      `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at)
       VALUES ('licence:gone', 'licence', 'gone', 'done', 99999, 1, $1, $1), ('licence:kept', 'licence', 'kept', 'done', $2, 1, $1, $1)`,
      [old, ids['young-done']],
    );
    const stats = (await cli('stats', '--json')) as { ledger: { entries: number; bytes: number; oldestFinishedAt: string } };
    expect(stats.ledger).toMatchObject({ entries: 2, oldestFinishedAt: new Date(old).toISOString() });
    expect(stats.ledger.bytes).toBeGreaterThan(0);
    expect(await cli('purge', '--ledger-days', '30', '--json')).toMatchObject({ ledgerPurged: 1 });
    expect(await db.query('SELECT effect_key FROM effects')).toEqual([{ effect_key: 'licence:kept' }]);
  });
});
