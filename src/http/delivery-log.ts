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
  // A client too slow to send its request within requestTimeoutSeconds.
  timeout: 'warn',
  // A wrong secret after a rotation shows up here first.
  unauthorized: 'warn',
  conflict: 'warn',
  // A stored body under a fresh delivery id: a captured delivery sent again, or a sender
  // that sends one body as two events (then its source wants "dedupeByBody": false).
  replayed: 'warn',
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

/**
 * Keeps a delivery's line ahead of its effect's lines. The drain thread may claim an event
 * the moment its row commits, run its effect and send its lines here before the request
 * that stored it has logged its own line (the answer from the database and the drain's
 * message race to this thread). Every delivery being stored when the drain's lines arrive
 * holds them back until it has logged its line; deliveries that start storing later cannot
 * be about those events (their rows did not exist yet), so they hold nothing back.
 */
export class DrainLinesAfterDeliveries {
  readonly #write: (line: string) => void;
  #last = 0;
  /** Deliveries being stored, by number, in the order they started. */
  readonly #storing = new Set<number>();
  /** The drain's lines held back, each with the last delivery that had started storing when they came. */
  #held: { after: number; lines: string[] }[] = [];

  constructor(write: (line: string) => void) {
    this.#write = write;
  }

  /** A delivery goes to the store; call the function returned once its line is logged (whatever the outcome). */
  storing(): () => void {
    const n = ++this.#last;
    this.#storing.add(n);
    return () => {
      this.#storing.delete(n);
      this.#release();
    };
  }

  /** A batch of the drain thread's lines: written now, or held until the deliveries being stored have logged theirs. */
  add(lines: string[]): void {
    if (this.#storing.size === 0 && this.#held.length === 0) for (const line of lines) this.#write(line);
    else {
      this.#held.push({ after: this.#last, lines });
      this.#release();
    }
  }

  #release(): void {
    if (this.#held.length === 0) return;
    // The oldest delivery still being stored (a Set iterates in insertion order).
    const oldest = this.#storing.values().next().value ?? Infinity;
    while (this.#held.length > 0 && (this.#held[0] as { after: number }).after < oldest) {
      for (const line of (this.#held.shift() as { lines: string[] }).lines) this.#write(line);
    }
  }
}
