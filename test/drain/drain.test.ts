import { createHmac } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { makeConfig, post, startApp, tempDir, type RunningApp } from '../helpers.js';
import { appendKey, clock, drainDue, harness, inspect, lines, newEvent } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

describe('drain: exactly once in effect', () => {
  let tmp: ReturnType<typeof tempDir>;
  let app: RunningApp | undefined;
  let stores: SqliteStore[] = [];
  beforeEach(() => {
    tmp = tempDir('receiver-drain-');
    stores = [];
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
    for (const s of stores) await s.close();
    tmp.cleanup();
  });
  const open = (path: string) => {
    const s = new SqliteStore(path, { busyTimeoutMs: 2000, blockingBusyMs: 5 });
    stores.push(s);
    return s;
  };

  it('a sequential duplicate delivery runs the effect once, and a replay without --force skips it', async () => {
    const out = join(tmp.dir, 'licences.txt');
    const config = makeConfig(
      { sources: { shop }, routes: [{ name: 'licence', source: 'shop', events: ['order.paid'], key: '{body.order}', effect: { exec: appendKey(out) } }] },
      tmp.dir,
    );
    const c = clock();
    app = await startApp(config, { now: c.now });
    const body = JSON.stringify({ id: 'evt_1', type: 'order.paid', order: 'ord_42' });
    const first = await post(`${app.url}/webhooks/shop`, body);
    const second = await post(`${app.url}/webhooks/shop`, body);
    expect(first.status).toBe(202);
    expect(second.text).toBe(first.text);
    const h = harness(config, app.store, c.now);
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done']);
    expect(lines(out)).toEqual(['ord_42']);

    // Replay without --force: the event is pending again; its effect key is done.
    const db = inspect(config.database);
    await app.store.replayEvents([1], { force: false, now: c.now() });
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done']);
    expect(lines(out)).toEqual(['ord_42']);
    expect(db.attempts(1).map((a) => a.outcome)).toEqual(['ok', 'skipped']);
    expect(db.effect('licence:ord_42')).toMatchObject({ status: 'done', runs: 1, event_id: 1 });
    db.close();
  });

  it('a concurrent duplicate delivery is one event and one effect', async () => {
    const out = join(tmp.dir, 'licences.txt');
    const config = makeConfig(
      { sources: { shop }, routes: [{ name: 'licence', source: 'shop', events: ['*'], key: '{body.order}', effect: { exec: appendKey(out) } }] },
      tmp.dir,
    );
    const c = clock();
    app = await startApp(config, { now: c.now });
    const body = JSON.stringify({ id: 'evt_c', type: 'order.paid', order: 'ord_7' });
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(`${app!.url}/webhooks/shop`, body)));
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    await drainDue(harness(config, app.store, c.now));
    expect(lines(out)).toEqual(['ord_7']);
  });

  it('two GitHub pushes of the same commit deploy once; another branch deploys nothing', async () => {
    const out = join(tmp.dir, 'deploys.txt');
    const config = makeConfig(
      {
        sources: { github: { provider: 'github', secret: 'gh-test-secret' } },
        routes: [
          {
            name: 'deploy',
            source: 'github',
            events: ['push'],
            filter: { 'body.ref': 'refs/heads/main' },
            key: '{body.after}',
            effect: { exec: appendKey(out) },
          },
        ],
      },
      tmp.dir,
    );
    const c = clock();
    app = await startApp(config, { now: c.now });
    const push = async (guid: string, ref: string, pusher: string) => {
      const body = JSON.stringify({ ref, after: 'abc123def456', pusher: { name: pusher } });
      const sig = `sha256=${createHmac('sha256', 'gh-test-secret').update(body).digest('hex')}`;
      const r = await post(`${app!.url}/webhooks/github`, body, {
        'x-hub-signature-256': sig,
        'x-github-delivery': guid,
        'x-github-event': 'push',
        'x-github-hook-id': '9',
      });
      expect(r.status).toBe(202);
    };
    await push('guid-1', 'refs/heads/main', 'alice');
    await push('guid-2', 'refs/heads/main', 'bob'); // a second delivery about the same commit
    await push('guid-3', 'refs/heads/feature', 'carol');
    const outcomes = await drainDue(harness(config, app.store, c.now));
    // The feature branch's push is done when it is planned: no route applies, nothing runs.
    expect(outcomes.map((o) => o.status)).toEqual(['done', 'done']);
    expect(lines(out)).toEqual(['abc123def456']);
    const db = inspect(config.database);
    expect(db.attempts().map((a) => [a.event_id, a.outcome])).toEqual([
      [1, 'ok'],
      [2, 'skipped'],
    ]);
    expect(db.attempts(2)[0]!.error).toBe('already done by event 1');
    db.close();
  });

  it('two drains (two connections) working at once on two events with one business key run it once', async () => {
    const out = join(tmp.dir, 'runs.txt');
    const release = join(tmp.dir, 'release');
    // Appends, then holds the effect open until the test releases it: the drains overlap for sure.
    const argv = ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"; while [ ! -f "$2" ]; do sleep 0.02; done', 'sh', out, release];
    const config = makeConfig(
      { sources: { shop }, routes: [{ name: 'licence', source: 'shop', key: '{body.order}', effect: { exec: argv, timeoutSeconds: 20 } }] },
      tmp.dir,
    );
    const c = clock();
    const a = open(config.database);
    const b = open(config.database);
    await a.ingest(newEvent({ source: 'shop', deliveryId: 'd1', eventType: 'order.paid', body: { order: 'o1' }, receivedAt: c.now() }));
    await a.ingest(newEvent({ source: 'shop', deliveryId: 'd2', eventType: 'order.paid', body: { order: 'o1' }, receivedAt: c.now() }));
    const ha = harness(config, a, c.now);
    const hb = harness(config, b, c.now, () => 0.5);
    const first = drainDue(ha, 'A');
    while (lines(out).length === 0) await new Promise((r) => setTimeout(r, 10)); // A's effect is running
    // The lane runs one unit at a time: B claims nothing while A runs event 1.
    expect(await drainDue(hb, 'B')).toEqual([]);
    // Event 2's unit moved to another lane (the route's lane changed, and a receiver started
    // with it while A still ran): B claims event 2, and the ledger keeps it from running the key too.
    const db = inspect(config.database);
    db.db.prepare(`UPDATE units SET lane = 'moved' WHERE event_id = 2`).run();
    db.close();
    const bOut = await drainDue(hb, 'B');
    expect(bOut).toMatchObject([{ eventId: 2, status: 'retry' }]);
    expect(hb.attempts).toMatchObject([{ outcome: 'busy', effectKey: 'licence:o1' }]);
    writeFileSync(release, '');
    expect((await first).map((o) => o.status)).toEqual(['done']);
    c.advance(10_000);
    expect((await drainDue(hb, 'B')).map((o) => o.status)).toEqual(['done']);
    expect(lines(out)).toEqual(['o1']);
    expect(hb.attempts.map((x) => x.outcome)).toEqual(['busy', 'skipped']);
  });

  it('waiting for another event running the same key never makes an event dead, even past maxAttempts', async () => {
    const out = join(tmp.dir, 'runs.txt');
    const release = join(tmp.dir, 'release');
    const argv = ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"; while [ ! -f "$2" ]; do sleep 0.02; done', 'sh', out, release];
    const config = makeConfig(
      {
        sources: { shop },
        retry: { maxAttempts: 1 },
        routes: [{ name: 'licence', source: 'shop', key: '{body.order}', effect: { exec: argv, timeoutSeconds: 20 } }],
      },
      tmp.dir,
    );
    const c = clock();
    const a = open(config.database);
    const b = open(config.database);
    await a.ingest(newEvent({ source: 'shop', deliveryId: 'd1', eventType: 'order.paid', body: { order: 'o1' }, receivedAt: c.now() }));
    await a.ingest(newEvent({ source: 'shop', deliveryId: 'd2', eventType: 'order.paid', body: { order: 'o1' }, receivedAt: c.now() }));
    const first = drainDue(harness(config, a, c.now), 'A');
    while (lines(out).length === 0) await new Promise((r) => setTimeout(r, 10));
    const hb = harness(config, b, c.now, () => 0.5);
    // Event 2's unit in another lane (see the test above), so B claims it while A runs the key.
    const db = inspect(config.database);
    db.db.prepare(`UPDATE units SET lane = 'moved' WHERE event_id = 2`).run();
    db.close();
    // Attempt 1 of 1 finds the key busy: retried later, not buried.
    expect(await drainDue(hb, 'B')).toMatchObject([{ eventId: 2, status: 'retry' }]);
    writeFileSync(release, '');
    expect((await first).map((o) => o.status)).toEqual(['done']);
    c.advance(10_000);
    expect((await drainDue(hb, 'B')).map((o) => o.status)).toEqual(['done']);
    expect(lines(out)).toEqual(['o1']);
  });

  it('an event that matches no route is done at once, with no attempt', async () => {
    const config = makeConfig(
      { sources: { shop }, routes: [{ name: 'licence', source: 'shop', events: ['order.*'], key: '{body.order}', effect: { exec: ['true'] } }] },
      tmp.dir,
    );
    const c = clock();
    const s = open(config.database);
    await s.ingest(newEvent({ source: 'shop', deliveryId: 'x', eventType: 'customer.created', body: { order: 'o' }, receivedAt: c.now() }));
    // Done when it is planned: no unit, nothing claimed.
    expect(await drainDue(harness(config, s, c.now))).toEqual([]);
    const db = inspect(config.database);
    expect(db.attempts()).toEqual([]);
    expect(db.event(1).status).toBe('done');
    db.close();
  });

  it('a key template that resolves to nothing fails that route visibly, retries, then is dead', async () => {
    const out = join(tmp.dir, 'runs.txt');
    const config = makeConfig(
      {
        sources: { shop },
        retry: { maxAttempts: 2, baseSeconds: 1, maxSeconds: 10 },
        routes: [
          { name: 'licence', source: 'shop', key: '{body.order}', effect: { exec: appendKey(out) } },
          { name: 'audit', source: 'shop', key: '{body.customer}', effect: { exec: appendKey(out) } },
        ],
      },
      tmp.dir,
    );
    const c = clock();
    const s = open(config.database);
    await s.ingest(newEvent({ source: 'shop', deliveryId: 'x', eventType: 't', body: { order: 'o9' }, receivedAt: c.now() }));
    const h = harness(config, s, c.now, () => 1);
    // Each route is a unit of its own: licence is done, audit retries.
    expect((await drainDue(h)).map((o) => [o.route, o.status])).toEqual([
      ['licence', 'done'],
      ['audit', 'retry'],
    ]);
    c.advance(2000);
    expect((await drainDue(h)).map((o) => [o.route, o.status])).toEqual([['audit', 'dead']]);
    // The route that could run ran once; the other failed twice, naming its template.
    expect(lines(out)).toEqual(['o9']);
    const db = inspect(config.database);
    expect(db.attempts().map((a) => [a.route, a.outcome])).toEqual([
      ['licence', 'ok'],
      ['audit', 'failed'],
      ['audit', 'failed'],
    ]);
    expect(db.event(1).status).toBe('dead');
    expect(db.attempts()[1]!.error).toBe('key template "{body.customer}" resolved to nothing for this event');
    expect(db.event(1).last_error).toMatch(/^audit: key template "\{body.customer\}" resolved to nothing for this event \(gave up after 2 attempts\)$/);
    db.close();
  });

  it('replay --force (force_effects) runs a done key again, visibly, and clears the flag', async () => {
    const out = join(tmp.dir, 'runs.txt');
    const config = makeConfig(
      { sources: { shop }, routes: [{ name: 'licence', source: 'shop', key: '{body.order}', effect: { exec: appendKey(out) } }] },
      tmp.dir,
    );
    const c = clock();
    const s = open(config.database);
    await s.ingest(newEvent({ source: 'shop', deliveryId: 'x', eventType: 't', body: { order: 'o1' }, receivedAt: c.now() }));
    const h = harness(config, s, c.now);
    await drainDue(h);
    const db = inspect(config.database);
    await s.replayEvents([1], { force: true, now: c.now() });
    await drainDue(h);
    expect(lines(out)).toEqual(['o1', 'o1']);
    expect(db.effect('licence:o1')).toMatchObject({ status: 'done', runs: 2, forced_runs: 1 });
    expect(db.attempts().map((a) => [a.outcome, a.forced])).toEqual([
      ['ok', 0],
      ['ok', 1],
    ]);
    expect(db.event(1)).toMatchObject({ status: 'done', force_effects: 0 });
    db.close();
  });
});

