import { createHash, createHmac } from 'node:crypto';
import { Secret } from '../config/secret.js';
import { outbound, OutboundError, type OutboundResponse } from '../outbound.js';
import { OutputTail, type EffectEvent, type EffectResult } from './types.js';

/** effect.http.maxResponseBytes by default: an app's answer is read up to this, then left. */
export const DEFAULT_HTTP_MAX_RESPONSE_BYTES = 1_048_576;

/** What an attempt keeps of the app's answer: its last bytes. */
const OUTPUT_TAIL_BYTES = 4096;

const headerValue = (v: string | string[] | undefined): string | null => (v === undefined ? null : Array.isArray(v) ? (v[0] ?? null) : v);

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
  /** The whole request, connection to the answer's last byte. */
  timeoutMs: number;
  /** The answer is read up to this many bytes (default DEFAULT_HTTP_MAX_RESPONSE_BYTES). */
  maxResponseBytes?: number | undefined;
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
 * followed: a POST must not silently turn into a GET elsewhere. The whole exchange, the
 * answer's body included, is bounded by timeoutMs; an answer still arriving then is a
 * timeout (retried under the same Idempotency-Key).
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
  // Credentials in the URL are sent as Basic auth, as curl would, and never quoted.
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
  let res: OutboundResponse;
  try {
    res = await outbound({
      method: 'POST',
      url: new URL(target),
      headers,
      body: req.event.body,
      timeoutMs: req.timeoutMs,
      maxResponseBytes: req.maxResponseBytes ?? DEFAULT_HTTP_MAX_RESPONSE_BYTES,
      // The status is what counts: the answer is read up to the bound, and only its tail is kept.
      tooLarge: 'cut',
      keepTail: OUTPUT_TAIL_BYTES,
      signal: req.signal,
    });
  } catch (e) {
    if (!(e instanceof OutboundError)) throw e;
    if (e.failure === 'timeout') return { ok: false, retryable: true, error: e.message, timedOut: true };
    return { ok: false, retryable: true, error: e.message };
  }
  const tail = new OutputTail(OUTPUT_TAIL_BYTES);
  tail.push(res.body);
  if (res.cut)
    tail.push(
      Buffer.from(
        `\n[the answer is longer than ${req.maxResponseBytes ?? DEFAULT_HTTP_MAX_RESPONSE_BYTES} bytes (effect.http.maxResponseBytes): not read further]`,
      ),
    );
  const output = tail.toString();
  if (res.status >= 200 && res.status < 300) return { ok: true, output };
  const error = `POST ${where} answered ${res.status}`;
  if (isRetryableStatus(res.status))
    return { ok: false, retryable: true, error, output, retryAfterMs: parseRetryAfter(headerValue(res.headers['retry-after']), req.now) };
  return { ok: false, retryable: false, error: `${error} (permanent: not retried)`, output };
}
