import { DECISION_CHANGED, type DrainBackend, type ModuleTransaction, type WriteOptions } from '../drain/backend.js';
import type { Steps, StmtResult } from '../sql.js';
import { sqliteError, whenUnlocked } from './errors.js';
import { ingestIsWaiting, yieldToIngest } from './lock-priority.js';
import type { Db } from './open.js';
import { dialect, runSteps } from './steps.js';
import type { WalSync } from './wal-sync.js';

/**
 * The drain's SQLite, on a connection of its own (a module effect holds a transaction
 * across an await; it must not share the ingest connection). What SQLite differs in:
 * - One write lock. Every write runs in BEGIN IMMEDIATE, retried while another process
 *   holds the lock without blocking the thread (whenUnlocked), after giving way to an
 *   ingest thread that waits for it (lock-priority.ts). Statements run synchronously inside
 *   the transaction, so nothing else on the connection runs between two of them.
 * - One connection for every lane: a module effect's transaction stays open across the
 *   handler's awaits, and another lane's write must not land inside it (better-sqlite3
 *   would nest it as a savepoint, to commit or roll back with the module's). So every use
 *   of the connection takes the connection's turn (`#turn`), and a module transaction holds
 *   it from BEGIN to its end: other lanes' writes wait for it; their effects do not.
 * - serve's group commit: the drain's steps share transactions (see inGroup).
 * - Durability is explicit in serve (wal-sync.ts): `sync()` awaits an fdatasync of the WAL
 *   (before an external effect acts); every other commit is made durable soon after.
 * - The heartbeat never waits for a transaction open on the connection (see renew).
 */
export interface DrainConnection {
  db: Db;
  /** How long a drain write waits for another process's write lock before failing. */
  busyTimeoutMs: number;
  /**
   * `serve`: the connection commits with synchronous=NORMAL and durability is explicit (see
   * wal-sync.ts). Absent: synchronous=FULL, every commit durable when it returns (CLI, tests).
   */
  wal?: WalSync | undefined;
  /** serve: raised while the ingest thread waits for the write lock; the drain gives way (lock-priority.ts). */
  ingestWaiting?: Int32Array | undefined;
}

/**
 * How long a group's transaction stays open before the next step commits it. The ingest
 * thread waits for the write lock meanwhile, so this bounds what a group adds to a delivery.
 */
const GROUP_MS = 3;

/** serve's group of drain steps sharing one transaction (see inGroup). */
interface Group {
  /** When its transaction opened; undefined while none is open. */
  openSince: number | undefined;
}

/** A module effect's open transaction: the connection's turn it holds, and the group it is a savepoint of. */
interface Held {
  done: () => void;
  g: Group | undefined;
}

/**
 * How long a module handler may go without a statement before its transaction gives the
 * write lock back (see ModuleTransaction.handlerStarting): ingest waits at most this long
 * for a handler that calls an API before it writes. A no-op handler's round trip to its
 * host is well under it, and then pays nothing for the lock given back and taken again.
 */
const HANDLER_IDLE_MS = 10;

/** The module effect's own transaction, or its savepoint inside a group's. */
const EFFECT_SAVEPOINT = 'receiver_module_effect';

export class SqliteDrainBackend implements DrainBackend {
  readonly name = 'sqlite';
  readonly dialect = dialect;
  readonly #c: DrainConnection;
  /** While callers are inside inGroup: the group's transaction, open from its first write until it commits. */
  #group: Group | undefined;
  /** How many callers are inside inGroup (lanes run side by side). */
  #groupUsers = 0;
  /** A heartbeat found a transaction open on the connection and left its renewal to it. */
  #deferred: (() => Steps<void>) | undefined;
  /** The connection's turn: settled when the current user of the connection is done. */
  #turnTail: Promise<void> = Promise.resolve();

  constructor(c: DrainConnection) {
    this.#c = c;
  }

