import type { Dialect, Steps, StmtResult } from '../sql.js';

/**
 * What a database gives the drain's operations (claim.ts, lease.ts, ledger.ts, settle.ts,
 * module-tx.ts), which are written once above it: ways to run statements (see sql.ts),
 * and what the databases really differ in, each said once by the backend that has it
 * (sqlite/drain-backend.ts, postgres/drain-backend.ts).
 */
export interface DrainBackend {
  /** What a module effect's handler is told it writes to (EffectDb.dialect). */
  readonly name: 'sqlite' | 'postgres';
  readonly dialect: Dialect;

  /** Steps that only read: in one read transaction where that costs nothing (SQLite), else each statement on its own. */
  read<T>(what: string, steps: Steps<T>): Promise<T>;

  /**
   * Steps that write, in one transaction. `steps` is called again if the transaction is
   * retried. Errors come out as ReceiverErrors naming `what`.
   */
  write<T>(what: string, steps: () => Steps<T>, options?: WriteOptions): Promise<T>;

  /**
   * The heartbeat's write, in a short transaction of its own that never waits for a
   * transaction open on the drain's connection. Where that transaction holds the
   * database's one write lock (SQLite: a module effect's, or a group's), no other drain can
   * take a claim while it is open, and the steps run just before it commits instead.
   */
  renew(what: string, steps: () => Steps<void>): Promise<void>;

  /**
   * Resolves once every commit made so far is on disk. The caller is about to act outside
   * the database (an external effect) on what it committed.
   */
  sync(what: string): Promise<void>;

  /**
   * Runs `fn` (a claim and its events' steps) letting the backend share transactions
   * between its writes (see DrainStore.inGroup).
   */
  inGroup<T>(fn: () => Promise<T>): Promise<T>;

  /** Commits the current group's transaction, if one is open (see DrainStore.commitGroup). */
  commitGroup(): Promise<void>;

  /** Opens the transaction a module effect's handler runs in (see module-tx.ts). */
  moduleTransaction(what: string): Promise<ModuleTransaction>;
}

/** Why a module effect's transaction, opened again, refused its step or statement (see handlerStarting). */
export const DECISION_CHANGED =
  "the module effect's run no longer held when its transaction opened (its lease was taken over, or its key's ledger row changed); nothing of it was written";

export interface WriteOptions {
  /** The steps are one statement, atomic by itself: PostgreSQL runs it without BEGIN and COMMIT. */
  oneStatement?: boolean;
  /** Committed before the write resolves, never left in a group's transaction to commit later. */
  commitNow?: boolean;
}

/**
 * A transaction held open across an await (a module effect's handler). Its steps and the
 * handler's statements run in it, in call order; it ends with commit, rollback or fail.
 */
export interface ModuleTransaction {
  /** Runs steps in the transaction. */
  run<T>(steps: Steps<T>): T | Promise<T>;
  /**
   * Where the transaction is the database's one write lock (SQLite): the handler starts
   * now, with the decision made. If it has issued no statement a moment later, the
   * transaction commits what it holds (the lease renewal) and gives the lock back; the next
   * step or statement opens it again, running `reopen`'s steps first, and fails with
   * DECISION_CHANGED, writing nothing, when they say the decision no longer holds.
   */
  handlerStarting?(reopen: () => Steps<boolean>): void;
  /**
   * One statement of the handler's own, for its rows (EffectDb.query) or its changed-row
   * count (EffectDb.run). One that fails (and is caught by the handler) leaves the
   * transaction as it was before it.
   */
  statement(sql: string, params: readonly unknown[], want: 'rows' | 'changes'): Promise<StmtResult>;
  /**
   * The handler has returned or thrown (`gaveUp`: its time ran out, or it threw): waits for
   * any statement it left running without awaiting, cancelling it when it gave up.
   */
  handlerDone(gaveUp: boolean): Promise<void>;
  commit(): Promise<void>;
  rollback(): Promise<void>;
  /** A step or the commit failed: rolls back, and gives the error to throw. */
  fail(e: unknown): Promise<Error>;
  /** Why the transaction's connection was lost, when it was (the handler's error then says little). */
  connectionLost(): string | undefined;
}
