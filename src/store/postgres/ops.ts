import type {
  DropBodiesBatchResult,
  EventDetail,
  EventStatus,
  EventSummary,
  HourlyDeliveries,
  ListEventsQuery,
  PurgeBatchResult,
  QueueStats,
  ReplayOptions,
  ReplayRefusal,
  ReplayResult,
  RouteFailures,
  StoreStats,
} from '../ops-types.js';
import { deliveriesPerHourSql, effectFailuresByRouteSql, listEventsSql, toHourly, toRouteFailures, type HourlyDbRow, type RouteFailuresDbRow } from '../ops-queries.js';
import type { Conn } from './conn.js';
import type { PoolClient } from './open.js';
import {
  ATTEMPT_COLUMNS,
  CONFLICT_COLUMNS,
  DETAIL_COLUMNS,
  EFFECT_COLUMNS,
  toAttempt,
  toConflict,
  toEffect,
  toSummary,
  type AttemptDbRow,
  type ConflictDbRow,
  type EffectDbRow,
  type EventDbRow,
  type EventDetailDbRow,
} from './rows.js';

/**
 * Operator operations on PostgreSQL (see ../ops-types.ts), one function per operation.
 * Each write is one short transaction (most are one statement); batch operations take
 * `limit` rows and skip rows another transaction holds, so a purge never waits on, or
 * makes wait, the receivers ingesting and draining meanwhile.
 */

export async function countPurgeable(c: Conn, receivedBefore: number): Promise<number> {
  const { rows } = await c.query<{ n: number }>('purge', `SELECT count(*) AS n FROM events WHERE status = 'done' AND received_at < $1`, [receivedBefore]);
  return rows[0]?.n ?? 0;
}

// One statement, so one transaction. Oldest first in arrival (id) order: the planner walks
// the id index from the start, or, when few rows are old enough, the BRIN index on
// received_at finds their block ranges; either way no sort of every candidate per batch.
// status = 'done' only: pending, processing and dead events are never removed, and the
// effect ledger (effects) is not touched, so a redelivered id's effects stay skipped.
const PURGE = `WITH
  picked AS (SELECT id FROM events WHERE status = 'done' AND received_at < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED),
  a AS (DELETE FROM attempts WHERE event_id IN (SELECT id FROM picked) RETURNING 1),
  c AS (DELETE FROM conflicts WHERE event_id IN (SELECT id FROM picked) RETURNING 1),
  e AS (DELETE FROM events WHERE id IN (SELECT id FROM picked) RETURNING 1)
  SELECT (SELECT count(*) FROM e) AS events, (SELECT count(*) FROM a) AS attempts, (SELECT count(*) FROM c) AS conflicts`;

export async function purgeBatch(c: Conn, receivedBefore: number, limit: number): Promise<PurgeBatchResult> {
  const { rows } = await c.query<PurgeBatchResult>('purge', PURGE, [receivedBefore, limit]);
  return rows[0] ?? { events: 0, attempts: 0, conflicts: 0 };
}

