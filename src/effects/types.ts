import type { UnplannedEvent } from '../store/drain-types.js';

/**
 * Glossary (effects)
 * - effect: what one route does for one event: `exec`, `http` or `module`.
 * - business key: the route's `key` template resolved for the event (a charge id, a commit).
 * - effect key: `<route name>:<business key>`, the effect ledger's primary key.
 * - external effect (exec, http): acts outside the database; recorded as running before it
 *   acts, so a crash mid-effect is visible and repeats at most once.
 * - transactional effect (module): its writes commit in the transaction that marks it done.
 * - retryable failure: the event is tried again after backoff (or the sender's Retry-After);
 *   permanent failure: the event is dead at once, its last error kept.
 */

/** How one run of an external effect ended. */
export type EffectResult =
  | { ok: true; output?: string | undefined }
  | {
      ok: false;
      retryable: boolean;
      error: string;
      output?: string | undefined;
      /** The target asked to be retried no sooner than this many ms from now (Retry-After). */
      retryAfterMs?: number | undefined;
      /** It ran past effect.timeoutSeconds and was stopped: the attempt's outcome is `timeout`. */
      timedOut?: true;
    };

/** The part of a claimed event an effect sees. */
export type EffectEvent = Pick<UnplannedEvent, 'id' | 'source' | 'deliveryId' | 'eventType' | 'headers' | 'body' | 'receivedAt'>;

/** Keep the last `max` bytes of a stream's output. */
export class OutputTail {
  #chunks: Buffer[] = [];
  #size = 0;
  readonly #max: number;

  constructor(max = 4096) {
    this.#max = max;
  }

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    while (this.#chunks.length > 1 && this.#size - this.#chunks[0]!.length >= this.#max) {
      this.#size -= this.#chunks.shift()!.length;
    }
  }

  toString(): string | undefined {
    if (this.#size === 0) return undefined;
    const all = Buffer.concat(this.#chunks);
    return all.subarray(Math.max(0, all.length - this.#max)).toString('utf8');
  }
}
