import { randomBytes, randomUUID } from 'node:crypto';
import { verificationError } from '../errors.js';
import type { Provider } from './types.js';
import { anyMatches, bodyHashId, decodeSignature, header, hmac, jsonBody, requireHeader, stringAt } from './util.js';

/** Lemon Squeezy: `X-Signature` is the hex HMAC-SHA256 of the body with the signing secret. */
export const lemonsqueezy: Provider = {
  name: 'lemonsqueezy',
  signatureHeaders: ['x-signature'],
  // Three retries with exponential backoff, over minutes.
  retryHorizonHours: 1,
  successStatus: 202,
  // The id is the body's hash.
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: [],

  verify(d, source) {
    const presented = [decodeSignature(requireHeader(d, 'X-Signature').trim(), 'hex')];
    if (!anyMatches(presented, source.secrets, (s) => hmac('sha256', s, d.raw))) throw verificationError('signature does not match');
  },

  identify(d) {
    // No delivery id is sent: a retry carries the same bytes, so the body hash dedupes it.
    const type = header(d, 'X-Event-Name') ?? stringAt(jsonBody(d), ['meta', 'event_name']) ?? 'unknown';
    return { deliveryId: bodyHashId(d), eventType: type };
  },

  sign(body, secret) {
    let type = 'order_created';
    try {
      type = stringAt(JSON.parse(body.toString('utf8')), ['meta', 'event_name']) ?? type;
    } catch {
      // Not JSON: keep the default name.
    }
    return { headers: { 'x-signature': hmac('sha256', secret, body).toString('hex'), 'x-event-name': type } };
  },

  sample(now) {
    const id = String(Number.parseInt(randomBytes(3).toString('hex'), 16));
    const at = new Date(now).toISOString();
    return Buffer.from(
      JSON.stringify({
        meta: { event_name: 'order_created', custom_data: { customer_id: 25 }, test_mode: true, webhook_id: randomUUID() },
        data: {
          type: 'orders',
          id,
          attributes: {
            store_id: 1,
            identifier: randomUUID(),
            order_number: Number(id),
            user_name: 'John Doe',
            user_email: 'johndoe@example.com',
            currency: 'USD',
            subtotal: 999,
            total: 1199,
            status: 'paid',
            first_order_item: { product_name: 'Licence', variant_name: 'Default', price: 999 },
            created_at: at,
            updated_at: at,
          },
        },
      }),
    );
  },

  eventTypeAt: () => ({ header: 'x-event-name', body: ['meta', 'event_name'] }),
};
