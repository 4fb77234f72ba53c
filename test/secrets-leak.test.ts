import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { afterAll, describe, expect, it } from 'vitest';
import { providers } from '../src/providers/registry.js';
import { makeConfig, receiverForNobodyOrSkip, runCli, startServe, tempDir, waitFor, writeConfig, type CliResult } from './helpers.js';

/**
 * A full session: `receiver serve` with every kind of secret reference, good and bad
 * deliveries, duplicates, a conflict, effects that dump their whole environment, a scrape
 * of /metrics with its token, then check-config, send-test, events, stats and replay.
 * Everything any process wrote to stdout and stderr, and every byte of the database
 * file, is searched for the configured secrets and for the signatures sent: none found.
 */

const unique = (label: string) => `${label}-${randomBytes(9).toString('hex')}`;

const SECRETS = {
  stripe: `whsec_${randomBytes(24).toString('hex')}`,
  githubNew: unique('gh-new'),
  githubOld: unique('gh-old'),
  shopFile: unique('shop-file'),
  standard: `whsec_${randomBytes(24).toString('base64')}`,
  gitlab: unique('gitlab-token'),
  asaas: unique('asaas-token'),
  metrics: unique('metrics-token'),
  // An http effect's credential header (env:) and its signing secret.
  appToken: unique('app-token'),
  forward: `whsec_${randomBytes(32).toString('base64')}`,
};

const env = {
  LEAK_STRIPE_SECRET: SECRETS.stripe,
  LEAK_GH_OLD: SECRETS.githubOld,
  LEAK_STANDARD: SECRETS.standard,
  LEAK_GITLAB: SECRETS.gitlab,
  LEAK_ASAAS: SECRETS.asaas,
  LEAK_METRICS_TOKEN: SECRETS.metrics,
  LEAK_APP_TOKEN: SECRETS.appToken,
  LEAK_FORWARD_SECRET: SECRETS.forward,
};

