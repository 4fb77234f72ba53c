import { createHash } from 'node:crypto';
import type { AlertDestination } from '../config/alerts.js';
import { minimalEnvironment, runCommand } from '../effects/exec.js';
import { isRetryableStatus, parseRetryAfter, signatureHeaders } from '../effects/http.js';
import { outbound, OutboundError } from '../outbound.js';
import { alertEnvironment, alertText, httpBody, type AlertMessage } from './message.js';

/** A destination's answer is read up to this much, then left: only its status counts. */
const MAX_ANSWER_BYTES = 65_536;

export interface DeliverResult {
  ok: boolean;
  /** Why not, naming the destination but never its URL (a chat's webhook URL is a credential). */
  error?: string;
  /** The destination's Retry-After, in ms. */
  retryAfterMs?: number | undefined;
}

/**
 * Tells one destination one message, bounded: an http POST through the outbound client
 * (timeouts, a bounded answer, no redirects), or a command with the text on stdin and
 * RECEIVER_ALERT_* in the exec effects' minimal environment. `id` names the send: the
 * Idempotency-Key (and, when signed, the webhook-id) a repeat after a crash carries again.
 */
export async function deliver(
  destination: AlertDestination,
  m: AlertMessage,
  id: string,
  now: number,
  options: { env?: NodeJS.ProcessEnv; signal?: AbortSignal | undefined } = {},
): Promise<DeliverResult> {
  const runId = createHash('sha256').update(id).digest('hex');
  const name = `alert destination "${destination.name}"`;
  if (destination.exec !== undefined) {
    const r = await runCommand({
      argv: destination.exec,
      env: { ...minimalEnvironment(options.env ?? process.env), ...alertEnvironment(m), RECEIVER_ALERT_ID: runId },
      stdin: Buffer.from(`${alertText(m)}\n`),
      timeoutMs: destination.timeoutMs,
      signal: options.signal,
    });
    return r.ok ? { ok: true } : { ok: false, error: `${name}: ${r.error}` };
  }
  const http = destination.http!;
  if (http.url === undefined) return { ok: false, error: `${name}: its URL was not loaded` };
  const { contentType, body } = httpBody(http.format, m);
  const headers: Record<string, string> = {
    ...Object.fromEntries(Object.entries(http.headers).map(([k, v]) => [k.toLowerCase(), v.reveal()])),
    'content-type': contentType,
    'idempotency-key': runId,
    ...(http.sign === undefined ? {} : signatureHeaders(http.sign, runId, now, body)),
  };
  try {
    const res = await outbound({
      method: 'POST',
      url: new URL(http.url.reveal()),
      headers,
      body,
      timeoutMs: destination.timeoutMs,
      maxResponseBytes: MAX_ANSWER_BYTES,
      tooLarge: 'cut',
      keepTail: 0,
      signal: options.signal,
    });
    if (res.status >= 200 && res.status < 300) return { ok: true };
    const retryAfter = res.headers['retry-after'];
    return {
      ok: false,
      error: `${name} answered ${res.status}${isRetryableStatus(res.status) ? '' : ' (check its URL and format)'}`,
      retryAfterMs: parseRetryAfter(typeof retryAfter === 'string' ? retryAfter : null, now),
    };
  } catch (e) {
    if (!(e instanceof OutboundError)) throw e;
    return { ok: false, error: `${name}: ${e.failure === 'timeout' || e.failure === 'connect-timeout' ? 'timed out' : 'could not be reached'} (${e.failure})` };
  }
}
