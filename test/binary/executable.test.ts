import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { github } from '../../src/providers/github.js';
import { openSqlite } from '../../src/store/sqlite/open.js';
import { BINARY, binarySandbox, makeConfig, runCli, startServe, tempDir, waitFor, writeConfig } from '../helpers.js';
import { createTestDatabase, postgresAvailable } from '../postgres-helpers.js';

/**
 * What only the single executable does: it runs with no node and no node_modules, imports
 * module effects, and carries better-sqlite3's addon, which it writes once per content hash
 * into a private directory and checks before loading. And one pass through everything it
 * runs: serve with ingest and exec, http and module effects, SIGTERM, each subcommand once,
 * the admin pages, PostgreSQL (the node project tests each of them in depth).
 */

const require = createRequire(import.meta.url);
const ADDON = join(dirname(require.resolve('better-sqlite3/package.json')), 'build/Release/better_sqlite3.node');
const addonSha = createHash('sha256').update(readFileSync(ADDON)).digest('hex');
const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const pgOk = await postgresAvailable();

/**
 * Two routes for every event of `shop`: an ESM module effect that appends "<key> <parent pid>
 * <pid>" to module.log, and an exec effect appending the effect key to exec.log. In serve the
 * exec effect runs from the drain's thread, the module in the module host (the executable again).
 */
function effectRoutes(dir: string): unknown[] {
  writeFileSync(
    join(dir, 'record.mjs'),
    [
      `import { appendFileSync } from 'node:fs';`,
      `export default async function (event, ctx) { appendFileSync(${JSON.stringify(join(dir, 'module.log'))}, ctx.key + ' ' + process.ppid + ' ' + process.pid + '\\n'); }`,
      '',
    ].join('\n'),
  );
  return [
    { name: 'mod', source: 'shop', events: ['*'], key: '{body.id}', effect: { module: './record.mjs' } },
    {
      name: 'sh',
      source: 'shop',
      events: ['*'],
      key: '{body.id}',
      effect: { exec: ['/bin/sh', '-c', `echo "$RECEIVER_EFFECT_KEY" >> ${join(dir, 'exec.log')}`] },
    },
  ];
}

/** module.log has `lines` lines, every one written by the same module host: a child process of serve. */
function expectModuleHost(log: string, lines: number, servePid: number | undefined): void {
  const hosts = log
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => l.slice(l.indexOf(' ') + 1));
  expect(hosts).toHaveLength(lines);
  const [ppid, pid] = hosts[0]!.split(' ').map(Number);
  expect(ppid).toBe(servePid);
  expect(pid).not.toBe(servePid);
  expect(new Set(hosts).size).toBe(1);
}

