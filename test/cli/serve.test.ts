import Database from 'better-sqlite3';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { github } from '../../src/providers/github.js';
import { configSchema } from '../../src/config/schema.js';
import { serverTimeouts } from '../../src/server.js';
import { WORKER_RESOURCE_LIMITS } from '../../src/threads.js';
import { REPO, startServe, tempDir, writeConfig } from '../helpers.js';

/**
 * `receiver serve` as a real child process: clean shutdown under load, server timeouts
 * against a trickling client, the log lines and the log level.
 */

const SECRET = 'gh-serve-secret-0b1f';
const source = { provider: 'github', secret: 'env:SERVE_TEST_GH_SECRET' };
const env = { SERVE_TEST_GH_SECRET: SECRET };

let n = 0;
async function deliver(url: string, body = JSON.stringify({ ref: 'refs/heads/main', n: n++ })): Promise<{ status: number; text: string }> {
  const signed = github.sign(Buffer.from(body), SECRET, Date.now(), undefined as never, url);
  const res = await fetch(`${url}/webhooks/gh`, { method: 'POST', headers: { 'content-type': 'application/json', ...signed.headers }, body });
  return { status: res.status, text: await res.text() };
}

function logLines(stderr: string): Record<string, unknown>[] {
  return stderr
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('receiver serve (child process)', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let k = 0;
  const configFile = (extra: Record<string, unknown> = {}) => {
    k += 1;
    const dir = `${tmp.dir}/${k}`;
    mkdirSync(dir);
    return { file: writeConfig(dir, { sources: { gh: source }, ...extra }), db: `${dir}/receiver.db` };
  };

  /** One route whose exec effect marks its start, runs `seconds`, then marks its end. */
  const effectConfig = (graceSeconds: number, seconds: number) => {
    k += 1;
    const dir = `${tmp.dir}/${k}`;
    mkdirSync(dir);
    const script = `touch ${dir}/started; sleep ${seconds}; touch ${dir}/finished`;
    const file = writeConfig(dir, {
      sources: { gh: source },
      shutdownGraceSeconds: graceSeconds,
      routes: [{ name: 'slow', source: 'gh', events: ['*'], key: '{id}', effect: { exec: ['/bin/sh', '-c', script], timeoutSeconds: 60 } }],
    });
    return { file, db: `${dir}/receiver.db`, dir };
  };

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} during a load of signed deliveries: every 2xx is stored, exit 0 within the grace period`, async () => {
      const graceSeconds = 5;
      const { file, db } = configFile({ shutdownGraceSeconds: graceSeconds });
      const serve = await startServe(file, { env });
      const accepted: number[] = [];
      let failed = 0;
      let sent = 0;
      let signalledAt = 0;
      let resolveSignalled!: () => void;
      const signalled = new Promise<void>((r) => (resolveSignalled = r));
      // 16 senders, each sending until the server stops answering (bounded: 3000 requests).
      const worker = async () => {
        while (sent < 3000) {
          sent += 1;
          try {
            const r = await deliver(serve.url);
            if (r.status >= 200 && r.status < 300) accepted.push((JSON.parse(r.text) as { id: number }).id);
            else failed += 1;
          } catch {
            // Connection refused or reset after the signal: no 2xx, so the sender would retry.
            if (signalledAt > 0) return;
            failed += 1;
          }
          if (accepted.length >= 200 && signalledAt === 0) {
            signalledAt = Date.now();
            serve.child.kill(signal);
            resolveSignalled();
          }
        }
      };
      const workers = Array.from({ length: 16 }, worker);
      await signalled;
      const code = await exitOf(serve.child); // serve.stop() would send a second signal
      const tookMs = Date.now() - signalledAt;
      await Promise.all(workers);

      expect(code).toBe(0);
      expect(tookMs).toBeLessThan(graceSeconds * 1000);
      expect(failed).toBe(0); // nothing but 2xx before the signal; after it, refusals only
      const stored = new Set(new Database(db, { readonly: true }).prepare('SELECT id FROM events').pluck().all() as number[]);
      const missing = accepted.filter((id) => !stored.has(id));
      expect(missing).toEqual([]);
      expect(accepted.length).toBeGreaterThanOrEqual(200);
      const lines = logLines(serve.output().stderr);
      expect(lines.some((l) => l.msg === 'shutting down' && l.signal === signal)).toBe(true);
      expect(lines.at(-1)?.msg).toBe('stopped');
    });
  }

  it('SIGTERM while an effect runs: the effect finishes within the grace period, is recorded, exit 0', async () => {
    const { file, db, dir } = effectConfig(5, 0.7);
    const serve = await startServe(file, { env });
    expect((await deliver(serve.url)).status).toBe(202);
    await waitForFile(`${dir}/started`);
    const t = Date.now();
    const code = await serve.stop();
    const tookMs = Date.now() - t;
    expect(code).toBe(0);
    expect(tookMs).toBeLessThan(5000);
    const conn = new Database(db, { readonly: true });
    expect(conn.prepare('SELECT status FROM events').pluck().all()).toEqual(['done']);
    expect(conn.prepare('SELECT outcome FROM attempts').pluck().all()).toEqual(['ok']);
    conn.close();
    expect(existsSync(`${dir}/finished`)).toBe(true);
  });

  it('SIGTERM while an effect outlasts the grace period: exit 0 at the grace, the event is left to its lease', async () => {
    const { file, db, dir } = effectConfig(1, 20);
    const serve = await startServe(file, { env });
    expect((await deliver(serve.url)).status).toBe(202);
    await waitForFile(`${dir}/started`);
    const t = Date.now();
    const code = await serve.stop();
    const tookMs = Date.now() - t;
    expect(code).toBe(0);
    expect(tookMs).toBeGreaterThanOrEqual(900);
    expect(tookMs).toBeLessThan(4000);
    const conn = new Database(db, { readonly: true });
    // Still claimed: another process (or this one restarted) takes it when the lease expires.
    // The lease is the unit's (one route of the event); the event's status says it is claimed.
    const row = conn.prepare('SELECT e.status, u.lease_expires_at FROM events e JOIN units u ON u.event_id = e.id').get() as {
      status: string;
      lease_expires_at: number;
    };
    conn.close();
    expect(row.status).toBe('processing');
    expect(row.lease_expires_at).toBeGreaterThan(Date.now());
    expect(existsSync(`${dir}/finished`)).toBe(false);
    const lines = logLines(serve.output().stderr);
    expect(lines.some((l) => typeof l.msg === 'string' && l.msg.startsWith('drain stop: the running effect did not finish'))).toBe(true);
  });

  it('a second signal during the grace period exits at once (exit 1); the event is left to its lease', async () => {
    const { file, db, dir } = effectConfig(20, 20);
    const serve = await startServe(file, { env });
    expect((await deliver(serve.url)).status).toBe(202);
    await waitForFile(`${dir}/started`);
    const t = Date.now();
    serve.child.kill('SIGTERM');
    for (let i = 0; i < 200 && !serve.output().stderr.includes('"msg":"shutting down"'); i++) await new Promise((r) => setTimeout(r, 10));
    const code = await serve.stop('SIGINT');
    expect(code).toBe(1);
    expect(Date.now() - t).toBeLessThan(3000);
    const conn = new Database(db, { readonly: true });
    expect(conn.prepare('SELECT status FROM events').pluck().get()).toBe('processing');
    conn.close();
  });

  it('contrib/receiver.service stops receiver alone with SIGTERM and waits longer than the default grace', () => {
    const unit = readFileSync(`${REPO}contrib/receiver.service`, 'utf8');
    const setting = (name: string) => new RegExp(`^${name}=(.*)$`, 'm').exec(unit)?.[1];
    expect(setting('KillSignal')).toBe('SIGTERM');
    expect(setting('KillMode')).toBe('mixed');
    expect(Number(setting('TimeoutStopSec'))).toBeGreaterThan(configSchema.parse({}).shutdownGraceSeconds + 5);
    // The README's example and contrib's shop example: every effect fits their grace (no
    // route is cut by a stop, check-config says nothing of it), and the unit waits longer.
    const readmeExample = /```json\n(\{\n {2}"database": "\.\/data\/receiver\.db"[^]*?\n\})\n```/.exec(readFileSync(`${REPO}README.md`, 'utf8'))?.[1];
    for (const text of [readmeExample!, readFileSync(`${REPO}contrib/receiver.shop-example.json`, 'utf8')]) {
      const example = JSON.parse(text) as { shutdownGraceSeconds?: number; routes: { name: string; effect: { timeoutSeconds?: number } }[] };
      const grace = example.shutdownGraceSeconds ?? configSchema.parse({}).shutdownGraceSeconds;
      // 30: effect.timeoutSeconds's default.
      expect(example.routes.filter((r) => (r.effect.timeoutSeconds ?? 30) > grace).map((r) => r.name)).toEqual([]);
      expect(example.routes.find((r) => r.name === 'deploy')?.effect.timeoutSeconds).toBe(240);
      expect(Number(setting('TimeoutStopSec'))).toBeGreaterThan(grace + 5);
    }
    // Started as root, serve becomes the service's user itself after reading its secrets.
    expect(setting('User')).toBeUndefined();
    expect(unit).toMatch(/^Environment=RECEIVER_USER=receiver$/m);
    expect(setting('CapabilityBoundingSet')?.split(' ').sort()).toEqual(['CAP_DAC_READ_SEARCH', 'CAP_SETGID', 'CAP_SETUID']);
    expect(setting('WorkingDirectory')).toBe('/var/lib/receiver');
    // serve reads the environment file itself, at start and at every reload; an
    // EnvironmentFile= would be read at start only, and its variables would win.
    expect(setting('EnvironmentFile')).toBeUndefined();
    expect(unit).toMatch(/^Environment=RECEIVER_ENV_FILE=\/etc\/receiver\/env$/m);
    expect(setting('ExecReload')).toBe('/bin/kill -HUP $MAINPID');
    expect(setting('Restart')).toBe('on-failure');
    for (const hardening of ['NoNewPrivileges=yes', 'ProtectSystem=strict', 'ReadWritePaths=/var/lib/receiver', 'PrivateTmp=yes', 'ProtectHome=yes'])
      expect(unit).toMatch(new RegExp(`^${hardening}$`, 'm'));
    // Node's JIT needs writable executable memory: this option would crash it at start.
    expect(unit).not.toMatch(/^MemoryDenyWriteExecute=yes/m);
  });

  it("contrib/receiver.service caps V8's young generation with options this Node accepts", () => {
    const unit = readFileSync(`${REPO}contrib/receiver.service`, 'utf8');
    const exec = /^ExecStart=(\S+) (.*) (\S+) serve$/m.exec(unit);
    expect(exec?.[3]).toBe('/opt/receiver/bin/receiver.js');
    const options = (exec?.[2] ?? '').split(' ');
    // The option applies to every thread and takes precedence over the ingest and drain
    // threads' resourceLimits: it must not raise their young generation (three semi-spaces'
    // worth: two semi-spaces and the young large objects).
    expect(options).toContain(`--max-semi-space-size=${WORKER_RESOURCE_LIMITS.maxYoungGenerationSizeMb! / 3}`);
    // An option Node does not know stops it before receiver starts ("bad option").
    const run = spawnSync(process.execPath, [...options, '-e', 'process.stdout.write("ok")'], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.stdout).toBe('ok');
  });

  it('a client trickling its body does not delay other senders and is cut off at requestTimeoutSeconds', async () => {
    const { file } = configFile({ requestTimeoutSeconds: 1 });
    const serve = await startServe(file, { env });
    // Ten stalled senders: headers promise 1000 bytes, then one byte every 100 ms.
    const tricklers = Array.from({ length: 10 }, () => trickle(serve.port));
    const latencies: number[] = [];
    for (let i = 0; i < 30; i++) {
      const t = performance.now();
      const r = await deliver(serve.url);
      latencies.push(performance.now() - t);
      expect(r.status).toBe(202);
    }
    const results = await Promise.all(tricklers);
    await serve.stop();
    // Other senders are answered at once (generous bound for a loaded CI machine).
    expect(Math.max(...latencies)).toBeLessThan(500);
    for (const r of results) {
      // Cut off close to the 1 s request timeout (checked every 250 ms), well before the body was complete.
      expect(r.closedAfterMs).toBeGreaterThanOrEqual(900);
      expect(r.closedAfterMs).toBeLessThan(3000);
      expect(r.bytesSent).toBeLessThan(1000);
      expect(r.answer).toMatch(/^HTTP\/1\.1 408 /);
    }
  });

  it('a client trickling its headers is cut off with 408 at the headers timeout (min(requestTimeoutSeconds, 10 s))', async () => {
    const { file } = configFile({ requestTimeoutSeconds: 1 });
    const serve = await startServe(file, { env });
    const r = await trickle(serve.port, { headers: true });
    await serve.stop();
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(900);
    expect(r.closedAfterMs).toBeLessThan(3000);
    expect(r.answer).toMatch(/^HTTP\/1\.1 408 /);
  });

  it('the server timeouts: headers within min(requestTimeoutSeconds, 10 s), idle keep-alive 5 s, checked often enough', () => {
    expect(serverTimeouts({ requestTimeoutSeconds: 30 })).toEqual({
      requestTimeout: 30_000,
      headersTimeout: 10_000,
      keepAliveTimeout: 5000,
      connectionsCheckingInterval: 1000,
    });
    expect(serverTimeouts({ requestTimeoutSeconds: 1 })).toEqual({
      requestTimeout: 1000,
      headersTimeout: 1000,
      keepAliveTimeout: 5000,
      connectionsCheckingInterval: 250,
    });
  });

  it('an idle keep-alive connection is closed after 5 s; a busy one is not', async () => {
    const { file } = configFile();
    const serve = await startServe(file, { env });
    try {
      const socket = connect(serve.port, '127.0.0.1');
      let answers = 0;
      let lastAnswerAt = 0;
      socket.on('data', (d: Buffer) => {
        answers += (d.toString().match(/^HTTP\/1\.1 200 /gm) ?? []).length;
        lastAnswerAt = Date.now();
      });
      socket.on('error', () => undefined);
      const closed = new Promise<number>((resolve) => socket.on('close', () => resolve(Date.now())));
      await new Promise<void>((r) => socket.once('connect', () => r()));
      // Three requests 2 s apart on one connection: each within the idle timeout of the last answer.
      for (let i = 0; i < 3; i++) {
        socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
        await new Promise((r) => setTimeout(r, 2000));
      }
      const closedAt = await closed;
      expect(answers).toBe(3);
      const idleMs = closedAt - lastAnswerAt;
      expect(idleMs).toBeGreaterThanOrEqual(4500);
      expect(idleMs).toBeLessThan(7000);
    } finally {
      await serve.stop();
    }
  }, 20_000);

  it('a chunked body over maxBodyBytes is refused with 413 and nothing is stored; a chunked body under it is accepted', async () => {
    const { file, db } = configFile({ maxBodyBytes: 1024 });
    const serve = await startServe(file, { env });
    try {
      const chunked = async (body: string) => {
        const signed = github.sign(Buffer.from(body), SECRET, Date.now(), undefined as never, serve.url);
        const head = Object.entries({ 'content-type': 'application/json', ...signed.headers })
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join('');
        // 256-byte chunks, no Content-Length: the limit must hold while the body streams in.
        const chunks = (body.match(/[\s\S]{1,256}/g) ?? []).map((c) => `${Buffer.byteLength(c).toString(16)}\r\n${c}\r\n`).join('');
        return rawExchange(
          serve.port,
          `POST /webhooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n${head}\r\n${chunks}0\r\n\r\n`,
        );
      };
      const big = await chunked(JSON.stringify({ ref: 'refs/heads/main', pad: 'x'.repeat(4000) }));
      expect(big).toMatch(/^HTTP\/1\.1 413 /);
      const small = await chunked(JSON.stringify({ ref: 'refs/heads/main', pad: 'x'.repeat(600) }));
      expect(small).toMatch(/^HTTP\/1\.1 202 /);
    } finally {
      await serve.stop();
    }
    const conn = new Database(db, { readonly: true });
    expect(conn.prepare('SELECT length(body) FROM events').pluck().all()).toEqual([JSON.stringify({ ref: 'refs/heads/main', pad: 'x'.repeat(600) }).length]);
    conn.close();
  });

  it('the delivery, effect attempt and event lines carry ids, outcome and timing only: never a body, a header value or an effect output', async () => {
    const MARKER = 'never-logged-7f3a91';
    k += 1;
    const dir = `${tmp.dir}/${k}`;
    mkdirSync(dir);
    // The effects print the marker from a script (the configuration itself is logged at debug).
    writeFileSync(`${dir}/ok.sh`, `#!/bin/sh\necho ${MARKER}-stdout\necho ${MARKER}-stderr >&2\n`);
    writeFileSync(`${dir}/fails.sh`, `#!/bin/sh\necho ${MARKER}-out\nexit 3\n`);
    chmodSync(`${dir}/ok.sh`, 0o755);
    chmodSync(`${dir}/fails.sh`, 0o755);
    const file = writeConfig(dir, {
      log: { level: 'debug' },
      maxBodyBytes: 2048,
      retry: { maxAttempts: 1 },
      sources: { gh: { ...source, onConflict: 'reject' } },
      routes: [
        { name: 'ok', source: 'gh', events: ['push'], key: '{body.n}', effect: { exec: [`${dir}/ok.sh`] } },
        { name: 'fails', source: 'gh', events: ['ping'], key: '{body.n}', effect: { exec: [`${dir}/fails.sh`] } },
      ],
    });
    const serve = await startServe(file, { env });
    const send = async (body: string, headers: Record<string, string> = {}) => {
      const signed = github.sign(Buffer.from(body), SECRET, Date.now(), undefined as never, serve.url);
      return (await fetch(`${serve.url}/webhooks/gh`, { method: 'POST', headers: { 'content-type': 'application/json', ...signed.headers, ...headers }, body }))
        .status;
    };
    try {
      expect(await send(JSON.stringify({ n: 1, secret: MARKER }), { 'x-github-delivery': 'd-ok' })).toBe(202);
      expect(await send(JSON.stringify({ n: 2, secret: MARKER }), { 'x-github-delivery': 'd-ping', 'x-github-event': 'ping' })).toBe(202);
      expect(await send(JSON.stringify({ n: 1, secret: MARKER, changed: true }), { 'x-github-delivery': 'd-ok' })).toBe(409);
      expect(await send(JSON.stringify({ pad: MARKER.repeat(200) }))).toBe(413);
      const bad = await fetch(`${serve.url}/webhooks/gh`, {
        method: 'POST',
        body: JSON.stringify({ secret: MARKER }),
        headers: { 'x-hub-signature-256': `sha256=${MARKER}`, 'x-github-delivery': 'd-bad' },
      });
      expect(bad.status).toBe(401);
      const settled = () => logLines(serve.output().stderr).filter((l) => l.msg === 'event done' || l.msg === 'event dead');
      for (let i = 0; i < 500 && settled().length < 2; i++) await new Promise((r) => setTimeout(r, 10));
    } finally {
      expect(await serve.stop()).toBe(0);
    }
    const { stdout, stderr } = serve.output();
    expect(stdout).toBe('');
    expect(stderr).not.toContain(MARKER);
    expect(stderr).not.toContain(SECRET);
    const lines = logLines(stderr);
    const keys = (l: Record<string, unknown> | undefined) => Object.keys(l ?? {}).sort();

    const deliveries = lines.filter((l) => l.msg === 'delivery');
    expect(deliveries.map((l) => [l.outcome, l.status])).toEqual([
      ['accepted', 202],
      ['accepted', 202],
      ['conflict', 409],
      ['too_large', 413],
      ['unauthorized', 401],
    ]);
    expect(keys(deliveries[0])).toEqual(['deliveryId', 'durationMs', 'eventId', 'eventType', 'level', 'msg', 'outcome', 'pid', 'source', 'status', 'time']);
    // github.sign sends hook id 1: the delivery id is <hook id>:<GUID>.
    expect(deliveries[0]).toMatchObject({ level: 'info', source: 'gh', deliveryId: '1:d-ok', eventType: 'push', eventId: 1 });
    expect(deliveries[2]).toMatchObject({ level: 'warn', deliveryId: '1:d-ok', eventId: 1 });
    expect(keys(deliveries[4])).toEqual(['deliveryId', 'durationMs', 'error', 'level', 'msg', 'outcome', 'pid', 'source', 'status', 'time']);

    const attempts = lines.filter((l) => l.msg === 'effect attempt');
    const ok = attempts.find((l) => l.route === 'ok');
    const failed = attempts.find((l) => l.route === 'fails');
    expect(keys(ok)).toEqual([
      'attempt',
      'deliveryId',
      'durationMs',
      'effectKey',
      'eventId',
      'eventType',
      'forced',
      'lane',
      'level',
      'msg',
      'outcome',
      'pid',
      'route',
      'source',
      'time',
    ]);
    expect(ok).toMatchObject({
      level: 'info',
      eventId: 1,
      source: 'gh',
      deliveryId: '1:d-ok',
      eventType: 'push',
      attempt: 1,
      effectKey: 'ok:1',
      outcome: 'ok',
      forced: false,
    });
    expect(keys(failed)).toEqual([...keys(ok), 'error'].sort());
    expect(failed).toMatchObject({ level: 'warn', eventId: 2, effectKey: 'fails:2', outcome: 'failed', error: `${dir}/fails.sh exited with code 3` });

    const events = lines.filter((l) => l.msg === 'event done' || l.msg === 'event dead');
    expect(keys(events.find((l) => l.msg === 'event done'))).toEqual([
      'attempt',
      'deliveryId',
      'eventId',
      'lane',
      'level',
      'msg',
      'pid',
      'route',
      'source',
      'status',
      'time',
    ]);
    const dead = events.find((l) => l.msg === 'event dead');
    expect(keys(dead)).toEqual(['attempt', 'deliveryId', 'error', 'eventId', 'lane', 'level', 'msg', 'pid', 'route', 'source', 'status', 'time']);
    expect(dead).toMatchObject({ level: 'error', eventId: 2, deliveryId: '1:d-ping', status: 'dead', attempt: 1 });
  });

  it('logs one JSON line per delivery with event id, source, delivery id, status, outcome and duration', async () => {
    const { file } = configFile();
    const serve = await startServe(file, { env });
    const ok = await deliver(serve.url, '{"a":1}');
    const bad = await fetch(`${serve.url}/webhooks/gh`, {
      method: 'POST',
      body: '{}',
      headers: { 'x-hub-signature-256': 'sha256=00', 'x-github-delivery': 'd-bad' },
    });
    expect(ok.status).toBe(202);
    expect(bad.status).toBe(401);
    await serve.stop();
    const deliveries = logLines(serve.output().stderr).filter((l) => l.msg === 'delivery');
    expect(deliveries).toHaveLength(2);
    const [first, second] = deliveries;
    expect(first).toMatchObject({ level: 'info', source: 'gh', outcome: 'accepted', status: 202, eventId: 1, eventType: 'push' });
    expect(typeof first?.deliveryId).toBe('string');
    expect(typeof first?.durationMs).toBe('number');
    expect(typeof first?.time).toBe('string');
    // The refused delivery's claimed id is logged, to match it to the sender's dashboard.
    expect(second).toMatchObject({ level: 'warn', source: 'gh', outcome: 'unauthorized', status: 401, error: 'signature does not match', deliveryId: 'd-bad' });
  });

  it('the log level comes from --log-level, then $RECEIVER_LOG_LEVEL, then log.level', async () => {
    // At debug, serve logs its resolved configuration (secrets hidden); at info it does not.
    const debugLogged = async (level: string, options: { env?: NodeJS.ProcessEnv; args?: string[] }) => {
      const serve = await startServe(configFile({ log: { level } }).file, { ...options, env: { ...env, RECEIVER_LOG_LEVEL: undefined, ...options.env } });
      await serve.stop();
      return logLines(serve.output().stderr).some((l) => l.msg === 'configuration' && l.level === 'debug');
    };
    expect(await debugLogged('info', {})).toBe(false);
    expect(await debugLogged('debug', {})).toBe(true);
    expect(await debugLogged('info', { env: { RECEIVER_LOG_LEVEL: 'debug' } })).toBe(true);
    expect(await debugLogged('debug', { env: { RECEIVER_LOG_LEVEL: 'info' } })).toBe(false);
    expect(await debugLogged('info', { env: { RECEIVER_LOG_LEVEL: 'info' }, args: ['--log-level', 'debug'] })).toBe(true);
    expect(await debugLogged('debug', { args: ['--log-level', 'info'] })).toBe(false);
  });

  it('GET /healthz answers 200 while the database answers; metrics.enabled false removes /metrics', async () => {
    const { file } = configFile({ metrics: { enabled: false } });
    const serve = await startServe(file, { env });
    const health = await fetch(`${serve.url}/healthz`);
    const metrics = await fetch(`${serve.url}/metrics`);
    await serve.stop();
    expect(health.status).toBe(200);
    expect(metrics.status).toBe(404);
  });

  it('binds to 127.0.0.1 by default', async () => {
    const { file } = configFile();
    const serve = await startServe(file, { env });
    await serve.stop();
    const listening = logLines(serve.output().stderr).find((l) => l.msg === 'listening');
    expect(listening?.host).toBe('127.0.0.1');
  });
});

