import { afterAll, describe, expect, it } from 'vitest';
import { describeConfig } from '../../src/config/describe.js';
import { effectEnvironment } from '../../src/effects/exec.js';
import { isReceiverError } from '../../src/errors.js';
import { makeConfig, tempDir } from '../helpers.js';

const tmp = tempDir('receiver-catchup-config-');
afterAll(() => tmp.cleanup());

function problems(sources: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): string {
  try {
    makeConfig({ sources }, tmp.dir, env);
  } catch (e) {
    if (isReceiverError(e, 'config')) return e.message;
    throw e;
  }
  return '';
}

describe('catch-up configuration', () => {
  it('resolves the credential as a secret, with defaults for apiBase, everyMinutes and maxRequests', () => {
    const config = makeConfig({ sources: { shop: { provider: 'stripe', secret: 'whsec_x', catchUp: { apiKey: 'env:STRIPE_API_KEY' } } } }, tmp.dir, {
      STRIPE_API_KEY: 'rk_live_abc123',
    });
    const c = config.catchUp.get('shop')!;
    expect(c).toMatchObject({ apiBase: 'https://api.stripe.com', everyMinutes: 15, maxRequests: 100 });
    expect(c.credential?.reveal()).toBe('rk_live_abc123');
    expect(JSON.stringify(c)).not.toContain('rk_live_abc123');
    // The source's options keep no credential reference, and check-config shows it only as present.
    expect(JSON.stringify(config.sources.get('shop')!.options)).not.toContain('catchUp');
    expect(describeConfig(config).sources[0]).toMatchObject({ catchUp: { apiBase: 'https://api.stripe.com', everyMinutes: 15, credential: true } });
    expect(JSON.stringify(describeConfig(config))).not.toContain('rk_live');
  });

  it('an exec effect does not inherit a catch-up credential from the environment', () => {
    const config = makeConfig(
      { sources: { gh: { provider: 'github', secret: 's', catchUp: { token: 'env:GH_TOKEN', hook: 'repos/a/b/hooks/1' } } } },
      tmp.dir,
      { GH_TOKEN: 'ghp_token_value' },
    );
    const env = effectEnvironment(config, { GH_TOKEN: 'ghp_token_value', PATH: '/bin' });
    expect(env).toEqual({ PATH: '/bin' });
  });

  it('names the field and the fix for each mistake', () => {
    expect(problems({ s: { provider: 'shopify', secret: 'x', catchUp: { apiKey: 'k' } } })).toContain(
      `sources.s.catchUp: provider "shopify" has no API that recovers missed deliveries (catch-up works with stripe, github, paddle, gitlab; see docs/operations.md, "Catch up after downtime")`,
    );
    expect(problems({ g: { provider: 'github', secret: 'x', catchUp: { token: 't' } } })).toContain(
      'sources.g.catchUp.hook: set "hook": "repos/<owner>/<repo>/hooks/<id>"',
    );
    expect(problems({ g: { provider: 'github', secret: 'x', catchUp: { token: 't', hook: 'shop/site/hooks/1' } } })).toContain(
      'sources.g.catchUp.hook: "shop/site/hooks/1" is not repos/',
    );
    expect(problems({ g: { provider: 'github', secret: 'x', catchUp: { apiKey: 't', hook: 'orgs/shop/hooks/1' } } })).toContain(
      'sources.g.catchUp.apiKey: GitHub takes its credential in "token"',
    );
    expect(problems({ s: { provider: 'stripe', secret: 'x', catchUp: {} } })).toContain(
      'sources.s.catchUp.apiKey: Stripe catch-up needs an API credential with read access to Events',
    );
    expect(problems({ s: { provider: 'stripe', secret: 'x', catchUp: { apiKey: 'env:NOPE' } } })).toContain(
      'sources.s.catchUp.apiKey: environment variable NOPE is not set or empty',
    );
    expect(problems({ p: { provider: 'paddle', secret: 'pdl_ntfset_x', catchUp: { apiKey: 'k' } } })).toContain(
      'sources.p.catchUp.notificationSettingId: set it to the ntfset_',
    );
    expect(problems({ l: { provider: 'gitlab', secret: 'x', catchUp: { token: 't', hook: 'projects/7/hooks/3', everyMinutes: 0 } } })).toContain(
      'sources.l.catchUp.everyMinutes',
    );
    expect(problems({ l: { provider: 'gitlab', secret: 'x', catchUp: { token: 't', hook: 'projects/7/hooks/3', apiBase: 'ftp://x' } } })).toContain(
      'sources.l.catchUp.apiBase: must be an http:// or https:// URL',
    );
    expect(problems({ l: { provider: 'gitlab', secret: 'x', catchUp: { token: 't', hook: 'projects/7/hooks/3', tokne: 'x' } } })).toContain(
      'sources.l.catchUp.tokne: unknown field',
    );
  });
});
