import { mkdirSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, runInProcess, tempDir, writeConfig } from '../helpers.js';

/** `receiver check-config`, in-process and as a subprocess: exit codes, output, and no secret ever printed. */

const ENV_SECRET = 'whsec_envsecret_4f1b2c';
const OLD_SECRET = 'gh-old-secret-9a8b7c';
const FILE_SECRET = 'file-secret-5d6e7f';
const LITERAL = 'literal-secret-1a2b3c';
const TOKEN = 'metrics-token-8c9d0e';
const HTTP_AUTH = 'Bearer app-credential-3e4f5a';
const URL_PASSWORD = 'url-password-6b7c8d';
const APP_KEY = 'app-key-from-env-7f8e9d';
const FORWARD_SECRET = 'whsec_Q2hlY2tDb25maWdGb3J3YXJkU2VjcmV0MjQ=';
const ALL = [ENV_SECRET, OLD_SECRET, FILE_SECRET, LITERAL, TOKEN, HTTP_AUTH, URL_PASSWORD, APP_KEY, FORWARD_SECRET];

const env = { CC_STRIPE_SECRET: ENV_SECRET, CC_GH_OLD: OLD_SECRET, CC_METRICS_TOKEN: TOKEN, CC_APP_KEY: APP_KEY, CC_FORWARD: FORWARD_SECRET };

