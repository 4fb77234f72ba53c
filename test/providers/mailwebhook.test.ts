import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHmac } from 'node:crypto';
import { sha256Hex } from '../../src/providers/util.js';
import { fixture, startSources, type Harness } from './harness.js';

/**
 * MailWebhook's delivery id: its idempotency key when it sends one, else a hash of the
 * body. Signed here by hand (HMAC-SHA256 of `t.body`, base64), not by the provider's sign().
 */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);
const SECRET = 'mailwebhook-secret-0123456789';
const KEY = '5f0c6a3cbd1e2a7f9d8e4b6c0a1f3e5d7c9b2a4e6f8d0c1b3a5e7f9d2c4b6a8e';

function headers(body: Buffer, atMs: number, key?: string): Record<string, string> {
  const t = Math.floor(atMs / 1000);
  const v1 = createHmac('sha256', SECRET).update(`${t}.`).update(body).digest('base64');
  return {
    'content-type': 'application/json',
    'x-mailwebhook-signature': `t=${t}, kid=default, v1=${v1}`,
    ...(key === undefined ? {} : { 'x-idempotency-key': key, 'idempotency-key': key }),
  };
}

describe('mailwebhook', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startSources({ nokey: { provider: 'mailwebhook', secret: SECRET }, keyed: { provider: 'mailwebhook', secret: SECRET } }, NOW);
  });
  afterAll(() => h.close());

  const rows = (source: string) =>
    h.app.store.db.prepare('SELECT id, delivery_id, duplicates FROM events WHERE source = ? ORDER BY id').all(source) as {
      id: number;
      delivery_id: string;
      duplicates: number;
    }[];

  it('without an idempotency key the delivery id is the body hash: a retry (signed again later) is a duplicate, a changed body a new event', async () => {
    const body = fixture('mailwebhook.json');
    const first = await h.send('nokey', body, headers(body, NOW));
    expect(first.status, first.text).toBe(202);
    expect(rows('nokey')).toEqual([{ id: expect.any(Number), delivery_id: `sha256:${sha256Hex(body)}`, duplicates: 0 }]);

    // The sender's retry a minute later: a new signature over the same bytes.
    const retry = await h.send('nokey', body, headers(body, NOW + 60_000));
    expect(retry.status).toBe(202);
    expect(retry.text).toBe(first.text);
    expect(rows('nokey')).toMatchObject([{ duplicates: 1 }]);

    // Another body has another hash, so another id: never a 409 without a key.
    const changed = Buffer.from(body.toString('utf8').replace('Invoice INV-1048', 'Invoice INV-1049'));
    expect(changed.equals(body)).toBe(false);
    const other = await h.send('nokey', changed, headers(changed, NOW));
    expect(other.status, other.text).toBe(202);
    expect(rows('nokey').map((r) => r.delivery_id)).toEqual([`sha256:${sha256Hex(body)}`, `sha256:${sha256Hex(changed)}`]);
  });

  it('with a key: a changed body under the same key is 409, nothing stored but the conflict; two identical requests at once are one event', async () => {
    const body = fixture('mailwebhook.json');
    // Two identical requests in flight together: one stored, both answered the same 202.
    const [a, b] = await Promise.all([h.send('keyed', body, headers(body, NOW, KEY)), h.send('keyed', body, headers(body, NOW, KEY))]);
    expect([a.status, b.status]).toEqual([202, 202]);
    expect(a.text).toBe(b.text);
    expect(rows('keyed')).toEqual([{ id: JSON.parse(a.text).id, delivery_id: KEY, duplicates: 1 }]);

    const changed = Buffer.from(body.toString('utf8').replace('Invoice INV-1048', 'Invoice INV-1049'));
    const conflict = await h.send('keyed', changed, headers(changed, NOW, KEY));
    expect(conflict.status, conflict.text).toBe(409);
    expect(JSON.parse(conflict.text)).toMatchObject({ error: 'conflict' });
    expect(rows('keyed')).toHaveLength(1);
    const stored = h.app.store.db.prepare('SELECT body FROM events WHERE source = ?').get('keyed') as { body: Buffer };
    expect(stored.body.equals(body)).toBe(true);
    expect(h.app.store.db.prepare('SELECT count(*) AS n FROM conflicts WHERE source = ?').get('keyed')).toEqual({ n: 1 });
  });
});
