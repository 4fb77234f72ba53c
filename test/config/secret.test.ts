import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import { ReceiverError } from '../../src/errors.js';
import { runCli, runInProcess, tempDir, writeConfig } from '../helpers.js';

/**
 * A secret gives usable key bytes, as its provider reads them, or the configuration is
 * refused: an empty HMAC key (a `whsec_` with nothing base64 after it, a secret of
 * spaces) lets anyone sign. And a field the provider would silently ignore is refused.
 * Each bad form is refused by config loading and by `check-config` as a subprocess.
 */

const tmp = tempDir();
afterAll(tmp.cleanup);

const SW = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const blankFile = join(tmp.dir, 'blank.secret');
writeFileSync(blankFile, '   \n');
const newlinesFile = join(tmp.dir, 'newlines.secret');
writeFileSync(newlinesFile, '\n\n');
const twoLinesFile = join(tmp.dir, 'two-lines.secret');
writeFileSync(twoLinesFile, 'Bearer a\r\nX-Injected: 1\n');
/** A forward signing secret: whsec_ and base64 of 24 bytes. */
const SIGN = 'whsec_C2FBcUq8kPxNuFz1o6sd3r9QZ0Hf5VbA';
const env = { BLANK_SECRET: '  \t ', GOOD_SECRET: 'good-secret', FORWARD_SECRET: SIGN };

const route = (extra: Record<string, unknown>) => ({ name: 'r', source: '*', key: '{body.id}', effect: { exec: ['true'] }, ...extra });

