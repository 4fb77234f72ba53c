import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeEach, describe, expect, it, type TestContext } from 'vitest';
import { startupWarnings } from '../../src/server.js';
import { assertWritable } from '../../src/store/sqlite/open.js';
import { IngestThread } from '../../src/store/sqlite/ingest-thread.js';
import { makeConfig, nobodyCommand, post, receiverForNobodyOrSkip, runCli, startServe, tempDir, waitFor, writeConfig, type CliResult } from '../helpers.js';
import { insertEvent, seedDb } from '../store/ops-seed.js';

/**
 * `receiver serve` start-up failures, as a child process: each one exits 1 with an
 * `Error:` and a `Try:` line and no stack, and leaves nothing running (no drain, no
 * listener, the database closed). Listen first, then the drain.
 */

const STACK = /^\s+at /m;

function expectErrorTry(r: CliResult, error: string | RegExp): void {
  expect(r.code).toBe(1);
  if (typeof error === 'string') expect(r.stderr).toContain(`Error: ${error}`);
  else expect(r.stderr).toMatch(error);
  expect(r.stderr).toMatch(/^Try: \S/m);
  expect(r.stderr).not.toMatch(STACK);
  expect(r.stderr).not.toContain('Error: Error');
}

/**
 * Runs the CLI as the unprivileged `nobody` user, as a service user would run it; reports
 * the test skipped, with the reason, where this run cannot (not root, no setpriv).
 */
