import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { DeliveryOutcome } from '../../src/http/ingest.js';
import { hmac } from '../../src/providers/util.js';
import { makeConfig, post, startApp, tempDir, type RunningApp } from '../helpers.js';

const SECRET = 'shop-secret';
const sign = (body: Buffer | string) => `sha256=${hmac('sha256', SECRET, body).toString('hex')}`;

function count(app: RunningApp, table = 'events'): number {
  return (app.store.db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n;
}

describe('POST /webhooks/:source (generic HMAC source, real server, real SQLite file)', () => {
  const tmp = tempDir();
  let app: RunningApp;
  let n = 0;
  afterAll(tmp.cleanup);
  beforeEach(async () => {
    n += 1;
    const config = makeConfig(
      {
        database: `${tmp.dir}/ingest-${n}.db`,
        maxBodyBytes: 4096,
        busyTimeoutMs: 300,
        sources: {
          shop: { provider: 'hmac-sha256', header: 'X-Signature', prefix: 'sha256=', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' },
          lenient: { provider: 'hmac-sha256', header: 'X-Signature', prefix: 'sha256=', secret: SECRET, deliveryId: '{body.id}', onConflict: 'accept' },
          hashed: { provider: 'hmac-sha256', header: 'X-Signature', prefix: 'sha256=', secret: SECRET },
        },
      },
      tmp.dir,
    );
    app = await startApp(config);
  });
  afterEach(async () => app.close());

  const deliver = (body: Buffer | string, source = 'shop', headers: Record<string, string> = {}) =>
    post(`${app.url}/webhooks/${source}`, body, { 'x-signature': sign(body), ...headers });

  it('accepts a valid delivery with 202 and stores exactly one row with its type', async () => {
    const r = await deliver('{"id":"evt_1","type":"order.paid"}');
    expect(r.status).toBe(202);
    expect(JSON.parse(r.text)).toEqual({ status: 'accepted', id: 1 });
    const row = app.store.db.prepare('SELECT source, delivery_id, event_type, status FROM events').get();
    expect(row).toEqual({ source: 'shop', delivery_id: 'evt_1', event_type: 'order.paid', status: 'pending' });
  });

  it('answers every duplicate with the first answer, byte for byte, and stores one row', async () => {
    const body = '{"id":"evt_dup","type":"x"}';
    const first = await deliver(body);
    const second = await deliver(body);
    expect(second.status).toBe(first.status);
    expect(second.text).toBe(first.text);
    expect(count(app)).toBe(1);
    expect(app.store.db.prepare('SELECT duplicates FROM events').get()).toEqual({ duplicates: 1 });
  });

  it('50 identical deliveries sent concurrently: one row, all 2xx with the same body', async () => {
    const body = '{"id":"evt_storm","type":"x"}';
    const answers = await Promise.all(Array.from({ length: 50 }, () => deliver(body)));
    expect(new Set(answers.map((a) => a.status))).toEqual(new Set([202]));
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    expect(count(app)).toBe(1);
  });

  it('same delivery id with a different body: 409 and a recorded conflict; the first row unchanged', async () => {
    await deliver('{"id":"evt_c","type":"x","amount":1}');
    const r = await deliver('{"id":"evt_c","type":"x","amount":2}');
    expect(r.status).toBe(409);
    expect(JSON.parse(r.text)).toMatchObject({ error: 'conflict', id: 1 });
    expect(count(app)).toBe(1);
    expect(count(app, 'conflicts')).toBe(1);
    expect((app.store.db.prepare('SELECT body FROM events').get() as { body: Buffer }).body.toString()).toContain('"amount":1');
  });

  it('onConflict "accept" answers the stored 202 and still records the conflict', async () => {
    const first = await deliver('{"id":"evt_c2","v":1}', 'lenient');
    const r = await deliver('{"id":"evt_c2","v":2}', 'lenient');
    expect(r.status).toBe(202);
    expect(r.text).toBe(first.text);
    expect(count(app, 'conflicts')).toBe(1);
  });

  it('a wrong signature, a changed body byte or a missing signature is 401 and stores nothing', async () => {
    const body = '{"id":"evt_bad","type":"x"}';
    expect((await post(`${app.url}/webhooks/shop`, body, { 'x-signature': sign(body).replace(/.$/, (c) => (c === '0' ? '1' : '0')) })).status).toBe(401);
    expect((await post(`${app.url}/webhooks/shop`, body.replace('bad', 'bae'), { 'x-signature': sign(body) })).status).toBe(401);
    expect((await post(`${app.url}/webhooks/shop`, body)).status).toBe(401);
    expect(count(app)).toBe(0);
  });

  it('unknown source is 404, over the body limit is 413, missing id is 400, nothing stored', async () => {
    expect((await deliver('{"id":"a"}', 'nope')).status).toBe(404);
    const big = `{"id":"big","pad":"${'x'.repeat(5000)}"}`;
    const tooBig = await deliver(big);
    expect(tooBig.status).toBe(413);
    expect(JSON.parse(tooBig.text).error).toBe('too_large');
    const noId = await deliver('{"type":"x"}');
    expect(noId.status).toBe(400);
    expect(JSON.parse(noId.text).message).toMatch(/delivery id template \{body.id\} resolved to nothing/);
    const notJson = await deliver('not json at all');
    expect(notJson.status).toBe(400);
    expect(count(app)).toBe(0);
  });

  it('falls back to sha256:<hex of body> when the sender has no delivery id', async () => {
    const r = await deliver('{"hello":"world"}', 'hashed');
    expect(r.status).toBe(202);
    const row = app.store.db.prepare('SELECT delivery_id FROM events').get() as { delivery_id: string };
    expect(row.delivery_id).toBe('sha256:93a23971a914e5eacbf0a8d25154cda309c3c1c72fbb9914d47c60f3cb681588');
  });

  it('stores the exact bytes sent: invalid UTF-8 and significant whitespace', async () => {
    const bodies = [
      Buffer.from([0x7b, 0x22, 0x69, 0x64, 0x22, 0x3a, 0x31, 0x7d, 0xff, 0xfe, 0x00, 0xc3]),
      Buffer.from('  {"id" :  "ws",\n\t"a":[1, 2 ]}  \r\n'),
    ];
    for (const body of bodies) {
      const r = await deliver(body, 'hashed');
      expect(r.status).toBe(202);
      const row = app.store.db.prepare('SELECT body FROM events WHERE id = ?').get(JSON.parse(r.text).id) as { body: Buffer };
      expect(Buffer.compare(row.body, body)).toBe(0);
    }
  });

  it('never stores signature headers', async () => {
    await deliver('{"id":"evt_h"}');
    const { headers } = app.store.db.prepare('SELECT headers FROM events').get() as { headers: string };
    expect(JSON.parse(headers)['x-signature']).toBe('[redacted]');
  });

  it('503 with Retry-After while another connection holds the write lock past the busy timeout; nothing stored; then recovers', async () => {
    const other = new Database(app.config.database);
    other.exec('BEGIN IMMEDIATE');
    try {
      const r = await deliver('{"id":"evt_locked"}');
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(JSON.parse(r.text)).toEqual({ error: 'unavailable', message: 'temporarily unavailable, retry later' });
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
    expect(count(app)).toBe(0);
    expect((await deliver('{"id":"evt_locked"}')).status).toBe(202);
    expect(count(app)).toBe(1);
  });

  it('a lock released within the busy timeout delays the answer but does not fail it', async () => {
    const other = new Database(app.config.database);
    other.exec('BEGIN IMMEDIATE');
    const started = Date.now();
    let releasedAt = 0;
    setTimeout(() => {
      other.exec('ROLLBACK');
      other.close();
      releasedAt = Date.now();
    }, 200);
    const r = await deliver('{"id":"evt_wait"}');
    expect(r.status).toBe(202);
    // Answered after the lock was let go (the commit waited for it), not before.
    expect(releasedAt).toBeGreaterThan(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(200);
    expect(count(app)).toBe(1);
  });

  it('GET /healthz is 200 while the database answers; unknown routes are JSON 404s', async () => {
    expect((await fetch(`${app.url}/healthz`)).status).toBe(200);
    const r = await fetch(`${app.url}/nothing`);
    expect(r.status).toBe(404);
    expect(await r.json()).toMatchObject({ error: 'not_found' });
  });
});

describe('an unknown source name is text the sender chose', () => {
  it('is cut to 200 characters in the outcome (the log line) and the 404 answer, as claimed delivery ids are', async () => {
    const tmp = tempDir();
    const outcomes: DeliveryOutcome[] = [];
    const app = await startApp(makeConfig({ sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', secret: SECRET } } }, tmp.dir), {
      onOutcome: (o) => outcomes.push(o),
    });
    try {
      const name = 'n'.repeat(15_000);
      const r = await post(`${app.url}/webhooks/${name}`, '{}');
      expect(r.status).toBe(404);
      expect(r.text.length).toBeLessThan(400);
      expect(JSON.parse(r.text).message).toBe(`no source named "${'n'.repeat(200)}"`);
      expect(outcomes).toHaveLength(1);
      expect(outcomes[0]).toMatchObject({ outcome: 'not_found', status: 404, source: 'n'.repeat(200) });
      expect(outcomes[0]!.error!.length).toBeLessThan(250);
    } finally {
      await app.close();
      tmp.cleanup();
    }
  });
});
