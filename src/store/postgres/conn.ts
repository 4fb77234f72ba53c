import type { QueryConfig, QueryResult, QueryResultRow } from 'pg';
import { closedError, isRetryable, postgresError } from './errors.js';
import type { Pool, PoolClient } from './open.js';

export interface TransactionOptions {
  /** Default `BEGIN` (read committed). Reads that must see one snapshot use repeatable read. */
  begin?: 'BEGIN' | 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY';
  /** Run again after a deadlock or serialization failure (default true; never for user code). */
  retry?: boolean;
}

/**
 * The pool as every store operation uses it: one statement on its own (autocommit), or a
 * function inside BEGIN ... COMMIT on one connection. Errors come out as ReceiverErrors
 * (connection trouble, timeouts, disk full: `unavailable`, 503).
 */
export class Conn {
  #closed = false;

  constructor(
    readonly pool: Pool,
    readonly busyTimeoutMs: number,
  ) {}

  get closed(): boolean {
    return this.#closed;
  }

  async end(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.pool.end();
  }

  async query<R extends QueryResultRow>(what: string, sql: string, params: readonly unknown[] = []): Promise<QueryResult<R>> {
    if (this.#closed) throw closedError(what);
    try {
      return await this.pool.query<R>(sql, params as unknown[]);
    } catch (e) {
      throw postgresError(e, what);
    }
  }

  /**
   * SELECT 1 on the pool, answered within max(busyTimeoutMs, 1 s) or failed: a server that
   * stopped answering (a network partition) would otherwise hold it for the client-side
   * query timeout, longer than a health checker waits.
   */
  async ping(): Promise<void> {
    if (this.#closed) throw closedError('ping');
    try {
      // pg reads query_timeout per query too; its types know it only per connection.
      const ping: QueryConfig & { query_timeout: number } = { text: 'SELECT 1', query_timeout: Math.max(1000, this.busyTimeoutMs) };
      await this.pool.query(ping);
    } catch (e) {
      throw postgresError(e, 'ping');
    }
  }

  async connect(what: string): Promise<PoolClient> {
    if (this.#closed) throw closedError(what);
    try {
      return await this.pool.connect();
    } catch (e) {
      throw postgresError(e, what);
    }
  }

  /**
   * Cancels the statement `client` is running, from another connection (pg_cancel_backend):
   * for a caller that stopped waiting for it and must end the transaction, which would
   * otherwise wait behind it. Nothing happens when the statement has already ended.
   */
  async cancel(what: string, client: PoolClient): Promise<void> {
    // The backend's pid, from the connection's start-up (BackendKeyData); not in pg's types.
    const pid = (client as unknown as { processID?: number | null }).processID;
    if (typeof pid === 'number') await this.query(what, 'SELECT pg_cancel_backend($1)', [pid]);
  }

  /**
   * Runs `fn` inside BEGIN ... COMMIT on one pooled connection and resolves after COMMIT
   * has returned (synchronous_commit=on: flushed to the WAL). A deadlock or serialization
   * failure is retried until the busy timeout; then, and for any connection trouble, 503.
   */
  async transaction<T>(what: string, fn: (client: PoolClient) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
    const deadline = Date.now() + this.busyTimeoutMs;
    for (;;) {
      const client = await this.connect(what);
      try {
        await client.query(options.begin ?? 'BEGIN');
        const result = await fn(client);
        await commit(client, what);
        client.release();
        return result;
      } catch (e) {
        await rollbackAndRelease(client);
        if ((options.retry ?? true) && isRetryable(e) && Date.now() < deadline) continue;
        throw postgresError(e, what);
      }
    }
  }
}

/** COMMIT, refusing the silent ROLLBACK PostgreSQL answers for a transaction in which a statement failed. */
export async function commit(client: PoolClient, what: string): Promise<void> {
  const result = await client.query('COMMIT');
  if (result.command === 'ROLLBACK') throw new Error(`${what}: the transaction was rolled back (a statement in it failed)`);
}

/** ROLLBACK and return the connection; one that cannot even roll back is destroyed, not pooled. */
export async function rollbackAndRelease(client: PoolClient): Promise<void> {
  const broken = await client.query('ROLLBACK').then(
    () => false,
    () => true,
  );
  client.release(broken ? true : undefined);
}
