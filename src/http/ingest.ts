import type { Context } from 'hono';
import { ReceiverError } from '../errors.js';
import type { Delivery, ResolvedSource } from '../providers/types.js';
import { sha256Hex } from '../providers/util.js';
import type { IngestResult, IngestStore } from '../store/types.js';
import { readRawRequest } from './body.js';
import { SENSITIVE_HEADERS } from '../providers/registry.js';
import type { RouteConfig } from '../config/schema.js';
import { whyNoRouteApplies } from '../effects/routes.js';
import type { DeliveryOutcomeName } from '../vocabulary.js';
import { readTestMark, TEST_SKIPPED } from '../providers/test-mark.js';

const SENSITIVE_HEADER_SET = new Set(SENSITIVE_HEADERS);

function redactHeaders(headers: Record<string, string>, source: ResolvedSource): Record<string, string> {
  const extra = source.options.header?.toLowerCase();
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) out[k] = SENSITIVE_HEADER_SET.has(k) || k === extra ? '[redacted]' : v;
  return out;
}

/** What happened to one delivery, for logs and metrics. */
export interface DeliveryOutcome {
  source: string;
  outcome: DeliveryOutcomeName;
  status: number;
  eventId?: number;
  deliveryId?: string;
  eventType?: string;
  durationMs: number;
  error?: string;
}

export interface IngestHandlerOptions {
  sources: ReadonlyMap<string, ResolvedSource>;
  store: IngestStore;
  maxBodyBytes: number;
  now?: () => number;
  /** Called once per delivery, whatever its outcome. */
  onOutcome?: (o: DeliveryOutcome) => void;
  /** Called after a new event is committed (wakes the drain). */
  onAccepted?: (r: IngestResult) => void;
  /**
   * Called as a delivery goes to the store; what it returns is called once the delivery's
   * outcome was reported, whatever it was (the drain's lines wait for it: DrainLinesAfterDeliveries).
   */
  onStoring?: () => () => void;
  /** The configured routes: an event none of them applies to is stored done. Absent: every event waits for the drain. */
  routes?: readonly RouteConfig[] | undefined;
}

const OUTCOME_BY_KIND: Partial<Record<ReceiverError['kind'], DeliveryOutcome['outcome']>> = {
  verification: 'unauthorized',
  too_large: 'too_large',
  timeout: 'timeout',
  payload: 'bad_request',
  not_found: 'not_found',
  unavailable: 'unavailable',
};

/**
 * POST /webhooks/:source, in the contract's order: source, body limit, signature over
 * the exact raw bytes, delivery id, durable insert, answer. The answer is sent only
 * after the store has committed the row.
 */
/**
 * Text a sender chose, put in a log line or an error answer for a refused delivery (a
 * claimed delivery id, the name of an unknown source): cut to its first 200 characters,
 * so one request cannot write a 15,000-character log line.
 */
function cutForLog(text: string): string {
  return text.slice(0, 200);
}

function claimedDeliveryId(delivery: Delivery, source: ResolvedSource): string | undefined {
  try {
    return cutForLog(source.provider.identify(delivery, source).deliveryId);
  } catch {
    return undefined;
  }
}

export function ingestHandler({ sources, store, maxBodyBytes, now = Date.now, onOutcome, onAccepted, onStoring, routes }: IngestHandlerOptions) {
  return async function ingest(c: Context): Promise<Response> {
    const started = performance.now();
    const name = c.req.param('source') ?? '';
    const source = sources.get(name);
    // A configured name is ours; an unknown one is whatever the request said.
    const logged = source === undefined ? cutForLog(name) : name;
    const report = (o: Omit<DeliveryOutcome, 'durationMs' | 'source'>) => onOutcome?.({ source: logged, durationMs: performance.now() - started, ...o });
    let delivery: Delivery | undefined;
    let deliveryId: string | undefined;
    let stored: (() => void) | undefined;
    try {
      if (source === undefined) throw new ReceiverError('not_found', `no source named "${logged}"`);
      const request = await readRawRequest(c, maxBodyBytes);
      delivery = { raw: request.raw, headers: request.headers, url: request.url, now: now() };
      source.provider.verify(delivery, source);
      const handshake = source.provider.handshake?.(delivery, source);
      if (handshake !== undefined) {
        report({ outcome: 'handshake', status: handshake.status });
        return c.body(handshake.body, handshake.status as 200, { 'content-type': handshake.contentType });
      }
      const identity = source.provider.identify(delivery, source);
      deliveryId = identity.deliveryId;
      // A send-test delivery: its mark is verified like the signature (a bad one is 401).
      const test = readTestMark(delivery, source);
      const headers = redactHeaders(delivery.headers, source);
      // Why no route applies, for an event stored done at once (undefined: the drain will see it).
      const unrouted =
        test === 'skip-effects'
          ? TEST_SKIPPED
          : routes === undefined
            ? undefined
            : whyNoRouteApplies(routes, { source: name, eventType: identity.eventType, headers, body: delivery.raw });
      stored = onStoring?.();
      const result = await store.ingest({
        source: name,
        deliveryId: identity.deliveryId,
        eventType: identity.eventType,
        headers,
        unrouted,
        body: delivery.raw,
        bodySha256: identity.contentHash ?? sha256Hex(delivery.raw),
        extraIds: identity.extra,
        receivedAt: delivery.now,
        successStatus: source.successStatus,
        onConflict: source.options.onConflict,
        // A send-test delivery takes no body key: a real delivery of its body is never its replay.
        bodyKeyExpiresAt: source.dedupeByBody && test === undefined ? delivery.now + source.retryHorizonHours * 3_600_000 : undefined,
        origin: test === undefined ? undefined : 'test',
      });
      report({ outcome: result.outcome, status: result.status, eventId: result.eventId, deliveryId, eventType: identity.eventType });
      if (result.outcome === 'accepted' && unrouted === undefined) onAccepted?.(result);
      return c.body(result.body, result.status as 202, { 'content-type': 'application/json' });
    } catch (e) {
      const kind = e instanceof ReceiverError ? e.kind : 'runtime';
      // For the log only: the claimed id of a refused delivery, to match it to the sender's
      // dashboard. It is never stored and decides nothing.
      if (kind === 'verification' && delivery !== undefined && source !== undefined) deliveryId = claimedDeliveryId(delivery, source);
      const status = e instanceof ReceiverError ? e.httpStatus : 500;
      report({ outcome: OUTCOME_BY_KIND[kind] ?? 'error', status, error: (e as Error).message, ...(deliveryId === undefined ? {} : { deliveryId }) });
      throw e;
    } finally {
      stored?.();
    }
  };
}
