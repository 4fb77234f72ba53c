/**
 * What catch-up (src/catchup/) needs from the store.
 *
 * Glossary (catch-up)
 * - origin: how an event came in. `webhook`: a delivery to POST /webhooks/:source,
 *   verified by its provider. `catch-up`: fetched from the sender's own API with the
 *   source's API credential (Stripe's events list), stored without a signature.
 * - catch-up state: one row per source. `configuredAt` is when catch-up first ran for it
 *   (a run never reaches before it unless asked with --since); `resumeAt` is where the
 *   next run starts, in the sender's clock (ms).
 */

/** An event fetched from the sender's API, ready to be stored with origin `catch-up`. */
export interface FetchedEvent {
  source: string;
  /** The id the sender's webhook carries for this event, so dedupe holds either way. */
  deliveryId: string;
  eventType: string;
  /** The API's JSON; stored with the one header `content-type: application/json`. */
  body: Buffer;
  bodySha256: string;
  receivedAt: number;
  /** The answer a later signed delivery of this event gets (202, or 200 for some senders). */
  successStatus: number;
  /** Set when no route applies: why; stored done with it, as ingest does (NewEvent.unrouted). */
  unrouted?: string | undefined;
}

export interface StoreFetchedResult {
  /** false: the delivery id was already stored (by a webhook or an earlier run); nothing changed. */
  stored: boolean;
  eventId: number;
}

export interface CatchUpCounts {
  listed: number;
  alreadyStored: number;
  storedNow: number;
  redeliveryAsked: number;
  failed: number;
  /** Listed items that were null or malformed: skipped, never failing the run. */
  skipped: number;
}

/**
 * A listing a run left unfinished (cut by a bound, or stopped by an error past its first
 * page): the next run continues it from `cursor` (the URL of the page where it stopped;
 * null: the first page), listing from `from` up to `until` (ms); once it is done, the
 * resume point jumps to `end`, where the interrupted run would have put it.
 */
export interface CatchUpPartial {
  cursor?: string | null;
  /** Absent: the resume point. */
  from?: number;
  until: number;
  end: number;
}

/** Held while a run goes on; one receiver holds a source's at a time. */
export interface CatchUpLock {
  release(): Promise<void>;
}

export interface CatchUpState {
  source: string;
  configuredAt: number;
  resumeAt: number | null;
  /** The older part a run stopped short of, or null. */
  partial: CatchUpPartial | null;
  lastRunAt: number | null;
  lastOkAt: number | null;
  /** The last run's error, null after a successful run. */
  lastError: string | null;
  lastCounts: CatchUpCounts | null;
}

/** How one run ended, written in one statement. */
export interface CatchUpRunRecord {
  at: number;
  /** Absent: a failed run, or one that must not move the resume point. */
  resumeAt?: number | undefined;
  /** Absent: unchanged; null: cleared. */
  partial?: CatchUpPartial | null | undefined;
  error: string | null;
  counts: CatchUpCounts;
}

export interface CatchUpStore {
  /** The delivery ids of this source, among `deliveryIds`, that are stored. */
  storedDeliveryIds(source: string, deliveryIds: readonly string[]): Promise<Set<string>>;
  /**
   * Stores a fetched event (origin `catch-up`, pending unless unrouted), or changes
   * nothing when its delivery id is stored: insert-first, on the same unique key as ingest.
   */
  storeFetched(event: FetchedEvent): Promise<StoreFetchedResult>;
  /** The state of one source, or undefined before its first run. */
  catchUpState(source: string): Promise<CatchUpState | undefined>;
  /** Every source's state (stats). */
  catchUpStates(): Promise<CatchUpState[]>;
  /** The state, created with configuredAt = now when it does not exist yet. */
  beginCatchUp(source: string, now: number): Promise<CatchUpState>;
  recordCatchUp(source: string, run: CatchUpRunRecord): Promise<void>;
  /**
   * Takes the source's catch-up for this receiver, or undefined when another holds it
   * (PostgreSQL: a session advisory lock; SQLite: always granted).
   */
  lockCatchUp(source: string): Promise<CatchUpLock | undefined>;
}

/**
 * The one rule both stores apply when a delivery id is already stored: is the incoming
 * delivery the same event (a duplicate) or a different one (a conflict)?
 * An event fetched by catch-up was stored from the sender's API, whose JSON may differ in
 * bytes and formatting (and, for Stripe, in fields rendered for another API version) from
 * the webhook body of the same event; the delivery id is the sender's own event id, so a
 * verified delivery with that id is the same event: a duplicate, whatever its hash.
 */
export function isSameEvent(stored: { body_sha256: string; origin: string }, incomingSha256: string): boolean {
  return stored.body_sha256 === incomingSha256 || stored.origin === 'catch-up';
}

export interface CatchUpStateRow {
  source: string;
  configured_at: number | string;
  resume_at: number | string | null;
  resume_cursor: string | null;
  last_run_at: number | string | null;
  last_ok_at: number | string | null;
  last_error: string | null;
  last_counts: string | null;
}

const num = (v: number | string | null) => (v === null ? null : Number(v));

/** snake_case row to CatchUpState, for both stores. */
export function toCatchUpState(r: CatchUpStateRow): CatchUpState {
  return {
    source: r.source,
    configuredAt: Number(r.configured_at),
    resumeAt: num(r.resume_at),
    partial: r.resume_cursor === null ? null : (JSON.parse(r.resume_cursor) as CatchUpPartial),
    lastRunAt: num(r.last_run_at),
    lastOkAt: num(r.last_ok_at),
    lastError: r.last_error,
    lastCounts: r.last_counts === null ? null : ({ skipped: 0, ...(JSON.parse(r.last_counts) as Partial<CatchUpCounts>) } as CatchUpCounts),
  };
}
