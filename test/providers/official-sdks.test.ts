import { randomUUID } from 'node:crypto';
import { sign as octokitSign } from '@octokit/webhooks-methods';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixture, startSources, type Harness } from './harness.js';

/**
 * Stripe, Standard Webhooks and GitHub deliveries signed at run time with the senders'
 * own libraries, as a real sender would, and posted through the real server.
 */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);
const STRIPE_OLD = 'whsec_old_0123456789abcdef0123456789abcdef';
const STRIPE_NEW = 'whsec_new_fedcba9876543210fedcba9876543210';
const SW_OLD = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const SW_NEW = 'whsec_c2Vjb25kLXJvdGF0ZWQtc2VjcmV0LTMyLWJ5dGVzISE=';
const POLAR = 'polar_whs_3kVq8yQd1nE7pXc0Lr5tW2aZ9bM4sH6jK1uG8fD0';
const GH_OLD = 'gh-old-secret';
const GH_NEW = 'gh-new-secret';

const stripeEvent = (id: string) => Buffer.from(fixture('stripe.json').toString('utf8').replace('evt_1NG8Du2eZvKYlo2CUI79vXWy', id));
const stripeHeader = (body: Buffer, secret: string, atMs: number) =>
  Stripe.webhooks.generateTestHeaderString({ payload: body.toString('utf8'), secret, timestamp: Math.floor(atMs / 1000) });
const swHeaders = (secret: string, id: string, atMs: number, body: Buffer, prefix = 'webhook') => ({
  [`${prefix}-id`]: id,
  [`${prefix}-timestamp`]: String(Math.floor(atMs / 1000)),
  [`${prefix}-signature`]: new Webhook(secret).sign(id, new Date(atMs), body),
});

let h: Harness;
beforeAll(async () => {
  h = await startSources(
    {
      stripe: { provider: 'stripe', secrets: [STRIPE_OLD, STRIPE_NEW] },
      sw: { provider: 'standard-webhooks', secrets: [SW_OLD, SW_NEW] },
      polar: { provider: 'standard-webhooks', secret: POLAR, secretEncoding: 'utf8' },
      polarBase64: { provider: 'standard-webhooks', secret: POLAR },
      // By delivery id alone: one push reaching two hooks is one body (body dedupe: test/http/body-dedupe.test.ts).
      github: { provider: 'github', secrets: [GH_OLD, GH_NEW], dedupeByBody: false },
    },
    NOW,
  );
});
afterAll(() => h.close());

describe('stripe, signed by stripe.webhooks.generateTestHeaderString', () => {
  it('is accepted with one row; a duplicate gets the same answer and no new row', async () => {
    const body = stripeEvent('evt_sdk_1');
    const headers = { 'stripe-signature': stripeHeader(body, STRIPE_OLD, NOW) };
    const first = await h.send('stripe', body, headers);
    expect(first.status).toBe(202);
    expect(JSON.parse(first.text)).toMatchObject({ status: 'accepted' });
    const again = await h.send('stripe', body, headers);
    expect(again.status).toBe(202);
    expect(again.text).toBe(first.text);
    expect(h.rows('stripe')).toBe(1);
    expect(h.event('stripe')).toMatchObject({ delivery_id: 'evt_sdk_1', event_type: 'checkout.session.completed', duplicates: 1 });
  });

  it('rotation: the old and the new secret are both accepted; another secret is not', async () => {
    const a = stripeEvent('evt_sdk_old');
    const b = stripeEvent('evt_sdk_new');
    expect((await h.send('stripe', a, { 'stripe-signature': stripeHeader(a, STRIPE_OLD, NOW) })).status).toBe(202);
    expect((await h.send('stripe', b, { 'stripe-signature': stripeHeader(b, STRIPE_NEW, NOW) })).status).toBe(202);
    const c = stripeEvent('evt_sdk_other');
    expect((await h.send('stripe', c, { 'stripe-signature': stripeHeader(c, 'whsec_someone_else', NOW) })).status).toBe(401);
  });

  it('a timestamp 301 s old or 301 s ahead is refused; 299 s old is accepted', async () => {
    const before = h.rows('stripe');
    for (const skew of [-301_000, 301_000]) {
      const body = stripeEvent(`evt_sdk_skew_${skew}`);
      expect((await h.send('stripe', body, { 'stripe-signature': stripeHeader(body, STRIPE_OLD, NOW + skew) })).status).toBe(401);
    }
    expect(h.rows('stripe')).toBe(before);
    const body = stripeEvent('evt_sdk_299');
    expect((await h.send('stripe', body, { 'stripe-signature': stripeHeader(body, STRIPE_OLD, NOW - 299_000) })).status).toBe(202);
  });
});

