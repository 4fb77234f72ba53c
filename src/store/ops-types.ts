import type { EffectStatus, EventOrigin, EventStatus } from '../vocabulary.js';

/**
 * Operator operations on the store: purge, replay, events list/show, stats.
 *
 * Backend-neutral: every method is async, every time is milliseconds since the epoch
 * and is passed in (`now`, `receivedBefore`), so tests move time in SQL and the CLI
 * owns the clock. Each method is one short transaction (or one read); the CLI loops
 * the batch methods with a pause between calls, so a running server's ingest gets the
 * write lock between batches. Row shapes are camelCase; each backend converts from
 * its snake_case columns in one place.
 *
 * Vocabulary: see the glossary in ./types.ts. "Finished" here means status `done`:
 * `dead` events wait for a replay and keep everything; `pending` and `processing`
 * events are live. The effect ledger (`effects`) is deleted only by purgeLedgerBatch, and
 * only rows no stored event refers to.
 */

/**
 * One stored form of a delivery id the operator gave: the id itself, or (for senders whose
 * stored id adds a prefix, see src/delivery-ids.ts) an id ending in `suffix` in one source.
 * `source` absent: in any source.
 */
export type DeliveryIdForm = { source?: string | undefined; exact: string } | { source: string; suffix: string };

/** What one purge batch removed (all in one transaction). */
export interface PurgeBatchResult {
  /** `done` events deleted (0: nothing older is left; stop looping). */
  events: number;
  /** Their `attempts` rows, deleted with them. */
  attempts: number;
  /** Their `conflicts` rows, deleted with them. */
  conflicts: number;
}

/**
 * What one ledger purge batch did: read a stretch of keys in key order, then deleted the
 * purgeable ones in one short write transaction.
 */
export interface LedgerPurgeBatchResult {
  /** Keys read (at most 10 times `limit`, so no read is long, however big the ledger). */
  examined: number;
  /** Of those, keys found purgeable (at most `limit`). */
  picked: number;
  /** Ledger rows deleted: the picked ones still purgeable at the delete (a drain may have run one meanwhile). */
  removed: number;
  /** Where the next batch starts (after this key); null when the walk reached the end of the ledger. */
  lastKey: string | null;
}

/** What one tiered-retention batch changed (all in one transaction). */
export interface DropBodiesBatchResult {
  /** `done` events whose body and headers were set to NULL (0: none left; stop looping). */
  events: number;
  /** Conflict rows of those events whose body and headers were set to NULL. */
  conflicts: number;
}

/** Why one event could not be replayed. */
export interface ReplayRefusal {
  eventId: number;
  /**
   * not_found: no such event (never received, or purged). processing: its lease (or, with
   * a route, that route's) is still valid. body_dropped: tiered retention removed its body,
   * so its effects cannot run again. no_route: a replay of one route, which the event does
   * not have (no such route applied to it, or it was done before work per route existed).
   */
  reason: 'not_found' | 'processing' | 'body_dropped' | 'no_route';
  /** For `processing`: who holds the lease, and until when (ms). */
  leaseOwner?: string | null;
  leaseExpiresAt?: number | null;
  /** For `no_route`: the route asked for, and the routes the event has. */
  route?: string;
  routes?: string[];
}

/** One event put back to `pending`. */
export interface ReplayedEvent {
  eventId: number;
  source: string;
  deliveryId: string;
  /** The status it had before the replay. */
  previousStatus: EventStatus;
  /** True when the drain will re-run effects whose key is already done. */
  force: boolean;
  /** The one route replayed; absent when every route of the event was. */
  route?: string;
}

/**
 * Outcome of a replay. All or nothing: when `refused` is not empty, no event was
 * changed (`replayed` is then empty), so the operator can fix the list and rerun.
 */
export interface ReplayResult {
  replayed: ReplayedEvent[];
  refused: ReplayRefusal[];
}

export interface ReplayOptions {
  /** Sets `force_effects`: the drain re-runs effects whose key is already done, and records those attempts as forced. */
  force: boolean;
  /** Becomes `next_attempt_at`, so the drain takes the event on its next poll. */
  now: number;
  /** Only this route of each event (its unit); its other routes stay as they are. */
  route?: string | undefined;
}

