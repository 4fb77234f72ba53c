import type { Statement } from 'better-sqlite3';
import { setTimeout as sleep } from 'node:timers/promises';
import { decideEffect, newerVersion } from '../../effects/ledger.js';
import type {
  AttemptRecord,
  ClaimedEvent,
  EffectDb,
  EffectDecision,
  EffectFinish,
  EffectStart,
  Lease,
  LedgerRow,
  TransactionalOutcome,
} from '../drain-types.js';
import { isBusy, sqliteError } from './errors.js';
import type { Db } from './open.js';
import type { WalSync } from './wal-sync.js';

/**
 * The drain's SQLite operations, one small function each, on the drain's own connection
 * (a module effect holds a transaction across an await; it must not share the ingest
 * connection's group commit). Every write runs in BEGIN IMMEDIATE, retried asynchronously
 * while another process holds the write lock, so the event loop (HTTP ingress) never blocks.
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
}

/** After a commit whose loss in a power cut would only repeat work (claims, settles, module effects). */
function durableSoon(c: DrainConnection): void {
  c.wal?.syncSoon();
}

const cache = new WeakMap<Db, Map<string, Statement>>();

function stmt(db: Db, sql: string): Statement {
  let m = cache.get(db);
  if (m === undefined) cache.set(db, (m = new Map()));
  let s = m.get(sql);
  if (s === undefined) m.set(sql, (s = db.prepare(sql)));
  return s;
}

/** Runs `fn` in one IMMEDIATE transaction; SQLITE_BUSY is retried without blocking the thread. */
async function immediate<T>(c: DrainConnection, what: string, fn: () => T): Promise<T> {
  const tx = c.db.transaction(fn);
  const deadline = Date.now() + c.busyTimeoutMs;
  for (;;) {
    try {
      return tx.immediate();
    } catch (e) {
      if (!isBusy(e) || Date.now() >= deadline) throw sqliteError(e, what);
      await sleep(Math.min(10, Math.max(1, deadline - Date.now())));
    }
  }
}

async function beginImmediate(c: DrainConnection, what: string): Promise<void> {
  const deadline = Date.now() + c.busyTimeoutMs;
  for (;;) {
    try {
      c.db.exec('BEGIN IMMEDIATE');
      return;
    } catch (e) {
      if (!isBusy(e) || Date.now() >= deadline) throw sqliteError(e, what);
      await sleep(Math.min(10, Math.max(1, deadline - Date.now())));
    }
  }
}

