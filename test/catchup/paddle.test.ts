import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempDir, waitFor } from '../helpers.js';
import { catchUpApp } from './harness.js';
import { FakePaddle, NOTIFICATION_SETTING, PADDLE_KEY, PADDLE_SECRET } from './fakes.js';

const REPLAY = /^\/notifications\/[^/]+\/replay$/;

describe('catch-up: paddle (failed notifications replayed)', () => {
  let tmp: ReturnType<typeof tempDir>;
  let paddle: FakePaddle;
  let h: Awaited<ReturnType<typeof catchUpApp>>;

  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-paddle-');
    paddle = await new FakePaddle().start();
    h = await catchUpApp(
      tmp.dir,
      'billing',
      {
        provider: 'paddle',
        secret: PADDLE_SECRET,
        catchUp: { apiKey: 'env:PADDLE_API_KEY', notificationSettingId: NOTIFICATION_SETTING, apiBase: paddle.base, maxRequests: 300 },
      },
      { PADDLE_API_KEY: PADDLE_KEY },
    );
    paddle.target = h.url;
  });
  afterEach(async () => {
    await h.close();
    await paddle.close();
    tmp.cleanup();
  });

  it("replays each failed notification of our destination whose event is not stored, once; the replay is stored under the event's id; again changes nothing", async () => {
    await h.run();
    const ok = await paddle.event();
    paddle.target = undefined;
    const missed = [await paddle.event(), await paddle.event('subscription.updated')];
    // Another destination's failure is not ours to replay.
    await paddle.event('transaction.completed', 'ntfset_01other00000000000000000000');
    paddle.target = h.url;
    expect(missed.map((n) => n.status)).toEqual(['failed', 'failed']);

    const r = await h.run();
    expect(r).toMatchObject({ error: null, listed: 2, alreadyStored: 0, redeliveryAsked: 2, failed: 0 });
    const list = new URLSearchParams(paddle.requests.find((q) => q.method === 'GET' && q.query !== '')!.query);
    expect(Object.fromEntries(list)).toMatchObject({ notification_setting_id: NOTIFICATION_SETTING, status: 'failed', per_page: '200' });
    expect(paddle.requests.filter((q) => q.method === 'POST').map((q) => q.path)).toEqual(missed.map((n) => `/notifications/${n.id}/replay`));
    await waitFor(() => (h.stored().length === 3 ? true : undefined), 'the replays');
    expect(h.stored().sort()).toEqual([ok, ...missed].map((n) => n.payload.event_id).sort());

    const again = await h.run();
    expect(again).toMatchObject({ error: null, listed: 2, alreadyStored: 2, redeliveryAsked: 0 });
    expect(paddle.count('POST', REPLAY)).toBe(2);
  });

  it('follows meta.pagination.next at 200 a page, and never to another origin (the key stays with Paddle)', async () => {
    await h.run();
    paddle.target = undefined;
    for (let i = 0; i < 210; i++) await paddle.event();
    const r = await h.run({ dryRun: true });
    expect(r).toMatchObject({ error: null, listed: 210, redeliveryAsked: 210 });
    expect(paddle.requests.filter((q) => q.method === 'GET').at(-1)!.query).toMatch(/after=ntf_/);
    expect(paddle.count('POST', REPLAY)).toBe(0);

    paddle.nextBase = 'http://localhost:9';
    const elsewhere = await h.run();
    expect(elsewhere.error).toBe('sources.billing.catchUp: Paddle: the API gave a next page on another origin (http://localhost:9); not followed');
    // The first page was replayed as it was listed; the next, elsewhere, was never asked.
    expect(paddle.count('POST', REPLAY)).toBe(200);
    expect(paddle.requests.filter((q) => q.method === 'GET')).toHaveLength(4);
    // What is kept to continue from is the page on Paddle's origin, never the other.
    expect((await h.app.store.catchUpState('billing'))?.partial?.cursor ?? null).toBeNull();
  });
});
