import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/store/sqlite/open.js';
import { runCli, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { STRIPE_KEY, STRIPE_WHSEC } from './fakes.js';
import { catchUpApp } from './harness.js';

/**
 * What catch-up calls may be hostile or broken: an answer that drips, one that never ends,
 * one that quotes the key back, a page with nulls in it. Each run ends within its bounds
 * with one clear message naming the source, and the key is never repeated.
 */

/** A stand-in for a sender's API that misbehaves as told, on 127.0.0.1 port 0. */
class HostileApi {
  base = '';
  connections = 0;
  /** Bytes written to the body of the current answer. */
  written = 0;
  answer: (req: IncomingMessage, res: ServerResponse) => void = (_req, res) => res.end('{}');
  readonly #timers = new Set<NodeJS.Timeout>();
  #server: Server | undefined;

  async start(): Promise<this> {
    this.#server = createServer((req, res) => {
      this.connections += 1;
      this.answer(req, res);
    });
    await new Promise<void>((r) => this.#server!.listen(0, '127.0.0.1', () => r()));
    this.base = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  /** 200, then one byte every 50 ms, for ever. */
  drip(): void {
    this.answer = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"data": [');
      const t = setInterval(() => res.write(' '), 50);
      this.#timers.add(t);
      res.on('close', () => clearInterval(t));
    };
  }

  /** 200 and `mb` megabytes of JSON-ish bytes, as fast as the client reads. */
  huge(mb: number): void {
    this.written = 0;
    this.answer = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(64 * 1024, ' ');
      const more = () => {
        while (this.written < mb * 1024 * 1024 && !res.destroyed) {
          this.written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end();
      };
      more();
    };
  }

  json(status: number, body: unknown): void {
    this.answer = (_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
  }

  async close(): Promise<void> {
    for (const t of this.#timers) clearInterval(t);
    await new Promise<void>((r) => {
      this.#server?.close(() => r());
      this.#server?.closeAllConnections();
    });
  }
}

/** The key, quoted back whole and in parts, as APIs do in their error messages. */
const ECHO = `Invalid API Key provided: ${STRIPE_KEY}; did you mean ${STRIPE_KEY.slice(0, 14)}****? (key ending ${STRIPE_KEY.slice(-8)})`;

describe('catch-up: bounds on what the API answers', () => {
  let tmp: ReturnType<typeof tempDir>;
  let api: HostileApi;
  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-bounds-');
    api = await new HostileApi().start();
  });
  afterEach(async () => {
    await api.close();
    tmp.cleanup();
  });

  const app = (catchUp: Record<string, unknown>) =>
    catchUpApp(
      tmp.dir,
      'shop',
      { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:STRIPE_API_KEY', apiBase: api.base, ...catchUp } },
      { STRIPE_API_KEY: STRIPE_KEY },
    );

  it('an answer that drips its body times out after catchUp.timeoutSeconds, tried three times, with one message naming the source', async () => {
    api.drip();
    const h = await app({ timeoutSeconds: 0.3 });
    try {
      const started = performance.now();
      const r = await h.run();
      expect(r.error).toBe(`sources.shop.catchUp: Stripe: GET ${api.base}/v1/events timed out after 0.3s (catchUp.timeoutSeconds)`);
      expect(api.connections).toBe(3);
      expect(h.waits).toEqual([500, 2000]);
      expect(performance.now() - started).toBeLessThan(3000);
    } finally {
      await h.close();
    }
  });

  it('a run stops at catchUp.maxRunSeconds however long each request may take, and says the next run continues', async () => {
    api.drip();
    const h = await app({ timeoutSeconds: 60, maxRunSeconds: 0.5 });
    try {
      const started = performance.now();
      const r = await h.run();
      expect(r.error).toBe('sources.shop.catchUp: stopped after 0.5s (catchUp.maxRunSeconds); the next run continues where this one stopped');
      expect(performance.now() - started).toBeLessThan(2000);
    } finally {
      await h.close();
    }
  });

  it('a huge answer is refused at catchUp.maxResponseBytes: read no further, never held whole', async () => {
    api.huge(400);
    const h = await app({ maxResponseBytes: 1_048_576 });
    try {
      const r = await h.run();
      expect(r.error).toBe(
        `sources.shop.catchUp: Stripe: GET ${api.base}/v1/events answered more than 1048576 bytes; not read further (catchUp.maxResponseBytes)`,
      );
      // The connection was left at the bound: nowhere near the 400 MB offered was sent.
      await new Promise((r) => setTimeout(r, 100));
      expect(api.written).toBeLessThan(32 * 1024 * 1024);
    } finally {
      await h.close();
    }
  });

  it('a null or malformed item is skipped and counted; the rest of the page is stored', async () => {
    const created = Math.floor(Date.now() / 1000) - 60;
    const event = (id: string) => ({ id, object: 'event', created, type: 'invoice.paid', data: { object: { id: `in_${id}` } } });
    api.json(200, { object: 'list', has_more: false, data: [event('evt_new'), null, { id: 5 }, 'text', event('evt_old')] });
    const h = await app({});
    try {
      const r = await h.run({ since: Date.now() - 3_600_000 });
      expect(r).toMatchObject({ error: null, listed: 2, storedNow: 2, skipped: 3 });
      expect(h.stored().sort()).toEqual(['evt_new', 'evt_old']);
      expect((await h.app.store.catchUpState('shop'))?.lastCounts).toMatchObject({ skipped: 3, storedNow: 2 });
    } finally {
      await h.close();
    }
  });

  it('a 4xx or 5xx message that quotes the key is repeated without it', async () => {
    const h = await app({});
    try {
      api.json(500, { error: { message: ECHO } });
      const five = await h.run();
      expect(five.error).toMatch(/^sources\.shop\.catchUp: Stripe: the API answered 500 to GET \/v1\/events \(Invalid API Key provided: \[redacted\]/);
      api.json(400, { error: { message: ECHO } });
      const four = await h.run();
      expect(four.error).toMatch(/^sources\.shop\.catchUp: Stripe: the API answered 400 to GET \/v1\/events \(Invalid API Key provided: \[redacted\]/);
      for (const text of [five.error!, four.error!, (await h.app.store.catchUpState('shop'))!.lastError!]) {
        expect(text).not.toContain(STRIPE_KEY);
        expect(text).not.toContain(STRIPE_KEY.slice(0, 14));
        expect(text).not.toContain(STRIPE_KEY.slice(-8));
      }
    } finally {
      await h.close();
    }
  });
});

describe('catch-up in serve and the CLI: hangs end, shutdown finishes, the key stays out of the log and stats', () => {
  let tmp: ReturnType<typeof tempDir>;
  let api: HostileApi;
  let serve: ServeProcess | undefined;
  const env = { STRIPE_API_KEY: STRIPE_KEY };
  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-bounds-serve-');
    api = await new HostileApi().start();
  });
  afterEach(async () => {
    await serve?.stop('SIGKILL');
    serve = undefined;
    await api.close();
    tmp.cleanup();
  });

  const config = (catchUp: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    writeConfig(tmp.dir, {
      sources: {
        shop: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:STRIPE_API_KEY', apiBase: api.base, everyMinutes: 60, ...catchUp } },
      },
      ...extra,
    });

  it('receiver catch-up against an answer that drips ends with "timed out" naming the source (exit 1)', async () => {
    api.drip();
    const file = config({ timeoutSeconds: 0.5 });
    // The database serve created (operator commands never create one).
    openSqlite(join(tmp.dir, 'receiver.db'), { busyTimeoutMs: 1000 }).close();
    const started = performance.now();
    const r = await runCli(['catch-up', '-c', file], { env, timeoutMs: 30_000 });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`error: sources.shop.catchUp: Stripe: GET ${api.base}/v1/events timed out after 0.5s (catchUp.timeoutSeconds)`);
    expect(performance.now() - started).toBeLessThan(25_000);
  });

  it("serve's SIGTERM finishes within shutdownGraceSeconds while a catch-up request drips", async () => {
    api.drip();
    const file = config({ timeoutSeconds: 120 }, { shutdownGraceSeconds: 1 });
    serve = await startServe(file, { env });
    await waitFor(() => (api.connections > 0 ? true : undefined), 'the catch-up request', 10_000);
    const started = performance.now();
    const code = await serve.stop('SIGTERM');
    expect(code).toBe(0);
    expect(performance.now() - started).toBeLessThan(4000);
    expect(serve.output().stderr).toContain('stopped (shutting down)');
  });

  it('a key the API quotes back in a 500 is in neither the log, catch_up.last_error nor receiver stats', { timeout: 60_000 }, async () => {
    api.json(500, { error: { message: ECHO } });
    const file = config({});
    serve = await startServe(file, { env });
    await waitFor(() => (serve!.output().stderr.includes('"msg":"catch-up failed"') ? true : undefined), 'the failed run', 15_000);
    await serve.stop('SIGTERM');
    const stderr = serve.output().stderr;
    expect(stderr).toContain('Invalid API Key provided: [redacted]');
    const stats = await runCli(['stats', '-c', file, '--json'], { env });
    const statsText = await runCli(['stats', '-c', file], { env });
    expect(JSON.parse(stats.stdout).catchUp[0].lastError).toContain('the API answered 500 to GET /v1/events (Invalid API Key provided: [redacted]');
    for (const text of [stderr, serve.output().stdout, stats.stdout, statsText.stdout]) {
      expect(text).not.toContain(STRIPE_KEY);
      expect(text).not.toContain(STRIPE_KEY.slice(0, 14));
      expect(text).not.toContain(STRIPE_KEY.slice(-8));
    }
  });

  it('check-config warns about an http:// apiBase to another machine, not about loopback', async () => {
    const loopback = await runCli(['check-config', '-c', config({})], { env });
    expect(loopback.code).toBe(0);
    expect(loopback.stderr).not.toContain('apiBase');
    const remote = await runCli(['check-config', '-c', config({ apiBase: 'http://api.example.test' })], { env });
    expect(remote.code).toBe(0);
    expect(remote.stderr).toContain(
      'Warning: sources.shop.catchUp.apiBase is http:// (http://api.example.test): the API credential and every answer cross the network unencrypted; use https://',
    );
  });
});