function runCliAsNobody(ctx: TestContext, args: string[], timeoutMs = 20_000): Promise<CliResult> {
  const run = nobodyCommand(receiverForNobodyOrSkip(ctx), args);
  return new Promise((resolve, reject) => {
    const child = spawn(run.file, run.args, { cwd: tmpdir(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

function holdPort(): Promise<Server> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => resolve(s));
  });
}

describe('receiver serve: start-up failures are Error/Try, exit 1, and leave nothing running', () => {
  const tmp = tempDir();
  // `nobody` must reach the files of the permission tests.
  chmodSync(tmp.dir, 0o755);
  afterAll(tmp.cleanup);
  let k = 0;
  const dir = () => {
    k += 1;
    const d = `${tmp.dir}/${k}`;
    mkdirSync(d, { mode: 0o755 });
    chmodSync(d, 0o755);
    return d;
  };

  /** A database with one pending event for a route whose exec effect would create `ran`. */
  const withPendingEvent = (d: string) => {
    const ran = `${d}/ran`;
    const file = writeConfig(d, {
      sources: { t: { provider: 'none' } },
      routes: [{ name: 'touch', source: 't', key: '{id}', effect: { exec: ['/bin/sh', '-c', `touch ${ran}`] } }],
    });
    const db = seedDb(`${d}/receiver.db`);
    insertEvent(db, { source: 't', deliveryId: 'd1', status: 'pending', receivedAt: Date.now() - 1000 });
    db.close();
    return { file, ran, db: `${d}/receiver.db` };
  };

  it('a port in use: exit 1 naming the address and the reason; the drain never ran; the database closed', async () => {
    const held = await holdPort();
    try {
      const port = (held.address() as AddressInfo).port;
      const d = dir();
      const { file, ran, db } = withPendingEvent(d);
      const r = await runCli(['serve', '-c', file, '--port', String(port)]);
      expectErrorTry(r, `cannot listen on 127.0.0.1:${port}: the address is already in use (EADDRINUSE)`);
      expect(r.stderr).toMatch(/^Try: .*--port/m);
      expect(r.stderr).not.toContain('"msg":"drain started"');
      expect(r.stderr).not.toContain('"msg":"listening"');
      expect(existsSync(ran)).toBe(false);
      // Closed cleanly: the last connection's close checkpoints and removes the WAL file.
      expect(existsSync(`${db}-wal`)).toBe(false);
      const conn = new Database(db, { readonly: true });
      expect(conn.prepare('SELECT status, attempts FROM events').get()).toEqual({ status: 'pending', attempts: 0 });
      conn.close();
    } finally {
      held.close();
    }
  });

  it('an address not on this machine: exit 1, EADDRNOTAVAIL in words', async () => {
    const { file, ran } = withPendingEvent(dir());
    // 192.0.2.0/24 is TEST-NET-1: never assigned to an interface.
    const r = await runCli(['serve', '-c', file, '--host', '192.0.2.1', '--port', '0']);
    expectErrorTry(r, 'cannot listen on 192.0.2.1:0: the address is not available on this machine (EADDRNOTAVAIL)');
    expect(r.stderr).toMatch(/^Try: .*--host/m);
    expect(existsSync(ran)).toBe(false);
  });

  it('a port below 1024 without the privilege: exit 1, permission denied', async (ctx) => {
    const start = Number(readFileSync('/proc/sys/net/ipv4/ip_unprivileged_port_start', 'utf8'));
    // Docker's default is 0: every port is unprivileged there, and nothing can be refused.
    ctx.skip(start <= 80, `net.ipv4.ip_unprivileged_port_start is ${start}: port 80 needs no privilege on this machine`);
    const d = dir();
    const file = writeConfig(d, { sources: { t: { provider: 'none' } } });
    chmodSync(d, 0o777);
    const r = await runCliAsNobody(ctx, ['serve', '-c', file, '--port', '80']);
    expectErrorTry(r, 'cannot listen on 127.0.0.1:80: permission denied (EACCES): ports below 1024 need privileges');
    expect(r.stderr).toMatch(/^Try: .*CAP_NET_BIND_SERVICE/m);
  });

  describe('a database the service user cannot write (a restore done as root)', () => {
    beforeEach((ctx) => void receiverForNobodyOrSkip(ctx));

    it('the directory is not writable: refuses to start, names the directory and the user; nothing changed', async (ctx) => {
      const { file, ran, db } = withPendingEvent(dir());
      const r = await runCliAsNobody(ctx, ['serve', '-c', file, '--port', '0']);
      expectErrorTry(r, /^Error: database .*receiver\.db cannot be written by nobody: its directory .* is not writable/m);
      expect(r.stderr).toMatch(/^Try: .*chown nobody/m);
      expect(r.stderr).not.toContain('"msg":"listening"');
      expect(existsSync(ran)).toBe(false);
      expect(existsSync(`${db}-wal`)).toBe(false);
    });

    it('the file is not writable (directory writable): refuses to start', async (ctx) => {
      const d = dir();
      const { file, db } = withPendingEvent(d);
      chmodSync(d, 0o777);
      chmodSync(db, 0o644);
      const r = await runCliAsNobody(ctx, ['serve', '-c', file, '--port', '0']);
      expectErrorTry(r, /^Error: database .*receiver\.db cannot be written by nobody: the file is not writable/m);
    });

    it('its -wal file is not writable: refuses to start', async (ctx) => {
      const d = dir();
      const { file, db } = withPendingEvent(d);
      chmodSync(d, 0o777);
      chmodSync(db, 0o666);
      // A -wal file left by root (its connection still open while the copy was taken).
      const root = new Database(db);
      root.pragma('journal_mode = WAL');
      root.exec('CREATE TABLE IF NOT EXISTS scratch (x)');
      // SQLite gives the -wal file the mode of the database file; a restore as root does not.
      chmodSync(`${db}-wal`, 0o644);
      const r = await runCliAsNobody(ctx, ['serve', '-c', file, '--port', '0']);
      root.close();
      expectErrorTry(r, /^Error: database .*receiver\.db cannot be written by nobody: its WAL file receiver\.db-wal is not writable/m);
    });

    it('a new database in a directory the user cannot write: refuses to start with Error/Try', async (ctx) => {
      const d = dir();
      const file = writeConfig(d, { sources: { t: { provider: 'none' } } });
      const r = await runCliAsNobody(ctx, ['serve', '-c', file, '--port', '0']);
      expectErrorTry(r, /^Error: database .*receiver\.db cannot be written by nobody: its directory/m);
      expect(existsSync(`${d}/receiver.db`)).toBe(false);
    });

    it('a database directory the user cannot create: Error/Try, no stack', async (ctx) => {
      const d = dir();
      const file = writeConfig(d, { sources: { t: { provider: 'none' } }, database: `${d}/sub/receiver.db` });
      const r = await runCliAsNobody(ctx, ['serve', '-c', file, '--port', '0']);
      expectErrorTry(r, `cannot create the database directory ${d}/sub: permission denied (EACCES)`);
    });

    it('an operator command on it says so with Error/Try too (no stack)', async (ctx) => {
      const { file } = withPendingEvent(dir());
      const r = await runCliAsNobody(ctx, ['stats', '-c', file]);
      expectErrorTry(r, /^Error: database .*receiver\.db cannot be written by nobody: attempt to write a readonly database/m);
    });
  });

  it('a file that is not a database: exit 1 with Error/Try; the file is unchanged', async () => {
    const d = dir();
    const file = writeConfig(d, { sources: { t: { provider: 'none' } } });
    const text = 'this is a backup script, not a database\n'.repeat(40);
    writeFileSync(`${d}/receiver.db`, text);
    const r = await runCli(['serve', '-c', file, '--port', '0']);
    expectErrorTry(r, `${d}/receiver.db is not a SQLite database (file is not a database)`);
    expect(readFileSync(`${d}/receiver.db`, 'utf8')).toBe(text);
  });

  it('--db naming a directory, or a path under a file: exit 1 with Error/Try', async () => {
    const d = dir();
    const file = writeConfig(d, { sources: { t: { provider: 'none' } } });
    expectErrorTry(await runCli(['serve', '-c', file, '--port', '0', '--db', d]), `cannot open database ${d}: unable to open database file (SQLITE_CANTOPEN)`);
    expectErrorTry(
      await runCli(['serve', '-c', file, '--port', '0', '--db', `${file}/receiver.db`]),
      `cannot create the database directory ${file}: a part of the path is a file, not a directory`,
    );
  });

  it('a database written by a newer receiver: exit 1, the file untouched', async () => {
    const d = dir();
    const file = writeConfig(d, { sources: { t: { provider: 'none' } } });
    const newer = new Database(`${d}/receiver.db`);
    newer.pragma('user_version = 999');
    newer.close();
    const before = readFileSync(`${d}/receiver.db`);
    const r = await runCli(['serve', '-c', file, '--port', '0']);
    expectErrorTry(r, /^Error: database .* was written by a newer receiver \(schema version 999/m);
    expect(readFileSync(`${d}/receiver.db`).equals(before)).toBe(true);
    expect(existsSync(`${d}/receiver.db-wal`)).toBe(false);
  });

  it('a missing configuration file: exit 2 with Error/Try', async () => {
    const r = await runCli(['serve', '-c', `${tmp.dir}/nope.json`, '--port', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`Error: cannot read configuration file ${tmp.dir}/nope.json (ENOENT)`);
    expect(r.stderr).toMatch(/^Try: /m);
    expect(r.stderr).not.toMatch(STACK);
  });

  it('the write probe after opening refuses what the permission bits do not show (a connection SQLite opened read-only)', () => {
    const d = dir();
    seedDb(`${d}/receiver.db`).close();
    const ro = new Database(`${d}/receiver.db`, { readonly: true });
    try {
      expect(() => assertWritable(ro, `${d}/receiver.db`)).toThrow(
        /^database .*receiver\.db cannot be written by \S+: attempt to write a readonly database \(SQLITE_READONLY\)$/,
      );
    } finally {
      ro.close();
    }
    // Another process holding the write lock is not a read-only database.
    const writer = new Database(`${d}/receiver.db`);
    const rw = new Database(`${d}/receiver.db`, { timeout: 0 });
    writer.exec('BEGIN IMMEDIATE');
    try {
      expect(() => assertWritable(rw, `${d}/receiver.db`)).not.toThrow();
    } finally {
      writer.exec('ROLLBACK');
      writer.close();
      rw.close();
    }
  });

  it('the ingest worker failing to open the database rejects ready (no half-started serve)', async () => {
    const d = dir();
    writeFileSync(`${d}/file`, '');
    const thread = new IngestThread(`${d}/file/receiver.db`, 100);
    await expect(thread.ready).rejects.toMatchObject({ kind: 'runtime', message: expect.stringMatching(/^cannot create the database directory/) });
    await thread.close();
  });
});

describe('receiver serve: start-up warnings', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let k = 0;
  const dir = () => {
    k += 1;
    const d = `${tmp.dir}/${k}`;
    mkdirSync(d);
    return d;
  };
  const lines = (stderr: string) =>
    stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);

  it('warns once per source with provider "none", before listening; not for a verifying provider', async () => {
    const file = writeConfig(dir(), { sources: { open: { provider: 'none' }, gh: { provider: 'github', secret: 'gh-warn-secret' } } });
    const serve = await startServe(file);
    await serve.stop();
    const out = lines(serve.output().stderr);
    const warnings = out.filter((l) => l.level === 'warn');
    expect(warnings).toEqual([
      expect.objectContaining({ source: 'open', msg: 'source "open" uses provider "none": deliveries are NOT verified; use it for local testing only' }),
    ]);
    expect(out.findIndex((l) => l.level === 'warn')).toBeLessThan(out.findIndex((l) => l.msg === 'listening'));
  });

  it('warns of a module route whose timeoutSeconds exceeds busyTimeoutMs (senders would get 503 while it runs)', async () => {
    const d = dir();
    writeFileSync(`${d}/noop.mjs`, 'export default async function () {}\n');
    const file = writeConfig(d, {
      busyTimeoutMs: 2000,
      sources: { gh: { provider: 'github', secret: 'gh-warn-secret' } },
      routes: [
        { name: 'slow-module', source: 'gh', key: '{id}', effect: { module: './noop.mjs', timeoutSeconds: 30 } },
        { name: 'quick-module', source: 'gh', key: '{id}', effect: { module: './noop.mjs', timeoutSeconds: 2 } },
        { name: 'slow-exec', source: 'gh', key: '{id}', effect: { exec: ['/bin/true'], timeoutSeconds: 30 } },
      ],
    });
    const serve = await startServe(file);
    await serve.stop();
    // (Besides the one about /proc: serve runs as root here, test/secrets-leak.test.ts.)
    const warnings = lines(serve.output().stderr).filter((l) => l.level === 'warn' && !String(l.msg).includes('/proc'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ route: 'slow-module', timeoutSeconds: 30, busyTimeoutMs: 2000 });
    expect(warnings[0]?.msg).toMatch(/^route "slow-module": its module effect may hold the database's write lock for up to 30 s .* answered 503/);
  });

  it('warns of an effect whose timeoutSeconds exceeds shutdownGraceSeconds: a stop cuts it, and it runs again after the restart', async () => {
    const d = dir();
    const file = writeConfig(d, {
      shutdownGraceSeconds: 1,
      sources: { gh: { provider: 'github', secret: 'gh-warn-secret' } },
      routes: [
        { name: 'deploy', source: 'gh', key: '{id}', effect: { exec: ['/bin/true'], timeoutSeconds: 240 } },
        { name: 'quick', source: 'gh', key: '{id}', effect: { exec: ['/bin/true'], timeoutSeconds: 1 } },
      ],
    });
    const serve = await startServe(file);
    await serve.stop();
    const warnings = lines(serve.output().stderr).filter((l) => l.level === 'warn' && !String(l.msg).includes('/proc'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ route: 'deploy', timeoutSeconds: 240, shutdownGraceSeconds: 1 });
    expect(warnings[0]?.msg).toMatch(
      /^route "deploy": its effect may run for up to 240 s .* a stop or restart cuts it after 1 s and it runs again after the restart/,
    );
  });

  it('no lock warning on PostgreSQL, which has no single write lock', () => {
    const d = dir();
    const routes = [{ name: 'm', source: 'gh', key: '{id}', effect: { module: './noop.mjs', timeoutSeconds: 30 } }];
    const sources = { gh: { provider: 'github', secret: 'gh-warn-secret' } };
    expect(startupWarnings(makeConfig({ sources, routes }, d)).map((w) => w.fields.route)).toEqual(['m']);
    expect(startupWarnings(makeConfig({ sources, routes, database: 'postgres://postgres@127.0.0.1:5432/postgres' }, d))).toEqual([]);
  });
});

describe('receiver serve: a module effect that leaves a promise rejection unhandled', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('fails that attempt with the rejection (no stack, no body), goes dead after maxAttempts, and the server keeps serving and draining', async () => {
    const d = tmp.dir;
    const MARKER = 'body-marker-5c2e9a';
    // Starts a rejected promise it neither awaits nor catches, then returns normally.
    writeFileSync(`${d}/stray.mjs`, "export default async function () { Promise.reject(new Error('stray rejection')); }\n");
    const file = writeConfig(d, {
      busyTimeoutMs: 60_000,
      retry: { maxAttempts: 2, baseSeconds: 0.05, maxSeconds: 0.1 },
      drain: { pollMs: 50 },
      sources: { t: { provider: 'none', deliveryId: '{body.id}' } },
      routes: [{ name: 'stray', source: 't', key: '{body.id}', effect: { module: './stray.mjs', timeoutSeconds: 5 } }],
    });
    const serve = await startServe(file);
    try {
      for (const id of ['m1', 'm2']) expect((await post(`${serve.url}/webhooks/t`, JSON.stringify({ id, secret: MARKER }))).status).toBe(202);
      const dead = () =>
        serve
          .output()
          .stderr.split('\n')
          .filter((l) => l.includes('"msg":"event dead"'));
      await waitFor(() => (dead().length === 2 ? true : undefined), 'both events dead', 60_000);
      expect(serve.child.exitCode).toBeNull();
      expect((await fetch(`${serve.url}/healthz`)).status).toBe(200);
      const conn = new Database(`${d}/receiver.db`, { readonly: true });
      expect(conn.prepare('SELECT status FROM events ORDER BY id').pluck().all()).toEqual(['dead', 'dead']);
      expect(conn.prepare('SELECT DISTINCT outcome, error FROM attempts').all()).toEqual([
        { outcome: 'failed', error: 'the module left a promise rejection unhandled: stray rejection' },
      ]);
      conn.close();
    } finally {
      expect(await serve.stop()).toBe(0);
    }
    const stderr = serve.output().stderr;
    expect(stderr).not.toContain(MARKER);
    expect(stderr).not.toContain('"level":"fatal"');
  }, 90_000);
});
