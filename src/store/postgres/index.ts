import type { AttemptRecord, EffectDb, EffectFinish, EffectStart, Lease } from '../drain-types.js';
import { GroupCommit } from '../group-commit.js';
import type { SharedOps } from '../ops-steps.js';
import type { ListEventsQuery, ReplayOptions } from '../ops-types.js';
import type { IngestResult, NewEvent, OpenStoreOptions, Store } from '../types.js';
import { Conn } from './conn.js';
import * as drain from './drain.js';
import { closedError } from './errors.js';
import { ingestBatch } from './ingest.js';
import { openPostgres } from './open.js';
import * as ops from './ops.js';

/**
 * The PostgreSQL store: several receivers on several machines share one database.
 * A small pool per process: ingest holds one connection at a time (group commit: one
 * INSERT statement per batch, see ./ingest.ts), the drain one (a module effect holds it across its handler),
 * operator commands and health checks the rest.
 */
export class PostgresStore implements Store {
  readonly backend = 'postgres';
  /** Receivers on several machines may share the database: a claim owner's process cannot be checked from here. */
  readonly claimsAreLocal = false;
  readonly #conn: Conn;
  readonly #group: GroupCommit<NewEvent, IngestResult>;
  /** The operator operations both stores share. */
  readonly #ops: SharedOps;
  #closing = false;

  private constructor(conn: Conn) {
    this.#conn = conn;
    this.#ops = ops.sharedOpsOn(conn);
    this.#group = new GroupCommit((items) => ingestBatch(this.#conn, items));
  }

  /** Connects, refuses a database written by a newer receiver, migrates an older one. */
  static async open(url: string, options: OpenStoreOptions): Promise<PostgresStore> {
    const pool = await openPostgres(url, { busyTimeoutMs: options.busyTimeoutMs, server: options.server === true });
    return new PostgresStore(new Conn(pool, options.busyTimeoutMs));
  }

  ingest(event: NewEvent): Promise<IngestResult> {
    if (this.#closing) return Promise.reject(closedError('ingest'));
    return this.#group.submit(event);
  }

  async ping(): Promise<void> {
    await this.#conn.ping();
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    // Batches already submitted still commit and get their answers; new ones are refused.
    await this.#group.drain();
    await this.#conn.end();
  }

  // DrainStore (claims, leases, the effect ledger): see ./drain.ts.
  claimEvent(owner: string, now: number, leaseMs: number) {
    return drain.claimEvent(this.#conn, owner, now, leaseMs);
  }
  claimEvents(owner: string, now: number, leaseMs: number, limit: number) {
    return drain.claimEvents(this.#conn, owner, now, leaseMs, limit);
  }
  renewLeases(leases: readonly Lease[], now: number, leaseMs: number) {
    return drain.renewLeases(this.#conn, leases, now, leaseMs);
  }
  releaseEvents(leases: readonly Lease[]) {
    return drain.releaseEvents(this.#conn, leases);
  }
  claimOwners() {
    return drain.claimOwners(this.#conn);
  }
  expireClaims(ownerPrefix: string, now: number) {
    return drain.expireClaims(this.#conn, ownerPrefix, now);
  }
  nextDueAt() {
    return drain.nextDueAt(this.#conn);
  }
  renewLease(lease: Lease, now: number, leaseMs: number) {
    return drain.renewLease(this.#conn, lease, now, leaseMs);
  }
  beginEffect(lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number) {
    return drain.beginEffect(this.#conn, lease, attempt, start, now, leaseMs);
  }
  finishEffect(finish: EffectFinish, now: number) {
    return drain.finishEffect(this.#conn, finish, now);
  }
  runTransactionalEffect(
    lease: Lease,
    attempt: number,
    start: EffectStart,
    handler: (db: EffectDb) => Promise<void>,
    now: () => number,
    leaseMs: number,
    options?: { completeOnOk?: boolean },
  ) {
    return drain.runTransactionalEffect(this.#conn, { lease, attempt, start, handler, now, leaseMs, completeOnOk: options?.completeOnOk === true });
  }
  recordAttempt(record: AttemptRecord) {
    return drain.recordAttempt(this.#conn, record);
  }
  completeEvent(lease: Lease, now: number) {
    return drain.completeEvent(this.#conn, lease, now);
  }
  retryEvent(lease: Lease, error: string, nextAttemptAt: number) {
    return drain.retryEvent(this.#conn, lease, error, nextAttemptAt);
  }
  buryEvent(lease: Lease, error: string, now: number) {
    return drain.buryEvent(this.#conn, lease, error, now);
  }

  // OpsStore (purge, replay, events, stats): see ../ops-steps.ts and ./ops.ts.
  countPurgeable(receivedBefore: number) {
    return this.#ops.countPurgeable(receivedBefore);
  }
  purgeBatch(receivedBefore: number, limit: number) {
    return ops.purgeBatch(this.#conn, receivedBefore, limit);
  }
  countBodiesDroppable(receivedBefore: number) {
    return this.#ops.countBodiesDroppable(receivedBefore);
  }
  dropBodiesBatch(receivedBefore: number, limit: number) {
    return ops.dropBodiesBatch(this.#conn, receivedBefore, limit);
  }
  findEventId(source: string, deliveryId: string) {
    return this.#ops.findEventId(source, deliveryId);
  }
  replayEvents(eventIds: readonly number[], options: ReplayOptions) {
    return this.#ops.replayEvents(eventIds, options);
  }
  replayDead(options: ReplayOptions) {
    return this.#ops.replayDead(options);
  }
  listEvents(query: ListEventsQuery) {
    return this.#ops.listEvents(query);
  }
  getEvent(eventId: number) {
    return this.#ops.getEvent(eventId);
  }
  stats(now: number) {
    return this.#ops.stats(now);
  }
  queueStats() {
    return ops.queueStats(this.#conn);
  }
}
