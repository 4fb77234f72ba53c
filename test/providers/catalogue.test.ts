import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { providers } from '../../src/providers/registry.js';
import { sha256Hex } from '../../src/providers/util.js';
import { fixture, startSources, type Harness } from './harness.js';

/**
 * Each provider with its documentation-shaped fixture, signed by the provider's own
 * `sign()` (what `receiver send-test` does): delivery id and event type, duplicates,
 * rotation, stale timestamps where the scheme has one, and the documented success code.
 */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);
const DAY = 86_400_000;
const OLD = 'old-secret-0123456789';
const NEW = 'new-secret-9876543210';

interface Case {
  provider: string;
  fixture: string;
  contentType?: string;
  /** Sender headers that carry ids, as in the provider's documentation (unsigned ones). */
  headers?: Record<string, string>;
  /** Secrets in the provider's own shape where it matters (whsec_ keys are base64). */
  secrets?: [string, string];
  deliveryId: string | ((sent: Record<string, string>) => string);
  eventType: string;
  extra?: Record<string, string>;
  status: number;
  /** Does the scheme sign a timestamp (and so refuse a stale one)? */
  timestamped: boolean;
}

const CASES: Case[] = [
  {
    provider: 'stripe',
    fixture: 'stripe.json',
    deliveryId: 'evt_1NG8Du2eZvKYlo2CUI79vXWy',
    eventType: 'checkout.session.completed',
    status: 202,
    timestamped: true,
    secrets: ['whsec_old_abc', 'whsec_new_def'],
  },
  {
    provider: 'github',
    fixture: 'github.json',
    headers: { 'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958', 'x-github-hook-id': '292214426', 'x-github-event': 'push' },
    deliveryId: '292214426:72d3162e-cc78-11e3-81ab-4c9367dc0958',
    eventType: 'push',
    status: 202,
    timestamped: false,
  },
  {
    provider: 'standard-webhooks',
    fixture: 'standard-webhooks.json',
    secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'whsec_c2Vjb25kLXJvdGF0ZWQtc2VjcmV0LTMyLWJ5dGVzISE='],
    deliveryId: (sent) => sent['webhook-id'] ?? '',
    eventType: 'email.delivered',
    status: 202,
    timestamped: true,
  },
  {
    provider: 'shopify',
    fixture: 'shopify.json',
    headers: {
      'x-shopify-webhook-id': 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
      'x-shopify-event-id': '98880550-7158-44d4-b7cd-2c97c8a091b5',
      'x-shopify-topic': 'orders/create',
      'x-shopify-shop-domain': 'johns-apparel.myshopify.com',
      'x-shopify-api-version': '2025-04',
      'x-shopify-triggered-at': '2025-05-01T12:00:00.000000000Z',
    },
    deliveryId: 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
    eventType: 'orders/create',
    extra: { eventId: '98880550-7158-44d4-b7cd-2c97c8a091b5', shopDomain: 'johns-apparel.myshopify.com' },
    status: 202,
    timestamped: false,
  },
  {
    provider: 'gitlab',
    fixture: 'gitlab.json',
    headers: {
      'idempotency-key': 'f1c7ee0e-3f4b-4c5e-9a1a-2d9f5c7b8e10',
      'x-gitlab-event-uuid': '13792a34-cac6-4fda-95a8-c58e00a3954e',
      'x-gitlab-event': 'Push Hook',
    },
    deliveryId: 'f1c7ee0e-3f4b-4c5e-9a1a-2d9f5c7b8e10',
    eventType: 'Push Hook',
    status: 202,
    timestamped: false,
  },
  { provider: 'slack', fixture: 'slack.json', deliveryId: 'Ev08MFMKH6', eventType: 'app_mention', status: 202, timestamped: true },
  {
    provider: 'paddle',
    fixture: 'paddle.json',
    secrets: ['pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_old', 'pdl_ntfset_01h8bzam1z32agrxjwhjgqk8w6_new'],
    deliveryId: 'evt_01h8bzakzx3hm2fmen703n5q45',
    eventType: 'transaction.paid',
    extra: { notificationId: 'ntf_01h8bzam1z32agrxjwhjgqk8w6' },
    status: 200,
    timestamped: true,
  },
  {
    provider: 'lemonsqueezy',
    fixture: 'lemonsqueezy.json',
    deliveryId: `sha256:${sha256Hex(fixture('lemonsqueezy.json'))}`,
    eventType: 'order_created',
    status: 202,
    timestamped: false,
  },
  { provider: 'mailgun', fixture: 'mailgun.json', deliveryId: 'CPgfbmQMTCKtHW6uIWtuVe', eventType: 'delivered', status: 200, timestamped: true },
  {
    provider: 'twilio',
    fixture: 'twilio.txt',
    contentType: 'application/x-www-form-urlencoded',
    headers: { 'i-twilio-idempotency-token': '8a7ab3b2-1b4c-4d6f-9e0a-5c3d2e1f0a9b' },
    deliveryId: '8a7ab3b2-1b4c-4d6f-9e0a-5c3d2e1f0a9b',
    eventType: 'message.delivered',
    status: 202,
    timestamped: false,
  },
  {
    provider: 'asaas',
    fixture: 'asaas.json',
    deliveryId: 'evt_05b708f961d739ea7eba7e4db318f621&368604920',
    eventType: 'PAYMENT_RECEIVED',
    status: 200,
    timestamped: false,
  },
  {
    provider: 'mailwebhook',
    fixture: 'mailwebhook.json',
    headers: {
      'x-idempotency-key': '5f0c6a3cbd1e2a7f9d8e4b6c0a1f3e5d7c9b2a4e6f8d0c1b3a5e7f9d2c4b6a8e',
      'idempotency-key': '5f0c6a3cbd1e2a7f9d8e4b6c0a1f3e5d7c9b2a4e6f8d0c1b3a5e7f9d2c4b6a8e',
    },
    deliveryId: '5f0c6a3cbd1e2a7f9d8e4b6c0a1f3e5d7c9b2a4e6f8d0c1b3a5e7f9d2c4b6a8e',
    eventType: 'mailwebhook.generic',
    status: 202,
    timestamped: true,
  },
];

