import { setTimeout as delay } from 'node:timers/promises';
import { ReceiverError } from '../errors.js';
import { outbound, OutboundError, type OutboundResponse } from '../outbound.js';

/**
 * One run's HTTP client for a sender's API: polite (429 and Retry-After honoured, a
 * bounded number of requests), bounded (each request in time and size, the run in time:
 * see src/outbound.ts), and careful with the credential (sent in a header, never in a
 * message, nor anything in an answer that looks like it; next-page URLs are followed only
 * on the API's own origin, so a page can never send the credential elsewhere).
 */

/**
 * A run stopped at one of its bounds (catchUp.maxRequests, maxEvents, maxRunSeconds): the
 * next run continues from the page where it stopped.
 */
export class RunCut extends ReceiverError {
  constructor(source: string, what: string) {
    super('runtime', `sources.${source}.catchUp: stopped after ${what}; the next run continues where this one stopped`);
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
  /** One request, connection to the answer's last byte (ms). */
  timeoutMs: number;
  /** An answer longer than this is refused. */
  maxResponseBytes: number;
  /** When the run must end (performance.now() ms): no request or wait goes past it. */
  deadline: number;
  /** What the run's time bound is called, for the message (catchUp.maxRunSeconds). */
  deadlineField: string;
  /** Text never quoted from an answer (the credential). */
  credential: string;
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

/** Tries of one request after a 5xx or network failure: the pause before each. */
const RETRY_PAUSES_MS = [500, 2000];

export class SenderApi {
  requests = 0;
  readonly #o: SenderApiOptions;
  readonly #origin: string;
  readonly #sleep: (ms: number) => Promise<void>;

  constructor(options: SenderApiOptions) {
    this.#o = options;
    this.#origin = new URL(options.base).origin;
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

  /** Whether `href` is on the API's origin (a cursor kept from an earlier run, maybe under another apiBase). */
  onOrigin(href: string): boolean {
    try {
      return new URL(href, this.#o.base).origin === this.#origin;
    } catch {
      return false;
    }
  }

  /** The time the run has left (ms); past its deadline the run is cut. */
  #timeLeft(): number {
    const left = this.#o.deadline - performance.now();
    if (left <= 0) throw new RunCut(this.#o.source, this.#o.deadlineField);
    return left;
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
      if (this.requests >= this.#o.maxRequests) throw new RunCut(this.#o.source, `${this.#o.maxRequests} requests (catchUp.maxRequests)`);
      const left = this.#timeLeft();
      this.requests += 1;
      let res: OutboundResponse;
      try {
        res = await outbound({
          method,
          url,
          headers: {
            accept: 'application/json',
            'user-agent': 'receiver-catch-up',
            ...this.#o.headers,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          body: body === undefined ? undefined : Buffer.from(JSON.stringify(body)),
          // The run's deadline bounds the request too: a run never outlives maxRunSeconds by more than a moment.
          timeoutMs: Math.min(this.#o.timeoutMs, left),
          maxResponseBytes: this.#o.maxResponseBytes,
          signal: this.#o.signal,
        });
      } catch (e) {
        if (!(e instanceof OutboundError)) throw e;
        if (e.failure === 'aborted') throw e;
        if (e.failure === 'timeout' && this.#o.deadline - performance.now() <= 0) throw new RunCut(this.#o.source, this.#o.deadlineField);
        if (e.failure === 'too-large') throw this.#error(`${e.message} (catchUp.maxResponseBytes)`);
        const pause = RETRY_PAUSES_MS[failures++];
        if (pause === undefined) throw this.#error(e.failure === 'timeout' ? `${e.message} (catchUp.timeoutSeconds)` : e.message);
        await this.#sleep(Math.min(pause, this.#timeLeft()));
        continue;
      }
      const text = res.body.toString('utf8');
      const headers = new Headers();
      for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(', ') : v);
      // GitHub says "rate limited" with 403 too: x-ratelimit-remaining 0, or Retry-After (secondary limits).
      if (res.status === 429 || (res.status === 403 && (headers.get('x-ratelimit-remaining') === '0' || headers.has('retry-after')))) {
        const waitMs = retryAfterMs(headers);
        const max = Math.min(this.#o.maxWaitMs ?? 60_000, this.#timeLeft());
        if (waitMs > max) throw this.#error(`rate limited by the API for ${Math.ceil(waitMs / 1000)} s; the next run tries again`);
        await this.#sleep(waitMs);
        continue;
      }
      if (res.status >= 500) {
        const pause = RETRY_PAUSES_MS[failures++];
        if (pause === undefined) throw this.#error(`the API answered ${res.status} to ${method} ${url.pathname}${this.#apiMessage(text)}`);
        await this.#sleep(Math.min(pause, this.#timeLeft()));
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
      if (res.status >= 400) throw this.#error(`the API answered ${res.status} to ${method} ${url.pathname}${this.#apiMessage(text)}`);
      let json: unknown = null;
      if (text !== '') {
        try {
          json = JSON.parse(text);
        } catch {
          throw this.#error(`the API answered ${method} ${url.pathname} with something that is not JSON`);
        }
      }
      return { status: res.status, json, headers };
    }
  }

  /** The API's own error text, cut short and with anything like the credential taken out. */
  #apiMessage(text: string): string {
    const message = apiMessage(text);
    return message === '' ? '' : ` (${redactCredential(message, this.#o.credential)})`;
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

/** The API's own error text, cut short; '' when it has none. */
function apiMessage(text: string): string {
  let message: unknown;
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown; detail?: unknown } | string; message?: unknown };
    message = typeof j.error === 'object' ? (j.error.message ?? j.error.detail) : (j.message ?? j.error);
  } catch {
    return '';
  }
  return typeof message === 'string' ? message.slice(0, 200) : '';
}

/** At least this many characters in a row of the credential are taken out of a message. */
const CREDENTIAL_RUN = 6;

/**
 * A message from the sender's API with the credential taken out: the whole of it, any
 * part of it of CREDENTIAL_RUN characters or more (an API may echo a prefix or a suffix),
 * and every word that looks like an API key or token (a known key prefix, or a long run
 * of letters, digits and `_-`), whichever credential it belongs to.
 */
export function redactCredential(message: string, credential: string): string {
  let out = message;
  if (credential.length > 0) {
    out = out.split(credential).join('[redacted]');
    // Every run of the credential, longest first, down to CREDENTIAL_RUN characters.
    for (let len = Math.min(credential.length - 1, 64); len >= CREDENTIAL_RUN; len--)
      for (let i = 0; i + len <= credential.length; i++) {
        const part = credential.slice(i, i + len);
        if (out.includes(part)) out = out.split(part).join('[redacted]');
      }
  }
  return out
    .replace(/\b(?:sk|rk|pk|whsec|pdl|apikey|ghp|gho|ghu|ghs|ghr|github_pat|glpat|gldt|xox[abpr])[_-][A-Za-z0-9_*.-]+/gi, '[redacted]')
    .replace(/[A-Za-z0-9_-]{24,}/g, (w) => (/[0-9]/.test(w) && /[A-Za-z]/.test(w) ? '[redacted]' : w));
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
