import { createHmac } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Secret } from '../../src/config/secret.js';
import type { ResolvedSource } from '../../src/providers/types.js';
import { makeConfig, post, startApp, tempDir, type RunningApp } from '../helpers.js';

/**
 * A signature made with an empty key proves nothing: anyone can make one. The
 * configuration refuses secrets that give no key bytes; these tests put such secrets
 * past it, as a future code path might, and the verify path itself must still answer 401.
 */

const NOW = Date.UTC(2026, 0, 15, 12, 0, 0);
const T = String(Math.floor(NOW / 1000));
const BODY = '{"id":"evt_forged","type":"order.paid"}';
const emptyKeyB64 = (data: string) => createHmac('sha256', Buffer.alloc(0)).update(data).digest('base64');
const emptyKeyHex = (data: string) => createHmac('sha256', Buffer.alloc(0)).update(data).digest('hex');
const keyHex = (key: string, data: string) => createHmac('sha256', key).update(data).digest('hex');

const tmp = tempDir();
let app: RunningApp;
const rows = () => (app.store.db.prepare('SELECT count(*) AS n FROM events').get() as { n: number }).n;

beforeAll(async () => {
  const config = makeConfig(
    {
      sources: {
        // A valid configuration: a GitLab secret token is compared as is, whatever its characters.
        gitlab: { provider: 'gitlab', secret: '!!!!' },
        sw: { provider: 'standard-webhooks', secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' },
        generic: { provider: 'hmac-sha256', header: 'X-Signature', secret: 'generic-secret', deliveryId: '{body.id}' },
        github: { provider: 'github', secret: 'github-secret' },
        timed: { provider: 'hmac-sha256', header: 'X-Signature', secret: 'timed-secret', timestampHeader: 'X-Time', deliveryId: '{body.id}' },
      },
    },
    tmp.dir,
  );
  // Past the configuration's checks: what the verify path alone must refuse.
  const swap = (name: string, change: (s: ResolvedSource) => ResolvedSource) => {
    const s = config.sources.get(name);
    if (s === undefined) throw new Error(`no source ${name}`);
    (config.sources as Map<string, ResolvedSource>).set(name, change(s));
  };
  swap('sw', (s) => ({ ...s, secrets: [new Secret('whsec_')] }));
  swap('generic', (s) => ({ ...s, secrets: [new Secret('')] }));
  swap('github', (s) => ({ ...s, secrets: [new Secret('   ')] }));
  swap('timed', (s) => ({ ...s, options: { ...s.options, timestampHeader: undefined, signedPayload: '{timestamp}.{body}' } }));
  app = await startApp(config, { now: () => NOW });
});
afterAll(async () => {
  await app.close();
  tmp.cleanup();
});

const send = (source: string, headers: Record<string, string>) => post(`${app.url}/webhooks/${source}`, BODY, headers);

describe('a signature made with an empty key is refused with 401', () => {
  it('gitlab: a plain secret token is never read as a Standard Webhooks key (here it would be an empty one)', async () => {
    const id = 'msg_forged_1';
    const r = await send('gitlab', {
      'webhook-id': id,
      'webhook-timestamp': T,
      'webhook-signature': `v1,${emptyKeyB64(`${id}.${T}.${BODY}`)}`,
      'x-gitlab-event': 'Push Hook',
    });
    expect(r.status).toBe(401);
    expect(r.text).toMatch(/no signing token/);
    // The token itself still works.
    expect((await send('gitlab', { 'x-gitlab-token': '!!!!', 'x-gitlab-event': 'Push Hook', 'idempotency-key': 'ok-1' })).status).toBe(202);
    expect(rows()).toBe(1);
  });

  it('standard-webhooks: a "whsec_" secret with no key bytes', async () => {
    const id = 'msg_forged_2';
    const r = await send('sw', { 'webhook-id': id, 'webhook-timestamp': T, 'webhook-signature': `v1,${emptyKeyB64(`${id}.${T}.${BODY}`)}` });
    expect(r.status).toBe(401);
  });

  it('hmac-sha256: an empty secret', async () => {
    expect((await send('generic', { 'x-signature': emptyKeyHex(BODY) })).status).toBe(401);
  });

  it('github: a secret of spaces is no secret', async () => {
    expect((await send('github', { 'x-hub-signature-256': `sha256=${keyHex('   ', BODY)}`, 'x-github-delivery': 'd-1' })).status).toBe(401);
  });

  it('hmac-sha256: {timestamp} signed with no timestamp header configured (".<body>", no freshness)', async () => {
    expect((await send('timed', { 'x-signature': keyHex('timed-secret', `.${BODY}`) })).status).toBe(401);
  });

  it('nothing forged was stored', () => {
    expect(rows()).toBe(1);
  });
});
