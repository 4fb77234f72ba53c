import { Hono } from 'hono';
import { describe, expect, it } from 'vitest';
import { unavailableError } from '../../src/errors.js';
import { healthHandler, ingestHealth } from '../../src/http/health.js';

/** GET /healthz from ingest's recent outcome and the store's ping, on a hand-moved clock. */

function app(ping: () => Promise<void>, t: { now: number }) {
  const ingest = ingestHealth({ now: () => t.now, recentMs: 5000 });
  const a = new Hono();
  a.get('/healthz', healthHandler({ ping, ingest }));
  return { ingest, status: async () => (await a.request('/healthz')).status };
}

describe('/healthz', () => {
  it('is 503 from a delivery refused as unavailable until an insert commits, or 5 s after it', async () => {
    const t = { now: 1_000_000 };
    let pings = 0;
    const h = app(async () => void (pings += 1), t);
    expect(await h.status()).toBe(200);
    h.ingest.observe('unavailable');
    t.now += 4999;
    expect(await h.status()).toBe(503);
    // Outcomes that say nothing about the store change nothing.
    h.ingest.observe('unauthorized');
    h.ingest.observe('not_found');
    expect(await h.status()).toBe(503);
    t.now += 1;
    expect(await h.status()).toBe(200);

    h.ingest.observe('unavailable');
    expect(await h.status()).toBe(503);
    h.ingest.observe('duplicate');
    expect(await h.status()).toBe(200);
    // One ping per answer of 200; none while ingest already says no.
    expect(pings).toBe(3);
  });

  it('is 503 with Retry-After and a reason while the ping fails, and 200 when it passes again', async () => {
    const t = { now: 0 };
    let down = true;
    const ingest = ingestHealth({ now: () => t.now });
    const a = new Hono();
    a.get(
      '/healthz',
      healthHandler({
        ping: async () => {
          if (down) throw unavailableError('ping: database unavailable (ECONNREFUSED)');
        },
        ingest,
      }),
    );
    const res = await a.request('/healthz');
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('5');
    expect(await res.json()).toEqual({ status: 'unavailable', reason: 'database unavailable' });
    down = false;
    const ok = await a.request('/healthz');
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ status: 'ok' });
  });
});