/** The exit code, without sending anything (a second signal means "exit now"). */
function exitOf(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** Bounded wait (5 s) for a file an effect creates. */
async function waitForFile(path: string): Promise<void> {
  for (let i = 0; i < 500 && !existsSync(path); i++) await new Promise((r) => setTimeout(r, 10));
  expect(existsSync(path)).toBe(true);
}

/**
 * Opens a raw connection, promises 1000 body bytes and trickles one every 100 ms (or, with
 * `headers`, trickles the header lines themselves). Stops writing once an answer arrives,
 * so the server's close is a FIN and the answer is read before any reset.
 */
function trickle(port: number, options: { headers?: boolean } = {}): Promise<{ closedAfterMs: number; bytesSent: number; answer: string }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = connect(port, '127.0.0.1');
    let bytesSent = 0;
    let answer = '';
    socket.write(
      options.headers === true
        ? 'POST /webhooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\n'
        : 'POST /webhooks/gh HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n',
    );
    const timer = setInterval(() => {
      if (!socket.writable) return;
      socket.write(options.headers === true ? `X-Slow-${bytesSent}: a\r\n` : 'a');
      bytesSent += 1;
    }, 100);
    socket.on('data', (d: Buffer) => {
      clearInterval(timer);
      answer += d.toString();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ closedAfterMs: Date.now() - started, bytesSent, answer });
    });
  });
}

/** Writes `request` on a fresh connection and returns everything the server answers until it closes (5 s at most). */
function rawExchange(port: number, request: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    const timer = setTimeout(() => socket.destroy(), 5000);
    socket.on('data', (d: Buffer) => (answer += d.toString()));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(answer);
    });
    socket.write(request);
  });
}
