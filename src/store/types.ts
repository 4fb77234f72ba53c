import type { DrainStore } from './drain-types.js';
import type { OpsStore } from './ops-types.js';
import type { CatchUpStore } from './catch-up-types.js';
import type { AlertStore } from './alert-types.js';

/**
 * Glossary (store)
 * - event: one stored delivery, unique by (source, delivery id). Its id is the
 *   receiver's own number, given in the 202 answer and used by `replay`.
 * - duplicate: a later delivery with the same (source, delivery id) and the same body
 *   hash. It gets the first delivery's stored answer, byte for byte; nothing new is stored.
 * - body key: for a source that dedupes by body (its sender's delivery id is outside the
 *   signature), the body's hash of a stored event, unique per source in `body_keys` until
 *   the retry horizon ends. A later delivery with the same body under a new delivery id is
 *   `replayed`: it gets the first one's stored answer and nothing new is stored.
 * - conflict: the same (source, delivery id) with a different body. Recorded in
 *   `conflicts`, answered 409 (or the stored answer with `"onConflict": "accept"`).
 * - status: pending (waiting for the drain, maybe until next_attempt_at), processing
 *   (claimed under a lease), done, dead (past maxAttempts; replay brings it back).
 * - lease: a claim on one event by one drain (`lease_owner`) until `lease_expires_at`.
 *   Completion and failure apply only while the caller still holds it.
 * - effect: what one route does for one event; effect key = `<route>:<business key>`.
 * - effect ledger: the `effects` table, one row per effect key. A key that is done is
 *   never run again by the drain, whichever event brings it (unless forced by replay).
 * - attempt: one try of one effect for one event (`attempts`), with outcome and output.
 * Times are milliseconds since the epoch, always passed in, so tests move time in SQL.
 */

/** A verified delivery, ready to be stored. */
export interface NewEvent {
  source: string;
  deliveryId: string;
  eventType: string;
  /** Lower-cased names; signature and token headers already redacted. */
  headers: Record<string, string>;
  body: Buffer;
  bodySha256: string;
  extraIds?: Record<string, string> | undefined;
  receivedAt: number;
  /** The status a first delivery is answered with (202, or 200 for some senders). */
  successStatus: number;
  onConflict: 'reject' | 'accept';
  /**
   * Set when no route applies to this event (its source, type or filters): why, one line
   * per route (events.route_decisions). It is stored `done` at once and the drain never
   * sees it. Absent: pending for the drain.
   */
  unrouted?: string | undefined;
  /**
   * Dedupe by body as well until this time (receivedAt plus the retry horizon): the body key
   * (source, bodySha256) is taken, or the delivery is `replayed`. Absent: by delivery id only.
   */
  bodyKeyExpiresAt?: number | undefined;
  /** `test`: a delivery send-test marked as a test (src/http/test-mark.ts). Absent: `webhook`. */
  origin?: 'webhook' | 'test' | undefined;
}

/** The answer for one delivery, decided by the database's unique constraint. */
export interface IngestResult {
  /** `replayed`: a new delivery id with a body whose key another event holds (see body key). */
  outcome: 'accepted' | 'duplicate' | 'conflict' | 'replayed';
  eventId: number;
  status: number;
  /** JSON text sent to the sender; for duplicates, the first delivery's answer verbatim. */
  body: string;
}

export interface IngestStore {
  /**
   * Stores a delivery, or recognises it as a duplicate or conflict. Resolves only after
   * the transaction holding the row has committed durably. Rejects with an `unavailable`
   * ReceiverError (503) when the database is busy past its timeout, full or closed.
   */
  ingest(event: NewEvent): Promise<IngestResult>;
}

export interface Store extends IngestStore, DrainStore, OpsStore, CatchUpStore {
  readonly backend: 'sqlite' | 'postgres';
  /** Alerts' reads and writes (alert-steps.ts). */
  readonly alerts: AlertStore;
  /**
   * Resolves when an insert could commit now (GET /healthz), waiting no longer than an
   * insert would (busyTimeoutMs); rejects with an `unavailable` ReceiverError otherwise.
   */
  ping(): Promise<void>;
  /**
   * SQLite in serve: raised while the ingest thread waits for the write lock, so that the
   * drain thread gives way to deliveries (pass it as OpenStoreOptions.ingestWaiting).
   */
  readonly ingestWaiting?: SharedArrayBuffer | undefined;
  /** Finishes in-flight inserts, then closes. */
  close(): Promise<void>;
}

/** How a store is opened (see open.ts): the busy timeout, and what the process opening it is. */
export interface OpenStoreOptions {
  busyTimeoutMs: number;
  /**
   * serve: keep SQLite's own blocking wait short and retry asynchronously, and refuse a
   * SQLite file this process cannot write (it would answer every delivery 503).
   */
  server?: boolean;
  /**
   * serve's drain thread: the main thread has checked the file and runs the ingest thread;
   * this store only drains (no ingest thread of its own), with the same durability.
   */
  drainOnly?: boolean;
  /**
   * serve on SQLite: the flag the ingest thread raises while it waits for the write lock
   * (`Store.ingestWaiting` of the store that runs the ingest thread); the drain thread's
   * store gives way to it (see sqlite/lock-priority.ts).
   */
  ingestWaiting?: SharedArrayBuffer | undefined;
}

export const acceptedAnswer = (eventId: number) => JSON.stringify({ status: 'accepted', id: eventId });
export const conflictAnswer = (eventId: number, deliveryId: string) =>
  JSON.stringify({ error: 'conflict', message: `delivery id ${deliveryId} was already received with a different body`, id: eventId });
