import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { minimalEnvironment } from '../../src/effects/exec.js';
import { ModuleRunner } from '../../src/effects/module-runner.js';
import type { ClaimedUnit, EffectStart } from '../../src/store/drain-types.js';
import { openStore } from '../../src/store/open.js';
import type { Store } from '../../src/store/types.js';
import { claimOne, tempDir } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * A module effect's statements on PostgreSQL are bounded by the effect's timeoutSeconds,
 * not by the pool's statement timeout (busyTimeoutMs, meant for ingest): a query longer
 * than busyTimeoutMs but within timeoutSeconds runs to the end, and one the handler gives
 * up on at timeoutSeconds is cancelled at once instead of holding the drain until the lease.
 */

const pgOk = await postgresAvailable();
if (!pgOk) {
  describe.skip('PostgreSQL module effect timeouts (PostgreSQL not reachable; see the notice above)', () => {
    it('runs against PostgreSQL', () => {});
  });
}

const LEASE_MS = 30_000;

describe.runIf(pgOk)('module effect statements on PostgreSQL', () => {
  let db: TestDatabase;
  let store: Store;
  let runner: ModuleRunner;
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  beforeEach(async () => {
    runner = new ModuleRunner(minimalEnvironment(process.env));
    db = await createTestDatabase();
    // serve's pool: statements past max(1 s, busyTimeoutMs) are cancelled.
    store = await openStore(db.url, { busyTimeoutMs: 300, server: true });
  });
  afterEach(async () => {
    runner.close();
    await store?.close();
    await db?.drop();
  });

  async function claimed(): Promise<ClaimedUnit> {
    const body = Buffer.from('{"id":"e1"}');
    await store.ingest({
      source: 'shop',
      deliveryId: 'e1',
      eventType: 'order.paid',
      headers: {},
      body,
      bodySha256: createHash('sha256').update(body).digest('hex'),
      receivedAt: Date.now(),
      successStatus: 202,
      onConflict: 'reject',
    });
    const event = await claimOne(store, 'test#1', Date.now(), LEASE_MS);
    if (event === undefined) throw new Error('nothing to claim');
    return event;
  }

  const start: EffectStart = { route: 'licence', businessKey: 'o1', effectKey: 'licence:o1', runToken: 'run-1', force: false };

  /** The handler runs in the module host, as serve runs it; its import is done before the clock starts. */
  async function run(statement: string, timeoutMs: number) {
    const path = join(tmp.dir, `${db.name}.mjs`);
    writeFileSync(path, `export default async function (_event, ctx) { await ctx.db.query(${JSON.stringify(statement)}); }\n`);
    await runner.load(path, 10_000);
    const event = await claimed();
    const moduleEvent = {
      id: event.id,
      source: event.source,
      deliveryId: event.deliveryId,
      eventType: event.eventType,
      headers: event.headers,
      body: event.body,
      receivedAt: event.receivedAt,
      json: {},
    };
    const t0 = Date.now();
    const outcome = await store.runTransactionalEffect(
      event.lease,
      event.attempt,
      start,
      (effectDb, run) =>
        runner.call(
          path,
          moduleEvent,
          { route: start.route, key: start.businessKey, effectKey: start.effectKey, runKey: run.runKey, attempt: event.attempt },
          effectDb,
          timeoutMs,
        ),
      Date.now,
      LEASE_MS,
    );
    return { outcome, tookMs: Date.now() - t0 };
  }

  it('a connection lost after the handler returned, before the commit: the run ends as one failed attempt, nothing of it committed, the handler not run again', async () => {
    await db.query('CREATE TABLE applied (k text NOT NULL)');
    const event = await claimed();
    let runs = 0;
    const outcome = await store.runTransactionalEffect(
      event.lease,
      event.attempt,
      start,
      async (effectDb) => {
        runs += 1;
        await effectDb.run('INSERT INTO applied (k) VALUES ($1)', ['o1']);
        const [me] = await effectDb.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        // The transaction's connection ends (as in a server restart) once the handler's work is done.
        await db.query('SELECT pg_terminate_backend($1)', [me!.pid]);
        await new Promise((r) => setTimeout(r, 300));
      },
      Date.now,
      LEASE_MS,
    );
    expect(runs).toBe(1);
    expect(outcome).toMatchObject({
      action: 'failed',
      error: expect.stringMatching(/^the effect's transaction did not commit: .+; its writes were rolled back$/),
    });
    expect(await db.query('SELECT k FROM applied')).toEqual([]);
    expect(await db.query('SELECT attempt, outcome FROM attempts WHERE event_id = $1', [event.id])).toEqual([{ attempt: 1, outcome: 'failed' }]);
    // The unit is still this claim's: the drain settles it (a retry), as after any failed attempt.
    expect(await db.query('SELECT status, lease_owner FROM units WHERE id = $1', [event.unitId])).toEqual([{ status: 'processing', lease_owner: 'test#1' }]);
  });

  it('a statement longer than the pool statement timeout (1 s) but within timeoutSeconds completes', async () => {
    const { outcome } = await run('SELECT pg_sleep(1.5)', 5000);
    expect(outcome).toMatchObject({ action: 'ok' });
  });

  it('a statement still running at timeoutSeconds is cancelled: the attempt fails as timed out at once, not after the lease', async () => {
    const { outcome, tookMs } = await run('SELECT pg_sleep(20)', 500);
    expect(outcome).toMatchObject({ action: 'failed' });
    expect((outcome as { error: string }).error).toMatch(/timed out/);
    expect(tookMs).toBeLessThan(3000);
    // Nothing left running on the server.
    const busy = await db.query(`SELECT pid FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'SELECT pg_sleep(20)%' AND state = 'active'`, [db.name]);
    expect(busy).toEqual([]);
  });
});