interface EventRow {
  id: number;
  source: string;
  delivery_id: string;
  event_type: string;
  headers: string | null;
  body: Buffer | null;
  received_at: number;
  attempts: number;
  force_effects: number;
  lease_owner: string;
  lease_expires_at: number;
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
  RETURNING id, source, delivery_id, event_type, headers, body, received_at, attempts, force_effects, lease_owner, lease_expires_at`;

function toClaimed(row: EventRow): ClaimedEvent {
  return {
    id: row.id,
    source: row.source,
    deliveryId: row.delivery_id,
    eventType: row.event_type,
    headers: row.headers === null ? {} : (JSON.parse(row.headers) as Record<string, string>),
    body: row.body ?? Buffer.alloc(0),
    receivedAt: row.received_at,
    attempt: row.attempts,
    forceEffects: row.force_effects === 1,
    lease: { eventId: row.id, owner: row.lease_owner, expiresAt: row.lease_expires_at },
  };
}

export async function claimEvents(c: DrainConnection, owner: string, now: number, leaseMs: number, limit: number): Promise<ClaimedEvent[]> {
  const rows = await immediate(c, 'claim events', () => stmt(c.db, CLAIM).all(owner, now + leaseMs, now, limit, now, limit, limit) as EventRow[]);
  if (rows.length > 0) durableSoon(c);
  // RETURNING gives no order: the drain runs them oldest first.
  return rows.map(toClaimed).sort((a, b) => a.id - b.id);
}

export async function claimEvent(c: DrainConnection, owner: string, now: number, leaseMs: number): Promise<ClaimedEvent | undefined> {
  return (await claimEvents(c, owner, now, leaseMs, 1))[0];
}

const NEXT_DUE = `SELECT min(t) AS t FROM (
    SELECT min(next_attempt_at) AS t FROM events INDEXED BY events_due WHERE status = 'pending'
    UNION ALL
    SELECT min(lease_expires_at) AS t FROM events INDEXED BY events_leased WHERE status = 'processing'
  )`;

export async function nextDueAt(c: DrainConnection): Promise<number | undefined> {
  try {
    const row = stmt(c.db, NEXT_DUE).get() as { t: number | null };
    return row.t ?? undefined;
  } catch (e) {
    throw sqliteError(e, 'next due event');
  }
}

const HELD = `id = ? AND lease_owner = ? AND status = 'processing'`;
const RENEW = `UPDATE events SET lease_expires_at = ? WHERE ${HELD}`;

function renewIn(c: DrainConnection, lease: Lease, until: number): boolean {
  return stmt(c.db, RENEW).run(until, lease.eventId, lease.owner).changes === 1;
}

export async function renewLease(c: DrainConnection, lease: Lease, now: number, leaseMs: number): Promise<boolean> {
  return immediate(c, 'renew lease', () => renewIn(c, lease, now + leaseMs));
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
  await immediate(c, 'renew leases', () => {
    for (const lease of leases) renewIn(c, lease, now + leaseMs);
  });
}

const RELEASE = `UPDATE events SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = max(attempts - 1, 0)
  WHERE ${HELD}`;

export async function releaseEvents(c: DrainConnection, leases: readonly Lease[]): Promise<void> {
  if (leases.length === 0) return;
  await immediate(c, 'release events', () => {
    for (const lease of leases) stmt(c.db, RELEASE).run(lease.eventId, lease.owner);
  });
  durableSoon(c);
}

const CLAIM_OWNERS = `SELECT DISTINCT lease_owner AS owner FROM events INDEXED BY events_leased WHERE status = 'processing' AND lease_owner IS NOT NULL`;

export async function claimOwners(c: DrainConnection): Promise<string[]> {
  try {
    return (stmt(c.db, CLAIM_OWNERS).all() as { owner: string }[]).map((r) => r.owner);
  } catch (e) {
    throw sqliteError(e, 'claim owners');
  }
}

// substr, not LIKE: a host name may hold LIKE's wildcards.
const EXPIRE_CLAIMS = `UPDATE events SET lease_expires_at = ?
  WHERE status = 'processing' AND substr(lease_owner, 1, length(?)) = ? AND lease_expires_at > ?`;

export async function expireClaims(c: DrainConnection, ownerPrefix: string, now: number): Promise<number> {
  const n = await immediate(c, 'expire claims', () => stmt(c.db, EXPIRE_CLAIMS).run(now, ownerPrefix, ownerPrefix, now).changes);
  durableSoon(c);
  return n;
}

interface LedgerDbRow {
  status: LedgerRow['status'];
  event_id: number | null;
  version: string | null;
  runs: number;
  held_elsewhere: number;
}

// A running row belongs to someone else only while another event's claim on it is live;
// otherwise it is a run that crashed or outlived its lease, and may be repeated.
const LEDGER = `SELECT f.status, f.event_id, f.version, f.runs,
    (f.status = 'running' AND f.event_id IS NOT NULL AND f.event_id <> ? AND EXISTS (
      SELECT 1 FROM events v WHERE v.id = f.event_id AND v.status = 'processing' AND v.lease_expires_at > ?)) AS held_elsewhere
  FROM effects f WHERE f.effect_key = ?`;

function ledgerRow(c: DrainConnection, eventId: number, effectKey: string, now: number): LedgerRow | undefined {
  const r = stmt(c.db, LEDGER).get(eventId, now, effectKey) as LedgerDbRow | undefined;
  if (r === undefined) return undefined;
  return { status: r.status, eventId: r.event_id, version: r.version, runs: r.runs, heldElsewhere: r.held_elsewhere === 1 };
}

const INSERT_ATTEMPT = `INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome, error, output, forced)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;

