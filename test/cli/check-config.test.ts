import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { nobodyCommand, receiverForNobodyOrSkip, runCli, runInProcess, tempDir, writeConfig } from '../helpers.js';
import { postgresAvailable, postgresBaseUrl } from '../postgres-helpers.js';

const pgOk = await postgresAvailable();

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

/** The configurations here run exec effects and name no service user. */
const NO_USER =
  'Warning: "user" is not set: exec and module effects run as the user serve runs as and can read its secrets through /proc/<serve\'s pid>/environ and /proc/<pid>/mem (as root: everything); set "user" to the service\'s user and start serve as root (contrib/receiver.service does): it reads its secrets, then becomes that user, and its /proc is closed to its effects\n';

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
    // Readable by its owner only, as a secret file should be (else check-config warns).
    writeFileSync(`${d}/shop.secret`, `${FILE_SECRET}\n`, { mode: 0o600 });
    writeFileSync(`${d}/issue-licence`, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
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
          effect: { exec: [`${d}/issue-licence`], timeoutSeconds: 30 },
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

  it('no warning about /proc once "user" names the service\'s user, or with no exec or module effect', async () => {
    const d = dir();
    const withUser = writeConfig(d, { ...valid(d), user: 'nobody' });
    const r = await runInProcess(['check-config', '-c', withUser], { env });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const httpOnly = writeConfig(d, { ...valid(d), routes: [] });
    expect((await runInProcess(['check-config', '-c', httpOnly], { env })).stderr).toBe('');
    // $RECEIVER_USER names it as well (contrib/receiver.sh sets it).
    expect((await runInProcess(['check-config', '-c', writeConfig(d, valid(d))], { env: { ...env, RECEIVER_USER: 'nobody' } })).stderr).toBe('');
  });

  it('started as root with "user", it reads the secrets as root, then checks as that user', async (ctx) => {
    // It runs as nobody once the configuration is read: its code must be where nobody can read
    // it. Not root: skipped, saying so.
    const bin = receiverForNobodyOrSkip(ctx);
    const runCli = (args: string[], o: { env: NodeJS.ProcessEnv }) => {
      const r = spawnSync(process.execPath, [bin, ...args], { env: { ...process.env, ...o.env }, encoding: 'utf8' });
      return Promise.resolve({ code: r.status, stdout: r.stdout, stderr: r.stderr });
    };
    const d = dir();
    chmodSync(tmp.dir, 0o755);
    chownSync(d, 65534, 65534);
    const file = writeConfig(d, { ...valid(d), user: 'nobody' });
    // The secret file stays root's alone: only the root part of the process reads it.
    const r = await runCli(['check-config', '-c', file], { env });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^checked as nobody: /m);
    const unknown = await runCli(['check-config', '-c', writeConfig(d, { ...valid(d), user: 'no-such-user' })], { env });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/^Error: user: there is no user "no-such-user" on this machine/m);
  });

  it('exits 0 and prints the resolved sources and routes without a secret value', async () => {
    const d = dir();
    const file = writeConfig(d, valid(d));
    const r = await runCli(['check-config', '-c', file], { env });
    expect(r.stderr).toBe(NO_USER);
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
    ['malformed JSON', () => `{ "sources": { "a": { "provider": "stripe", "secret": "${LITERAL}", } }`, env, /receiver\.config\.json:1:\d+: not valid JSON/],
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

  describe('checks what the first event would meet, without running any effect', () => {
    const routesOf = (d: string, effects: Record<string, unknown>[]) => ({
      ...valid(d),
      routes: effects.map((effect, i) => ({ name: `r${i}`, source: 'stripe', events: ['*'], key: '{body.id}', effect })),
    });

    it('passes when programs (by path, and by bare name through PATH) exist and are executable and modules load; a module is imported, never called', async () => {
      const d = dir();
      mkdirSync(`${d}/bin`);
      writeFileSync(`${d}/bin/notify`, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
      writeFileSync(
        `${d}/handler.mjs`,
        // Its top level prints and starts a timer that never ends: neither reaches check-config's output nor keeps it running.
        `import { writeFileSync } from 'node:fs';\nconsole.log('handler loaded');\nsetInterval(() => {}, 1000);\nexport default async () => { writeFileSync(${JSON.stringify(`${d}/called`)}, 'x'); };\n`,
      );
      const file = writeConfig(
        d,
        routesOf(d, [{ exec: [`${d}/issue-licence`] }, { exec: ['notify', '--flag'] }, { module: './handler.mjs' }, { exec: ['sh', '-c', 'true'] }]),
      );
      const r = await runCli(['check-config', '-c', file], { env: { ...env, PATH: `${d}/bin:${process.env.PATH ?? ''}` } });
      expect(r.stderr).toBe(NO_USER);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^checked as \S+: exec programs found and executable, modules load, the database directory writable$/m);
      expect(existsSync(`${d}/called`)).toBe(false);
      expect(r.stdout).not.toContain('handler loaded');
      const json = await runCli(['check-config', '-c', file, '--json'], { env: { ...env, PATH: `${d}/bin:${process.env.PATH ?? ''}` }, timeoutMs: 15_000 });
      expect(json.code).toBe(0);
      expect((JSON.parse(json.stdout) as { routes: unknown[] }).routes).toHaveLength(4);
    });

    it('names each route whose program or module is missing, not executable or does not load, and the database directory; exit 2', async () => {
      const d = dir();
      writeFileSync(`${d}/not-exec.sh`, '#!/bin/sh\nexit 0\n', { mode: 0o644 });
      chmodSync(`${d}/not-exec.sh`, 0o644);
      mkdirSync(`${d}/a-dir`);
      writeFileSync(`${d}/broken.mjs`, 'export default async (event, ctx) => {\n');
      writeFileSync(`${d}/no-default.mjs`, 'export const handler = async () => {};\n');
      writeFileSync(`${d}/plain-file`, 'not a directory');
      const file = writeConfig(d, {
        ...routesOf(d, [
          { exec: ['/nonexistent/issue-licence'] },
          { exec: [`${d}/not-exec.sh`] },
          { exec: ['no-such-program-anywhere'] },
          { exec: [`${d}/a-dir`] },
          { module: './missing.mjs' },
          { module: './broken.mjs' },
          { module: `${d}/no-default.mjs` },
          { exec: [`${d}/issue-licence`] },
        ]),
        database: `${d}/plain-file/data/receiver.db`,
      });
      for (const json of [false, true]) {
        const r = await runInProcess(['check-config', '-c', file, ...(json ? ['--json'] : [])], { env: { ...env, PATH: '/usr/bin:/bin' } });
        expect(r.code).toBe(2);
        expect(r.stdout).toBe('');
        const lines = r.stderr.split('\n');
        expect(lines[0]).toMatch(/^Error: .*receiver\.config\.json: 8 problems found \(checked as \S+, nothing was run\)$/);
        expect(lines.slice(1, 9)).toEqual([
          'routes.0 (r0).effect.exec.0: /nonexistent/issue-licence does not exist',
          `routes.1 (r1).effect.exec.0: ${d}/not-exec.sh is not executable by ${lines[0]!.replace(/.*checked as (\S+),.*/, '$1')} (chmod +x ${d}/not-exec.sh, or check the directories above it)`,
          "routes.2 (r2).effect.exec.0: no-such-program-anywhere is not found on PATH (/usr/bin:/bin); give its absolute path, or add its directory to PATH in the service's environment",
          `routes.3 (r3).effect.exec.0: ${d}/a-dir is not a file`,
          `routes.4 (r4).effect.module: ${d}/missing.mjs does not exist (relative to the configuration file's directory, ${d})`,
          expect.stringMatching(new RegExp(`^routes\\.5 \\(r5\\)\\.effect\\.module: ${d}/broken\\.mjs cannot be loaded: .+`)),
          `routes.6 (r6).effect.module: ${d}/no-default.mjs has no default export function (export default async function (event, ctx) { ... })`,
          `database: the directory ${d}/plain-file/data cannot be created: ${d}/plain-file is a file (install -d -m 0750 -o receiver -g receiver ${d}/plain-file/data)`,
        ]);
        expect(r.stderr).toMatch(/^Try: fix what is named above; run check-config as the service's user/m);
        expectNoSecrets(r.stdout + r.stderr);
      }
    });

    it('names a pidFile serve could not write: a directory that does not exist, or a pid file that is a directory; exit 2', async () => {
      const d = dir();
      mkdirSync(`${d}/pid-dir`);
      for (const [pidFile, problem] of [
        [`${d}/no-such-dir/receiver.pid`, `pidFile: the directory ${d}/no-such-dir does not exist`],
        [`${d}/pid-dir`, `pidFile: ${d}/pid-dir is a directory`],
      ] as const) {
        const file = writeConfig(d, { ...routesOf(d, []), pidFile });
        const r = await runInProcess(['check-config', '-c', file], { env });
        expect(r.code).toBe(2);
        expect(r.stderr.split('\n').slice(0, 2)).toEqual([expect.stringMatching(/: a problem found \(checked as /), problem]);
      }
      const ok = writeConfig(d, { ...routesOf(d, []), pidFile: `${d}/receiver.pid` });
      expect((await runInProcess(['check-config', '-c', ok], { env })).code).toBe(0);
    });

    it('resolves a relative program path against the working directory, as serve does', async () => {
      const d = dir();
      mkdirSync(`${d}/scripts`);
      writeFileSync(`${d}/scripts/deploy.sh`, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
      const file = writeConfig(d, routesOf(d, [{ exec: ['./scripts/deploy.sh'] }]));
      expect((await runCli(['check-config', '-c', file], { env, cwd: d })).code).toBe(0);
      const elsewhere = await runCli(['check-config', '-c', file], { env, cwd: tmp.dir });
      expect(elsewhere.code).toBe(2);
      expect(elsewhere.stderr).toContain(
        `routes.0 (r0).effect.exec.0: ${tmp.dir}/scripts/deploy.sh does not exist (relative to the working directory ${tmp.dir}, where serve runs too)`,
      );
    });

    it('a database directory that does not exist yet passes when serve could create it', async () => {
      const d = dir();
      const file = writeConfig(d, { ...valid(d), database: `${d}/data/receiver.db` });
      expect((await runInProcess(['check-config', '-c', file], { env })).code).toBe(0);
    });

    it.skipIf(!pgOk)('on PostgreSQL it connects: a server that answers passes, a refused connection is named (password hidden)', async () => {
      const d = dir();
      const ok = writeConfig(d, { ...valid(d), database: postgresBaseUrl });
      const passed = await runInProcess(['check-config', '-c', ok], { env });
      expect(passed.stderr).toBe(NO_USER);
      expect(passed.code).toBe(0);
      expect(passed.stdout).toMatch(/^checked as \S+: exec programs found and executable, modules load, the database answers$/m);
      // Port 1: nothing listens there.
      const refused = await runInProcess(['check-config', '-c', ok, '--db', 'postgres://receiver:pg-pass-1a2b@127.0.0.1:1/receiver'], { env });
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/^database: cannot connect to postgres:\/\/receiver:\*\*\*@127\.0\.0\.1:1\/receiver: .*ECONNREFUSED/m);
      expect(refused.stderr).not.toContain('pg-pass-1a2b');
    });

    // Permissions are checked for the user running check-config. Root may write anywhere, so
    // as root the command runs as `nobody` (setpriv), as an operator runs it as the service's user.
    it('names what this user cannot do: a program only root may run, a directory or a database file it cannot write', async (ctx) => {
      const root = process.getuid?.() === 0;
      const bin = root ? receiverForNobodyOrSkip(ctx) : '';
      const d = dir();
      chmodSync(tmp.dir, 0o755);
      chmodSync(d, 0o755);
      valid(d);
      // The secret, the service's own: readable by the user check-config runs as.
      if (root) chownSync(`${d}/shop.secret`, 65534, 65534);
      writeFileSync(`${d}/root-only.sh`, '#!/bin/sh\nexit 0\n', { mode: 0o700 });
      chmodSync(`${d}/root-only.sh`, root ? 0o700 : 0o600);
      mkdirSync(`${d}/ro`);
      chmodSync(`${d}/ro`, 0o555);
      mkdirSync(`${d}/rw`);
      chmodSync(`${d}/rw`, 0o777);
      writeFileSync(`${d}/rw/receiver.db`, '');
      chmodSync(`${d}/rw/receiver.db`, 0o444);
      const run = (database: string) => {
        const file = writeConfig(d, { ...routesOf(d, [{ exec: [`${d}/root-only.sh`] }]), database });
        chmodSync(file, 0o644);
        const args = ['check-config', '-c', file];
        if (!root) return runInProcess(args, { env });
        return new Promise<{ code: number | null; stderr: string }>((resolve) => {
          const as = nobodyCommand(bin, args);
          const child = spawn(as.file, as.args, { env: { ...process.env, ...env }, cwd: d });
          let stderr = '';
          child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
          child.on('close', (code) => resolve({ code, stderr }));
        });
      };
      const user = root ? 'nobody' : userInfo().username;
      const ro = await run(`${d}/ro/receiver.db`);
      expect(ro.code).toBe(2);
      expect(ro.stderr).toContain(`checked as ${user}, nothing was run`);
      expect(ro.stderr).toContain(`routes.0 (r0).effect.exec.0: ${d}/root-only.sh is not executable by ${user}`);
      expect(ro.stderr).toContain(`database: the directory ${d}/ro is not writable by ${user}`);
      const file = await run(`${d}/rw/receiver.db`);
      expect(file.code).toBe(2);
      expect(file.stderr).toContain(`database: database ${d}/rw/receiver.db cannot be written by ${user}: the file is not writable`);
    });
  });
});

describe('receiver check-config: an effect longer than the shutdown grace', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  const config = (extra: Record<string, unknown>, deployTimeout?: number) =>
    writeConfig(tmp.dir, {
      user: 'nobody',
      sources: { gh: { provider: 'github', secret: 'gh-grace-secret' } },
      routes: [
        { name: 'licence', source: 'gh', key: '{body.id}', effect: { exec: ['/bin/true'] } },
        {
          name: 'deploy',
          source: 'gh',
          key: '{body.id}',
          effect: { exec: ['/bin/true'], ...(deployTimeout === undefined ? {} : { timeoutSeconds: deployTimeout }) },
        },
      ],
      ...extra,
    });

  it('names the route, both values and what a stop does to it; exit 0', async () => {
    const r = await runInProcess(['check-config', '-c', config({ shutdownGraceSeconds: 10 }, 240)]);
    expect(r.code).toBe(0);
    // licence's effect keeps the default timeoutSeconds, 30 s: longer than a 10 s grace too.
    expect(r.stderr.split('\n').filter((l) => l.startsWith('Warning: route'))).toEqual([
      'Warning: route "licence": its effect may run for up to 30 s (effect.timeoutSeconds), longer than shutdownGraceSeconds (10 s): a stop or restart cuts it after 10 s and it runs again after the restart. Raise shutdownGraceSeconds to 30 (and the systemd unit\'s TimeoutStopSec above it), or lower effect.timeoutSeconds',
      'Warning: route "deploy": its effect may run for up to 240 s (effect.timeoutSeconds), longer than shutdownGraceSeconds (10 s): a stop or restart cuts it after 10 s and it runs again after the restart. Raise shutdownGraceSeconds to 240 (and the systemd unit\'s TimeoutStopSec above it), or lower effect.timeoutSeconds',
    ]);
  });

  it('says nothing when every effect fits the grace, nor with the defaults (30 s each)', async () => {
    expect((await runInProcess(['check-config', '-c', config({ shutdownGraceSeconds: 240 }, 240)])).stderr).toBe('');
    expect((await runInProcess(['check-config', '-c', config({})])).stderr).toBe('');
  });
});
