import { setTimeout as sleep } from 'node:timers/promises';
import { GroupCommit } from '../group-commit.js';
import type { IngestResult, NewEvent, Store } from '../types.js';
import { isBusy, sqliteError } from './errors.js';
import { ingestOne, ingestStatements } from './ingest.js';
import * as ops from './ops.js';
import type { ListEventsQuery, ReplayOptions } from '../ops-types.js';
import { openSqlite, type Db } from './open.js';

export interface SqliteStoreOptions {
  /** Total time an insert waits for another process's write lock before 503. */
  busyTimeoutMs: number;
  /** Long-running processes (serve) keep the thread free: SQLite's own wait is capped at this. */
  blockingBusyMs?: number;
}

/**
 * The SQLite store. `serve` uses two connections: one for ingest (group commit) and one
 * for the drain, whose module effects hold a transaction across an await.
 */
export class SqliteStore implements Store {
  readonly backend = 'sqlite';
  readonly db: Db;
  readonly #path: string;
  readonly #options: SqliteStoreOptions;
  readonly #ingest: ReturnType<typeof ingestStatements>;
  readonly #group: GroupCommit<NewEvent, IngestResult>;
  #closed = false;

  constructor(path: string, options: SqliteStoreOptions) {
    this.#path = path;
    this.#options = options;
    this.db = openSqlite(path, { busyTimeoutMs: options.blockingBusyMs ?? options.busyTimeoutMs });
    this.#ingest = ingestStatements(this.db);
    this.#group = new GroupCommit((items) => this.#commitBatch(items));
  }

  get path(): string {
    return this.#path;
  }

  ingest(event: NewEvent): Promise<IngestResult> {
    if (this.#closed) return Promise.reject(sqliteError(new TypeError('The database connection is not open'), 'ingest'));
    return this.#group.submit(event);
  }

  /**
   * One IMMEDIATE transaction for the whole batch; resolves after COMMIT (synchronous=FULL).
   * A busy database is retried asynchronously until busyTimeoutMs, then 503.
   */
  async #commitBatch(items: NewEvent[]): Promise<IngestResult[]> {
    const deadline = Date.now() + this.#options.busyTimeoutMs;
    const run = this.db.transaction((batch: NewEvent[]) => batch.map((e) => ingestOne(this.#ingest, e)));
    for (;;) {
      try {
        return run.immediate(items);
      } catch (e) {
        if (!isBusy(e) || Date.now() >= deadline) throw sqliteError(e, 'ingest');
        await sleep(Math.min(10, Math.max(1, deadline - Date.now())));
      }
    }
  }

  async ping(): Promise<void> {
    try {
      this.db.prepare('SELECT 1').get();
    } catch (e) {
      throw sqliteError(e, 'ping');
    }
  }

  // OpsStore (purge, replay, events, stats): see ./ops.ts.
  countPurgeable(receivedBefore: number) {
    return ops.countPurgeable(this.db, receivedBefore);
  }
  purgeBatch(receivedBefore: number, limit: number) {
    return ops.purgeBatch(this.db, receivedBefore, limit);
  }
  countBodiesDroppable(receivedBefore: number) {
    return ops.countBodiesDroppable(this.db, receivedBefore);
  }
  dropBodiesBatch(receivedBefore: number, limit: number) {
    return ops.dropBodiesBatch(this.db, receivedBefore, limit);
  }
  findEventId(source: string, deliveryId: string) {
    return ops.findEventId(this.db, source, deliveryId);
  }
  replayEvents(eventIds: readonly number[], options: ReplayOptions) {
    return ops.replayEvents(this.db, eventIds, options);
  }
  replayDead(options: ReplayOptions) {
    return ops.replayDead(this.db, options);
  }
  listEvents(query: ListEventsQuery) {
    return ops.listEvents(this.db, query);
  }
  getEvent(eventId: number) {
    return ops.getEvent(this.db, eventId);
  }
  stats(now: number) {
    return ops.stats(this.db, now);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    await this.#group.drain();
    this.#closed = true;
    this.db.close();
  }
}
