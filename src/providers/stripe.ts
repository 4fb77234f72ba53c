import { randomBytes } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { Provider } from './types.js';
import { anyMatches, checkTolerance, decodeSignature, hmac, jsonContentHash, parseUnixSeconds, requireHeader, requireJsonObject, stringAt } from './util.js';

/** `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`; HMAC-SHA256 of `t.body` keyed by the whole whsec_ string. */
export const stripe: Provider = {
  name: 'stripe',
  signatureHeaders: ['stripe-signature'],
  retryHorizonHours: 72,
  successStatus: 202,
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: ['toleranceSeconds'],

  verify(d, source) {
    const parts = requireHeader(d, 'Stripe-Signature').split(',');
    let t: string | undefined;
    const v1: Buffer[] = [];
    for (const part of parts) {
      const eq = part.indexOf('=');
      if (eq < 0) continue;
      const k = part.slice(0, eq).trim();
      const v = part.slice(eq + 1).trim();
      if (k === 't' && t === undefined) t = v;
      else if (k === 'v1') v1.push(decodeSignature(v, 'hex'));
      // Other schemes (v0) are ignored, as Stripe's own library does.
    }
    const ts = parseUnixSeconds(t, 'Stripe-Signature timestamp');
    if (v1.length === 0) throw verificationError('no v1 signature in Stripe-Signature');
    if (!anyMatches(v1, source.secrets, (s) => hmac('sha256', s, `${ts}.`, d.raw))) throw verificationError('signature does not match');
    checkTolerance(ts, d, source);
  },

  identify(d) {
    const body = requireJsonObject(d, 'the event id');
    const id = stringAt(body, ['id']);
    if (id === undefined) throw payloadError('body has no "id"');
    // pending_webhooks counts the endpoints still owed this event: it can change between retries.
    return { deliveryId: id, eventType: stringAt(body, ['type']) ?? 'unknown', contentHash: jsonContentHash(body, ['pending_webhooks']) };
  },

  sign(body, secret, now) {
    const t = Math.floor(now / 1000);
    return { headers: { 'stripe-signature': `t=${t},v1=${hmac('sha256', secret, `${t}.`, body).toString('hex')}` } };
  },

  sample(now) {
    const created = Math.floor(now / 1000);
    const id = randomBytes(8).toString('hex');
    return Buffer.from(
      JSON.stringify({
        id: `evt_test_${id}`,
        object: 'event',
        type: 'checkout.session.completed',
        created,
        livemode: false,
        data: { object: { id: `cs_test_${id}`, object: 'checkout.session', amount_total: 1900, currency: 'eur' } },
      }),
    );
  },

  eventTypeAt: () => ({ body: ['type'] }),
};
