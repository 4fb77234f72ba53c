import pg from 'pg';
import { ReceiverError } from '../../errors.js';
import { redactUrl } from '../../log.js';
import { postgresError } from './errors.js';
import { LATEST_VERSION, migrations } from './migrations.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;

export interface PostgresOpenOptions {
  /** How long a statement may wait for a lock, or a caller for a connection, before 503. */
  busyTimeoutMs: number;
  /**
   * serve: a statement running past the busy timeout fails too (the sender gets a 503 and
   * retries). One-shot commands (stats, events, purge counts) may read for longer.
   */
  server?: boolean;
  /** Connections per process. Ingest holds one at a time (group commit), the drain one. */
  poolSize?: number;
}

/** Any constant: serialises migrations between receivers starting at the same time. */
const MIGRATION_LOCK = 0x72656376; // "recv"

/**
 * bigint (int8) columns are ids, counts and millisecond times, all far below 2^53:
 * parsed as numbers for this pool only (the global pg.types stay untouched).
 */
const types = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8 && format !== 'binary' ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

/** Connections per process (per store: serve's ingest, drain and HTTP threads each open one). */
export const POOL_SIZE = 4;

export function createPool(url: string, options: PostgresOpenOptions): Pool {
  // 0 means "no limit" to PostgreSQL; for us it means "do not wait", so 1 ms.
  const lockTimeout = Math.max(1, options.busyTimeoutMs);
  const statementTimeout = Math.max(options.server === true ? 1000 : 60_000, options.busyTimeoutMs);
  const pool = new pg.Pool({
    connectionString: url,
    max: options.poolSize ?? POOL_SIZE,
    connectionTimeoutMillis: Math.max(1000, options.busyTimeoutMs),
    idleTimeoutMillis: 30_000,
    // Server side: a lock wait or a statement past the busy timeout fails (-> 503).
    lock_timeout: lockTimeout,
    statement_timeout: statementTimeout,
    // Client side: a server that stopped answering (network gone) also fails, a bit later.
    query_timeout: statementTimeout + 5000,
    keepAlive: true,
    application_name: 'receiver',
    // A 202 is sent only after COMMIT is flushed: refuse a server default of "off".
    options: '-c synchronous_commit=on',
    types,
  });
  // pg emits 'error' on a client whose connection drops while no query of ours is waiting
  // on it (the server terminated it, restarted, or the network went), and an 'error' with
  // no listener is an uncaught exception: the process would end. So every connection has
  // a listener from the moment it is made, idle or checked out (the pool's own listener
  // covers idle ones only). The broken client is no longer queryable: its next query fails
  // as a value (503 for ingest, a failed step for the drain), and release() discards it.
  // The first error is the reason (the server's FATAL message); the socket's end follows.
  pool.on('connect', (client) => client.on('error', (e: Error) => lostConnections.has(client) || lostConnections.set(client, e)));
  // An idle connection dropped by the server: the pool discards it and the next query opens a new one.
  pool.on('error', ignoreConnectionError);
  return pool;
}

/** An idle connection carries no work; the pool has already discarded it. */
function ignoreConnectionError(): void {}

/** Why each dropped connection was dropped, as the server or the socket said it. */
const lostConnections = new WeakMap<pg.ClientBase, Error>();

/**
 * Why `client`'s connection was dropped, if it was: its queries then fail with pg's "not
 * queryable", which names neither the server's reason nor that the connection is gone.
 */
export function connectionLost(client: PoolClient): string | undefined {
  const e = lostConnections.get(client);
  if (e === undefined) return undefined;
  const code = (e as { code?: unknown }).code;
  return `the database connection was lost (${typeof code === 'string' ? `${code} ` : ''}${e.message})`;
}

/** A connection the server dropped at start-up (terminated, restarting) is opened again this many times. */
const OPEN_TRIES = 5;
/** The pause before the n-th try: 100, 200, 400, 800 ms. */
const openPause = (tries: number) => 100 * 2 ** (tries - 1);

/**
 * The server answered and then dropped the connection (pg_terminate_backend, a restart, a
 * failover, a proxy cutting it): worth opening again at once. A server that refuses or does
 * not answer at all is not retried here: the start fails, and systemd starts it again.
 */
function droppedConnection(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^(57P0[123]|08006|08003|ECONNRESET|EPIPE)$/.test(code)) return true;
  return e instanceof Error && /Connection terminated|not queryable/i.test(e.message);
}

/**
 * Opens a pool on `url`, refusing a database written by a newer receiver before anything
 * writes to it, then applies missing migrations (one transaction each, under an advisory
 * lock, so several receivers starting together migrate once). A connection dropped meanwhile
 * is opened again (OPEN_TRIES in all); every migration's transaction is all or nothing, so
 * the next try goes on from the version the database is at.
 */
export async function openPostgres(url: string, options: PostgresOpenOptions): Promise<Pool> {
  const pool = createPool(url, options);
  try {
    for (let tries = 1; ; tries++) {
      try {
        const client = await pool.connect();
        let failed = false;
        try {
          await migrate(client, url);
        } catch (e) {
          failed = true;
          throw e;
        } finally {
          // A connection that failed is not given back to the pool: it may be the dropped one.
          client.release(failed ? true : undefined);
        }
        return pool;
      } catch (e) {
        if (tries >= OPEN_TRIES || !droppedConnection(e)) throw e;
        await new Promise((r) => setTimeout(r, openPause(tries)));
      }
    }
  } catch (e) {
    await pool.end().catch(() => {});
    if (e instanceof ReceiverError) throw e;
    throw postgresError(e, `cannot open database ${redactUrl(url)}`);
  }
}

async function currentVersion(client: PoolClient): Promise<number> {
  const table = await client.query<{ t: string | null }>(`SELECT to_regclass('schema_version')::text AS t`);
  if (table.rows[0]?.t === null || table.rows[0]?.t === undefined) return 0;
  const v = await client.query<{ v: number }>('SELECT coalesce(max(version), 0)::bigint AS v FROM schema_version');
  return v.rows[0]?.v ?? 0;
}

function newerError(url: string, version: number): ReceiverError {
  return new ReceiverError(
    'schema',
    `database ${redactUrl(url)} was written by a newer receiver (schema version ${version}; this receiver knows up to ${LATEST_VERSION}). It was not changed.`,
    { hint: 'upgrade receiver to the version that wrote this database' },
  );
}

async function migrate(client: PoolClient, url: string): Promise<void> {
  // Read before any write: a newer database stays untouched.
  const found = await currentVersion(client);
  if (found > LATEST_VERSION) throw newerError(url, found);
  if (found === LATEST_VERSION) return;
  for (const m of migrations) {
    if (m.version <= found) continue;
    await client.query('BEGIN');
    try {
      // A migration may rewrite a big table, and may wait for another receiver's migration.
      await client.query(`SET LOCAL statement_timeout = 0`);
      await client.query(`SET LOCAL lock_timeout = '60s'`);
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await client.query(`CREATE TABLE IF NOT EXISTS schema_version (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
      // Re-read under the lock: another receiver may have migrated meanwhile.
      const version = await currentVersion(client);
      if (version > LATEST_VERSION) throw newerError(url, version);
      if (version < m.version) {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_version (version, name) VALUES ($1, $2)', [m.version, m.name]);
      }
      await client.query('COMMIT');
    } catch (e) {
      await client.query('ROLLBACK').catch(() => {});
      throw e;
    }
  }
}
