import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { startReceiver } from '../../src/server.js';
import { makeConfig, post } from '../helpers.js';
import { alertsFile, backends, Catcher, execDestination, flaky, openDatabase, shop, until } from './harness.js';

/**
 * Alerts end to end: a receiver started in this process, a real HTTP catcher and a real
 * exec destination script, on both stores. Failures are made by exec effects that fail
 * until a flag file exists; checks run every 50 ms; waiting sends are made due in SQL.
 */

const quiet = pino({ level: 'silent' });
const { started: running, freshDir } = alertsFile('receiver-alerts-');

async function setup(backend: 'sqlite' | 'postgres', alerts: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const dir = freshDir();
  const db = await openDatabase(backend, dir);
  const catcher = await new Catcher().start();
  const exec = execDestination(dir);
  const flag = join(dir, 'fixed');
  const config = makeConfig(
    {
      database: db.url,
      port: 0,
      log: { level: 'silent' },
      sources: { shop },
      routes: [flaky('crm', flag)],
      retry: { maxAttempts: 3, baseSeconds: 0.01, maxSeconds: 0.02 },
      drain: { pollMs: 20 },
      ...extra,
      alerts: {
        failingAfter: 2,
        checkSeconds: 0.05,
        adminUrl: 'https://hooks.shop.example/admin/',
        destinations: [
          { name: 'chat', http: { url: catcher.url, format: 'json' } },
          { name: 'mail', exec: exec.argv, on: ['dead', 'failing'] },
        ],
        ...alerts,
      },
    },
    dir,
  );
  const receiver = await startReceiver(config, { logger: quiet, deliveryLogger: quiet });
  running.push({ receiver, db, catcher });
  const deliver = async (id: string) => {
    const r = await post(`${receiver.address.url}/webhooks/shop`, JSON.stringify({ id, type: 'order.paid' }));
    expect(r.status).toBe(202);
    return (JSON.parse(r.text) as { id: number }).id;
  };
  return { dir, db, catcher, exec, flag, receiver, deliver, config };
}

const pick = (a: Record<string, unknown>) => `${String(a.kind)} ${String(a.status)} ${String(a.route ?? a.source ?? '')}`;