export interface ListEventsQuery {
  status?: EventStatus | undefined;
  source?: string | undefined;
  /** This event type exactly. */
  eventType?: string | undefined;
  /** Event types matching this glob: `*` any run of characters, `?` one; case-sensitive. */
  eventTypeGlob?: string | undefined;
  /** This delivery id exactly (in any source unless `source` is set). */
  deliveryId?: string | undefined;
  /** Events whose delivery id has any of these forms (an empty list matches nothing). */
  deliveryIdForms?: readonly DeliveryIdForm[] | undefined;
  /** Delivery ids starting with this text. */
  deliveryIdPrefix?: string | undefined;
  /** How the events came in. */
  origin?: EventOrigin | undefined;
  /** received_at >= this (ms). */
  receivedFrom?: number | undefined;
  /** received_at < this (ms). */
  receivedBefore?: number | undefined;
  /**
   * Keyset pagination: only events with a smaller id, i.e. the last id of the previous
   * page. A page deep in the list then costs what the first one does (no OFFSET).
   */
  beforeId?: number | undefined;
  /** At most this many, newest first. */
  limit: number;
}

/** `events list --search`: the list's filters, and the body must contain a text. */
export interface SearchEventsQuery extends ListEventsQuery {
  /** The body's bytes contain this text's UTF-8 bytes (case-sensitive). */
  bodyContains: string;
  /**
   * Bodies of at most this many events are searched: the newest that match the other
   * filters. A search is a scan; this bounds what one command can cost.
   */
  scanLimit: number;
}

export interface SearchEventsResult {
  /** Newest first, at most `limit`. */
  events: EventSummary[];
  /**
   * True when fewer than `limit` events were found and older events matching the other
   * filters were left unsearched by `scanLimit`: the answer may be incomplete.
   */
  scanLimitReached: boolean;
}

/** One row of `events list`. */
export interface EventSummary {
  id: number;
  source: string;
  deliveryId: string;
  eventType: string;
  status: EventStatus;
  /** The retry counter: attempts since arrival or since the last replay. */
  attempts: number;
  receivedAt: number;
  nextAttemptAt: number;
  finishedAt: number | null;
  lastError: string | null;
  /** Later deliveries of the same id and body (answered from the stored answer). */
  duplicates: number;
  forceEffects: boolean;
  origin: EventOrigin;
}

/** An event whose delivery id resembles one the operator gave (nearDeliveryIds). */
export interface NearDeliveryId {
  id: number;
  source: string;
  deliveryId: string;
}

export interface AttemptRow {
  id: number;
  attempt: number;
  route: string;
  effectKey: string | null;
  startedAt: number;
  finishedAt: number | null;
  outcome: string;
  error: string | null;
  output: string | null;
  forced: boolean;
  /** The key the run was sent with (effect key, or `<effect key>#forced-<n>`); null when nothing ran. */
  runKey: string | null;
}

/** A row of the effect ledger. */
export interface EffectRow {
  effectKey: string;
  route: string;
  businessKey: string;
  status: EffectStatus;
  /** The event that last ran it. */
  eventId: number | null;
  version: string | null;
  runs: number;
  forcedRuns: number;
  startedAt: number | null;
  finishedAt: number | null;
  lastError: string | null;
}

/** One differing body received for an event's delivery id (stored once; later copies counted). */
export interface ConflictRow {
  id: number;
  /** When this body first arrived. */
  receivedAt: number;
  bodySha256: string;
  /** Deliveries of the same differing body since. */
  repeats: number;
  /** Its request headers (signatures redacted) as first received; null after tiered retention dropped them. */
  headers: Record<string, string> | null;
  /** The differing body as first received; null after tiered retention dropped it. */
  body: Buffer | null;
}

/**
 * One route's unit of work of an event: its own status, retry counter, next attempt, last
 * error and lease, in its lane. The event's status is derived from its units'.
 */
export interface UnitRow {
  route: string;
  lane: string;
  status: EventStatus;
  /** The unit's retry counter: attempts since it was planned or last replayed. */
  attempts: number;
  nextAttemptAt: number;
  lastError: string | null;
  leaseOwner: string | null;
  leaseExpiresAt: number | null;
  /** Replays of this unit (of the whole event, or of this route alone). */
  replays: number;
  finishedAt: number | null;
}

