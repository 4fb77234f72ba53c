import { randomUUID } from 'node:crypto';
import { verificationError } from '../errors.js';
import type { Provider } from './types.js';
import { standardWebhooks, standardWebhooksKey, standardWebhooksKeyProblem } from './standard-webhooks.js';
import { anyMatches, bodyHashId, header, hmac, jsonBody, stringAt } from './util.js';

/**
 * GitLab: `X-Gitlab-Token` equals the configured secret token. GitLab with a signing token
 * sends Standard Webhooks headers (`webhook-id` = Idempotency-Key, `webhook-timestamp`,
 * `webhook-signature` over `id.timestamp.body`, key `whsec_<base64>`); when they are
 * present they decide, with the Standard Webhooks verifier and its timestamp tolerance.
 */
export const gitlab: Provider = {
  name: 'gitlab',
  signatureHeaders: ['x-gitlab-token', 'webhook-signature'],
  // No automatic retry schedule; "Resend request" from the webhook's recent events keeps
  // the Idempotency-Key. Keep keys as long as the generic default.
  retryHorizonHours: 72,
  successStatus: 202,
  // Idempotency-Key is read first and no signature covers it (the token signs nothing).
  unsignedDeliveryId: true,
  needsSecret: true,
  fields: ['toleranceSeconds', 'secretEncoding'],

  /** A signing token (`whsec_...`) must decode to key bytes; a plain secret token is compared as is. */
  keyProblem(secret, options) {
    return secret.startsWith('whsec_') ? standardWebhooksKeyProblem(secret, options) : undefined;
  },

  verify(d, source) {
    if (header(d, 'webhook-signature') !== undefined) {
      // Signed delivery: the signature covers the body, the token does not. A wrong
      // signature is refused even when a token header is also present and right. Only
      // signing tokens are keys: a plain secret token read as base64 would be a key
      // nobody chose (and `!!!!` would be an empty one).
      const signing = source.secrets.filter((s) => s.reveal().startsWith('whsec_'));
      if (signing.length === 0) throw verificationError('webhook-signature sent, but this source has no signing token (whsec_...) configured');
      standardWebhooks.verify(d, { ...source, secrets: signing });
      return;
    }
    const token = header(d, 'X-Gitlab-Token');
    if (token === undefined) throw verificationError('missing X-Gitlab-Token header (or webhook-signature)');
    if (!anyMatches([Buffer.from(token, 'utf8')], source.secrets, (s) => Buffer.from(s, 'utf8'))) throw verificationError('X-Gitlab-Token does not match');
  },

  identify(d) {
    // Idempotency-Key (GitLab 17.4+) is kept on retry and on "Resend request";
    // X-Gitlab-Event-UUID identifies the event on older versions.
    const id = header(d, 'Idempotency-Key') ?? header(d, 'webhook-id') ?? header(d, 'X-Gitlab-Event-UUID') ?? bodyHashId(d);
    const type = header(d, 'X-Gitlab-Event') ?? stringAt(jsonBody(d), ['object_kind']) ?? 'unknown';
    return { deliveryId: id, eventType: type };
  },

  sign(body, secret, now, source) {
    const id = randomUUID();
    const headers: Record<string, string> = {
      'x-gitlab-event': 'Push Hook',
      'x-gitlab-event-uuid': randomUUID(),
      'x-gitlab-webhook-uuid': randomUUID(),
      'x-gitlab-instance': 'https://gitlab.example.com',
      'idempotency-key': id,
    };
    if (secret.startsWith('whsec_')) {
      // A signing token: Standard Webhooks headers, webhook-id = Idempotency-Key, as GitLab sends them.
      const ts = String(Math.floor(now / 1000));
      headers['webhook-id'] = id;
      headers['webhook-timestamp'] = ts;
      headers['webhook-signature'] = `v1,${hmac('sha256', standardWebhooksKey(secret, source), `${id}.${ts}.`, body).toString('base64')}`;
    } else {
      headers['x-gitlab-token'] = secret;
    }
    return { headers };
  },

  sample(now) {
    const after = randomUUID().replaceAll('-', '').padEnd(40, '0');
    return Buffer.from(
      JSON.stringify({
        object_kind: 'push',
        event_name: 'push',
        before: '0000000000000000000000000000000000000000',
        after,
        ref: 'refs/heads/main',
        user_username: 'receiver-send-test',
        project: { id: 15, name: 'site', path_with_namespace: 'shop/site', default_branch: 'main' },
        commits: [{ id: after, message: 'send-test', timestamp: new Date(now).toISOString() }],
        total_commits_count: 1,
      }),
    );
  },

  eventTypeAt: () => ({ header: 'x-gitlab-event' }),
};
