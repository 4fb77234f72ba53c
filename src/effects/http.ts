import { createHash } from 'node:crypto';
import { OutputTail, type EffectEvent, type EffectResult } from './types.js';

export interface HttpRequest {
  url: string;
  /** Configured extra headers (may carry the app's credentials: never logged or stored). */
  headers?: Readonly<Record<string, string>> | undefined;
  event: EffectEvent;
  effectKey: string;
  attempt: number;
  timeoutMs: number;
  now: number;
  signal?: AbortSignal | undefined;
}

/**
 * The Idempotency-Key sent with every run of one effect key: a hash of it, so it is a
 * valid header value whatever the business key holds, and the same on every retry and
 * after a crash, which lets the app drop the repeat.
 */
export function idempotencyKey(effectKey: string): string {
  return createHash('sha256').update(effectKey).digest('hex');
}

/** Retry-After as ms from `now`: delta-seconds or an HTTP date. Undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now: number): number | undefined {
  if (value === null) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** The URL as messages show it: no credentials, no query (either may hold a token). */
export function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}`;
  } catch {
    return '(invalid url)';
  }
}

/** Headers runHttp sets on every request: a configured header of the same name would be overwritten. */
export const HEADERS_SET_BY_RECEIVER: readonly string[] = [
  'content-type',
  'idempotency-key',
  'x-receiver-event-id',
  'x-receiver-event-type',
  'x-receiver-source',
  'x-receiver-attempt',
];

/** 408, 429 and 5xx are worth retrying; other non-2xx answers will not change. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/**
 * POSTs the raw body to the app. 2xx is success; 408, 429, 5xx and network errors are
 * retryable (with Retry-After); every other status is permanent. Redirects are not
 * followed: a POST must not silently turn into a GET elsewhere.
 */
export async function runHttp(req: HttpRequest): Promise<EffectResult> {
  const headers: Record<string, string> = {
    ...Object.fromEntries(Object.entries(req.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])),
    'content-type': req.event.headers['content-type'] ?? 'application/octet-stream',
    'idempotency-key': idempotencyKey(req.effectKey),
    'x-receiver-event-id': String(req.event.id),
    'x-receiver-event-type': encodeURIComponent(req.event.eventType),
    'x-receiver-source': req.event.source,
    'x-receiver-attempt': String(req.attempt),
  };
  const where = describeUrl(req.url);
  // fetch refuses credentials in a URL: send them as Basic auth, as curl would.
  let target = req.url;
  try {
    const u = new URL(req.url);
    if (u.username !== '' || u.password !== '') {
      headers.authorization ??= `Basic ${Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64')}`;
      u.username = '';
      u.password = '';
      target = u.href;
    }
  } catch {
    return { ok: false, retryable: false, error: `${where} is not a valid URL` };
  }
  const signals = [AbortSignal.timeout(req.timeoutMs), ...(req.signal === undefined ? [] : [req.signal])];
  let res: Response;
  try {
    res = await fetch(target, { method: 'POST', headers, body: new Uint8Array(req.event.body), redirect: 'manual', signal: AbortSignal.any(signals) });
  } catch (e) {
    const err = e as Error & { cause?: { code?: string; message?: string } };
    if (err.name === 'TimeoutError') return { ok: false, retryable: true, error: `POST ${where} timed out after ${req.timeoutMs / 1000}s`, timedOut: true };
    if (err.name === 'AbortError') return { ok: false, retryable: true, error: `POST ${where} aborted: the receiver is shutting down` };
    // Never a message that quotes the URL (query and all).
    const why = err.cause?.code ?? err.cause?.message ?? err.message;
    return { ok: false, retryable: true, error: `POST ${where} failed: ${why.includes('://') ? err.name : why}` };
  }
  const tail = new OutputTail();
  try {
    const text = Buffer.from(await res.arrayBuffer());
    tail.push(text);
  } catch {
    // The status is what counts; a body cut short only loses the output tail.
  }
  const output = tail.toString();
  if (res.status >= 200 && res.status < 300) return { ok: true, output };
  const error = `POST ${where} answered ${res.status}`;
  if (isRetryableStatus(res.status))
    return { ok: false, retryable: true, error, output, retryAfterMs: parseRetryAfter(res.headers.get('retry-after'), req.now) };
  return { ok: false, retryable: false, error: `${error} (permanent: not retried)`, output };
}