/** One event with everything `events show` prints. */
export interface EventDetail extends EventSummary {
  /** Stored request headers (signature headers already redacted); null after tiered retention dropped them. */
  headers: Record<string, string> | null;
  /** The raw body; null after tiered retention dropped it. */
  body: Buffer | null;
  bodySha256: string;
  extraIds: Record<string, string> | null;
  responseStatus: number;
  leaseOwner: string | null;
  leaseExpiresAt: number | null;
  /**
   * Why each route of the event's source did or did not apply, one line per route, as
   * decided when it was stored done (no route applied) or by the drain's latest attempt;
   * null before either (pending, or stored by an older receiver).
   */
  routeDecisions: string[] | null;
  /** One per route that applies, in the order they were planned; none before the drain plans the event (or when no route applied). */
  units: UnitRow[];
  /** Oldest first. Rows from before a replay are kept. */
  attemptRows: AttemptRow[];
  /** Ledger rows for the effect keys this event's attempts touched, or that it last ran. */
  effects: EffectRow[];
  conflicts: ConflictRow[];
}

export interface SourceKeyAge {
  source: string;
  /** received_at of the oldest event still stored for this source (its oldest dedupe key). */
  oldestReceivedAt: number;
  events: number;
}

/** The work of one lane now: what waits, what runs. */
export interface LaneStats {
  lane: string;
  /** Units `pending` (waiting for their turn or their retry). */
  pending: number;
  /** Units `processing` (claimed; running, or left to an expired lease). */
  running: number;
  /** received_at (ms) of the event of the lane's oldest pending unit (the first planned), or null when none is pending. */
  oldestPendingReceivedAt: number | null;
}

export interface StoreStats {
  /** Every status is present, 0 when none. */
  byStatus: Record<EventStatus, number>;
  /** Sum of events.duplicates. */
  duplicates: number;
  /** Conflicting deliveries received: each differing body once, plus its repeats. */
  conflicts: number;
  /** One entry per source that has events. */
  sources: SourceKeyAge[];
  /** `processing` events whose lease expired before `now` (a crashed or stalled drain). */
  stuckClaims: number;
  /** Oldest expired lease among them (ms), or null. */
  oldestStuckLeaseExpiresAt: number | null;
  /** Ledger rows by status. */
  effectsByStatus: Record<EffectStatus, number>;
  ledger: {
    /** Disk space of the `effects` table with its index (bytes). */
    bytes: number;
    /** finished_at of the oldest done or failed ledger row, or null. */
    oldestFinishedAt: number | null;
  };
  /**
   * received_at of the database's first event (id 1) while it is still stored, else null:
   * then nothing received before the oldest stored event was ever purged, and that is
   * how old the database is.
   */
  firstEventReceivedAt: number | null;
  /** Every lane with a pending or running unit, by name. */
  lanes: LaneStats[];
}

/** The queue as GET /metrics reads it at every scrape. */
export interface QueueStats {
  pending: number;
  processing: number;
  dead: number;
  /** received_at (ms) of the oldest pending event, or null when none is pending. */
  oldestPendingReceivedAt: number | null;
}

/** Events received in one hour, by what became of them (their status now), or conflicting deliveries. */
export interface HourlyDeliveries {
  /** Start of the hour (ms, UTC). */
  hour: number;
  outcome: EventStatus | 'conflict';
  /** Events; for `conflict`, each differing body once plus its repeats. */
  count: number;
}

/** Failed effect attempts of one route. */
export interface RouteFailures {
  route: string;
  failures: number;
  /** started_at of the newest failed attempt (ms). */
  lastFailedAt: number;
}

export interface OpsStore {
  /** How many `done` events have received_at < receivedBefore (purge --dry-run). */
  countPurgeable(receivedBefore: number): Promise<number>;

  /**
   * Deletes up to `limit` `done` events with received_at < receivedBefore, oldest first,
   * with their attempts and conflicts, in one short write transaction. Never touches
   * pending, processing or dead events, nor the effect ledger. A purged delivery id is
   * forgotten: a redelivery of it is accepted as a new event (its effects stay skipped
   * by the ledger).
   */
  purgeBatch(receivedBefore: number, limit: number): Promise<PurgeBatchResult>;

  /**
   * How many ledger rows purgeLedgerBatch would delete now: `done` or `failed` (never
   * `running`), finished before `finishedBefore`, and referred to by no stored event
   * (neither the event that last ran it, `effects.event_id`, nor any event with an attempt
   * of its key; attempts are deleted with their event).
   */
  countLedgerPurgeable(finishedBefore: number): Promise<number>;

