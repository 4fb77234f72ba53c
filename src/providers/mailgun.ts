import { randomBytes } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { Delivery, Provider } from './types.js';
import { anyMatches, bodyHashId, checkTolerance, decodeSignature, hmac, jsonBody, jsonContentHash, parseUnixSeconds, stringAt } from './util.js';

interface MailgunSignature {
  timestamp: string | undefined;
  token: string | undefined;
  signature: string | undefined;
}

/**
 * The signature lives in the body: `signature.{timestamp,token,signature}` in JSON
 * webhooks, or top-level `timestamp`, `token`, `signature` fields in form posts (routes).
 */
function readSignature(d: Delivery): { sig: MailgunSignature; json: unknown; form: URLSearchParams | undefined } {
  const json = jsonBody(d);
  if (json !== undefined && json !== null && typeof json === 'object') {
    return {
      sig: {
        timestamp: stringAt(json, ['signature', 'timestamp']),
        token: stringAt(json, ['signature', 'token']),
        signature: stringAt(json, ['signature', 'signature']),
      },
      json,
      form: undefined,
    };
  }
  const form = new URLSearchParams(d.raw.toString('utf8'));
  return {
    sig: { timestamp: form.get('timestamp') ?? undefined, token: form.get('token') ?? undefined, signature: form.get('signature') ?? undefined },
    json: undefined,
    form,
  };
}

/**
 * Mailgun: HMAC-SHA256 of `timestamp + token`, hex, keyed by the webhook signing key.
 * Only those two values are signed, not the event data; the timestamp must be fresh.
 */
export const mailgun: Provider = {
  name: 'mailgun',
  // The signature travels inside the body.
  signatureHeaders: [],
  // Retries for about 8 hours; only 200 counts as success (406 stops retries).
  retryHorizonHours: 8,
  successStatus: 200,
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: ['toleranceSeconds'],

  verify(d, source) {
    const { sig } = readSignature(d);
    if (sig.token === undefined || sig.signature === undefined)
      throw verificationError('body has no Mailgun signature (signature.timestamp, token, signature)');
    const ts = parseUnixSeconds(sig.timestamp, 'signature.timestamp');
    const presented = [decodeSignature(sig.signature, 'hex')];
    const token = sig.token;
    if (!anyMatches(presented, source.secrets, (s) => hmac('sha256', s, `${sig.timestamp}${token}`))) throw verificationError('signature does not match');
    // Freshness is the only replay bound the scheme gives: the event data is not signed.
    checkTolerance(ts, d, source);
  },

  identify(d) {
    const { json, form } = readSignature(d);
    if (json !== undefined) {
      // event-data.id is the event's own id; the signature block changes on every attempt.
      const id = stringAt(json, ['event-data', 'id']);
      if (id === undefined) throw payloadError('body has no "event-data.id"');
      // Each attempt is signed afresh: the signature block is not part of the event's content.
      return {
        deliveryId: id,
        eventType: stringAt(json, ['event-data', 'event']) ?? 'unknown',
        contentHash: jsonContentHash(json as Record<string, unknown>, ['signature']),
      };
    }
    // Form posts: a route forwarding a stored message (keyed by its Message-Id), or a legacy event.
    const event = form?.get('event') ?? undefined;
    const messageId = form?.get('Message-Id') ?? undefined;
    if (event === undefined && messageId !== undefined && messageId !== '') return { deliveryId: `message:${messageId}`, eventType: 'inbound' };
    return { deliveryId: bodyHashId(d), eventType: event === undefined || event === '' ? 'inbound' : event };
  },

  sign(body, secret, now) {
    const timestamp = String(Math.floor(now / 1000));
    const token = randomBytes(25).toString('hex');
    const signature = hmac('sha256', secret, timestamp + token).toString('hex');
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      parsed = undefined;
    }
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) {
      return { headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify({ ...parsed, signature: { timestamp, token, signature } })) };
    }
    const form = new URLSearchParams(body.toString('utf8'));
    form.set('timestamp', timestamp);
    form.set('token', token);
    form.set('signature', signature);
    return { headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: Buffer.from(form.toString()) };
  },

  sample(now) {
    const ts = now / 1000;
    const id = randomBytes(16).toString('base64url').slice(0, 22);
    return Buffer.from(
      JSON.stringify({
        signature: { timestamp: '', token: '', signature: '' },
        'event-data': {
          id,
          timestamp: ts,
          'log-level': 'info',
          event: 'delivered',
          recipient: 'alice@example.com',
          'recipient-domain': 'example.com',
          envelope: { transport: 'smtp', sender: 'bob@mg.example.com', 'sending-ip': '209.61.154.250', targets: 'alice@example.com' },
          message: {
            headers: { to: 'Alice <alice@example.com>', 'message-id': `${id}@mg.example.com`, from: 'Bob <bob@mg.example.com>', subject: 'Your licence key' },
            attachments: [],
            size: 111,
          },
          'delivery-status': {
            tls: true,
            'mx-host': 'smtp-in.example.com',
            code: 250,
            description: '',
            'attempt-no': 1,
            message: 'OK',
            'certificate-verified': true,
          },
          flags: { 'is-routed': false, 'is-authenticated': true, 'is-system-test': false, 'is-test-mode': false },
          tags: [],
          'user-variables': {},
        },
      }),
    );
  },

  eventTypeAt: () => ({ body: ['event-data', 'event'] }),

  // A forwarded message is stored as `message:<its Message-Id>`; Mailgun's logs show the
  // Message-Id, with or without its angle brackets.
  senderIds: {
    shown: (stored) => (stored.startsWith('message:') ? stored.slice('message:'.length) : stored),
    storedForms: (shown) => {
      if (shown.startsWith('message:') || shown.startsWith('sha256:')) return [];
      const bare = /^<(.*)>$/.exec(shown)?.[1] ?? shown;
      return [{ exact: `message:${bare}` }, { exact: `message:<${bare}>` }];
    },
  },
};