for (const backend of await backends()) {
  describe(`alerts on ${backend}`, () => {
    it('a dead event and a failing route each fire once and resolve once, to an http and an exec destination', async () => {
      const t = await setup(backend, {});
      const id = await t.deliver('ord_1');
      // Three failed attempts: failing (2 in a row), then dead (maxAttempts 3).
      await until(() => t.catcher.alerts().some((a) => a.kind === 'dead'), 'the dead alert');
      await until(() => t.exec.runs().length >= 2, 'the exec destination to run twice');
      const dead = t.catcher.alerts().find((a) => a.kind === 'dead')!;
      expect(dead).toMatchObject({
        kind: 'dead',
        status: 'firing',
        source: 'shop',
        route: 'crm',
        eventId: id,
        deliveryId: 'ord_1',
        url: `https://hooks.shop.example/admin/events/${id}`,
      });
      expect(String(dead.summary)).toContain(`Event ${id} from shop is dead on route crm`);
      expect(String(dead.error)).toContain('exited with code 1');
      expect(Date.parse(String(dead.at))).toBeGreaterThan(0);
      expect(t.catcher.caught[0]!.headers['content-type']).toBe('application/json');
      expect(t.catcher.caught[0]!.headers['idempotency-key']).toMatch(/^[0-9a-f]{64}$/);

      // Fixed and replayed: both resolve, once each.
      writeFileSync(t.flag, '');
      await t.receiver.store.replayEvents([id], { force: false, now: Date.now() });
      await until(() => t.catcher.alerts().filter((a) => a.status === 'resolved').length === 2, 'both resolutions');
      await until(() => t.exec.runs().length === 4, 'the exec destination to hear both resolutions');
      // A few more checks change nothing.
      await new Promise((r) => setTimeout(r, 400));
      expect(t.catcher.alerts().map(pick).sort()).toEqual(['dead firing crm', 'dead resolved crm', 'failing firing crm', 'failing resolved crm']);
      const runs = t.exec.runs();
      expect(runs.map((r) => `${r.env.RECEIVER_ALERT_KIND} ${r.env.RECEIVER_ALERT_STATUS}`).sort()).toEqual([
        'dead firing',
        'dead resolved',
        'failing firing',
        'failing resolved',
      ]);
      const deadRun = runs.find((r) => r.env.RECEIVER_ALERT_KIND === 'dead' && r.env.RECEIVER_ALERT_STATUS === 'firing')!;
      expect(deadRun.text).toContain(`[firing] Event ${id} from shop is dead on route crm`);
      expect(deadRun.env).toMatchObject({ RECEIVER_ALERT_ROUTE: 'crm', RECEIVER_ALERT_EVENT_ID: String(id), RECEIVER_ALERT_DELIVERY_ID: 'ord_1' });
      // The exec effects' minimal environment: nothing of this process's but PATH, HOME, LANG, LC_*, TZ.
      expect(Object.keys(deadRun.env).filter((k) => !/^(PATH|HOME|LANG|LC_[A-Z_]+|TZ|PWD|SHLVL|_|RECEIVER_ALERT_[A-Z_]+)$/.test(k))).toEqual([]);
      const metrics = await (await fetch(`${t.receiver.address.url}/metrics`)).text();
      expect(metrics).toContain('receiver_alerts_total{kind="dead",status="firing",destination="chat",result="sent"} 1');
      expect(metrics).toContain('receiver_alerts_total{kind="failing",status="resolved",destination="mail",result="sent"} 1');
      // One detection pass may find both (failing at the 2nd failure, dead at the 3rd): no order between them.
      const rows = await t.db.sql(`SELECT alert_key, status FROM alerts ORDER BY alert_key`);
      expect(rows).toEqual([
        { alert_key: `dead:${id}:crm`, status: 'resolved' },
        { alert_key: 'failing:crm', status: 'resolved' },
      ]);
    });

    it('a reload while an alert is being sent lets that send finish: it is recorded sent, and sent once', async () => {
      const t = await setup(backend, {});
      // The first alert's answer takes 800 ms; the reload comes in the middle of it.
      t.catcher.answer = (_c, n) => (n === 1 ? new Promise((r) => setTimeout(() => r(200), 800)) : 200);
      await t.deliver('ord_r');
      await until(() => t.catcher.caught.length >= 1, 'the first send');
      await t.receiver.reload(t.config);
      await until(
        async () => {
          const rows = await t.db.sql(`SELECT status FROM alert_sends ORDER BY id`);
          return rows.length >= 2 && rows.every((r) => r.status === 'sent');
        },
        'every send recorded as sent',
        5000,
      );
      await new Promise((r) => setTimeout(r, 300));
      const seen = t.catcher.alerts().map(pick);
      expect(seen).toEqual([...new Set(seen)]);
    });

    it('a destination that is down gets each alert once when it is back', async () => {
      const t = await setup(backend, {});
      let down = true;
      t.catcher.answer = () => (down ? 503 : 200);
      await t.deliver('ord_2');
      await until(() => t.catcher.caught.length >= 2, 'tries while down');
      // Still down: its sends wait with a backoff (seconds); made due now, in SQL.
      await t.db.sql(`UPDATE alert_sends SET next_attempt_at = 0 WHERE status = 'pending'`);
      await until(() => t.catcher.caught.length >= 4, 'more tries while down');
      const triedWhileDown = t.catcher.caught.length;
      down = false;
      await until(async () => {
        await t.db.sql(`UPDATE alert_sends SET next_attempt_at = 0 WHERE status = 'pending'`);
        const left = await t.db.sql(`SELECT count(*) AS n FROM alert_sends WHERE destination = 'chat' AND status <> 'sent'`);
        return Number(left[0]!.n) === 0;
      }, 'every send to go out');
      const after = t.catcher.caught.slice(triedWhileDown);
      // Once each: the failing and dead firings, each sent once now that it answers.
      expect(after.map((c) => pick(c.json!)).sort()).toEqual(['dead firing crm', 'failing firing crm']);
      const sends = await t.db.sql(`SELECT status, attempts FROM alert_sends WHERE destination = 'chat'`);
      expect(sends.every((s) => s.status === 'sent' && Number(s.attempts) >= 2)).toBe(true);
    });

    it('past maxPerHour a burst of 200 dead events gets one summary, not a flood', async () => {
      const dir = freshDir();
      const db = await openDatabase(backend, dir);
      const catcher = await new Catcher().start();
      const config = makeConfig(
        {
          database: db.url,
          port: 0,
          log: { level: 'silent' },
          sources: { shop },
          // A command that cannot start: each event is dead at its first attempt, at once.
          routes: [{ name: 'crm', source: 'shop', key: '{body.id}', effect: { exec: [join(dir, 'missing')] } }],
          retry: { maxAttempts: 1, baseSeconds: 0.01, maxSeconds: 0.02 },
          drain: { pollMs: 20 },
          alerts: { maxPerHour: 5, checkSeconds: 0.05, destinations: [{ name: 'chat', http: { url: catcher.url }, on: ['dead'] }] },
        },
        dir,
      );
      // The alerts' clock: moved on a minute once the burst is over, for the summary.
      let offset = 0;
      const receiver = await startReceiver(config, { logger: quiet, deliveryLogger: quiet, now: () => Date.now() + offset });
      running.push({ receiver, db, catcher });
      for (let i = 0; i < 200; i += 10)
        await Promise.all(Array.from({ length: 10 }, (_, j) => post(`${receiver.address.url}/webhooks/shop`, JSON.stringify({ id: `b${i + j}`, type: 'x' }))));
      await until(async () => Number((await db.sql(`SELECT count(*) AS n FROM alerts WHERE kind = 'dead'`))[0]!.n) === 200, '200 dead alerts', 60_000);
      await until(
        async () => Number((await db.sql(`SELECT count(*) AS n FROM alert_sends WHERE status IN ('pending', 'sending')`))[0]!.n) === 0,
        'every send settled',
      );
      expect(catcher.alerts().map((a) => a.kind)).toEqual(['dead', 'dead', 'dead', 'dead', 'dead']);
      offset = 61_000;
      await until(() => catcher.alerts().some((a) => a.kind === 'summary'), 'the summary');
      await new Promise((r) => setTimeout(r, 300));
      const kinds = catcher.alerts().map((a) => a.kind);
      expect(kinds.filter((k) => k === 'dead')).toHaveLength(5);
      expect(kinds.filter((k) => k === 'summary')).toHaveLength(1);
      const summary = catcher.alerts().find((a) => a.kind === 'summary')!;
      expect(summary.summary).toBe('195 more alerts in the last hour were not sent here (alerts.maxPerHour is 5): see the admin page.');
      expect(catcher.caught).toHaveLength(6);
    }, 90_000);

    it('no secret of any kind appears in an alert body', async () => {
      const secrets = {
        source: `whsec_${Buffer.from('source-secret-source-secret-12345').toString('base64')}`,
        header: 'hdr-secret-9f8e7d6c5b4a',
        admin: 'admin-token-0123456789abcdef0123456789abcdef',
        metrics: 'metrics-token-55aa55aa55',
        sign: `whsec_${Buffer.from('sign-secret-sign-secret-sign-12345').toString('base64')}`,
      };
      const dir = freshDir();
      const db = await openDatabase(backend, dir);
      const catcher = await new Catcher().start();
      const exec = execDestination(dir);
      // The effect's error quotes secrets (the command's name holds them): the alert must not pass them on.
      const leak = `${secrets.source} ${secrets.header} ${secrets.admin} ${secrets.metrics} ${secrets.sign}`;
      const config = makeConfig(
        {
          database: db.url,
          port: 0,
          log: { level: 'silent' },
          sources: { shop: { provider: 'standard-webhooks', secret: 'env:SHOP_SECRET' }, open: shop },
          routes: [{ name: 'crm', source: 'open', key: '{body.id}', effect: { exec: [`/nonexistent/boom ${leak}`], timeoutSeconds: 5 } }],
          retry: { maxAttempts: 1, baseSeconds: 0.01, maxSeconds: 0.02 },
          drain: { pollMs: 20 },
          admin: { token: secrets.admin },
          metrics: { token: 'env:METRICS_TOKEN' },
          alerts: {
            checkSeconds: 0.05,
            destinations: [
              { name: 'chat', http: { url: 'env:CHAT_URL', format: 'slack', headers: { authorization: 'env:CHAT_AUTH' }, sign: secrets.sign } },
              { name: 'mail', exec: exec.argv },
            ],
          },
        },
        dir,
        { SHOP_SECRET: secrets.source, METRICS_TOKEN: secrets.metrics, CHAT_URL: catcher.url, CHAT_AUTH: `Bearer ${secrets.header}` },
      );
      const receiver = await startReceiver(config, { logger: quiet, deliveryLogger: quiet });
      running.push({ receiver, db, catcher });
      const r = await post(`${receiver.address.url}/webhooks/open`, JSON.stringify({ id: 'leaky', type: 'x' }));
      const id = (JSON.parse(r.text) as { id: number }).id;
      expect(r.status).toBe(202);
      await until(() => catcher.caught.some((c) => c.body.includes(`Event ${id} `)), 'the dead alert');
      await until(() => exec.runs().length >= 1, 'the exec destination');
      const bodies = [...catcher.caught.map((c) => c.body), ...exec.runs().map((e) => `${e.text}\n${Object.values(e.env).join('\n')}`)];
      expect(bodies.join('\n')).toContain('boom [secret] [secret] [secret] [secret] [secret]');
      for (const [name, value] of Object.entries(secrets)) for (const b of bodies) expect(b, name).not.toContain(value);
      for (const b of bodies) expect(b).not.toContain(catcher.url);
      // The destination's own header and signature go in headers, never in the body.
      expect(catcher.caught[0]!.headers.authorization).toBe(`Bearer ${secrets.header}`);
      expect(catcher.caught[0]!.headers['webhook-signature']).toMatch(/^v1,/);
    });
  });
}

