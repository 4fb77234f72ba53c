import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/providers/util.js';
import { fixture, startSources, type Harness } from './harness.js';

/** The details that bite, sender by sender, through the real server. */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);
const T = Math.floor(NOW / 1000);
const GITLAB_TOKEN = 'glpat-like-secret-token';
const GITLAB_SIGNING = 'whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=';
const MW_A = 'mw-secret-a';
const MW_B = 'mw-secret-b';
const MW_PLAIN = 'mw-secret-plain';
const MAILGUN_KEY = 'key-mailgun-webhook-signing-key';
const PADDLE_OLD = 'pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_old';
const PADDLE_NEW = 'pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_new';

const hmacHex = (key: string, data: string | Buffer) => createHmac('sha256', key).update(data).digest('hex');
const hmacB64 = (key: string, data: string | Buffer) => createHmac('sha256', key).update(data).digest('base64');

let h: Harness;
beforeAll(async () => {
  h = await startSources(
    {
      // By delivery id alone: these tests send one body under several ids (body dedupe: test/http/body-dedupe.test.ts).
      gitlab: { provider: 'gitlab', secrets: ['old-token', GITLAB_TOKEN], dedupeByBody: false },
      gitlabSigned: { provider: 'gitlab', secret: GITLAB_SIGNING },
      mwKeys: { provider: 'mailwebhook', keys: { k1: MW_A, k2: MW_B } },
      mwPlain: { provider: 'mailwebhook', secret: MW_PLAIN },
      mwBoth: { provider: 'mailwebhook', secret: MW_PLAIN, keys: { k1: MW_A } },
      mailgun: { provider: 'mailgun', secret: MAILGUN_KEY },
      paddle: { provider: 'paddle', secret: PADDLE_NEW },
      paddleAccept: { provider: 'paddle', secret: PADDLE_NEW, onConflict: 'accept' },
      shopify: { provider: 'shopify', secret: 'shpss_secret' },
      asaas: {
        provider: 'asaas',
        secret: '$aact_YTU5YTE0M2M2N2I4MTliNzk0YTI5N2U5MzdjNWZmNDQ6OjAwMDAwMDAwMDAwMDAwNzQ4NDk6OiRhYWNoXzk3YjI3ODc2LWMxNGItNDY2Zi05YzY4LTc0NWI5ODBkMzE2Ng==',
      },
      lemon: { provider: 'lemonsqueezy', secret: 'ls_signing_secret_123' },
    },
    NOW,
  );
});
afterAll(() => h.close());

