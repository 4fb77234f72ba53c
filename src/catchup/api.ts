import { setTimeout as delay } from 'node:timers/promises';
import { ReceiverError } from '../errors.js';

/**
 * One run's HTTP client for a sender's API: polite (429 and Retry-After honoured, a
 * bounded number of requests), and careful with the credential (sent in a header, never
 * in a message; next-page URLs are followed only on the API's own origin, so a page can
 * never send the credential elsewhere).
 */

/** A run stopped by its request budget (catchUp.maxRequests): the next run continues. */
export class BudgetExhausted extends ReceiverError {
  constructor(source: string, max: number) {
    super('runtime', `sources.${source}.catchUp: stopped after ${max} requests (catchUp.maxRequests); the next run continues where this one stopped`);
  }
}

/** The API refused the credential (401, 403): the run ends, whatever else it had to do. */
export class CredentialRefused extends ReceiverError {}

export interface SenderApiOptions {
  /** The source's name, for messages. */
  source: string;
  /** The sender, as people call it ("Stripe"), for messages. */
  sender: string;
  /** The API base URL (catchUp.apiBase or the sender's public API); paths are appended to it. */
  base: string;
  /** Authentication and content negotiation headers. */
  headers: Record<string, string>;
  /** The config field holding the credential, named when the API refuses it. */
  credentialField: string;
  /** What the credential needs, for the refusal's hint. */
  permissions: string;
  /** The catchUp fields that name what is listed, for a 404 (`catchUp.hook and catchUp.apiBase`). */
  where: string;
  maxRequests: number;
  fetch?: typeof fetch;
  sleep?: (ms: number) => Promise<void>;
  signal?: AbortSignal | undefined;
  /** A 429 asking to wait longer than this fails the run instead (the next run tries again). */
  maxWaitMs?: number;
}

export interface ApiResponse {
  status: number;
  json: unknown;
  headers: Headers;
}

/** An answer about one request (a 4xx other than 401/403/429, a next page elsewhere): the run may go on with the next item. */
export class RequestRefused extends ReceiverError {}

/** Tries of one request after a 5xx or network failure, and the pause before each. */
const RETRY_PAUSES_MS = [500, 2000];

export class SenderApi {
  requests = 0;
  readonly #o: SenderApiOptions;
  readonly #origin: string;
  readonly #fetch: typeof fetch;
  readonly #sleep: (ms: number) => Promise<void>;

  constructor(options: SenderApiOptions) {
    this.#o = options;
    this.#origin = new URL(options.base).origin;
    this.#fetch = options.fetch ?? fetch;
    this.#sleep = options.sleep ?? ((ms) => delay(ms, undefined, options.signal === undefined ? {} : { signal: options.signal }));
  }

