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
  handle: (
    req: IncomingMessage,
    url: URL,
    m: RegExpExecArray,
    body: string,
  ) => { status: number; json?: unknown; headers?: Record<string, string> } | Promise<{ status: number; json?: unknown; headers?: Record<string, string> }>;
}

export class FakeApi {
  readonly requests: { method: string; path: string; query: string; auth: string | undefined }[] = [];
  /** Answered instead, in order, by the next requests (after `faultAfter` more requests). */
  readonly faults: Fault[] = [];
  faultAfter = 0;
  /** Pages no longer than this, whatever was asked (the APIs may give shorter pages). */
  pageSize = Number.POSITIVE_INFINITY;
  /** Every answer waits this long (a slow API). */
  delayMs = 0;
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
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
    this.requests.push({
      method: req.method ?? '',
      path: url.pathname,
      query: url.search,
      auth: req.headers.authorization ?? (req.headers['private-token'] as string | undefined),
    });
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

/** GET /v1/events: newest first, `limit` up to 100, `created[gte]`, `created[lte]`, `starting_after`. */
export class FakeStripe extends FakeApi {
  readonly events: StripeEvent[] = [];
  #n = 0;

  constructor() {
    super((req) => req.headers.authorization === `Bearer ${STRIPE_KEY}`);
    this.route('GET', /^\/v1\/events$/, (_req, url) => {
      const limit = Math.min(100, Number(url.searchParams.get('limit') ?? 10));
      const gte = Number(url.searchParams.get('created[gte]') ?? 0);
      const lte = Number(url.searchParams.get('created[lte]') ?? Number.POSITIVE_INFINITY);
      const after = url.searchParams.get('starting_after');
      let list = [...this.events].reverse().filter((e) => e.created >= gte && e.created <= lte);
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
    const body = JSON.stringify(
      { ...event, api_version: '2024-06-20', pending_webhooks: 0, data: { object: { ...event.data.object, rendered_for: '2024-06-20' } } },
      null,
      2,
    );
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
      const per = Math.min(100, this.pageSize, Number(url.searchParams.get('per_page') ?? 30));
      const cursor = url.searchParams.get('cursor');
      const list = [...this.deliveries].reverse();
      const start = cursor === null ? 0 : list.findIndex((d) => String(d.id) === cursor);
      const page = list.slice(start, start + per);
      const next = list[start + per];
      const headers: Record<string, string> =
        next === undefined ? {} : { link: `<${this.base}/repos/shop/site/hooks/42/deliveries?per_page=${per}&cursor=${next.id}>; rel="next"` };
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
    const { ok, status } = await this.deliver(payload, {
      'x-hub-signature-256': `sha256=${sig}`,
      'x-github-delivery': guid,
      'x-github-event': event,
      'x-github-hook-id': '42',
    });
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

// ---------------------------------------------------------------- Paddle

export const PADDLE_KEY = 'pdl_apikey_catchup_secret';
export const PADDLE_SECRET = 'pdl_ntfset_01catchupsecret';
export const NOTIFICATION_SETTING = 'ntfset_01hv0000000000000000000000';

export interface PaddleNotification {
  id: string;
  type: string;
  status: 'delivered' | 'failed' | 'needs_retry' | 'not_attempted';
  payload: { event_id: string; event_type: string; occurred_at: string; notification_id: string; data: Record<string, unknown> };
  occurred_at: string;
  delivered_at: string | null;
  replayed_at: string | null;
  origin: 'event' | 'replay';
  last_attempt_at: string | null;
  retry_at: string | null;
  times_attempted: number;
  notification_setting_id: string;
}

/** GET /notifications (per_page up to 200, `after`, meta.pagination.next and has_more, filters); POST /notifications/:id/replay. */
export class FakePaddle extends FakeApi {
  readonly notifications: PaddleNotification[] = [];
  #n = 0;
  /** Where meta.pagination.next points (a test of a page on another origin). */
  nextBase: string | undefined;

  constructor() {
    super((req) => req.headers.authorization === `Bearer ${PADDLE_KEY}`);
    this.route('GET', /^\/notifications$/, (_req, url) => {
      const per = Math.min(200, this.pageSize, Number(url.searchParams.get('per_page') ?? 50));
      const statuses = url.searchParams.get('status')?.split(',');
      const setting = url.searchParams.get('notification_setting_id');
      const from = url.searchParams.get('from');
      const after = url.searchParams.get('after');
      let list = [...this.notifications]
        .reverse()
        .filter(
          (n) =>
            (statuses === undefined || statuses.includes(n.status)) &&
            (setting === null || n.notification_setting_id === setting) &&
            (from === null || n.occurred_at >= from),
        );
      if (after !== null) list = list.slice(list.findIndex((n) => n.id === after) + 1);
      const page = list.slice(0, per);
      const more = list.length > per;
      const next = `${this.nextBase ?? this.base}/notifications?${new URLSearchParams({ ...Object.fromEntries(url.searchParams), after: page.at(-1)?.id ?? '' }).toString()}`;
      return {
        status: 200,
        json: { data: page, meta: { request_id: randomUUID(), pagination: { per_page: per, next, has_more: more, estimated_total: list.length } } },
      };
    });
    this.route('POST', /^\/notifications\/([^/]+)\/replay$/, (_req, _url, m) => {
      const original = this.notifications.find((n) => n.id === m[1]);
      if (original === undefined) return { status: 404, json: { error: { type: 'request_error', code: 'not_found', detail: 'Entity not found' } } };
      if (original.origin !== 'event' || !['delivered', 'failed'].includes(original.status)) {
        return {
          status: 400,
          json: { error: { type: 'request_error', code: 'notification_cannot_replay', detail: `Notification ${original.id} cannot be replayed` } },
        };
      }
      const replay = this.#notification(original.payload.event_id, original.type, original.payload.data, 'replay', original.occurred_at);
      setTimeout(() => void this.#send(replay), 5);
      return { status: 202, json: { data: { notification_id: replay.id }, meta: { request_id: randomUUID() } } };
    });
  }

  /** A new event for our destination; Paddle gives up (status failed) when the receiver is down. */
  async event(type = 'transaction.completed', setting = NOTIFICATION_SETTING): Promise<PaddleNotification> {
    const n = this.#notification(
      `evt_01${randomUUID().replaceAll('-', '').slice(0, 24)}`,
      type,
      { id: `txn_${++this.#n}` },
      'event',
      new Date().toISOString(),
      setting,
    );
    await this.#send(n);
    return n;
  }

  #notification(
    eventId: string,
    type: string,
    data: Record<string, unknown>,
    origin: 'event' | 'replay',
    occurredAt: string,
    setting = NOTIFICATION_SETTING,
  ): PaddleNotification {
    const id = `ntf_01${randomUUID().replaceAll('-', '').slice(0, 24)}`;
    const n: PaddleNotification = {
      id,
      type,
      status: 'not_attempted',
      payload: { event_id: eventId, event_type: type, occurred_at: occurredAt, notification_id: id, data },
      occurred_at: occurredAt,
      delivered_at: null,
      replayed_at: null,
      origin,
      last_attempt_at: null,
      retry_at: null,
      times_attempted: 0,
      notification_setting_id: setting,
    };
    this.notifications.push(n);
    return n;
  }

  async #send(n: PaddleNotification): Promise<void> {
    const body = JSON.stringify(n.payload);
    const ts = Math.floor(Date.now() / 1000);
    const h1 = createHmac('sha256', PADDLE_SECRET).update(`${ts}:${body}`).digest('hex');
    const { ok } = n.notification_setting_id === NOTIFICATION_SETTING ? await this.deliver(body, { 'paddle-signature': `ts=${ts};h1=${h1}` }) : { ok: false };
    n.times_attempted += 1;
    n.last_attempt_at = new Date().toISOString();
    n.status = ok ? 'delivered' : 'failed';
    if (ok) n.delivered_at = n.last_attempt_at;
  }
}

// ---------------------------------------------------------------- GitLab

export const GITLAB_TOKEN = 'glpat-catchup-secret';
export const GITLAB_SECRET = 'gitlab-hook-token';
export const GITLAB_HOOK = 'projects/7/hooks/3';

export interface GitlabHookEvent {
  id: number;
  url: string;
  trigger: string;
  request_headers: Record<string, string>;
  request_data: Record<string, unknown>;
  response_headers: Record<string, string>;
  response_body: string;
  execution_duration: number;
  response_status: string;
  created_at: string;
}

/** GET /api/v4/projects/7/hooks/3/events (page, per_page up to 100, Link rel="next" and X-Next-Page); POST .../events/:id/resend. */
export class FakeGitlab extends FakeApi {
  readonly events: GitlabHookEvent[] = [];
  #id = 500;

  constructor() {
    super((req) => req.headers['private-token'] === GITLAB_TOKEN);
    this.route('GET', /^\/api\/v4\/projects\/7\/hooks\/3\/events$/, (_req, url) => {
      const per = Math.min(100, this.pageSize, Number(url.searchParams.get('per_page') ?? 20));
      const pageNo = Number(url.searchParams.get('page') ?? 1);
      const list = [...this.events].reverse();
      const page = list.slice((pageNo - 1) * per, pageNo * per);
      const more = list.length > pageNo * per;
      const headers: Record<string, string> = { 'x-page': String(pageNo), 'x-per-page': String(per), 'x-total': String(list.length) };
      if (more) {
        headers['x-next-page'] = String(pageNo + 1);
        headers.link = `<${this.base}/api/v4/projects/7/hooks/3/events?page=${pageNo + 1}&per_page=${per}>; rel="next"`;
      }
      return { status: 200, json: page, headers };
    });
    this.route('POST', /^\/api\/v4\/projects\/7\/hooks\/3\/events\/(\d+)\/resend$/, (_req, _url, m) => {
      const original = this.events.find((e) => e.id === Number(m[1]));
      if (original === undefined) return { status: 404, json: { message: '404 Not found' } };
      setTimeout(() => void this.#send(original.request_headers, original.request_data, original.trigger), 5);
      return { status: 201, json: { response_status: 'unknown' } };
    });
  }

  /** A new push: delivered to the receiver, logged with what it sent and what came back. */
  async push(after = randomUUID()): Promise<GitlabHookEvent> {
    const key = randomUUID();
    return this.#send(
      {
        'Content-Type': 'application/json',
        'User-Agent': 'GitLab/18.0.0',
        'Idempotency-Key': key,
        'X-Gitlab-Event': 'Push Hook',
        'X-Gitlab-Event-UUID': randomUUID(),
        'X-Gitlab-Token': '[REDACTED]',
      },
      { object_kind: 'push', after },
      'push_hooks',
    );
  }

  async #send(headers: Record<string, string>, data: Record<string, unknown>, trigger: string): Promise<GitlabHookEvent> {
    const send: Record<string, string> = {};
    for (const [k, v] of Object.entries(headers)) if (k !== 'Content-Type') send[k.toLowerCase()] = v;
    send['x-gitlab-token'] = GITLAB_SECRET;
    const { ok, status } = await this.deliver(JSON.stringify(data), send);
    const e: GitlabHookEvent = {
      id: ++this.#id,
      url: this.target ?? 'http://receiver.example/webhooks/gl',
      trigger,
      request_headers: headers,
      request_data: data,
      response_headers: {},
      response_body: ok ? '{"status":"accepted"}' : 'Failed to open TCP connection',
      execution_duration: 0.01,
      response_status: ok ? String(status) : 'internal error',
      created_at: new Date().toISOString(),
    };
    this.events.push(e);
    return e;
  }
}
