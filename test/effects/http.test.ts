import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash, randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Secret } from '../../src/config/secret.js';
import { describeUrl, idempotencyKey, parseRetryAfter, runHttp, signingKeyProblem } from '../../src/effects/http.js';

interface Seen {
  headers: IncomingMessage['headers'];
  body: Buffer;
  method: string | undefined;
}

describe('http effect', () => {
  let server: Server;
  let url: string;
  const seen: Seen[] = [];
  let answer: (res: import('node:http').ServerResponse) => void = (res) => res.end();
  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({ headers: req.headers, body: Buffer.concat(chunks), method: req.method });
        answer(res);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/stripe`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const body = Buffer.from('{"id": "evt_1",  "exact": "bytes"}');
  const event = {
    id: 5,
    source: 'stripe',
    deliveryId: 'evt_1',
    eventType: 'invoice.paid',
    headers: { 'content-type': 'application/json; charset=utf-8' },
    body,
    receivedAt: 0,
  };
  const req = (extra: Partial<Parameters<typeof runHttp>[0]> = {}) =>
    runHttp({ url, event, effectKey: 'app:in_1', attempt: 2, timeoutMs: 2000, now: Date.parse('2026-01-01T00:00:00Z'), ...extra });

  it('POSTs the raw body with its content type, Idempotency-Key and configured headers; 2xx is success', async () => {
    seen.length = 0;
    answer = (res) => res.writeHead(201).end('created');
    const r = await req({ headers: { Authorization: 'Bearer app-token', 'x-extra': '1' } });
    expect(r).toEqual({ ok: true, output: 'created' });
    expect(seen).toHaveLength(1);
    const s = seen[0]!;
    expect(s.method).toBe('POST');
    expect(s.body.equals(body)).toBe(true);
    expect(s.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(s.headers['idempotency-key']).toBe(createHash('sha256').update('app:in_1').digest('hex'));
    expect(s.headers['idempotency-key']).toBe(idempotencyKey('app:in_1'));
    expect(s.headers.authorization).toBe('Bearer app-token');
    expect(s.headers['x-extra']).toBe('1');
    expect(s.headers['x-receiver-event-id']).toBe('5');
    expect(s.headers['x-receiver-attempt']).toBe('2');

    // Credentials in the URL become Basic auth (fetch refuses them in the URL).
    seen.length = 0;
    expect(await req({ url: url.replace('http://', 'http://app:s%3Acret@') })).toMatchObject({ ok: true });
    expect(seen[0]!.headers.authorization).toBe(`Basic ${Buffer.from('app:s:cret').toString('base64')}`);
  });

  it('408, 429 and 5xx are retryable with Retry-After; other 4xx and 3xx are permanent', async () => {
    for (const [status, retryable] of [
      [500, true],
      [503, true],
      [408, true],
      [429, true],
      [400, false],
      [404, false],
      [422, false],
      [301, false],
    ] as const) {
      answer = (res) => res.writeHead(status, status === 301 ? { location: '/elsewhere' } : {}).end('no');
      const r = await req();
      expect(r, String(status)).toMatchObject({ ok: false, retryable });
      if (!r.ok) expect(r.error).toContain(`answered ${status}`);
    }
    answer = (res) => res.writeHead(429, { 'retry-after': '120' }).end();
    expect(await req()).toMatchObject({ ok: false, retryable: true, retryAfterMs: 120_000 });
    answer = (res) => res.writeHead(503, { 'retry-after': 'Thu, 01 Jan 2026 00:05:00 GMT' }).end();
    expect(await req()).toMatchObject({ ok: false, retryable: true, retryAfterMs: 300_000 });
  });

  it('a timeout and a refused connection are retryable; messages carry no credentials or query', async () => {
    answer = () => {}; // never answers
    const r = await req({ timeoutMs: 200, url: url.replace('http://', 'http://user:pw@') + '?token=abc' });
    expect(r).toMatchObject({ ok: false, retryable: true, timedOut: true });
    expect((r as { error: string }).error).toMatch(/timed out after 0.2s/);
    expect((r as { error: string }).error).not.toMatch(/pw|abc/);
    // A port held on 127.0.0.1 for the whole test, asked on 127.0.0.2 where nothing listens:
    // refused for sure. (A port closed before the request could be taken by another test.)
    const held = createServer();
    await new Promise<void>((r) => held.listen(0, '127.0.0.1', r));
    const port = (held.address() as AddressInfo).port;
    try {
      const refused = await req({ url: `http://127.0.0.2:${port}/hook` });
      expect(refused).toEqual({ ok: false, retryable: true, error: `POST http://127.0.0.2:${port}/hook failed: ECONNREFUSED` });
    } finally {
      held.close();
    }
  });

  it('an answer that drips its body is a timeout: the bound covers the body, not only the status line', async () => {
    let dripping: NodeJS.Timeout | undefined;
    answer = (res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      dripping = setInterval(() => res.write('.'), 20);
      res.on('close', () => clearInterval(dripping));
    };
    const started = performance.now();
    const r = await req({ timeoutMs: 300 });
    clearInterval(dripping);
    expect(r).toMatchObject({ ok: false, retryable: true, timedOut: true });
    expect((r as { error: string }).error).toBe(`POST ${url} timed out after 0.3s`);
    expect(performance.now() - started).toBeLessThan(1500);
  });

  it('a huge answer is read only up to maxResponseBytes; the attempt keeps its tail and says it was cut', async () => {
    let written = 0;
    let closed!: Promise<void>;
    answer = (res) => {
      closed = new Promise((resolve) => res.on('close', () => resolve()));
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 'x');
      // 600 MB offered, written as fast as the client reads.
      const more = () => {
        while (written < 600 * 1024 * 1024 && !res.destroyed) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end();
      };
      more();
    };
    const r = await req({ maxResponseBytes: 256 * 1024 });
    await closed;
    expect(r.ok).toBe(true);
    const output = (r as { output: string }).output;
    expect(output.length).toBeLessThanOrEqual(4096);
    expect(output).toMatch(/x\n\[the answer is longer than 262144 bytes \(effect.http.maxResponseBytes\): not read further\]$/);
    // The connection was left once the bound was read: the rest was never sent.
    expect(written).toBeLessThan(32 * 1024 * 1024);
  });

  it('signed (sign): webhook-id, webhook-timestamp and webhook-signature over the exact bytes, verified by the standardwebhooks library', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    answer = (res) => res.writeHead(200).end();
    seen.length = 0;
    const now = Date.now();
    expect(await req({ signWith: new Secret(secret), now })).toMatchObject({ ok: true });
    const s = seen[0]!;
    expect(s.body.equals(body)).toBe(true);
    // The id is the Idempotency-Key: one per run key, the same on every retry of the run.
    expect(s.headers['webhook-id']).toBe(idempotencyKey('app:in_1'));
    expect(s.headers['webhook-timestamp']).toBe(String(Math.floor(now / 1000)));
    expect(s.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    const headers = s.headers as Record<string, string>;
    expect(new Webhook(secret).verify(s.body.toString('utf8'), headers)).toEqual(JSON.parse(body.toString('utf8')));
    // Another secret does not verify it; a changed body does not either.
    expect(() => new Webhook(`whsec_${randomBytes(32).toString('base64')}`).verify(s.body.toString('utf8'), headers)).toThrow(/No matching signature/);
    expect(() => new Webhook(secret).verify(s.body.toString('utf8').replace('  ', ' '), headers)).toThrow(/No matching signature/);

    // A forced run's key: another Idempotency-Key and webhook-id, still verified.
    seen.length = 0;
    expect(await req({ signWith: new Secret(secret), now, runKey: 'app:in_1#forced-1' })).toMatchObject({ ok: true });
    expect(seen[0]!.headers['idempotency-key']).toBe(idempotencyKey('app:in_1#forced-1'));
    expect(seen[0]!.headers['webhook-id']).toBe(idempotencyKey('app:in_1#forced-1'));
    expect(seen[0]!.headers['webhook-id']).not.toBe(s.headers['webhook-id']);
    expect(() => new Webhook(secret).verify(seen[0]!.body.toString('utf8'), seen[0]!.headers as Record<string, string>)).not.toThrow();

    // Unsigned when `sign` is not set.
    seen.length = 0;
    await req();
    expect(seen[0]!.headers['webhook-signature']).toBeUndefined();
  });

  it('a signing secret is whsec_ and canonical base64 of 24 to 64 bytes', () => {
    expect(signingKeyProblem(new Secret(`whsec_${randomBytes(24).toString('base64')}`))).toBeUndefined();
    expect(signingKeyProblem(new Secret(`whsec_${randomBytes(64).toString('base64')}`))).toBeUndefined();
    expect(signingKeyProblem(new Secret(randomBytes(32).toString('base64')))).toMatch(/must start with "whsec_"/);
    expect(signingKeyProblem(new Secret('whsec_not base64!'))).toMatch(/not standard base64/);
    expect(signingKeyProblem(new Secret(`whsec_${randomBytes(32).toString('base64url')}`.replace(/=+$/, '') + '-_'))).toMatch(/not standard base64/);
    expect(signingKeyProblem(new Secret(`whsec_${randomBytes(16).toString('base64')}`))).toMatch(/decodes to 16 bytes; a key must be 24 to 64 bytes/);
    expect(signingKeyProblem(new Secret(`whsec_${randomBytes(65).toString('base64')}`))).toMatch(/decodes to 65 bytes/);
  });

  it('parses Retry-After as seconds or an HTTP date', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter('30', now)).toBe(30_000);
    expect(parseRetryAfter('Thu, 01 Jan 2026 00:01:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('Wed, 31 Dec 2025 00:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(null, now)).toBeUndefined();
    expect(describeUrl('https://u:p@app.example/hooks?token=x')).toBe('https://app.example/hooks');
  });
});