/** [what, configuration (without database), the field the error must name] */
const BAD: [string, Record<string, unknown>, RegExp][] = [
  // Standard Webhooks: the key is base64 after `whsec_`.
  [
    'a Standard Webhooks secret "whsec_"',
    { sources: { sw: { provider: 'standard-webhooks', secret: 'whsec_' } } },
    /sources\.sw\.secret: is not a usable Standard Webhooks key/,
  ],
  [
    'a Standard Webhooks secret "whsec_="',
    { sources: { sw: { provider: 'standard-webhooks', secret: 'whsec_=' } } },
    /sources\.sw\.secret: is not a usable Standard Webhooks key/,
  ],
  [
    'a Standard Webhooks secret of characters outside base64',
    { sources: { sw: { provider: 'standard-webhooks', secret: 'whsec_!!!!' } } },
    /sources\.sw\.secret: is not a usable Standard Webhooks key/,
  ],
  [
    'a Standard Webhooks secret with a character outside base64 in a real key',
    { sources: { sw: { provider: 'standard-webhooks', secret: `${SW.slice(0, 10)}*${SW.slice(11)}` } } },
    /sources\.sw\.secret: is not a usable/,
  ],
  [
    'a Standard Webhooks secret of one base64 character (no whole byte)',
    { sources: { sw: { provider: 'standard-webhooks', secrets: [SW, 'whsec_A'] } } },
    /sources\.sw\.secrets\.1: is not a usable/,
  ],
  [
    'a GitLab signing token "whsec_"',
    { sources: { gl: { provider: 'gitlab', secret: 'whsec_' } } },
    /sources\.gl\.secret: is not a usable Standard Webhooks key/,
  ],
  // Any provider: whitespace is no secret, however it arrives.
  ['a literal secret of spaces', { sources: { gh: { provider: 'github', secret: '   ' } } }, /sources\.gh\.secret: secret is only whitespace/],
  [
    'one secret of spaces among several',
    { sources: { st: { provider: 'stripe', secrets: ['whsec_ok', ' '] } } },
    /sources\.st\.secrets\.1: secret is only whitespace/,
  ],
  [
    'a key of spaces in "keys"',
    { sources: { mw: { provider: 'mailwebhook', keys: { k1: 'fine', k2: '  ' } } } },
    /sources\.mw\.keys\.k2: secret is only whitespace/,
  ],
  [
    'an env: secret holding only whitespace',
    { sources: { sh: { provider: 'shopify', secret: 'env:BLANK_SECRET' } } },
    /sources\.sh\.secret: environment variable BLANK_SECRET holds only whitespace/,
  ],
  [
    'a file: secret holding only whitespace',
    { sources: { pd: { provider: 'paddle', secret: `file:${blankFile}` } } },
    /sources\.pd\.secret: secret file .* holds only whitespace/,
  ],
  [
    'a file: secret holding only newlines',
    { sources: { sl: { provider: 'slack', secret: `file:${newlinesFile}` } } },
    /sources\.sl\.secret: secret file .* holds only whitespace/,
  ],
  [
    'an env: name that only the prototype has',
    { sources: { tw: { provider: 'twilio', secret: 'env:toString' } } },
    /sources\.tw\.secret: environment variable toString is not set/,
  ],
  ['a metrics token of spaces', { metrics: { token: '  ' } }, /metrics\.token: secret is only whitespace/],
  // The generic provider: a signed timestamp needs its header, a checked one must be signed.
  [
    'a generic source signing {timestamp} with no timestampHeader',
    { sources: { g: { provider: 'hmac-sha256', header: 'X-Sig', secret: 'k', signedPayload: '{timestamp}.{body}' } } },
    /sources\.g\.signedPayload: uses \{timestamp\} but no timestampHeader is set/,
  ],
  [
    'a generic source checking a timestamp it does not sign',
    { sources: { g: { provider: 'hmac-sha256', header: 'X-Sig', secret: 'k', timestampHeader: 'X-Time', signedPayload: '{body}' } } },
    /sources\.g\.timestampHeader: the timestamp is checked for freshness but signedPayload does not sign it/,
  ],
  [
    'a generic source with toleranceSeconds and no timestamp',
    { sources: { g: { provider: 'hmac-sha256', header: 'X-Sig', secret: 'k', toleranceSeconds: 60 } } },
    /sources\.g\.toleranceSeconds: there is no timestamp to check/,
  ],
  [
    'a generic source whose signature header no request can carry',
    { sources: { g: { provider: 'hmac-sha256', header: 'X Signature', secret: 'k' } } },
    /sources\.g\.header: is not a valid HTTP header name/,
  ],
  // Fields another provider reads, set where they would be silently ignored.
  [
    '"header" on stripe',
    { sources: { st: { provider: 'stripe', secret: 'whsec_x', header: 'X-Other' } } },
    /sources\.st\.header: provider "stripe" does not use this field.*read by hmac-sha256/,
  ],
  [
    '"encoding" and "signedPayload" on github',
    { sources: { gh: { provider: 'github', secret: 'x', encoding: 'base64', signedPayload: '{body}' } } },
    /sources\.gh\.encoding: provider "github" does not use this field(.|\n)*sources\.gh\.signedPayload: /,
  ],
  [
    '"timestampHeader" on shopify',
    { sources: { sh: { provider: 'shopify', secret: 'x', timestampHeader: 'X-Shopify-Triggered-At' } } },
    /sources\.sh\.timestampHeader: provider "shopify" does not use this field/,
  ],
  [
    '"toleranceSeconds" on github (nothing timed is signed)',
    { sources: { gh: { provider: 'github', secret: 'x', toleranceSeconds: 60 } } },
    /sources\.gh\.toleranceSeconds: provider "github" does not use this field.*read by .*stripe/,
  ],
  [
    '"secretEncoding" on stripe',
    { sources: { st: { provider: 'stripe', secret: 'x', secretEncoding: 'utf8' } } },
    /sources\.st\.secretEncoding: .*read by gitlab, standard-webhooks/,
  ],
  [
    '"publicUrl" on github',
    { sources: { gh: { provider: 'github', secret: 'x', publicUrl: 'https://example.com/hook' } } },
    /sources\.gh\.publicUrl: .*read by twilio/,
  ],
  [
    '"deliveryId" on stripe',
    { sources: { st: { provider: 'stripe', secret: 'x', deliveryId: '{body.id}' } } },
    /sources\.st\.deliveryId: .*read by hmac-sha256, none/,
  ],
  ['"keys" on github', { sources: { gh: { provider: 'github', secret: 'x', keys: { k: 'y' } } } }, /sources\.gh\.keys: .*read by mailwebhook/],
  ['a secret on provider "none"', { sources: { n: { provider: 'none', secret: 'x' } } }, /sources\.n\.secret: provider "none" verifies nothing/],
  // Names that would vanish into a prototype.
  [
    'a source named "__proto__"',
    { sources: JSON.parse('{"__proto__": {"provider": "github", "secret": "x"}}') },
    /sources\.__proto__: "__proto__" cannot be used as a name/,
  ],
  [
    'a filter path "__proto__"',
    { routes: [route({ filter: JSON.parse('{"__proto__": {"a": 1}}') })] },
    /routes\.0\.filter\.__proto__: "__proto__" cannot be used/,
  ],
  ['a route to a source "constructor" that does not exist', { routes: [route({ source: 'constructor' })] }, /routes\.0\.source: no source named "constructor"/],
  // URLs that are not http(s).
  [
    'an http effect to a file: URL',
    { routes: [route({ effect: { http: { url: 'file:///etc/passwd' } } })] },
    /routes\.0\.effect\.http\.url: must be an http:\/\/ or https:\/\/ URL/,
  ],
  // An http effect's headers: what fetch would refuse on every request, or what receiver overwrites.
  [
    'an http effect header value with a line break',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', headers: { 'X-Token': 'a\r\nX-Injected: 1' } } } })] },
    /routes\.0\.effect\.http\.headers\.X-Token: the value holds a line break/,
  ],
  [
    'an http effect header name with a space',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', headers: { 'X Token': 'a' } } } })] },
    /routes\.0\.effect\.http\.headers\.X Token: is not a valid HTTP header name/,
  ],
  [
    'an http effect header receiver sets itself',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', headers: { 'Idempotency-Key': 'mine' } } } })] },
    /routes\.0\.effect\.http\.headers\.Idempotency-Key: receiver sets this header on every request/,
  ],
  [
    'an http effect header set twice',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', headers: { 'X-A': '1', 'x-a': '2' } } } })] },
    /routes\.0\.effect\.http\.headers\.x-a: set twice/,
  ],
  // Signed forwards: a Standard Webhooks secret the app's library reads the same way.
  [
    'an http effect sign secret without whsec_',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', sign: 'my-long-password-for-the-app' } } })] },
    /routes\.0\.effect\.http\.sign: must start with "whsec_".*openssl rand -base64 32/,
  ],
  [
    'an http effect sign secret that is not base64',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', sign: 'whsec_not-base64!' } } })] },
    /routes\.0\.effect\.http\.sign: the part after "whsec_" is not standard base64/,
  ],
  [
    'an http effect sign secret of too few bytes',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', sign: 'whsec_dGVzdA==' } } })] },
    /routes\.0\.effect\.http\.sign: decodes to 4 bytes; a key must be 24 to 64 bytes/,
  ],
  [
    'an http effect sign secret from an unset variable',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', sign: 'env:NO_SUCH_FORWARD_SECRET' } } })] },
    /routes\.0\.effect\.http\.sign: environment variable NO_SUCH_FORWARD_SECRET is not set or empty/,
  ],
  [
    'an http effect header from an unset variable',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', headers: { Authorization: 'env:NO_SUCH_APP_TOKEN' } } } })] },
    /routes\.0\.effect\.http\.headers\.Authorization: environment variable NO_SUCH_APP_TOKEN is not set or empty/,
  ],
  [
    'an http effect header from a missing file',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', headers: { Authorization: `file:${join(tmp.dir, 'no-such-token')}` } } } })] },
    /routes\.0\.effect\.http\.headers\.Authorization: cannot read secret file .*no-such-token \(ENOENT\)/,
  ],
  [
    'an http effect header from a file holding a line break',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', headers: { Authorization: `file:${twoLinesFile}` } } } })] },
    /routes\.0\.effect\.http\.headers\.Authorization: the value holds a line break/,
  ],
  [
    'an http effect header receiver signs',
    { routes: [route({ effect: { http: { url: 'https://a.example/h', sign: SIGN, headers: { 'Webhook-Id': 'mine' } } } })] },
    /routes\.0\.effect\.http\.headers\.Webhook-Id: receiver sets this header on every request it signs/,
  ],
  [
    'a Twilio publicUrl that is not http(s)',
    { sources: { tw: { provider: 'twilio', secret: 'x', publicUrl: 'ftp://example.com/hook' } } },
    /sources\.tw\.publicUrl: must be an http:\/\/ or https:\/\/ URL/,
  ],
];