describe.each(CASES)('$provider', (c) => {
  const [oldSecret, newSecret] = c.secrets ?? [OLD, NEW];
  let h: Harness;
  beforeAll(async () => {
    h = await startSources(
      {
        main: { provider: c.provider, secret: oldSecret },
        rotA: { provider: c.provider, secrets: [oldSecret, newSecret] },
        rotB: { provider: c.provider, secrets: [oldSecret, newSecret] },
        late: { provider: c.provider, secrets: [oldSecret, newSecret] },
      },
      NOW,
    );
  });
  afterAll(() => h.close());

  /** Signs the fixture for a source as the sender would; returns what to post. */
  const signed = (source: string, secret: string, atMs = NOW) => {
    const resolved = h.app.config.sources.get(source);
    if (resolved === undefined) throw new Error(`no source ${source}`);
    const body = fixture(c.fixture);
    const s = resolved.provider.sign(body, secret, atMs, resolved, h.url(source));
    const headers = { 'content-type': c.contentType ?? 'application/json', ...s.headers, ...c.headers };
    return { body: s.body ?? body, headers };
  };

  it('extracts the delivery id and event type from the fixture; answers the documented success code', async () => {
    const d = signed('main', oldSecret);
    const r = await h.send('main', d.body, d.headers);
    expect(r.status, r.text).toBe(c.status);
    expect(JSON.parse(r.text)).toMatchObject({ status: 'accepted' });
    const row = h.event('main');
    const want = typeof c.deliveryId === 'function' ? c.deliveryId(d.headers) : c.deliveryId;
    expect(want).not.toBe('');
    expect(row).toMatchObject({ delivery_id: want, event_type: c.eventType });
    expect(row?.extra_ids === null ? undefined : JSON.parse(row?.extra_ids ?? '{}')).toEqual(c.extra);
    expect(row?.body.equals(d.body)).toBe(true);

    // A retry of the same delivery: the same answer, byte for byte, and no new row.
    const again = await h.send('main', d.body, d.headers);
    expect(again.status).toBe(c.status);
    expect(again.text).toBe(r.text);
    expect(h.rows('main')).toBe(1);
    expect(h.event('main')?.duplicates).toBe(1);
  });

  it('rotation: deliveries signed with the old and with the new secret are both accepted; a third secret is refused', async () => {
    const a = signed('rotA', oldSecret);
    const b = signed('rotB', newSecret);
    expect((await h.send('rotA', a.body, a.headers)).status).toBe(c.status);
    expect((await h.send('rotB', b.body, b.headers)).status).toBe(c.status);
    const before = h.rows();
    // A third, well-formed secret: one character of the new one changed.
    const third = newSecret.slice(0, 8) + String.fromCharCode(newSecret.charCodeAt(8) ^ 1) + newSecret.slice(9);
    const x = signed('rotA', third);
    const r = await h.send('rotA', x.body, x.headers);
    expect(r.status).toBe(401);
    expect(h.rows()).toBe(before);
  });

  // By the scheme, one of the two: it signs no timestamp, or it refuses a stale one.
  if (!c.timestamped) {
    it("signs no timestamp: a delivery signed a month before the receiver's clock is accepted, its signature the same as one signed now", async () => {
      const provider = providers.get(c.provider)!;
      expect(provider.name).toBe(c.provider);
      const resolved = h.app.config.sources.get('late')!;
      const signature = (at: number) =>
        Object.fromEntries(
          Object.entries(provider.sign(fixture(c.fixture), oldSecret, at, resolved, h.url('late')).headers).filter(([k]) =>
            provider.signatureHeaders.includes(k),
          ),
        );
      // Nothing time-dependent is signed: the signature headers do not change with the clock.
      expect(Object.keys(signature(NOW)).length).toBeGreaterThan(0);
      expect(signature(NOW - 30 * DAY)).toEqual(signature(NOW));
      // And the receiver checks no age: a month old is as good as now.
      const old = signed('late', oldSecret, NOW - 30 * DAY);
      const r = await h.send('late', old.body, old.headers);
      expect(r.status, r.text).toBe(c.status);
      expect(h.rows('late')).toBe(1);
    });
  } else {
    it('refuses a timestamp 301 s old or 301 s ahead, storing nothing; accepts 299 s', async () => {
      expect(providers.get(c.provider)?.name).toBe(c.provider);
      const before = h.rows();
      for (const skew of [-301_000, 301_000]) {
        const d = signed('rotA', oldSecret, NOW + skew);
        const r = await h.send('rotA', d.body, d.headers);
        expect(r.status, r.text).toBe(401);
        expect(r.text).toMatch(/tolerance/);
      }
      expect(h.rows()).toBe(before);
      // Just inside the tolerance the same signing is accepted.
      const ok = signed('late', oldSecret, NOW - 299_000);
      const r = await h.send('late', ok.body, ok.headers);
      expect(r.status, r.text).toBe(c.status);
      expect(h.rows('late')).toBe(1);
    });
  }
});
