import * as steps from '../drain-steps.js';
import type { AttemptRecord, ClaimedEvent, EffectDb, EffectDecision, EffectFinish, EffectStart, Lease, TransactionalOutcome } from '../drain-types.js';
import { CLAIM_COLUMNS, toClaimed, type ClaimDbRow } from '../rows.js';
import { commit, rollbackAndRelease, type Conn } from './conn.js';
import { postgresError } from './errors.js';
import { connectionLost, type PoolClient } from './open.js';
import { dialect, runAlone, runSteps } from './steps.js';

/**
 * The drain's PostgreSQL operations, one small function each. Several receivers drain one
 * database together: claims skip rows another transaction holds (FOR ... SKIP LOCKED), and
 * every decision about one effect key is taken under a transaction-scoped advisory lock on
 * that key, so two processes never both decide to run it. Each process stays serial.
 * The ledger and settle protocol is ../drain-steps.ts; PostgreSQL's own here: the claim,
 * the heartbeat and release of a claim batch (arrays, SKIP LOCKED), and a module effect's
 * transaction on a connection of its own, its statements under savepoints.
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

/** PostgreSQL commits each step on its own: several receivers' drains share the database. */
export function inGroup<T>(_c: Conn, fn: () => Promise<T>): Promise<T> {
  return fn();
}

export async function claimEvent(c: Conn, owner: string, now: number, leaseMs: number): Promise<ClaimedEvent | undefined> {
  return (await claimEvents(c, owner, now, leaseMs, 1))[0];
}

export function nextDueAt(c: Conn): Promise<number | undefined> {
  return runAlone(c, 'next due event', steps.nextDueAt(dialect));
}

export function renewLease(c: Conn, lease: Lease, now: number, leaseMs: number): Promise<boolean> {
  return runAlone(c, 'renew lease', steps.renewLease(dialect, lease, now + leaseMs));
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

export function claimOwners(c: Conn): Promise<string[]> {
  return runAlone(c, 'claim owners', steps.claimOwners(dialect));
}

export function expireClaims(c: Conn, ownerPrefix: string, now: number): Promise<number> {
  return runAlone(c, 'expire claims', steps.expireClaims(dialect, ownerPrefix, now));
}

export function beginEffect(c: Conn, lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number): Promise<EffectDecision> {
  return c.transaction('begin effect', (client) => runSteps(client, steps.beginEffect(dialect, lease, attempt, start, now, leaseMs)));
}

export async function finishEffect(c: Conn, f: EffectFinish, now: number): Promise<void> {
  await c.transaction('finish effect', (client) => runSteps(client, steps.finishEffect(dialect, f, now)));
}

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
    dialect: 'postgres',
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
export async function runTransactionalEffect(c: Conn, m: steps.ModuleEffect): Promise<TransactionalOutcome> {
  const { lease, attempt, start, now, leaseMs } = m;
  const startedAt = now();
  // Renewed in its own short transaction, so the event row is not held across the handler.
  if (!(await renewLease(c, lease, startedAt, leaseMs))) return { action: 'lost' };

  const client = await c.connect('module effect');
  let decided: steps.Decided;
  try {
    await client.query('BEGIN');
    // The handler's statements are bounded by the effect's timeoutSeconds (the caller's
    // timer, then close() cancels the one running), not by the pool's statement timeout
    // (busyTimeoutMs, meant for ingest), which would cut a legitimate long query short.
    await client.query(`SELECT set_config('statement_timeout', '0', true)`);
    await runSteps(client, steps.lockEffectKey(dialect, start, leaseMs));
    if (
      (await client.query(`SELECT 1 FROM events WHERE id = $1 AND lease_owner = $2 AND status = 'processing'`, [lease.eventId, lease.owner])).rowCount !== 1
    ) {
      await rollbackAndRelease(client);
      return { action: 'lost' };
    }
    decided = await runSteps(client, steps.decide(dialect, lease, attempt, start, startedAt));
    if (decided.nonRun !== undefined) {
      await commit(client, 'module effect');
      client.release();
      return decided.nonRun;
    }
  } catch (e) {
    await rollbackAndRelease(client);
    throw postgresError(e, 'module effect');
  }

  // The transaction (and the key lock) is held across this await: the handler's writes
  // and the ledger row below commit together, or not at all.
  const { handle, close } = effectDb(c, client);
  const failure = await steps.callHandler(m, handle, decided.run!, close);

  if (failure === undefined) {
    try {
      const finishedAt = now();
      // Last, and locking the event row until COMMIT: a drain whose lease was taken over
      // while the handler ran commits nothing.
      if (!(await runSteps(client, steps.renewLease(dialect, lease, finishedAt + leaseMs)))) {
        await rollbackAndRelease(client);
        return { action: 'lost' };
      }
      const ok = await runSteps(
        client,
        steps.moduleDone(dialect, { lease, attempt, start, row: decided.row, run: decided.run!, startedAt, finishedAt }, m.completeOnOk, m.routeDecisions),
      );
      await commit(client, 'module effect');
      client.release();
      return ok;
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
  const run = { lease, attempt, start, row: decided.row, run: decided.run!, startedAt, finishedAt };
  return c.transaction('record module failure', (tx) => runSteps(tx, steps.moduleFailed(dialect, run, error)));
}

export async function recordAttempt(c: Conn, r: AttemptRecord): Promise<void> {
  await runAlone(c, 'record attempt', steps.recordAttempt(dialect, r));
}

export function completeEvent(c: Conn, lease: Lease, now: number, routeDecisions?: string): Promise<boolean> {
  return runAlone(c, 'complete event', steps.completeEvent(dialect, lease, now, routeDecisions));
}

export function retryEvent(c: Conn, lease: Lease, error: string, nextAttemptAt: number, routeDecisions?: string): Promise<boolean> {
  return runAlone(c, 'retry event', steps.retryEvent(dialect, lease, error, nextAttemptAt, routeDecisions));
}

export function buryEvent(c: Conn, lease: Lease, error: string, now: number, routeDecisions?: string): Promise<boolean> {
  return runAlone(c, 'bury event', steps.buryEvent(dialect, lease, error, now, routeDecisions));
}