  /** base + path (the base's own path kept, as GitLab's /api/v4), with query parameters. */
  url(path: string, query: Record<string, string | number | undefined> = {}): URL {
    const base = this.#o.base.endsWith('/') ? this.#o.base : `${this.#o.base}/`;
    const url = new URL(path.replace(/^\//, ''), base);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  /** A next-page URL the API gave: followed only on the API's own origin. */
  sameOrigin(href: string): URL {
    const url = new URL(href, this.#o.base);
    if (url.origin !== this.#origin) throw this.#error(`the API gave a next page on another origin (${url.origin}); not followed`);
    return url;
  }

  get(url: URL): Promise<ApiResponse> {
    return this.request('GET', url);
  }

  post(url: URL, body?: unknown): Promise<ApiResponse> {
    return this.request('POST', url, body);
  }

  async request(method: 'GET' | 'POST', url: URL, body?: unknown): Promise<ApiResponse> {
    let failures = 0;
    for (;;) {
      if (this.requests >= this.#o.maxRequests) throw new BudgetExhausted(this.#o.source, this.#o.maxRequests);
      this.requests += 1;
      let res: Response;
      try {
        res = await this.#fetch(url, {
          method,
          headers: {
            accept: 'application/json',
            'user-agent': 'receiver-catch-up',
            ...this.#o.headers,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          redirect: 'error',
          ...(this.#o.signal === undefined ? {} : { signal: this.#o.signal }),
        });
      } catch (e) {
        if (this.#o.signal?.aborted === true) throw e;
        const pause = RETRY_PAUSES_MS[failures++];
        if (pause === undefined) throw this.#error(`cannot reach ${this.#origin} (${(e as Error).message})`);
        await this.#sleep(pause);
        continue;
      }
      const text = await res.text();
      // GitHub says "rate limited" with 403 too: x-ratelimit-remaining 0, or Retry-After (secondary limits).
      if (res.status === 429 || (res.status === 403 && (res.headers.get('x-ratelimit-remaining') === '0' || res.headers.has('retry-after')))) {
        const waitMs = retryAfterMs(res.headers);
        const max = this.#o.maxWaitMs ?? 60_000;
        if (waitMs > max) throw this.#error(`rate limited by the API for ${Math.ceil(waitMs / 1000)} s; the next run tries again`);
        await this.#sleep(waitMs);
        continue;
      }
      if (res.status >= 500) {
        const pause = RETRY_PAUSES_MS[failures++];
        if (pause === undefined) throw this.#error(`the API answered ${res.status} to ${method} ${url.pathname}${apiMessage(text)}`);
        await this.#sleep(pause);
        continue;
      }
      if (res.status === 401 || res.status === 403) {
        // Nothing from the answer is repeated: some APIs echo part of the key.
        throw new CredentialRefused(
          'runtime',
          `sources.${this.#o.source}.catchUp.${this.#o.credentialField}: ${this.#o.sender} refused the credential (HTTP ${res.status}): it is wrong, expired or revoked, or lacks a permission`,
          {
            hint: `give catchUp.${this.#o.credentialField} a valid credential with ${this.#o.permissions}`,
          },
        );
      }
      if (res.status === 404 && method === 'GET')
        throw this.#error(`the API answered 404 to GET ${url.pathname}: nothing there, or the credential cannot see it (check ${this.#o.where})`);
      if (res.status >= 400) throw this.#error(`the API answered ${res.status} to ${method} ${url.pathname}${apiMessage(text)}`);
      let json: unknown = null;
      if (text !== '') {
        try {
          json = JSON.parse(text);
        } catch {
          throw this.#error(`the API answered ${method} ${url.pathname} with something that is not JSON`);
        }
      }
      return { status: res.status, json, headers: res.headers };
    }
  }

  #error(message: string): ReceiverError {
    return new RequestRefused('runtime', `sources.${this.#o.source}.catchUp: ${this.#o.sender}: ${message}`);
  }
}

/** Retry-After in seconds or as an HTTP date; GitHub's x-ratelimit-reset; else one second. */
export function retryAfterMs(headers: Headers, now = Date.now()): number {
  const value = headers.get('retry-after');
  if (value !== null) {
    if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
    const at = Date.parse(value);
    if (!Number.isNaN(at)) return Math.max(0, at - now);
  }
  const reset = headers.get('x-ratelimit-reset');
  if (reset !== null && /^\d+$/.test(reset)) return Math.max(0, Number(reset) * 1000 - now);
  return 1000;
}

/** The API's own error text, cut short, for a message. */
function apiMessage(text: string): string {
  let message: unknown;
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown; detail?: unknown } | string; message?: unknown };
    message = typeof j.error === 'object' ? (j.error.message ?? j.error.detail) : (j.message ?? j.error);
  } catch {
    return '';
  }
  return typeof message === 'string' && message !== '' ? ` (${message.slice(0, 200)})` : '';
}

/** The URL of `rel="next"` in a Link header (GitHub, GitLab). */
export function nextLink(headers: Headers): string | undefined {
  const link = headers.get('link');
  if (link === null) return undefined;
  for (const part of link.split(',')) {
    const m = /<([^>]+)>\s*;\s*rel="?next"?/.exec(part);
    if (m !== null) return m[1];
  }
  return undefined;
}
