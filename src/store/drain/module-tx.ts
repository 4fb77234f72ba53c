import type { EffectDb, EffectRun, EffectStart, Lease, LedgerRow, TransactionalOutcome } from '../drain-types.js';
import type { Dialect, Steps } from '../sql.js';
import { DECISION_CHANGED, type DrainBackend, type ModuleTransaction } from './backend.js';
import { decide, lockEffectKey, moduleDone, moduleFailed, type Decided, type ModuleRun } from './ledger.js';
import { leaseHeld, renewLease } from './lease.js';
import { complete } from './settle.js';

/**
 * A module effect's transaction: the lease check, the ledger decision, the handler's writes,
 * the ledger row (done) and the attempt (ok) commit together or not at all. If the handler
 * throws, everything it wrote rolls back, and the failure is recorded in a transaction of
 * its own. A transaction that cannot commit (its connection lost mid-run) ends the same
 * way, as a failed attempt: once the handler has run, its run ends here, and is never
 * started again in place; the unit's retry runs it again.
 *
 * The lease guard differs with the database's locking. Where writers lock only the rows
 * they change (PostgreSQL), renewing the lease inside the transaction would lock the event
 * row while the handler runs, and ingest counting a duplicate of the event would wait for
 * it: there the lease is renewed in a short transaction of its own first, only checked
 * inside, and renewed again (locking the row until COMMIT) just before the ledger row is
 * written, so a drain whose lease was taken over while the handler ran commits nothing.
 * Under one write lock (SQLite) nothing can take the lease while the transaction is open:
 * it is renewed once, inside, first. But the transaction is the lock, and ingest and every
 * other lane wait for it: a handler that has not written a moment after it started (it
 * calls an API first) gives it back (see ModuleTransaction.handlerStarting), and its first
 * statement opens the transaction again, deciding again inside it. A decision that no
 * longer holds then (the lease taken over, the key's ledger row changed) commits nothing
 * of the run.
 */

/** A module effect to run: what DrainStore.runTransactionalEffect is given. */
export interface ModuleEffect {
  lease: Lease;
  attempt: number;
  start: EffectStart;
  handler: (db: EffectDb, run: EffectRun) => Promise<void>;
  /** Read when the transaction starts and again when it ends. */
  now: () => number;
  leaseMs: number;
  /** Mark the unit done in the same commit when the handler resolves. */
  completeOnOk: boolean;
}

const LOST = { action: 'lost' } as const;

export async function runTransactionalEffect(b: DrainBackend, m: ModuleEffect): Promise<TransactionalOutcome> {
  const d = b.dialect;
  const { lease, attempt, start, now, leaseMs } = m;
  const startedAt = now();
  if (!d.oneWriter && !(await b.write('renew lease', () => renewLease(d, lease, startedAt + leaseMs), { oneStatement: true }))) return LOST;

  const tx = await b.moduleTransaction('module effect');
  let decided: Decided | undefined;
  try {
    decided = await tx.run(begin(d, m, startedAt));
    if (decided === undefined) {
      await tx.rollback();
      return LOST;
    }
    if (decided.nonRun !== undefined) {
      await tx.commit();
      return decided.nonRun;
    }
  } catch (e) {
    throw await tx.fail(e);
  }
  /** The decision no longer held when the transaction opened again; nothing of the run was written. */
  let changed = false;
  const first = decided;
  tx.handlerStarting?.(function* () {
    const holds = yield* decidedAgain(d, m, first);
    changed ||= !holds;
    return holds;
  });

  // The transaction is held across this await (or opened again at the handler's first
  // statement, see handlerStarting): the handler's writes and the ledger row below commit
  // together, or not at all.
  const { handle, close } = effectDb(b.name, tx);
  const failure = await callHandler(m, handle, decided.run!, close);
  const row = decided.row;
  const run = (finishedAt: number): ModuleRun => ({ lease, attempt, start, row, run: decided.run!, startedAt, finishedAt });

  if (failure === undefined) {
    try {
      const ok = await tx.run(end(d, m, run(now())));
      if (ok === undefined) {
        await tx.rollback();
        return LOST;
      }
      await tx.commit();
      return { action: 'ok', attemptId: ok.attemptId, runs: (row?.runs ?? 0) + 1, completed: ok.completed };
    } catch (e) {
      // The handler's writes are gone with the ledger row (or, when only the COMMIT's answer
      // was lost, committed with the unit done). The run ends as a failed attempt, recorded
      // under the lease guard: the handler is never run again in place.
      const lost = tx.connectionLost();
      const cause = await tx.fail(e);
      if (changed) return decideOnceMore(b, m, run(now()), cause.message, row);
      const error = `the effect's transaction did not commit: ${lost ?? cause.message}; its writes were rolled back`;
      return recordFailure(b, run(now()), error, row, { guarded: true });
    }
  }

  await tx.rollback();
  if (changed) return decideOnceMore(b, m, run(now()), DECISION_CHANGED, row);
  // A handler whose connection was dropped under it failed on the driver's own words: say why.
  const error = tx.connectionLost() ?? message(failure.error);
  // One writer: the transaction may have given the lock back while the handler ran, and the lease may have gone since.
  return recordFailure(b, run(now()), error, row, { guarded: d.oneWriter });
}

/**
 * One writer: the run's decision no longer held when its transaction opened, so nothing of
 * it was written. Decided once more: what changed is recorded as such (the key done
 * meanwhile by another receiver on the file: skipped); a key still to run records the run
 * as failed, to be retried; the handler is never run again in place.
 */