describe('drain: versions', () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: SqliteStore;
  beforeEach(() => {
    tmp = tempDir('receiver-drain-');
  });
  afterEach(async () => {
    await store.close();
    tmp.cleanup();
  });

  it('a newer then an older version for one key: the older is stale, the final state is the newer', async () => {
    writeFileSync(
      join(tmp.dir, 'subscriptions.mjs'),
      `export default async function (event, ctx) {
        await ctx.db.run('CREATE TABLE IF NOT EXISTS subs (id TEXT PRIMARY KEY, state TEXT, v TEXT)');
        await ctx.db.run('INSERT INTO subs (id, state, v) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state, v = excluded.v',
          [ctx.key, event.json.state, String(event.json.v)]);
      }`,
    );
    const config = makeConfig(
      {
        sources: { shop },
        routes: [{ name: 'subs', source: 'shop', events: ['sub.*'], key: '{body.sub}', version: '{body.v}', effect: { module: './subscriptions.mjs' } }],
      },
      tmp.dir,
    );
    const c = clock();
    store = new SqliteStore(config.database, { busyTimeoutMs: 2000 });
    const send = (id: string, v: number, state: string) =>
      store.ingest(newEvent({ source: 'shop', deliveryId: id, eventType: 'sub.updated', body: { sub: 'sub_1', v, state }, receivedAt: c.now() }));
    await send('e10', 10, 'active'); // newer arrives first
    await send('e9', 9, 'past_due'); // older arrives late ("9" < "10" numerically, not as strings)
    const h = harness(config, store, c.now);
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done', 'done']);
    const db = inspect(config.database);
    expect(db.db.prepare('SELECT state, v FROM subs').all()).toEqual([{ state: 'active', v: '10' }]);
    expect(h.attempts.map((a) => a.outcome)).toEqual(['ok', 'stale']);
    expect(db.attempts(2)[0]).toMatchObject({ outcome: 'stale', error: 'version 9 is older than the applied version 10' });
    expect(db.effect('subs:sub_1')).toMatchObject({ status: 'done', version: '10', runs: 1 });

    await send('e11', 11, 'canceled'); // a newer version runs again
    await send('e11b', 11, 'canceled'); // the same version again is done already
    await drainDue(h);
    expect(db.db.prepare('SELECT state, v FROM subs').all()).toEqual([{ state: 'canceled', v: '11' }]);
    expect(h.attempts.map((a) => a.outcome)).toEqual(['ok', 'stale', 'ok', 'skipped']);
    expect(db.effect('subs:sub_1')).toMatchObject({ version: '11', runs: 2 });
    db.close();
  });
});
