import { sharedOps, type SharedOps, type StepRunner } from '../ops-steps.js';
import type { DropBodiesBatchResult, PurgeBatchResult } from '../ops-types.js';
import { sqliteError, whenUnlocked } from './errors.js';
import type { Db } from './open.js';
import type { Steps } from '../sql.js';
import { dialect, runSteps } from './steps.js';

/**
 * Operator operations on SQLite (see ../ops-types.ts): those both stores share run here
 * (../ops-steps.ts); the purge batches are SQLite's own. Writes are IMMEDIATE
 * transactions: the write lock is taken at BEGIN, where SQLite's busy timeout waits for a
 * running server's ingest, and is held only for one short batch.
 */

/** Runs `fn`, mapping SQLite errors (busy past the timeout -> unavailable) to ReceiverErrors. */
function guarded<T>(what: string, fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (e) {
    return Promise.reject(sqliteError(e, what));
  }
}

/**
 * Runs shared steps on this connection. Writes wait for the write lock as SQLite's busy
 * timeout allows; with `writeWaitMs`, on a connection whose own wait is a few ms (serve:
 * the event loop must not block on another writer), a busy database is also waited for
 * here, asynchronously, up to that long.
 */
export function stepRunner(db: Db, writeWaitMs?: number): StepRunner {
  const immediate = <T>(operation: () => Steps<T>) => db.transaction(() => runSteps(db, operation())).immediate();
  return {
    alone: (what, operation) => guarded(what, () => runSteps(db, operation)),
    // Reads that must agree with each other: one (deferred) read transaction.
    snapshot: (what, operation) => guarded(what, () => db.transaction(() => runSteps(db, operation()))()),
    write: (what, operation) =>
      writeWaitMs === undefined ? guarded(what, () => immediate(operation)) : whenUnlocked(what, Date.now() + writeWaitMs, () => immediate(operation)),
  };
}

/** The operations both stores share (../ops-steps.ts), on this connection; writes wait for the lock as stepRunner says. */
export function sharedOpsOn(db: Db, writeWaitMs?: number): SharedOps {
  return sharedOps(dialect, stepRunner(db, writeWaitMs));
}

export function purgeBatch(db: Db, receivedBefore: number, limit: number): Promise<PurgeBatchResult> {
  return guarded('purge', () => {
    const pick = db.prepare(`SELECT id FROM events WHERE status = 'done' AND received_at < ? ORDER BY received_at LIMIT ?`).pluck();
    const delAttempts = db.prepare(`DELETE FROM attempts WHERE event_id IN (SELECT value FROM json_each(?))`);
    const delConflicts = db.prepare(`DELETE FROM conflicts WHERE event_id IN (SELECT value FROM json_each(?))`);
    const delUnits = db.prepare(`DELETE FROM units WHERE event_id IN (SELECT value FROM json_each(?))`);
    // A body key never outlives its event: a replay of its body is answered from the event.
    const delBodyKeys = db.prepare(`DELETE FROM body_keys WHERE event_id IN (SELECT value FROM json_each(?))`);
    // status = 'done' again at the delete: only finished events are ever removed; the
    // effect ledger (effects) is not touched, so a redelivered id's effects stay skipped.
    const delEvents = db.prepare(`DELETE FROM events WHERE status = 'done' AND id IN (SELECT value FROM json_each(?))`);
    return db
      .transaction((): PurgeBatchResult => {
        const ids = pick.all(receivedBefore, limit) as number[];
        if (ids.length === 0) return { events: 0, attempts: 0, conflicts: 0 };
        const list = JSON.stringify(ids);
        const attempts = delAttempts.run(list).changes;
        const conflicts = delConflicts.run(list).changes;
        delUnits.run(list);
        const events = delEvents.run(list).changes;
        delBodyKeys.run(list);
        return { events, attempts, conflicts };
      })
      .immediate();
  });
}

export function dropBodiesBatch(db: Db, receivedBefore: number, limit: number): Promise<DropBodiesBatchResult> {
  return guarded('purge', () => {
    // Uses the partial index events_finished_bodies, so rows already dropped are not rescanned.
    const pick = db.prepare(`SELECT id FROM events WHERE status = 'done' AND received_at < ? AND body IS NOT NULL ORDER BY received_at LIMIT ?`).pluck();
    const dropConflicts = db.prepare(
      `UPDATE conflicts SET body = NULL, headers = NULL WHERE body IS NOT NULL AND event_id IN (SELECT value FROM json_each(?))`,
    );
    // Keys, body hash and stored answer stay: dedupe of a redelivery still works.
    const dropEvents = db.prepare(`UPDATE events SET body = NULL, headers = NULL WHERE status = 'done' AND id IN (SELECT value FROM json_each(?))`);
    return db
      .transaction((): DropBodiesBatchResult => {
        const ids = pick.all(receivedBefore, limit) as number[];
        if (ids.length === 0) return { events: 0, conflicts: 0 };
        const list = JSON.stringify(ids);
        const conflicts = dropConflicts.run(list).changes;
        const events = dropEvents.run(list).changes;
        return { events, conflicts };
      })
      .immediate();
  });
}
