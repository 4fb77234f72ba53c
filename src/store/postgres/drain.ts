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
import { commit, rollbackAndRelease, type Conn } from './conn.js';
import { postgresError } from './errors.js';
import { connectionLost, type PoolClient } from './open.js';
import { CLAIM_COLUMNS, toClaimed, toLedger, type ClaimDbRow, type LedgerDbRow } from './rows.js';

/**
 * The drain's PostgreSQL operations, one small function each. Several receivers drain one
 * database together: claims skip rows another transaction holds (FOR ... SKIP LOCKED), and
 * every decision about one effect key is taken under a transaction-scoped advisory lock on
 * that key, so two processes never both decide to run it. Each process stays serial.
 */

// The oldest due events in arrival (id) order: pending and due, or processing under an
// expired lease (a crashed or stalled drain's claim). Rows locked by another drain's claim
// (or by an ingest batch counting a duplicate, or by a module effect's transaction) are
// skipped, not waited for; a row whose claim committed meanwhile no longer matches and is
// skipped too. One statement: the claim is atomic, so two drains never hold one event.
const CLAIM = `WITH
  due AS (SELECT id FROM events WHERE status = 'pending' AND next_attempt_at <= $3
          ORDER BY id LIMIT $4 FOR NO KEY UPDATE SKIP LOCKED),
  expired AS (SELECT id FROM events WHERE status = 'processing' AND lease_expires_at <= $3
          ORDER BY id LIMIT $4 FOR NO KEY UPDATE SKIP LOCKED),
  chosen AS (SELECT id FROM due UNION ALL SELECT id FROM expired ORDER BY id LIMIT $4)
  UPDATE events SET status = 'processing', lease_owner = $1, lease_expires_at = $2, attempts = attempts + 1
  WHERE id IN (SELECT id FROM chosen)
  RETURNING ${CLAIM_COLUMNS}`;

export async function claimEvents(c: Conn, owner: string, now: number, leaseMs: number, limit: number): Promise<ClaimedEvent[]> {
  const { rows } = await c.query<ClaimDbRow>('claim events', CLAIM, [owner, now + leaseMs, now, limit]);
  // RETURNING gives no order: the drain runs them oldest first.
  return rows.map(toClaimed).sort((a, b) => a.id - b.id);
}

export async function claimEvent(c: Conn, owner: string, now: number, leaseMs: number): Promise<ClaimedEvent | undefined> {
  return (await claimEvents(c, owner, now, leaseMs, 1))[0];
}

// least() ignores NULLs: the earlier of the next retry and the next lease expiry.
const NEXT_DUE = `SELECT least(
    (SELECT min(next_attempt_at) FROM events WHERE status = 'pending'),
    (SELECT min(lease_expires_at) FROM events WHERE status = 'processing')) AS t`;

export async function nextDueAt(c: Conn): Promise<number | undefined> {
  const { rows } = await c.query<{ t: number | null }>('next due event', NEXT_DUE);
  return rows[0]?.t ?? undefined;
}

/** Every lease-guarded statement: $2 event id, $3 owner. */
const HELD = `id = $2 AND lease_owner = $3 AND status = 'processing'`;
const RENEW = `UPDATE events SET lease_expires_at = $1 WHERE ${HELD}`;

async function renewIn(q: PoolClient, lease: Lease, until: number): Promise<boolean> {
  return (await q.query(RENEW, [until, lease.eventId, lease.owner])).rowCount === 1;
}

export async function renewLease(c: Conn, lease: Lease, now: number, leaseMs: number): Promise<boolean> {
  return (await c.query('renew lease', RENEW, [now + leaseMs, lease.eventId, lease.owner])).rowCount === 1;
}

// The heartbeat. A row locked by this drain's own module effect transaction is skipped, not
// waited for: while it is locked no other drain can claim it (claims skip locked rows), and
// that transaction renewed its lease when it began.
const RENEW_MANY = `UPDATE events SET lease_expires_at = $1
  WHERE id IN (SELECT e.id FROM events e JOIN unnest($2::bigint[], $3::text[]) AS l(id, owner)
               ON e.id = l.id AND e.lease_owner = l.owner
               WHERE e.status = 'processing' FOR NO KEY UPDATE OF e SKIP LOCKED)`;

export async function renewLeases(c: Conn, leases: readonly Lease[], now: number, leaseMs: number): Promise<void> {
  if (leases.length === 0) return;
  await c.query('renew leases', RENEW_MANY, [now + leaseMs, leases.map((l) => l.eventId), leases.map((l) => l.owner)]);
}