describe('receiver check-config', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let n = 0;
  const dir = () => {
    n += 1;
    const d = `${tmp.dir}/${n}`;
    mkdirSync(d);
    return d;
  };

  const valid = (d: string) => {
    writeFileSync(`${d}/shop.secret`, `${FILE_SECRET}\n`);
    return {
      sources: {
        stripe: { provider: 'stripe', secret: 'env:CC_STRIPE_SECRET' },
        github: { provider: 'github', secrets: [LITERAL, 'env:CC_GH_OLD'] },
        shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: `file:${d}/shop.secret`, deliveryId: '{body.id}' },
      },
      routes: [
        {
          name: 'issue-licence',
          source: 'stripe',
          events: ['checkout.session.completed'],
          key: '{body.data.object.id}',
          effect: { exec: ['/usr/local/bin/issue-licence'], timeoutSeconds: 30 },
        },
        {
          name: 'app',
          source: 'shop',
          events: ['*'],
          key: '{body.id}',
          effect: {
            http: {
              url: `http://app:${URL_PASSWORD}@127.0.0.1:3000/hooks`,
              headers: { authorization: HTTP_AUTH, 'x-app-key': 'env:CC_APP_KEY' },
              sign: 'env:CC_FORWARD',
            },
          },
        },
      ],
      metrics: { token: 'env:CC_METRICS_TOKEN' },
    };
  };

  const expectNoSecrets = (text: string) => {
    for (const s of ALL) expect(text).not.toContain(s);
  };

  it('exits 0 and prints the resolved sources and routes without a secret value', async () => {
    const d = dir();
    const file = writeConfig(d, valid(d));
    const r = await runCli(['check-config', '-c', file], { env });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`configuration ${file} is valid`);
    expect(r.stdout).toMatch(/stripe: stripe, 1 secret\(s\)/);
    expect(r.stdout).toMatch(/github: github, 2 secret\(s\)/);
    expect(r.stdout).toMatch(/shop: hmac-sha256, 1 secret\(s\)/);
    expect(r.stdout).toContain('issue-licence: stripe [checkout.session.completed] key {body.data.object.id}');
    expect(r.stdout).toContain('metrics: GET /metrics (bearer token required)');
    expectNoSecrets(r.stdout + r.stderr);
  });

  it('--json prints exactly one JSON document with sources, routes and counts of secrets', async () => {
    const d = dir();
    const file = writeConfig(d, valid(d));
    const r = await runInProcess(['check-config', '-c', file, '--json'], { env });
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout) as {
      sources: { name: string; provider: string; secrets: number }[];
      routes: { name: string; effect: { http?: string; headers?: string[] } }[];
      metrics: { enabled: boolean; token: boolean };
      listen: string;
    };
    expect(doc.sources.map((s) => [s.name, s.provider, s.secrets])).toEqual([
      ['stripe', 'stripe', 1],
      ['github', 'github', 2],
      ['shop', 'hmac-sha256', 1],
    ]);
    expect(doc.routes.map((r) => r.name)).toEqual(['issue-licence', 'app']);
    // The http effect's URL password, header values (literal or resolved from env:) and
    // signing secret are hidden; the headers' names are shown, and that forwards are signed.
    expect(doc.routes[1]?.effect).toEqual({ http: 'http://app:***@127.0.0.1:3000/hooks', headers: ['authorization', 'x-app-key'], sign: true });
    expect(doc.metrics).toEqual({ enabled: true, token: true });
    expect(doc.listen).toBe('127.0.0.1:8080');
    expectNoSecrets(r.stdout + r.stderr);
  });

  it("prints each source's success status and retry horizon: the provider's defaults, or the configured values", async () => {
    const d = dir();
    const file = writeConfig(d, {
      sources: {
        stripe: { provider: 'stripe', secret: 'env:CC_STRIPE_SECRET' },
        shopify: { provider: 'shopify', secret: LITERAL },
        mailgun: { provider: 'mailgun', secret: LITERAL },
        tuned: { provider: 'github', secret: LITERAL, successStatus: 204, retryHorizonHours: 12.5 },
      },
    });
    const human = await runInProcess(['check-config', '-c', file], { env });
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^ {2}stripe: stripe, 1 secret\(s\), answers 202, retry horizon 72 h$/m);
    expect(human.stdout).toMatch(/^ {2}shopify: shopify, 1 secret\(s\), answers 202, retry horizon 4 h$/m);
    expect(human.stdout).toMatch(/^ {2}mailgun: mailgun, 1 secret\(s\), answers 200, retry horizon 8 h$/m);
    expect(human.stdout).toMatch(/^ {2}tuned: github, 1 secret\(s\), answers 204, retry horizon 12\.5 h$/m);
    const json = await runInProcess(['check-config', '-c', file, '--json'], { env });
    const doc = JSON.parse(json.stdout) as { sources: { name: string; successStatus: number; retryHorizonHours: number }[] };
    expect(doc.sources.map((s) => [s.name, s.successStatus, s.retryHorizonHours])).toEqual([
      ['stripe', 202, 72],
      ['shopify', 202, 4],
      ['mailgun', 200, 8],
      ['tuned', 204, 12.5],
    ]);
    expectNoSecrets(human.stdout + human.stderr + json.stdout + json.stderr);
  });

  const invalid: [string, (d: string) => Record<string, unknown> | string, NodeJS.ProcessEnv, RegExp][] = [
    ['a missing env secret', (d) => valid(d), { ...env, CC_STRIPE_SECRET: '' }, /sources\.stripe\.secret: environment variable CC_STRIPE_SECRET is not set/],
    [
      'an unknown provider',
      (d) => ({ ...valid(d), sources: { ...valid(d).sources, x: { provider: 'stripee', secret: LITERAL } } }),
      env,
      /sources\.x\.provider: unknown provider "stripee"/,
    ],
    ['malformed JSON', () => `{ "sources": { "a": { "provider": "stripe", "secret": "${LITERAL}", } }`, env, /is not valid JSON/],
    [
      'an unknown field',
      (d) => ({ ...valid(d), sources: { ...valid(d).sources, typo: { provider: 'stripe', secrest: LITERAL } } }),
      env,
      /sources\.typo\.secrest: unknown field/,
    ],
    [
      'a verifying provider without a secret',
      (d) => ({ ...valid(d), sources: { ...valid(d).sources, bare: { provider: 'github' } } }),
      env,
      /sources\.bare\.secret: provider "github" needs a secret/,
    ],
    ['a missing metrics token', (d) => valid(d), { ...env, CC_METRICS_TOKEN: '' }, /metrics\.token: environment variable CC_METRICS_TOKEN is not set/],
    [
      'a missing secret file',
      (d) => ({ ...valid(d), sources: { ...valid(d).sources, shop: { provider: 'hmac-sha256', header: 'X-Signature', secret: `file:${d}/nope.secret` } } }),
      env,
      /sources\.shop\.secret: cannot read secret file/,
    ],
  ];

  for (const [what, make, runEnv, message] of invalid) {
    it(`exits 2 naming the field for ${what}, and prints no secret`, async () => {
      const d = dir();
      const content = make(d);
      const file = `${d}/receiver.config.json`;
      if (typeof content === 'string') writeFileSync(file, content);
      else writeConfig(d, content);
      for (const json of [false, true]) {
        // The first case also as the real binary, for its exit code; the others in-process.
        const runner = what === invalid[0]![0] ? runCli : runInProcess;
        const r = await runner(['check-config', '-c', file, ...(json ? ['--json'] : [])], { env: runEnv });
        expect(r.code).toBe(2);
        expect(r.stdout).toBe('');
        expect(r.stderr).toMatch(message);
        expect(r.stderr).toMatch(/^Try: /m);
        expectNoSecrets(r.stdout + r.stderr);
      }
    });
  }
});
