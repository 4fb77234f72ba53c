import { GroupCommit } from '../group-commit.js';
import { StoreBase } from '../store-base.js';
import type { SharedOps } from '../ops-steps.js';
import type { CatchUpStore } from '../catch-up-types.js';
import { catchUpOn } from './catch-up.js';
import { alertsOn } from '../alert-steps.js';
import type { AlertStore } from '../alert-types.js';
import { dialect } from './steps.js';
import type { IngestResult, NewEvent, OpenStoreOptions, Store } from '../types.js';
import { Conn } from './conn.js';
import { PostgresDrainBackend } from './drain-backend.js';
import { closedError } from './errors.js';
import { ingestBatch } from './ingest.js';
import { openPostgres, POOL_SIZE } from './open.js';
import * as ops from './ops.js';

/**
 * The PostgreSQL store: several receivers on several machines share one database.
 * A small pool per process: ingest holds one connection at a time (group commit: one
 * INSERT statement per batch, see ./ingest.ts), the drain up to two (a module effect holds one across its handler),
 * operator commands and health checks the rest.
 */
export class PostgresStore extends StoreBase implements Store {
  readonly backend = 'postgres';
  /** Receivers on several machines may share the database: a claim owner's process cannot be checked from here. */
  readonly claimsAreLocal = false;
  /** Each module transaction holds a connection across its handler: two of the pool's, the rest for claims, settles and the heartbeat. */
  readonly moduleTransactionsAtOnce = POOL_SIZE - 2;
  readonly #conn: Conn;
  readonly #drain: PostgresDrainBackend;
  readonly #group: GroupCommit<NewEvent, IngestResult>;
  /** The operator operations both stores share. */
  protected readonly sharedOps: SharedOps;
  /** Catch-up's operations (see ./catch-up.ts). */
  protected readonly catchUp: CatchUpStore;
  /** Alerts' operations. */
  readonly alerts: AlertStore;
  #closing = false;

  private constructor(conn: Conn) {
    super();
    this.#conn = conn;
    this.#drain = new PostgresDrainBackend(conn);
    this.sharedOps = ops.sharedOpsOn(conn);
    this.catchUp = catchUpOn(conn);
    this.alerts = alertsOn(dialect, ops.stepRunner(conn));
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
    await this.#group.settled();
    await this.#conn.end();
  }

  // DrainStore: see ../store-base.ts and ./drain-backend.ts.
  protected drainBackend(): PostgresDrainBackend {
    return this.#drain;
  }

  // OpsStore: purge batches and queue gauges; the rest in ../store-base.ts.
  purgeBatch(receivedBefore: number, limit: number) {
    return ops.purgeBatch(this.#conn, receivedBefore, limit);
  }
  dropBodiesBatch(receivedBefore: number, limit: number) {
    return ops.dropBodiesBatch(this.#conn, receivedBefore, limit);
  }
  queueStats() {
    return ops.queueStats(this.#conn);
  }
}
