import { randomBytes } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { SourceConfig } from '../config/schema.js';
import type { Delivery, Provider, ResolvedSource } from './types.js';
import { anyMatches, checkTolerance, decodeSignature, header, hmac, jsonBody, parseUnixSeconds, stringAt } from './util.js';

/** `webhook-*` headers, or the same values under Svix's `svix-*` names. */
function swHeader(d: Delivery, name: 'id' | 'timestamp' | 'signature'): string | undefined {
  return header(d, `webhook-${name}`) ?? header(d, `svix-${name}`);
}

/**
 * Base64 (standard or URL-safe, padded or not) of at least one byte, else undefined.
 * Node's own decoder skips characters outside the alphabet and returns what is left,
 * which for `whsec_`, `whsec_=` or a mistyped secret is nothing: an empty HMAC key that
 * anyone can sign with.
 */
function decodeBase64Key(text: string): Buffer | undefined {
  const m = /^([A-Za-z0-9+/]+|[A-Za-z0-9_-]+)(={0,2})$/.exec(text);
  if (m === null) return undefined;
  const [, chars = '', padding = ''] = m;
  // One character past a whole group holds no whole byte; padding only completes a group.
  if (chars.length % 4 === 1 || (padding !== '' && (chars.length + padding.length) % 4 !== 0)) return undefined;
  const bytes = Buffer.from(chars.replaceAll('-', '+').replaceAll('_', '/'), 'base64');
  return bytes.length > 0 ? bytes : undefined;
}

/**
 * The signing key: base64 of the part after `whsec_` (the spec, Svix), or with
 * `"secretEncoding": "utf8"` the whole secret's bytes (Polar's SDK). A secret that is not
 * base64 gives an empty key, which the HMAC refuses (the configuration refuses it first).
 */
export function standardWebhooksKey(secret: string, source: Pick<ResolvedSource, 'options'>): Buffer {
  if (source.options.secretEncoding === 'utf8') return Buffer.from(secret, 'utf8');
  return decodeBase64Key(secret.startsWith('whsec_') ? secret.slice(6) : secret) ?? Buffer.alloc(0);
}

/** Why a Standard Webhooks secret gives no key bytes; undefined when it gives some. */
export function standardWebhooksKeyProblem(secret: string, options: SourceConfig): string | undefined {
  if (options.secretEncoding === 'utf8' || standardWebhooksKey(secret, { options }).length > 0) return undefined;
  return (
    'is not a usable Standard Webhooks key: the part after "whsec_" must be base64 of the key bytes, and this decodes to none ' +
    '(try: copy the whole signing secret from the sender\'s dashboard; "secretEncoding": "utf8" only if the sender signs with the secret\'s own bytes, as Polar does)'
  );
}

/** Standard Webhooks (Svix, Clerk, Resend, Polar): HMAC-SHA256 of `id.timestamp.body`, base64. */
export const standardWebhooks: Provider = {
  name: 'standard-webhooks',
  signatureHeaders: ['webhook-signature', 'svix-signature'],
  // Svix retries for about 28 hours; the spec suggests days. Keep keys for three.
  retryHorizonHours: 72,
  successStatus: 202,
  // webhook-id is signed.
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: ['toleranceSeconds', 'secretEncoding'],
  keyProblem: standardWebhooksKeyProblem,

  verify(d, source) {
    const id = swHeader(d, 'id');
    const signature = swHeader(d, 'signature');
    if (id === undefined || signature === undefined) throw verificationError('missing webhook-id or webhook-signature header');
    const ts = parseUnixSeconds(swHeader(d, 'timestamp'), 'webhook-timestamp');
    const presented: Buffer[] = [];
    for (const entry of signature.split(' ')) {
      const comma = entry.indexOf(',');
      // Only v1 (symmetric) signatures; v1a and others are not ours to check.
      if (comma > 0 && entry.slice(0, comma) === 'v1') presented.push(decodeSignature(entry.slice(comma + 1), 'base64'));
    }
    if (presented.length === 0) throw verificationError('no v1 signature in webhook-signature');
    const ok = anyMatches(presented, source.secrets, (s) => hmac('sha256', standardWebhooksKey(s, source), `${id}.${ts}.`, d.raw));
    if (!ok) throw verificationError('signature does not match');
    checkTolerance(ts, d, source);
  },

  identify(d) {
    const id = swHeader(d, 'id');
    if (id === undefined) throw payloadError('missing webhook-id header');
    return { deliveryId: id, eventType: stringAt(jsonBody(d), ['type']) ?? 'unknown' };
  },

  sign(body, secret, now, source) {
    const id = `msg_${randomBytes(12).toString('hex')}`;
    const ts = Math.floor(now / 1000);
    const sig = hmac('sha256', standardWebhooksKey(secret, source), `${id}.${ts}.`, body).toString('base64');
    return { headers: { 'webhook-id': id, 'webhook-timestamp': String(ts), 'webhook-signature': `v1,${sig}` } };
  },

  sample() {
    return Buffer.from(
      JSON.stringify({ type: 'subscription.created', timestamp: new Date().toISOString(), data: { id: `sub_${randomBytes(6).toString('hex')}` } }),
    );
  },

  eventTypeAt: () => ({ body: ['type'] }),
};
