import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { providerNames, providers } from '../../src/providers/registry.js';
import { startSources, type Harness } from './harness.js';

/** The catalogue as a whole: names, documented horizons and success codes, send-test round trips. */

const NOW = Date.UTC(2025, 4, 1, 12, 0, 0);

// From the README's provider table and the senders' documentation (see each provider's comment).
const DOCUMENTED: Record<string, { retryHorizonHours: number; successStatus: number }> = {
  stripe: { retryHorizonHours: 72, successStatus: 202 },
  github: { retryHorizonHours: 72, successStatus: 202 },
  'standard-webhooks': { retryHorizonHours: 72, successStatus: 202 },
  shopify: { retryHorizonHours: 4, successStatus: 202 },
  gitlab: { retryHorizonHours: 72, successStatus: 202 },
  slack: { retryHorizonHours: 1, successStatus: 202 },
  paddle: { retryHorizonHours: 72, successStatus: 200 },
  lemonsqueezy: { retryHorizonHours: 1, successStatus: 202 },
  mailgun: { retryHorizonHours: 8, successStatus: 200 },
  twilio: { retryHorizonHours: 1, successStatus: 202 },
  asaas: { retryHorizonHours: 336, successStatus: 200 },
  mailwebhook: { retryHorizonHours: 72, successStatus: 202 },
  'hmac-sha256': { retryHorizonHours: 72, successStatus: 202 },
  none: { retryHorizonHours: 72, successStatus: 202 },
};

/** Extra options some providers need to be configured at all. */
const OPTIONS: Record<string, Record<string, unknown>> = { 'hmac-sha256': { header: 'X-Signature', timestampHeader: 'X-Timestamp' } };

describe('provider registry', () => {
  it('has every sender of the README provider table, with its documented retry horizon and success code', () => {
    expect(providerNames()).toEqual(Object.keys(DOCUMENTED).sort());
    for (const [name, want] of Object.entries(DOCUMENTED)) {
      const p = providers.get(name);
      expect({ name, retryHorizonHours: p?.retryHorizonHours, successStatus: p?.successStatus }).toEqual({ name, ...want });
    }
  });
});

describe('send-test round trip: sample() signed by sign() is accepted by the same provider', () => {
  let h: Harness;
  beforeAll(async () => {
    const sources: Record<string, Record<string, unknown>> = {};
    for (const name of providerNames())
      sources[name] = { provider: name, ...(name === 'none' ? {} : { secret: 'whsec_c2VuZC10ZXN0LXJvdW5kLXRyaXAtc2VjcmV0' }), ...OPTIONS[name] };
    sources.asaasOverride = { provider: 'asaas', secret: 'asaas-token', successStatus: 202 };
    h = await startSources(sources, NOW);
  });
  afterAll(() => h.close());

  for (const name of Object.keys(DOCUMENTED)) {
    it(name, async () => {
      const source = h.app.config.sources.get(name);
      if (source === undefined) throw new Error(`no source ${name}`);
      const sample = source.provider.sample(NOW);
      const signed = source.provider.sign(sample, source.secrets[0]?.reveal() ?? '', NOW, source, h.url(name));
      const r = await h.send(name, signed.body ?? sample, { 'content-type': 'application/json', ...signed.headers });
      expect(r.status, r.text).toBe(DOCUMENTED[name]?.successStatus);
      expect(h.rows(name)).toBe(1);
      // Two samples are two events (fresh ids), not a duplicate of the first.
      const second = source.provider.sample(NOW);
      const signed2 = source.provider.sign(second, source.secrets[0]?.reveal() ?? '', NOW, source, h.url(name));
      expect((await h.send(name, signed2.body ?? second, { 'content-type': 'application/json', ...signed2.headers })).status).toBe(
        DOCUMENTED[name]?.successStatus,
      );
      expect(h.rows(name)).toBe(2);
    });
  }

  it('a source may override the success code ("successStatus")', async () => {
    const source = h.app.config.sources.get('asaasOverride');
    if (source === undefined) throw new Error('no source');
    const sample = source.provider.sample(NOW);
    const r = await h.send('asaasOverride', sample, source.provider.sign(sample, 'asaas-token', NOW, source, '').headers);
    expect(r.status).toBe(202);
  });
});