describe('alerts configuration', () => {
  const bad = (alerts: unknown, env: NodeJS.ProcessEnv = {}) => {
    try {
      makeConfig({ alerts }, freshDir(), env);
    } catch (e) {
      return (e as Error).message;
    }
    return 'no error';
  };

  it('names the field of each bad destination', () => {
    expect(bad({ destinations: [] })).toContain('alerts.destinations:');
    expect(bad({ destinations: [{ name: 'x' }] })).toContain('alerts.destinations.0: set exactly one of "http" or "exec"');
    expect(bad({ destinations: [{ name: 'x', http: { url: 'ftp://example/hook' } }] })).toContain(
      'alerts.destinations.0.http.url: must be an http:// or https:// URL',
    );
    expect(bad({ destinations: [{ name: 'x', http: { url: 'env:NOPE' } }] })).toContain('alerts.destinations.0.http.url: environment variable NOPE is not set');
    expect(bad({ destinations: [{ name: 'x', http: { url: 'https://a.example/', format: 'teams' } }] })).toContain('alerts.destinations.0.http.format');
    expect(bad({ destinations: [{ name: 'x', exec: ['/bin/true'], on: ['deadd'] }] })).toContain('alerts.destinations.0.on.0');
    expect(
      bad({
        destinations: [
          { name: 'x', exec: ['/bin/true'] },
          { name: 'x', exec: ['/bin/true'] },
        ],
      }),
    ).toContain('alerts.destinations.1.name');
    expect(bad({ destinations: [{ name: 'x', http: { url: 'https://a.example/', headers: { 'content-type': 'x' } } }] })).toContain(
      'alerts.destinations.0.http.headers.content-type',
    );
    expect(bad({ destinations: [{ name: 'x', http: { url: 'https://a.example/', sign: 'nope' } }] })).toContain('alerts.destinations.0.http.sign');
    expect(bad({ failingAfter: 0, destinations: [{ name: 'x', exec: ['/bin/true'] }] })).toContain('alerts.failingAfter');
    expect(bad({ destinations: [{ name: 'x', exec: ['/bin/true'], colour: 'red' }] })).toContain('alerts.destinations.0.colour: unknown field');
    // A URL that is not one is never quoted: it may hold a token.
    expect(bad({ destinations: [{ name: 'x', http: { url: 'not a url tok_123456' } }] })).not.toContain('tok_123456');
    expect(existsSync('/bin/true')).toBe(true);
  });
});
