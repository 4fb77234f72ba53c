import { randomBytes } from 'node:crypto';
import { verificationError } from '../errors.js';
import type { Delivery, Provider } from './types.js';
import { anyMatches, bodyHashId, checkTolerance, decodeSignature, hmac, parseUnixSeconds, requireHeader, stringAt } from './util.js';

/** Slack bodies: Events API JSON, or form fields (slash commands; interactivity's `payload` JSON). */
function parseSlackBody(d: Delivery): { json?: unknown; form?: URLSearchParams } {
  const text = d.raw.toString('utf8');
  try {
    return { json: JSON.parse(text) };
  } catch {
    return { form: new URLSearchParams(text) };
  }
}

/**
 * Slack: `X-Slack-Signature: v0=<hex>` is HMAC-SHA256 of `v0:<ts>:<body>` keyed by the
 * signing secret, `X-Slack-Request-Timestamp` within 300 s.
 */
export const slack: Provider = {
  name: 'slack',
  signatureHeaders: ['x-slack-signature'],
  // Events API retries 3 times: at once, after 1 minute, after 5 minutes.
  retryHorizonHours: 1,
  successStatus: 202,
  // event_id is in the signed body; other ids are the body's hash.
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: ['toleranceSeconds'],

  verify(d, source) {
    const sig = requireHeader(d, 'X-Slack-Signature');
    const ts = parseUnixSeconds(requireHeader(d, 'X-Slack-Request-Timestamp'), 'X-Slack-Request-Timestamp');
    if (!sig.startsWith('v0=')) throw verificationError('X-Slack-Signature must start with v0=');
    const presented = [decodeSignature(sig.slice(3), 'hex')];
    if (!anyMatches(presented, source.secrets, (s) => hmac('sha256', s, `v0:${ts}:`, d.raw))) throw verificationError('signature does not match');
    checkTolerance(ts, d, source);
  },

  /**
   * After the signature check: the Events API's `url_verification` is answered with its
   * challenge, and a slash command's `ssl_check` with an empty 200. Neither is an event.
   */
  handshake(d) {
    const { json, form } = parseSlackBody(d);
    if (stringAt(json, ['type']) === 'url_verification') {
      const challenge = stringAt(json, ['challenge']) ?? '';
      return { status: 200, contentType: 'text/plain; charset=utf-8', body: challenge };
    }
    if (form?.get('ssl_check') === '1') return { status: 200, contentType: 'text/plain; charset=utf-8', body: '' };
    return undefined;
  },

  identify(d) {
    const { json, form } = parseSlackBody(d);
    if (json !== undefined) {
      // event_id is kept across Slack's retries (X-Slack-Retry-Num); other bodies hash.
      const id = stringAt(json, ['event_id']) ?? bodyHashId(d);
      const type = stringAt(json, ['type']) === 'event_callback' ? stringAt(json, ['event', 'type']) : stringAt(json, ['type']);
      return { deliveryId: id, eventType: type ?? 'unknown' };
    }
    let type = form?.get('command') ?? undefined;
    const payload = form?.get('payload');
    if (type === undefined && payload != null) {
      try {
        type = stringAt(JSON.parse(payload), ['type']);
      } catch {
        type = undefined;
      }
    }
    return { deliveryId: bodyHashId(d), eventType: type === undefined || type === '' ? 'unknown' : type };
  },

  sign(body, secret, now) {
    const ts = String(Math.floor(now / 1000));
    return {
      headers: {
        'x-slack-signature': `v0=${hmac('sha256', secret, `v0:${ts}:`, body).toString('hex')}`,
        'x-slack-request-timestamp': ts,
      },
    };
  },

  sample(now) {
    const ts = Math.floor(now / 1000);
    return Buffer.from(
      JSON.stringify({
        token: 'XXYYZZ',
        team_id: 'T123ABC456',
        api_app_id: 'A123ABC456',
        event: {
          type: 'app_mention',
          user: 'U123ABC456',
          text: '<@U0LAN0Z89> is it everything a river should be?',
          ts: `${ts}.000100`,
          channel: 'C123ABC456',
          event_ts: `${ts}.000100`,
        },
        type: 'event_callback',
        event_id: `Ev${randomBytes(5).toString('hex').toUpperCase()}`,
        event_time: ts,
        authorizations: [{ enterprise_id: null, team_id: 'T123ABC456', user_id: 'U123ABC456', is_bot: true, is_enterprise_install: false }],
        is_ext_shared_channel: false,
      }),
    );
  },

  // An event_callback's type is its inner event's (the sample is one).
  eventTypeAt: () => ({ body: ['event', 'type'] }),
};
