import Database from 'better-sqlite3';
import { createHmac } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { post, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';

/**
 * Module effects that misbehave in every way a module can, against a real `serve` on each
 * store: serve keeps answering, each attempt is recorded as failed (or timed out) with what
 * happened, each event goes dead after maxAttempts, and a module sees none of serve's secrets.
 */

const SECRET = 'shop-secret-value-3f9a';
const OTHER = 'unrelated-secret-value-77c1';

/** Each hostile module, the event type that selects it, and what its attempts' error says. */
const HOSTILE: { type: string; source: string; timeoutSeconds?: number; error: RegExp }[] = [
  {
    type: 'timer-throw',
    source: `export default async () => { setTimeout(() => { throw new Error('boom from a timer'); }, 10); await new Promise((r) => setTimeout(r, 300)); };`,
    error: /^the module threw outside its handler: boom from a timer$/,
  },
  {
    type: 'import-reject',
    source: `Promise.reject(new Error('rejected at import')); export default async () => {};`,
    error: /^cannot load module \.\/import-reject\.mjs: the module left a promise rejection unhandled: rejected at import$/,
  },
  {
    type: 'import-timer',
    source: `setTimeout(() => Promise.reject(new Error('late rejection queued at import')), 50);
export default async () => { await new Promise((r) => setTimeout(r, 400)); };`,
    error: /the module left a promise rejection unhandled: late rejection queued at import$/,
  },
  {
    type: 'exit',
    source: `export default async () => { process.exit(3); };`,
    error: /^the module ended its process \(exit code 3\)$/,
  },
  {
    type: 'busy',
    source: `import { writeFileSync } from 'node:fs';
export default () => { writeFileSync(new URL('./busy.started', import.meta.url), ''); for (;;) {} };`,
    timeoutSeconds: 1,
    error: /^module timed out after 1s; its writes were rolled back$/,
  },
  {
    type: 'getter',
    source: `export default async () => { const e = new Error('x'); Object.defineProperty(e, 'message', { get() { throw new Error('no message for you'); } }); throw e; };`,
    error: /^a thrown \[object Error\] that cannot be described/,
  },
  {
    type: 'error-event',
    source: `import { EventEmitter } from 'node:events';
export default async () => { const e = new EventEmitter(); setTimeout(() => e.emit('error', new Error('nobody listens')), 10); await new Promise((r) => setTimeout(r, 300)); };`,
    error: /^the module threw outside its handler: nobody listens$/,
  },
];

/** Writes what the module can see of serve: its environment, serve's /proc environ, its pid. */
const SNOOP = `import { readFileSync, writeFileSync } from 'node:fs';
export default async (event, ctx) => {
  let parentEnviron;
  try { parentEnviron = readFileSync('/proc/' + process.ppid + '/environ', 'latin1'); } catch (e) { parentEnviron = 'unreadable: ' + e.code; }
  writeFileSync(new URL('./snoop.json', import.meta.url), JSON.stringify({ env: process.env, self: readFileSync('/proc/self/environ', 'latin1'), parentEnviron, pid: process.pid, ppid: process.ppid }));
  await ctx.db.run(ctx.db.dialect === 'postgres' ? 'CREATE TABLE IF NOT EXISTS snooped (n int)' : 'CREATE TABLE IF NOT EXISTS snooped (n INTEGER)');
};`;

const pgOk = await postgresAvailable();

for (const store of ['sqlite', 'postgres'] as const) {
  describe.runIf(store === 'sqlite' || pgOk)(`hostile module effects (${store})`, () => {
    let tmp: ReturnType<typeof tempDir>;
    let pg: TestDatabase | undefined;
    let serve: ServeProcess | undefined;
    beforeEach(async () => {
      tmp = tempDir('receiver-hostile-');
      if (store === 'postgres') pg = await createTestDatabase();
    });
    afterEach(async () => {
      await serve?.stop('SIGKILL');
      serve = undefined;
      await pg?.drop();
      pg = undefined;
      tmp.cleanup();
    });

    const rows = async <T>(sql: string): Promise<T[]> => {
      if (pg !== undefined) return (await pg.query(sql)) as T[];
      const file = join(tmp.dir, 'receiver.db');
      if (!existsSync(file)) return [];
      const db = new Database(file, { readonly: true });
      try {
        return db.prepare(sql).all() as T[];
      } finally {
        db.close();
      }
    };

    const deliver = (id: string, type: string) => {
      const body = JSON.stringify({ id, type });
      return post(`${serve!.url}/webhooks/shop`, body, { 'X-Signature': createHmac('sha256', SECRET).update(body).digest('hex') });
    };

    it('serve survives every one, records each attempt with what happened, and buries each event after maxAttempts', async () => {
      const dir = join(tmp.dir, 'modules');
      mkdirSync(dir);
      for (const h of HOSTILE) writeFileSync(join(dir, `${h.type}.mjs`), h.source);
      writeFileSync(join(dir, 'snoop.mjs'), SNOOP);
      const routes = [
        ...HOSTILE.map((h) => ({
          name: h.type,
          source: 'shop',
          events: [h.type],
          key: '{body.id}',
          effect: { module: `./${h.type}.mjs`, ...(h.timeoutSeconds === undefined ? {} : { timeoutSeconds: h.timeoutSeconds }) },
        })),
        { name: 'snoop', source: 'shop', events: ['snoop'], key: '{body.id}', effect: { module: './snoop.mjs' } },
      ];
      const file = writeConfig(dir, {
        ...(pg === undefined ? { database: join(tmp.dir, 'receiver.db') } : { database: pg.url }),
        sources: {
          shop: {
            provider: 'hmac-sha256',
            header: 'X-Signature',
            encoding: 'hex',
            secret: 'env:SHOP_SECRET',
            deliveryId: '{body.id}',
            eventType: '{body.type}',
          },
        },
        retry: { maxAttempts: 2, baseSeconds: 0.05, maxSeconds: 0.1 },
        drain: { pollMs: 50 },
        routes,
      });
      serve = await startServe(file, { env: { SHOP_SECRET: SECRET, UNRELATED_TOKEN: OTHER } });
      const s = serve;

      for (const h of HOSTILE) expect((await deliver(`h-${h.type}`, h.type)).status).toBe(202);

      // While the busy loop runs, deliveries are answered and /healthz says ok.
      await waitFor(() => (existsSync(join(dir, 'busy.started')) ? true : undefined), 'the busy loop to start', 90_000);
      for (let i = 0; i < 3; i++) {
        const t0 = Date.now();
        expect((await deliver(`during-busy-${i}`, 'unrouted')).status).toBe(202);
        expect(Date.now() - t0).toBeLessThan(5000);
      }
      expect((await fetch(`${s.url}/healthz`)).status).toBe(200);

      const ids = HOSTILE.map((h) => `'h-${h.type}'`).join(', ');
      const deadline = Date.now() + 120_000;
      let events: { delivery_id: string; status: string; attempts: number }[] = [];
      for (;;) {
        events = await rows(`SELECT delivery_id, status, attempts FROM events WHERE delivery_id IN (${ids}) ORDER BY id`);
        if (events.length === HOSTILE.length && events.every((e) => e.status === 'dead')) break;
        if (Date.now() > deadline) throw new Error(`not every event is dead: ${JSON.stringify(events)}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(s.child.exitCode).toBeNull();
      expect(events.map((e) => e.attempts)).toEqual(HOSTILE.map(() => 2));

      const attempts = await rows<{ delivery_id: string; attempt: number; outcome: string; error: string }>(
        `SELECT e.delivery_id, a.attempt, a.outcome, a.error FROM attempts a JOIN events e ON e.id = a.event_id WHERE e.delivery_id IN (${ids}) ORDER BY a.id`,
      );
      for (const h of HOSTILE) {
        const mine = attempts.filter((a) => a.delivery_id === `h-${h.type}`);
        expect(
          mine.map((a) => [a.attempt, a.outcome]),
          h.type,
        ).toEqual([
          [1, 'failed'],
          [2, 'failed'],
        ]);
        for (const a of mine) expect(a.error, h.type).toMatch(h.error);
      }

      // The same serve still runs module effects, and the module sees none of its secrets.
      expect((await deliver('snoop-1', 'snoop')).status).toBe(202);
      const snoopDone = Date.now() + 20_000;
      while ((await rows<{ status: string }>(`SELECT status FROM events WHERE delivery_id = 'snoop-1'`))[0]?.status !== 'done') {
        if (Date.now() > snoopDone) throw new Error('the snoop event is not done');
        await new Promise((r) => setTimeout(r, 100));
      }
      const seen = JSON.parse(readFileSync(join(dir, 'snoop.json'), 'utf8')) as {
        env: Record<string, string>;
        self: string;
        parentEnviron: string;
        pid: number;
        ppid: number;
      };
      expect(JSON.stringify(seen.env)).not.toContain(SECRET);
      expect(JSON.stringify(seen.env)).not.toContain(OTHER);
      expect(Object.keys(seen.env).filter((k) => k.startsWith('RECEIVER_') || k === 'SHOP_SECRET' || k === 'UNRELATED_TOKEN')).toEqual([]);
      expect(seen.self).not.toContain(SECRET);
      // Its own process: serve's memory is not its memory.
      expect(seen.pid).not.toBe(s.child.pid);
      expect(seen.ppid).toBe(s.child.pid);
      expect(s.child.exitCode).toBeNull();

      // Stopping serve ends the module host with it.
      expect(await s.stop('SIGTERM')).toBe(0);
      await waitFor(() => (isRunning(seen.pid) ? undefined : true), 'the module host to end', 5000);
    }, 300_000);
  });
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('a module handler that waits before it writes (sqlite)', () => {
  const tmp = tempDir('receiver-lazy-');
  afterEach(() => tmp.cleanup());

  it('holds no write lock while it waits: deliveries are answered meanwhile, and its write commits once', async () => {
    // An API call before the first statement, 1.5 s, five times busyTimeoutMs: before, the
    // handler's transaction (and serve's group) held SQLite's one write lock from before the
    // handler ran, and deliveries meanwhile were answered 503 after busyTimeoutMs.
    const dir = tmp.dir;
    writeFileSync(
      join(dir, 'api-first.mjs'),
      `import { writeFileSync } from 'node:fs';
export default async (event, ctx) => {
  writeFileSync(new URL('./api.started', import.meta.url), '');
  await new Promise((r) => setTimeout(r, 1500));
  await ctx.db.run('CREATE TABLE IF NOT EXISTS issued (key TEXT PRIMARY KEY)');
  await ctx.db.run('INSERT INTO issued (key) VALUES (?)', [ctx.key]);
};`,
    );
    const file = writeConfig(dir, {
      database: join(dir, 'receiver.db'),
      busyTimeoutMs: 300,
      sources: {
        shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: 'env:SHOP_SECRET', deliveryId: '{body.id}', eventType: '{body.type}' },
      },
      drain: { pollMs: 50 },
      routes: [{ name: 'licence', source: 'shop', events: ['order'], key: '{body.id}', effect: { module: './api-first.mjs', timeoutSeconds: 10 } }],
    });
    const serve = await startServe(file, { env: { SHOP_SECRET: SECRET } });
    try {
      const deliver = (id: string, type: string) => {
        const body = JSON.stringify({ id, type });
        return post(`${serve.url}/webhooks/shop`, body, { 'X-Signature': createHmac('sha256', SECRET).update(body).digest('hex') });
      };
      expect((await deliver('order-1', 'order')).status).toBe(202);
      await waitFor(() => (existsSync(join(dir, 'api.started')) ? true : undefined), 'the handler to start', 30_000);
      for (let i = 0; i < 5; i++) expect((await deliver(`meanwhile-${i}`, 'unrouted')).status).toBe(202);
      const db = new Database(join(dir, 'receiver.db'), { readonly: true });
      try {
        await waitFor(
          () => ((db.prepare(`SELECT status FROM events WHERE delivery_id = 'order-1'`).get() as { status: string }).status === 'done' ? true : undefined),
          'the licence',
          30_000,
        );
        expect(db.prepare('SELECT key FROM issued').all()).toEqual([{ key: 'order-1' }]);
        expect(db.prepare(`SELECT outcome FROM attempts`).all()).toEqual([{ outcome: 'ok' }]);
      } finally {
        db.close();
      }
    } finally {
      await serve.stop('SIGTERM');
    }
  }, 60_000);
});
