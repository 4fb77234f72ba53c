import * as steps from '../drain-steps.js';
import type { Steps } from '../sql.js';
import type { AttemptRecord, ClaimedEvent, EffectDb, EffectDecision, EffectFinish, EffectStart, Lease, TransactionalOutcome } from '../drain-types.js';
import { CLAIM_COLUMNS, toClaimed, type ClaimDbRow } from '../rows.js';
import { sqliteError, whenUnlocked } from './errors.js';
import type { Db } from './open.js';
import { dialect, runSteps, stmt } from './steps.js';
import type { WalSync } from './wal-sync.js';
import { ingestIsWaiting, yieldToIngest } from './lock-priority.js';

/**
 * The drain's SQLite operations, one small function each, on the drain's own connection
 * (a module effect holds a transaction across an await; it must not share the ingest
 * connection's group commit). Every write runs in BEGIN IMMEDIATE, retried asynchronously
 * while another process holds the write lock, so the event loop (HTTP ingress) never blocks.
 * The ledger and settle protocol is ../drain-steps.ts; SQLite's own here: the claim, the
 * heartbeat's deferral to an open module effect, release, and WAL durability.
 */
export interface DrainConnection {
  db: Db;
  /** How long a drain write waits for another process's write lock before failing. */
  busyTimeoutMs: number;
  /**
   * `serve`: the connection commits with synchronous=NORMAL and durability is explicit (see
   * wal-sync.ts): awaited before an external effect acts, soon after everything else.
   * Absent: synchronous=FULL, every commit durable when it returns (CLI, tests).
   */
  wal?: WalSync | undefined;
  /** A heartbeat found a module effect's transaction open and left its renewal to it (see renewLeases). */
  renewal?: { owners: Set<string>; leaseMs: number } | undefined;
  /** Inside inGroup: the group's transaction, open from its first write until it commits. */
  group?: { openSince: number | undefined } | undefined;
  /** serve: raised while the ingest thread waits for the write lock; the drain gives way (lock-priority.ts). */
  ingestWaiting?: Int32Array | undefined;
}

/**
 * How long a group's transaction stays open before the next step commits it. The ingest
 * thread waits for the write lock meanwhile, so this bounds what a group adds to a delivery.
 */
const GROUP_MS = 3;

/**
 * serve's drain: the steps of a claim batch share transactions, committed every GROUP_MS
 * (and before an external effect acts, right after its result is recorded, and at the end).
 * A COMMIT writes every page the transaction touched to the log; a no-op module effect's
 * own statements cost less than that. Steps inside run as savepoints of the group's
 * transaction (better-sqlite3 nests transaction functions that way), so a failing step
 * rolls back only itself. Only with explicit durability (`wal`): elsewhere each step commits.
 */
export async function inGroup<T>(c: DrainConnection, fn: () => Promise<T>): Promise<T> {
  if (c.wal === undefined || c.group !== undefined) return fn();
  c.group = { openSince: undefined };
  try {
    return await fn();
  } finally {
    try {
      commitGroup(c);
    } finally {
      c.group = undefined;
    }
  }
}

/** Commits the group's transaction if one is open. A failed COMMIT rolls it all back: claims included. */
function commitGroup(c: DrainConnection): void {
  const g = c.group;
  if (g?.openSince === undefined) return;
  g.openSince = undefined;
  try {
    renewDeferred(c, Date.now());
    c.db.exec('COMMIT');
  } catch (e) {
    if (c.db.inTransaction) c.db.exec('ROLLBACK');
    throw sqliteError(e, 'drain group commit');
  }
  durableSoon(c);
}

/** Before a write in a group: commit one that is old enough, and open one if none is. */
async function enterGroup(c: DrainConnection, g: { openSince: number | undefined }): Promise<void> {
  if (g.openSince !== undefined && (Date.now() - g.openSince >= GROUP_MS || ingestIsWaiting(c.ingestWaiting))) commitGroup(c);
  if (g.openSince !== undefined) return;
  yieldToIngest(c.ingestWaiting);
  await whenUnlocked('drain group', Date.now() + c.busyTimeoutMs, () => c.db.exec('BEGIN IMMEDIATE'));
  g.openSince = Date.now();
}

/** After a commit whose loss in a power cut would only repeat work (claims, settles, module effects). */
function durableSoon(c: DrainConnection): void {
  c.wal?.syncSoon();
}