describe.runIf(BINARY !== undefined)('the single executable', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let k = 0;
  /** A fresh directory with a config (one hmac source) and its own cache directory for the addon. */
  const setup = (extra: Record<string, unknown> = {}) => {
    const dir = join(tmp.dir, String(++k));
    mkdirSync(dir);
    const source = {
      provider: 'hmac-sha256',
      header: 'X-Signature',
      prefix: 'sha256=',
      secret: 'env:BIN_SHOP_SECRET',
      deliveryId: '{body.id}',
      eventType: '{body.type}',
    };
    const json = { sources: { shop: source }, ...extra };
    // stats refuses a missing database: made here, by node_modules' own better-sqlite3.
    if (!('database' in extra)) openSqlite(join(dir, 'receiver.db'), { busyTimeoutMs: 0 }).close();
    return {
      dir,
      json,
      file: writeConfig(dir, json),
      cache: join(dir, 'cache'),
      env: { BIN_SHOP_SECRET: 'shop-secret-9f2', XDG_CACHE_HOME: join(dir, 'cache') },
    };
  };

  it('runs with no node on PATH, from a directory with no node_modules above it', async () => {
    const box = binarySandbox();
    expect(spawnSync('sh', ['-c', 'command -v node'], { env: box.env }).status).not.toBe(0);
    for (let d = box.cwd; d !== dirname(d); d = dirname(d)) expect(existsSync(join(d, 'node_modules'))).toBe(false);
    const r = await runCli(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: receiver /);
  });

  it('a session: serve, send-test, a duplicate, events list and show, exec and module effects, reload, SIGTERM', async () => {
    const s = setup();
    // An ESM module effect and an exec effect beside the config, drained by serve's drain
    // thread: the executable must carry and start that thread, import the module there and
    // spawn from there.
    const json = { ...s.json, routes: effectRoutes(s.dir) };
    const file = writeConfig(s.dir, json);
    const pidFile = join(s.dir, 'receiver.pid');
    const serve = await startServe(file, { env: s.env, args: ['--pid-file', pidFile] });
    try {
      const sent = await runCli(['send-test', 'shop', '-c', file, '--url', serve.url, '--run-effects'], { env: s.env });
      expect(sent.code).toBe(0);
      expect(sent.stdout).toMatch(/-> 202 /);

      const config = makeConfig(json, s.dir, s.env);
      const source = config.sources.get('shop')!;
      const body = '{"id":"o-7","type":"order.paid"}';
      const url = `${serve.url}/webhooks/shop`;
      const signed = source.provider.sign(Buffer.from(body), 'shop-secret-9f2', Date.now(), source, url);
      const post = () => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...signed.headers }, body });
      const first = await post();
      const again = await post();
      expect(first.status).toBe(202);
      expect(again.status).toBe(202);
      const id = ((await first.json()) as { id: number }).id;
      expect(((await again.json()) as { id: number }).id).toBe(id);

      const read = (name: string) => (existsSync(join(s.dir, name)) ? readFileSync(join(s.dir, name), 'utf8') : '');
      await waitFor(() => (read('module.log').includes('o-7 ') && read('exec.log').includes('sh:o-7') ? true : undefined), 'both effects of o-7', 10_000);

      const list = await runCli(['events', 'list', '-c', file, '--json'], { env: s.env });
      expect(list.code).toBe(0);
      const events = JSON.parse(list.stdout) as { id: number; deliveryId: string; duplicates: number }[];
      expect(events).toHaveLength(2);
      expect(events.find((e) => e.id === id)).toMatchObject({ deliveryId: 'o-7', duplicates: 1 });
      await waitFor(() => (read('module.log').split('\n').length === 3 ? true : undefined), 'the send-test event done', 10_000);
      const show = await runCli(['events', 'show', String(id), '-c', file, '--json'], { env: s.env });
      expect(show.code).toBe(0);
      expect(JSON.parse(show.stdout)).toMatchObject({ id, deliveryId: 'o-7', status: 'done' });
      // The module ran in the module host, not in serve.
      expectModuleHost(read('module.log'), 2, serve.child.pid);

      // reload knows the executable's serve by its command line, and prints serve's outcome.
      const reloaded = await runCli(['reload', '-c', file, '--pid-file', pidFile], { env: s.env });
      expect(reloaded.stderr).toBe('');
      expect(reloaded.stdout).toBe(`serve ${serve.child.pid} reloaded ${file}: nothing changed\n`);
    } finally {
      expect(await serve.stop('SIGTERM')).toBe(0);
    }
    expect(serve.output().stderr).toContain('"msg":"stopped"');
    expect(serve.output().stderr).toContain('"msg":"drain started"');
    // Every stderr line is a JSON log line (no runtime warning slipped in).
    for (const line of serve
      .output()
      .stderr.split('\n')
      .filter((l) => l !== ''))
      expect(() => JSON.parse(line)).not.toThrow();
  });

  it('a module effect that cannot be loaded, or throws, fails with a short error naming its file, never the bundle', async () => {
    const s = setup();
    writeFileSync(join(s.dir, 'boom.mjs'), `export default async function () { throw new Error('boom from the handler'); }\n`);
    const routes = [
      { name: 'gone', source: 'shop', events: ['*'], key: '{body.id}', effect: { module: './missing.mjs' } },
      { name: 'boom', source: 'shop', events: ['*'], key: '{body.id}', effect: { module: './boom.mjs' } },
    ];
    const file = writeConfig(s.dir, { ...s.json, routes });
    const serve = await startServe(file, { env: s.env });
    let log: { route: string; error: string | null }[] = [];
    try {
      expect((await runCli(['send-test', 'shop', '-c', file, '--url', serve.url, '--run-effects'], { env: s.env })).code).toBe(0);
      const show = async () =>
        JSON.parse((await runCli(['events', 'show', '1', '-c', file, '--json'], { env: s.env })).stdout) as {
          attemptLog: { route: string; error: string | null }[];
        };
      for (const until = Date.now() + 10_000; !['gone', 'boom'].every((r) => log.some((a) => a.route === r));) {
        if (Date.now() > until) throw new Error(`no failed attempt of each route within 10 s: ${JSON.stringify(log)}`);
        await new Promise((r) => setTimeout(r, 100));
        log = (await show()).attemptLog;
      }
    } finally {
      expect(await serve.stop('SIGTERM')).toBe(0);
    }
    const gone = log.find((a) => a.route === 'gone')!.error!;
    expect(gone).toContain(join(s.dir, 'missing.mjs'));
    expect(log.find((a) => a.route === 'boom')!.error).toContain('boom from the handler');
    for (const a of log) expect(a.error!.length).toBeLessThan(1000);
    const stderr = serve.output().stderr;
    expect(stderr).not.toContain('data:text/javascript');
    for (const line of stderr.split('\n')) expect(line.length).toBeLessThan(5000);
  });

  it('serves the admin pages (login, overview, event page) and their JSON API; check-config and catch-up --help run', async () => {
    const s = setup({ admin: { token: 'env:BIN_ADMIN_TOKEN' } });
    const token = 'a'.repeat(40);
    const env = { ...s.env, BIN_ADMIN_TOKEN: token };
    const check = await runCli(['check-config', '-c', s.file], { env });
    expect(check.code).toBe(0);
    const help = await runCli(['catch-up', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: receiver catch-up /);
    const serve = await startServe(s.file, { env });
    try {
      expect((await runCli(['send-test', 'shop', '-c', s.file, '--url', serve.url], { env })).code).toBe(0);
      const login = await fetch(`${serve.url}/admin/login`);
      expect(login.status).toBe(200);
      expect(await login.text()).toContain('<form');
      const api = await fetch(`${serve.url}/admin/api/events`, { headers: { authorization: `Bearer ${token}` } });
      expect(api.status).toBe(200);
      const [event] = (await api.json()) as { id: number }[];
      expect(event).toBeDefined();
      const session = await fetch(`${serve.url}/admin/login`, {
        method: 'POST',
        redirect: 'manual',
        headers: { origin: serve.url },
        body: new URLSearchParams({ token, next: '/admin' }),
      });
      expect(session.status).toBe(303);
      const cookie = session.headers.getSetCookie()[0]!.split(';')[0]!;
      // The pages are Hono JSX (the overview with its chart, one event): rendered by the bundle.
      const overview = await fetch(`${serve.url}/admin`, { headers: { cookie } });
      expect(overview.status).toBe(200);
      expect(await overview.text()).toContain('<svg');
      const page = await fetch(`${serve.url}/admin/events/${event!.id}`, { headers: { cookie } });
      expect(page.status).toBe(200);
      expect(await page.text()).toContain('Replay');
    } finally {
      expect(await serve.stop('SIGTERM')).toBe(0);
    }
  });

  it('every other subcommand once, an http effect, and a module host that is killed at its timeout and restarted', async () => {
    const s = setup();
    const version = await runCli(['--version']);
    expect(version.code).toBe(0);
    expect(version.stdout).toMatch(/^\d+\.\d+\.\d+/);
    const missing = join(s.dir, 'elsewhere', 'receiver.db');
    const none = await runCli(['events', 'list', '-c', s.file, '--db', missing], { env: s.env });
    expect(none.code).toBe(1);
    expect(none.stderr).toContain(`Error: no database at ${missing}`);
    expect(existsSync(missing)).toBe(false);

    // An http effect to a server of this test, and a module that spins past its timeout once.
    const hits: string[] = [];
    const app = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        hits.push(body);
        res.end();
      });
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    writeFileSync(join(s.dir, 'spin.mjs'), `export default async (event, ctx) => { if (ctx.attempt === 1) for (;;) {} }\n`);
    const routes = [
      {
        name: 'app',
        source: 'shop',
        events: ['*'],
        key: '{body.id}',
        effect: { http: { url: `http://127.0.0.1:${(app.address() as AddressInfo).port}/hook` } },
      },
      { name: 'spin', source: 'shop', events: ['*'], key: '{body.id}', effect: { module: './spin.mjs', timeoutSeconds: 1 } },
    ];
    const file = writeConfig(s.dir, { ...s.json, routes, retry: { maxAttempts: 3, baseSeconds: 0.1, maxSeconds: 0.2 } });
    const check = await runCli(['check-config', '-c', file, '--json'], { env: s.env });
    expect(check.code).toBe(0);
    expect(JSON.parse(check.stdout)).toMatchObject({ routes: expect.any(Array) });
    const serve = await startServe(file, { env: s.env });
    try {
      expect((await runCli(['send-test', 'shop', '-c', file, '--url', serve.url, '--run-effects'], { env: s.env })).code).toBe(0);
      const show = async () =>
        JSON.parse((await runCli(['events', 'show', '1', '-c', file, '--json'], { env: s.env })).stdout) as {
          status: string;
          attemptLog: { route: string; outcome: string; error: string | null }[];
        };
      // Polled in the database (a CLI run per poll costs a process start), then shown once.
      const db = openSqlite(join(s.dir, 'receiver.db'), { busyTimeoutMs: 1000 });
      try {
        const status = () => (db.prepare('SELECT status FROM events WHERE id = 1').get() as { status: string } | undefined)?.status;
        for (const until = Date.now() + 30_000; status() !== 'done' && Date.now() < until;) await new Promise((r) => setTimeout(r, 100));
      } finally {
        db.close();
      }
      const event = await show();
      expect(event.status).toBe('done');
      const spin = event.attemptLog.filter((a) => a.route === 'spin');
      expect(spin.map((a) => a.outcome)).toEqual(['failed', 'ok']);
      expect(spin[0]!.error).toMatch(/^module timed out after 1s/);
      // Each route is its own unit: the app's is done once, and the spin unit's retry does not run it again.
      expect(event.attemptLog.filter((a) => a.route === 'app').map((a) => a.outcome)).toEqual(['ok']);
      expect(hits).toHaveLength(1);
    } finally {
      expect(await serve.stop('SIGTERM')).toBe(0);
      await new Promise((r) => app.close(r));
    }

    const cli = (args: string[]) => runCli([...args, '-c', file, '--json'], { env: s.env });
    const replay = await cli(['replay', '1']);
    expect(replay.code).toBe(0);
    const stats = await cli(['stats']);
    expect(stats.code).toBe(0);
    const purge = await cli(['purge', '--days', '30']);
    expect(purge.code).toBe(0);
    const copy = join(s.dir, 'copy.db');
    const backup = await runCli(['backup', copy, '-c', file], { env: s.env });
    expect(backup.code).toBe(0);
    expect(existsSync(copy)).toBe(true);
  }, 90_000);

  it('started as root with "user": SIGHUP reloads a root-only environment file through the privileged reader', async (ctx) => {
    if (process.getuid?.() !== 0) ctx.skip('serve drops to "user" only when started as root; this run is not root');
    const nobody = {
      uid: Number(spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).stdout),
      gid: Number(spawnSync('id', ['-g', 'nobody'], { encoding: 'utf8' }).stdout),
    };
    // Where nobody can reach the executable: a copy in a directory every user can enter.
    const dir = mkdtempSync(join(tmpdir(), 'receiver-binary-reader-'));
    try {
      chmodSync(dir, 0o755);
      const bin = join(dir, 'receiver');
      copyFileSync(BINARY!, bin);
      chmodSync(bin, 0o755);
      const data = join(dir, 'data');
      mkdirSync(data);
      chownSync(data, nobody.uid, nobody.gid);
      // serve loads the SQLite addon as nobody: from a directory that user alone writes.
      const native = join(dir, 'native');
      mkdirSync(native, { mode: 0o700 });
      chownSync(native, nobody.uid, nobody.gid);
      // Root's alone: the configuration and the environment file.
      const envFile = join(dir, 'env');
      writeFileSync(envFile, 'GH_SECRET=binary-env-one-0000\n', { mode: 0o600 });
      const file = writeConfig(dir, { user: 'nobody', database: join(data, 'receiver.db'), sources: { gh: { provider: 'github', secret: 'env:GH_SECRET' } } });
      chmodSync(file, 0o600);
      const serve = await startServe(file, { bin, args: ['--env-file', envFile], cwd: data, env: { RECEIVER_NATIVE_DIR: native } });
      const deliver = async (secret: string) => {
        const body = JSON.stringify({ ref: 'refs/heads/main', at: Date.now() });
        const signed = github.sign(Buffer.from(body), secret, Date.now(), undefined as never, serve.url);
        return (await fetch(`${serve.url}/webhooks/gh`, { method: 'POST', headers: { 'content-type': 'application/json', ...signed.headers }, body })).status;
      };
      try {
        expect(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${serve.child.pid}/status`, 'utf8'))?.[1]).toBe(String(nobody.uid));
        expect(await deliver('binary-env-one-0000')).toBe(202);
        writeFileSync(envFile, 'GH_SECRET=binary-env-two-0000\n');
        serve.child.kill('SIGHUP');
        const reloaded = await waitFor(
          () =>
            serve
              .output()
              .stderr.split('\n')
              .find((l) => l.includes('"msg":"config reload')),
          'the reload outcome line',
          20_000,
        );
        expect(JSON.parse(reloaded)).toMatchObject({ msg: 'config reloaded', secretsRotated: ['sources.gh.secrets.0'] });
        expect(await deliver('binary-env-one-0000')).toBe(401);
        expect(await deliver('binary-env-two-0000')).toBe(202);
      } finally {
        expect(await serve.stop()).toBe(0);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('writes the addon once per content hash, 0500 in a 0700 directory, and does not rewrite it', async () => {
    const s = setup();
    expect((await runCli(['stats', '-c', s.file], { env: s.env })).code).toBe(0);
    const dir = join(s.cache, 'receiver');
    expect(readdirSync(dir)).toEqual([`better_sqlite3-${addonSha.slice(0, 16)}.node`]);
    const file = join(dir, readdirSync(dir)[0]!);
    expect(sha(file)).toBe(addonSha);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(file).mode & 0o777).toBe(0o500);
    const before = statSync(file);
    expect((await runCli(['stats', '-c', s.file], { env: s.env })).code).toBe(0);
    const after = statSync(file);
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
  });

  it('an addon file whose bytes changed is replaced before it is loaded', async () => {
    const s = setup();
    expect((await runCli(['stats', '-c', s.file], { env: s.env })).code).toBe(0);
    const file = join(s.cache, 'receiver', `better_sqlite3-${addonSha.slice(0, 16)}.node`);
    chmodSync(file, 0o600);
    writeFileSync(file, 'not a shared library');
    chmodSync(file, 0o500);
    const r = await runCli(['stats', '-c', s.file, '--json'], { env: s.env });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(sha(file)).toBe(addonSha);
  });

  it('refuses a directory that others can write: exit 2, names it and the fix, loads nothing', async () => {
    const s = setup();
    const dir = join(s.cache, 'receiver');
    mkdirSync(dir, { recursive: true });
    chmodSync(dir, 0o777);
    const r = await runCli(['stats', '-c', s.file], { env: s.env });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(dir);
    expect(r.stderr).toContain('Try: set RECEIVER_NATIVE_DIR');
    expect(readdirSync(dir)).toEqual([]);
  });

  it('refuses a symbolic link under the addon file name: exit 2, Error naming it and Try, never "unexpected"', async () => {
    const s = setup();
    const dir = join(s.cache, 'receiver');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const file = join(dir, `better_sqlite3-${addonSha.slice(0, 16)}.node`);
    symlinkSync(ADDON, file);
    const r = await runCli(['stats', '-c', s.file], { env: s.env });
    expect(r.stderr).toBe(
      `Error: ${file} is a symbolic link; not loading it\nTry: set RECEIVER_NATIVE_DIR to a directory that only the user running receiver can write (mode 0700), or fix the permissions named above\n`,
    );
    expect(r.code).toBe(2);
    expect(lstatSync(file).isSymbolicLink()).toBe(true);
  });

  it('RECEIVER_NATIVE_DIR chooses the directory', async () => {
    const s = setup();
    const chosen = join(s.dir, 'native');
    expect((await runCli(['stats', '-c', s.file], { env: { ...s.env, RECEIVER_NATIVE_DIR: chosen } })).code).toBe(0);
    expect(readdirSync(chosen)).toEqual([`better_sqlite3-${addonSha.slice(0, 16)}.node`]);
    expect(existsSync(s.cache)).toBe(false);
  });

  it.runIf(pgOk)('PostgreSQL: serve drains module and exec effects in its thread, stats works, the SQLite addon is never written', async () => {
    const db = await createTestDatabase();
    try {
      const s = setup({ database: db.url });
      const file = writeConfig(s.dir, { ...s.json, routes: effectRoutes(s.dir) });
      const read = (name: string) => (existsSync(join(s.dir, name)) ? readFileSync(join(s.dir, name), 'utf8') : '');
      const serve = await startServe(file, { env: s.env });
      try {
        const sent = await runCli(['send-test', 'shop', '-c', file, '--url', serve.url, '--run-effects'], { env: s.env });
        expect(sent.stdout).toMatch(/-> 202 /);
        await waitFor(() => (read('module.log') !== '' && read('exec.log') !== '' ? true : undefined), 'both effects of the test event', 10_000);
        expectModuleHost(read('module.log'), 1, serve.child.pid);
        const stats = await runCli(['stats', '-c', file, '--json'], { env: s.env });
        expect(stats.code).toBe(0);
      } finally {
        expect(await serve.stop('SIGTERM')).toBe(0);
      }
      expect(serve.output().stderr).toContain('"msg":"drain started"');
      expect(existsSync(s.cache)).toBe(false);
      expect(await db.query('SELECT delivery_id FROM events')).toHaveLength(1);
      expect(await db.query("SELECT id FROM events WHERE status = 'done'")).toHaveLength(1);
    } finally {
      await db.drop();
    }
  });
});