const RELEASE = `UPDATE events SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, attempts = greatest(attempts - 1, 0)
  WHERE status = 'processing' AND (id, lease_owner) IN (SELECT * FROM unnest($1::bigint[], $2::text[]))`;

export async function releaseEvents(c: Conn, leases: readonly Lease[]): Promise<void> {
  if (leases.length === 0) return;
  await c.query('release events', RELEASE, [leases.map((l) => l.eventId), leases.map((l) => l.owner)]);
}

export async function claimOwners(c: Conn): Promise<string[]> {
  const { rows } = await c.query<{ owner: string }>('claim owners', `SELECT DISTINCT lease_owner AS owner FROM events WHERE status = 'processing' AND lease_owner IS NOT NULL`);
  return rows.map((r) => r.owner);
}

export async function expireClaims(c: Conn, ownerPrefix: string, now: number): Promise<number> {
  const { rowCount } = await c.query(
    'expire claims',
    `UPDATE events SET lease_expires_at = $1 WHERE status = 'processing' AND left(lease_owner, length($2)) = $2 AND lease_expires_at > $1`,
    [now, ownerPrefix],
  );
  return rowCount ?? 0;
}

/** A constant first key for pg_advisory_xact_lock(int, int): the effect-key lock space. */
const EFFECT_KEY_LOCK = 0x72636b79; // "rcky"

/**
 * Serialises every decision about one effect key across processes until this transaction
 * ends. The wait may be as long as another process's module effect holds its transaction
 * (bounded by its lease), so it gets its own lock timeout; afterwards the key is ours, and
 * nothing else in the transaction waits on a lock for long.
 */
async function lockEffectKey(client: PoolClient, effectKey: string, waitMs: number): Promise<void> {
  await client.query(`SELECT set_config('lock_timeout', $1, true), pg_advisory_xact_lock($2, hashtext($3))`, [
    String(Math.max(1, Math.round(waitMs))),
    EFFECT_KEY_LOCK,
    effectKey,
  ]);
}

// A running row belongs to someone else only while another event's claim on it is live;
// otherwise it is a run that crashed or outlived its lease, and may be repeated.
const LEDGER = `SELECT f.status, f.event_id, f.version, f.runs,
    (f.status = 'running' AND f.event_id IS NOT NULL AND f.event_id <> $1 AND EXISTS (
      SELECT 1 FROM events v WHERE v.id = f.event_id AND v.status = 'processing' AND v.lease_expires_at > $2)) AS held_elsewhere
  FROM effects f WHERE f.effect_key = $3`;

async function ledgerRow(client: PoolClient, eventId: number, effectKey: string, now: number): Promise<LedgerRow | undefined> {
  const { rows } = await client.query<LedgerDbRow>(LEDGER, [eventId, now, effectKey]);
  return rows[0] === undefined ? undefined : toLedger(rows[0]);
}

const INSERT_ATTEMPT = `INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome, error, output, forced)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`;

interface NewAttempt {
  eventId: number;
  attempt: number;
  route: string;
  effectKey: string | null;
  startedAt: number;
  finishedAt: number | null;
  outcome: string;
  error?: string | null;
  output?: string | null;
  forced?: boolean;
}

function attemptParams(a: NewAttempt): unknown[] {
  return [a.eventId, a.attempt, a.route, a.effectKey, a.startedAt, a.finishedAt, a.outcome, a.error ?? null, a.output ?? null, a.forced === true ? 1 : 0];
}

async function insertAttempt(client: PoolClient, a: NewAttempt): Promise<number> {
  const { rows } = await client.query<{ id: number }>(INSERT_ATTEMPT, attemptParams(a));
  return rows[0]!.id;
}

/** Records a decision that runs nothing (skipped, stale, busy) as a finished attempt. */
async function recordNonRun(
  client: PoolClient,
  lease: Lease,
  attempt: number,
  start: EffectStart,
  row: LedgerRow,
  decision: 'skipped' | 'stale' | 'busy',
  now: number,
): Promise<Exclude<EffectDecision, { action: 'run' | 'lost' }>> {
  const base = { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt: now, finishedAt: now };
  if (decision === 'stale') {
    const applied = row.version ?? '';
    const attemptId = await insertAttempt(client, { ...base, outcome: 'stale', error: `version ${start.version ?? ''} is older than the applied version ${applied}` });
    return { action: 'stale', attemptId, appliedVersion: applied };
  }
  if (decision === 'busy') {
    const heldBy = row.eventId ?? 0;
    const attemptId = await insertAttempt(client, { ...base, outcome: 'busy', error: `effect ${start.effectKey} is running for event ${heldBy}` });
    return { action: 'busy', attemptId, heldByEventId: heldBy };
  }
  const attemptId = await insertAttempt(client, { ...base, outcome: 'skipped', error: row.eventId === null ? null : `already done by event ${row.eventId}` });
  return { action: 'skipped', attemptId };
}

