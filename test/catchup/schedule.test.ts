import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { nextLink, retryAfterMs } from '../../src/catchup/api.js';
import { startCatchUp } from '../../src/catchup/schedule.js';
import type { CatchUpResult } from '../../src/catchup/run.js';
import { makeConfig, startApp, tempDir, waitFor, type RunningApp } from '../helpers.js';
import { FakeStripe, STRIPE_KEY, STRIPE_WHSEC } from './fakes.js';

describe("catch-up: serve's background schedule", () => {
  let tmp: ReturnType<typeof tempDir>;
  let stripe: FakeStripe;
  let app: RunningApp;

  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-schedule-');
    stripe = await new FakeStripe().start();
    app = await startApp(
      makeConfig(
        { sources: { shop: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:K', apiBase: stripe.base, everyMinutes: 0.004 } } } },
        tmp.dir,
        { K: STRIPE_KEY },
      ),
    );
  });
  afterEach(async () => {
    await app.close();
    await stripe.close();
    tmp.cleanup();
  });

  it('runs at start and then every everyMinutes, wakes the drain after storing, logs each run, and stops cleanly', async () => {
    const results: CatchUpResult[] = [];
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) });
    let woken = 0;
    const schedule = startCatchUp({ config: app.config, store: app.store, logger, onResult: (r) => results.push(r), onStored: () => (woken += 1) });
    await waitFor(() => (results.length >= 1 ? true : undefined), 'the run at start');
    // Not delivered (no target); created a second after catch-up was configured (whole seconds).
    await stripe.create('checkout.session.completed', Math.floor(Date.now() / 1000) + 1);
    await waitFor(() => (results.some((r) => r.storedNow === 1) ? true : undefined), 'a later run');
    expect(woken).toBe(1);
    await waitFor(() => (results.length >= 4 ? true : undefined), 'more runs');
    await schedule.stop();
    const after = results.length;
    await new Promise((r) => setTimeout(r, 600));
    expect(results.length).toBe(after);
    expect(lines.filter((l) => l.msg === 'catch-up').length).toBe(after);
    expect(lines.find((l) => l.storedNow === 1)).toMatchObject({ source: 'shop', provider: 'stripe', listed: 1, storedNow: 1 });
  });
});

describe('catch-up: API helpers', () => {
  it("reads Retry-After in seconds or as a date, GitHub's x-ratelimit-reset, else waits a second", () => {
    const now = Date.UTC(2026, 0, 1, 12, 0, 0);
    expect(retryAfterMs(new Headers({ 'retry-after': '7' }), now)).toBe(7000);
    expect(retryAfterMs(new Headers({ 'retry-after': 'Thu, 01 Jan 2026 12:00:30 GMT' }), now)).toBe(30_000);
    expect(retryAfterMs(new Headers({ 'x-ratelimit-reset': String(now / 1000 + 12) }), now)).toBe(12_000);
    expect(retryAfterMs(new Headers(), now)).toBe(1000);
  });

  it('finds rel="next" among several Link relations', () => {
    expect(nextLink(new Headers({ link: '<https://api.github.com/x?cursor=a>; rel="prev", <https://api.github.com/x?cursor=b>; rel="next"' }))).toBe(
      'https://api.github.com/x?cursor=b',
    );
    expect(nextLink(new Headers({ link: '<https://gitlab.example/api/v4/x?page=1>; rel="first"' }))).toBeUndefined();
    expect(nextLink(new Headers())).toBeUndefined();
  });
});
