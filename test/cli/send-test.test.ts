import Database from 'better-sqlite3';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createTcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { mkdirSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, runInProcess, startServe, tempDir, writeConfig } from '../helpers.js';

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