  /**
   * Deletes up to `limit` such ledger rows with keys after `afterKey` (in key order; '' for
   * the first batch), reading at most 10 times `limit` keys. They are picked by that read, then deleted in one short write
   * transaction that checks the rule again, so a key a drain runs or refers to meanwhile
   * stays. On PostgreSQL, rows another transaction holds are skipped. A purged key is
   * forgotten: the next event that brings it runs its effect again.
   */
  purgeLedgerBatch(finishedBefore: number, afterKey: string, limit: number): Promise<LedgerPurgeBatchResult>;

  /** How many body keys have expired by `now` (their retry horizon is over). */
  countExpiredBodyKeys(now: number): Promise<number>;

  /**
   * Deletes up to `limit` body keys expired by `now`, in one short write transaction; returns
   * how many. A body key goes with its event (purgeBatch) or here once its horizon is over.
   */
  purgeBodyKeysBatch(now: number, limit: number): Promise<number>;

  /** How many `done` events with received_at < receivedBefore still have a body or headers. */
  countBodiesDroppable(receivedBefore: number): Promise<number>;

  /**
   * Tiered retention: sets body and headers to NULL on up to `limit` `done` events with
   * received_at < receivedBefore (and on their conflicts), in one short write transaction.
   * Rows, delivery ids, body hashes and stored answers stay, so dedupe still works.
   */
  dropBodiesBatch(receivedBefore: number, limit: number): Promise<DropBodiesBatchResult>;

  /** The event id for (source, delivery id), or undefined. */
  findEventId(source: string, deliveryId: string): Promise<number | undefined>;

  /**
   * For a "never received" answer: up to `limit` events, newest first, among the
   * `scanLimit` newest (in `source` when given), whose delivery id contains `given` or its
   * first characters, ignoring ASCII case.
   */
  nearDeliveryIds(given: string, options: { source?: string | undefined; limit: number; scanLimit: number }): Promise<NearDeliveryId[]>;

  /**
   * Puts the given events back to `pending` with next_attempt_at = now, the retry
   * counter reset to 0 (attempt history rows kept), lease cleared, last_error kept until
   * the next attempt, and force_effects set when `force` (never cleared by a plain replay;
   * the drain clears it when it finishes the event). An unknown id, an event whose lease
   * is still valid at `now`, or one whose body was dropped, is refused, and then nothing
   * changes (all or nothing).
   * An event whose lease expired may be replayed: the old holder can no longer complete it.
   */
  replayEvents(eventIds: readonly number[], options: ReplayOptions): Promise<ReplayResult>;

  /** replayEvents for every `dead` event, in one transaction. Refuses only dead events whose body was dropped (never, today: only `done` bodies are dropped). */
  replayDead(options: ReplayOptions): Promise<ReplayResult>;

  /** Newest first (by id), every filter given applied (AND). */
  listEvents(query: ListEventsQuery): Promise<EventSummary[]>;

  /**
   * listEvents whose body contains a text, searching only the `scanLimit` newest events
   * that match the other filters (one read snapshot). Events whose body was dropped never match.
   */
  searchEvents(query: SearchEventsQuery): Promise<SearchEventsResult>;

  /**
   * Events received since `since` (ms), counted per hour and outcome, oldest hour first.
   * Reads only the newest rows (by id), so its cost follows the window, not the table.
   */
  deliveriesPerHour(since: number): Promise<HourlyDeliveries[]>;

  /** Attempts with outcome `failed` started since `since` (ms), per route, most failures first. */
  effectFailuresByRoute(since: number): Promise<RouteFailures[]>;

  /** One event with headers, body, attempts, effects and conflicts; undefined if unknown. */
  getEvent(eventId: number): Promise<EventDetail | undefined>;

  /** Counts for `stats`; `now` decides which claims are stuck. */
  stats(now: number): Promise<StoreStats>;

  /**
   * The admin pages' live sessions, by the SHA-256 of the cookie's nonce: a login adds one
   * (and deletes the expired ones), a logout deletes it, every request asks.
   */
  startAdminSession(id: string, expiresAt: number, now: number): Promise<void>;
  isAdminSessionLive(id: string, now: number): Promise<boolean>;
  endAdminSession(id: string): Promise<void>;

  /**
   * Counts for GET /metrics, read at every scrape: must stay cheap (partial indexes, no
   * scan of finished events), unlike stats(), which scans every event.
   */
  queueStats(): Promise<QueueStats>;

  /**
   * The lanes with pending or running units, by name: for GET /metrics at every scrape (one
   * grouped read of the units' partial indexes), `stats` and the admin overview.
   */
  laneStats(): Promise<LaneStats[]>;
}
