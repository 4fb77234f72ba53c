import Database from 'better-sqlite3';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { startReceiver } from '../../src/server.js';
import { makeConfig, post, runInProcess, writeConfig } from '../helpers.js';
import { STRIPE_WHSEC } from '../catchup/fakes.js';
import { login, TOKEN } from '../admin/helpers.js';
import { alertsFile, backends, Catcher, execDestination, openDatabase, shop, until } from './harness.js';

/**
 * The stuck, catch-up and ingest alerts, each firing once and resolving once, on both
 * stores; and `receiver alerts test`. The alerts' clock is this process's plus an offset
 * the tests move on instead of sleeping.
 */

const quiet = pino({ level: process.env.ALERTS_DEBUG === '1' ? 'debug' : 'silent' });
const { started: running, freshDir } = alertsFile('receiver-alerts-kinds-');

async function setup(backend: 'sqlite' | 'postgres', extra: Record<string, unknown>, on: string[]) {
  const dir = freshDir();
  const db = await openDatabase(backend, dir);
  const catcher = await new Catcher().start();
  const clock = { offset: 0 };
  const config = makeConfig(
    {
      database: db.url,
      port: 0,
      log: { level: 'silent' },
      sources: { shop },
      drain: { pollMs: 20 },
      ...extra,
      alerts: { stuckMinutes: 1, checkSeconds: 0.05, destinations: [{ name: 'chat', http: { url: catcher.url }, on }] },
    },
    dir,
    { K: 'rk_test_unused' },
  );
  const receiver = await startReceiver(config, { logger: quiet, deliveryLogger: quiet, now: () => Date.now() + clock.offset });
  running.push({ receiver, db, catcher });
  const seen = () => catcher.alerts().map((a) => `${String(a.kind)} ${String(a.status)}`);
  return { dir, db, catcher, clock, receiver, seen };
}

