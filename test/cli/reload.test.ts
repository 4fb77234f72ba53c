import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { github } from '../../src/providers/github.js';
import { receiverForNobodyOrSkip, runCli, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';

/**
 * SIGHUP reloads a real `receiver serve`: routes added and removed, a `file:` secret and
 * an environment-file secret rotated, a broken file and a `port` change refused, all
 * while a bounded load of signed deliveries runs. Nothing is refused, lost or run twice,
 * and after every refused reload the running configuration keeps answering as before.
 */

const STEADY = 'steady-secret-0b1f-reload';
let n = 0;

async function deliver(url: string, source: string, secret: string): Promise<{ status: number; deliveryId: string }> {
  const body = JSON.stringify({ ref: 'refs/heads/main', n: n++, at: Date.now() });
  const signed = github.sign(Buffer.from(body), secret, Date.now(), undefined as never, url);
  const res = await fetch(`${url}/webhooks/${source}`, { method: 'POST', headers: { 'content-type': 'application/json', ...signed.headers }, body });
  await res.text();
  // GitHub's delivery id, as receiver stores it: <hook id>:<delivery guid>.
  return { status: res.status, deliveryId: `${signed.headers['x-github-hook-id']}:${signed.headers['x-github-delivery']}` };
}

/** `concurrency` senders posting to `source` until stop(), at most `max` deliveries in all. */
function startLoad(url: string, source: string, secret: string, concurrency = 4, max = 1500) {
  const results: { status: number; deliveryId: string; sentAt: number }[] = [];
  let stopping = false;
  const senders = Array.from({ length: concurrency }, async () => {
    while (!stopping && results.length < max) {
      const sentAt = Date.now();
      try {
        results.push({ ...(await deliver(url, source, secret)), sentAt });
        // A bounded rate, so that the serial drain's backlog stays short on a busy machine.
        await new Promise((r) => setTimeout(r, 5));
      } catch (e) {
        results.push({ status: -1, deliveryId: String(e), sentAt });
      }
    }
  });
  return {
    results,
    stop: async () => {
      stopping = true;
      await Promise.all(senders);
      return results;
    },
  };
}

function logLines(serve: ServeProcess): Record<string, unknown>[] {
  return serve
    .output()
    .stderr.split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Sends SIGHUP and waits for its outcome line (`config reloaded...` or `config reload failed`). */
async function reload(serve: ServeProcess): Promise<Record<string, unknown>> {
  const outcomes = () => logLines(serve).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('config reload'));
  const before = outcomes().length;
  serve.child.kill('SIGHUP');
  return waitFor(() => outcomes()[before], 'the reload outcome line', 20_000);
}

const lines = (file: string) =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
    : [];

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

describe('serve: SIGHUP reload', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it('adds and removes routes, rotates file: and env-file secrets, refuses a broken file and a port change, under load: nothing refused, lost or run twice', async () => {
    const dir = join(tmp.dir, 'load');
    mkdirSync(dir);
    const envFile = join(dir, 'env');
    const secretFile = join(dir, 'gh2.secret');
    writeFileSync(envFile, '# secrets\nGH_SECRET=env-secret-one-0000\n', { mode: 0o600 });
    writeFileSync(secretFile, 'file-secret-one-0000\n', { mode: 0o600 });
    const port = await freePort();
    // Routes a and b forward to this server, which records each run by route and event id.
    const ran: Record<string, string[]> = { a: [], b: [] };
    const app = createHttpServer((req, res) => {
      ran[req.url!.slice(1)]?.push(String(req.headers['x-receiver-event-id']));
      req.resume();
      req.on('end', () => res.end('ok'));
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    const forward = (route: string) => ({ http: { url: `http://127.0.0.1:${(app.address() as { port: number }).port}/${route}` } });
    const routeA = { name: 'a', source: 'steady', key: '{id}', effect: forward('a') };
    const routeB = { name: 'b', source: 'steady', key: '{id}', effect: forward('b') };
    const slowScript = `echo "$RECEIVER_EVENT_ID" >> ${join(dir, 'slow.started')}; sleep 1; echo "$RECEIVER_EVENT_ID" >> ${join(dir, 'slow.log')}`;
    const slow = { name: 'slow', source: 'gh2', key: '{id}', effect: { exec: ['/bin/sh', '-c', slowScript] } };
    const base = {
      database: join(dir, 'receiver.db'),
      port,
      sources: {
        steady: { provider: 'github', secret: STEADY },
        gh: { provider: 'github', secret: 'env:GH_SECRET' },
        gh2: { provider: 'github', secret: `file:${secretFile}` },
      },
    };
    const file = writeConfig(dir, { ...base, routes: [routeA, slow] });
    const serve = await startServe(file, { args: ['--env-file', envFile], portFlag: false });
    try {
      const load = startLoad(serve.url, 'steady', STEADY);
      await waitFor(() => (load.results.length > 20 ? true : undefined), 'the first deliveries', 10_000);

      // A route added: events from now on run it too.
      writeConfig(dir, { ...base, routes: [routeA, routeB, slow] });
      const added = await reload(serve);
      expect(added).toMatchObject({ level: 'info', msg: 'config reloaded', routesAdded: ['b'] });
      // serve logs it once the drain took the new routes in: a delivery sent from now on runs b.
      const addedAt = Date.now();

      // A file: secret rotated: the old one is refused from now on, the new one accepted.
      writeFileSync(secretFile, 'file-secret-two-0000\n');
      expect(await reload(serve)).toMatchObject({ msg: 'config reloaded', secretsRotated: ['sources.gh2.secrets.0'] });
      expect((await deliver(serve.url, 'gh2', 'file-secret-one-0000')).status).toBe(401);

      // An env-file secret rotated, the same way.
      expect((await deliver(serve.url, 'gh', 'env-secret-one-0000')).status).toBe(202);
      writeFileSync(envFile, 'GH_SECRET=env-secret-two-0000\n');
      expect(await reload(serve)).toMatchObject({ msg: 'config reloaded', secretsRotated: ['sources.gh.secrets.0'] });
      expect((await deliver(serve.url, 'gh', 'env-secret-one-0000')).status).toBe(401);
      expect((await deliver(serve.url, 'gh', 'env-secret-two-0000')).status).toBe(202);

      // A route removed while its work waits: the running effect finishes under the old
      // configuration; the route's effect never starts again.
      for (let i = 0; i < 3; i++) expect((await deliver(serve.url, 'gh2', 'file-secret-two-0000')).status).toBe(202);
      const [running] = await waitFor(
        () => (lines(join(dir, 'slow.started')).length > 0 ? lines(join(dir, 'slow.started')) : undefined),
        'slow to start',
        45_000,
      );
      writeConfig(dir, { ...base, routes: [routeA, routeB] });
      expect(await reload(serve)).toMatchObject({ msg: 'config reloaded', routesRemoved: ['slow'] });

      // A broken file, then a port change: refused, with nothing of them applied.
      writeFileSync(file, '{\n  "sources": {,\n}\n');
      const broken = await reload(serve);
      expect(broken).toMatchObject({ level: 'error', msg: 'config reload failed' });
      expect(String(broken.err)).toContain(`${file}:2:`);
      writeConfig(dir, { ...base, port: port + 1, routes: [routeA] });
      const moved = await reload(serve);
      expect(moved).toMatchObject({ level: 'error', msg: 'config reload failed' });
      expect(String(moved.err)).toContain('port: needs a restart');
      // The running configuration answers as before: route b still runs, gh's secret is the new one.
      expect((await deliver(serve.url, 'gh', 'env-secret-two-0000')).status).toBe(202);

      // The load goes on past the reloads (on a fast run they take less than a second).
      await waitFor(() => (load.results.length > 50 ? true : undefined), 'more than 50 deliveries under load', 20_000);
      const results = await load.stop();
      // Nothing refused or failed.
      expect(results.filter((r) => r.status !== 202)).toEqual([]);
      expect(results.length).toBeGreaterThan(50);

      // Nothing lost: every 202 is a stored event; nothing run twice: each id once per route.
      const db = new Database(join(dir, 'receiver.db'), { readonly: true });
      const stored = new Map(
        (db.prepare("SELECT id, delivery_id AS d FROM events WHERE source = 'steady'").all() as { id: number; d: string }[]).map((r) => [r.d, r.id]),
      );
      expect(results.filter((r) => !stored.has(r.deliveryId))).toEqual([]);
      const ids = results.map((r) => String(stored.get(r.deliveryId)));
      await waitFor(() => (ran.a!.length >= ids.length ? true : undefined), 'route a to run every event', 60_000);
      const a = ran.a!;
      expect(new Set(a).size).toBe(a.length);
      expect(new Set(a)).toEqual(new Set(ids));
      // Route b ran for events after it was added (each once), never for the first ones.
      const b = ran.b!;
      expect(new Set(b).size).toBe(b.length);
      expect(b).not.toContain(ids[0]);
      const afterAdd = results.filter((r) => r.sentAt > addedAt).map((r) => String(stored.get(r.deliveryId)));
      expect(afterAdd.length).toBeGreaterThan(0);
      await waitFor(() => (afterAdd.every((id) => b.includes(id)) ? true : undefined), 'route b to run every event sent after it was added', 30_000);
      expect(new Set(b).size).toBe(b.length);

      // The removed route: the effect running at the reload finished, under the old
      // configuration; none started after it; no event was deleted; events show says so.
      // (Routes a and b run in lanes of their own: the checks above may end before it does.)
      await waitFor(() => (lines(join(dir, 'slow.log')).length > 0 ? true : undefined), 'the running slow effect to finish', 10_000);
      expect(lines(join(dir, 'slow.log'))).toEqual([running]);
      expect(lines(join(dir, 'slow.started'))).toEqual([running]);
      expect(db.prepare("SELECT count(*) AS c FROM events WHERE source = 'gh2'").get()).toEqual({ c: 3 });
      db.close();
      writeConfig(dir, { ...base, routes: [routeA, routeB] });
      const shown = await runCli(['events', 'show', running!, '-c', file]);
      expect(shown.stdout).toContain('route slow: no longer configured');

      const metrics = await (await fetch(`${serve.url}/metrics`)).text();
      expect(metrics).toContain('receiver_config_reloads_total{result="ok"} 4');
      expect(metrics).toContain('receiver_config_reloads_total{result="error"} 2');
      expect(metrics).toMatch(/receiver_config_loaded_timestamp_seconds \d/);
    } finally {
      await serve.stop();
      app.close();
    }
  }, 120_000);

  it('started as root with "user": a privileged reader reloads root-only files; effects get no channel to it; it ends with serve', async (ctx) => {
    const bin = receiverForNobodyOrSkip(ctx);
    const dir = join(tmp.dir, 'root');
    mkdirSync(dir);
    chmodSync(tmp.dir, 0o755);
    chmodSync(dir, 0o755);
    // The service's own directory: the database and what the effect writes.
    const data = join(dir, 'data');
    mkdirSync(data);
    const nobody = spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' }).stdout.trim();
    chownSync(data, Number(nobody), Number(spawnSync('id', ['-g', 'nobody'], { encoding: 'utf8' }).stdout.trim()));
    // Root's alone: the configuration, the environment file and the secret file.
    const envFile = join(dir, 'env');
    const secretFile = join(dir, 'gh2.secret');
    writeFileSync(envFile, 'GH_SECRET=root-env-one-0000\n', { mode: 0o600 });
    writeFileSync(secretFile, 'root-file-one-0000\n', { mode: 0o600 });
    const file = writeConfig(dir, {
      user: 'nobody',
      database: join(data, 'receiver.db'),
      sources: { gh: { provider: 'github', secret: 'env:GH_SECRET' }, gh2: { provider: 'github', secret: `file:${secretFile}` } },
      routes: [{ name: 'fds', source: 'gh', key: '{id}', effect: { exec: ['ls', '-l', '/proc/self/fd'] } }],
    });
    chmodSync(file, 0o600);
    const serve = await startServe(file, { bin, args: ['--env-file', envFile], cwd: data });
    const pid = serve.child.pid!;
    const uidOf = (p: number) => /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${p}/status`, 'utf8'))?.[1];
    const reader = readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .map(Number)
      .find((p) => {
        try {
          return (
            readFileSync(`/proc/${p}/stat`, 'utf8').split(') ')[1]!.split(' ')[1] === String(pid) &&
            readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('reader')
          );
        } catch {
          return false;
        }
      });
    try {
      expect(uidOf(pid)).toBe(nobody);
      expect(reader).toBeDefined();
      expect(uidOf(reader!)).toBe('0');

      // An exec effect holds no descriptor of the reader's channel (a socket): its only
      // sockets are its own stdin, stdout and stderr. Its output is kept with its attempt.
      expect((await deliver(serve.url, 'gh', 'root-env-one-0000')).status).toBe(202);
      const db = new Database(join(data, 'receiver.db'), { readonly: true });
      const output = await waitFor(
        () => (db.prepare("SELECT output FROM attempts WHERE route = 'fds'").get() as { output: string } | undefined)?.output ?? undefined,
        'the effect to run',
        10_000,
      );
      db.close();
      const open: Record<string, string> = {};
      for (const l of output.split('\n')) {
        const m = /(\d+) -> (.*)$/.exec(l);
        if (m !== null) open[m[1]!] = m[2]!;
      }
      // (A pipe the test runner leaves open may be inherited through serve; a socket never is.)
      const beyondStdio = Object.entries(open).filter(([fd]) => Number(fd) > 2);
      expect(beyondStdio.filter(([, target]) => target.startsWith('socket:'))).toEqual([]);
      expect(open['3']).toMatch(/^\/proc\/\d+\/fd$/);

      // Both root-only secrets rotated: serve, now nobody, reloads them through the reader.
      writeFileSync(envFile, 'GH_SECRET=root-env-two-0000\n');
      writeFileSync(secretFile, 'root-file-two-0000\n');
      const reloaded = await reload(serve);
      expect(reloaded).toMatchObject({ msg: 'config reloaded', secretsRotated: ['sources.gh.secrets.0', 'sources.gh2.secrets.0'] });
      expect((await deliver(serve.url, 'gh', 'root-env-one-0000')).status).toBe(401);
      expect((await deliver(serve.url, 'gh', 'root-env-two-0000')).status).toBe(202);
      expect((await deliver(serve.url, 'gh2', 'root-file-one-0000')).status).toBe(401);
      expect((await deliver(serve.url, 'gh2', 'root-file-two-0000')).status).toBe(202);
    } finally {
      // Killed without a word: the reader sees its channel close and ends.
      await serve.stop('SIGKILL');
    }
    await waitFor(() => (existsSync(`/proc/${reader}`) ? undefined : true), 'the reader to end with serve', 10_000);
  }, 60_000);
});