describe('standard webhooks, signed by standardwebhooks Webhook.sign', () => {
  it('is accepted with one row; a duplicate is recognised', async () => {
    const body = fixture('standard-webhooks.json');
    const headers = swHeaders(SW_OLD, 'msg_sdk_1', NOW, body);
    const first = await h.send('sw', body, headers);
    expect(first.status).toBe(202);
    expect((await h.send('sw', body, headers)).text).toBe(first.text);
    expect(h.rows('sw')).toBe(1);
    expect(h.event('sw')).toMatchObject({ delivery_id: 'msg_sdk_1', event_type: 'email.delivered' });
  });

  it('rotation: both secrets accepted, and a header carrying both signatures too', async () => {
    const body = fixture('standard-webhooks.json');
    expect((await h.send('sw', body, swHeaders(SW_OLD, 'msg_sdk_old', NOW, body))).status).toBe(202);
    expect((await h.send('sw', body, swHeaders(SW_NEW, 'msg_sdk_new', NOW, body))).status).toBe(202);
    const both = `${new Webhook('whsec_c29tZW9uZS1lbHNlcy1zZWNyZXQtMzItYnl0ZXMhIQ==').sign('msg_sdk_both', new Date(NOW), body)} ${new Webhook(SW_NEW).sign('msg_sdk_both', new Date(NOW), body)}`;
    expect((await h.send('sw', body, { ...swHeaders(SW_NEW, 'msg_sdk_both', NOW, body), 'webhook-signature': both })).status).toBe(202);
    expect((await h.send('sw', body, swHeaders('whsec_c29tZW9uZS1lbHNlcy1zZWNyZXQtMzItYnl0ZXMhIQ==', 'msg_sdk_x', NOW, body))).status).toBe(401);
  });

  it('svix-* header names are accepted', async () => {
    const body = fixture('standard-webhooks.json');
    expect((await h.send('sw', body, swHeaders(SW_OLD, 'msg_sdk_svix', NOW, body, 'svix'))).status).toBe(202);
  });

  it('stale or future timestamps (±301 s) are refused and store nothing', async () => {
    const body = fixture('standard-webhooks.json');
    const before = h.rows();
    for (const skew of [-301_000, 301_000]) expect((await h.send('sw', body, swHeaders(SW_OLD, `msg_sdk_skew${skew}`, NOW + skew, body))).status).toBe(401);
    expect(h.rows()).toBe(before);
  });

  it("Polar's key handling: the whole secret's UTF-8 bytes with secretEncoding utf8", async () => {
    // Polar's SDK hands standardwebhooks the base64 of the secret's own bytes.
    const polarKey = Buffer.from(POLAR, 'utf8').toString('base64');
    const body = Buffer.from('{"type":"order.paid","data":{"id":"ord_1"}}');
    const headers = swHeaders(polarKey, 'msg_polar_1', NOW, body);
    expect((await h.send('polar', body, headers)).status).toBe(202);
    expect((await h.send('polarBase64', body, headers)).status).toBe(401);
  });
});

describe('github, signed by @octokit/webhooks-methods sign', () => {
  const body = fixture('github.json');
  const headers = async (secret: string, guid: string, hook: string) => ({
    'x-hub-signature-256': await octokitSign(secret, body.toString('utf8')),
    'x-github-delivery': guid,
    'x-github-hook-id': hook,
    'x-github-event': 'push',
  });

  it('is accepted; the delivery GUID is scoped by hook id; a redelivery is a duplicate', async () => {
    const guid = randomUUID();
    const first = await h.send('github', body, await headers(GH_OLD, guid, '101'));
    expect(first.status).toBe(202);
    expect(h.event('github')).toMatchObject({ delivery_id: `101:${guid}`, event_type: 'push' });
    // The same GUID reaches a second hook: its own delivery.
    expect((await h.send('github', body, await headers(GH_OLD, guid, '202'))).status).toBe(202);
    // A manual redelivery keeps the GUID: duplicate, same answer.
    expect((await h.send('github', body, await headers(GH_OLD, guid, '101'))).text).toBe(first.text);
    expect(h.rows('github')).toBe(2);
  });

  it('rotation: old and new secrets accepted, another refused', async () => {
    expect((await h.send('github', body, await headers(GH_NEW, randomUUID(), '101'))).status).toBe(202);
    expect((await h.send('github', body, await headers(GH_OLD, randomUUID(), '101'))).status).toBe(202);
    expect((await h.send('github', body, await headers('not-the-secret', randomUUID(), '101'))).status).toBe(401);
  });
});
