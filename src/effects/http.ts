import { createHash, createHmac } from 'node:crypto';
import { Secret } from '../config/secret.js';
import { OutputTail, type EffectEvent, type EffectResult } from './types.js';

export interface HttpRequest {
  url: string;
  /** Configured extra headers (may carry the app's credentials: never logged or stored). */
  headers?: Readonly<Record<string, string>> | undefined;
  /** The Standard Webhooks secret (`whsec_...`) the request is signed with; unsigned when absent. */
  signWith?: Secret | undefined;
  event: EffectEvent;
  effectKey: string;
  /** What this run is sent as (the effect key, or `<effect key>#forced-<n>`); default the effect key. */
  runKey?: string | undefined;
  attempt: number;
  timeoutMs: number;
  now: number;
  signal?: AbortSignal | undefined;
}

/**
 * The Idempotency-Key (and, when signed, the webhook-id) sent with a run: a hash of its run
 * key, so it is a valid header value whatever the business key holds. An ordinary run's
 * run key is its effect key, the same on every retry and after a crash, which lets the app
 * drop the repeat; a forced run has a run key of its own (see planRun in src/store/drain/ledger.ts), so
 * the app does it again.
 */
export function idempotencyKey(runKey: string): string {
  return createHash('sha256').update(runKey).digest('hex');
}

/** An http effect's secrets, resolved when the configuration is loaded. */
export interface HttpSecrets {
  /** The configured headers by name, values resolved (literals too: they may carry the app's credentials). */
  headers: Readonly<Record<string, Secret>>;
  /** The `sign` secret; undefined when forwards are not signed. */
  sign: Secret | undefined;
}

/** HttpSecrets as plain data, to cross to the drain thread (a Secret does not survive the copy). */
export type PlainHttpSecrets = [route: string, headers: Record<string, string>, sign: string | undefined][];

export function revealHttpSecrets(secrets: ReadonlyMap<string, HttpSecrets>): PlainHttpSecrets {
  return [...secrets].map(([route, s]) => [route, Object.fromEntries(Object.entries(s.headers).map(([k, v]) => [k, v.reveal()])), s.sign?.reveal()]);
}

export function wrapHttpSecrets(plain: PlainHttpSecrets): Map<string, HttpSecrets> {
  return new Map(
    plain.map(([route, headers, sign]) => [
      route,
      { headers: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, new Secret(v)])), sign: sign === undefined ? undefined : new Secret(sign) },
    ]),
  );
}

/** Headers a signed forward carries (Standard Webhooks); a configured header of the same name is refused when `sign` is set. */
export const SIGNATURE_HEADERS: readonly string[] = ['webhook-id', 'webhook-timestamp', 'webhook-signature'];

/** Standard Webhooks recommends keys of 24 to 64 bytes. */
const SIGNING_KEY_BYTES = { min: 24, max: 64 };

/** The key bytes of a `whsec_<base64>` secret, or why it is not one. */
function signingKey(secret: string): Buffer | string {
  if (!secret.startsWith('whsec_')) return 'must start with "whsec_" followed by base64 of the key bytes';
  const text = secret.slice(6);
  // Canonical standard base64 only: what every Standard Webhooks library decodes the same way.
  const key = /^[A-Za-z0-9+/]*={0,2}$/.test(text) && text.length % 4 === 0 ? Buffer.from(text, 'base64') : undefined;
  if (key === undefined || key.toString('base64') !== text) return 'the part after "whsec_" is not standard base64 (A-Z, a-z, 0-9, +, /, padded with =)';
  if (key.length < SIGNING_KEY_BYTES.min || key.length > SIGNING_KEY_BYTES.max)
    return `decodes to ${key.length} bytes; a key must be ${SIGNING_KEY_BYTES.min} to ${SIGNING_KEY_BYTES.max} bytes`;
  return key;
}

/** Why a resolved `sign` secret cannot sign (never quoting it); undefined when it can. */
export function signingKeyProblem(secret: Secret): string | undefined {
  const key = signingKey(secret.reveal());
  return typeof key === 'string' ? key : undefined;
}

/**
 * Standard Webhooks headers for one request: `webhook-id`, `webhook-timestamp` (seconds)
 * and `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">` over the exact
 * bytes sent.
 */
export function signatureHeaders(secret: Secret, id: string, now: number, body: Buffer): Record<string, string> {
  const key = signingKey(secret.reveal());
  if (typeof key === 'string') throw new Error(`the signing secret ${key}`);
  const timestamp = String(Math.floor(now / 1000));
  const signature = createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': `v1,${signature}` };
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
  const runId = idempotencyKey(req.runKey ?? req.effectKey);
  const headers: Record<string, string> = {
    ...Object.fromEntries(Object.entries(req.headers ?? {}).map(([k, v]) => [k.toLowerCase(), v])),
    'content-type': req.event.headers['content-type'] ?? 'application/octet-stream',
    'idempotency-key': runId,
    'x-receiver-event-id': String(req.event.id),
    'x-receiver-event-type': encodeURIComponent(req.event.eventType),
    'x-receiver-source': req.event.source,
    'x-receiver-attempt': String(req.attempt),
    // Signed at send time: the timestamp is when the app receives it, not when the event arrived.
    ...(req.signWith === undefined ? {} : signatureHeaders(req.signWith, runId, req.now, req.event.body)),
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
