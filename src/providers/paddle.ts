import { randomBytes } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { Provider } from './types.js';
import { anyMatches, checkTolerance, decodeSignature, hmac, jsonContentHash, parseUnixSeconds, requireHeader, requireJsonObject, stringAt } from './util.js';

/** Paddle's ids: `evt_` / `ntf_` followed by 26 lower-case base32 characters. */
function paddleId(prefix: string): string {
  const alphabet = '0123456789abcdefghjkmnpqrstvwxyz';
  return prefix + [...randomBytes(26)].map((b) => alphabet[b % 32]).join('');
}

/**
 * Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`, HMAC-SHA256 of
 * `ts:body` keyed by the whole `pdl_ntfset_...` secret. Several h1 during secret rotation.
 */
export const paddle: Provider = {
  name: 'paddle',
  signatureHeaders: ['paddle-signature'],
  // Paddle retries for up to 3 days and counts only 200 as delivered.
  retryHorizonHours: 72,
  successStatus: 200,
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: ['toleranceSeconds'],

  verify(d, source) {
    let ts: string | undefined;
    const h1: Buffer[] = [];
    for (const part of requireHeader(d, 'Paddle-Signature').split(';')) {
      const eq = part.indexOf('=');
      if (eq < 0) continue;
      const k = part.slice(0, eq).trim();
      const v = part.slice(eq + 1).trim();
      if (k === 'ts' && ts === undefined) ts = v;
      else if (k === 'h1') h1.push(decodeSignature(v, 'hex'));
    }
    const t = parseUnixSeconds(ts, 'Paddle-Signature ts');
    if (h1.length === 0) throw verificationError('no h1 signature in Paddle-Signature');
    if (!anyMatches(h1, source.secrets, (s) => hmac('sha256', s, `${t}:`, d.raw))) throw verificationError('signature does not match');
    // Paddle's SDK allows 5 s, too tight for real clocks; 300 s unless toleranceSeconds says otherwise.
    checkTolerance(t, d, source);
  },

  identify(d) {
    const body = requireJsonObject(d, 'the event id');
    // event_id, never notification_id: a replay from Paddle's dashboard is a new
    // notification of the same event. The notification id is kept beside it.
    const id = stringAt(body, ['event_id']);
    if (id === undefined) throw payloadError('body has no "event_id"');
    const notificationId = stringAt(body, ['notification_id']);
    return {
      deliveryId: id,
      eventType: stringAt(body, ['event_type']) ?? 'unknown',
      // A replay carries a new notification_id: the same event, not a conflict.
      contentHash: jsonContentHash(body, ['notification_id']),
      ...(notificationId === undefined ? {} : { extra: { notificationId } }),
    };
  },

  sign(body, secret, now) {
    const ts = Math.floor(now / 1000);
    return { headers: { 'paddle-signature': `ts=${ts};h1=${hmac('sha256', secret, `${ts}:`, body).toString('hex')}` } };
  },

  sample(now) {
    const occurred = new Date(now).toISOString();
    return Buffer.from(
      JSON.stringify({
        event_id: paddleId('evt_'),
        event_type: 'transaction.completed',
        occurred_at: occurred,
        notification_id: paddleId('ntf_'),
        data: {
          id: paddleId('txn_'),
          status: 'completed',
          customer_id: 'ctm_01hv6y1jedq4p1n0yqn5ba3ky4',
          currency_code: 'EUR',
          origin: 'web',
          items: [{ price: { id: 'pri_01gsz8x8sawmvhz1pv30nge1ke', description: 'Licence' }, quantity: 1 }],
          details: { totals: { subtotal: '1900', tax: '361', total: '2261', currency_code: 'EUR' } },
          created_at: occurred,
        },
      }),
    );
  },

  eventTypeAt: () => ({ body: ['event_type'] }),
};