function configErrorOf(json: Record<string, unknown>): ReceiverError {
  try {
    resolveConfig({ database: join(tmp.dir, 'x.db'), ...json }, 'c.json', {}, env);
  } catch (e) {
    expect(e).toBeInstanceOf(ReceiverError);
    expect((e as ReceiverError).kind).toBe('config');
    return e as ReceiverError;
  }
  throw new Error('expected a config error');
}

describe('secrets give usable key bytes; no field is silently ignored', () => {
  it.each(BAD)('config loading refuses %s, naming the field', (_, json, message) => {
    expect(configErrorOf(json).message).toMatch(message);
  });

  it('the same forms, well made, load', () => {
    const good = resolveConfig(
      {
        database: join(tmp.dir, 'x.db'),
        sources: {
          sw: { provider: 'standard-webhooks', secrets: [SW, 'whsec_QQ', 'whsec_QQ==', 'whsec_-_8'] },
          polar: { provider: 'standard-webhooks', secret: 'whsec_', secretEncoding: 'utf8' },
          gl: { provider: 'gitlab', secrets: ['!!!!', 'whsec_dGVzdA=='] },
          gh: { provider: 'github', secret: ' spaced secret ' },
          mw: { provider: 'mailwebhook', keys: { k1: 'env:GOOD_SECRET' }, toleranceSeconds: 60 },
          g: { provider: 'hmac-sha256', header: 'X-Sig', secret: 'k', timestampHeader: 'X-Time', signedPayload: 'v1:{timestamp}:{body}', toleranceSeconds: 60 },
          tw: { provider: 'twilio', secret: 'x', publicUrl: 'https://example.com/hook' },
          n: { provider: 'none', deliveryId: '{body.id}' },
        },
        routes: [
          route({
            effect: { http: { url: 'https://example.com/hooks', headers: { Authorization: 'Bearer app-token', 'X-Tenant': 'shop één', 'Webhook-Id': 'x' } } },
          }),
          route({
            name: 'signed',
            effect: { http: { url: 'https://example.com/hooks', sign: 'env:FORWARD_SECRET', headers: { Authorization: 'env:GOOD_SECRET' } } },
          }),
        ],
      },
      'c.json',
      {},
      env,
    );
    // Header values named by reference are resolved at load; webhook-* are the app's own only when unsigned.
    const signed = good.httpSecrets.get('signed')!;
    expect(signed.sign?.reveal()).toBe(SIGN);
    expect(signed.headers.Authorization?.reveal()).toBe('good-secret');
    expect([...good.sources.keys()]).toEqual(['sw', 'polar', 'gl', 'gh', 'mw', 'g', 'tw', 'n']);
    expect(good.sources.get('sw')?.secrets).toHaveLength(4);
  });

  it('sources named "constructor" and "toString" are sources like any other', () => {
    const c = resolveConfig(
      {
        database: join(tmp.dir, 'x.db'),
        sources: { constructor: { provider: 'github', secret: 'a' }, toString: { provider: 'stripe', secret: 'b' } },
        routes: [route({ source: 'constructor' })],
      },
      'c.json',
      {},
      {},
    );
    expect([...c.sources.keys()]).toEqual(['constructor', 'toString']);
    expect(c.sources.get('constructor')?.provider.name).toBe('github');
  });

  // Every case through the command's own entry point (exit code, stdout, stderr); the first
  // two also as a real child process, which adds only process start-up (~0.5 s a case).
  it('check-config exits 2 on each, with Error naming the field and Try; as a subprocess too', async () => {
    const failures: string[] = [];
    let n = 0;
    for (const [what, json, message] of BAD) {
      const d = join(tmp.dir, `cc-${++n}`);
      mkdirSync(d);
      const file = writeConfig(d, json);
      const r = n <= 2 ? await runCli(['check-config', '-c', file], { env }) : await runInProcess(['check-config', '-c', file], { env });
      if (r.code !== 2 || r.stdout !== '' || !message.test(r.stderr) || !/^Error: /m.test(r.stderr) || !/^Try: /m.test(r.stderr)) {
        failures.push(`${what}: exit ${r.code}\n${r.stdout}${r.stderr}`);
      }
    }
    expect(failures).toEqual([]);
  }, 120_000);
});