describe('gitlab', () => {
  const body = fixture('gitlab.json');

  it('X-Gitlab-Token must equal a configured token (both during rotation); a wrong or missing token stores nothing', async () => {
    const base = { 'x-gitlab-event': 'Push Hook', 'idempotency-key': 'a0000000-0000-4000-8000-000000000001' };
    expect((await h.send('gitlab', body, { ...base, 'x-gitlab-token': 'wrong-token' })).status).toBe(401);
    expect((await h.send('gitlab', body, base)).status).toBe(401);
    expect((await h.send('gitlab', body, { ...base, 'x-gitlab-token': `${GITLAB_TOKEN}x` })).status).toBe(401);
    expect(h.rows('gitlab')).toBe(0);
    expect((await h.send('gitlab', body, { ...base, 'x-gitlab-token': GITLAB_TOKEN })).status).toBe(202);
    expect((await h.send('gitlab', body, { ...base, 'x-gitlab-token': 'old-token', 'idempotency-key': 'a0000000-0000-4000-8000-000000000002' })).status).toBe(
      202,
    );
  });

  it('delivery id: Idempotency-Key, else X-Gitlab-Event-UUID, else the body hash; type from the header, else object_kind', async () => {
    const other = Buffer.from(body.toString().replace('da1560886d4f094c3e6c9ef40349f7d38b5d27d7', 'ea1560886d4f094c3e6c9ef40349f7d38b5d27d7'));
    await h.send('gitlab', body, {
      'x-gitlab-token': GITLAB_TOKEN,
      'x-gitlab-event': 'Push Hook',
      'x-gitlab-event-uuid': '13792a34-cac6-4fda-95a8-c58e00a3954e',
    });
    await h.send('gitlab', other, { 'x-gitlab-token': GITLAB_TOKEN });
    const rows = h.app.store.db.prepare("SELECT delivery_id, event_type FROM events WHERE source = 'gitlab' ORDER BY id").all();
    expect(rows.slice(2)).toEqual([
      { delivery_id: '13792a34-cac6-4fda-95a8-c58e00a3954e', event_type: 'Push Hook' },
      { delivery_id: `sha256:${sha256Hex(other)}`, event_type: 'push' },
    ]);
  });

  it('Standard Webhooks headers (signing token), signed by the standardwebhooks library: verified, webhook-id = Idempotency-Key', async () => {
    const id = 'b0000000-0000-4000-8000-000000000001';
    const sig = new Webhook(GITLAB_SIGNING).sign(id, new Date(NOW), body);
    const headers = { 'webhook-id': id, 'webhook-timestamp': String(T), 'webhook-signature': sig, 'idempotency-key': id, 'x-gitlab-event': 'Push Hook' };
    const r = await h.send('gitlabSigned', body, headers);
    expect(r.status, r.text).toBe(202);
    expect(h.event('gitlabSigned')).toMatchObject({ delivery_id: id, event_type: 'Push Hook' });
    // A stale signature is refused, as Standard Webhooks requires.
    const old = new Webhook(GITLAB_SIGNING).sign('b0000000-0000-4000-8000-000000000002', new Date(NOW - 301_000), body);
    expect(
      (
        await h.send('gitlabSigned', body, {
          ...headers,
          'webhook-id': 'b0000000-0000-4000-8000-000000000002',
          'webhook-timestamp': String(T - 301),
          'webhook-signature': old,
        })
      ).status,
    ).toBe(401);
  });

  it('when the signature headers are present they decide: a wrong signature is refused even beside a right token', async () => {
    const headers = { 'webhook-id': 'c1', 'webhook-timestamp': String(T), 'webhook-signature': `v1,${hmacB64('nope', 'x')}`, 'x-gitlab-token': GITLAB_TOKEN };
    expect((await h.send('gitlab', body, headers)).status).toBe(401);
  });
});

describe('mailwebhook: the secret is chosen by kid', () => {
  const body = fixture('mailwebhook.json');
  const header = (secret: string, kid: string, t = T) => ({
    'x-mailwebhook-signature': `t=${t}, kid=${kid}, v1=${hmacB64(secret, Buffer.concat([Buffer.from(`${t}.`), body]))}`,
  });
  const idem = (k: string) => ({ 'x-idempotency-key': k });

  it('keys: each kid verifies with its own key only; an unknown kid is refused', async () => {
    expect((await h.send('mwKeys', body, { ...header(MW_A, 'k1'), ...idem('i1') })).status).toBe(202);
    expect((await h.send('mwKeys', body, { ...header(MW_B, 'k2'), ...idem('i2') })).status).toBe(202);
    expect((await h.send('mwKeys', body, { ...header(MW_A, 'k2'), ...idem('i3') })).status).toBe(401);
    expect((await h.send('mwKeys', body, { ...header(MW_A, 'k3'), ...idem('i4') })).status).toBe(401);
    expect(h.rows('mwKeys')).toBe(2);
  });

  it('a plain secret serves every kid; beside keys it serves the kids that have none', async () => {
    expect((await h.send('mwPlain', body, { ...header(MW_PLAIN, 'anything'), ...idem('p1') })).status).toBe(202);
    expect((await h.send('mwBoth', body, { ...header(MW_PLAIN, 'k9'), ...idem('b1') })).status).toBe(202);
    expect((await h.send('mwBoth', body, { ...header(MW_A, 'k1'), ...idem('b2') })).status).toBe(202);
    // kid k1 has its own key: the plain secret does not sign for it.
    expect((await h.send('mwBoth', body, { ...header(MW_PLAIN, 'k1'), ...idem('b3') })).status).toBe(401);
  });

  it('Idempotency-Key is the alias of X-Idempotency-Key; a stale t is refused', async () => {
    expect((await h.send('mwPlain', body, { ...header(MW_PLAIN, 'k'), 'idempotency-key': 'alias-1' })).status).toBe(202);
    expect(h.app.store.db.prepare("SELECT count(*) AS n FROM events WHERE source = 'mwPlain' AND delivery_id = 'alias-1'").get()).toEqual({ n: 1 });
    expect((await h.send('mwPlain', body, { ...header(MW_PLAIN, 'k', T - 301), ...idem('stale') })).status).toBe(401);
  });
});