function insertAttempt(
  c: DrainConnection,
  a: { eventId: number; attempt: number; route: string; effectKey: string | null; startedAt: number; finishedAt: number | null; outcome: string; error?: string | null; output?: string | null; forced?: boolean },
): number {
  const r = stmt(c.db, INSERT_ATTEMPT).run(a.eventId, a.attempt, a.route, a.effectKey, a.startedAt, a.finishedAt, a.outcome, a.error ?? null, a.output ?? null, a.forced === true ? 1 : 0);
  return Number(r.lastInsertRowid);
}

/** Records a decision that runs nothing (skipped, stale, busy) as a finished attempt. */
function recordNonRun(c: DrainConnection, lease: Lease, attempt: number, start: EffectStart, row: LedgerRow, decision: 'skipped' | 'stale' | 'busy', now: number): EffectDecision {
  const base = { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt: now, finishedAt: now };
  if (decision === 'stale') {
    const applied = row.version ?? '';
    const attemptId = insertAttempt(c, { ...base, outcome: 'stale', error: `version ${start.version ?? ''} is older than the applied version ${applied}` });
    return { action: 'stale', attemptId, appliedVersion: applied };
  }
  if (decision === 'busy') {
    const heldBy = row.eventId ?? 0;
    const attemptId = insertAttempt(c, { ...base, outcome: 'busy', error: `effect ${start.effectKey} is running for event ${heldBy}` });
    return { action: 'busy', attemptId, heldByEventId: heldBy };
  }
  const attemptId = insertAttempt(c, { ...base, outcome: 'skipped', error: row.eventId === null ? null : `already done by event ${row.eventId}` });
  return { action: 'skipped', attemptId };
}

// Before an external effect acts, this row says it is running: a crash from here on
// leaves it visible, and the next run counts as a repeat (runs + 1).
const MARK_RUNNING = `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, run_token, started_at, forced_runs)
  VALUES (?, ?, ?, 'running', ?, 1, ?, ?, ?)
  ON CONFLICT (effect_key) DO UPDATE SET status = 'running', event_id = excluded.event_id, runs = runs + 1,
    run_token = excluded.run_token, started_at = excluded.started_at, finished_at = NULL,
    forced_runs = forced_runs + excluded.forced_runs`;