/**
 * Runs `fn` in one IMMEDIATE transaction; SQLITE_BUSY is retried without blocking the
 * thread. In a group, a savepoint of the group's transaction instead.
 */
async function immediate<T>(c: DrainConnection, what: string, fn: () => T, options: { alone?: boolean } = {}): Promise<T> {
  const tx = c.db.transaction(fn);
  const g = c.group;
  if (g === undefined || (options.alone === true && g.openSince === undefined)) {
    yieldToIngest(c.ingestWaiting);
    return whenUnlocked(what, Date.now() + c.busyTimeoutMs, () => tx.immediate());
  }
  await enterGroup(c, g);
  try {
    return tx();
  } catch (e) {
    throw stepFailed(c, e, what);
  }
}

/**
 * A step failed and rolled back its own part. In a group, the group's transaction is ended
 * too (committed if it can be), so the write lock is not held while the caller waits to try
 * again: another process may be the one to free what failed (a purge on a full disk).
 */
function stepFailed(c: DrainConnection, e: unknown, what: string): Error {
  try {
    commitGroup(c);
  } catch {
    // Rolled back: its claims went with it, and those events are claimed again.
  }
  return sqliteError(e, what);
}

/** The shared steps of one operation, in one IMMEDIATE transaction. */
function write<T>(c: DrainConnection, what: string, operation: () => Steps<T>): Promise<T> {
  return immediate(c, what, () => runSteps(c.db, operation()));
}

// The oldest due events in arrival order: pending and due, or processing under an expired
// lease (a crashed or stalled drain's claim). One UPDATE: the claim is atomic under the
// write lock, so two drains never hold one event. INDEXED BY: without statistics SQLite
// may answer "the smallest ids" by walking every finished event in rowid order.
const CLAIM = `UPDATE events
  SET status = 'processing', lease_owner = ?, lease_expires_at = ?, attempts = attempts + 1
  WHERE id IN (
    SELECT id FROM (
      SELECT id FROM (SELECT id FROM events INDEXED BY events_pending WHERE status = 'pending' AND next_attempt_at <= ? ORDER BY id LIMIT ?)
      UNION ALL
      SELECT id FROM (SELECT id FROM events INDEXED BY events_leased WHERE status = 'processing' AND lease_expires_at <= ? ORDER BY id LIMIT ?)
    ) ORDER BY id LIMIT ?
  )
  RETURNING ${CLAIM_COLUMNS}`;

export async function claimEvents(c: DrainConnection, owner: string, now: number, leaseMs: number, limit: number): Promise<ClaimedEvent[]> {
  const rows = await immediate(c, 'claim events', () => stmt(c.db, CLAIM).all(owner, now + leaseMs, now, limit, now, limit, limit) as ClaimDbRow[]);
  if (rows.length > 0) durableSoon(c);
  // RETURNING gives no order: the drain runs them oldest first.
  return rows.map(toClaimed).sort((a, b) => a.id - b.id);
}

export async function claimEvent(c: DrainConnection, owner: string, now: number, leaseMs: number): Promise<ClaimedEvent | undefined> {
  return (await claimEvents(c, owner, now, leaseMs, 1))[0];
}

/** A read outside any transaction, its errors mapped. */
function read<T>(c: DrainConnection, what: string, operation: Steps<T>): Promise<T> {
  try {
    return Promise.resolve(runSteps(c.db, operation));
  } catch (e) {
    return Promise.reject(sqliteError(e, what));
  }
}

export function nextDueAt(c: DrainConnection): Promise<number | undefined> {
  return read(c, 'next due event', steps.nextDueAt(dialect));
}

export function renewLease(c: DrainConnection, lease: Lease, now: number, leaseMs: number): Promise<boolean> {
  return write(c, 'renew lease', () => steps.renewLease(dialect, lease, now + leaseMs));
}

// Every claim of one claim batch shares its owner: a module effect's transaction renews them
// all when it ends if a heartbeat came while it was open (and could not write).
const RENEW_BATCH = `UPDATE events SET lease_expires_at = ? WHERE status = 'processing' AND lease_owner = ?`;

