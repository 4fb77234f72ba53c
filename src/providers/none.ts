import type { Provider } from './types.js';
import { identifyByTemplate, hmacSha256, templateEventTypeAt, validateTemplates } from './hmac-sha256.js';

/** No verification at all. For local testing only: `serve` warns on every start. */
export const none: Provider = {
  name: 'none',
  signatureHeaders: [],
  retryHorizonHours: 72,
  successStatus: 202,
  // Nothing is signed: a body check would protect nothing against anyone who can post.
  unsignedDeliveryId: false,
  needsSecret: false,
  fields: ['deliveryId', 'eventType'],
  validate: validateTemplates,
  verify() {},
  identify: identifyByTemplate,
  sign() {
    return { headers: {} };
  },
  sample: hmacSha256.sample,
  eventTypeAt: templateEventTypeAt,
};
