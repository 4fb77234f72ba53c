import { randomBytes, randomUUID } from 'node:crypto';
import { verificationError } from '../errors.js';
import type { Secret } from '../config/secret.js';
import type { Provider, ResolvedSource } from './types.js';
import {
  anyMatches,
  bodyHashId,
  checkTolerance,
  decodeSignature,
  header,
  hmac,
  jsonBody,
  parseUnixSeconds,
  requireHeader,
  sha256Hex,
  stringAt,
} from './util.js';

/** The secrets that may have signed for `kid`: its own key, else the plain secret(s), which serve every kid. */
function secretsFor(kid: string | undefined, source: ResolvedSource): readonly Secret[] {
  const keyed = kid === undefined ? undefined : source.keys.get(kid);
  if (keyed !== undefined) return [keyed];
  // Plain secrets are the ones that are not some kid's key. With only `keys` configured, an
  // unknown kid has no secret: refused, never tried against the other kids' keys.
  const keys = new Set(source.keys.values());
  return source.secrets.filter((s) => !keys.has(s));
}

/**
 * MailWebhook: `X-MailWebhook-Signature: t=<unix>, kid=<kid>, v1=<base64>`, HMAC-SHA256 of
 * `t.body`; the secret is chosen by kid (`"keys": {"<kid>": "<secret>"}` on the source).
 */
export const mailwebhook: Provider = {
  name: 'mailwebhook',
  signatureHeaders: ['x-mailwebhook-signature'],
  // Six attempts within the hour; an event can be replayed from the dashboard later with
  // the same idempotency key. Keep keys as long as the generic default.
  retryHorizonHours: 72,
  successStatus: 202,
  // X-Idempotency-Key is outside the signed `t.body`, but the signed timestamp bounds a replay
  // to toleranceSeconds, and one message reaches several routes as one body under several keys.
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: ['keys', 'toleranceSeconds'],

  verify(d, source) {
    let t: string | undefined;
    let kid: string | undefined;
    const v1: Buffer[] = [];
    for (const part of requireHeader(d, 'X-MailWebhook-Signature').split(',')) {
      const eq = part.indexOf('=');
      if (eq < 0) continue;
      const k = part.slice(0, eq).trim();
      const v = part.slice(eq + 1).trim();
      if (k === 't' && t === undefined) t = v;
      else if (k === 'kid' && kid === undefined) kid = v;
      else if (k === 'v1') v1.push(decodeSignature(v, 'base64'));
    }
    const ts = parseUnixSeconds(t, 'X-MailWebhook-Signature t');
    if (v1.length === 0) throw verificationError('no v1 signature in X-MailWebhook-Signature');
    const secrets = secretsFor(kid, source);
    if (secrets.length === 0) throw verificationError(`no key configured for kid "${kid ?? ''}"`);
    if (!anyMatches(v1, secrets, (s) => hmac('sha256', s, `${ts}.`, d.raw))) throw verificationError('signature does not match');
    checkTolerance(ts, d, source);
  },

  identify(d) {
    // sha256(message_id|route_id): the same across retries and replays of one message.
    const id = header(d, 'X-Idempotency-Key') ?? header(d, 'Idempotency-Key') ?? bodyHashId(d);
    const body = jsonBody(d);
    const type = stringAt(body, ['type']) ?? stringAt(body, ['schema', 'name']) ?? 'email.received';
    return { deliveryId: id, eventType: type };
  },

  sign(body, secret, now, source) {
    const t = Math.floor(now / 1000);
    let kid = 'default';
    for (const [k, s] of source.keys) if (s.reveal() === secret) kid = k;
    const messageId = `<${randomUUID()}@example.com>`;
    const key = sha256Hex(`${messageId}|${randomUUID()}`);
    return {
      headers: {
        'x-mailwebhook-signature': `t=${t}, kid=${kid}, v1=${hmac('sha256', secret, `${t}.`, body).toString('base64')}`,
        'x-idempotency-key': key,
        'idempotency-key': key,
        'content-type': 'application/json',
      },
    };
  },

  sample(now) {
    const at = new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z');
    return Buffer.from(
      JSON.stringify({
        schema: { name: 'mailwebhook.generic', version: '1' },
        event: { id: randomUUID(), project_id: randomUUID(), route_id: randomUUID(), created_at: at },
        message: {
          message_id: `<order-${randomBytes(4).toString('hex')}@shop.example>`,
          subject: 'Order confirmation',
          date: at,
          from: [{ name: 'Shop', email: 'orders@shop.example' }],
          to: [{ name: '', email: 'inbox@in.mailwebhook.example' }],
        },
        body: { text: 'Thank you for your order.', html: null },
        attachments: [],
      }),
    );
  },

  eventTypeAt: () => ({ body: ['type'] }),
};
