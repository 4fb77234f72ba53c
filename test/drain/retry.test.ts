import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { makeConfig, tempDir } from '../helpers.js';
import { clock, drainDue, harness, inspect, newEvent } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

describe('drain: retries, backoff and dead events', () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: SqliteStore;
  let server: Server;
  let url: string;
  let answers: ((res: ServerResponse) => void)[] = [];
  let hits = 0;
  let keys: string[] = [];
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        hits++;
        keys.push(String(req.headers['idempotency-key']));
        (answers.shift() ?? ((r: ServerResponse) => r.writeHead(200).end()))(res);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));
  beforeEach(() => {
    tmp = tempDir('receiver-retry-');
    answers = [];
    hits = 0;
    keys = [];
  });
  afterEach(async () => {
    await store.close();
    tmp.cleanup();
  });

  const setup = async (effect: Record<string, unknown>, retry = { maxAttempts: 4, baseSeconds: 10, maxSeconds: 25 }) => {
    const config = makeConfig({ sources: { shop }, retry, routes: [{ name: 'app', source: 'shop', key: '{body.order}', effect }] }, tmp.dir);
    const c = clock();
    store = new SqliteStore(config.database, { busyTimeoutMs: 2000 });
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 'order.paid', body: { order: 'o1' }, receivedAt: c.now() }));
    return { config, c, db: inspect(config.database) };
  };

  it('a failing effect is retried with growing, capped delays, then dead with its last error', async () => {
    const { config, c, db } = await setup({ exec: ['/bin/sh', '-c', 'echo "boom on attempt $RECEIVER_ATTEMPT" >&2; exit 3'] });
    const h = harness(config, store, c.now, () => 1); // jitter pinned at its ceiling
    const delays: number[] = [];
    for (let i = 1; i <= 3; i++) {
      const t = c.now();
      expect((await drainDue(h)).map((o) => o.status)).toEqual(['retry']);
      const e = db.event(1);
      expect(e).toMatchObject({ status: 'pending', attempts: i, lease_owner: null });
      delays.push(e.next_attempt_at - t);
      // Not due yet: nothing is claimed a moment before the next attempt time.
      c.set(e.next_attempt_at - 1);
      expect(await drainDue(h)).toEqual([]);
      c.set(e.next_attempt_at);
    }
    expect(delays).toEqual([10_000, 20_000, 25_000]); // 10 * 2^(n-1), capped at maxSeconds
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['dead']);
    const e = db.event(1);
    expect(e.status).toBe('dead');
    expect(e.attempts).toBe(4);
    expect(e.last_error).toBe('app: /bin/sh exited with code 3 (gave up after 4 attempts)');
    const attempts = db.attempts(1);
    expect(attempts.map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'failed'],
      [2, 'failed'],
      [3, 'failed'],
      [4, 'failed'],
    ]);
    expect(attempts[3]!.output).toBe('boom on attempt 4\n');
    expect(db.effect('app:o1')).toMatchObject({ status: 'failed', runs: 4, last_error: '/bin/sh exited with code 3' });
    // A dead event is not claimed again.
    c.advance(3600_000);
    expect(await drainDue(h)).toEqual([]);
    db.close();
  });

  it('an exec timeout is a retryable failure', async () => {
    const { config, c, db } = await setup({ exec: ['sleep', '30'], timeoutSeconds: 0.3 });
    const h = harness(config, store, c.now);
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['retry']);
    expect(db.event(1).last_error).toBe('app: timed out after 0.3s; process group killed');
    db.close();
  });

  it('http 500 then 200 succeeds on the retry, with the same Idempotency-Key', async () => {
    answers = [(res) => res.writeHead(500).end('down'), (res) => res.writeHead(200).end('ok')];
    const { config, c, db } = await setup({ http: { url } });
    const h = harness(config, store, c.now, () => 0.5);
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['retry']);
    expect(db.event(1).next_attempt_at - c.now()).toBe(5000);
    expect(db.event(1).last_error).toBe(`app: POST ${url} answered 500`);
    c.advance(5000);
    expect((await drainDue(h)).map((o) => o.status)).toEqual(['done']);
    expect(hits).toBe(2);
    expect(new Set(keys).size).toBe(1);
    expect(db.effect('app:o1')).toMatchObject({ status: 'done', runs: 2 });
    expect(db.attempts(1).map((a) => [a.outcome, a.output])).toEqual([
      ['failed', 'down'],
      ['ok', 'ok'],
    ]);
    db.close();
  });

  it('http 400 is permanent: the event is dead at once with the error kept', async () => {
    answers = [(res) => res.writeHead(400).end('bad')];
    const { config, c, db } = await setup({ http: { url } });
    expect((await drainDue(harness(config, store, c.now))).map((o) => o.status)).toEqual(['dead']);
    expect(db.event(1)).toMatchObject({ status: 'dead', attempts: 1, last_error: `app: POST ${url} answered 400 (permanent: not retried)` });
    expect(hits).toBe(1);
    db.close();
  });

  it('Retry-After is the next attempt time when later than the backoff, and ignored when sooner', async () => {
    answers = [(res) => res.writeHead(429, { 'retry-after': '120' }).end(), (res) => res.writeHead(503, { 'retry-after': '2' }).end()];
    const { config, c, db } = await setup({ http: { url } }, { maxAttempts: 5, baseSeconds: 10, maxSeconds: 3600 });
    const h = harness(config, store, c.now, () => 1); // backoff 10s, then 20s
    let t = c.now();
    await drainDue(h);
    expect(db.event(1).next_attempt_at - t).toBe(120_000);
    c.set(db.event(1).next_attempt_at);
    t = c.now();
    await drainDue(h);
    expect(db.event(1).next_attempt_at - t).toBe(20_000);
    db.close();
  });

  it('a Retry-After longer than retry.maxSeconds is capped there', async () => {
    answers = [(res) => res.writeHead(503, { 'retry-after': '86400' }).end()];
    const { config, c, db } = await setup({ http: { url } }, { maxAttempts: 5, baseSeconds: 10, maxSeconds: 600 });
    const t = c.now();
    await drainDue(harness(config, store, c.now, () => 0));
    expect(db.event(1).next_attempt_at - t).toBe(600_000);
    db.close();
  });

  it('a network error is retryable', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const { config, c, db } = await setup({ http: { url: `http://127.0.0.1:${port}/x` } });
    expect((await drainDue(harness(config, store, c.now))).map((o) => o.status)).toEqual(['retry']);
    expect(db.event(1).last_error).toContain('ECONNREFUSED');
    db.close();
  });
});
