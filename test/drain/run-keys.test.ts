import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { idempotencyKey } from '../../src/effects/http.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import { makeConfig, tempDir } from '../helpers.js';
import { clock, drainDue, harness, inspect, lines, newEvent } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

/**
 * What each run of an effect is sent as, through the drain: ordinary retries under the
 * effect key (the app drops the repeat), each `replay --force` under a key of its own (the
 * app does it again), kept across that forced run's own retries.
 */
describe('drain: run keys reach the app', () => {
  let tmp: ReturnType<typeof tempDir>;
  let store: SqliteStore | undefined;
  let server: Server | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-run-keys-');
  });
  afterEach(async () => {
    await store?.close();
    store = undefined;
    if (server !== undefined) await new Promise<void>((r) => server!.close(() => r()));
    server = undefined;
    tmp.cleanup();
  });

  it('http: signed forwards carry the raw body; retries keep Idempotency-Key and webhook-id, forced runs get new ones', async () => {
    const seen: { headers: IncomingHttpHeaders; body: Buffer }[] = [];
    const answers: number[] = [];
    server = createServer((req, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({ headers: req.headers, body: Buffer.concat(chunks) });
        res.writeHead(answers.shift() ?? 200).end();
      });
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const config = makeConfig(
      {
        sources: { shop },
        routes: [
          {
            name: 'app',
            source: 'shop',
            key: '{body.order}',
            effect: { http: { url, sign: 'env:FORWARD_SECRET', headers: { Authorization: 'env:APP_TOKEN' } } },
          },
        ],
        retry: { maxAttempts: 5, baseSeconds: 1, maxSeconds: 1 },
      },
      tmp.dir,
      { FORWARD_SECRET: secret, APP_TOKEN: 'Bearer app-token-1' },
    );
    const c = clock();
    store = new SqliteStore(config.database, { busyTimeoutMs: 2000 });
    // Spacing and key order as the sender sent them: the app verifies these exact bytes.
    const raw = '{"id":"e1", "type":"order.paid",  "order":"o1", "name":"Zoë"}';
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 'order.paid', body: raw, receivedAt: c.now() }));
    const h = harness(config, store, c.now);
    const db = inspect(config.database);
    const drainAfter = async (ms: number) => {
      c.advance(ms);
      return (await drainDue(h)).map((o) => o.status);
    };

    // The first run fails (500) and is retried: the same key both times.
    answers.push(500);
    expect(await drainAfter(0)).toEqual(['retry']);
    expect(await drainAfter(1000)).toEqual(['done']);
    // replay --force, twice; the second forced run fails once (503) and is retried.
    await store.replayEvents([1], { force: true, now: c.now() });
    expect(await drainAfter(0)).toEqual(['done']);
    await store.replayEvents([1], { force: true, now: c.now() });
    answers.push(503);
    expect(await drainAfter(0)).toEqual(['retry']);
    expect(await drainAfter(1000)).toEqual(['done']);

    expect(seen).toHaveLength(5);
    for (const s of seen) {
      expect(s.body.equals(Buffer.from(raw))).toBe(true);
      expect(s.headers.authorization).toBe('Bearer app-token-1');
      expect(s.headers['webhook-id']).toBe(s.headers['idempotency-key']);
      expect(new Webhook(secret).verify(s.body.toString('utf8'), s.headers as Record<string, string>)).toMatchObject({ order: 'o1' });
      expect(() => new Webhook(`whsec_${randomBytes(32).toString('base64')}`).verify(s.body.toString('utf8'), s.headers as Record<string, string>)).toThrow();
    }
    const keys = seen.map((s) => s.headers['idempotency-key']);
    // Ordinary runs: the hash of the effect key, as always.
    expect(keys[0]).toBe(idempotencyKey('app:o1'));
    expect(keys[1]).toBe(keys[0]);
    // Each forced run: a key of its own, kept by its retry.
    expect(keys[2]).toBe(idempotencyKey('app:o1#forced-1'));
    expect(keys[3]).toBe(keys[4]);
    expect(new Set([keys[0], keys[2], keys[3]]).size).toBe(3);
    // The attempts say which key each run used.
    expect(db.db.prepare('SELECT run_key, forced, outcome FROM attempts ORDER BY id').all()).toEqual([
      { run_key: 'app:o1', forced: 0, outcome: 'failed' },
      { run_key: 'app:o1', forced: 0, outcome: 'ok' },
      { run_key: 'app:o1#forced-1', forced: 1, outcome: 'ok' },
      { run_key: 'app:o1#forced-2', forced: 1, outcome: 'failed' },
      { run_key: 'app:o1#forced-2', forced: 1, outcome: 'ok' },
    ]);
    expect(keys[3]).toBe(idempotencyKey('app:o1#forced-2'));
    db.close();
  });

  it('exec sees RECEIVER_RUN_KEY, a module ctx.runKey and ctx.db.dialect', async () => {
    const out = join(tmp.dir, 'runs.txt');
    const handler = join(tmp.dir, 'record.mjs');
    writeFileSync(
      handler,
      `export default async function (event, ctx) {
        await ctx.db.run('CREATE TABLE IF NOT EXISTS runs (run_key TEXT, dialect TEXT)');
        await ctx.db.run('INSERT INTO runs (run_key, dialect) VALUES (?, ?)', [ctx.runKey, ctx.db.dialect]);
      }`,
    );
    const config = makeConfig(
      {
        sources: { shop },
        routes: [
          {
            name: 'deploy',
            source: 'shop',
            key: '{body.order}',
            effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_EFFECT_KEY $RECEIVER_RUN_KEY" >> "$1"', 'sh', out] },
          },
          { name: 'record', source: 'shop', key: '{body.order}', effect: { module: handler } },
        ],
      },
      tmp.dir,
    );
    const c = clock();
    store = new SqliteStore(config.database, { busyTimeoutMs: 2000 });
    await store.ingest(newEvent({ source: 'shop', deliveryId: 'e1', eventType: 'order.paid', body: { order: 'o1' }, receivedAt: c.now() }));
    const h = harness(config, store, c.now);
    await drainDue(h);
    await store.replayEvents([1], { force: true, now: c.now() });
    await drainDue(h);
    expect(lines(out)).toEqual(['deploy:o1 deploy:o1', 'deploy:o1 deploy:o1#forced-1']);
    const db = inspect(config.database);
    expect(db.db.prepare('SELECT run_key, dialect FROM runs').all()).toEqual([
      { run_key: 'record:o1', dialect: 'sqlite' },
      { run_key: 'record:o1#forced-1', dialect: 'sqlite' },
    ]);
    db.close();
  });
});