async function decideOnceMore(b: DrainBackend, m: ModuleEffect, failed: ModuleRun, error: string, row: LedgerRow | undefined): Promise<TransactionalOutcome> {
  try {
    const now = await b.write('module effect', () => begin(b.dialect, m, m.now()));
    if (now === undefined) return LOST;
    if (now.nonRun !== undefined) return now.nonRun;
  } catch {
    // Recorded as failed below, or left to be written when the database answers again.
  }
  return recordFailure(b, failed, error, row, { guarded: true });
}

/**
 * Records a module run that ended without committing: the key failed and the attempt failed.
 * If the database fails meanwhile, the caller gets `unrecorded`, with the write to try again.
 * `guarded`: written only while the lease holds (the run's own commit may have landed).
 */
async function recordFailure(
  b: DrainBackend,
  failed: ModuleRun,
  error: string,
  row: LedgerRow | undefined,
  { guarded }: { guarded: boolean },
): Promise<TransactionalOutcome> {
  const d = b.dialect;
  const record = async () => {
    const attemptId = await b.write('record module failure', function* () {
      if (guarded && !(yield* leaseHeld(d, failed.lease))) return undefined;
      return yield* moduleFailed(d, failed, error);
    });
    return attemptId === undefined ? LOST : { action: 'failed' as const, attemptId, runs: row?.runs ?? 0, error };
  };
  try {
    return await record();
  } catch {
    return { action: 'unrecorded', error, record };
  }
}

/** The transaction's start: the key's lock, the lease guard, the ledger decision; undefined when the lease is lost. */
function* begin(d: Dialect, m: ModuleEffect, startedAt: number): Steps<Decided | undefined> {
  yield* lockEffectKey(d, m.start, m.leaseMs);
  const held = d.oneWriter ? yield* renewLease(d, m.lease, startedAt + m.leaseMs) : yield* leaseHeld(d, m.lease);
  if (!held) return undefined;
  return yield* decide(d, m.lease, m.attempt, m.start, startedAt);
}

/**
 * Inside the handler's transaction, opened again after it gave the lock back: the same
 * decision again, or false (the lease taken over, the key's ledger row changed).
 */
function* decidedAgain(d: Dialect, m: ModuleEffect, first: Decided): Steps<boolean> {
  const again = yield* begin(d, m, m.now());
  if (again?.run === undefined || again.run.runKey !== first.run?.runKey) return false;
  const [a, b] = [again.row, first.row];
  return a === undefined || b === undefined
    ? a === b
    : a.status === b.status && a.eventId === b.eventId && a.version === b.version && a.runs === b.runs && a.forcedRuns === b.forcedRuns;
}

/**
 * The handler resolved: the ledger row done and the attempt ok and (completeOnOk) the unit
 * done with its event's status derived, all in this transaction.
 * Undefined when the lease is lost (checked here last where writers run concurrently).
 */
function* end(d: Dialect, m: ModuleEffect, run: ModuleRun): Steps<{ attemptId: number; completed: boolean } | undefined> {
  if (!d.oneWriter && !(yield* renewLease(d, m.lease, run.finishedAt + m.leaseMs))) return undefined;
  const attemptId = yield* moduleDone(d, run);
  const completed = m.completeOnOk && (yield* complete(d, m.lease, run.finishedAt));
  return { attemptId, completed };
}

/**
 * Awaits the handler with the transaction's db and the run's key, and closes the db after
 * it, told whether the handler threw (gave up); returns what it threw, if it threw.
 */
async function callHandler(m: ModuleEffect, db: EffectDb, run: EffectRun, close: (gaveUp: boolean) => Promise<void>): Promise<{ error: unknown } | undefined> {
  let failure: { error: unknown } | undefined;
  try {
    await m.handler(db, { runKey: run.runKey });
  } catch (e) {
    failure = { error: e };
  } finally {
    await close(failure !== undefined);
  }
  return failure;
}

/** Statements that would end or nest the receiver's transaction. */
const TX_CONTROL = /^\s*(BEGIN|START|COMMIT|END|ROLLBACK|ABORT|SAVEPOINT|RELEASE|PREPARE\s+TRANSACTION)\b/i;

/**
 * The handler's view of the transaction: its statements run in it, one at a time in call
 * order, while the handler runs. Closed once the handler has returned or thrown.
 */
function effectDb(dialect: EffectDb['dialect'], tx: ModuleTransaction): { handle: EffectDb; close: (gaveUp: boolean) => Promise<void> } {
  let open = true;
  const exec = (sql: string, params: readonly unknown[], want: 'rows' | 'changes') => {
    // Checked when called: a statement issued while the handler runs belongs to the
    // transaction even if the handler returns before it finishes.
    if (!open) return Promise.reject(new Error('the effect transaction has ended; db is closed (await every query inside the handler)'));
    // The handler's writes belong to the receiver's transaction; it must not commit or end it.
    if (TX_CONTROL.test(sql)) return Promise.reject(new Error("a module effect runs inside the receiver's transaction; do not BEGIN, COMMIT or ROLLBACK"));
    return tx.statement(sql, params, want);
  };
  const handle: EffectDb = {
    dialect,
    async query<T>(sql: string, params: readonly unknown[] = []): Promise<T[]> {
      return (await exec(sql, params, 'rows')).rows as T[];
    },
    async run(sql: string, params: readonly unknown[] = []): Promise<{ changes: number }> {
      return { changes: (await exec(sql, params, 'changes')).changes };
    },
  };
  // Closing refuses new statements, then waits for any the handler left running: the ledger
  // row must not be written between one of them and its end.
  const close = async (gaveUp: boolean) => {
    open = false;
    await tx.handlerDone(gaveUp);
  };
  return { handle, close };
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
