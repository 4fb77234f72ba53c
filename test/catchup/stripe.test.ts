import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runCatchUp, type CatchUpRunOptions } from '../../src/catchup/run.js';
import { makeConfig, startApp, tempDir, type RunningApp } from '../helpers.js';
import { FakeStripe, STRIPE_KEY, STRIPE_WHSEC } from './fakes.js';

const DAY = 86_400_000;

describe('catch-up: stripe (events stored from the API)', () => {
  let tmp: ReturnType<typeof tempDir>;
  let stripe: FakeStripe;
  let app: RunningApp;
  let db: Database.Database;
  const waits: number[] = [];

  async function setup(catchUp: Record<string, unknown> = {}, key = STRIPE_KEY) {
    const config = makeConfig(
      {
        sources: { shop: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:STRIPE_API_KEY', apiBase: stripe.base, ...catchUp } } },
        routes: [{ name: 'fulfil', source: 'shop', events: ['checkout.session.completed'], key: '{body.data.object.id}', effect: { exec: ['true'] } }],
      },
      tmp.dir,
      { STRIPE_API_KEY: key },
    );
    app = await startApp(config);
    db = new Database(config.database, { readonly: true });
    stripe.target = `${app.url}/webhooks/shop`;
  }

  const run = (extra: Partial<CatchUpRunOptions> = {}) =>
    runCatchUp({
      settings: app.config.catchUp.get('shop')!,
      source: app.config.sources.get('shop')!,
      store: app.store,
      routes: app.config.routes,
      now: Date.now(),
      sleep: async (ms) => void waits.push(ms),
      ...extra,
    });

  const events = () =>
    db.prepare(`SELECT id, delivery_id, event_type, status, origin, duplicates, body FROM events ORDER BY id`).all() as {
      id: number;
      delivery_id: string;
      event_type: string;
      status: string;
      origin: string;
      duplicates: number;
      body: Buffer;
    }[];

  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-stripe-');
    stripe = await new FakeStripe().start();
    waits.length = 0;
  });
  afterEach(async () => {
    db?.close();
    await app?.close();
    await stripe.close();
    tmp.cleanup();
  });

  it('stores every event missed while the receiver was down, once, oldest first; a second run changes nothing; a late webhook is a duplicate', async () => {
    await setup();
    // Catch-up configured two seconds ago (Stripe's times are whole seconds).
    const first = await run({ now: Date.now() - 2000 });
    expect(first).toMatchObject({ error: null, listed: 0, storedNow: 0 });

    const delivered = await stripe.create('checkout.session.completed');
    expect(delivered.delivered).toBe(true);
    stripe.target = undefined; // the receiver is down
    const missed = [await stripe.create('checkout.session.completed'), await stripe.create('invoice.paid'), await stripe.create('checkout.session.completed')];
    expect(missed.every((e) => !e.delivered)).toBe(true);
    stripe.target = `${app.url}/webhooks/shop`;

    const r = await run();
    expect(r).toMatchObject({ error: null, listed: 4, alreadyStored: 1, storedNow: 3, redeliveryAsked: 0, failed: 0 });
    const rows = events();
    expect(rows.map((e) => [e.delivery_id, e.origin])).toEqual([[delivered.id, 'webhook'], ...missed.map((e) => [e.id, 'catch-up'])]);
    // As the API returned it; pending for the drain unless no route applies (invoice.paid).
    expect(JSON.parse(rows[1]!.body.toString())).toEqual(stripe.events[1]);
    expect(rows.slice(1).map((e) => e.status)).toEqual(['pending', 'done', 'pending']);
    expect(stripe.requests.every((q) => q.auth === `Bearer ${STRIPE_KEY}`)).toBe(true);
    expect(new URLSearchParams(stripe.requests.at(-1)!.query).get('limit')).toBe('100');

    const again = await run();
    expect(again).toMatchObject({ error: null, listed: 4, alreadyStored: 4, storedNow: 0 });
    expect(events()).toEqual(rows);

    // The webhook Stripe still retries: other bytes, other API version rendering; same event.
    const late = await stripe.webhook(stripe.events[1]!);
    expect(late).toEqual({ ok: true, status: 202 });
    const after = events();
    expect(after.length).toBe(4);
    expect(after[1]!.duplicates).toBe(1);
    expect(db.prepare('SELECT count(*) FROM conflicts').pluck().get()).toBe(0);
  });

  it('leaves events from before catch-up was configured alone, unless --since reaches back', async () => {
    await setup();
    stripe.target = undefined;
    await stripe.create('checkout.session.completed', Math.floor((Date.now() - 2 * DAY) / 1000));
    const r = await run();
    expect(r).toMatchObject({ error: null, listed: 0, storedNow: 0 });
    expect(events()).toEqual([]);
    const back = await run({ since: Date.now() - 3 * DAY });
    expect(back).toMatchObject({ error: null, listed: 1, storedNow: 1 });
    expect(events()).toHaveLength(1);
  });

  it('pages through at 100 a page, waits out 429 Retry-After, retries a 500 mid-way', async () => {
    await setup();
    await run({ now: Date.now() - 2000 });
    stripe.target = undefined;
    for (let i = 0; i < 230; i++) await stripe.create();
    stripe.faultAfter = 1;
    stripe.faults.push({ status: 429, headers: { 'retry-after': '3' } }, { status: 500, body: '{"error":{"message":"An unknown error occurred"}}' });
    const r = await run();
    expect(r).toMatchObject({ error: null, listed: 230, storedNow: 230 });
    expect(waits).toEqual([3000, 500]);
    expect(r.requests).toBe(5);
    expect(new Set(events().map((e) => e.delivery_id)).size).toBe(230);
  });

  it('a wrong key is one clear error naming the source and the field; the key is never shown; nothing moves', async () => {
    await setup({}, 'rk_test_wrong_key_value');
    const r = await run();
    expect(r.error).toBe('sources.shop.catchUp.apiKey: Stripe refused the credential (HTTP 401): it is wrong, expired or revoked, or lacks a permission');
    expect(r.hint).toContain('Events: Read');
    expect(JSON.stringify(r)).not.toContain('rk_test_wrong');
    const state = await app.store.catchUpState('shop');
    expect(state).toMatchObject({ lastError: r.error, lastOkAt: null, resumeAt: null });
  });

  it('stops at catchUp.maxRequests having stored each page as it was listed; the next run continues from the page where it stopped', async () => {
    await setup({ maxRequests: 2 });
    const base = Math.floor(Date.now() / 1000) - 1000;
    await run({ now: (base - 10) * 1000 });
    const before = await app.store.catchUpState('shop');
    stripe.target = undefined;
    for (let i = 0; i < 250; i++) await stripe.create('checkout.session.completed', base + i);

    const firstNow = Date.now();
    const first = await run({ now: firstNow });
    expect(first.error).toBe('sources.shop.catchUp: stopped after 2 requests (catchUp.maxRequests); the next run continues where this one stopped');
    expect(first).toMatchObject({ listed: 200, storedNow: 200 });
    expect(stripe.requests.length).toBe(3);
    const state = await app.store.catchUpState('shop');
    expect(state?.resumeAt).toBe(before?.resumeAt);
    // The third page: after the oldest event the second listed.
    const third = new URL(state!.partial!.cursor!);
    expect(third.searchParams.get('starting_after')).toBe(stripe.events[50]!.id);
    expect(state?.partial).toEqual({
      cursor: third.href,
      from: Math.max(before!.resumeAt ?? 0, before!.configuredAt),
      until: firstNow,
      end: expect.any(Number),
    });

    const rest = await run();
    expect(rest).toMatchObject({ error: null, listed: 50, alreadyStored: 0, storedNow: 50, requests: 1 });
    expect(new URLSearchParams(stripe.requests.at(-1)!.query).get('starting_after')).toBe(stripe.events[50]!.id);
    const after = await app.store.catchUpState('shop');
    expect(after).toMatchObject({ partial: null, resumeAt: state!.partial!.end });

    expect(await run()).toMatchObject({ error: null, listed: 0 });
    expect(new Set(events().map((e) => e.delivery_id)).size).toBe(250);
    expect(events()).toHaveLength(250);
  });

  it('--dry-run counts what it would store and changes nothing', async () => {
    await setup();
    await run({ now: Date.now() - 2000 });
    const state = await app.store.catchUpState('shop');
    stripe.target = undefined;
    await stripe.create();
    await stripe.create();
    const phases: string[] = [];
    const r = await run({ dryRun: true, onProgress: (p) => phases.push(`${p.phase} ${p.listed}/${p.storedNow}`) });
    expect(r).toMatchObject({ dryRun: true, listed: 2, storedNow: 2, error: null });
    // What the CLI's progress line shows as the run moves on.
    expect(phases).toEqual(['listing 0/0', 'recovering 2/0', 'done 2/2']);
    expect(events()).toEqual([]);
    expect(await app.store.catchUpState('shop')).toEqual(state);
  });
});
