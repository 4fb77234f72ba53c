import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testDelivery } from '../../src/cli/send-test.js';
import { providers } from '../../src/providers/registry.js';
import { makeConfig, tempDir } from '../helpers.js';
import { startSources, type Harness } from '../providers/harness.js';

/**
 * `send-test --type` for every provider: the sample with the type set where the provider
 * carries it, signed, posted to a real server on port 0, stored with exactly that type.
 */

const NOW = Date.UTC(2026, 10, 30, 12, 0, 0);
const SW_KEY = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

const SOURCES: Record<string, Record<string, unknown>> = {
  stripe: { provider: 'stripe', secret: 'whsec_stripe_1' },
  github: { provider: 'github', secret: 'gh-secret' },
  gitlab: { provider: 'gitlab', secret: 'gitlab-token' },
  gitlabSigned: { provider: 'gitlab', secret: SW_KEY },
  standardWebhooks: { provider: 'standard-webhooks', secret: SW_KEY },
  shopify: { provider: 'shopify', secret: 'shpss_secret' },
  paddle: { provider: 'paddle', secret: 'pdl_ntfset_secret' },
  lemon: { provider: 'lemonsqueezy', secret: 'ls_signing_secret_123' },
  mailgun: { provider: 'mailgun', secret: 'mailgun-signing-key' },
  mailwebhook: { provider: 'mailwebhook', secret: 'mw-secret-plain' },
  slack: { provider: 'slack', secret: 'slack-signing-secret' },
  asaas: { provider: 'asaas', secret: 'asaas-token-123' },
  genericBody: { provider: 'hmac-sha256', secret: 'generic-secret', header: 'X-Signature', eventType: '{body.meta.kind}' },
  genericHeader: { provider: 'hmac-sha256', secret: 'generic-secret', header: 'X-Signature', eventType: '{header.x-event-type}' },
};

describe('send-test --type, every provider', () => {
  let h: Harness;
  const tmp = tempDir();
  const config = makeConfig({ sources: SOURCES }, tmp.dir);
  beforeAll(async () => {
    h = await startSources(SOURCES, NOW);
  });
  afterAll(async () => {
    await h.close();
    tmp.cleanup();
  });

  it('covers every provider that names its type in one place', () => {
    const covered = new Set(Object.values(SOURCES).map((s) => s.provider));
    for (const p of providers.values()) if (p.eventTypeAt !== undefined && p.name !== 'none') expect(covered).toContain(p.name);
  });

  for (const name of Object.keys(SOURCES)) {
    it(`${name}: stored with the type asked for`, async () => {
      const source = config.sources.get(name)!;
      const type = `receiver.test_${name}`;
      const d = testDelivery(source, { type }, NOW, h.url(name));
      const r = await h.send(name, d.body, d.headers);
      expect(r.status).toBeLessThan(300);
      expect(h.event(name)?.event_type).toBe(type);
      // Its test mark verified under this provider's secret: stored as a test.
      expect(h.app.store.db.prepare('SELECT origin FROM events WHERE source = ?').pluck().get(name)).toBe('test');
    });
  }

  it('twilio names no type in one place: a usage error', () => {
    const twilio = makeConfig({ sources: { sms: { provider: 'twilio', secret: 'tw-token' } } }, tmp.dir).sources.get('sms')!;
    expect(() => testDelivery(twilio, { type: 'message.failed' }, NOW, 'http://127.0.0.1/webhooks/sms')).toThrow(/a twilio delivery has no one place/);
  });
});
