import type { EventStatus, EventSummary } from './ops-types.js';

/**
 * The events row as both stores return it for listings, and its camelCase shape:
 * snake_case is converted here and nowhere else.
 */
export interface EventSummaryRow {
  id: number;
  source: string;
  delivery_id: string;
  event_type: string;
  status: EventStatus;
  attempts: number;
  received_at: number;
  next_attempt_at: number;
  finished_at: number | null;
  last_error: string | null;
  duplicates: number;
  force_effects: number;
}

export const SUMMARY_COLUMNS = `id, source, delivery_id, event_type, status, attempts, received_at, next_attempt_at, finished_at, last_error, duplicates, force_effects`;

export function toSummary(r: EventSummaryRow): EventSummary {
  return {
    id: r.id,
    source: r.source,
    deliveryId: r.delivery_id,
    eventType: r.event_type,
    status: r.status,
    attempts: r.attempts,
    receivedAt: r.received_at,
    nextAttemptAt: r.next_attempt_at,
    finishedAt: r.finished_at,
    lastError: r.last_error,
    duplicates: r.duplicates,
    forceEffects: r.force_effects !== 0,
  };
}