// Before an external effect acts, this row says it is running: a crash from here on
// leaves it visible, and the next run counts as a repeat (runs + 1).
const MARK_RUNNING = `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, run_token, started_at, forced_runs)
  VALUES ($1, $2, $3, 'running', $4, 1, $5, $6, $7)
  ON CONFLICT (effect_key) DO UPDATE SET status = 'running', event_id = excluded.event_id, runs = effects.runs + 1,
    run_token = excluded.run_token, started_at = excluded.started_at, finished_at = NULL,
    forced_runs = effects.forced_runs + excluded.forced_runs`;

export async function beginEffect(c: Conn, lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number): Promise<EffectDecision> {
  return c.transaction('begin effect', async (client): Promise<EffectDecision> => {
    if (!(await renewIn(client, lease, now + leaseMs))) return { action: 'lost' };
    await lockEffectKey(client, start.effectKey, leaseMs);
    const row = await ledgerRow(client, lease.eventId, start.effectKey, now);
    const decision = decideEffect(row, start);
    if (decision !== 'run') return recordNonRun(client, lease, attempt, start, row!, decision, now);
    const wasDone = row?.status === 'done';
    const forced = wasDone && start.force;
    await client.query(MARK_RUNNING, [start.effectKey, start.route, start.businessKey, lease.eventId, start.runToken, now, forced ? 1 : 0]);
    const attemptId = await insertAttempt(client, { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt: now, finishedAt: null, outcome: 'running', forced });
    return { action: 'run', attemptId, runs: (row?.runs ?? 0) + 1, wasDone };
  });
}

const FINISH_ATTEMPT = `UPDATE attempts SET finished_at = $1, outcome = $2, error = $3, output = $4 WHERE id = $5`;
// Only the run that set the token may close it: a late finish after someone else started
// a new run of the key must not overwrite that run's row.
const EFFECT_DONE = `UPDATE effects SET status = 'done', finished_at = $1, last_error = NULL, version = $2
  WHERE effect_key = $3 AND run_token = $4 AND status = 'running'`;
const EFFECT_FAILED = `UPDATE effects SET status = $1, finished_at = $2, last_error = $3
  WHERE effect_key = $4 AND run_token = $5 AND status = 'running'`;
const EFFECT_VERSION = `SELECT version FROM effects WHERE effect_key = $1 FOR NO KEY UPDATE`;

export async function finishEffect(c: Conn, f: EffectFinish, now: number): Promise<void> {
  await c.transaction('finish effect', async (client) => {
    await client.query(FINISH_ATTEMPT, [now, f.outcome, f.error ?? null, f.output ?? null, f.attemptId]);
    if (f.outcome === 'ok') {
      const { rows } = await client.query<{ version: string | null }>(EFFECT_VERSION, [f.effectKey]);
      await client.query(EFFECT_DONE, [now, newerVersion(rows[0]?.version ?? null, f.version), f.effectKey, f.runToken]);
    } else {
      // A forced re-run of a done key that fails leaves it done: it did happen once.
      await client.query(EFFECT_FAILED, [f.wasDone ? 'done' : 'failed', now, f.error ?? null, f.effectKey, f.runToken]);
    }
  });
}

const MARK_DONE_TX = `INSERT INTO effects (effect_key, route, business_key, status, event_id, version, runs, run_token, started_at, finished_at, forced_runs)
  VALUES ($1, $2, $3, 'done', $4, $5, 1, $6, $7, $8, $9)
  ON CONFLICT (effect_key) DO UPDATE SET status = 'done', event_id = excluded.event_id, version = excluded.version,
    runs = effects.runs + 1, run_token = excluded.run_token, started_at = excluded.started_at,
    finished_at = excluded.finished_at, last_error = NULL, forced_runs = effects.forced_runs + excluded.forced_runs`;
// A `running` row here is another run's (an external effect's) and is left to it.
const MARK_FAILED_TX = `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at, last_error)
  VALUES ($1, $2, $3, 'failed', $4, 0, $5, $6, $7)
  ON CONFLICT (effect_key) DO UPDATE SET
    status = CASE WHEN effects.status = 'done' THEN 'done' ELSE 'failed' END,
    finished_at = excluded.finished_at, last_error = excluded.last_error
  WHERE effects.status <> 'running'`;