  read<T>(what: string, steps: Steps<T>): Promise<T> {
    return this.#inTurn(() => {
      const db = this.#c.db;
      try {
        if (db.inTransaction) return runSteps(db, steps);
        // One read transaction for every statement: whether another connection wrote since
        // (and this one must read again the pages it needs) is found out once, not per statement.
        db.exec('BEGIN');
        try {
          return runSteps(db, steps);
        } finally {
          db.exec('COMMIT');
        }
      } catch (e) {
        throw sqliteError(e, what);
      }
    });
  }

  write<T>(what: string, steps: () => Steps<T>, options: WriteOptions = {}): Promise<T> {
    return this.#inTurn(async () => {
      const result = await this.#immediate(what, () => runSteps(this.#c.db, steps()));
      // In a group, durability follows the group's commit.
      if (options.commitNow === true) this.#commitGroup();
      if (this.#group === undefined) this.#durableSoon();
      return result;
    });
  }

  async renew(what: string, steps: () => Steps<void>): Promise<void> {
    // A module effect's or a group's transaction is open: it holds the write lock, so no
    // other drain can take a claim meanwhile; the renewal runs just before it commits.
    if (this.#c.db.inTransaction) {
      this.#deferred = steps;
      return;
    }
    await this.#inTurn(async () => {
      if (this.#c.db.inTransaction) {
        this.#deferred = steps;
        return;
      }
      // Never opens a group's transaction (it would stay open while an external effect runs).
      await this.#immediate(what, () => runSteps(this.#c.db, steps()), { alone: true });
      this.#durableSoon();
    });
  }

  /** Waits for the connection's turn, then gives it back through the function returned. */
  #takeTurn(): Promise<() => void> {
    let done!: () => void;
    const mine = new Promise<void>((resolve) => (done = resolve));
    const before = this.#turnTail;
    this.#turnTail = before.then(() => mine);
    return before.then(() => done);
  }

  async #inTurn<T>(fn: () => T | Promise<T>): Promise<T> {
    const done = await this.#takeTurn();
    try {
      return await fn();
    } finally {
      done();
    }
  }

  async sync(what: string): Promise<void> {
    try {
      await this.#c.wal?.sync();
    } catch (e) {
      throw sqliteError(e, what);
    }
  }

  /**
   * serve's drain: the steps of a claim batch share transactions, committed every GROUP_MS
   * (and when the ingest thread waits for the lock, before an external effect acts, right
   * after its result is recorded, and at the end). A COMMIT writes every page the
   * transaction touched to the log; a no-op module effect's own statements cost less than
   * that. Steps inside run as savepoints of the group's transaction (better-sqlite3 nests
   * transaction functions that way), so a failing step rolls back only itself. Only with
   * explicit durability (`wal`): elsewhere each step commits. A group that fails to commit
   * takes its claims with it: those events are claimed again.
   */
  async inGroup<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#c.wal === undefined) return fn();
    this.#group ??= { openSince: undefined };
    this.#groupUsers += 1;
    try {
      return await fn();
    } finally {
      this.#groupUsers -= 1;
      if (this.#groupUsers === 0) {
        await this.#inTurn(() => {
          try {
            this.#commitGroup();
          } finally {
            if (this.#groupUsers === 0) this.#group = undefined;
          }
        });
      }
    }
  }

  commitGroup(): Promise<void> {
    return this.#inTurn(() => this.#commitGroup());
  }

  async moduleTransaction(what: string): Promise<ModuleTransaction> {
    const db = this.#c.db;
    const rollback = (g: Group | undefined) => {
      if (g !== undefined) {
        db.exec(`ROLLBACK TO ${EFFECT_SAVEPOINT}`);
        db.exec(`RELEASE ${EFFECT_SAVEPOINT}`);
      } else if (db.inTransaction) db.exec('ROLLBACK');
    };
    const commit = (g: Group | undefined) => {
      if (g !== undefined) {
        db.exec(`RELEASE ${EFFECT_SAVEPOINT}`);
        return;
      }
      this.#runDeferred();
      db.exec('COMMIT');
      this.#durableSoon();
    };
    // The connection is this transaction's while it is open (see the class comment): from
    // here, and again from the handler's first statement if it gave the lock back meanwhile.
    const open = async (check?: () => Steps<boolean>): Promise<Held> => {
      const done = await this.#takeTurn();
      const g = this.#group;
      try {
        if (g !== undefined) {
          await this.#enterGroup(g);
          db.exec(`SAVEPOINT ${EFFECT_SAVEPOINT}`);
        } else {
          yieldToIngest(this.#c.ingestWaiting);
          await whenUnlocked(what, Date.now() + this.#c.busyTimeoutMs, () => db.exec('BEGIN IMMEDIATE'));
        }
      } catch (e) {
        done();
        throw e;
      }
      if (check === undefined) return { done, g };
      let holds: boolean;
      try {
        holds = runSteps(db, check());
      } catch (e) {
        rollback(g);
        done();
        throw sqliteError(e, what);
      }
      if (!holds) {
        rollback(g);
        done();
        throw new Error(DECISION_CHANGED);
      }
      return { done, g };
    };
    /** The open transaction (or its opening again); undefined once it gave the lock back, or ended. */
    let held: Promise<Held> | undefined = Promise.resolve(await open());
    let reopen: (() => Steps<boolean>) | undefined;
    let idle: NodeJS.Timeout | undefined;
    const stopIdle = () => {
      clearTimeout(idle);
      idle = undefined;
    };
    const using = (): Promise<Held> => {
      stopIdle();
      return (held ??= open(reopen));
    };
    /** Runs the transaction's last step and gives the connection back, whatever happens; nothing to do if it is not open. */
    const last = async <T>(fn: (g: Group | undefined) => T, unopened: T): Promise<T> => {
      stopIdle();
      const h = held;
      held = undefined;
      if (h === undefined) return unopened;
      let o: Held;
      try {
        o = await h;
      } catch {
        return unopened;
      }
      try {
        return fn(o.g);
      } finally {
        o.done();
      }
    };
    return {
      run: async (steps) => {
        await using();
        return runSteps(db, steps);
      },
      handlerStarting: (check) => {
        reopen = check;
        idle = setTimeout(() => {
          idle = undefined;
          // Nothing written yet but the lease renewal: committed, and the lock given back.
          void last((g) => {
            try {
              commit(g);
            } catch {
              rollback(g);
            }
          }, undefined);
        }, HANDLER_IDLE_MS);
      },
      statement: async (sql, params, want) => {
        await using();
        const s = db.prepare(sql);
        if (want === 'rows' && s.reader) return { rows: s.all(...params), changes: 0 } satisfies StmtResult;
        return { rows: [], changes: s.run(...params).changes };
      },
      handlerDone: async () => {},
      commit: () => last(commit, undefined),
      rollback: () => last(rollback, undefined),
      fail: async (e) => {
        const failed = await last((g) => {
          rollback(g);
          return this.#stepFailed(e, what);
        }, undefined);
        return failed ?? (e instanceof Error ? e : sqliteError(e, what));
      },
      connectionLost: () => undefined,
    };
  }

  /**
   * Runs `fn` in one IMMEDIATE transaction; SQLITE_BUSY is retried without blocking the
   * thread. In a group, a savepoint of the group's transaction instead (`alone`: unless
   * the group's transaction is not open).
   */
  async #immediate<T>(what: string, fn: () => T, options: { alone?: boolean } = {}): Promise<T> {
    const c = this.#c;
    const g = this.#group;
    if (g === undefined || (options.alone === true && g.openSince === undefined)) {
      const tx = c.db.transaction(() => {
        this.#runDeferred();
        return fn();
      });
      yieldToIngest(c.ingestWaiting);
      return whenUnlocked(what, Date.now() + c.busyTimeoutMs, () => tx.immediate());
    }
    await this.#enterGroup(g);
    try {
      return c.db.transaction(fn)();
    } catch (e) {
      throw this.#stepFailed(e, what);
    }
  }

  /** Before a write in a group: commit one that is old enough (or that ingest waits for), and open one if none is. */
  async #enterGroup(g: Group): Promise<void> {
    const c = this.#c;
    if (g.openSince !== undefined && (Date.now() - g.openSince >= GROUP_MS || ingestIsWaiting(c.ingestWaiting))) this.#commitGroup();
    if (g.openSince !== undefined) return;
    yieldToIngest(c.ingestWaiting);
    await whenUnlocked('drain group', Date.now() + c.busyTimeoutMs, () => c.db.exec('BEGIN IMMEDIATE'));
    const openSince = (g.openSince = Date.now());
    // Lanes wait outside the database (an effect running) while the group is open: it is
    // committed GROUP_MS after it opened whether or not another step comes.
    setTimeout(() => {
      if (this.#group?.openSince !== openSince) return;
      this.#inTurn(() => {
        if (this.#group?.openSince === openSince) this.#commitGroup();
      }).catch(() => {
        // Rolled back: its claims went with it, and their next guarded step says so.
      });
    }, GROUP_MS).unref();
  }

  /** Commits the group's transaction if one is open. A failed COMMIT rolls it all back: claims included. */
  #commitGroup(): void {
    const g = this.#group;
    if (g?.openSince === undefined) return;
    g.openSince = undefined;
    const db = this.#c.db;
    try {
      this.#runDeferred();
      db.exec('COMMIT');
    } catch (e) {
      if (db.inTransaction) db.exec('ROLLBACK');
      throw sqliteError(e, 'drain group commit');
    }
    this.#durableSoon();
  }

  /**
   * A step failed and rolled back its own part. In a group, the group's transaction is ended
   * too (committed if it can be), so the write lock is not held while the caller waits to try
   * again: another process may be the one to free what failed (a purge on a full disk).
   */
  #stepFailed(e: unknown, what: string): Error {
    try {
      this.#commitGroup();
    } catch {
      // Rolled back: its claims went with it, and those events are claimed again.
    }
    return sqliteError(e, what);
  }

  /** Inside a transaction about to commit: the renewal a heartbeat left to it. */
  #runDeferred(): void {
    const steps = this.#deferred;
    if (steps === undefined) return;
    this.#deferred = undefined;
    runSteps(this.#c.db, steps());
  }

  /** After a commit whose loss in a power cut would only repeat work (claims, settles, module effects). */
  #durableSoon(): void {
    this.#c.wal?.syncSoon();
  }
}