export async function beginEffect(c: DrainConnection, lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number): Promise<EffectDecision> {
  const decision = await immediate(c, 'begin effect', (): EffectDecision => {
    if (!renewIn(c, lease, now + leaseMs)) return { action: 'lost' };
    const row = ledgerRow(c, lease.eventId, start.effectKey, now);
    const decision = decideEffect(row, start);
    if (decision !== 'run') return recordNonRun(c, lease, attempt, start, row!, decision, now);
    const wasDone = row?.status === 'done';
    const forced = wasDone && start.force;
    stmt(c.db, MARK_RUNNING).run(start.effectKey, start.route, start.businessKey, lease.eventId, start.runToken, now, forced ? 1 : 0);
    const attemptId = insertAttempt(c, { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt: now, finishedAt: null, outcome: 'running', forced });
    return { action: 'run', attemptId, runs: (row?.runs ?? 0) + 1, wasDone };
  });
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

const FINISH_ATTEMPT = `UPDATE attempts SET finished_at = ?, outcome = ?, error = ?, output = ? WHERE id = ?`;
// Only the run that set the token may close it: a late finish after someone else started
// a new run of the key must not overwrite that run's row.
const EFFECT_DONE = `UPDATE effects SET status = 'done', finished_at = ?, last_error = NULL, version = ?
  WHERE effect_key = ? AND run_token = ? AND status = 'running'`;
const EFFECT_FAILED = `UPDATE effects SET status = ?, finished_at = ?, last_error = ?
  WHERE effect_key = ? AND run_token = ? AND status = 'running'`;
const EFFECT_VERSION = `SELECT version FROM effects WHERE effect_key = ?`;

export async function finishEffect(c: DrainConnection, f: EffectFinish, now: number): Promise<void> {
  await immediate(c, 'finish effect', () => {
    stmt(c.db, FINISH_ATTEMPT).run(now, f.outcome, f.error ?? null, f.output ?? null, f.attemptId);
    if (f.outcome === 'ok') {
      const current = stmt(c.db, EFFECT_VERSION).get(f.effectKey) as { version: string | null } | undefined;
      stmt(c.db, EFFECT_DONE).run(now, newerVersion(current?.version ?? null, f.version), f.effectKey, f.runToken);
    } else {
      // A forced re-run of a done key that fails leaves it done: it did happen once.
      stmt(c.db, EFFECT_FAILED).run(f.wasDone ? 'done' : 'failed', now, f.error ?? null, f.effectKey, f.runToken);
    }
  });
  durableSoon(c);
}

const MARK_DONE_TX = `INSERT INTO effects (effect_key, route, business_key, status, event_id, version, runs, run_token, started_at, finished_at, forced_runs)
  VALUES (?, ?, ?, 'done', ?, ?, 1, ?, ?, ?, ?)
  ON CONFLICT (effect_key) DO UPDATE SET status = 'done', event_id = excluded.event_id, version = excluded.version,
    runs = runs + 1, run_token = excluded.run_token, started_at = excluded.started_at,
    finished_at = excluded.finished_at, last_error = NULL, forced_runs = forced_runs + excluded.forced_runs`;
const MARK_FAILED_TX = `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at, last_error)
  VALUES (?, ?, ?, 'failed', ?, 0, ?, ?, ?)
  ON CONFLICT (effect_key) DO UPDATE SET
    -- A done key stays done; a running row is another run's (an external effect's), left to it.
    status = CASE WHEN status = 'done' THEN 'done' ELSE 'failed' END,
    finished_at = excluded.finished_at, last_error = excluded.last_error
  WHERE status <> 'running'`;

const TX_CONTROL = /^\s*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b/i;

/** The module's view of the drain connection, valid only while its transaction is open. */
function effectDb(c: DrainConnection): { handle: EffectDb; close: () => void } {
  let open = true;
  const prepare = (sql: string) => {
    if (!open) throw new Error('the effect transaction has ended; db is closed (await every query inside the handler)');
    // The handler's writes belong to our transaction; it must not commit or end it.
    if (TX_CONTROL.test(sql)) throw new Error('a module effect runs inside the receiver\'s transaction; do not BEGIN, COMMIT or ROLLBACK');
    return c.db.prepare(sql);
  };
  const handle: EffectDb = {
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

function rollback(c: DrainConnection): void {
  if (c.db.inTransaction) c.db.exec('ROLLBACK');
}

export async function runTransactionalEffect(
  c: DrainConnection,
  lease: Lease,
  attempt: number,
  start: EffectStart,
  handler: (db: EffectDb) => Promise<void>,
  now: () => number,
  leaseMs: number,
  options: { completeOnOk?: boolean } = {},
): Promise<TransactionalOutcome> {
  await beginImmediate(c, 'module effect');
  const startedAt = now();
  let row: LedgerRow | undefined;
  try {
    if (!renewIn(c, lease, startedAt + leaseMs)) {
      rollback(c);
      return { action: 'lost' };
    }
    row = ledgerRow(c, lease.eventId, start.effectKey, startedAt);
    const decision = decideEffect(row, start);
    if (decision !== 'run') {
      const d = recordNonRun(c, lease, attempt, start, row!, decision, startedAt);
      renewDeferred(c, startedAt);
      c.db.exec('COMMIT');
      durableSoon(c);
      return d as TransactionalOutcome;
    }
  } catch (e) {
    rollback(c);
    throw sqliteError(e, 'module effect');
  }
  const forced = row?.status === 'done' && start.force;

  // The write lock is held across this await: the handler's writes and the ledger row
  // below commit together, or not at all.
  const { handle, close } = effectDb(c);
  let failure: { error: unknown } | undefined;
  try {
    await handler(handle);
  } catch (e) {
    failure = { error: e };
  } finally {
    close();
  }

  if (failure === undefined) {
    try {
      const finishedAt = now();
      stmt(c.db, MARK_DONE_TX).run(
        start.effectKey, start.route, start.businessKey, lease.eventId, newerVersion(row?.version ?? null, start.version),
        start.runToken, startedAt, finishedAt, forced ? 1 : 0,
      );
      const attemptId = insertAttempt(c, { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt, finishedAt, outcome: 'ok', forced });
      // The event's last effect, nothing failed: done in the same commit (one transaction, not two).
      const completed = options.completeOnOk === true && stmt(c.db, COMPLETE).run(finishedAt, lease.eventId, lease.owner).changes === 1;
      renewDeferred(c, finishedAt);
      c.db.exec('COMMIT');
      durableSoon(c);
      return { action: 'ok', attemptId, runs: (row?.runs ?? 0) + 1, completed };
    } catch (e) {
      // Nothing committed: the handler's writes are gone with the ledger row, and the
      // event stays claimed until its lease expires and it is retried.
      rollback(c);
      throw sqliteError(e, 'module effect');
    }
  }

  // The handler threw: its writes roll back; the failure is recorded in a transaction of its own.
  rollback(c);
  const error = message(failure.error);
  const finishedAt = now();
  const attemptId = await immediate(c, 'record module failure', () => {
    renewDeferred(c, finishedAt);
    stmt(c.db, MARK_FAILED_TX).run(start.effectKey, start.route, start.businessKey, lease.eventId, startedAt, finishedAt, error);
    return insertAttempt(c, { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt, finishedAt, outcome: 'failed', error, forced });
  });
  durableSoon(c);
  return { action: 'failed', attemptId, runs: row?.runs ?? 0, error };
}

export async function recordAttempt(c: DrainConnection, r: AttemptRecord): Promise<void> {
  await immediate(c, 'record attempt', () =>
    insertAttempt(c, { eventId: r.eventId, attempt: r.attempt, route: r.route, effectKey: r.effectKey ?? null, startedAt: r.startedAt, finishedAt: r.finishedAt, outcome: r.outcome, error: r.error }),
  );
  durableSoon(c);
}

// Each outcome applies only while the caller still holds the lease: a drain whose claim
// was taken over (its lease expired, another drain reclaimed) changes nothing.
const COMPLETE = `UPDATE events SET status = 'done', finished_at = ?, lease_owner = NULL, lease_expires_at = NULL,
  last_error = NULL, force_effects = 0 WHERE ${HELD}`;
const RETRY = `UPDATE events SET status = 'pending', next_attempt_at = ?, last_error = ?, lease_owner = NULL,
  lease_expires_at = NULL WHERE ${HELD}`;
const BURY = `UPDATE events SET status = 'dead', finished_at = ?, last_error = ?, lease_owner = NULL,
  lease_expires_at = NULL WHERE ${HELD}`;

/** One settle statement, guarded by the lease; true when it applied. */
async function settle(c: DrainConnection, what: string, sql: string, params: readonly unknown[]): Promise<boolean> {
  const held = await immediate(c, what, () => stmt(c.db, sql).run(...params).changes === 1);
  durableSoon(c);
  return held;
}

export function completeEvent(c: DrainConnection, lease: Lease, now: number): Promise<boolean> {
  return settle(c, 'complete event', COMPLETE, [now, lease.eventId, lease.owner]);
}

export function retryEvent(c: DrainConnection, lease: Lease, error: string, nextAttemptAt: number): Promise<boolean> {
  return settle(c, 'retry event', RETRY, [nextAttemptAt, error, lease.eventId, lease.owner]);
}

export function buryEvent(c: DrainConnection, lease: Lease, error: string, now: number): Promise<boolean> {
  return settle(c, 'bury event', BURY, [now, error, lease.eventId, lease.owner]);
}