describe('mailgun: the signature lives in the body', () => {
  const sign = (timestamp: string, token: string, key = MAILGUN_KEY) => ({ timestamp, token, signature: hmacHex(key, timestamp + token) });

  it('a JSON event without event-data.id is a 400; without a signature block a 401', async () => {
    const noId = Buffer.from(JSON.stringify({ signature: sign(String(T), 'tok-1'), 'event-data': { event: 'delivered' } }));
    expect((await h.send('mailgun', noId, {})).status).toBe(400);
    expect((await h.send('mailgun', Buffer.from('{"event-data":{"id":"x","event":"delivered"}}'), {})).status).toBe(401);
    expect(h.rows('mailgun')).toBe(0);
  });

  it('form posts (routes forwarding a message) carry timestamp, token and signature as fields; keyed by Message-Id', async () => {
    const s = sign(String(T), 'tok-route-1');
    const form = new URLSearchParams({
      recipient: 'orders@mg.shop.example',
      sender: 'alice@example.com',
      subject: 'Order',
      'body-plain': 'hi',
      'Message-Id': '<20250501.1@example.com>',
      ...s,
    });
    const r = await h.send('mailgun', Buffer.from(form.toString()), { 'content-type': 'application/x-www-form-urlencoded' });
    expect(r.status, r.text).toBe(200);
    expect(h.event('mailgun')).toMatchObject({ delivery_id: 'message:<20250501.1@example.com>', event_type: 'inbound' });
    const bad = new URLSearchParams({ ...Object.fromEntries(form), signature: sign(String(T), 'tok-route-1', 'other-key').signature });
    expect((await h.send('mailgun', Buffer.from(bad.toString()), { 'content-type': 'application/x-www-form-urlencoded' })).status).toBe(401);
  });

  it("only timestamp + token are signed: the event data is not (Mailgun's scheme; freshness bounds a replay)", async () => {
    // Documents the limit rather than hiding it: a captured signature verifies other event data.
    const s = sign(String(T), 'tok-limit');
    const a = Buffer.from(JSON.stringify({ signature: s, 'event-data': { id: 'limit-a', event: 'delivered' } }));
    const b = Buffer.from(JSON.stringify({ signature: s, 'event-data': { id: 'limit-b', event: 'failed' } }));
    expect((await h.send('mailgun', a, {})).status).toBe(200);
    expect((await h.send('mailgun', b, {})).status).toBe(200);
    h.clock.now = NOW + 301_000;
    try {
      const c = Buffer.from(JSON.stringify({ signature: s, 'event-data': { id: 'limit-c', event: 'failed' } }));
      expect((await h.send('mailgun', c, {})).status).toBe(401);
    } finally {
      // Restored whatever the assertion did: later tests share this harness and its clock.
      h.clock.now = NOW;
    }
  });
});

