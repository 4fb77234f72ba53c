import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { describeConfig } from '../../src/config/describe.js';
import { loadConfig, resolveConfig } from '../../src/config/load.js';
import { ReceiverError } from '../../src/errors.js';
import { runCli, tempDir } from '../helpers.js';

const tmp = tempDir();
afterAll(tmp.cleanup);

function configErrorOf(fn: () => unknown): ReceiverError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ReceiverError);
    expect((e as ReceiverError).kind).toBe('config');
    return e as ReceiverError;
  }
  throw new Error('expected a config error');
}

const base = (sources: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ database: join(tmp.dir, 'x.db'), sources, ...extra });

describe('configuration', () => {
  it('resolves secrets from a literal, env:NAME and file:PATH (trailing newline dropped), several for rotation', () => {
    const file = join(tmp.dir, 'gh.secret');
    writeFileSync(file, 'from-file\n');
    const c = resolveConfig(
      base({ gh: { provider: 'github', secrets: ['literal', 'env:GH_SECRET', `file:${file}`] } }),
      'c.json',
      {},
      { GH_SECRET: 'from-env' },
    );
    expect(c.sources.get('gh')?.secrets.map((s) => s.reveal())).toEqual(['literal', 'from-env', 'from-file']);
  });

  it('a secret never prints: String, JSON and inspect show [secret]', () => {
    const c = resolveConfig(base({ s: { provider: 'stripe', secret: 'whsec_do_not_print' } }), 'c.json', {}, {});
    const text = `${String(c.sources.get('s')?.secrets[0])} ${JSON.stringify(c.sources.get('s'))}`;
    expect(text).not.toContain('whsec_do_not_print');
  });

  it.each([
    [
      'missing env secret',
      base({ stripe: { provider: 'stripe', secret: 'env:NOT_SET_ANYWHERE' } }),
      /sources\.stripe\.secret: environment variable NOT_SET_ANYWHERE is not set/,
    ],
    ['unknown provider', base({ x: { provider: 'strype', secret: 'a' } }), /sources\.x\.provider: unknown provider "strype"/],
    ['unknown field', base({ x: { provider: 'stripe', secrests: ['a'] } }), /sources\.x\.secrests: unknown field/],
    ['no secret for a verifying provider', base({ gh: { provider: 'github' } }), /sources\.gh\.secret: provider "github" needs a secret/],
    ['generic provider without header', base({ g: { provider: 'hmac-sha256', secret: 'a' } }), /sources\.g\.header:/],
    [
      'route to an unknown source',
      base({}, { routes: [{ name: 'r', source: 'nope', key: '{body.id}', effect: { exec: ['true'] } }] }),
      /routes\.0\.source: no source named "nope"/,
    ],
    [
      'route with two effects',
      base({}, { routes: [{ name: 'r', source: '*', key: '{body.id}', effect: { exec: ['true'], module: './m.js' } }] }),
      /routes\.0\.effect: set exactly one/,
    ],
    [
      'key template without placeholder',
      base({}, { routes: [{ name: 'r', source: '*', key: 'constant', effect: { exec: ['true'] } }] }),
      /routes\.0\.key: "constant" has no \{placeholder\}/,
    ],
    ['wrong type', { port: 'eighty' }, /port: /],
  ])('%s is a config error naming the field', (_, json, message) => {
    expect(configErrorOf(() => resolveConfig(json, 'c.json', {}, {})).message).toMatch(message);
  });

  it('malformed JSON names the file; a missing file says how to create one', () => {
    const bad = join(tmp.dir, 'bad.json');
    writeFileSync(bad, '{"sources": {},}');
    expect(configErrorOf(() => loadConfig({ config: bad }, {})).message).toMatch(/bad\.json:1:16: not valid JSON/);
    const missing = configErrorOf(() => loadConfig({ config: join(tmp.dir, 'none.json') }, {}));
    expect(missing.message).toMatch(/cannot read configuration file .*none\.json \(ENOENT\)/);
    expect(missing.hint).toMatch(/cp contrib\/receiver\.example\.json/);
  });

  // Each case: the text, and where an editor should put the cursor (line, column, 1-based).
  it.each([
    ['a trailing comma', '{\n  "port": 8080,\n  "host": "127.0.0.1",\n}\n', 4, 1, /Expected double-quoted property name/],
    ['a missing comma between fields', '{\n  "port": 8080\n  "host": "127.0.0.1"\n}', 3, 3, /Expected ',' or '}' after property value/],
    ['a misspelt literal (Node names no offset)', '{\n  "drain": {\n    "enabled": tru\n  }\n}', 3, 19, /Unexpected character "\\n"$/],
    ['two commas in an array (Node names no offset)', '{\n\t"routes": [1,,2]\n}', 2, 15, /Unexpected character ","$/],
    ['an unquoted word (Node names no offset)', '{\n  "routes": [{ "events": [push] }]\n}', 2, 27, /Unexpected character "p"$/],
    ['NaN (Node names no offset)', '{\n  "retry": { "maxAttempts": NaN }\n}', 2, 29, /Unexpected character "N"$/],
    ['a comment where a value goes (Node names no offset)', '{\n  "port": // the default\n  8080\n}', 2, 11, /Unexpected character "\/"$/],
    ['a cut-off file', '{\n  "sources": {\n', 3, 1, /Expected property name or '}'/],
    ['an empty file', '', 1, 1, /unexpected end of the file/],
    ['a line break inside a string', '{ "host": "a\nb" }', 1, 13, /Bad control character/],
    ['text after the document', '{}\n}', 2, 1, /Unexpected non-whitespace character after JSON$/],
  ])('a JSON syntax error (%s) is reported as file:line:column with the reason', (_what, text, line, column, reason) => {
    const file = join(tmp.dir, 'syntax.json');
    writeFileSync(file, text);
    const e = configErrorOf(() => loadConfig({ config: file }, {}));
    expect(e.message).toMatch(new RegExp(`^${file.replace(/[.\\/]/g, '\\$&')}:${line}:${column}: not valid JSON: `));
    expect(e.message).toMatch(reason);
    expect(e.message).not.toMatch(/position|is not valid JSON$/);
    expect(e.hint).toContain(`line ${line}, column ${column}`);
  });

  it('a byte-order mark before the JSON is accepted', () => {
    const file = join(tmp.dir, 'bom.json');
    writeFileSync(file, `\uFEFF${JSON.stringify({ database: join(tmp.dir, 'bom.db'), port: 9123 })}`);
    expect(loadConfig({ config: file }, {}).port).toBe(9123);
  });

  it('operator commands load without secrets: no env needed, and no secret is read', () => {
    const c = resolveConfig(
      base({ stripe: { provider: 'stripe', secret: 'env:NOT_SET_ANYWHERE' }, mw: { provider: 'mailwebhook', keys: { a: 'env:ALSO_UNSET' } } }),
      'c.json',
      { withoutSecrets: true },
      {},
    );
    expect(c.sources.get('stripe')?.secrets).toEqual([]);
    expect(c.sources.get('stripe')?.retryHorizonHours).toBe(72);
  });

  it('effect.env: names checked, RECEIVER_* refused, exec only, and each listed variable must be set (not for operator commands)', () => {
    const route = (effect: Record<string, unknown>) => base({ gh: { provider: 'none' } }, { routes: [{ name: 'deploy', source: 'gh', key: '{id}', effect }] });
    const e = configErrorOf(() =>
      resolveConfig(
        route({ exec: ['deploy.sh'], env: ['DEPLOY_KEY', '1BAD', 'RECEIVER_ADMIN_TOKEN', 'NOT_SET_HERE', 'EMPTY_IS_SET'] }),
        'c.json',
        {},
        { DEPLOY_KEY: 'k', EMPTY_IS_SET: '' },
      ),
    );
    expect(e.message.split('\n').slice(1)).toEqual([
      'routes.0.effect.env.1: "1BAD" is not a variable name (letters, digits and "_", not starting with a digit)',
      "routes.0.effect.env.2: RECEIVER_ADMIN_TOKEN: RECEIVER_* variables are receiver's own settings and the event variables it sets itself; they are never passed on (rename the variable)",
      "routes.0.effect.env.3: NOT_SET_HERE is not set in receiver's environment (set it where the service gets its environment, e.g. /etc/receiver/env, or remove it from the list)",
    ]);
    expect(
      configErrorOf(() => resolveConfig(route({ http: { url: 'https://x.test/' }, env: ['DEPLOY_KEY'] }), 'c.json', {}, { DEPLOY_KEY: 'k' })).message,
    ).toContain('routes.0.effect.env: only an exec effect starts a command with an environment (remove "env", or use "exec")');
    // Operator commands (events, replay, ...) run no effect: they do not need the service's variables.
    const c = resolveConfig(route({ exec: ['deploy.sh'], env: ['NOT_SET_HERE'] }), 'c.json', { withoutSecrets: true }, {});
    expect(c.routes[0]?.effect.env).toEqual(['NOT_SET_HERE']);
    // check-config shows the names (never values).
    expect(describeConfig(c).routes[0]?.effect).toEqual({ exec: ['deploy.sh'], env: ['NOT_SET_HERE'] });
  });

  it('defaults < file < environment < flags', () => {
    const file = join(tmp.dir, 'layer.json');
    writeFileSync(file, JSON.stringify({ port: 9000, host: '127.0.0.2', database: join(tmp.dir, 'file.db') }));
    expect(loadConfig({ config: file }, {}).port).toBe(9000);
    expect(loadConfig({ config: file }, {}).maxBodyBytes).toBe(1_048_576);
    expect(loadConfig({ config: file }, { RECEIVER_PORT: '9100' }).port).toBe(9100);
    expect(loadConfig({ config: file, port: 9200 }, { RECEIVER_PORT: '9100' }).port).toBe(9200);
    expect(loadConfig({ config: file, db: join(tmp.dir, 'flag.db') }, { RECEIVER_DB: join(tmp.dir, 'env.db') }).database).toBe(join(tmp.dir, 'flag.db'));
    expect(loadConfig({ config: file }, { RECEIVER_DB: join(tmp.dir, 'env.db') }).database).toBe(join(tmp.dir, 'env.db'));
    expect(loadConfig({}, { RECEIVER_CONFIG: file }).host).toBe('127.0.0.2');
  });

  it('log.format: auto by default, then the file, $RECEIVER_LOG_FORMAT, --log-format; log.bufferBytes 4 MiB, at least 16 KiB', () => {
    const file = join(tmp.dir, 'log.json');
    writeFileSync(file, JSON.stringify({ database: join(tmp.dir, 'x.db') }));
    expect(loadConfig({ config: file }, {}).log).toEqual({ level: 'info', format: 'auto', bufferBytes: 4 * 1024 * 1024 });
    writeFileSync(file, JSON.stringify({ database: join(tmp.dir, 'x.db'), log: { format: 'json', bufferBytes: 65_536 } }));
    expect(loadConfig({ config: file }, {}).log).toEqual({ level: 'info', format: 'json', bufferBytes: 65_536 });
    expect(loadConfig({ config: file }, { RECEIVER_LOG_FORMAT: 'pretty' }).log.format).toBe('pretty');
    expect(loadConfig({ config: file, logFormat: 'auto' }, { RECEIVER_LOG_FORMAT: 'pretty' }).log.format).toBe('auto');
    expect(configErrorOf(() => loadConfig({ config: file }, { RECEIVER_LOG_FORMAT: 'text' })).message).toBe('log.format: "text" is not a log format');
    expect(configErrorOf(() => resolveConfig(base({}, { log: { format: 'text' } }), 'c.json')).message).toMatch(
      /^c\.json: invalid configuration\nlog\.format: /,
    );
    expect(configErrorOf(() => resolveConfig(base({}, { log: { bufferBytes: 1000 } }), 'c.json')).message).toMatch(
      /^c\.json: invalid configuration\nlog\.bufferBytes: /,
    );
  });
});

describe('serve with a bad configuration', () => {
  it('exits 2 with Error/Try lines naming the field, and never starts an accept-all server', async () => {
    const file = join(tmp.dir, 'serve-bad.json');
    writeFileSync(file, JSON.stringify(base({ stripe: { provider: 'stripe', secret: 'env:RECEIVER_TEST_UNSET' } })));
    const r = await runCli(['serve', '-c', file, '--port', '0'], { env: { RECEIVER_TEST_UNSET: '' } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^Error: .*invalid configuration\nsources\.stripe\.secret: environment variable RECEIVER_TEST_UNSET is not set/m);
    expect(r.stderr).toMatch(/^Try: /m);
  });

  it('exits 2 on a --port that is not a port, naming the flag', async () => {
    const r = await runCli(['serve', '--port', 'eighty']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--port must be a whole number from 0 to 65535/);
  });

  it('exits 2 on an unknown flag', async () => {
    const r = await runCli(['serve', '--prot', '8080']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown option '--prot'/);
  });
});
