import { randomUUID } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { Provider } from './types.js';
import { anyMatches, decodeSignature, header, hmac, requireHeader } from './util.js';

/**
 * `X-Hub-Signature-256: sha256=<hex>` over the body. The delivery GUID is scoped by the
 * hook id: one GUID reaches every hook of an event, and each is its own delivery.
 */
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const github: Provider = {
  name: 'github',
  signatureHeaders: ['x-hub-signature-256', 'x-hub-signature'],
  // No automatic retries; a manual redelivery (kept 3 days in the UI) reuses the GUID.
  retryHorizonHours: 72,
  successStatus: 202,
  // X-GitHub-Delivery is not signed, and no timestamp is: a captured push replays forever.
  unsignedDeliveryId: true,
  needsSecret: true,
  fields: [],

  verify(d, source) {
    const sig = requireHeader(d, 'X-Hub-Signature-256');
    if (!sig.startsWith('sha256=')) throw verificationError('X-Hub-Signature-256 must start with sha256=');
    const presented = [decodeSignature(sig.slice(7), 'hex')];
    if (!anyMatches(presented, source.secrets, (s) => hmac('sha256', s, d.raw))) throw verificationError('signature does not match');
  },

  identify(d) {
    const guid = header(d, 'X-GitHub-Delivery');
    if (guid === undefined) throw payloadError('missing X-GitHub-Delivery header');
    const hook = header(d, 'X-GitHub-Hook-ID');
    return { deliveryId: hook === undefined ? guid : `${hook}:${guid}`, eventType: header(d, 'X-GitHub-Event') ?? 'unknown' };
  },

  sign(body, secret) {
    return {
      headers: {
        'x-hub-signature-256': `sha256=${hmac('sha256', secret, body).toString('hex')}`,
        'x-github-delivery': randomUUID(),
        'x-github-event': 'push',
        'x-github-hook-id': '1',
      },
    };
  },

  sample() {
    const after = Buffer.from(randomUUID().replaceAll('-', ''), 'hex').toString('hex').padEnd(40, '0');
    return Buffer.from(
      JSON.stringify({
        ref: 'refs/heads/main',
        before: '0000000000000000000000000000000000000000',
        after,
        repository: { id: 1, full_name: 'shop/site' },
        pusher: { name: 'receiver-send-test' },
      }),
    );
  },

  eventTypeAt: () => ({ header: 'x-github-event' }),

  // GitHub's pages show the GUID alone; it is stored as `<hook id>:<GUID>`. Only a GUID is
  // looked for so: any other id (a Stripe evt_...) costs no walk through this source's ids.
  senderIds: {
    shown: (stored) => stored.replace(/^\d+:/, ''),
    storedForms: (shown) => (GUID.test(shown) ? [{ suffix: `:${shown}` }] : []),
  },
};