const TX_CONTROL = /^\s*(BEGIN|START|COMMIT|END|ROLLBACK|ABORT|SAVEPOINT|RELEASE|PREPARE\s+TRANSACTION)\b/i;

/**
 * The module's view of the drain's connection, valid only while its transaction is open.
 * Each statement runs under a savepoint, so one that fails (and is caught by the handler)
 * leaves the transaction as it was, as on SQLite, instead of aborting it. Statements run
 * one at a time, in call order.
 */
function effectDb(c: Conn, client: PoolClient): { handle: EffectDb; close: (gaveUp: boolean) => Promise<void> } {
  let open = true;
  let running = 0;
  let chain: Promise<unknown> = Promise.resolve();
  const exec = (sql: string, params: readonly unknown[]) => {
    // Checked when called, as on SQLite: a statement issued while the handler runs belongs
    // to the transaction even if the handler returns before it finishes.
    if (!open) return Promise.reject(new Error('the effect transaction has ended; db is closed (await every query inside the handler)'));
    // The handler's writes belong to our transaction; it must not commit or end it.
    if (TX_CONTROL.test(sql)) return Promise.reject(new Error("a module effect runs inside the receiver's transaction; do not BEGIN, COMMIT or ROLLBACK"));
    const run = async () => {
      running += 1;
      try {
        await client.query('SAVEPOINT receiver_effect_statement');
        try {
          const result = await client.query(sql, params as unknown[]);
          await client.query('RELEASE SAVEPOINT receiver_effect_statement');
          return result;
        } catch (e) {
          await client.query('ROLLBACK TO SAVEPOINT receiver_effect_statement');
          await client.query('RELEASE SAVEPOINT receiver_effect_statement');
          throw e;
        }
      } finally {
        running -= 1;
      }
    };
    const result = chain.then(run, run);
    chain = result.catch(() => {});
    return result;
  };
  const handle: EffectDb = {
    async query<T>(sql: string, params: readonly unknown[] = []): Promise<T[]> {
      return (await exec(sql, params)).rows as T[];
    },
    async run(sql: string, params: readonly unknown[] = []): Promise<{ changes: number }> {
      return { changes: (await exec(sql, params)).rowCount ?? 0 };
    },
  };
  // Closing refuses new statements, then waits for any the handler left running without
  // awaiting: the ledger row must not be written between one of them and its savepoint.
  // A handler that gave up (its timeoutSeconds, a shutdown) is rolled back anyway: a
  // statement of its still running is cancelled rather than waited for (up to the lease).
  const close = async (gaveUp: boolean) => {
    open = false;
    if (gaveUp && running > 0) await c.cancel('module effect', client).catch(() => undefined);
    await chain;
  };
  return { handle, close };
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/**
 * One transaction around the module's handler: the key lock, the lease check, the ledger
 * decision, the handler's writes, the ledger row (done) and the attempt (ok) commit
 * together or not at all. The event row is locked only at the very end (the lease guard),
 * so ingest counting a duplicate of this event does not wait for the handler.
 */
export async function runTransactionalEffect(
  c: Conn,
  lease: Lease,
  attempt: number,
  start: EffectStart,
  handler: (db: EffectDb) => Promise<void>,
  now: () => number,
  leaseMs: number,
  options: { completeOnOk?: boolean } = {},
): Promise<TransactionalOutcome> {
  const startedAt = now();
  // Renewed in its own short transaction, so the event row is not held across the handler.
  if (!(await renewLease(c, lease, startedAt, leaseMs))) return { action: 'lost' };

  const client = await c.connect('module effect');
  let row: LedgerRow | undefined;
  try {
    await client.query('BEGIN');
    // The handler's statements are bounded by the effect's timeoutSeconds (the caller's
    // timer, then close() cancels the one running), not by the pool's statement timeout
    // (busyTimeoutMs, meant for ingest), which would cut a legitimate long query short.
    await client.query(`SELECT set_config('statement_timeout', '0', true)`);
    await lockEffectKey(client, start.effectKey, leaseMs);
    if ((await client.query(`SELECT 1 FROM events WHERE id = $1 AND lease_owner = $2 AND status = 'processing'`, [lease.eventId, lease.owner])).rowCount !== 1) {
      await rollbackAndRelease(client);
      return { action: 'lost' };
    }
    row = await ledgerRow(client, lease.eventId, start.effectKey, startedAt);
    const decision = decideEffect(row, start);
    if (decision !== 'run') {
      const d = await recordNonRun(client, lease, attempt, start, row!, decision, startedAt);
      await commit(client, 'module effect');
      client.release();
      return d;
    }
  } catch (e) {
    await rollbackAndRelease(client);
    throw postgresError(e, 'module effect');
  }
  const forced = row?.status === 'done' && start.force;

  // The transaction (and the key lock) is held across this await: the handler's writes
  // and the ledger row below commit together, or not at all.
  const { handle, close } = effectDb(c, client);
  let failure: { error: unknown } | undefined;
  try {
    await handler(handle);
  } catch (e) {
    failure = { error: e };
  } finally {
    await close(failure !== undefined);
  }

  if (failure === undefined) {
    try {
      const finishedAt = now();
      // Last, and locking the event row until COMMIT: a drain whose lease was taken over
      // while the handler ran commits nothing.
      if (!(await renewIn(client, lease, finishedAt + leaseMs))) {
        await rollbackAndRelease(client);
        return { action: 'lost' };
      }
      await client.query(MARK_DONE_TX, [
        start.effectKey, start.route, start.businessKey, lease.eventId, newerVersion(row?.version ?? null, start.version),
        start.runToken, startedAt, finishedAt, forced ? 1 : 0,
      ]);
      const attemptId = await insertAttempt(client, { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt, finishedAt, outcome: 'ok', forced });
      // The event's last effect, nothing failed: done in the same commit (one transaction, not two).
      const completed = options.completeOnOk === true && (await client.query(COMPLETE, [finishedAt, lease.eventId, lease.owner])).rowCount === 1;
      await commit(client, 'module effect');
      client.release();
      return { action: 'ok', attemptId, runs: (row?.runs ?? 0) + 1, completed };
    } catch (e) {
      // Nothing committed: the handler's writes are gone with the ledger row, and the
      // event stays claimed until its lease expires and it is retried.
      await rollbackAndRelease(client);
      throw postgresError(e, 'module effect');
    }
  }

  // The handler threw: its writes roll back; the failure is recorded in a transaction of its own.
  await rollbackAndRelease(client);
  // A handler whose connection was dropped under it failed on pg's "not queryable": say why.
  const error = connectionLost(client) ?? message(failure.error);
  const finishedAt = now();
  const attemptId = await c.transaction('record module failure', async (tx) => {
    await tx.query(MARK_FAILED_TX, [start.effectKey, start.route, start.businessKey, lease.eventId, startedAt, finishedAt, error]);
    return insertAttempt(tx, { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt, finishedAt, outcome: 'failed', error, forced });
  });
  return { action: 'failed', attemptId, runs: row?.runs ?? 0, error };
}

export async function recordAttempt(c: Conn, r: AttemptRecord): Promise<void> {
  await c.query(
    'record attempt',
    INSERT_ATTEMPT,
    attemptParams({ eventId: r.eventId, attempt: r.attempt, route: r.route, effectKey: r.effectKey ?? null, startedAt: r.startedAt, finishedAt: r.finishedAt, outcome: r.outcome, error: r.error }),
  );
}

// Each outcome applies only while the caller still holds the lease: a drain whose claim
// was taken over (its lease expired, another drain reclaimed) changes nothing.
const COMPLETE = `UPDATE events SET status = 'done', finished_at = $1, lease_owner = NULL, lease_expires_at = NULL,
  last_error = NULL, force_effects = 0 WHERE ${HELD}`;
const RETRY = `UPDATE events SET status = 'pending', next_attempt_at = $1, last_error = $4, lease_owner = NULL,
  lease_expires_at = NULL WHERE ${HELD}`;
const BURY = `UPDATE events SET status = 'dead', finished_at = $1, last_error = $4, lease_owner = NULL,
  lease_expires_at = NULL WHERE ${HELD}`;

export async function completeEvent(c: Conn, lease: Lease, now: number): Promise<boolean> {
  return (await c.query('complete event', COMPLETE, [now, lease.eventId, lease.owner])).rowCount === 1;
}

export async function retryEvent(c: Conn, lease: Lease, error: string, nextAttemptAt: number): Promise<boolean> {
  return (await c.query('retry event', RETRY, [nextAttemptAt, lease.eventId, lease.owner, error])).rowCount === 1;
}

export async function buryEvent(c: Conn, lease: Lease, error: string, now: number): Promise<boolean> {
  return (await c.query('bury event', BURY, [now, lease.eventId, lease.owner, error])).rowCount === 1;
}
