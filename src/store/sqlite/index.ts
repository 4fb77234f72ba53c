import { GroupCommit } from '../group-commit.js';
import { StoreBase } from '../store-base.js';
import type { IngestResult, NewEvent, Store } from '../types.js';
import { sqliteError, whenUnlocked } from './errors.js';
import { ingestOne, ingestStatements } from './ingest.js';
import { SqliteDrainBackend } from './drain-backend.js';
import * as ops from './ops.js';
import type { SharedOps } from '../ops-steps.js';
import type { CatchUpStore } from '../catch-up-types.js';
import { catchUpOn } from './catch-up.js';
import { alertsOn } from '../alert-steps.js';
import type { AlertStore } from '../alert-types.js';
import { dialect } from './steps.js';
import { IngestThread } from './ingest-thread.js';
import { inMemoryTemp, openSqlite, type Db } from './open.js';
import { queueStats } from './queue-stats.js';
import { WalSync } from './wal-sync.js';
import { ingestWaitingFlag } from './lock-priority.js';

/** Batches posted to the ingest worker before the first has committed: the next one waits there, ready, while one commits. */
export const INGEST_BATCHES_IN_FLIGHT = 2;

export interface SqliteStoreOptions {
  /** Total time an insert waits for another process's write lock before 503. */
  busyTimeoutMs: number;
  /** Long-running processes (serve) keep the thread free: SQLite's own wait is capped at this. */
  blockingBusyMs?: number;
  /** serve: commit ingest batches in a worker thread, so their fsync never stalls the event loop. */
  ingestThread?: boolean;
  /**
   * serve: the drain's connection commits with synchronous=NORMAL and makes commits durable
   * with an explicit fsync of the WAL, off the event loop and outside the lock (wal-sync.ts).
   */
  explicitSync?: boolean;
  /**
   * The flag the ingest thread raises while it waits for the write lock (lock-priority.ts):
   * made by the store that runs the ingest thread, given to the drain thread's store.
   */
  ingestWaiting?: SharedArrayBuffer | undefined;
}

/**
 * The SQLite store. `serve` uses two connections: one for ingest (group commit) and one
 * for the drain, whose module effects hold a transaction across an await.
 */
export class SqliteStore extends StoreBase implements Store {
  readonly backend = 'sqlite';
  /** A SQLite file is used by processes of one machine only (WAL needs shared memory). */
  readonly claimsAreLocal = true;
  /** Module transactions take turns on the drain's one connection. */
  readonly moduleTransactionsAtOnce = Number.POSITIVE_INFINITY;
  readonly db: Db;
  readonly #path: string;
  readonly #options: SqliteStoreOptions;
  readonly #ingest: ReturnType<typeof ingestStatements>;
  /** The operator operations both stores share, on the ingest connection. */
  protected readonly sharedOps: SharedOps;
  /** Catch-up's operations, on the ingest connection (see ./catch-up.ts). */
  protected readonly catchUp: CatchUpStore;
  /** Alerts' operations, on the ingest connection, waiting for the write lock like catch-up's. */
  readonly alerts: AlertStore;
  readonly #group: GroupCommit<NewEvent, IngestResult>;
  readonly #thread: IngestThread | undefined;
  #closed = false;
  /** The drain's own connection, opened on first use (CLI commands never open it). */
  #drain: { db: Db; backend: SqliteDrainBackend } | undefined;
  /** serve: the explicit fsync of the WAL that the drain's connection awaits or schedules. */
  readonly #wal: WalSync | undefined;
  /** serve: raised while the ingest thread waits for the write lock; the drain gives way to it. */
  readonly ingestWaiting: SharedArrayBuffer | undefined;

