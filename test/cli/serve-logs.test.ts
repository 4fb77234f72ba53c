import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BIN, post, REPO, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

interface Line {
  level: string;
  time: string;
  msg: string;
  [field: string]: unknown;
}

const parse = (text: string): Line[] =>
  text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Line);

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = new RegExp(`^${name.replace(/[{}]/g, '\\$&')} (\\d+)`, 'm').exec(text);
  return m === null ? NaN : Number(m[1]);
}

describe("serve's log lines", () => {
  let tmp: ReturnType<typeof tempDir>;
  let serve: ServeProcess | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-serve-logs-');
  });
  afterEach(async () => {
    await serve?.stop('SIGKILL');
    serve = undefined;
    tmp.cleanup();
  });

  it('keep ingest answering while nobody reads stderr: lines past log.bufferBytes are dropped, counted on /metrics, and announced when the reader is back', async () => {
    const file = writeConfig(tmp.dir, { sources: { shop }, log: { bufferBytes: 16_384 } });
    serve = await startServe(file);
    const s = serve;
    // Nobody reads: the pipe (64 KiB) and this side's buffer fill, then the writer's 16 KiB.
    s.child.stderr!.pause();
    const started = Date.now();
    let slowest = 0;
    for (let batch = 0; batch < 100; batch++) {
      const statuses = await Promise.all(
        Array.from({ length: 20 }, async (_, j) => {
          const t = Date.now();
          const r = await post(`${s.url}/webhooks/shop`, JSON.stringify({ id: `e${batch * 20 + j}`, type: 'order.paid' }));
          slowest = Math.max(slowest, Date.now() - t);
          return r.status;
        }),
      );
      expect(new Set(statuses)).toEqual(new Set([202]));
    }
    // 2,000 deliveries, none waiting for the log's reader (on a busy 2-core machine).
    expect(slowest).toBeLessThan(5000);
    expect(Date.now() - started).toBeLessThan(60_000);
    const dropped = await metric(s.url, 'receiver_log_lines_dropped_total');
    expect(dropped).toBeGreaterThan(0);

    // The reader is back: lines resume, the first one says how many were dropped.
    s.child.stderr!.resume();
    for (let i = 0; !/"deliveryId":"after-\d+"/.test(s.output().stderr); i++) {
      expect(i).toBeLessThan(100);
      expect((await post(`${s.url}/webhooks/shop`, JSON.stringify({ id: `after-${i}`, type: 'order.paid' }))).status).toBe(202);
      await new Promise((r) => setTimeout(r, 100));
    }
    const lines = parse(s.output().stderr);
    const notices = lines.filter((l) => / log lines dropped$/.test(l.msg));
    expect(notices.length).toBeGreaterThan(0);
    expect(notices.every((n) => n.level === 'warn' && n.msg === `${String(n.dropped)} log lines dropped`)).toBe(true);
    // Every dropped line is announced (nothing was dropped after the reader came back).
    const announced = notices.reduce((sum, n) => sum + (n.dropped as number), 0);
    expect(announced).toBe(await metric(s.url, 'receiver_log_lines_dropped_total'));
    const firstAfter = lines.findIndex((l) => typeof l.deliveryId === 'string' && l.deliveryId.startsWith('after-'));
    expect(lines.findIndex((l) => l === notices.at(-1))).toBeLessThan(firstAfter);
    // Whole lines only: everything on stderr parses.
    expect(s.output().stderr.trimEnd().split('\n').length).toBe(lines.length);
  }, 120_000);

  it('write every line before exiting, the shutdown line last; an effect line never comes before its delivery line; times are ISO 8601; a timed-out effect is a timeout attempt', async () => {
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      routes: [
        // Fails for the key "bad" (retried later), succeeds for the others.
        { name: 'licence', source: 'shop', events: ['order.paid'], key: '{body.id}', effect: { exec: ['/bin/sh', '-c', 'test "$RECEIVER_KEY" != bad'] } },
        // Times out once; its retry (full jitter may make it come at once) succeeds.
        {
          name: 'slow',
          source: 'shop',
          events: ['order.slow'],
          key: '{body.id}',
          effect: { exec: ['/bin/sh', '-c', 'test -f "$1" && exit 0; touch "$1"; sleep 5', 'sh', join(tmp.dir, 'slept')], timeoutSeconds: 0.5 },
        },
      ],
    });
    serve = await startServe(file);
    const s = serve;
    const ids = [...Array.from({ length: 40 }, (_, i) => `e${i}`), 'bad'];
    await Promise.all(ids.map(async (id) => expect((await post(`${s.url}/webhooks/shop`, JSON.stringify({ id, type: 'order.paid' }))).status).toBe(202)));
    expect((await post(`${s.url}/webhooks/shop`, JSON.stringify({ id: 'sleepy', type: 'order.slow' }))).status).toBe(202);
    await waitFor(
      () => (parse(s.output().stderr).filter((l) => l.msg === 'effect attempt').length >= ids.length + 1 ? true : undefined),
      'every effect attempt',
      20_000,
    );
    // Outcomes reach the main thread's counters in batches, within about 100 ms.
    let timeouts = 0;
    for (const until = Date.now() + 5000; timeouts === 0 && Date.now() < until; await new Promise((r) => setTimeout(r, 50)))
      timeouts = await metric(s.url, 'receiver_effect_attempts_total{route="slow",outcome="timeout"}');
    expect(timeouts).toBe(1);
    expect(await s.stop('SIGTERM')).toBe(0);

    const lines = parse(s.output().stderr);
    expect(s.output().stderr.trimEnd().split('\n').length).toBe(lines.length);
    expect(lines.at(-1)?.msg).toBe('stopped');
    for (const id of [...ids, 'sleepy']) {
      const delivery = lines.findIndex((l) => l.msg === 'delivery' && l.deliveryId === id);
      const effect = lines.findIndex((l) => l.msg === 'effect attempt' && l.deliveryId === id);
      expect(delivery, id).toBeGreaterThanOrEqual(0);
      expect(effect, id).toBeGreaterThan(delivery);
    }
    const slow = lines.find((l) => l.msg === 'effect attempt' && l.deliveryId === 'sleepy');
    expect(slow).toMatchObject({ level: 'warn', outcome: 'timeout', route: 'slow' });
    // One time format: every field named like a time is ISO 8601 (UTC), like `time`.
    const iso = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    const retry = lines.find((l) => l.msg === 'event will be retried' && l.deliveryId === 'bad');
    expect(retry?.nextAttemptAt).toMatch(iso);
    for (const l of lines) {
      for (const [k, v] of Object.entries(l)) if (k === 'time' || /At$/.test(k)) expect(v, `${l.msg}: ${k}`).toMatch(iso);
    }
  }, 60_000);

  it("are readable lines with --log-format pretty (or $RECEIVER_LOG_FORMAT), the drain thread's too; colour with FORCE_COLOR, none with NO_COLOR", async () => {
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      routes: [{ name: 'licence', source: 'shop', key: '{body.id}', effect: { exec: ['/bin/true'] } }],
    });
    const run = async (id: string, args: string[], env: NodeJS.ProcessEnv) => {
      const child = spawn(process.execPath, [BIN, 'serve', '-c', file, '--port', '0', ...args], {
        cwd: REPO,
        env: { ...process.env, NO_COLOR: undefined, FORCE_COLOR: undefined, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      try {
        // eslint-disable-next-line no-control-regex -- the line may be coloured
        const port = await waitFor(() => /listening.*port=(?:\u001b\[\d+m)*(\d+)/.exec(stderr)?.[1], 'the listening line', 15_000);
        expect((await post(`http://127.0.0.1:${port}/webhooks/shop`, JSON.stringify({ id, type: 'order.paid' }))).status).toBe(202);
        await waitFor(() => (stderr.includes('effect attempt') ? true : undefined), 'the effect line', 15_000);
      } finally {
        child.kill('SIGTERM');
        await new Promise((r) => child.on('exit', r));
      }
      return stderr;
    };
    const plain = await run('e1', ['--log-format', 'pretty'], { NO_COLOR: '1', FORCE_COLOR: '1' });
    expect(plain).not.toContain('{"level"');
    expect(plain).not.toContain('\u001b');
    expect(plain).toMatch(
      /^\d\d:\d\d:\d\d\.\d{3} INFO {2}delivery source=shop outcome=accepted status=202 deliveryId=e1 eventId=1 eventType=order\.paid [\d.]+ms$/m,
    );
    expect(plain).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO {2}effect attempt source=shop route=licence outcome=ok deliveryId=e1 eventId=1 .*[\d.]+ms$/m);
    expect(plain).toMatch(/^\d\d:\d\d:\d\d\.\d{3} INFO {2}stopped signal=SIGTERM/m);

    const coloured = await run('e2', [], { RECEIVER_LOG_FORMAT: 'pretty', FORCE_COLOR: '1' });
    expect(coloured).toContain('\u001b[32mINFO \u001b[0m delivery');
    expect(coloured).toContain('\u001b[32mINFO \u001b[0m effect attempt');
  }, 60_000);

  it.skipIf(!existsSync('/usr/bin/script'))(
    'are readable, coloured lines by default on a real terminal (a pseudo-terminal from script(1))',
    async () => {
      const pidFile = join(tmp.dir, 'tty.pid');
      const file = writeConfig(tmp.dir, { sources: { shop }, pidFile });
      // exec: serve is script's own child, which script ends with it (and, should the test fail
      // before serve is stopped, signals it). Under a shell that forks the command (dash, many
      // users' /bin/sh) the shell would be script's child instead: the terminal's hangup would
      // reach serve as a SIGHUP, a reload, and serve would run on after the test.
      const command = ['exec', ...[process.execPath, BIN, 'serve', '-c', file, '--port', '0'].map((a) => `'${a}'`)].join(' ');
      const child = spawn('/usr/bin/script', ['-qfec', command, '/dev/null'], {
        cwd: REPO,
        // CI unset too: under CI=true (as .ci/run sets it) Node reports 2 colours for a terminal of an unnamed CI.
        // SHELL (which script runs the command with) the same for every user: root's is bash, others' often sh.
        env: {
          ...process.env,
          NO_COLOR: undefined,
          FORCE_COLOR: undefined,
          CI: undefined,
          TERM: 'xterm-256color',
          RECEIVER_LOG_FORMAT: undefined,
          SHELL: '/bin/sh',
        },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      const exited = new Promise((r) => child.on('exit', r));
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      let pid: number | undefined;
      const alive = (p: number) => {
        try {
          process.kill(p, 0);
          return true;
        } catch {
          return false;
        }
      };
      try {
        // eslint-disable-next-line no-control-regex -- the line is coloured
        const port = await waitFor(() => /listening.*port=(?:\u001b\[\d+m)*(\d+)/.exec(out)?.[1], 'the listening line', 15_000);
        pid = await waitFor(() => (existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) : undefined), 'the pid file', 5_000);
        expect((await post(`http://127.0.0.1:${port}/webhooks/shop`, JSON.stringify({ id: 'tty-1', type: 'order.paid' }))).status).toBe(202);
        await waitFor(() => (out.includes('tty-1') ? true : undefined), 'the delivery line', 10_000);
        // One SIGTERM to serve, as systemd or an operator stops it; script ends after it. (A
        // SIGTERM to script would reach serve twice, 10 ms apart: the second ends it at once.)
        process.kill(pid, 'SIGTERM');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
        await exited;
        if (pid !== undefined && alive(pid)) process.kill(pid, 'SIGKILL');
      }
      // It stopped cleanly: its last line, and its pid file removed.
      // eslint-disable-next-line no-control-regex -- the line is coloured
      expect(out).toMatch(/stopped .*signal=(?:\u001b\[\d+m)*SIGTERM/);
      expect(existsSync(pidFile)).toBe(false);
      expect(out).not.toContain('{"level"');
      expect(out).toContain('\u001b[32mINFO \u001b[0m delivery');
      // eslint-disable-next-line no-control-regex -- the line is coloured
      expect(out).toMatch(/delivery .*deliveryId=(?:\u001b\[\d+m)*tty-1/);
    },
    30_000,
  );

  it("write a module's throw from a timer as its failed attempt, after the delivery line, and keep serving", async () => {
    const handler = join(tmp.dir, 'boom.mjs');
    // A throw from a timer the handler started: nobody can catch it; it ends the module's own process only.
    writeFileSync(
      handler,
      "export default async function () { setTimeout(() => { throw new Error('boom from a timer'); }, 50); await new Promise((r) => setTimeout(r, 500)); }\n",
    );
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      routes: [{ name: 'boom', source: 'shop', key: '{body.id}', effect: { module: handler } }],
    });
    serve = await startServe(file);
    const s = serve;
    expect((await post(`${s.url}/webhooks/shop`, JSON.stringify({ id: 'f1', type: 'order.paid' }))).status).toBe(202);
    await waitFor(() => (s.output().stderr.includes('"msg":"effect attempt"') ? true : undefined), 'the attempt line', 15_000);
    const lines = parse(s.output().stderr);
    expect(s.output().stderr.trimEnd().split('\n').length).toBe(lines.length);
    const delivery = lines.findIndex((l) => l.msg === 'delivery' && l.deliveryId === 'f1');
    const effect = lines.findIndex((l) => l.msg === 'effect attempt' && l.deliveryId === 'f1');
    expect(delivery).toBeGreaterThanOrEqual(0);
    expect(effect).toBeGreaterThan(delivery);
    expect(lines[effect]).toMatchObject({ level: 'warn', outcome: 'failed', error: 'the module threw outside its handler: boom from a timer' });
    expect(lines.some((l) => l.level === 'fatal')).toBe(false);
    expect(s.child.exitCode).toBeNull();
    expect((await post(`${s.url}/webhooks/shop`, JSON.stringify({ id: 'f2', type: 'order.paid' }))).status).toBe(202);
  }, 30_000);

  it('refuses a log format it does not know, naming the field and the choices', async () => {
    const file = writeConfig(tmp.dir, { sources: { shop } });
    const child = spawn(process.execPath, [BIN, 'serve', '-c', file, '--port', '0', '--log-format', 'yaml'], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise((r) => child.on('exit', r));
    expect(code).toBe(2);
    expect(stderr).toBe('Error: log.format: "yaml" is not a log format\nTry: use one of auto, json, pretty\n');
  });

  it('count a request cut off at requestTimeoutSeconds as a timeout delivery (408), not a bad request', async () => {
    const file = writeConfig(tmp.dir, { sources: { shop }, requestTimeoutSeconds: 1 });
    serve = await startServe(file);
    const s = serve;
    // A client that sends its headers, then trickles its body, a byte every 100 ms.
    const answer = await new Promise<string>((resolve) => {
      const socket = connect(s.port, '127.0.0.1', () => {
        socket.write('POST /webhooks/shop HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{');
        const trickle = setInterval(() => socket.write(' '), 100);
        let got = '';
        socket.on('data', (d: Buffer) => (got += d.toString()));
        socket.on('error', () => {});
        socket.on('close', () => {
          clearInterval(trickle);
          resolve(got);
        });
      });
    });
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    await waitFor(() => (s.output().stderr.includes('"outcome":"timeout"') ? true : undefined), 'the delivery line', 5000);
    const line = parse(s.output().stderr).find((l) => l.msg === 'delivery');
    expect(line).toMatchObject({ level: 'warn', source: 'shop', outcome: 'timeout', status: 408 });
    expect(await metric(s.url, 'receiver_deliveries_total{source="shop",outcome="timeout"}')).toBe(1);
    expect(await metric(s.url, 'receiver_deliveries_total{source="shop",outcome="bad_request"}')).toBe(0);
  }, 30_000);
});