describe('no secret is ever written: stdout, stderr and the database of a full session', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('finds no configured secret and no signature anywhere', { timeout: 90_000 }, async () => {
    const dir = `${tmp.dir}/session`;
    mkdirSync(dir);
    writeFileSync(`${dir}/shop.secret`, `${SECRETS.shopFile}\n`);
    const dump = ['/bin/sh', '-c', 'env; cat; echo "attempt $RECEIVER_ATTEMPT" >&2'];
    const sources: Record<string, Record<string, unknown>> = {
      stripe: { provider: 'stripe', secret: 'env:LEAK_STRIPE_SECRET' },
      github: { provider: 'github', secrets: [SECRETS.githubNew, 'env:LEAK_GH_OLD'] },
      shop: {
        provider: 'hmac-sha256',
        header: 'X-Signature',
        prefix: 'sha256=',
        secret: `file:${dir}/shop.secret`,
        deliveryId: '{body.id}',
        eventType: '{body.type}',
      },
      polar: { provider: 'standard-webhooks', secret: 'env:LEAK_STANDARD' },
    };
    // Token-style senders, where the header *is* the secret (once their providers exist).
    if (providers.has('gitlab')) sources.gitlab = { provider: 'gitlab', secret: 'env:LEAK_GITLAB' };
    if (providers.has('asaas')) sources.asaas = { provider: 'asaas', secret: 'env:LEAK_ASAAS' };
    // The app an http effect forwards to: it gets the credential and a signature it can check.
    const forwarded: { headers: IncomingHttpHeaders; body: string }[] = [];
    const app = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        forwarded.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    const appUrl = `http://127.0.0.1:${(app.address() as AddressInfo).port}/hooks`;
    const json = {
      sources,
      routes: [
        {
          name: 'forward',
          source: 'shop',
          events: ['*'],
          key: '{id}',
          effect: { http: { url: appUrl, headers: { Authorization: 'env:LEAK_APP_TOKEN' }, sign: 'env:LEAK_FORWARD_SECRET' } },
        },
        { name: 'dump-ok', source: '*', events: ['*'], key: '{source}:{id}', effect: { exec: [...dump.slice(0, 2), `${dump[2]}; exit 0`] } },
        { name: 'dump-fail', source: 'shop', events: ['*'], key: '{id}', effect: { exec: [...dump.slice(0, 2), `${dump[2]}; exit 7`] } },
      ],
      retry: { maxAttempts: 2, baseSeconds: 0.01, maxSeconds: 0.01 },
      metrics: { token: 'env:LEAK_METRICS_TOKEN' },
      log: { level: 'trace' },
    };
    const file = writeConfig(dir, json);
    const config = makeConfig({ ...json, database: `${dir}/receiver.db` }, dir, env);
    const outputs: { what: string; text: string }[] = [];
    const keep = (what: string, r: CliResult) => {
      outputs.push({ what: `${what} stdout`, text: r.stdout }, { what: `${what} stderr`, text: r.stderr });
      return r;
    };
    const signatures: string[] = [];

    const serve = await startServe(file, { env, args: ['--log-level', 'trace'] });
    try {
      const send = async (name: string, body: string, extra: Record<string, string> = {}, secret?: string) => {
        const source = config.sources.get(name)!;
        const url = `${serve.url}/webhooks/${name}`;
        const signed = source.provider.sign(Buffer.from(body), secret ?? source.secrets[0]!.reveal(), Date.now(), source, url);
        for (const [k, v] of Object.entries(signed.headers)) if (/sig|token|hmac/i.test(k)) signatures.push(v);
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...signed.headers, ...extra },
          body: signed.body === undefined ? body : new Uint8Array(signed.body),
        });
        return res.status;
      };
      const now = Math.floor(Date.now() / 1000);
      // Good deliveries, every source, and a duplicate of each.
      for (const name of config.sources.keys()) {
        const body = name === 'shop' ? '{"id":"o-1","type":"order.paid"}' : new TextDecoder().decode(config.sources.get(name)!.provider.sample(Date.now()));
        expect([200, 202]).toContain(await send(name, body));
        expect([200, 202]).toContain(await send(name, body));
      }
      // The old GitHub secret (rotation) also verifies.
      expect(await send('github', `{"zen":"old secret","t":${now}}`, {}, SECRETS.githubOld)).toBe(202);
      // A conflict, and an Authorization header carrying a secret on a stored delivery.
      expect(await send('shop', '{"id":"o-1","type":"order.paid","changed":true}')).toBe(409);
      expect(await send('shop', '{"id":"o-2","type":"order.paid"}', { authorization: `Bearer ${SECRETS.metrics}` })).toBe(202);
      // Bad deliveries: wrong secret, signature of another source, garbage.
      expect(await send('shop', '{"id":"o-3"}', {}, 'not-the-secret')).toBe(401);
      expect(await send('stripe', '{"id":"evt_x"}', {}, SECRETS.githubNew)).toBe(401);
      expect(
        (await fetch(`${serve.url}/webhooks/github`, { method: 'POST', body: '{}', headers: { 'x-hub-signature-256': `sha256=${SECRETS.githubNew}` } })).status,
      ).toBe(401);
      if (config.sources.has('gitlab')) {
        expect((await fetch(`${serve.url}/webhooks/gitlab`, { method: 'POST', body: '{}', headers: { 'x-gitlab-token': `${SECRETS.gitlab}x` } })).status).toBe(
          401,
        );
      }
      // Metrics with its token, and refused without it.
      expect((await fetch(`${serve.url}/metrics`, { headers: { authorization: `Bearer ${SECRETS.metrics}` } })).status).toBe(200);
      expect((await fetch(`${serve.url}/metrics`, { headers: { authorization: `Bearer ${SECRETS.stripe}` } })).status).toBe(401);

      // The CLI around a running server.
      expect(keep('check-config', await runCli(['check-config', '-c', file], { env })).code).toBe(0);
      expect(keep('check-config --json', await runCli(['check-config', '-c', file, '--json'], { env })).code).toBe(0);
      for (const name of config.sources.keys()) {
        // --run-effects: the effects run too (a test delivery skips them otherwise), so their output is looked at.
        const r = keep(`send-test ${name}`, await runCli(['send-test', name, '-c', file, '--url', serve.url, '--run-effects'], { env }));
        expect(r.code).toBe(0);
      }

      // Let the drain run every effect (bounded poll of the database, read-only).
      const db = new Database(`${dir}/receiver.db`, { readonly: true });
      const deadline = Date.now() + 15_000;
      const settled = () => (db.prepare(`SELECT count(*) FROM events WHERE status IN ('pending', 'processing')`).pluck().get() as number) === 0;
      while (!settled() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(settled()).toBe(true);
      expect(db.prepare(`SELECT count(*) FROM attempts WHERE output IS NOT NULL AND output <> ''`).pluck().get()).toBeGreaterThan(0);
      expect(db.prepare(`SELECT count(*) FROM events WHERE status = 'dead'`).pluck().get()).toBeGreaterThan(0);
      db.close();

      const list = keep('events list --json', await runCli(['events', 'list', '--json', '--limit', '100', '-c', file], { env }));
      const ids = (JSON.parse(list.stdout) as { id: number }[]).map((e) => e.id);
      expect(ids.length).toBeGreaterThan(5);
      // events show for a few (each CLI run is a second): the newest, the oldest, a dead one.
      const dead = (
        JSON.parse(keep('events list --status dead', await runCli(['events', 'list', '--status', 'dead', '--json', '-c', file], { env })).stdout) as {
          id: number;
        }[]
      )[0]!.id;
      for (const id of new Set([ids[0]!, ids.at(-1)!, dead]))
        keep(`events show ${id}`, await runCli(['events', 'show', String(id), '--json', '-c', file], { env }));
      keep('events show (text)', await runCli(['events', 'show', String(ids[0]), '-c', file], { env }));
      keep('stats', await runCli(['stats', '--json', '-c', file], { env }));
      keep('replay --dead', await runCli(['replay', '--dead', '-c', file], { env }));
    } finally {
      expect(await serve.stop()).toBe(0);
      app.close();
    }
    // The app got the resolved credential and forwards it can verify; nothing else saw either.
    expect(forwarded.length).toBeGreaterThan(0);
    for (const f of forwarded) {
      expect(f.headers.authorization).toBe(SECRETS.appToken);
      expect(() => new Webhook(SECRETS.forward).verify(f.body, f.headers as Record<string, string>)).not.toThrow();
    }
    const { stdout, stderr } = serve.output();
    outputs.push({ what: 'serve stdout', text: stdout }, { what: 'serve stderr', text: stderr });
    // The session really logged deliveries and effect attempts (so the search means something).
    expect(stderr).toContain('"msg":"delivery"');
    expect(stderr).toContain('"msg":"effect attempt"');

    const needles = [...Object.entries(SECRETS).map(([k, v]) => [`secret ${k}`, v] as const), ...signatures.map((s, i) => [`signature ${i}`, s] as const)];
    expect(signatures.length).toBeGreaterThan(10);
    const found: string[] = [];
    for (const { what, text } of outputs) for (const [name, needle] of needles) if (text.includes(needle)) found.push(`${name} in ${what}`);

    // Every column of every table, as text (bodies too).
    const db = new Database(`${dir}/receiver.db`, { readonly: true });
    const tables = db.prepare(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`).pluck().all() as string[];
    for (const table of tables) {
      for (const row of db.prepare(`SELECT * FROM ${table}`).all() as Record<string, unknown>[]) {
        for (const [column, value] of Object.entries(row)) {
          const text = Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
          for (const [name, needle] of needles) if (text.includes(needle)) found.push(`${name} in ${table}.${column}`);
        }
      }
    }
    db.close();
    // And every byte of the files (free pages, the WAL), in case something was written and deleted.
    for (const suffix of ['', '-wal', '-shm', '-journal']) {
      const path = `${dir}/receiver.db${suffix}`;
      if (!existsSync(path)) continue;
      const bytes = readFileSync(path);
      for (const [name, needle] of needles) if (bytes.includes(Buffer.from(needle))) found.push(`${name} in receiver.db${suffix} bytes`);
    }
    expect(found).toEqual([]);
  });
});

/** Whether this process may run serve as `nobody` (root and util-linux setpriv). */
const AS_ROOT = process.getuid?.() === 0 && spawnSync('setpriv', ['--version']).status === 0;
if (!AS_ROOT) {
  describe.skip("an effect cannot read serve's secrets through /proc (SKIPPED: it needs root and util-linux setpriv, and this run has not both)", () => {
    it('runs serve as root and its effects as nobody', () => {});
  });
}
const NOBODY = 65534;

/**
 * What an exec effect finds when it looks for serve's secrets: its own environment, serve's
 * /proc/<pid>/environ, and every readable region of serve's memory (/proc/<pid>/maps and
 * /proc/<pid>/mem). It is given what to look for in a file of its own, never through serve.
 */
const PROBE = `
import { closeSync, openSync, readFileSync, readSync, renameSync, writeFileSync } from 'node:fs';
const [out, needlesFile] = process.argv.slice(2);
const needles = Object.entries(JSON.parse(readFileSync(needlesFile, 'utf8')));
const found = (buf) => needles.filter(([, v]) => buf.includes(Buffer.from(v))).map(([k]) => k);
const pid = process.ppid;
const report = { pid, ownEnv: found(Buffer.from(JSON.stringify(process.env))) };
try { report.environ = found(readFileSync('/proc/' + pid + '/environ')); } catch (e) { report.environ = e.code; }
try {
  const maps = readFileSync('/proc/' + pid + '/maps', 'utf8');
  const fd = openSync('/proc/' + pid + '/mem', 'r');
  const hits = new Set();
  let bytes = 0;
  for (const line of maps.split('\\n')) {
    // Writable memory: the heaps, the stack (with the environment), the data of libraries.
    const m = /^([0-9a-f]+)-([0-9a-f]+) rw/.exec(line);
    if (m === null) continue;
    const start = parseInt(m[1], 16), length = parseInt(m[2], 16) - start;
    if (length > 256 * 1024 * 1024) continue;
    const buf = Buffer.allocUnsafe(length);
    try { bytes += readSync(fd, buf, 0, length, start); } catch { continue; }
    for (const k of found(buf)) hits.add(k);
  }
  closeSync(fd);
  report.mem = { bytes, found: [...hits] };
} catch (e) { report.mem = e.code; }
writeFileSync(out + '.part', JSON.stringify(report));
renameSync(out + '.part', out);
`;

interface ProbeReport {
  pid: number;
  ownEnv: string[];
  environ: string[] | string;
  mem: { bytes: number; found: string[] } | string;
}

describe.runIf(AS_ROOT)("an effect cannot read serve's secrets through /proc", () => {
  const tmp = tempDir();
  chmodSync(tmp.dir, 0o755);
  afterAll(tmp.cleanup);

  /**
   * serve with secrets of every kind (env:, a root-only file:, the admin and metrics
   * tokens, an http effect's credential and signing secret, a variable nothing names),
   * one delivery, and two exec effects that look for them: the probe above, and
   * `cat /proc/$PPID/environ; env` whose output the attempt keeps.
   */
  async function session(name: string, how: { args?: string[]; user?: string; wrap?: string[] }, ctx: { skip: (note: string) => never }) {
    // The probe finds serve's secrets in the memory of node running bin/receiver.js (the
    // ordinary-user case proves it); in the single executable's memory it has not been shown
    // to find them, so there it would prove nothing.
    if (process.env.RECEIVER_TEST_BINARY !== undefined) ctx.skip('the /proc probe is proven against node running bin/receiver.js, not the single executable');
    // serve runs as nobody after its start: its code must be where nobody can read it.
    const bin = receiverForNobodyOrSkip(ctx);
    const dir = `${tmp.dir}/${name}`;
    mkdirSync(`${dir}/state`, { recursive: true });
    chmodSync(dir, 0o755);
    chownSync(`${dir}/state`, NOBODY, NOBODY);
    const secrets = {
      github: unique('gh'),
      file: unique('file'),
      admin: unique('admin-token-0123456789abcdef0123456789'),
      metrics: unique('metrics'),
      appToken: unique('app-token'),
      forward: `whsec_${randomBytes(32).toString('base64')}`,
      unrelated: unique('unrelated'),
    };
    const env = {
      PROC_GH_SECRET: secrets.github,
      PROC_ADMIN_TOKEN: secrets.admin,
      PROC_METRICS_TOKEN: secrets.metrics,
      PROC_APP_TOKEN: secrets.appToken,
      PROC_FORWARD_SECRET: secrets.forward,
      PROC_UNRELATED: secrets.unrelated,
    };
    writeFileSync(`${dir}/file.secret`, `${secrets.file}\n`, { mode: 0o600 });
    // Root's alone when serve starts as root; serve started as nobody must read it itself.
    if (how.wrap !== undefined) chownSync(`${dir}/file.secret`, NOBODY, NOBODY);
    writeFileSync(`${dir}/probe.mjs`, PROBE, { mode: 0o644 });
    writeFileSync(`${dir}/needles.json`, JSON.stringify(secrets), { mode: 0o644 });
    const json = {
      ...(how.user === undefined ? {} : { user: how.user }),
      database: `${dir}/state/receiver.db`,
      sources: {
        gh: { provider: 'github', secret: 'env:PROC_GH_SECRET' },
        shop: { provider: 'hmac-sha256', header: 'X-Signature', secret: `file:${dir}/file.secret`, deliveryId: '{body.id}' },
      },
      routes: [
        {
          name: 'probe',
          source: 'gh',
          key: '{id}',
          effect: { exec: [process.execPath, `${dir}/probe.mjs`, `${dir}/state/probe.json`, `${dir}/needles.json`], timeoutSeconds: 120 },
        },
        { name: 'cat', source: 'gh', key: '{id}', effect: { exec: ['/bin/sh', '-c', 'cat /proc/$PPID/environ; echo; env; exit 3'] } },
        {
          name: 'app',
          source: 'gh',
          key: '{id}',
          effect: { http: { url: 'http://127.0.0.1:9/', headers: { Authorization: 'env:PROC_APP_TOKEN' }, sign: 'env:PROC_FORWARD_SECRET' } },
        },
      ],
      retry: { maxAttempts: 1, baseSeconds: 0.01, maxSeconds: 0.01 },
      metrics: { token: 'env:PROC_METRICS_TOKEN' },
      admin: { token: 'env:PROC_ADMIN_TOKEN' },
    };
    const file = writeConfig(dir, json);
    chmodSync(file, 0o644);
    const serve = await startServe(file, { env, bin, args: how.args ?? [], ...(how.wrap === undefined ? {} : { wrap: how.wrap }) });
    try {
      const body = '{"zen":"probe","hook_id":1}';
      const sign = (payload: string) => `sha256=${createHmac('sha256', secrets.github).update(payload).digest('hex')}`;
      const res = await fetch(`${serve.url}/webhooks/gh`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-github-event': 'ping', 'x-github-delivery': randomUUID(), 'x-hub-signature-256': sign(body) },
        body,
      });
      expect(res.status).toBe(202);
      const report = await waitFor(
        () => (existsSync(`${dir}/state/probe.json`) ? (JSON.parse(readFileSync(`${dir}/state/probe.json`, 'utf8')) as ProbeReport) : undefined),
        'the probe',
        30_000,
      );
      // Every effect ran to its end (the cat route fails on purpose: its output is kept). The
      // routes run in lanes of their own: one may still be running when another has ended.
      const db = new Database(`${dir}/state/receiver.db`, { readonly: true });
      await waitFor(
        () => ((db.prepare(`SELECT count(*) FROM attempts WHERE finished_at IS NOT NULL`).pluck().get() as number) >= 3 ? true : undefined),
        'three finished attempts',
        30_000,
      );
      const catOutput = db.prepare(`SELECT output FROM attempts WHERE route = 'cat'`).pluck().get() as string;
      db.close();
      // The rest of serve works as that user: metrics (with its process metrics from /proc/self), the admin API.
      const metrics = await fetch(`${serve.url}/metrics`, { headers: { authorization: `Bearer ${secrets.metrics}` } });
      expect(metrics.status).toBe(200);
      const text = await metrics.text();
      expect(Number(/^process_open_fds (\d+)/m.exec(text)?.[1])).toBeGreaterThan(3);
      expect(Number(/^process_resident_memory_bytes (\d+)/m.exec(text)?.[1])).toBeGreaterThan(1e6);
      const stats = await fetch(`${serve.url}/admin/api/stats`, { headers: { authorization: `Bearer ${secrets.admin}` } });
      expect(stats.status).toBe(200);
      const status = readFileSync(`/proc/${serve.child.pid}/status`, 'utf8');
      const owners = ['', '-wal', '-shm'].map((suffix) => statSync(`${dir}/state/receiver.db${suffix}`).uid);
      return { report, catOutput, secrets, uid: Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]), owners, serve };
    } finally {
      expect(await serve.stop()).toBe(0);
    }
  }

  const found = (text: string, secrets: Record<string, string>) =>
    Object.entries(secrets)
      .filter(([, v]) => text.includes(v))
      .map(([k]) => k);

  it(
    'serve --user: started as root, it runs as that user; its effects find no secret in their environment, its environ or its memory',
    { timeout: 90_000 },
    async (ctx) => {
      const { report, catOutput, secrets, uid, owners, serve } = await session('dropped', { args: ['--user', 'nobody'] }, ctx);
      expect(uid).toBe(NOBODY);
      expect(report.pid).toBe(serve.child.pid);
      expect(report.ownEnv).toEqual([]);
      expect(report.environ).toBe('EACCES');
      expect(report.mem).toBe('EACCES');
      expect(found(catOutput, secrets)).toEqual([]);
      expect(catOutput).toMatch(/Permission denied/);
      // Nothing to warn about; the database's files belong to the service's user.
      expect(serve.output().stderr).not.toMatch(/"level":"warn"[^\n]*\/proc/);
      expect(owners).toEqual([NOBODY, NOBODY, NOBODY]);
    },
  );

  it('serve started as root without a user says its effects run as root and can read every secret', async () => {
    const dir = `${tmp.dir}/root`;
    mkdirSync(dir);
    const serve = await startServe(
      writeConfig(dir, {
        routes: [{ name: 'r', source: 'gh', key: '{id}', effect: { exec: ['/bin/true'] } }],
        sources: { gh: { provider: 'github', secret: 'x-secret' } },
      }),
    );
    expect(await serve.stop()).toBe(0);
    const pid = serve.child.pid!;
    expect(serve.output().stderr).toContain(
      `"fix":"set \\"user\\" (or serve --user) to the service's user: serve reads its secrets as root, then becomes that user","msg":"serve runs as root: its exec and module effects run as root and can read every secret (/proc/${pid}/environ, /proc/${pid}/mem, the secret files)"`,
    );
  });

  it('"user" in the configuration does the same', { timeout: 90_000 }, async (ctx) => {
    const { report, uid } = await session('configured', { user: 'nobody' }, ctx);
    expect(uid).toBe(NOBODY);
    expect(report.environ).toBe('EACCES');
    expect(report.mem).toBe('EACCES');
  });

  it('serve started as an ordinary user: it says its effects can read its secrets, and how to close it (and they can)', { timeout: 180_000 }, async (ctx) => {
    const { report, catOutput, secrets, serve } = await session('as-nobody', { wrap: ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups'] }, ctx);
    const warnings = serve
      .output()
      .stderr.split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.level === 'warn' && String(l.msg).includes('/proc'));
    const pid = serve.child.pid!;
    expect(warnings).toEqual([
      expect.objectContaining({
        msg: `serve runs as nobody and its exec and module effects run as nobody too: they can read its secrets through /proc/${pid}/environ and /proc/${pid}/mem`,
        fix: expect.stringContaining('start serve as root with "user": "nobody" (or --user nobody)'),
      }),
    ]);
    // What the warning says is what the effects can do: the environment's secrets, and the
    // ones serve read from a file or holds only in memory.
    expect(report.ownEnv).toEqual([]);
    expect(report.environ).toEqual(expect.arrayContaining(['github', 'admin', 'metrics', 'unrelated']));
    expect((report.mem as { found: string[] }).found).toEqual(expect.arrayContaining(['github', 'file', 'admin', 'metrics', 'appToken', 'forward']));
    expect(found(catOutput, secrets)).toEqual(expect.arrayContaining(['github', 'unrelated']));
  });
});
