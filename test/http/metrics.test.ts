import { mkdirSync, writeFileSync, chmodSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { planStored } from '../../src/drain/loop.js';
import { processUnit } from '../../src/drain/process.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { clock, drainDue, harness, inspect, lines, newEvent, type Harness } from '../drain/helpers.js';
import { Secret } from '../../src/config/secret.js';
import { bearerMatches, metricsRoute, ReceiverMetrics } from '../../src/http/metrics.js';
import { hmac } from '../../src/providers/util.js';
import { queueSnapshot } from '../../src/server.js';
import { makeConfig, post, startApp, startServe, tempDir, writeConfig, type RunningApp } from '../helpers.js';

const SECRET = 'metrics-shop-secret';
const sign = (body: string) => `sha256=${hmac('sha256', SECRET, body).toString('hex')}`;

/** Prometheus text -> { 'name{a="b",c="d"}': value } (labels as written, in order). */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

async function scrape(url: string, token?: string): Promise<Map<string, number>> {
  const res = await fetch(`${url}/metrics`, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parseMetrics(await res.text());
}

const deliveries = (m: Map<string, number>, source: string, outcome: string) => m.get(`receiver_deliveries_total{source="${source}",outcome="${outcome}"}`);

describe('GET /metrics on a real server (in process, real SQLite file)', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let app: RunningApp;
  let metrics: ReceiverMetrics;
  let n = 0;

  beforeEach(async () => {
    n += 1;
    const config = makeConfig(
      {
        database: `${tmp.dir}/metrics-${n}.db`,
        maxBodyBytes: 256,
        sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', prefix: 'sha256=', secret: SECRET, deliveryId: '{body.id}' } },
      },
      tmp.dir,
    );
    // serve's own adapter over the store's queueStats(), read at every scrape.
    const queue = queueSnapshot({ queueStats: () => app.store.queueStats(), laneStats: () => app.store.laneStats() });
    metrics = new ReceiverMetrics({ sources: config.sources.keys(), routes: ['r1'], lanes: ['deploys', 'licence', 'mail'], queue });
    app = await startApp(config, { onOutcome: (o) => metrics.observeDelivery(o), extend: metricsRoute(metrics) });
  });
  afterEach(async () => app.close());

  const deliver = (body: string, headers: Record<string, string> = {}, source = 'shop') =>
    post(`${app.url}/webhooks/${source}`, body, { 'x-signature': sign(body), ...headers });

  it('counts deliveries by source and outcome as they happen', async () => {
    const before = await scrape(app.url);
    expect(deliveries(before, 'shop', 'accepted')).toBe(0);
    expect(deliveries(before, 'shop', 'duplicate')).toBe(0);

    expect((await deliver('{"id":"a"}')).status).toBe(202);
    expect((await deliver('{"id":"b"}')).status).toBe(202);
    expect((await deliver('{"id":"a"}')).status).toBe(202); // duplicate
    expect((await deliver('{"id":"a","x":1}')).status).toBe(409); // conflict
    expect((await deliver('{"id":"c"}', { 'x-signature': 'sha256=00' })).status).toBe(401);
    expect((await deliver('{"id":"d"}', { 'x-signature': 'nope' })).status).toBe(401);
    expect((await deliver(JSON.stringify({ id: 'e', pad: 'x'.repeat(300) }))).status).toBe(413);
    expect((await deliver('{"no_id":1}')).status).toBe(400);
    expect((await deliver('{"id":"f"}', {}, 'wp-login.php')).status).toBe(404);

    const after = await scrape(app.url);
    expect(deliveries(after, 'shop', 'accepted')).toBe(2);
    expect(deliveries(after, 'shop', 'duplicate')).toBe(1);
    expect(deliveries(after, 'shop', 'conflict')).toBe(1);
    expect(deliveries(after, 'shop', 'unauthorized')).toBe(2);
    expect(deliveries(after, 'shop', 'too_large')).toBe(1);
    expect(deliveries(after, 'shop', 'bad_request')).toBe(1);
    // An unknown source name is one bounded label, not a series per path a scanner tries.
    expect(deliveries(after, '_unknown', 'not_found')).toBe(1);
    expect([...after.keys()].some((k) => k.includes('wp-login'))).toBe(false);
    // Every delivery to "shop" is in the latency histogram.
    expect(after.get('receiver_ingest_duration_seconds_count{source="shop"}')).toBe(8);
    expect(after.get('receiver_ingest_duration_seconds_bucket{le="+Inf",source="shop"}')).toBe(8);
  });

  it('reads pending and dead counts and the oldest pending age from the database at scrape time', async () => {
    const empty = await scrape(app.url);
    expect(empty.get('receiver_events{status="pending"}')).toBe(0);
    expect(empty.get('receiver_oldest_pending_age_seconds')).toBe(0);
    expect(empty.get('receiver_database_up')).toBe(1);

    for (const id of ['p1', 'p2', 'p3']) expect((await deliver(`{"id":"${id}"}`)).status).toBe(202);
    // Move time in SQL: the oldest pending event arrived 10 minutes ago; one other is dead.
    app.store.db.prepare(`UPDATE events SET received_at = received_at - 600000 WHERE delivery_id = 'p1'`).run();
    app.store.db.prepare(`UPDATE events SET status = 'dead' WHERE delivery_id = 'p3'`).run();

    const m = await scrape(app.url);
    expect(m.get('receiver_events{status="pending"}')).toBe(2);
    expect(m.get('receiver_events{status="dead"}')).toBe(1);
    expect(m.get('receiver_events{status="processing"}')).toBe(0);
    const age = m.get('receiver_oldest_pending_age_seconds')!;
    expect(age).toBeGreaterThanOrEqual(600);
    expect(age).toBeLessThan(660);
  });

  it("reads each lane's pending and running units and its oldest pending age at scrape time; a configured lane reads 0, one gone quiet and unconfigured drops out", async () => {
    const lane = (m: Map<string, number>, name: string, l: string) => m.get(`${name}{lane="${l}"}`);
    const empty = await scrape(app.url);
    for (const l of ['deploys', 'licence', 'mail']) {
      expect([
        lane(empty, 'receiver_lane_pending', l),
        lane(empty, 'receiver_lane_running', l),
        lane(empty, 'receiver_lane_oldest_pending_seconds', l),
      ]).toEqual([0, 0, 0]);
    }

    for (const id of ['p1', 'p2', 'p3']) expect((await deliver(`{"id":"${id}"}`)).status).toBe(202);
    // Move time in SQL: p1 arrived 10 minutes ago.
    app.store.db.prepare(`UPDATE events SET received_at = received_at - 600000 WHERE delivery_id = 'p1'`).run();
    const [p1, p2, p3] = (await app.store.unplannedEvents(10)).map((e) => e.id);
    const now = Date.now();
    await app.store.planEvents(
      [
        {
          eventId: p1!,
          units: [
            { route: 'deploy', lane: 'deploys' },
            { route: 'licence', lane: 'licence' },
          ],
          decisions: '',
        },
        { eventId: p2!, units: [{ route: 'deploy', lane: 'deploys' }], decisions: '' },
        { eventId: p3!, units: [{ route: 'old', lane: 'legacy' }], decisions: '' },
      ],
      now,
    );
    // p1's deploy runs; its licence and p2's deploy wait.
    const claimed = await app.store.claimUnits('drain-1', now, 30_000, { busyLanes: ['licence', 'legacy'], lanes: 1, perLane: 1 });
    expect(claimed.map((u) => [u.id, u.lane])).toEqual([[p1, 'deploys']]);

    const m = await scrape(app.url);
    expect([lane(m, 'receiver_lane_pending', 'deploys'), lane(m, 'receiver_lane_running', 'deploys')]).toEqual([1, 1]);
    expect(lane(m, 'receiver_lane_oldest_pending_seconds', 'deploys')).toBeLessThan(60);
    expect([lane(m, 'receiver_lane_pending', 'licence'), lane(m, 'receiver_lane_running', 'licence')]).toEqual([1, 0]);
    expect(lane(m, 'receiver_lane_oldest_pending_seconds', 'licence')).toBeGreaterThanOrEqual(600);
    expect(lane(m, 'receiver_lane_oldest_pending_seconds', 'licence')).toBeLessThan(660);
    expect([lane(m, 'receiver_lane_pending', 'mail'), lane(m, 'receiver_lane_running', 'mail')]).toEqual([0, 0]);
    expect(lane(m, 'receiver_lane_pending', 'legacy')).toBe(1);

    app.store.db.prepare(`UPDATE units SET status = 'done' WHERE lane = 'legacy'`).run();
    const after = await scrape(app.url);
    expect([...after.keys()].filter((k) => k.includes('legacy'))).toEqual([]);
    expect(lane(after, 'receiver_lane_pending', 'mail')).toBe(0);
  });

  it('reports receiver_database_up 0 when the queue cannot be read, and still answers', async () => {
    await app.store.close();
    const m = await scrape(app.url);
    expect(m.get('receiver_database_up')).toBe(0);
  });
});

describe('metrics units', () => {
  it('effect attempts by route and outcome; duration only for attempts that ran; settled events', async () => {
    const m = new ReceiverMetrics({ routes: ['deploy'] });
    const base = parseMetrics(await m.text());
    expect(base.get('receiver_effect_attempts_total{route="deploy",outcome="failed"}')).toBe(0);
    m.observeAttempt({ route: 'deploy', outcome: 'failed', durationMs: 1500 });
    m.observeAttempt({ route: 'deploy', outcome: 'ok', durationMs: 20 });
    m.observeAttempt({ route: 'deploy', outcome: 'skipped', durationMs: 0 });
    m.observeEvent({ status: 'retry' });
    m.observeEvent({ status: 'done' });
    const t = parseMetrics(await m.text());
    expect(t.get('receiver_effect_attempts_total{route="deploy",outcome="failed"}')).toBe(1);
    expect(t.get('receiver_effect_attempts_total{route="deploy",outcome="ok"}')).toBe(1);
    expect(t.get('receiver_effect_attempts_total{route="deploy",outcome="skipped"}')).toBe(1);
    expect(t.get('receiver_effect_duration_seconds_count{route="deploy"}')).toBe(2);
    expect(t.get('receiver_effect_duration_seconds_sum{route="deploy"}')).toBeCloseTo(1.52, 5);
    expect(t.get('receiver_effect_duration_seconds_bucket{le="1",route="deploy"}')).toBe(1);
    expect(t.get('receiver_events_settled_total{status="retry"}')).toBe(1);
    expect(t.get('receiver_events_settled_total{status="done"}')).toBe(1);
  });

  it('every settle status and attempt outcome is a series from the start (0), so alerts see no gap', async () => {
    const t = parseMetrics(await new ReceiverMetrics({ routes: ['deploy'] }).text());
    for (const status of ['done', 'retry', 'dead', 'lost', 'interrupted']) expect(t.get(`receiver_events_settled_total{status="${status}"}`), status).toBe(0);
    for (const outcome of ['ok', 'failed', 'skipped', 'stale', 'busy'])
      expect(t.get(`receiver_effect_attempts_total{route="deploy",outcome="${outcome}"}`), outcome).toBe(0);
  });

  it('each instance has its own registry: two apps in one process do not share counts', async () => {
    const a = new ReceiverMetrics({ sources: ['s'] });
    const b = new ReceiverMetrics({ sources: ['s'] });
    a.observeDelivery({ source: 's', outcome: 'accepted', status: 202, durationMs: 1 });
    expect(deliveries(parseMetrics(await a.text()), 's', 'accepted')).toBe(1);
    expect(deliveries(parseMetrics(await b.text()), 's', 'accepted')).toBe(0);
  });

  it('bearer tokens are compared exactly', () => {
    const token = new Secret('metrics-token-1');
    expect(bearerMatches('Bearer metrics-token-1', token)).toBe(true);
    expect(bearerMatches('bearer metrics-token-1', token)).toBe(true);
    for (const h of [
      undefined,
      '',
      'Bearer ',
      'Bearer metrics-token-2',
      'Bearer metrics-token-1x',
      'Bearer metrics-token-',
      'metrics-token-1',
      'Basic metrics-token-1',
    ]) {
      expect(bearerMatches(h, token)).toBe(false);
    }
  });
});

describe('lost, interrupted, busy and stale, as the drain reports them (real SQLite, real effects)', () => {
  const tmp = tempDir();
  const stores: SqliteStore[] = [];
  afterAll(async () => {
    for (const s of stores) await s.close();
    tmp.cleanup();
  });

  it('counts a lease lost mid-effect, a shutdown mid-effect, a key busy in another drain and an older version', async () => {
    const out = join(tmp.dir, 'runs.txt');
    const release = join(tmp.dir, 'release');
    writeFileSync(join(tmp.dir, 'subs.mjs'), 'export default async function () {}\n');
    // Appends its key, then holds the effect open until the test releases it.
    const hold = ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"; while [ ! -f "$2" ]; do sleep 0.02; done', 'sh', out, release];
    const config = makeConfig(
      {
        sources: { shop: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' } },
        routes: [
          { name: 'hold', source: 'shop', events: ['hold'], key: '{body.order}', effect: { exec: hold, timeoutSeconds: 20 } },
          { name: 'subs', source: 'shop', events: ['sub'], key: '{body.sub}', version: '{body.v}', effect: { module: './subs.mjs' } },
        ],
      },
      tmp.dir,
    );
    const c = clock();
    const open = () => {
      const s = new SqliteStore(config.database, { busyTimeoutMs: 2000, blockingBusyMs: 5 });
      stores.push(s);
      return s;
    };
    const a = open();
    const b = open();
    const metrics = new ReceiverMetrics({ routes: ['hold', 'subs'] });
    // The hooks `serve` wires to the drain.
    const wired = (h: Harness): Harness => ({ ...h, ctx: { ...h.ctx, onAttempt: (x) => metrics.observeAttempt(x), onEvent: (e) => metrics.observeEvent(e) } });
    const ha = wired(harness(config, a, c.now));
    const hb = wired(harness(config, b, c.now));
    const send = (id: string, body: Record<string, unknown>) =>
      a.ingest(newEvent({ source: 'shop', deliveryId: id, eventType: String(body.type), body: { id, ...body }, receivedAt: c.now() }));
    const running = async (key: string) => {
      for (let i = 0; i < 500 && !lines(out).includes(key); i++) await new Promise((r) => setTimeout(r, 10));
      expect(lines(out)).toContain(key);
    };
    const db = inspect(config.database);
    try {
      // busy: drain A runs key o1 for event 1; drain B claims event 2 with the same key. One
      // lane runs one unit at a time, so B can take event 2 only in another lane: as after a
      // reload that moved the route to a new lane while event 1 ran (its pending unit moves).
      await send('d1', { type: 'hold', order: 'o1' });
      await send('d2', { type: 'hold', order: 'o1' });
      const first = drainDue(ha, 'A');
      await running('o1');
      db.db.prepare(`UPDATE units SET lane = 'hold-moved' WHERE event_id = 2 AND status = 'pending'`).run();
      expect(await drainDue(hb, 'B')).toMatchObject([{ eventId: 2, status: 'retry' }]);
      writeFileSync(release, '');
      expect((await first).map((o) => o.status)).toEqual(['done']);
      rmSync(release);

      // lost: another drain takes event 3's lease while its effect runs.
      await send('d3', { type: 'hold', order: 'o3' });
      const third = drainDue(ha, 'A');
      await running('o3');
      // A lease is a unit's.
      db.db.prepare(`UPDATE units SET lease_owner = 'another-drain' WHERE event_id = (SELECT id FROM events WHERE delivery_id = 'd3')`).run();
      writeFileSync(release, '');
      expect((await third).map((o) => o.status)).toEqual(['lost']);
      rmSync(release);

      // interrupted: the receiver stops (its abort signal) while event 4's effect runs.
      // The other drain settles event 3, freeing the lane; event 2 (in the moved lane) waits.
      db.db.prepare(`UPDATE units SET status = 'done', lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = 'another-drain'`).run();
      await send('d4', { type: 'hold', order: 'o4' });
      await planStored(a, config.routes, c.now());
      const [claim] = await a.claimUnits('A#stop', c.now(), ha.ctx.leaseMs, { busyLanes: ['hold-moved'], lanes: 1, perLane: 1 });
      expect(claim).toMatchObject({ deliveryId: 'd4', route: 'hold' });
      const stop = new AbortController();
      const fourth = processUnit(ha.ctx, claim!, stop.signal);
      await running('o4');
      stop.abort();
      expect((await fourth).status).toBe('interrupted');

      // stale: version 10 applied, then version 9 of the same subscription arrives.
      await send('e10', { type: 'sub', sub: 's1', v: 10 });
      await send('e9', { type: 'sub', sub: 's1', v: 9 });
      expect((await drainDue(ha, 'A')).map((o) => o.status)).toEqual(['done', 'done']);
    } finally {
      writeFileSync(release, '');
      db.close();
    }

    const m = parseMetrics(await metrics.text());
    expect(m.get('receiver_effect_attempts_total{route="hold",outcome="busy"}')).toBe(1);
    expect(m.get('receiver_effect_attempts_total{route="subs",outcome="stale"}')).toBe(1);
    expect(m.get('receiver_effect_attempts_total{route="subs",outcome="ok"}')).toBe(1);
    expect(m.get('receiver_events_settled_total{status="lost"}')).toBe(1);
    expect(m.get('receiver_events_settled_total{status="interrupted"}')).toBe(1);
    expect(m.get('receiver_events_settled_total{status="retry"}')).toBe(1);
    expect(m.get('receiver_events_settled_total{status="done"}')).toBe(3);
    // busy and stale ran nothing: no effect duration for them.
    expect(m.get('receiver_effect_duration_seconds_count{route="subs"}')).toBe(1);
  });
});

describe('GET /metrics from `receiver serve` (child process)', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  const TOKEN = 'scrape-token-7c1d';

  it('requires the bearer token when one is configured: 401 without or with a wrong one', async () => {
    const dir = `${tmp.dir}/token`;
    mkdirSync(dir);
    const file = writeConfig(dir, {
      metrics: { token: 'env:METRICS_TEST_TOKEN' },
      sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', secret: SECRET } },
    });
    const serve = await startServe(file, { env: { METRICS_TEST_TOKEN: TOKEN } });
    try {
      const none = await fetch(`${serve.url}/metrics`);
      const wrong = await fetch(`${serve.url}/metrics`, { headers: { authorization: 'Bearer not-the-token' } });
      expect(none.status).toBe(401);
      expect(none.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(await none.text()).not.toContain('receiver_');
      expect(wrong.status).toBe(401);
      const ok = await scrape(serve.url, TOKEN);
      expect(deliveries(ok, 'shop', 'accepted')).toBe(0);
      // /healthz is not behind the token (load balancers and systemd checks use it).
      expect((await fetch(`${serve.url}/healthz`)).status).toBe(200);
    } finally {
      await serve.stop();
    }
  });

  it('counts effect attempts and failures as the drain runs them', async () => {
    const dir = `${tmp.dir}/effects`;
    mkdirSync(dir);
    const fail = `${dir}/fail.sh`;
    writeFileSync(fail, '#!/bin/sh\necho "refusing" >&2\nexit 3\n');
    chmodSync(fail, 0o755);
    const file = writeConfig(dir, {
      sources: {
        shop: { provider: 'hmac-sha256', header: 'X-Signature', prefix: 'sha256=', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' },
      },
      routes: [
        { name: 'ok-route', source: 'shop', events: ['good'], key: '{body.id}', effect: { exec: ['/bin/true'] } },
        { name: 'bad-route', source: 'shop', events: ['bad'], key: '{body.id}', effect: { exec: [fail] } },
      ],
      retry: { maxAttempts: 5, baseSeconds: 60, maxSeconds: 60 },
    });
    const serve = await startServe(file);
    try {
      for (const body of ['{"id":"g1","type":"good"}', '{"id":"b1","type":"bad"}']) {
        expect((await post(`${serve.url}/webhooks/shop`, body, { 'x-signature': sign(body) })).status).toBe(202);
      }
      // Poll (bounded) until the drain has tried both events once.
      let m = await scrape(serve.url);
      for (
        let i = 0;
        i < 100 &&
        !(
          (m.get('receiver_effect_attempts_total{route="bad-route",outcome="failed"}') ?? 0) >= 1 &&
          (m.get('receiver_effect_attempts_total{route="ok-route",outcome="ok"}') ?? 0) >= 1
        );
        i++
      ) {
        await new Promise((r) => setTimeout(r, 50));
        m = await scrape(serve.url);
      }
      expect(m.get('receiver_effect_attempts_total{route="ok-route",outcome="ok"}')).toBe(1);
      expect(m.get('receiver_effect_attempts_total{route="bad-route",outcome="failed"}')).toBe(1);
      expect(m.get('receiver_effect_duration_seconds_count{route="bad-route"}')).toBe(1);
      expect(m.get('receiver_events_settled_total{status="done"}')).toBe(1);
      expect(m.get('receiver_events_settled_total{status="retry"}')).toBe(1);
      // The failed event waits for its retry (60 s away): pending again.
      expect(m.get('receiver_events{status="pending"}')).toBe(1);
      // Its unit waits in its lane (each route is a lane of its own here); the other lane is idle at 0.
      expect(m.get('receiver_lane_pending{lane="bad-route"}')).toBe(1);
      expect(m.get('receiver_lane_running{lane="bad-route"}')).toBe(0);
      expect(m.get('receiver_lane_pending{lane="ok-route"}')).toBe(0);
      expect(m.get('receiver_lane_oldest_pending_seconds{lane="ok-route"}')).toBe(0);
      expect(deliveries(m, 'shop', 'accepted')).toBe(2);
    } finally {
      await serve.stop();
    }
  });
});
