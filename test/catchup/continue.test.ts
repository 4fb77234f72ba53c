import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { runCatchUp, type CatchUpResult } from '../../src/catchup/run.js';
import { openStore } from '../../src/store/open.js';
import type { Store } from '../../src/store/types.js';
import { makeConfig, tempDir, waitFor } from '../helpers.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from '../postgres-helpers.js';
import {
  FakeGithub,
  FakeGitlab,
  FakePaddle,
  FakeStripe,
  GITHUB_SECRET,
  GITHUB_TOKEN,
  GITLAB_HOOK,
  GITLAB_SECRET,
  GITLAB_TOKEN,
  HOOK_PATH,
  NOTIFICATION_SETTING,
  PADDLE_KEY,
  PADDLE_SECRET,
  STRIPE_KEY,
  STRIPE_WHSEC,
  type FakeApi,
} from './fakes.js';
import { catchUpApp } from './harness.js';

/**
 * A listing longer than a run's budget: each run asks for what it lists as it goes, stops
 * at catchUp.maxRequests, and the next run continues from the page where it stopped, so
 * every missed delivery is asked for once, however long the listing.
 */
interface Sender<F extends FakeApi> {
  name: string;
  fake: () => F;
  source: (f: F) => Record<string, unknown>;
  env: NodeJS.ProcessEnv;
  /** A delivery the receiver misses; its delivery id as stored once it comes back. */
  miss: (f: F) => Promise<string>;
  asked: RegExp;
}

const senders = [
  {
    name: 'github',
    fake: () => new FakeGithub(),
    source: (f) => ({ provider: 'github', secret: GITHUB_SECRET, catchUp: { token: 'env:T', hook: HOOK_PATH, apiBase: f.base, maxRequests: 3 } }),
    env: { T: GITHUB_TOKEN },
    miss: async (f) => `42:${(await f.push()).guid}`,
    asked: /\/attempts$/,
  } satisfies Sender<FakeGithub>,
  {
    name: 'gitlab',
    fake: () => new FakeGitlab(),
    source: (f) => ({ provider: 'gitlab', secret: GITLAB_SECRET, catchUp: { token: 'env:T', hook: GITLAB_HOOK, apiBase: `${f.base}/api/v4`, maxRequests: 3 } }),
    env: { T: GITLAB_TOKEN },
    miss: async (f) => (await f.push()).request_headers['Idempotency-Key']!,
    asked: /\/resend$/,
  } satisfies Sender<FakeGitlab>,
  {
    name: 'paddle',
    fake: () => new FakePaddle(),
    source: (f) => ({
      provider: 'paddle',
      secret: PADDLE_SECRET,
      catchUp: { apiKey: 'env:T', notificationSettingId: NOTIFICATION_SETTING, apiBase: f.base, maxRequests: 3 },
    }),
    env: { T: PADDLE_KEY },
    miss: async (f) => (await f.event()).payload.event_id,
    asked: /\/replay$/,
  } satisfies Sender<FakePaddle>,
] as unknown as Sender<FakeApi>[];

describe.each(senders)('catch-up: $name, a listing longer than the budget continues over runs', (sender) => {
  let tmp: ReturnType<typeof tempDir>;
  let f: FakeApi;
  let h: Awaited<ReturnType<typeof catchUpApp>>;
  beforeEach(async () => {
    tmp = tempDir(`receiver-catchup-continue-${sender.name}-`);
    f = await sender.fake().start();
    h = await catchUpApp(tmp.dir, 'src', sender.source(f), sender.env);
    f.target = h.url;
  });
  afterEach(async () => {
    await h.close();
    await f.close();
    tmp.cleanup();
  });

  it('25 missed on pages of 10 with 3 requests a run: each run asks as it lists, the next continues, each is asked once', async () => {
    expect(await h.run()).toMatchObject({ error: null, listed: 0 });
    f.target = undefined;
    const missed: string[] = [];
    for (let i = 0; i < 25; i++) missed.push(await sender.miss(f));
    f.target = h.url;
    f.pageSize = 10;
    const runs: CatchUpResult[] = [];
    let asked = 0;
    while (runs.length < 30) {
      const r = await h.run();
      runs.push(r);
      asked += r.redeliveryAsked;
      // Each redelivery arrives before the next run lists again.
      await waitFor(() => (h.stored().length === asked ? true : undefined), 'the redeliveries');
      if (r.error === null) break;
      expect(r.error).toBe('sources.src.catchUp: stopped after 3 requests (catchUp.maxRequests); the next run continues where this one stopped');
      // Every cut run got somewhere.
      expect(r.redeliveryAsked).toBeGreaterThan(0);
    }
    expect(runs.at(-1)!.error).toBeNull();
    expect(runs.length).toBeGreaterThan(5);
    expect(h.stored().sort()).toEqual([...missed].sort());
    expect(f.count('POST', sender.asked)).toBe(25);
    // Done: nothing left to continue; the next run (from the resume point) asks for nothing again.
    expect((await h.app.store.catchUpState('src'))?.partial).toBeNull();
    expect(await h.run()).toMatchObject({ redeliveryAsked: 0 });
    expect(f.count('POST', sender.asked)).toBe(25);
  });
});

const pgOk = await postgresAvailable();
describe.skipIf(!pgOk)('catch-up on PostgreSQL: two receivers, one run per source at a time', () => {
  let db: TestDatabase;
  let tmp: ReturnType<typeof tempDir>;
  let stripe: FakeStripe;
  const stores: Store[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await db?.drop();
  });
  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-pg-lock-');
    stripe = await new FakeStripe().start();
  });
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    await stripe.close();
    tmp.cleanup();
  });

  it('while one receiver runs a source, the other leaves it (busy) and asks the API nothing; then it runs again as usual', async () => {
    const config = makeConfig(
      { database: db.url, sources: { shop: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:K', apiBase: stripe.base } } } },
      tmp.dir,
      { K: STRIPE_KEY },
    );
    for (let i = 0; i < 2; i++) stores.push(await openStore(db.url, { busyTimeoutMs: 3000, server: true }));
    const run = (store: Store, now = Date.now()) =>
      runCatchUp({ settings: config.catchUp.get('shop')!, source: config.sources.get('shop')!, store, routes: config.routes, now, since: now - 3_600_000 });
    for (let i = 0; i < 3; i++) await stripe.create('invoice.paid', Math.floor(Date.now() / 1000) - 60);
    stripe.delayMs = 300;
    const [a, b] = await Promise.all([run(stores[0]!), run(stores[1]!)]);
    expect([a.busy, b.busy].sort()).toEqual([false, true]);
    const [ran, left] = a.busy ? [b, a] : [a, b];
    expect(ran).toMatchObject({ error: null, listed: 3, storedNow: 3 });
    expect(left).toMatchObject({ error: null, listed: 0, requests: 0 });
    expect(stripe.requests).toHaveLength(1);
    // Released: either receiver runs it next time.
    stripe.delayMs = 0;
    expect(await run(left === a ? stores[0]! : stores[1]!)).toMatchObject({ busy: false, error: null, listed: 3, alreadyStored: 3 });
  });
});
