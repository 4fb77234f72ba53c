import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSources, type Harness } from './harness.js';

/** A delivery id is one sender's: deduplication is per (source, delivery id), never across sources. */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);
const SECRET = 'shared-secret-0123456789';
const ID = 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043';

describe('the same delivery id from two senders', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startSources(
      {
        gitlab: { provider: 'gitlab', secret: SECRET },
        shopify: { provider: 'shopify', secret: SECRET },
        shopify2: { provider: 'shopify', secret: SECRET },
      },
      NOW,
    );
  });
  afterAll(() => h.close());

  /** The body signed by the source's provider, with the delivery id in that sender's own header. */
  const send = (source: string, idHeader: string) => {
    const resolved = h.app.config.sources.get(source)!;
    const body = Buffer.from(JSON.stringify({ id: 1, note: `from ${source}` }));
    const signed = resolved.provider.sign(body, SECRET, NOW, resolved, h.url(source));
    return h.send(source, body, { 'content-type': 'application/json', ...signed.headers, [idHeader]: ID });
  };

  it('are two events, each accepted, neither a duplicate nor a conflict of the other (two providers, and two sources of one provider)', async () => {
    const answers = [await send('gitlab', 'idempotency-key'), await send('shopify', 'x-shopify-webhook-id'), await send('shopify2', 'x-shopify-webhook-id')];
    expect(answers.map((a) => a.status)).toEqual([202, 202, 202]);
    const ids = answers.map((a) => JSON.parse(a.text).id as number);
    expect(new Set(ids).size).toBe(3);
    const rows = h.app.store.db.prepare('SELECT id, source, delivery_id, duplicates FROM events ORDER BY id').all();
    expect(rows).toEqual([
      { id: ids[0], source: 'gitlab', delivery_id: ID, duplicates: 0 },
      { id: ids[1], source: 'shopify', delivery_id: ID, duplicates: 0 },
      { id: ids[2], source: 'shopify2', delivery_id: ID, duplicates: 0 },
    ]);
    expect(h.app.store.db.prepare('SELECT count(*) AS n FROM conflicts').get()).toEqual({ n: 0 });
    // Each sender's retry is a duplicate of its own event only.
    const again = await send('shopify', 'x-shopify-webhook-id');
    expect(again.text).toBe(answers[1]!.text);
    expect(h.app.store.db.prepare('SELECT source, duplicates FROM events ORDER BY id').all()).toEqual([
      { source: 'gitlab', duplicates: 0 },
      { source: 'shopify', duplicates: 1 },
      { source: 'shopify2', duplicates: 0 },
    ]);
  });
});
