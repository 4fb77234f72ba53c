/**
 * The statement protocol every store operation is written in, once for both databases. An
 * operation is a generator: it yields each statement with its parameters and gets back
 * its rows and changed-row count. Each backend runs the steps with its own driver: SQLite
 * synchronously inside a better-sqlite3 transaction (nothing else runs on the connection
 * between two statements of one transaction, and no statement costs a promise),
 * PostgreSQL awaiting each statement on one connection. Where the databases really
 * differ, the SQL asks the backend's `Dialect`, a short list of named capabilities, never
 * the engine's name.
 */

/** One statement and its parameters, in the order its placeholders appear. */
export interface Stmt {
  sql: string;
  params: readonly unknown[];
}

/** What a statement gave back: its rows (a SELECT, or RETURNING) and the rows it changed. */
export interface StmtResult {
  rows: unknown[];
  changes: number;
}

/** An operation written once: it yields statements and returns its result. */
export type Steps<T> = Generator<Stmt, T, StmtResult>;

/** What differs between the databases, as far as the shared SQL is concerned. */
export interface Dialect {
  /**
   * The n-th parameter (from 1). Every shared statement uses each parameter once, in
   * order, so SQLite's `?` and PostgreSQL's `$n` bind the same array.
   */
  placeholder(n: number): string;
  /**
   * Names the index a query must walk (SQLite's `INDEXED BY`: without statistics its
   * planner may walk every finished event instead); empty where the planner is trusted.
   */
  indexedBy(index: string): string;
  /**
   * Appended to a SELECT whose rows the transaction goes on to change: locks them until
   * COMMIT where writers run concurrently (PostgreSQL); empty where the transaction
   * already holds the database's one write lock (SQLite's BEGIN IMMEDIATE).
   */
  lockRows: string;
  /**
   * Appended to a SELECT choosing rows the statement goes on to change (a claim, the
   * heartbeat): takes only rows no other transaction holds and leaves the others, where
   * writers run concurrently (PostgreSQL); empty where the write lock already excludes
   * every other writer (SQLite).
   */
  takeUnlocked: string;
  /**
   * The database has one write lock: a write transaction excludes every other writer
   * until it ends (SQLite). False where writers lock only the rows they change and run
   * concurrently (PostgreSQL).
   */
  oneWriter: boolean;
  /**
   * A list of (event id, lease owner) pairs bound as one parameter (JSON text, see
   * `leaseList` in drain/lease.ts), as a subquery of rows (id, owner).
   */
  leasePairs(placeholder: string): string;
  /**
   * Appended to a SELECT inside a batch delete: takes the rows no other transaction holds
   * and leaves the others for a later run (PostgreSQL), so a purge never waits on a drain;
   * empty where the write lock already excludes every other writer (SQLite).
   */
  skipLocked: string;
  /**
   * A SELECT giving one row `bytes`: the disk space of a table with its indexes
   * (SQLite's dbstat, PostgreSQL's pg_total_relation_size).
   */
  tableBytes(table: string): string;
  /**
   * How a column is written in a WHERE so the planner does not use an index on it. SQLite,
   * without statistics, takes `source = ?` as selective and reads every event of that
   * source through the (source, delivery_id) index, then sorts them by id; walking ids
   * newest first and filtering fills a page after a few rows instead (`+source`).
   * PostgreSQL plans from statistics: the column as is.
   */
  unindexed(column: string): string;
  /** A list of ids bound as one parameter, as a subquery of ids (`x IN (...)`). */
  idList(placeholder: string): string;
  /** A list of texts (delivery ids) bound as one parameter, as a subquery (`x IN (...)`). */
  textList(placeholder: string): string;
  /** The value bound for `idList` (numbers) or `textList` (texts). */
  ids(ids: readonly number[] | readonly string[]): unknown;
  /**
   * `column` matches the pattern bound at `placeholder`, case-sensitively: SQLite's GLOB
   * (its LIKE ignores ASCII case), PostgreSQL's LIKE. Bind `globPattern(glob)`.
   */
  globMatch(column: string, placeholder: string): string;
  /** A glob (`*` any run of characters, `?` one character, nothing else special) as globMatch's pattern. */
  globPattern(glob: string): string;
  /** A BLOB (SQLite) or bytea (PostgreSQL) column contains the bytes bound at `placeholder` (a Buffer); NULL never does. */
  bytesContain(column: string, placeholder: string): string;
  /**
   * A transaction-scoped lock on one effect key that serialises every decision about it
   * across processes (PostgreSQL's advisory lock); absent where the write lock already
   * serialises every writer (SQLite).
   */
  lockEffectKey?: (effectKey: string, waitMs: number) => Stmt;
  /**
   * A condition that takes a transaction-scoped lock on the lane named by `column` when no
   * other transaction holds it, and is false when one does (PostgreSQL's
   * pg_try_advisory_xact_lock): two receivers claiming at once never decide about one
   * lane together. Absent where the write lock already serialises every claim (SQLite).
   */
  tryLockLane?: (column: string) => string;
}

/** Builds one SQL text, numbering its placeholders in the order `p()` is called. */
export function sqlText(d: Dialect, build: (p: () => string) => string): string {
  let n = 0;
  return build(() => d.placeholder(++n));
}

/** Texts built once per dialect: `memo(build)(d)` builds them on first use. */
export function memo<T>(build: (d: Dialect) => T): (d: Dialect) => T {
  const cache = new WeakMap<Dialect, T>();
  return (d) => {
    let t = cache.get(d);
    if (t === undefined) cache.set(d, (t = build(d)));
    return t;
  };
}

export function* rows<R>(sql: string, params: readonly unknown[] = []): Steps<R[]> {
  return (yield { sql, params }).rows as R[];
}

export function* first<R>(sql: string, params: readonly unknown[] = []): Steps<R | undefined> {
  return (yield* rows<R>(sql, params))[0];
}

export function* changes(sql: string, params: readonly unknown[] = []): Steps<number> {
  return (yield { sql, params }).changes;
}