for (const backend of await backends()) {
  describe(`alerts on ${backend}`, () => {
    it('stuck: due work nobody takes fires once, and resolves once it is taken', async () => {
      const route = { name: 'crm', source: 'shop', key: '{body.id}', effect: { exec: ['/bin/true'] } };
      const t = await setup(backend, { drain: { enabled: false }, routes: [route], admin: { token: TOKEN } }, ['stuck']);
      const r = await post(`${t.receiver.address.url}/webhooks/shop`, JSON.stringify({ id: 's1', type: 'x' }));
      const id = (JSON.parse(r.text) as { id: number }).id;
      await new Promise((w) => setTimeout(w, 200));
      expect(t.seen()).toEqual([]);
      t.clock.offset = 61_000;
      await until(() => t.seen().includes('stuck firing'), 'stuck');
      expect(t.catcher.alerts()[0]).toMatchObject({ eventId: id });
      expect(String(t.catcher.alerts()[0]!.summary)).toContain(`Event ${id} has been due for 1 minutes`);
      // Open alerts are listed by stats and on the admin overview.
      const stats = await runInProcess(['stats', '--json', '-c', writeConfig(t.dir, { database: t.db.url, sources: { shop } })]);
      expect((JSON.parse(stats.stdout) as { alerts: unknown[] }).alerts).toEqual([
        {
          key: 'stuck',
          kind: 'stuck',
          summary: expect.stringContaining(`Event ${id} has been due`) as unknown,
          source: null,
          route: null,
          eventId: id,
          firedAt: expect.any(String) as unknown,
        },
      ]);
      const text = await runInProcess(['stats', '-c', join(t.dir, 'receiver.config.json')]);
      expect(text.stdout).toContain(`open alerts: 1\n  stuck since `);
      const { cookie } = await login(t.receiver.address.url);
      const page = await (await fetch(`${t.receiver.address.url}/admin/`, { headers: { cookie: cookie! } })).text();
      expect(page).toContain('1 open alert(s)');
      expect(page).toContain(`href="/admin/events/${id}"`);
      await t.db.sql(`UPDATE events SET status = 'done' WHERE id = ?`, [id]);
      await until(() => t.seen().includes('stuck resolved'), 'resolved');
      // A claim whose lease ran out long ago, never taken back, is stuck as well.
      // A lease is a unit's: the event's one unit (route crm) is claimed by a drain that is gone.
      await t.db.sql(`UPDATE events SET status = 'processing' WHERE id = ?`, [id]);
      await t.db.sql(
        `INSERT INTO units (event_id, route, lane, status, attempts, next_attempt_at, lease_owner, lease_expires_at) VALUES (?, 'crm', 'crm', 'processing', 1, ?, 'gone', ?)`,
        [id, Date.now(), Date.now() - 10_000],
      );
      await until(() => t.seen().filter((s) => s === 'stuck firing').length === 2, 'stuck again');
      expect(String(t.catcher.alerts()[2]!.summary)).toContain(`The claim on event ${id} expired 1 minutes ago`);
      await new Promise((w) => setTimeout(w, 300));
      expect(t.seen()).toEqual(['stuck firing', 'stuck resolved', 'stuck firing']);
    });

    it('catch-up: a failed run fires once, and the next good run resolves it', async () => {
      const t = await setup(
        backend,
        // Nothing listens on port 9 here: the run at start fails.
        { sources: { stripe: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:K', apiBase: 'http://127.0.0.1:9', everyMinutes: 60 } } } },
        ['catch-up'],
      );
      await until(() => t.seen().includes('catch-up firing'), 'catch-up');
      expect(t.catcher.alerts()[0]).toMatchObject({ kind: 'catch-up', source: 'stripe' });
      expect(String(t.catcher.alerts()[0]!.error)).not.toBe('');
      await t.db.sql(`UPDATE catch_up SET last_error = NULL, last_ok_at = ? WHERE source = 'stripe'`, [Date.now()]);
      await until(() => t.seen().includes('catch-up resolved'), 'resolved');
      await new Promise((w) => setTimeout(w, 300));
      expect(t.seen()).toEqual(['catch-up firing', 'catch-up resolved']);
    });

    it('ingest: deliveries refused for a minute fire once (even when the database cannot store the alert), and resolve once accepted again', async () => {
      const t = await setup(backend, { busyTimeoutMs: 200 }, ['ingest']);
      // Another process holds what an insert needs: SQLite's write lock, PostgreSQL's events table.
      let release: () => Promise<void>;
      if (backend === 'sqlite') {
        const h = new Database(t.db.url);
        h.exec('BEGIN IMMEDIATE');
        release = async () => {
          h.exec('ROLLBACK');
          h.close();
        };
      } else {
        const c = new pg.Client({ connectionString: t.db.url });
        await c.connect();
        await c.query('BEGIN');
        await c.query('LOCK TABLE events IN EXCLUSIVE MODE');
        release = async () => {
          await c.query('ROLLBACK');
          await c.end();
        };
      }
      const url = `${t.receiver.address.url}/webhooks/shop`;
      expect((await post(url, JSON.stringify({ id: 'i1', type: 'x' }))).status).toBe(503);
      t.clock.offset = 61_000;
      expect((await post(url, JSON.stringify({ id: 'i2', type: 'x' }))).status).toBe(503);
      await until(() => t.seen().includes('ingest firing'), 'ingest');
      expect(String(t.catcher.alerts()[0]!.summary)).toContain('Deliveries have been refused (503) for 1 minute');
      await release();
      expect((await post(url, JSON.stringify({ id: 'i3', type: 'x' }))).status).toBe(202);
      await until(() => t.seen().includes('ingest resolved'), 'resolved');
      await new Promise((w) => setTimeout(w, 300));
      expect(t.seen()).toEqual(['ingest firing', 'ingest resolved']);
      expect(await t.db.sql(`SELECT transition, status FROM alert_sends ORDER BY id`)).toEqual([
        { transition: 'firing', status: 'sent' },
        { transition: 'resolved', status: 'sent' },
      ]);
    });
  });
}

describe('receiver alerts test', () => {
  it('exits 0 only when every destination took the test alert, and --to picks one', async () => {
    const dir = freshDir();
    const good = await new Catcher().start();
    const bad = await new Catcher().start();
    bad.answer = () => 500;
    const exec = execDestination(dir);
    const file = writeConfig(dir, {
      alerts: {
        destinations: [
          { name: 'chat', http: { url: 'env:CHAT_URL', format: 'text' } },
          { name: 'mail', exec: exec.argv },
          { name: 'broken', http: { url: bad.url, format: 'discord' } },
        ],
      },
    });
    try {
      const env = { CHAT_URL: good.url };
      const all = await runInProcess(['alerts', 'test', '-c', file], { env });
      expect(all.code).toBe(1);
      expect(all.stdout).toBe('chat: ok\nmail: ok\nbroken: failed: alert destination "broken" answered 500\n');
      expect(all.stderr).toContain('1 of 3 alert destination(s) did not take the test alert');
      expect(good.caught[0]!.headers['content-type']).toBe('text/plain; charset=utf-8');
      expect(good.caught[0]!.body).toMatch(/^\[firing\] A test alert from receiver/);
      expect(bad.caught[0]!.json).toEqual({ content: expect.stringContaining('kind: test') as unknown });
      expect(exec.runs()[0]!.env).toMatchObject({ RECEIVER_ALERT_KIND: 'test', RECEIVER_ALERT_STATUS: 'firing' });

      expect((await runInProcess(['alerts', 'test', '-c', file, '--to', 'chat'], { env })).code).toBe(0);
      expect(good.caught).toHaveLength(2);
      const unknown = await runInProcess(['alerts', 'test', '-c', file, '--to', 'nope'], { env });
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toContain('--to: no alert destination named "nope"');
      // Without the variable its URL names, the configuration is refused, naming the field.
      const missing = await runInProcess(['alerts', 'test', '-c', file], { env: { CHAT_URL: '' } });
      expect(missing.code).toBe(2);
      expect(missing.stderr).toContain('alerts.destinations.0.http.url: environment variable CHAT_URL is not set');
    } finally {
      await good.close();
      await bad.close();
    }
  });
});
