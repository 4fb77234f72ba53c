import Database from 'better-sqlite3';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createTcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { mkdirSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, runInProcess, startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';

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
  // Node's fetch never settled, and send-test used to exit 0 having printed nothing).
  for (const [how, end, reason] of [
    // Under load undici may see the reset only as a request that never got an answer.
    ['resets', (s: Socket) => s.resetAndDestroy(), /ECONNRESET|socket hang up|other side closed|no answer within 10 s/],
    ['closes', (s: Socket) => s.destroy(), /no answer within 10 s|other side closed|ECONNRESET|socket hang up/],
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
    }, 20_000);
  }
});

describe('receiver send-test --type and --body', () => {
  const tmp = tempDir();
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
      return db.prepare('SELECT source, delivery_id, event_type, body FROM events WHERE id = ?').get(id) as {
        source: string;
        delivery_id: string;
        event_type: string;
        body: Buffer;
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
});
