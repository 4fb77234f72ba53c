import { describe, expect, it } from 'vitest';
import { expectVectorAndMutations, startSources, vector, VECTORS, type SignedCase } from './harness.js';

/**
 * Every known-good vector in provider-vectors.json, through the real HTTP server: it is
 * accepted, and each one-byte change of body, secret, timestamp or signature is a 401
 * that stores nothing. `now` is injected near each vector's timestamp.
 */

const str = (v: Record<string, unknown>, k: string): string => {
  const x = v[k];
  if (typeof x !== 'string') throw new Error(`vector field ${k} is not a string`);
  return x;
};
const FORM = 'application/x-www-form-urlencoded';
const COVERED = new Set<string>();
const cover = (name: string) => {
  COVERED.add(name);
  return vector(name);
};

describe('provider vectors', () => {
  it('stripe: vector, mutations, and the two-v1 rotation header', async () => {
    const v = cover('stripe');
    const now = (v.timestamp as number) * 1000 + 10_000;
    const c: SignedCase = {
      options: { provider: 'stripe' },
      secret: str(v, 'secret'),
      body: Buffer.from(str(v, 'body')),
      headers: { 'stripe-signature': str(v, 'Stripe-Signature') },
      signedHeaders: ['stripe-signature'],
      expectStatus: 202,
    };
    const { refused } = await expectVectorAndMutations(c, now);
    expect(refused).toBeGreaterThan(100);
    // During a roll Stripe signs with both secrets: either one alone accepts the header.
    const h = await startSources(
      {
        old: { provider: 'stripe', secret: str(v, 'secret') },
        new: { provider: 'stripe', secret: str(v, 'rotation_new_secret') },
        both: { provider: 'stripe', secrets: [str(v, 'rotation_new_secret'), str(v, 'secret')] },
      },
      now,
    );
    try {
      for (const s of ['old', 'new', 'both']) expect((await h.send(s, c.body, { 'stripe-signature': str(v, 'rotation_header_2_v1') })).status).toBe(202);
      expect((await h.send('new', c.body, c.headers)).status).toBe(401);
      // 301 s later the same header is stale.
      h.clock.now = (v.timestamp as number) * 1000 + 301_000;
      const stale = await h.send('both', c.body, c.headers);
      expect(stale.status).toBe(401);
      expect(stale.text).toMatch(/tolerance/);
      expect(h.rows()).toBe(3);
    } finally {
      await h.close();
    }
  });

  it('standard webhooks: the spec vector, mutations of body, secret, id, timestamp and signature, and rotation', async () => {
    const v = cover('standardwebhooks');
    const now = (v.timestamp as number) * 1000 + 10_000;
    const headers = { 'webhook-id': str(v, 'id'), 'webhook-timestamp': String(v.timestamp), 'webhook-signature': str(v, 'webhook-signature') };
    await expectVectorAndMutations(
      {
        options: { provider: 'standard-webhooks' },
        secret: str(v, 'secret'),
        body: Buffer.from(str(v, 'body')),
        headers,
        signedHeaders: ['webhook-id', 'webhook-timestamp', 'webhook-signature'],
        expectStatus: 202,
      },
      now,
    );
    const h = await startSources({ second: { provider: 'standard-webhooks', secret: str(v, 'rotation_secret_2') } }, now);
    try {
      expect((await h.send('second', Buffer.from(str(v, 'body')), { ...headers, 'webhook-signature': str(v, 'rotation_header') })).status).toBe(202);
      expect((await h.send('second', Buffer.from(str(v, 'body')), headers)).status).toBe(401);
    } finally {
      await h.close();
    }
  });

  it('svix: the vector under svix-* header names, and the same values under webhook-* names', async () => {
    const v = cover('svix');
    const now = (v.timestamp as number) * 1000 + 10_000;
    const headers = { 'svix-id': str(v, 'id'), 'svix-timestamp': String(v.timestamp), 'svix-signature': str(v, 'svix-signature') };
    await expectVectorAndMutations(
      {
        options: { provider: 'standard-webhooks' },
        secret: str(v, 'secret'),
        body: Buffer.from(str(v, 'body')),
        headers,
        signedHeaders: ['svix-id', 'svix-timestamp', 'svix-signature'],
        expectStatus: 202,
      },
      now,
    );
    const h = await startSources({ sw: { provider: 'standard-webhooks', secret: str(v, 'secret') } }, now);
    try {
      const r = await h.send('sw', Buffer.from(str(v, 'body')), {
        'webhook-id': str(v, 'id'),
        'webhook-timestamp': String(v.timestamp),
        'webhook-signature': str(v, 'svix-signature'),
      });
      expect(r.status).toBe(202);
      expect(h.event('sw')?.event_type).toBe('user.created');
    } finally {
      await h.close();
    }
  });

  it('github: both vectors and their mutations (the delivery GUID is not signed and is added)', async () => {
    const v = cover('github');
    const second = v.second as Record<string, unknown>;
    for (const [secret, body, sig] of [
      [str(v, 'secret'), str(v, 'body'), str(v, 'X-Hub-Signature-256')],
      [str(second, 'secret'), str(second, 'body'), str(second, 'X-Hub-Signature-256')],
    ] as const) {
      await expectVectorAndMutations(
        {
          options: { provider: 'github' },
          secret,
          body: Buffer.from(body),
          headers: { 'x-hub-signature-256': sig, 'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958', 'x-github-event': 'ping' },
          signedHeaders: ['x-hub-signature-256'],
          expectStatus: 202,
        },
        Date.now(),
      );
    }
  });

  it('twilio: form vector with the URL from publicUrl, the query signed too, the :443 form of the URL, and the Caller/From variant', async () => {
    const v = cover('twilio');
    const url = new URL(str(v, 'url'));
    const publicUrl = `${url.origin}${url.pathname}`;
    const params = v.params as Record<string, string>;
    const body = Buffer.from(new URLSearchParams(params).toString());
    const headers = { 'x-twilio-signature': str(v, 'X-Twilio-Signature'), 'content-type': FORM };
    await expectVectorAndMutations(
      {
        options: { provider: 'twilio', publicUrl },
        secret: str(v, 'auth_token'),
        body,
        headers,
        query: url.search,
        mutateQuery: true,
        signedHeaders: ['x-twilio-signature'],
        expectStatus: 202,
      },
      Date.now(),
    );
    const variant = Buffer.from(new URLSearchParams({ ...params, Caller: '+14158675309', From: '+14158675309' }).toString());
    const h = await startSources(
      {
        tw: { provider: 'twilio', publicUrl, secret: str(v, 'auth_token') },
        port: { provider: 'twilio', publicUrl: `https://mycompany.com:443${url.pathname}`, secret: str(v, 'auth_token') },
        fixed: { provider: 'twilio', publicUrl: str(v, 'url'), secret: str(v, 'auth_token') },
      },
      Date.now(),
    );
    try {
      expect((await h.send('tw', variant, { ...headers, 'x-twilio-signature': str(v, 'variant_Caller_From_14158675309') }, url.search)).status).toBe(202);
      expect((await h.send('tw', variant, headers, url.search)).status).toBe(401);
      expect((await h.send('port', body, headers, url.search)).status).toBe(202);
      // publicUrl with its own query is used as is, whatever query the request carries.
      expect((await h.send('fixed', body, headers, '')).status).toBe(202);
      expect((await h.send('tw', body, headers, '')).status).toBe(401);
    } finally {
      await h.close();
    }
  });

  it('twilio: JSON vector, bodySHA256 in the signed URL', async () => {
    const v = cover('twilio').json_variant as Record<string, unknown>;
    const url = new URL(str(v, 'url'));
    await expectVectorAndMutations(
      {
        options: { provider: 'twilio', publicUrl: `${url.origin}${url.pathname}` },
        secret: str(vector('twilio'), 'auth_token'),
        body: Buffer.from(str(v, 'body')),
        headers: { 'x-twilio-signature': str(v, 'X-Twilio-Signature'), 'content-type': 'application/json' },
        query: url.search,
        mutateQuery: true,
        signedHeaders: ['x-twilio-signature'],
        expectStatus: 202,
      },
      Date.now(),
    );
  });

  it('paddle: vector, mutations of ts, h1, body and secret; 200 as Paddle expects', async () => {
    const v = cover('paddle');
    await expectVectorAndMutations(
      {
        options: { provider: 'paddle' },
        secret: str(v, 'secret'),
        body: Buffer.from(str(v, 'body')),
        headers: { 'paddle-signature': str(v, 'Paddle-Signature') },
        signedHeaders: ['paddle-signature'],
        expectStatus: 200,
      },
      (v.timestamp as number) * 1000 + 2_000,
    );
  });

  it('slack: the documented slash-command vector and its mutations', async () => {
    const v = cover('slack');
    await expectVectorAndMutations(
      {
        options: { provider: 'slack' },
        secret: str(v, 'secret'),
        body: Buffer.from(str(v, 'body')),
        headers: { 'x-slack-signature': str(v, 'X-Slack-Signature'), 'x-slack-request-timestamp': str(v, 'timestamp'), 'content-type': FORM },
        signedHeaders: ['x-slack-signature', 'x-slack-request-timestamp'],
        expectStatus: 202,
      },
      Number(str(v, 'timestamp')) * 1000 + 10_000,
    );
  });

  it('shopify: vector and mutations', async () => {
    const v = cover('shopify_nodecrypto');
    await expectVectorAndMutations(
      {
        options: { provider: 'shopify' },
        secret: str(v, 'secret'),
        body: Buffer.from(str(v, 'body')),
        headers: {
          'x-shopify-hmac-sha256': str(v, 'X-Shopify-Hmac-Sha256'),
          'x-shopify-webhook-id': 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
          'x-shopify-topic': 'orders/create',
        },
        signedHeaders: ['x-shopify-hmac-sha256'],
        expectStatus: 202,
      },
      Date.now(),
    );
  });

  it('lemon squeezy: vector and mutations', async () => {
    const v = cover('lemonsqueezy_nodecrypto');
    await expectVectorAndMutations(
      {
        options: { provider: 'lemonsqueezy' },
        secret: str(v, 'secret'),
        body: Buffer.from(str(v, 'body')),
        headers: { 'x-signature': str(v, 'X-Signature') },
        signedHeaders: ['x-signature'],
        expectStatus: 202,
      },
      Date.now(),
    );
  });

  it('mailgun: vector in a JSON body; every byte of the signature block (timestamp, token, signature) matters; 200', async () => {
    const v = cover('mailgun_nodecrypto');
    const sig = v.signature as Record<string, string>;
    const block = JSON.stringify({ timestamp: sig.timestamp, token: sig.token, signature: sig.signature });
    const body = Buffer.from(`{"signature":${block},"event-data":{"id":"vector-event-1","event":"delivered"}}`);
    const start = body.indexOf(block);
    await expectVectorAndMutations(
      {
        options: { provider: 'mailgun' },
        secret: str(v, 'signing_key'),
        body,
        headers: {},
        signedHeaders: [],
        // Mailgun signs only timestamp + token: these are the bytes the signature protects.
        bodyPositions: [...Array(block.length).keys()].map((i) => start + i),
        expectStatus: 200,
      },
      Number(sig.timestamp) * 1000 + 10_000,
    );
  });

  it('generic hmac-sha256: hex and base64 vectors and their mutations', async () => {
    const v = cover('generic_nodecrypto');
    for (const encoding of ['hex', 'base64'] as const) {
      await expectVectorAndMutations(
        {
          options: { provider: 'hmac-sha256', header: 'X-Signature', encoding },
          secret: str(v, 'secret'),
          body: Buffer.from(str(v, 'body')),
          headers: { 'x-signature': str(v, encoding) },
          signedHeaders: ['x-signature'],
          expectStatus: 202,
        },
        Date.now(),
      );
    }
  });

  it('covers every vector in the file', () => {
    expect([...COVERED].sort()).toEqual(Object.keys(VECTORS).sort());
  });
});
