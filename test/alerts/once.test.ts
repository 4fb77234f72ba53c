import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { startReceiver } from '../../src/server.js';
import { makeConfig, post, startServe, writeConfig } from '../helpers.js';
import { postgresAvailable } from '../postgres-helpers.js';
import { alertsFile, Catcher, flaky, openDatabase, shop, until } from './harness.js';

/**
 * Each alert goes out once: across a kill -9 in the middle of a send (at most once more),
 * restarts, and two receivers on one PostgreSQL database.
 */

const quiet = pino({ level: 'silent' });
const { freshDir } = alertsFile('receiver-alerts-once-');
const pgOk = await postgresAvailable();

describe('alerts go out once', () => {
  it('a kill -9 while an alert is being sent repeats it at most once, and a restart repeats nothing sent', async () => {
    const dir = freshDir();
    const catcher = await new Catcher().start();
    // The first try hangs: serve is killed in the middle of it.
    catcher.answer = (_c, n) => (n === 1 ? 'hang' : 200);
    const file = writeConfig(dir, {
      log: { level: 'info', format: 'json' },
      sources: { shop },
      routes: [{ name: 'crm', source: 'shop', key: '{body.id}', effect: { exec: [join(dir, 'missing')] } }],
      retry: { maxAttempts: 1, baseSeconds: 0.01, maxSeconds: 0.02 },
      drain: { pollMs: 20 },
      alerts: { checkSeconds: 0.05, destinations: [{ name: 'chat', http: { url: catcher.url }, on: ['dead'] }] },
    });
    const dbFile = join(dir, 'receiver.db');
    let serve = await startServe(file);
    try {
      const r = await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'k1', type: 'x' }));
      expect(r.status).toBe(202);
      await until(() => catcher.caught.length === 1, 'the first try');
      await serve.stop('SIGKILL');
      // Its claim on the send outlives it until the lease ends: ended now, in SQL.
      const sql = async (text: string) => {
        const { default: Database } = await import('better-sqlite3');
        const h = new Database(dbFile, { timeout: 5000 });
        try {
          return h.prepare(text).reader ? h.prepare(text).all() : h.prepare(text).run();
        } finally {
          h.close();
        }
      };
      expect(await sql(`SELECT status FROM alert_sends`)).toEqual([{ status: 'sending' }]);
      await sql(`UPDATE alert_sends SET lease_expires_at = 0 WHERE status = 'sending'`);
      serve = await startServe(file);
      await until(() => catcher.caught.length === 2, 'the repeat');
      await until(async () => ((await sql(`SELECT status FROM alert_sends`)) as { status: string }[])[0]?.status === 'sent', 'the send to be settled');
      await serve.stop();
      // A restart sends nothing again.
      serve = await startServe(file);
      await new Promise((w) => setTimeout(w, 500));
      expect(catcher.caught).toHaveLength(2);
      // The repeat carries the same Idempotency-Key: the destination may drop it.
      expect(catcher.caught[1]!.headers['idempotency-key']).toBe(catcher.caught[0]!.headers['idempotency-key']);
    } finally {
      await serve.stop();
      await catcher.close();
    }
  }, 60_000);

  it.skipIf(!pgOk)(
    'two receivers on one PostgreSQL database send each alert once',
    async () => {
      const dir = freshDir();
      const catcher = await new Catcher().start();
      const db = await openDatabase('postgres', dir);
      const flag = join(dir, 'fixed');
      const config = makeConfig(
        {
          database: db.url,
          port: 0,
          log: { level: 'silent' },
          sources: { shop },
          routes: [flaky('crm', flag)],
          retry: { maxAttempts: 2, baseSeconds: 0.01, maxSeconds: 0.02 },
          drain: { pollMs: 20 },
          alerts: { failingAfter: 3, checkSeconds: 0.03, destinations: [{ name: 'chat', http: { url: catcher.url } }] },
        },
        dir,
      );
      const a = await startReceiver(config, { logger: quiet, deliveryLogger: quiet });
      const b = await startReceiver(config, { logger: quiet, deliveryLogger: quiet });
      try {
        const ids: number[] = [];
        for (let i = 0; i < 6; i += 1) {
          const r = await post(`${(i % 2 === 0 ? a : b).address.url}/webhooks/shop`, JSON.stringify({ id: `two${i}`, type: 'x' }));
          ids.push((JSON.parse(r.text) as { id: number }).id);
        }
        const seen = () => catcher.alerts().map((x) => `${String(x.kind)} ${String(x.status)} ${String(x.eventId ?? x.route)}`);
        await until(() => seen().filter((s) => s.startsWith('dead firing')).length === 6 && seen().includes('failing firing crm'), 'every firing');
        const { writeFileSync } = await import('node:fs');
        writeFileSync(flag, '');
        await a.store.replayDead({ force: false, now: Date.now() });
        await until(() => seen().filter((s) => s.startsWith('dead resolved')).length === 6 && seen().includes('failing resolved crm'), 'every resolution');
        await new Promise((w) => setTimeout(w, 500));
        const all = seen().sort();
        expect(all).toEqual([...new Set(all)]);
        expect(all).toEqual([...ids.flatMap((id) => [`dead firing ${id}`, `dead resolved ${id}`]), 'failing firing crm', 'failing resolved crm'].sort());
      } finally {
        await a.stop(1000);
        await b.stop(1000);
        await catcher.close();
        await db.close();
      }
    },
    60_000,
  );
});
