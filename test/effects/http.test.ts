import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeUrl, idempotencyKey, parseRetryAfter, runHttp } from '../../src/effects/http.js';

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