describe('paddle', () => {
  const body = fixture('paddle.json');

  it('several h1 in one header (secret rotation): the one made with the configured secret verifies', async () => {
    const header = `ts=${T};h1=${hmacHex(PADDLE_OLD, Buffer.concat([Buffer.from(`${T}:`), body]))};h1=${hmacHex(PADDLE_NEW, Buffer.concat([Buffer.from(`${T}:`), body]))}`;
    const r = await h.send('paddle', body, { 'paddle-signature': header });
    expect(r.status, r.text).toBe(200);
    expect(h.event('paddle')?.delivery_id).toBe('evt_01h8bzakzx3hm2fmen703n5q45');
  });

  it('a replay is a new notification_id of the same event_id: a duplicate answered 200, not a conflict', async () => {
    const replay = Buffer.from(body.toString().replace('ntf_01h8bzam1z32agrxjwhjgqk8w6', 'ntf_01h8c0replay0000000000000'));
    const header = (b: Buffer) => ({ 'paddle-signature': `ts=${T};h1=${hmacHex(PADDLE_NEW, Buffer.concat([Buffer.from(`${T}:`), b]))}` });
    const first = await h.send('paddle', body, header(body));
    const again = await h.send('paddle', replay, header(replay));
    // Paddle counts only 200 as delivered: a 409 here would have it retry for three days.
    expect(again.status).toBe(200);
    expect(again.text).toBe(first.text);
    expect(h.rows('paddle')).toBe(1);
    // A real change of content under the same event_id is still a conflict.
    const changed = Buffer.from(body.toString().replace('"status": "paid"', '"status": "billed"'));
    expect(changed.equals(body)).toBe(false);
    expect((await h.send('paddle', changed, header(changed))).status).toBe(409);
    expect(
      h.app.store.db.prepare("SELECT count(*) AS n FROM conflicts WHERE source = 'paddle' AND delivery_id = 'evt_01h8bzakzx3hm2fmen703n5q45'").get(),
    ).toEqual({ n: 1 });
  });

  it('a body without event_id is a 400, stored nowhere', async () => {
    const noId = Buffer.from('{"event_type":"transaction.paid","notification_id":"ntf_x","data":{}}');
    const before = h.rows();
    expect(
      (await h.send('paddle', noId, { 'paddle-signature': `ts=${T};h1=${hmacHex(PADDLE_NEW, Buffer.concat([Buffer.from(`${T}:`), noId]))}` })).status,
    ).toBe(400);
    expect(h.rows()).toBe(before);
  });
});

describe('shopify, asaas, lemon squeezy', () => {
  it('shopify without X-Shopify-Webhook-Id is a 400, stored nowhere', async () => {
    const body = fixture('shopify.json');
    const r = await h.send('shopify', body, {
      'x-shopify-hmac-sha256': createHmac('sha256', 'shpss_secret').update(body).digest('base64'),
      'x-shopify-topic': 'orders/create',
    });
    expect(r.status).toBe(400);
    expect(h.rows('shopify')).toBe(0);
  });

  it('asaas: the access token must match (constant time); 200 on success; a body without id is a 400', async () => {
    const body = fixture('asaas.json');
    const token = h.app.config.sources.get('asaas')?.secrets[0]?.reveal() ?? '';
    expect((await h.send('asaas', body, { 'asaas-access-token': `${token.slice(0, -1)}x` })).status).toBe(401);
    expect((await h.send('asaas', body, {})).status).toBe(401);
    const r = await h.send('asaas', body, { 'asaas-access-token': token });
    expect(r.status).toBe(200);
    expect((await h.send('asaas', Buffer.from('{"event":"PAYMENT_RECEIVED"}'), { 'asaas-access-token': token })).status).toBe(400);
    expect(h.rows('asaas')).toBe(1);
  });

  it('lemon squeezy: event type from meta.event_name when X-Event-Name is absent', async () => {
    const body = Buffer.from('{"meta":{"event_name":"subscription_created"},"data":{"type":"subscriptions","id":"7"}}');
    expect((await h.send('lemon', body, { 'x-signature': hmacHex('ls_signing_secret_123', body) })).status).toBe(202);
    expect(h.event('lemon')).toMatchObject({ delivery_id: `sha256:${sha256Hex(body)}`, event_type: 'subscription_created' });
  });
});
