import type { Logger } from '../log.js';
import type { DeliveryOutcome } from './ingest.js';

/** Log level per delivery outcome: what an operator should look at stands out. */
const OUTCOME_LEVEL: Record<DeliveryOutcome['outcome'], 'info' | 'warn' | 'error'> = {
  accepted: 'info',
  duplicate: 'info',
  handshake: 'info',
  not_found: 'info',
  too_large: 'info',
  bad_request: 'info',
  // A wrong secret after a rotation shows up here first.
  unauthorized: 'warn',
  conflict: 'warn',
  unavailable: 'error',
  error: 'error',
};

/** One log line per delivery: event id, source, delivery id, status, outcome, duration. Never headers or body. */
export function logDelivery(logger: Logger, o: DeliveryOutcome): void {
  const line = {
    source: o.source,
    outcome: o.outcome,
    status: o.status,
    ...(o.eventId === undefined ? {} : { eventId: o.eventId }),
    ...(o.deliveryId === undefined ? {} : { deliveryId: o.deliveryId }),
    ...(o.eventType === undefined ? {} : { eventType: o.eventType }),
    durationMs: Math.round(o.durationMs * 100) / 100,
    ...(o.error === undefined ? {} : { error: o.error }),
  };
  logger[OUTCOME_LEVEL[o.outcome]](line, 'delivery');
}
