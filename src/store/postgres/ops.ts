import { sharedOps, type SharedOps, type StepRunner } from '../ops-steps.js';
import type { DropBodiesBatchResult, PurgeBatchResult, QueueStats } from '../ops-types.js';
import type { Conn } from './conn.js';
import { dialect, runAlone, runSteps } from './steps.js';

/**
 * Operator operations on PostgreSQL (see ../ops-types.ts): those both stores share run here
 * (../ops-steps.ts); the purge batches and queue gauges are PostgreSQL's own. Each write is one short transaction (most are one statement); batch operations take
 * `limit` rows and skip rows another transaction holds, so a purge never waits on, or
 * makes wait, the receivers ingesting and draining meanwhile.
 */

/** Runs shared steps on this pool. */
export function stepRunner(c: Conn): StepRunner {
  // One snapshot: every statement of a read sees the same data.
  const snapshot = { begin: 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY' } as const;
  return {
    alone: (what, operation) => runAlone(c, what, operation),
    snapshot: (what, operation) => c.transaction(what, (client) => runSteps(client, operation()), snapshot),
    // A replay's rows stay locked until COMMIT (the dialect's lockRows).
    write: (what, operation) => c.transaction(what, (client) => runSteps(client, operation())),
  };
}

/** The operations both stores share (../ops-steps.ts), on this pool. */
export function sharedOpsOn(c: Conn): SharedOps {
  return sharedOps(dialect, stepRunner(c));
}

// One statement, so one transaction. Oldest first in arrival (id) order: the planner walks
// the id index from the start, or, when few rows are old enough, the BRIN index on
// received_at finds their block ranges; either way no sort of every candidate per batch.
// status = 'done' only: pending, processing and dead events are never removed, and the
// effect ledger (effects) is not touched, so a redelivered id's effects stay skipped. A body
// key goes with its event: a replay of its body is answered from the event.
const PURGE = `WITH
  picked AS (SELECT id FROM events WHERE status = 'done' AND received_at < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
  a AS (DELETE FROM attempts WHERE event_id IN (SELECT id FROM picked) RETURNING 1),
  c AS (DELETE FROM conflicts WHERE event_id IN (SELECT id FROM picked) RETURNING 1),
  k AS (DELETE FROM body_keys WHERE event_id IN (SELECT id FROM picked)),
  u AS (DELETE FROM units WHERE event_id IN (SELECT id FROM picked)),
  e AS (DELETE FROM events WHERE id IN (SELECT id FROM picked) RETURNING 1)
  SELECT (SELECT count(*) FROM e) AS events, (SELECT count(*) FROM a) AS attempts, (SELECT count(*) FROM c) AS conflicts`;

export async function purgeBatch(c: Conn, receivedBefore: number, limit: number): Promise<PurgeBatchResult> {
  const { rows } = await c.query<PurgeBatchResult>('purge', PURGE, [receivedBefore, limit]);
  return rows[0] ?? { events: 0, attempts: 0, conflicts: 0 };
}

// Uses the partial index events_finished_bodies, so rows already dropped are not rescanned.
// Keys, body hash and stored answer stay: dedupe of a redelivery still works.
const DROP_BODIES = `WITH
  picked AS (SELECT id FROM events WHERE status = 'done' AND received_at < $1 AND body IS NOT NULL
             ORDER BY received_at LIMIT $2 FOR UPDATE SKIP LOCKED),
  c AS (UPDATE conflicts SET body = NULL, headers = NULL WHERE body IS NOT NULL AND event_id IN (SELECT id FROM picked) RETURNING 1),
  e AS (UPDATE events SET body = NULL, headers = NULL WHERE id IN (SELECT id FROM picked) RETURNING 1)
  SELECT (SELECT count(*) FROM e) AS events, (SELECT count(*) FROM c) AS conflicts`;

export async function dropBodiesBatch(c: Conn, receivedBefore: number, limit: number): Promise<DropBodiesBatchResult> {
  const { rows } = await c.query<DropBodiesBatchResult>('purge', DROP_BODIES, [receivedBefore, limit]);
  return rows[0] ?? { events: 0, conflicts: 0 };
}

/**
 * The queue gauges of GET /metrics, read at every scrape: partial indexes only, no scan of
 * finished events; the oldest pending event is the first stored of them (one look-up in
 * events_due, not a read of every pending row).
 */
export async function queueStats(c: Conn): Promise<QueueStats> {
  const { rows } = await c.query<{ pending: number; oldest: number | null; processing: number; dead: number }>(
    'queue stats',
    `SELECT (SELECT count(*) FROM events WHERE status = 'pending') AS pending,
            (SELECT received_at FROM events WHERE status = 'pending' ORDER BY id LIMIT 1) AS oldest,
            (SELECT count(*) FROM events WHERE status = 'processing') AS processing,
            (SELECT count(*) FROM events WHERE status = 'dead') AS dead`,
  );
  const r = rows[0]!;
  return { pending: r.pending, processing: r.processing, dead: r.dead, oldestPendingReceivedAt: r.oldest };
}
