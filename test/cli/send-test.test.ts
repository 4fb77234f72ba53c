import Database from 'better-sqlite3';
import { createHmac, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createTcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testMark } from '../../src/providers/test-mark.js';
import { post, runCli, runInProcess, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';

/** `receiver send-test`, in-process and as a subprocess (its exit codes): what it prints, and what the server stored. */

const SECRET = 'send-test-gh-secret-4e1a';
const env = { SEND_TEST_GH_SECRET: SECRET };
const source = { provider: 'github', secret: 'env:SEND_TEST_GH_SECRET' };

function listen<T extends Server | ReturnType<typeof createTcpServer>>(server: T): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));
}

describe('receiver send-test', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let k = 0;
  const dir = () => {
    k += 1;
    const d = `${tmp.dir}/${k}`;
    mkdirSync(d);
    return d;
  };

  it('signs a sample with the source secret and posts it: prints "POST <url> -> <status> <answer>", exit 0, the event stored', async () => {
    const d = dir();
    const file = writeConfig(d, { sources: { gh: source } });
    const serve = await startServe(file, { env });
    try {
      const r = await runInProcess(['send-test', 'gh', '-c', file, '--url', `${serve.url}/`], { env });
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.stdout).toBe(`POST ${serve.url}/webhooks/gh -> 202 {"status":"accepted","id":1}\n`);
    } finally {
      await serve.stop();
    }
    const conn = new Database(`${d}/receiver.db`, { readonly: true });
    expect(conn.prepare('SELECT source, event_type FROM events').all()).toEqual([{ source: 'gh', event_type: 'push' }]);
    conn.close();
  });

  it('a refused delivery (another secret than the server has) prints the answer and exits 1', async () => {
    const d = dir();
    const file = writeConfig(d, { sources: { gh: source } });
    const serve = await startServe(file, { env });
    try {
      const r = await runCli(['send-test', 'gh', '-c', file, '--url', serve.url], { env: { SEND_TEST_GH_SECRET: 'not-the-server-secret' } });
      expect(r.code).toBe(1);
      expect(r.stdout).toBe(`POST ${serve.url}/webhooks/gh -> 401 {"error":"verification","message":"signature does not match"}\n`);
    } finally {
      await serve.stop();
    }
  });

  it('without --url it posts to host:port from the configuration (0.0.0.0 becomes 127.0.0.1)', async () => {
    const seen: { url: string | undefined; headers: IncomingMessage['headers'] }[] = [];
    const server = createServer((req, res) => {
      seen.push({ url: req.url, headers: req.headers });
      req.resume();
      req.on('end', () => res.writeHead(202, { 'content-type': 'application/json' }).end('{"status":"accepted","id":7}'));
    });
    const port = await listen(server);
    try {
      const file = writeConfig(dir(), { host: '0.0.0.0', port, sources: { gh: source } });
      const r = await runInProcess(['send-test', 'gh', '-c', file], { env });
      expect(r.code).toBe(0);
      expect(r.stdout).toBe(`POST http://127.0.0.1:${port}/webhooks/gh -> 202 {"status":"accepted","id":7}\n`);
      expect(seen).toHaveLength(1);
      expect(seen[0]?.url).toBe('/webhooks/gh');
      expect(seen[0]?.headers['x-hub-signature-256']).toMatch(/^sha256=[0-9a-f]{64}$/);
    } finally {
      server.close();
    }
  });

  it('an unknown source: exit 2, names the configured sources, sends nothing', async () => {
    const file = writeConfig(dir(), { sources: { gh: source, other: source } });
    const r = await runCli(['send-test', 'nope', '-c', file], { env });
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe('Error: no source named "nope"\nTry: one of: gh, other\n');
  });

  // Ports that are held for the whole test (never free for another test to take) and end
  // every connection without an answer: with a reset, or with a plain close (after which
  // Node's fetch never settled: send-test waited out its answer timeout).
  for (const [how, end, reason] of [
    // Under load undici may see the reset only as a request that never got an answer.
    ['resets', (s: Socket) => s.resetAndDestroy(), /: ((read|connect) ECONNRESET.*|socket hang up)$/m],
    // Said at once, not after waiting out the 10 s answer timeout.
    ['closes', (s: Socket) => s.destroy(), /: (socket hang up|read ECONNRESET)$/m],
  ] as const) {
    it(`a server that ${how} the connection without an answer: exit 1 with Error/Try`, async () => {
      const dropper = createTcpServer(end);
      const port = await listen(dropper);
      try {
        const file = writeConfig(dir(), { sources: { gh: source } });
        const r = await runCli(['send-test', 'gh', '-c', file, '--url', `http://127.0.0.1:${port}`], { env });
        expect(r.code).toBe(1);
        expect(r.stdout).toBe('');
        expect(r.stderr).toMatch(new RegExp(`^Error: cannot reach http://127\\.0\\.0\\.1:${port}/webhooks/gh: `));
        expect(r.stderr).toMatch(reason);
        expect(r.stderr).toMatch(/^Try: start the server with `receiver serve` \(or pass --url\)$/m);
      } finally {
        dropper.close();
      }
    });
  }
});