  constructor(path: string, options: SqliteStoreOptions) {
    super();
    this.#path = path;
    this.#options = options;
    this.db = openSqlite(path, { busyTimeoutMs: options.blockingBusyMs ?? options.busyTimeoutMs });
    this.#ingest = ingestStatements(this.db);
    // Replays, purges and the rest from serve's own process (the admin pages) wait for the
    // write lock like deliveries do, asynchronously: this connection's own wait is a few ms.
    this.sharedOps = ops.sharedOpsOn(this.db, options.busyTimeoutMs);
    this.catchUp = catchUpOn(this.db, options.busyTimeoutMs);
    this.alerts = alertsOn(dialect, ops.stepRunner(this.db, options.busyTimeoutMs));
    this.ingestWaiting = options.ingestWaiting ?? (options.ingestThread === true ? new SharedArrayBuffer(4) : undefined);
    this.#thread = options.ingestThread === true ? new IngestThread(path, options.busyTimeoutMs, this.ingestWaiting) : undefined;
    this.#wal = options.explicitSync === true ? new WalSync(path) : undefined;
    const thread = this.#thread;
    // The worker commits its batches one after another in the order posted: the next batch
    // waits there while the current one commits, instead of on this thread for its answer.
    // Either way an insert waits for another process's write lock until busyTimeoutMs after
    // it was submitted, whatever it spent queued behind other batches, then 503.
    const deadline = (since: number) => since + options.busyTimeoutMs;
    this.#group =
      thread === undefined
        ? new GroupCommit((items, since) => this.#commitBatch(items, deadline(since)))
        : new GroupCommit((items, since) => thread.commit(items, deadline(since)), 512, INGEST_BATCHES_IN_FLIGHT);
  }

  /** Resolves once the ingest worker (if any) has opened the database; rejects if it cannot. */
  async ready(): Promise<void> {
    await this.#thread?.ready;
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
   * A busy database is retried asynchronously until the deadline, then 503.
   */
  async #commitBatch(items: NewEvent[], deadline: number): Promise<IngestResult[]> {
    const run = this.db.transaction((batch: NewEvent[]) => batch.map((e) => ingestOne(this.#ingest, e)));
    return whenUnlocked('ingest', deadline, () => run.immediate(items));
  }

  /**
   * Takes the write lock and lets it go at once (no write, no fsync): a read would succeed
   * while another process holds the lock and every insert answers 503. Waits for the lock
   * as an insert does, up to busyTimeoutMs, without blocking the thread.
   */
  async ping(): Promise<void> {
    await whenUnlocked('ping', Date.now() + this.#options.busyTimeoutMs, () => {
      this.db.exec('BEGIN IMMEDIATE');
      this.db.exec('ROLLBACK');
    });
  }

  // OpsStore: purge batches and queue gauges; the rest in ../store-base.ts.
  purgeBatch(receivedBefore: number, limit: number) {
    return ops.purgeBatch(this.db, receivedBefore, limit);
  }
  dropBodiesBatch(receivedBefore: number, limit: number) {
    return ops.dropBodiesBatch(this.db, receivedBefore, limit);
  }
  /** GET /metrics, every scrape: partial indexes only (see ./queue-stats.ts). */
  queueStats() {
    return queueStats(this.db);
  }

  // DrainStore: see ../store-base.ts and ./drain-backend.ts.
  protected drainBackend(): SqliteDrainBackend {
    if (this.#closed) throw sqliteError(new TypeError('The database connection is not open'), 'drain');
    if (this.#drain === undefined) {
      const db = openSqlite(this.#path, { busyTimeoutMs: this.#options.blockingBusyMs ?? this.#options.busyTimeoutMs });
      if (this.#wal !== undefined) {
        // No fsync inside COMMIT on the event loop: WalSync makes commits durable off it.
        // Checkpoints (which fsync) are left to the ingest worker's connection.
        db.pragma('synchronous = NORMAL');
        db.pragma('wal_autocheckpoint = 0');
        inMemoryTemp(db);
      }
      const ingestWaiting = this.ingestWaiting === undefined ? undefined : ingestWaitingFlag(this.ingestWaiting);
      this.#drain = { db, backend: new SqliteDrainBackend({ db, busyTimeoutMs: this.#options.busyTimeoutMs, wal: this.#wal, ingestWaiting }) };
    }
    return this.#drain.backend;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    await this.#group.settled();
    this.#closed = true;
    await this.#wal?.close();
    await this.#thread?.close();
    this.#drain?.db.close();
    this.db.close();
  }
}
