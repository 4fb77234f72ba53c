import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { github } from '../src/providers/github.js';
import { startReceiver } from '../src/server.js';
import { FakeStripe, STRIPE_KEY, STRIPE_WHSEC } from './catchup/fakes.js';
import { makeConfig, post, tempDir, waitFor } from './helpers.js';

/**
 * The whole receiver started from code, in this process: HTTP ingress, the drain in its
 * thread, metrics, the admin pages, background catch-up; stopped with stop(), which never exits the process.
 */

const SECRET = 'gh-server-secret-7a2c';

/** A logger whose JSON lines land in an array. */
function memoryLogger() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

function signed(url: string, body: string) {
  return github.sign(Buffer.from(body), SECRET, Date.now(), undefined as never, url).headers;
}

function holdPort(): Promise<Server> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
}

describe('startReceiver', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('serves a delivery, stores it, drains it through its route, and stops cleanly', async () => {
    const ran = `${tmp.dir}/ran`;
    const config = makeConfig(
      {
        port: 0,
        // The drain thread logs at this level on stderr; this test reads the main thread's lines.
        log: { level: 'warn' },
        sources: { gh: { provider: 'github', secret: SECRET } },
        routes: [{ name: 'mark', source: 'gh', events: ['*'], key: '{id}', effect: { exec: ['/bin/sh', '-c', `cat >> ${ran}`] } }],
      },
      tmp.dir,
    );
    const { logger, lines } = memoryLogger();
    const delivery = memoryLogger();
    const receiver = await startReceiver(config, { logger, deliveryLogger: delivery.logger });
    expect(receiver.address.host).toBe('127.0.0.1');
    expect(receiver.address.port).toBeGreaterThan(0);
    expect(lines.find((l) => l.msg === 'listening')).toMatchObject({ port: receiver.address.port, routes: ['mark'] });

    const body = JSON.stringify({ ref: 'refs/heads/main', n: 1 });
    const url = `${receiver.address.url}/webhooks/gh`;
    const r = await post(url, body, signed(url, body));
    expect(r.status).toBe(202);
    const { id } = JSON.parse(r.text) as { id: number };

    // Stored at once; done once the drain thread has run the effect.
    expect((await receiver.store.getEvent(id))?.deliveryId).toBeDefined();
    await waitFor(() => (existsSync(ran) ? true : undefined), 'the effect to run', 10_000);
    const done = await (async () => {
      for (let i = 0; i < 400; i += 1) {
        const e = await receiver.store.getEvent(id);
        if (e?.status === 'done') return e;
        await new Promise((w) => setTimeout(w, 25));
      }
      return receiver.store.getEvent(id);
    })();
    expect(done?.status).toBe('done');
    expect(readFileSync(ran, 'utf8')).toBe(body);
    expect(delivery.lines).toContainEqual(expect.objectContaining({ msg: 'delivery', outcome: 'accepted', eventId: id }));

    // The counters saw the delivery (the attempts come from the drain thread in batches).
    const metrics = await fetch(`${receiver.address.url}/metrics`).then((res) => res.text());
    expect(metrics).toContain('receiver_deliveries_total{source="gh",outcome="accepted"} 1');

    await receiver.stop();
    // Stopped: the port is closed and the same promise comes back on a second call.
    await expect(fetch(`${receiver.address.url}/healthz`)).rejects.toThrow();
    await receiver.stop();
  });

  it('rejects with Error/Try when the port is taken, and leaves the database closed', async () => {
    const held = await holdPort();
    const { port } = held.address() as AddressInfo;
    const config = makeConfig({ port, sources: { gh: { provider: 'github', secret: SECRET } } }, `${tmp.dir}`);
    const { logger } = memoryLogger();
    try {
      await expect(startReceiver({ ...config, database: `${tmp.dir}/taken.db` }, { logger, deliveryLogger: logger })).rejects.toMatchObject({
        kind: 'runtime',
        message: expect.stringContaining('EADDRINUSE') as unknown,
        hint: expect.stringContaining('--port') as unknown,
      });
    } finally {
      held.close();
    }
    // The database it opened was closed again: a second receiver on it starts and stops.
    const again = await startReceiver(
      { ...config, port: 0, database: `${tmp.dir}/taken.db`, drain: { ...config.drain, enabled: false } },
      { logger, deliveryLogger: logger },
    );
    await again.stop();
  });
  it('mounts /admin when admin.token is set, runs catch-up after listening, wakes the drain for what it stored, and ends the runs in stop()', async () => {
    const stripe = await new FakeStripe().start();
    const ran = `${tmp.dir}/caught-up`;
    const token = 'admin-token-for-the-server-test-0123456789';
    try {
      const config = makeConfig(
        {
          port: 0,
          database: `${tmp.dir}/catch-up.db`,
          log: { level: 'warn' },
          // Only a wake drains within the test: the drain would otherwise look once a minute.
          drain: { pollMs: 60_000 },
          admin: { token: 'env:ADMIN_TOKEN' },
          sources: { shop: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:K', apiBase: stripe.base, everyMinutes: 0.004 } } },
          routes: [{ name: 'mark', source: 'shop', events: ['*'], key: '{id}', effect: { exec: ['/bin/sh', '-c', `cat >> ${ran}`] } }],
        },
        tmp.dir,
        { K: STRIPE_KEY, ADMIN_TOKEN: token },
      );
      const { logger, lines } = memoryLogger();
      const receiver = await startReceiver(config, { logger, deliveryLogger: logger });
      const metricsText = () => fetch(`${receiver.address.url}/metrics`).then((res) => res.text());
      // The series exist from the start; the first run (at start) sets the starting point.
      expect(await metricsText()).toContain('receiver_catch_up_runs_total{source="shop",result="error"} 0');
      for (let i = 0; (await metricsText()).includes('receiver_catch_up_runs_total{source="shop",result="ok"} 0'); i += 1) {
        expect(i, 'the run at start').toBeLessThan(200);
        await new Promise((w) => setTimeout(w, 25));
      }

      // Missed while "down": listed by the API, never delivered; a later run stores it and the drain runs its effect.
      const missed = await stripe.create('checkout.session.completed', Math.floor(Date.now() / 1000) + 1);
      // The shell creates the file before cat writes to it: wait for the body itself.
      await waitFor(() => (existsSync(ran) && readFileSync(ran, 'utf8').includes(missed.id) ? true : undefined), 'the stored event to be drained', 10_000);
      expect(await metricsText()).toContain('receiver_catch_up_events_total{source="shop",outcome="stored"} 1');
      expect(lines.find((l) => l.msg === 'catch-up')).toMatchObject({ source: 'shop', provider: 'stripe' });

      // The admin API answers on the same listener, with the token only.
      expect((await fetch(`${receiver.address.url}/admin/api/stats`)).status).toBe(401);
      const stats = await fetch(`${receiver.address.url}/admin/api/stats`, { headers: { authorization: `Bearer ${token}` } });
      expect(stats.status).toBe(200);

      await receiver.stop();
      // No run after stop(): the timers are gone and the store is closed.
      const asked = stripe.requests.length;
      await new Promise((w) => setTimeout(w, 600));
      expect(stripe.requests.length).toBe(asked);
      expect(lines.filter((l) => l.msg === 'catch-up failed')).toEqual([]);
    } finally {
      await stripe.close();
    }
  });

  it('has no /admin without admin.token', async () => {
    const config = makeConfig(
      { port: 0, database: `${tmp.dir}/no-admin.db`, sources: { gh: { provider: 'github', secret: SECRET } }, drain: { enabled: false } },
      tmp.dir,
    );
    const { logger } = memoryLogger();
    const receiver = await startReceiver(config, { logger, deliveryLogger: logger });
    try {
      expect((await fetch(`${receiver.address.url}/admin/api/stats`)).status).toBe(404);
    } finally {
      await receiver.stop();
    }
  });
});
