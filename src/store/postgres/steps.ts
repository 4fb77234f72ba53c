import type { Dialect, Steps, Stmt } from '../sql.js';
import type { Conn } from './conn.js';
import type { PoolClient } from './open.js';

/** A constant first key for pg_advisory_xact_lock(int, int): the effect-key lock space. */
const EFFECT_KEY_LOCK = 0x72636b79; // "rcky"

/** A constant first key for pg_try_advisory_xact_lock(int, int): the lane lock space. */
const LANE_LOCK = 0x72636c6e; // "rcln"

/**
 * Serialises every decision about one effect key across processes until this transaction
 * ends. The wait may be as long as another process's module effect holds its transaction
 * (bounded by its lease), so it gets its own lock timeout; afterwards the key is ours, and
 * nothing else in the transaction waits on a lock for long.
 */
function lockEffectKey(effectKey: string, waitMs: number): Stmt {
  return {
    sql: `SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2, hashtext($3))`,
    params: [String(Math.max(1, Math.round(waitMs))), EFFECT_KEY_LOCK, effectKey],
  };
}

/** PostgreSQL's answers to the shared SQL's questions (see ../sql.ts). */
export const dialect: Dialect = {
  placeholder: (n) => `$${n}`,
  indexedBy: () => '',
  // Several receivers write at once: rows read and then changed stay ours until COMMIT.
  lockRows: ' FOR NO KEY UPDATE',
  // Another drain's claim (or an ingest batch counting a duplicate, or a module effect's
  // transaction) holds the row: skipped, not waited for.
  takeUnlocked: ' FOR NO KEY UPDATE SKIP LOCKED',
  oneWriter: false,
  // A lane another receiver is claiming in right now is left to it, not waited for.
  tryLockLane: (column) => `pg_try_advisory_xact_lock(${LANE_LOCK}, hashtext(${column}))`,
  leasePairs: (p) => `SELECT (l ->> 0)::bigint AS id, l ->> 1 AS owner FROM jsonb_array_elements(CAST(${p} AS jsonb)) AS l`,
  skipLocked: ' FOR UPDATE SKIP LOCKED',
  // The table, its indexes and its TOAST data.
  tableBytes: (table) => `SELECT pg_total_relation_size('${table}') AS bytes`,
  unindexed: (column) => column,
  idList: (p) => `SELECT unnest(${p}::bigint[])`,
  textList: (p) => `SELECT unnest(${p}::text[])`,
  ids: (ids) => ids,
  globMatch: (column, p) => `${column} LIKE ${p} ESCAPE '\\'`,
  // LIKE's own `%`, `_` and the escape character are literal; `*` and `?` become its wildcards.
  globPattern: (glob) =>
    glob
      .replace(/[\\%_]/g, '\\$&')
      .replaceAll('*', '%')
      .replaceAll('?', '_'),
  bytesContain: (column, p) => `position(${p}::bytea in ${column}) > 0`,
  lockEffectKey,
};

async function drive<T>(steps: Steps<T>, query: (s: Stmt) => Promise<{ rows: unknown[]; rowCount: number | null }>): Promise<T> {
  for (let next = steps.next(); ;) {
    if (next.done === true) return next.value;
    const r = await query(next.value);
    next = steps.next({ rows: r.rows, changes: r.rowCount ?? 0 });
  }
}

/** Runs shared steps on one connection (inside the caller's transaction), one statement at a time. */
export function runSteps<T>(client: PoolClient, steps: Steps<T>): Promise<T> {
  return drive(steps, (s) => client.query(s.sql, s.params as unknown[]));
}

/** Runs shared steps on the pool, each statement on its own (autocommit): for operations of one statement. */
export function runAlone<T>(c: Conn, what: string, steps: Steps<T>): Promise<T> {
  return drive(steps, (s) => c.query(what, s.sql, s.params));
}
