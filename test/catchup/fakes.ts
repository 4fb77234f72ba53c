import { createHmac, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Local stand-ins for the senders' APIs, on 127.0.0.1 port 0, following each API's
 * documented shapes: list pages and cursors, Link headers, 401 for a wrong credential,
 * 429 with Retry-After, 5xx. Each also "delivers" webhooks to the receiver the way the
 * sender does (signed), and records whether that delivery got a 2xx.
 */

export interface Fault {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

interface Route {
  method: string;
  path: RegExp;
  handle: (req: IncomingMessage, url: URL, m: RegExpExecArray, body: string) => { status: number; json?: unknown; headers?: Record<string, string> } | Promise<{ status: number; json?: unknown; headers?: Record<string, string> }>;
}

export class FakeApi {
  readonly requests: { method: string; path: string; query: string; auth: string | undefined }[] = [];
  /** Answered instead, in order, by the next requests (after `faultAfter` more requests). */
  readonly faults: Fault[] = [];
  faultAfter = 0;
  /** Where webhooks go (the receiver's URL for this source); undefined: the receiver is down. */
  target: string | undefined;
  #server: Server | undefined;
  base = '';
  readonly #routes: Route[] = [];
  readonly #auth: (req: IncomingMessage) => boolean;

  constructor(auth: (req: IncomingMessage) => boolean) {
    this.#auth = auth;
  }

  route(method: string, path: RegExp, handle: Route['handle']): void {
    this.#routes.push({ method, path, handle });
  }

  async start(): Promise<this> {
    this.#server = createServer((req, res) => void this.#serve(req, res));
    await new Promise<void>((r) => this.#server!.listen(0, '127.0.0.1', () => r()));
    this.base = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    await new Promise<void>((r) => {
      this.#server?.close(() => r());
      this.#server?.closeAllConnections();
    });
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.base);
    let body = '';
    for await (const chunk of req) body += String(chunk);
    this.requests.push({ method: req.method ?? '', path: url.pathname, query: url.search, auth: req.headers.authorization ?? (req.headers['private-token'] as string | undefined) });
    const send = (status: number, json: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(json === undefined ? '' : JSON.stringify(json));
    };
    if (this.faultAfter > 0) this.faultAfter -= 1;
    else {
      const fault = this.faults.shift();
      if (fault !== undefined) {
        res.writeHead(fault.status, { 'content-type': 'application/json', ...fault.headers });
        res.end(fault.body ?? '{}');
        return;
      }
    }
    if (!this.#auth(req)) return send(401, { error: { message: 'Invalid API Key provided: sk_test_****cret' }, message: 'Bad credentials' });
    for (const r of this.#routes) {
      const m = r.method === req.method ? r.path.exec(url.pathname) : null;
      if (m === null) continue;
      const out = await r.handle(req, url, m, body);
      return send(out.status, out.json, out.headers);
    }
    send(404, { message: 'Not Found' });
  }

  /** POSTs a webhook to the receiver; true when it answered 2xx. */
  async deliver(body: string, headers: Record<string, string>): Promise<{ ok: boolean; status: number }> {
    if (this.target === undefined) return { ok: false, status: 0 };
    try {
      const res = await fetch(this.target, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
      await res.text();
      return { ok: res.status >= 200 && res.status < 300, status: res.status };
    } catch {
      return { ok: false, status: 0 };
    }
  }

  count(method: string, path: RegExp): number {
    return this.requests.filter((r) => r.method === method && path.test(r.path)).length;
  }
}

// ---------------------------------------------------------------- Stripe

export const STRIPE_KEY = 'rk_test_catchup_secret';
export const STRIPE_WHSEC = 'whsec_catchup_signing';

export interface StripeEvent {
  id: string;
  object: 'event';
  api_version: string;
  created: number;
  type: string;
  livemode: boolean;
  pending_webhooks: number;
  data: { object: Record<string, unknown> };
}

/** GET /v1/events: newest first, `limit` up to 100, `created[gte]`, `starting_after`. */
export class FakeStripe extends FakeApi {
  readonly events: StripeEvent[] = [];
  #n = 0;

  constructor() {
    super((req) => req.headers.authorization === `Bearer ${STRIPE_KEY}`);
    this.route('GET', /^\/v1\/events$/, (_req, url) => {
      const limit = Math.min(100, Number(url.searchParams.get('limit') ?? 10));
      const gte = Number(url.searchParams.get('created[gte]') ?? 0);
      const after = url.searchParams.get('starting_after');
      let list = [...this.events].reverse().filter((e) => e.created >= gte);
      if (after !== null) list = list.slice(list.findIndex((e) => e.id === after) + 1);
      return { status: 200, json: { object: 'list', url: '/v1/events', has_more: list.length > limit, data: list.slice(0, limit) } };
    });
  }

  /** A new event (created now unless told), delivered to the receiver as Stripe signs it. */
  async create(type = 'checkout.session.completed', created = Math.floor(Date.now() / 1000)): Promise<StripeEvent & { delivered: boolean }> {
    const n = ++this.#n;
    const event: StripeEvent = {
      id: `evt_${String(n).padStart(4, '0')}${randomUUID().slice(0, 8)}`,
      object: 'event',
      api_version: '2025-01-27.acacia',
      created,
      type,
      livemode: false,
      pending_webhooks: 1,
      data: { object: { id: `cs_${n}`, object: 'checkout.session', amount_total: 1900 + n } },
    };
    this.events.push(event);
    const { ok } = await this.webhook(event);
    return { ...event, delivered: ok };
  }

  /**
   * The webhook of an event: pretty-printed as Stripe sends it, pending_webhooks changed,
   * and the object rendered for the endpoint's own (older) API version: not the API's bytes.
   */
  webhook(event: StripeEvent) {
    const body = JSON.stringify({ ...event, api_version: '2024-06-20', pending_webhooks: 0, data: { object: { ...event.data.object, rendered_for: '2024-06-20' } } }, null, 2);
    const t = Math.floor(Date.now() / 1000);
    const sig = createHmac('sha256', STRIPE_WHSEC).update(`${t}.${body}`).digest('hex');
    return this.deliver(body, { 'stripe-signature': `t=${t},v1=${sig}` });
  }
}

// ---------------------------------------------------------------- GitHub

export const GITHUB_TOKEN = 'github_pat_catchup_secret';
export const GITHUB_SECRET = 'gh-hook-secret';
export const HOOK_PATH = 'repos/shop/site/hooks/42';

export interface GithubDelivery {
  id: number;
  guid: string;
  delivered_at: string;
  redelivery: boolean;
  duration: number;
  status: string;
  status_code: number;
  event: string;
  action: string | null;
  installation_id: null;
  repository_id: number;
  payload: string;
}

/** GET .../hooks/42/deliveries (newest first, per_page up to 100, `cursor`, Link rel="next"); POST .../deliveries/:id/attempts. */
export class FakeGithub extends FakeApi {
  readonly deliveries: GithubDelivery[] = [];
  #id = 1000;

  constructor() {
    super((req) => req.headers.authorization === `Bearer ${GITHUB_TOKEN}`);
    this.route('GET', /^\/repos\/shop\/site\/hooks\/42\/deliveries$/, (_req, url) => {
      const per = Math.min(100, Number(url.searchParams.get('per_page') ?? 30));
      const cursor = url.searchParams.get('cursor');
      const list = [...this.deliveries].reverse();
      const start = cursor === null ? 0 : list.findIndex((d) => String(d.id) === cursor);
      const page = list.slice(start, start + per);
      const next = list[start + per];
      const headers: Record<string, string> = next === undefined ? {} : { link: `<${this.base}/repos/shop/site/hooks/42/deliveries?per_page=${per}&cursor=${next.id}>; rel="next"` };
      return { status: 200, json: page.map(({ payload: _p, ...d }) => d), headers };
    });
    this.route('POST', /^\/repos\/shop\/site\/hooks\/42\/deliveries\/(\d+)\/attempts$/, (_req, _url, m) => {
      const original = this.deliveries.find((d) => d.id === Number(m[1]));
      if (original === undefined) return { status: 404, json: { message: 'Not Found' } };
      // GitHub answers 202 and delivers afterwards.
      setTimeout(() => void this.#attempt(original.guid, original.event, original.payload, true), 5);
      return { status: 202, json: {} };
    });
  }

  /** A new event delivered to the receiver (or not, when it is down). */
  async push(event = 'push', payload: Record<string, unknown> = { ref: 'refs/heads/main', after: randomUUID() }): Promise<GithubDelivery> {
    return this.#attempt(randomUUID(), event, JSON.stringify(payload), false);
  }

  async #attempt(guid: string, event: string, payload: string, redelivery: boolean): Promise<GithubDelivery> {
    const sig = createHmac('sha256', GITHUB_SECRET).update(payload).digest('hex');
    const { ok, status } = await this.deliver(payload, { 'x-hub-signature-256': `sha256=${sig}`, 'x-github-delivery': guid, 'x-github-event': event, 'x-github-hook-id': '42' });
    const d: GithubDelivery = {
      id: ++this.#id,
      guid,
      delivered_at: new Date().toISOString(),
      redelivery,
      duration: 0.1,
      status: ok ? 'OK' : 'failed to connect',
      status_code: status,
      event,
      action: null,
      installation_id: null,
      repository_id: 1,
      payload,
    };
    this.deliveries.push(d);
    return d;
  }
}
