import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';
import { checkEffectsOnce, delivery, logLines, post, sendLoad, shopSource, terminateReceiverConnections, waitAllDone } from './postgres-faults-helpers.js';

/**
 * `serve` on PostgreSQL while the server drops its connections (pg_terminate_backend, as
 * a server restart or idle_in_transaction_session_timeout would): the process stays up,
 * the work a dropped connection carried fails as a value and is retried, and no
 * acknowledged delivery is lost or stored twice, no effect run twice.
 */

const pgOk = await postgresAvailable();
if (!pgOk) {
  describe.skip('PostgreSQL faults (PostgreSQL not reachable; see the notice above)', () => {
    it('runs against PostgreSQL', () => {});
  });
}

/** A module effect writing into its own table through ctx.db; waits first when the delivery asks it to. */
const MODULE = `
export default async function (event, ctx) {
  const wait = ctx.attempt === 1 ? (event.json.waitMs ?? 0) : 0;
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  await ctx.db.run('INSERT INTO applied (key, event_id, attempt) VALUES ($1, $2, $3)', [ctx.key, event.id, ctx.attempt]);
}`;

describe.runIf(pgOk)('serve on PostgreSQL when connections are dropped', () => {
  let tmp: ReturnType<typeof tempDir>;
  let db: TestDatabase;
  let serve: ServeProcess | undefined;

  beforeEach(async () => {
    tmp = tempDir('receiver-pg-faults-');
    db = await createTestDatabase();
    // No primary key: a repeated effect shows up as a second row.
    await db.query('CREATE TABLE applied (key text NOT NULL, event_id bigint NOT NULL, attempt integer NOT NULL)');
    writeFileSync(join(tmp.dir, 'licence.mjs'), MODULE);
  });
  afterEach(async () => {
    await serve?.stop('SIGKILL');
    serve = undefined;
    await db?.drop();
    tmp?.cleanup();
  });

  const config = (extra: Record<string, unknown> = {}) =>
    writeConfig(tmp.dir, {
      database: db.url,
      busyTimeoutMs: 2000,
      sources: { shop: shopSource },
      retry: { maxAttempts: 20, baseSeconds: 0.2, maxSeconds: 1 },
      drain: { leaseSeconds: 10, pollMs: 100 },
      routes: [{ name: 'licence', source: 'shop', key: '{body.key}', effect: { module: './licence.mjs', timeoutSeconds: 8 } }],
      ...extra,
    });

  it('a module effect whose connection is terminated while it waits in its transaction: serve stays up, the event is retried and done, applied once', async () => {
    serve = await startServe(config());
    const res = await post(serve.url, delivery('o1', { waitMs: 3000 }));
    expect(res.status).toBe(202);

    // The handler is waiting inside its transaction: its connection is idle in transaction
    // (for a while: not just between two statements of a transaction).
    const until = Date.now() + 5000;
    let terminated = 0;
    while (terminated === 0 && Date.now() < until) {
      terminated = await terminateReceiverConnections(db, 'idle in transaction', 500);
      if (terminated === 0) await new Promise((r) => setTimeout(r, 20));
    }
    expect(terminated).toBe(1);

    await waitAllDone(db, 15_000, serve);
    expect(serve.child.exitCode).toBeNull();
    expect(await db.query('SELECT key, attempt FROM applied')).toEqual([{ key: 'o1', attempt: 2 }]);
    expect(await db.query(`SELECT status, runs FROM effects`)).toEqual([{ status: 'done', runs: 1 }]);
    const attempts = await db.query<{ outcome: string; error: string | null }>('SELECT outcome, error FROM attempts ORDER BY id');
    // The dropped connection failed the attempt as a value, saying why; the drain retried it after backoff.
    expect(attempts.map((a) => a.outcome)).toEqual(['failed', 'ok']);
    expect(attempts[0]!.error).toMatch(/^the database connection was lost \(57P01 terminating connection due to administrator command\)/);
    const lines = logLines(serve.output().stderr);
    expect(lines.filter((l) => l.level === 'fatal')).toEqual([]);
    expect(await serve.stop('SIGTERM')).toBe(0);
  });

  it("idle_in_transaction_session_timeout ends a module effect's connection while it waits: serve stays up, the event is retried and done, applied once", async () => {
    await db.query(`ALTER DATABASE ${db.name} SET idle_in_transaction_session_timeout = '1s'`);
    serve = await startServe(config());
    expect((await post(serve.url, delivery('o1', { waitMs: 2500 }))).status).toBe(202);
    await waitAllDone(db, 15_000, serve);
    expect(await db.query('SELECT key, attempt FROM applied')).toEqual([{ key: 'o1', attempt: 2 }]);
    const attempts = await db.query<{ outcome: string; error: string | null }>('SELECT outcome, error FROM attempts ORDER BY id');
    expect(attempts.map((a) => a.outcome)).toEqual(['failed', 'ok']);
    expect(attempts[0]!.error).toMatch(/^the database connection was lost \(25P03 /);
    expect(await db.query(`SELECT status, runs FROM effects`)).toEqual([{ status: 'done', runs: 1 }]);
    expect(logLines(serve.output().stderr).filter((l) => l.level === 'fatal')).toEqual([]);
    expect(await serve.stop('SIGTERM')).toBe(0);
  });

  it('every receiver connection terminated six times under a bounded load: serve stays up, every acknowledged delivery stored once, no effect repeated', async () => {
    const out = join(tmp.dir, 'notified.txt');
    serve = await startServe(
      config({
        routes: [
          { name: 'licence', source: 'shop', key: '{body.key}', effect: { module: './licence.mjs', timeoutSeconds: 8 } },
          {
            name: 'notify',
            source: 'shop',
            key: '{body.key}',
            effect: { exec: ['/bin/sh', '-c', 'printf "%s\\n" "$RECEIVER_KEY" >> "$1"', 'sh', out], timeoutSeconds: 8 },
          },
        ],
      }),
    );
    // Half the module effects wait 100 ms inside their transaction (its first attempt), so
    // the drain spends most of its time there and terminations land inside one.
    const deliveries = Array.from({ length: 1000 }, (_, i) => delivery(`k${i}`, { waitMs: i % 2 === 0 ? 100 : 0 }));
    const started = Date.now();
    const bound = started + 20_000;
    // Six rounds, each terminating every receiver connection there is and at least one: a
    // round finding none (the drain reconnecting after the round before, between two polls)
    // waits for one. The senders keep sending, paced, until the sixth round is done.
    const rounds: number[] = [];
    const load = sendLoad(serve.url, deliveries, {
      concurrency: 4,
      retryMs: 100,
      pauseMs: 100,
      deadline: started + 30_000,
      until: () => rounds.length >= 6 || Date.now() > bound,
    });
    while (rounds.length < 6 && Date.now() < bound) {
      await new Promise((r) => setTimeout(r, 400));
      let n = 0;
      while (n === 0 && Date.now() < bound) {
        n = await terminateReceiverConnections(db);
        if (n === 0) await new Promise((r) => setTimeout(r, 20));
      }
      if (n > 0) rounds.push(n);
    }
    const result = await load;
    expect(serve.child.exitCode).toBeNull();
    expect(rounds).toHaveLength(6);
    // The load stopped because the rounds were done, not because it ran out.
    expect(result.sent).toBeLessThan(deliveries.length);

    await waitAllDone(db, 40_000, serve);
    expect(serve.child.exitCode).toBeNull();
    expect([...result.statuses.keys()].filter((s) => s !== 202 && s !== 503)).toEqual([]);
    expect(result.noAnswer).toBe(0);
    expect(result.without503RetryAfter).toBe(0);
    expect(result.acked.size).toBe(result.sent);
    await checkEffectsOnce(db, result.acked, out);
    expect(logLines(serve.output().stderr).filter((l) => l.level === 'fatal')).toEqual([]);
    expect(await serve.stop('SIGTERM')).toBe(0);
  });
});