/** Inside a module effect's transaction, before COMMIT: the renewals a heartbeat left to it. */
function renewDeferred(c: DrainConnection, now: number): void {
  const r = c.renewal;
  if (r === undefined) return;
  c.renewal = undefined;
  for (const owner of r.owners) stmt(c.db, RENEW_BATCH).run(now + r.leaseMs, owner);
}

export async function renewLeases(c: DrainConnection, leases: readonly Lease[], now: number, leaseMs: number): Promise<void> {
  if (leases.length === 0) return;
  // A module effect's transaction is open on this connection: it holds the write lock, so no
  // other drain can take a claim meanwhile; it renews these claims when it ends.
  if (c.db.inTransaction) {
    c.renewal ??= { owners: new Set(), leaseMs };
    for (const lease of leases) c.renewal.owners.add(lease.owner);
    return;
  }
  // Alone: a heartbeat never opens a group's transaction (it would stay open while an
  // external effect runs).
  await immediate(
    c,
    'renew leases',
    () => {
      for (const lease of leases) runSteps(c.db, steps.renewLease(dialect, lease, now + leaseMs));
    },
    { alone: true },
  );
}

const RELEASE = `UPDATE events SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = max(attempts - 1, 0)
  WHERE id = ? AND lease_owner = ? AND status = 'processing'`;

export async function releaseEvents(c: DrainConnection, leases: readonly Lease[]): Promise<void> {
  if (leases.length === 0) return;
  await immediate(c, 'release events', () => {
    for (const lease of leases) stmt(c.db, RELEASE).run(lease.eventId, lease.owner);
  });
  durableSoon(c);
}

export function claimOwners(c: DrainConnection): Promise<string[]> {
  return read(c, 'claim owners', steps.claimOwners(dialect));
}

export async function expireClaims(c: DrainConnection, ownerPrefix: string, now: number): Promise<number> {
  const n = await write(c, 'expire claims', () => steps.expireClaims(dialect, ownerPrefix, now));
  durableSoon(c);
  return n;
}

export async function beginEffect(
  c: DrainConnection,
  lease: Lease,
  attempt: number,
  start: EffectStart,
  now: number,
  leaseMs: number,
): Promise<EffectDecision> {
  const decision = await write(c, 'begin effect', () => steps.beginEffect(dialect, lease, attempt, start, now, leaseMs));
  // Committed before the effect acts (and the write lock free while it runs).
  commitGroup(c);
  // The running mark is on disk before the effect acts: after a power cut too, a repeat is counted.
  if (decision.action === 'run') await syncNow(c, 'begin effect');
  else durableSoon(c);
  return decision;
}

async function syncNow(c: DrainConnection, what: string): Promise<void> {
  try {
    await c.wal?.sync();
  } catch (e) {
    throw sqliteError(e, what);
  }
}

export async function finishEffect(c: DrainConnection, f: EffectFinish, now: number): Promise<void> {
  await write(c, 'finish effect', () => steps.finishEffect(dialect, f, now));
  // An external effect's result is committed at once, never left in a group that could
  // still roll back: a lost result would run the effect again.
  commitGroup(c);
  durableSoon(c);
}

const TX_CONTROL = /^\s*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b/i;