export async function countBodiesDroppable(c: Conn, receivedBefore: number): Promise<number> {
  const { rows } = await c.query<{ n: number }>('purge', `SELECT count(*) AS n FROM events WHERE status = 'done' AND received_at < $1 AND body IS NOT NULL`, [
    receivedBefore,
  ]);
  return rows[0]?.n ?? 0;
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

export async function findEventId(c: Conn, source: string, deliveryId: string): Promise<number | undefined> {
  const { rows } = await c.query<{ id: number }>('replay', `SELECT id FROM events WHERE source = $1 AND delivery_id = $2`, [source, deliveryId]);
  return rows[0]?.id;
}

interface ReplayDbRow {
  id: number;
  source: string;
  delivery_id: string;
  status: EventStatus;
  lease_owner: string | null;
  lease_expires_at: number | null;
  body_dropped: boolean;
}

const REPLAY_COLUMNS = `id, source, delivery_id, status, lease_owner, lease_expires_at, body IS NULL AS body_dropped`;

// Retry counter back to 0 so maxAttempts applies afresh; attempt rows are kept as history;
// last_error stays until the next attempt replaces it. A plain replay never clears a
// pending force (the drain clears it when it completes the event).
const RESET = `UPDATE events SET status = 'pending', next_attempt_at = $1, attempts = 0,
  lease_owner = NULL, lease_expires_at = NULL, finished_at = NULL,
  force_effects = CASE WHEN $2 THEN 1 ELSE force_effects END
  WHERE id = ANY($3::bigint[])`;

function refusalOf(r: ReplayDbRow, now: number): ReplayRefusal | undefined {
  // A live lease means a drain is running this event's effects right now: refuse, or the
  // reset would race its completion. An expired lease is a crashed holder; it may be taken.
  if (r.status === 'processing' && r.lease_expires_at !== null && r.lease_expires_at > now) {
    return { eventId: r.id, reason: 'processing', leaseOwner: r.lease_owner, leaseExpiresAt: r.lease_expires_at };
  }
  if (r.body_dropped) return { eventId: r.id, reason: 'body_dropped' };
  return undefined;
}

/**
 * Decides and applies a replay, all or nothing. `rows` holds the events in the order
 * asked, undefined where none exists; they are locked by the caller until COMMIT, so a
 * drain cannot claim (SKIP LOCKED) or complete one between the check and the reset.
 */
async function applyReplay(client: PoolClient, asked: readonly number[], rows: ReadonlyMap<number, ReplayDbRow>, options: ReplayOptions): Promise<ReplayResult> {
  const refused: ReplayRefusal[] = [];
  for (const id of asked) {
    const r = rows.get(id);
    const refusal = r === undefined ? ({ eventId: id, reason: 'not_found' } as const) : refusalOf(r, options.now);
    if (refusal !== undefined) refused.push(refusal);
  }
  // All or nothing: the operator fixes the list and runs the same command again.
  if (refused.length > 0) return { replayed: [], refused };
  if (asked.length > 0) await client.query(RESET, [options.now, options.force, asked]);
  return {
    replayed: asked.map((id) => {
      const r = rows.get(id)!;
      return { eventId: r.id, source: r.source, deliveryId: r.delivery_id, previousStatus: r.status, force: options.force };
    }),
    refused,
  };
}

const lockedById = (rows: ReplayDbRow[]) => new Map(rows.map((r) => [r.id, r]));

export async function replayEvents(c: Conn, eventIds: readonly number[], options: ReplayOptions): Promise<ReplayResult> {
  const ids = [...new Set(eventIds)];
  return c.transaction('replay', async (client) => {
    const { rows } = await client.query<ReplayDbRow>(`SELECT ${REPLAY_COLUMNS} FROM events WHERE id = ANY($1::bigint[]) ORDER BY id FOR NO KEY UPDATE`, [ids]);
    return applyReplay(client, ids, lockedById(rows), options);
  });
}

export async function replayDead(c: Conn, options: ReplayOptions): Promise<ReplayResult> {
  return c.transaction('replay', async (client) => {
    const { rows } = await client.query<ReplayDbRow>(`SELECT ${REPLAY_COLUMNS} FROM events WHERE status = 'dead' ORDER BY id FOR NO KEY UPDATE`);
    return applyReplay(client, rows.map((r) => r.id), lockedById(rows), options);
  });
}

export async function listEvents(c: Conn, query: ListEventsQuery): Promise<EventSummary[]> {
  const { sql, params } = listEventsSql(query, (n) => `$${n}`);
  const { rows } = await c.query<EventDbRow>('events list', sql, params);
  return rows.map(toSummary);
}

export async function deliveriesPerHour(c: Conn, since: number): Promise<HourlyDeliveries[]> {
  const { rows } = await c.query<HourlyDbRow>('admin overview', deliveriesPerHourSql((n) => `$${n}::bigint`), [since]);
  return rows.map(toHourly);
}

export async function effectFailuresByRoute(c: Conn, since: number): Promise<RouteFailures[]> {
  const { rows } = await c.query<RouteFailuresDbRow>('admin overview', effectFailuresByRouteSql((n) => `$${n}::bigint`), [since]);
  return rows.map(toRouteFailures);
}

export async function getEvent(c: Conn, eventId: number): Promise<EventDetail | undefined> {
  // One snapshot: the event, its attempts, effects and conflicts agree with each other.
  return c.transaction(
    'events show',
    async (client) => {
      const { rows } = await client.query<EventDetailDbRow>(`SELECT ${DETAIL_COLUMNS} FROM events WHERE id = $1`, [eventId]);
      const r = rows[0];
      if (r === undefined) return undefined;
      const attempts = await client.query<AttemptDbRow>(`SELECT ${ATTEMPT_COLUMNS} FROM attempts WHERE event_id = $1 ORDER BY id`, [eventId]);
      const effects = await client.query<EffectDbRow>(
        `SELECT ${EFFECT_COLUMNS} FROM effects
         WHERE effect_key IN (SELECT effect_key FROM attempts WHERE event_id = $1 AND effect_key IS NOT NULL) OR event_id = $1 ORDER BY effect_key`,
        [eventId],
      );
      const conflicts = await client.query<ConflictDbRow>(`SELECT ${CONFLICT_COLUMNS} FROM conflicts WHERE event_id = $1 ORDER BY id`, [eventId]);
      return {
        ...toSummary(r),
        headers: r.headers,
        body: r.body,
        bodySha256: r.body_sha256,
        extraIds: r.extra_ids,
        responseStatus: r.response_status,
        leaseOwner: r.lease_owner,
        leaseExpiresAt: r.lease_expires_at,
        attemptRows: attempts.rows.map(toAttempt),
        effects: effects.rows.map(toEffect),
        conflicts: conflicts.rows.map(toConflict),
      };
    },
    { begin: 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY' },
  );
}

export async function stats(c: Conn, now: number): Promise<StoreStats> {
  // One snapshot: every figure agrees with the others.
  return c.transaction(
    'stats',
    async (client) => {
      const byStatus: Record<EventStatus, number> = { pending: 0, processing: 0, done: 0, dead: 0 };
      const perSource = new Map<string, { oldest: number; events: number }>();
      let duplicates = 0;
      // One scan of events: counts, duplicates and oldest key per source together.
      // sum() of integers is bigint (a number here); coalesce for an empty group.
      const groups = await client.query<{ source: string; status: EventStatus; n: number; d: number; oldest: number }>(
        `SELECT source, status, count(*) AS n, coalesce(sum(duplicates), 0)::bigint AS d, min(received_at) AS oldest FROM events GROUP BY source, status`,
      );
      for (const g of groups.rows) {
        byStatus[g.status] += g.n;
        duplicates += g.d;
        const s = perSource.get(g.source);
        if (s === undefined) perSource.set(g.source, { oldest: g.oldest, events: g.n });
        else {
          s.oldest = Math.min(s.oldest, g.oldest);
          s.events += g.n;
        }
      }
      const conflicts = await client.query<{ n: number }>(`SELECT coalesce(sum(1 + repeats), 0)::bigint AS n FROM conflicts`);
      const stuck = await client.query<{ n: number; oldest: number | null }>(
        `SELECT count(*) AS n, min(lease_expires_at) AS oldest FROM events WHERE status = 'processing' AND lease_expires_at < $1`,
        [now],
      );
      const effectsByStatus: StoreStats['effectsByStatus'] = { running: 0, done: 0, failed: 0 };
      const effects = await client.query<{ status: keyof StoreStats['effectsByStatus']; n: number }>(`SELECT status, count(*) AS n FROM effects GROUP BY status`);
      for (const e of effects.rows) effectsByStatus[e.status] = e.n;
      return {
        byStatus,
        duplicates,
        conflicts: conflicts.rows[0]?.n ?? 0,
        sources: [...perSource].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([source, s]) => ({ source, oldestReceivedAt: s.oldest, events: s.events })),
        stuckClaims: stuck.rows[0]?.n ?? 0,
        oldestStuckLeaseExpiresAt: stuck.rows[0]?.oldest ?? null,
        effectsByStatus,
      };
    },
    { begin: 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY' },
  );
}

/** The queue gauges of GET /metrics, read at every scrape: partial indexes only, no scan of finished events. */
export async function queueStats(c: Conn): Promise<QueueStats> {
  const { rows } = await c.query<{ pending: number; oldest: number | null; processing: number; dead: number }>(
    'queue stats',
    `SELECT (SELECT count(*) FROM events WHERE status = 'pending') AS pending,
            (SELECT min(received_at) FROM events WHERE status = 'pending') AS oldest,
            (SELECT count(*) FROM events WHERE status = 'processing') AS processing,
            (SELECT count(*) FROM events WHERE status = 'dead') AS dead`,
  );
  const r = rows[0]!;
  return { pending: r.pending, processing: r.processing, dead: r.dead, oldestPendingReceivedAt: r.oldest };
}
