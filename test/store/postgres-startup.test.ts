import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openPostgres } from '../../src/store/postgres/open.js';
import { receiverCommand, tempDir, waitFor, writeConfig } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';
import { delivery, post, shopSource } from './postgres-faults-helpers.js';

/**
 * `serve` on PostgreSQL whose connections are terminated (pg_terminate_backend) while it
 * starts: the main thread's before it listens, the drain thread's after it has begun to
 * answer deliveries. Each is opened again; serve comes up and keeps answering.
 *
 * To hit the start-up connections and no other, the test holds schema_version locked
 * (ACCESS EXCLUSIVE): opening the store reads it, so each opening connection waits there,
 * visible in pg_stat_activity, until the test terminates it or lets it through.
 */

const pgOk = await postgresAvailable();
if (!pgOk) {
  describe.skip('PostgreSQL start-up (PostgreSQL not reachable; see the notice above)', () => {
    it('runs against PostgreSQL', () => {});
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

describe.runIf(pgOk)('serve on PostgreSQL when connections are terminated during start-up', () => {
  let tmp: ReturnType<typeof tempDir>;
  let db: TestDatabase;
  const clients: pg.Client[] = [];
  let kill: (() => void) | undefined;

  beforeEach(async () => {
    tmp = tempDir('receiver-pg-startup-');
    db = await createTestDatabase();
    // Migrated beforehand, as by an earlier start: the start-up only reads the version.
    await (await openPostgres(db.url, { busyTimeoutMs: 5000 })).end();
  });
  afterEach(async () => {
    kill?.();
    kill = undefined;
    for (const c of clients.splice(0)) await c.end().catch(() => {});
    await db?.drop();
    tmp?.cleanup();
  });

  /** A client of its own that takes schema_version's lock in a transaction; resolves once it holds it. */
  async function locker(): Promise<{ pid: number; locked: Promise<unknown>; release: () => Promise<unknown> }> {
    const c = new pg.Client({ connectionString: db.url });
    c.on('error', () => {});
    clients.push(c);
    await c.connect();
    const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await c.query('BEGIN');
    const locked = c.query('LOCK TABLE schema_version IN ACCESS EXCLUSIVE MODE');
    return { pid, locked, release: () => c.query('COMMIT') };
  }

  /** Receiver connections waiting for a lock now (opening the store, behind the test's lock). */
  const waiting = async () =>
    (
      await db.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name = 'receiver' AND wait_event_type = 'Lock'`, [
        db.name,
      ])
    ).map((r) => r.pid);
  const isWaiting = async (pid: number) =>
    (await db.query<{ w: string | null }>('SELECT wait_event_type AS w FROM pg_stat_activity WHERE pid = $1', [pid]))[0]?.w === 'Lock';
  async function until<T>(get: () => Promise<T | undefined>, what: string, timeoutMs = 15_000): Promise<T> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const v = await get();
      if (v !== undefined) return v;
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  async function startServe() {
    const port = await freePort();
    const file = writeConfig(tmp.dir, {
      database: db.url,
      busyTimeoutMs: 10_000,
      sources: { shop: shopSource },
      routes: [{ name: 'log', source: 'shop', key: '{body.key}', effect: { exec: ['/bin/true'] } }],
      drain: { pollMs: 50 },
    });
    const run = receiverCommand(['serve', '-c', file, '--port', String(port)], {});
    const child = spawn(run.file, run.args, { cwd: run.cwd, env: run.env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    let exit: number | null | undefined;
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r((exit = code))));
    kill = () => child.kill('SIGKILL');
    return {
      url: `http://127.0.0.1:${port}`,
      stderr: () => stderr,
      exitCode: () => exit,
      /** Fails the test when serve has exited. */
      alive: () => {
        if (exit !== undefined) throw new Error(`serve exited (${exit}):\n${stderr}`);
      },
      stop: () => {
        child.kill('SIGTERM');
        return exited;
      },
    };
  }

  it("the main thread's connection, terminated while it opens the database before listening: opened again, serve starts", async () => {
    const a = await locker();
    await a.locked;
    const serve = await startServe();
    let terminated = 0;
    while (terminated < 2) {
      const pids = await until(async () => (serve.alive(), (await waiting()).length > 0 ? await waiting() : undefined), 'serve opening the database');
      await db.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [pids]);
      terminated += pids.length;
    }
    await a.release();
    await waitFor(() => (serve.stderr().includes('"msg":"listening"') ? true : (serve.alive(), undefined)), 'listening', 15_000);
    const r = await post(serve.url, delivery('evt_after_start'));
    expect(r.status).toBe(202);
    expect(await serve.stop()).toBe(0);
  });

  it("the drain's connection, terminated while it opens after serve has answered 202: tried again, serve keeps answering and drains", async () => {
    // a holds the lock; the main thread's open waits behind it, then b queues behind that.
    // When a lets go, the main thread reads and is done, and b takes the lock before the
    // drain thread opens its own connection, which then waits behind b.
    const a = await locker();
    await a.locked;
    const serve = await startServe();
    const main = await until(async () => (serve.alive(), (await waiting())[0]), "the main thread's open");
    const b = await locker();
    await until(async () => ((await isWaiting(b.pid)) ? true : undefined), 'the second lock queued');
    await a.release();
    await b.locked;
    // Listening (the drain's start comes after): deliveries are answered.
    const first = await until(async () => {
      serve.alive();
      return post(serve.url, delivery('evt_during_start')).then(
        (res) => res,
        () => undefined,
      );
    }, 'the listener');
    expect(first.status).toBe(202);
    // The drain thread's connection, each time it tries, until it says it will keep trying.
    let terminated = 0;
    while (!serve.stderr().includes('drain: database unavailable at start; trying again in 1 s')) {
      const pids = (await waiting()).filter((p) => p !== main);
      if (pids.length > 0) {
        await db.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [pids]);
        terminated += pids.length;
      }
      serve.alive();
      await new Promise((r) => setTimeout(r, 5));
      if (terminated > 20) throw new Error(`${terminated} connections terminated and no retry line:\n${serve.stderr()}`);
    }
    expect(terminated).toBeGreaterThanOrEqual(1);
    // Still answering meanwhile, then the drain comes up once the database lets it.
    expect((await post(serve.url, delivery('evt_while_retrying'))).status).toBe(202);
    await b.release();
    await waitFor(() => (serve.stderr().includes('"msg":"listening"') ? true : (serve.alive(), undefined)), 'listening', 15_000);
    await until(
      async () =>
        (await db.query<{ n: number }>("SELECT count(*)::int AS n FROM events WHERE status = 'done'"))[0]!.n === 2 ? true : (serve.alive(), undefined),
      'both events done',
    );
    expect(await serve.stop()).toBe(0);
  });
});