/** The module's view of the drain connection, valid only while its transaction is open. */
function effectDb(c: DrainConnection): { handle: EffectDb; close: () => void } {
  let open = true;
  const prepare = (sql: string) => {
    if (!open) throw new Error('the effect transaction has ended; db is closed (await every query inside the handler)');
    // The handler's writes belong to our transaction; it must not commit or end it.
    if (TX_CONTROL.test(sql)) throw new Error("a module effect runs inside the receiver's transaction; do not BEGIN, COMMIT or ROLLBACK");
    return c.db.prepare(sql);
  };
  const handle: EffectDb = {
    dialect: 'sqlite',
    async query<T>(sql: string, params: readonly unknown[] = []): Promise<T[]> {
      const s = prepare(sql);
      if (!s.reader) {
        s.run(...params);
        return [];
      }
      return s.all(...params) as T[];
    },
    async run(sql: string, params: readonly unknown[] = []): Promise<{ changes: number }> {
      return { changes: prepare(sql).run(...params).changes };
    },
  };
  return { handle, close: () => (open = false) };
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** The module effect's own transaction, or its savepoint inside a group's. */
const EFFECT_SAVEPOINT = 'receiver_module_effect';

function rollback(c: DrainConnection): void {
  if (c.group !== undefined) {
    c.db.exec(`ROLLBACK TO ${EFFECT_SAVEPOINT}`);
    c.db.exec(`RELEASE ${EFFECT_SAVEPOINT}`);
  } else if (c.db.inTransaction) c.db.exec('ROLLBACK');
}

/** COMMIT of a module effect's transaction, with the renewals a heartbeat left to it; in a group, its savepoint's release. */
function commit(c: DrainConnection, now: number): void {
  if (c.group !== undefined) {
    c.db.exec(`RELEASE ${EFFECT_SAVEPOINT}`);
    return;
  }
  renewDeferred(c, now);
  c.db.exec('COMMIT');
  durableSoon(c);
}

export async function runTransactionalEffect(c: DrainConnection, m: steps.ModuleEffect): Promise<TransactionalOutcome> {
  const { lease, attempt, start, now, leaseMs } = m;
  if (c.group !== undefined) {
    await enterGroup(c, c.group);
    c.db.exec(`SAVEPOINT ${EFFECT_SAVEPOINT}`);
  } else {
    yieldToIngest(c.ingestWaiting);
    await whenUnlocked('module effect', Date.now() + c.busyTimeoutMs, () => c.db.exec('BEGIN IMMEDIATE'));
  }
  const startedAt = now();
  let decided: steps.Decided;
  try {
    if (!runSteps(c.db, steps.renewLease(dialect, lease, startedAt + leaseMs))) {
      rollback(c);
      return { action: 'lost' };
    }
    decided = runSteps(c.db, steps.decide(dialect, lease, attempt, start, startedAt));
    if (decided.nonRun !== undefined) {
      commit(c, startedAt);
      return decided.nonRun;
    }
  } catch (e) {
    rollback(c);
    throw stepFailed(c, e, 'module effect');
  }

  // The write lock is held across this await: the handler's writes and the ledger row
  // below commit together, or not at all.
  const { handle, close } = effectDb(c);
  const failure = await steps.callHandler(m, handle, decided.run!, close);

  if (failure === undefined) {
    try {
      const finishedAt = now();
      const ok = runSteps(
        c.db,
        steps.moduleDone(dialect, { lease, attempt, start, row: decided.row, run: decided.run!, startedAt, finishedAt }, m.completeOnOk, m.routeDecisions),
      );
      commit(c, finishedAt);
      return ok;
    } catch (e) {
      // Nothing committed: the handler's writes are gone with the ledger row, and the
      // event stays claimed until its lease expires and it is retried.
      rollback(c);
      throw stepFailed(c, e, 'module effect');
    }
  }

  // The handler threw: its writes roll back; the failure is recorded in a transaction of its own.
  rollback(c);
  const error = message(failure.error);
  const finishedAt = now();
  const failed = await immediate(c, 'record module failure', () => {
    renewDeferred(c, finishedAt);
    return runSteps(c.db, steps.moduleFailed(dialect, { lease, attempt, start, row: decided.row, run: decided.run!, startedAt, finishedAt }, error));
  });
  durableSoon(c);
  return failed;
}

export async function recordAttempt(c: DrainConnection, r: AttemptRecord): Promise<void> {
  await write(c, 'record attempt', () => steps.recordAttempt(dialect, r));
  durableSoon(c);
}

/** One settle statement, guarded by the lease; true when it applied. */
async function settle(c: DrainConnection, what: string, operation: () => Steps<boolean>): Promise<boolean> {
  const held = await write(c, what, operation);
  durableSoon(c);
  return held;
}

export function completeEvent(c: DrainConnection, lease: Lease, now: number, routeDecisions?: string): Promise<boolean> {
  return settle(c, 'complete event', () => steps.completeEvent(dialect, lease, now, routeDecisions));
}

export function retryEvent(c: DrainConnection, lease: Lease, error: string, nextAttemptAt: number, routeDecisions?: string): Promise<boolean> {
  return settle(c, 'retry event', () => steps.retryEvent(dialect, lease, error, nextAttemptAt, routeDecisions));
}

export function buryEvent(c: DrainConnection, lease: Lease, error: string, now: number, routeDecisions?: string): Promise<boolean> {
  return settle(c, 'bury event', () => steps.buryEvent(dialect, lease, error, now, routeDecisions));
}
