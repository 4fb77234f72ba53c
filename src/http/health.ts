import type { Context } from 'hono';
import type { DeliveryOutcome } from './ingest.js';

/** Seconds a sender (or a health checker) should wait after a 503. */
export const RETRY_AFTER_SECONDS = 5;

export interface IngestHealthOptions {
  now?: () => number;
  /** How long one delivery refused as unavailable keeps /healthz at 503, unless an insert commits meanwhile. */
  recentMs?: number;
}

/**
 * Ingest's own recent outcome: failing from a delivery answered 503 because the store was
 * unavailable (busy past busyTimeoutMs, unreachable, disk full) until an insert commits
 * again, or for `recentMs` after the last such 503 when no delivery comes. A ping alone
 * cannot see every reason an insert fails (PostgreSQL out of disk still answers SELECT 1).
 */
export function ingestHealth({ now = Date.now, recentMs = RETRY_AFTER_SECONDS * 1000 }: IngestHealthOptions = {}) {
  let unavailableAt: number | undefined;
  return {
    observe(outcome: DeliveryOutcome['outcome']): void {
      if (outcome === 'unavailable') unavailableAt = now();
      // The store committed (or read a committed row): inserts go through again.
      else if (outcome === 'accepted' || outcome === 'duplicate' || outcome === 'conflict' || outcome === 'replayed') unavailableAt = undefined;
    },
    failing(): boolean {
      return unavailableAt !== undefined && now() - unavailableAt < recentMs;
    },
  };
}

export type IngestHealth = ReturnType<typeof ingestHealth>;

export interface HealthHandlerOptions {
  /** Store.ping: resolves when an insert could commit now. */
  ping: () => Promise<void>;
  ingest: IngestHealth;
}

/**
 * GET /healthz: 200 {"status":"ok"} while an insert can commit now, else 503 with
 * Retry-After and the reason. Cheap: one ping, skipped while ingest is failing anyway.
 */
export function healthHandler({ ping, ingest }: HealthHandlerOptions) {
  return async function healthz(c: Context): Promise<Response> {
    const unavailable = (reason: string) => c.json({ status: 'unavailable', reason }, 503, { 'retry-after': String(RETRY_AFTER_SECONDS) });
    if (ingest.failing()) return unavailable('recent deliveries failed: database unavailable');
    try {
      await ping();
    } catch {
      return unavailable('database unavailable');
    }
    return c.json({ status: 'ok' });
  };
}