describe('receiver send-test --type, --body, --content-type, and the test mark', () => {
  const tmp = tempDir();
  /** The route's effect appends a line here each time it runs. */
  const ran = () => (existsSync(`${tmp.dir}/ran`) ? readFileSync(`${tmp.dir}/ran`, 'utf8').split('\n').filter(Boolean) : []);
  const secrets = { SEND_TEST_GH_SECRET: SECRET, SEND_TEST_STRIPE_SECRET: 'whsec_send_test_9c1d', SEND_TEST_TWILIO_SECRET: 'twilio-token-5b2e' };
  let file: string;
  let serve: ServeProcess;
  beforeAll(async () => {
    file = writeConfig(tmp.dir, {
      sources: {
        gh: source,
        stripe: { provider: 'stripe', secret: 'env:SEND_TEST_STRIPE_SECRET' },
        sms: { provider: 'twilio', secret: 'env:SEND_TEST_TWILIO_SECRET' },
        plain: { provider: 'hmac-sha256', secret: 'env:SEND_TEST_GH_SECRET', header: 'X-Signature' },
        typed: { provider: 'hmac-sha256', secret: 'env:SEND_TEST_GH_SECRET', header: 'X-Signature', eventType: '{header.x-kind}' },
      },
      routes: [
        {
          name: 'deploy',
          source: 'gh',
          events: ['push'],
          key: '{header.x-github-delivery}',
          effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_EVENT_ID" >> "$0"', `${tmp.dir}/ran`] },
        },
      ],
      drain: { pollMs: 50 },
    });
    serve = await startServe(file, { env: secrets });
  }, 30_000);
  afterAll(async () => {
    await serve.stop();
    tmp.cleanup();
  });
  const send = (...args: string[]) => runInProcess(['send-test', ...args, '-c', file, '--url', serve.url], { env: secrets });
  /** The stored event the answer names. */
  const stored = (stdout: string) => {
    const id = Number(/"id":(\d+)/.exec(stdout)?.[1]);
    const db = new Database(`${tmp.dir}/receiver.db`, { readonly: true });
    try {
      return db.prepare('SELECT id, source, delivery_id, event_type, body, origin, status, route_decisions, headers FROM events WHERE id = ?').get(id) as {
        id: number;
        source: string;
        delivery_id: string;
        event_type: string;
        body: Buffer;
        origin: string;
        status: string;
        route_decisions: string | null;
        headers: string;
      };
    } finally {
      db.close();
    }
  };

  it('--type sets the type where the provider carries it: a body field (Stripe), a header (GitHub, a generic {header.x} template)', async () => {
    const stripe = await send('stripe', '--type', 'invoice.payment_failed');
    expect(stripe.stderr).toBe('');
    expect(stripe.stdout).toMatch(/ -> 202 /);
    const s = stored(stripe.stdout);
    expect(s.event_type).toBe('invoice.payment_failed');
    expect(JSON.parse(s.body.toString())).toMatchObject({ object: 'event', type: 'invoice.payment_failed' });
    const gh = await send('gh', '--type', 'pull_request');
    expect(gh.stdout).toMatch(/ -> 202 /);
    expect(stored(gh.stdout).event_type).toBe('pull_request');
    const typed = await send('typed', '--type', 'order.shipped');
    expect(typed.stdout).toMatch(/ -> 202 /);
    expect(stored(typed.stdout).event_type).toBe('order.shipped');
  });

  it('--body FILE sends the file byte for byte, signed; with --type the file must name that type', async () => {
    const bytes = '{ "id": "evt_from_file_1", "object": "event", "type": "charge.refunded", "data": {} }\n';
    const body = `${tmp.dir}/refund.json`;
    writeFileSync(body, bytes);
    const r = await send('stripe', '--body', body);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/ -> 202 /);
    expect(stored(r.stdout)).toMatchObject({ delivery_id: 'evt_from_file_1', event_type: 'charge.refunded', body: Buffer.from(bytes) });
    const other = await send('stripe', '--body', body, '--type', 'invoice.paid');
    expect(other.code).toBe(2);
    expect(other.stdout).toBe('');
    expect(other.stderr).toBe(
      `Error: --type invoice.paid: this stripe delivery would be read as type "charge.refunded"\nTry: a stripe delivery's type is its body's "type" field, and --body is sent as it is: edit ${body}, or leave out --type\n`,
    );
    // A header type goes with any body.
    writeFileSync(`${tmp.dir}/push.json`, '{"ref":"refs/heads/x"}');
    const gh = await send('gh', '--body', `${tmp.dir}/push.json`, '--type', 'release');
    expect(stored(gh.stdout)).toMatchObject({ event_type: 'release', body: Buffer.from('{"ref":"refs/heads/x"}') });
  });

  it('--body - reads standard input', async () => {
    const r = await runCli(['send-test', 'gh', '-c', file, '--url', serve.url, '--body', '-', '--type', 'issues'], {
      env: secrets,
      input: '{"action":"opened"}',
    });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(stored(r.stdout)).toMatchObject({ source: 'gh', event_type: 'issues', body: Buffer.from('{"action":"opened"}') });
  });

  it('a missing file, or a type the provider cannot carry: exit 2 with Error/Try, nothing sent', async () => {
    const missing = await send('stripe', '--body', `${tmp.dir}/nope.json`);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe(
      `Error: cannot read --body ${tmp.dir}/nope.json: no such file\nTry: give the path of a file holding the delivery body (or - for standard input)\n`,
    );
    const sms = await send('sms', '--type', 'message.failed');
    expect(sms.code).toBe(2);
    expect(sms.stderr).toContain('Error: --type message.failed: a twilio delivery has no one place that names its event type');
    const plain = await send('plain', '--type', 'x');
    expect(plain.code).toBe(2);
    expect(plain.stderr).toContain(`Try: set the source's "eventType" to one field, e.g. "{body.type}" or "{header.x-event-type}", or leave out --type`);
    const db = new Database(`${tmp.dir}/receiver.db`, { readonly: true });
    expect(db.prepare(`SELECT count(*) AS n FROM events WHERE source IN ('sms', 'plain')`).get()).toEqual({ n: 0 });
    db.close();
  });

  it('stores its sample as a test: origin test, its routes skipped and saying why; --run-effects runs them', async () => {
    const before = ran().length;
    const skipped = await send('gh');
    expect(skipped.stdout).toMatch(/ -> 202 /);
    expect(stored(skipped.stdout)).toMatchObject({
      origin: 'test',
      status: 'done',
      route_decisions: 'test delivery (send-test --run-effects runs its effects)',
    });
    const run = await send('gh', '--run-effects');
    const id = stored(run.stdout).id;
    expect(stored(run.stdout)).toMatchObject({ origin: 'test' });
    await waitFor(() => (stored(run.stdout).status === 'done' ? true : undefined), 'the --run-effects delivery to run its route', 10_000);
    expect(ran()).toContain(String(id));
    expect(ran()).toHaveLength(before + 1);
  });

  it('a test mark is believed only with its MAC under the source secret: anything else is refused, never a real delivery that skips its effects', async () => {
    const body = Buffer.from('{"ref":"refs/heads/main"}');
    const signed = (extra: Record<string, string>) => ({
      'x-hub-signature-256': `sha256=${createHmac('sha256', SECRET).update(body).digest('hex')}`,
      'x-github-delivery': randomUUID(),
      'x-github-event': 'push',
      ...extra,
    });
    const db = () => new Database(`${tmp.dir}/receiver.db`, { readonly: true });
    const count = () => {
      const d = db();
      try {
        return d.prepare('SELECT count(*) FROM events').pluck().get();
      } finally {
        d.close();
      }
    };
    const n = count();
    for (const [why, mark] of [
      ['a mark without a MAC, as anyone could add', 'skip-effects'],
      ['a MAC under another secret', testMark('gh', 'skip-effects', body, 'not-the-secret')],
      ['a MAC for another source', testMark('plain', 'skip-effects', body, SECRET)],
      ['a MAC for another body', testMark('gh', 'skip-effects', Buffer.from('{}'), SECRET)],
      ['a MAC for run-effects, sent as skip-effects', testMark('gh', 'run-effects', body, SECRET).replace('run-effects', 'skip-effects')],
      ['garbage', 'yes please'],
    ] as const) {
      const r = await post(`${serve.url}/webhooks/gh`, body, signed({ 'x-receiver-test': mark }));
      expect(r.status, why).toBe(401);
    }
    expect(count()).toBe(n);
    // With its MAC it is a test; without the header it is a real delivery, and runs.
    const test = await post(`${serve.url}/webhooks/gh`, body, signed({ 'x-receiver-test': testMark('gh', 'skip-effects', body, SECRET) }));
    expect(stored(test.text)).toMatchObject({ origin: 'test', status: 'done' });
    const real = await post(`${serve.url}/webhooks/gh`, body, signed({}));
    const id = stored(real.text).id;
    expect(stored(real.text).origin).toBe('webhook');
    await waitFor(() => (ran().includes(String(id)) ? true : undefined), 'the real delivery to run its route', 10_000);
  });

  it('--content-type sets the content type; without it, a --body is sent as what its bytes are', async () => {
    const type = (stdout: string) => (JSON.parse(stored(stdout).headers) as Record<string, string>)['content-type'];
    writeFileSync(`${tmp.dir}/form.txt`, 'a=1&b=two');
    writeFileSync(`${tmp.dir}/note.txt`, 'hello there\n');
    writeFileSync(`${tmp.dir}/data.json`, '[1, 2]');
    expect(type((await send('plain', '--body', `${tmp.dir}/form.txt`)).stdout)).toBe('application/x-www-form-urlencoded');
    expect(type((await send('plain', '--body', `${tmp.dir}/note.txt`)).stdout)).toBe('text/plain; charset=utf-8');
    expect(type((await send('plain', '--body', `${tmp.dir}/data.json`)).stdout)).toBe('application/json');
    // (Another body: the same one again would be a duplicate of the first, its answer the first's.)
    writeFileSync(`${tmp.dir}/rows.csv`, 'a,b\n1,2\n');
    expect(type((await send('plain', '--body', `${tmp.dir}/rows.csv`, '--content-type', 'text/csv')).stdout)).toBe('text/csv');
    expect(type((await send('plain', '--content-type', 'application/vnd.api+json')).stdout)).toBe('application/vnd.api+json');
    expect(type((await send('plain')).stdout)).toBe('application/json');
  });
});
