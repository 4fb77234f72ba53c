import { randomBytes, randomUUID } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { Provider } from './types.js';
import { anyMatches, decodeSignature, header, hmac, requireHeader } from './util.js';

/**
 * Shopify: `X-Shopify-Hmac-Sha256` is the base64 HMAC-SHA256 of the body, keyed by the
 * app's client secret. No timestamp is signed (`X-Shopify-Triggered-At` is informative).
 */
export const shopify: Provider = {
  name: 'shopify',
  signatureHeaders: ['x-shopify-hmac-sha256'],
  // Shopify retries a failed delivery 8 times over about 4 hours.
  retryHorizonHours: 4,
  successStatus: 202,
  // X-Shopify-Webhook-Id is not signed, nor is any timestamp.
  unsignedDeliveryId: true,
  needsSecret: true,
  fields: [],

  verify(d, source) {
    const presented = [decodeSignature(requireHeader(d, 'X-Shopify-Hmac-Sha256').trim(), 'base64')];
    if (!anyMatches(presented, source.secrets, (s) => hmac('sha256', s, d.raw))) throw verificationError('signature does not match');
  },

  identify(d) {
    // The webhook id is what a retry keeps; the event id is shared by every subscription
    // that the same event reaches, so it is kept beside it rather than used to dedupe.
    const webhookId = header(d, 'X-Shopify-Webhook-Id');
    if (webhookId === undefined) throw payloadError('missing X-Shopify-Webhook-Id header');
    const extra: Record<string, string> = {};
    const eventId = header(d, 'X-Shopify-Event-Id');
    if (eventId !== undefined) extra.eventId = eventId;
    const shop = header(d, 'X-Shopify-Shop-Domain');
    if (shop !== undefined) extra.shopDomain = shop;
    return {
      deliveryId: webhookId,
      eventType: header(d, 'X-Shopify-Topic') ?? 'unknown',
      ...(Object.keys(extra).length > 0 ? { extra } : {}),
    };
  },

  sign(body, secret, now) {
    return {
      headers: {
        'x-shopify-hmac-sha256': hmac('sha256', secret, body).toString('base64'),
        'x-shopify-topic': 'orders/create',
        'x-shopify-webhook-id': randomUUID(),
        'x-shopify-event-id': randomUUID(),
        'x-shopify-shop-domain': 'receiver-test.myshopify.com',
        'x-shopify-api-version': '2025-07',
        'x-shopify-triggered-at': new Date(now).toISOString(),
      },
    };
  },

  sample(now) {
    const id = Number.parseInt(randomBytes(6).toString('hex'), 16);
    return Buffer.from(
      JSON.stringify({
        id,
        admin_graphql_api_id: `gid://shopify/Order/${id}`,
        name: '#1001',
        email: 'jon@example.com',
        created_at: new Date(now).toISOString(),
        currency: 'EUR',
        total_price: '19.00',
        financial_status: 'paid',
        line_items: [{ id: id + 1, title: 'Licence', quantity: 1, price: '19.00', sku: 'LIC-1' }],
      }),
    );
  },

  eventTypeAt: () => ({ header: 'x-shopify-topic' }),
};
