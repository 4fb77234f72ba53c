import type {
  DropBodiesBatchResult,
  EffectRow,
  EventDetail,
  EventStatus,
  EventSummary,
  HourlyDeliveries,
  ListEventsQuery,
  PurgeBatchResult,
  ReplayOptions,
  ReplayRefusal,
  ReplayResult,
  ReplayedEvent,
  RouteFailures,
  StoreStats,
} from '../ops-types.js';
import { deliveriesPerHourSql, effectFailuresByRouteSql, listEventsSql, toHourly, toRouteFailures, type HourlyDbRow, type RouteFailuresDbRow } from '../ops-queries.js';
import { ATTEMPT_COLUMNS, CONFLICT_COLUMNS, EFFECT_COLUMNS, SUMMARY_COLUMNS, toAttempt, toConflict, toEffect, toSummary, type AttemptDbRow, type ConflictDbRow, type EffectDbRow, type EventSummaryRow } from '../rows.js';
import { sqliteError } from './errors.js';
import type { Db } from './open.js';

/**
 * Operator operations on SQLite (see ../ops-types.ts), one function per operation.
 * Writes are IMMEDIATE transactions: the write lock is taken at BEGIN, where SQLite's busy
 * timeout waits for a running server's ingest, and is held only for one short batch.
 * Rows are converted from snake_case here and nowhere else.
 */

type EventRow = EventSummaryRow;

interface EventDetailRow extends EventRow {
  headers: string | null;
  body: Buffer | null;
  body_sha256: string;
  extra_ids: string | null;
  response_status: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
}



/** Runs `fn`, mapping SQLite errors (busy past the timeout -> unavailable) to ReceiverErrors. */
function guarded<T>(what: string, fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (e) {
    return Promise.reject(sqliteError(e, what));
  }
}

export function countPurgeable(db: Db, receivedBefore: number): Promise<number> {
  return guarded('purge', () => db.prepare(`SELECT count(*) FROM events WHERE status = 'done' AND received_at < ?`).pluck().get(receivedBefore) as number);
}

export function purgeBatch(db: Db, receivedBefore: number, limit: number): Promise<PurgeBatchResult> {
  return guarded('purge', () => {
    const pick = db.prepare(`SELECT id FROM events WHERE status = 'done' AND received_at < ? ORDER BY received_at LIMIT ?`).pluck();
    const delAttempts = db.prepare(`DELETE FROM attempts WHERE event_id IN (SELECT value FROM json_each(?))`);
    const delConflicts = db.prepare(`DELETE FROM conflicts WHERE event_id IN (SELECT value FROM json_each(?))`);
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
        const events = delEvents.run(list).changes;
        return { events, attempts, conflicts };
      })
      .immediate();
  });
}

export function countBodiesDroppable(db: Db, receivedBefore: number): Promise<number> {
  return guarded('purge', () => db.prepare(`SELECT count(*) FROM events WHERE status = 'done' AND received_at < ? AND body IS NOT NULL`).pluck().get(receivedBefore) as number);
}

export function dropBodiesBatch(db: Db, receivedBefore: number, limit: number): Promise<DropBodiesBatchResult> {
  return guarded('purge', () => {
    // Uses the partial index events_finished_bodies, so rows already dropped are not rescanned.
    const pick = db.prepare(`SELECT id FROM events WHERE status = 'done' AND received_at < ? AND body IS NOT NULL ORDER BY received_at LIMIT ?`).pluck();
    const dropConflicts = db.prepare(`UPDATE conflicts SET body = NULL, headers = NULL WHERE body IS NOT NULL AND event_id IN (SELECT value FROM json_each(?))`);
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

export function findEventId(db: Db, source: string, deliveryId: string): Promise<number | undefined> {
  return guarded('replay', () => db.prepare(`SELECT id FROM events WHERE source = ? AND delivery_id = ?`).pluck().get(source, deliveryId) as number | undefined);
}

interface ReplayRow {
  id: number;
  source: string;
  delivery_id: string;
  status: EventStatus;
  lease_owner: string | null;
  lease_expires_at: number | null;
  body_dropped: number;
}

const REPLAY_COLUMNS = `id, source, delivery_id, status, lease_owner, lease_expires_at, body IS NULL AS body_dropped`;

function replayStatements(db: Db) {
  return {
    // Retry counter back to 0 so maxAttempts applies afresh; attempt rows are kept as history;
    // last_error stays until the next attempt replaces it. A plain replay never clears a
    // pending force (the drain clears it when it completes the event).
    reset: db.prepare(`UPDATE events SET status = 'pending', next_attempt_at = ?, attempts = 0,
      lease_owner = NULL, lease_expires_at = NULL, finished_at = NULL,
      force_effects = CASE WHEN ? THEN 1 ELSE force_effects END
      WHERE id = ?`),
  };
}

function refusalOf(r: ReplayRow, now: number): ReplayRefusal | undefined {
  // A live lease means a drain is running this event's effects right now: refuse, or the
  // reset would race its completion. An expired lease is a crashed holder; it may be taken.
  if (r.status === 'processing' && r.lease_expires_at !== null && r.lease_expires_at > now) {
    return { eventId: r.id, reason: 'processing', leaseOwner: r.lease_owner, leaseExpiresAt: r.lease_expires_at };
  }
  if (r.body_dropped !== 0) return { eventId: r.id, reason: 'body_dropped' };
  return undefined;
}

function applyReplay(s: ReturnType<typeof replayStatements>, rows: ReplayRow[], options: ReplayOptions): ReplayedEvent[] {
  return rows.map((r) => {
    s.reset.run(options.now, options.force ? 1 : 0, r.id);
    return { eventId: r.id, source: r.source, deliveryId: r.delivery_id, previousStatus: r.status, force: options.force };
  });
}

export function replayEvents(db: Db, eventIds: readonly number[], options: ReplayOptions): Promise<ReplayResult> {
  return guarded('replay', () => {
    const get = db.prepare(`SELECT ${REPLAY_COLUMNS} FROM events WHERE id = ?`);
    const s = replayStatements(db);
    return db
      .transaction((): ReplayResult => {
        const rows: ReplayRow[] = [];
        const refused: ReplayRefusal[] = [];
        for (const id of new Set(eventIds)) {
          const r = get.get(id) as ReplayRow | undefined;
          if (r === undefined) {
            refused.push({ eventId: id, reason: 'not_found' });
            continue;
          }
          const refusal = refusalOf(r, options.now);
          if (refusal === undefined) rows.push(r);
          else refused.push(refusal);
        }
        // All or nothing: the operator fixes the list and runs the same command again.
        if (refused.length > 0) return { replayed: [], refused };
        return { replayed: applyReplay(s, rows, options), refused };
      })
      .immediate();
  });
}

export function replayDead(db: Db, options: ReplayOptions): Promise<ReplayResult> {
  return guarded('replay', () => {
    const all = db.prepare(`SELECT ${REPLAY_COLUMNS} FROM events WHERE status = 'dead' ORDER BY id`);
    const s = replayStatements(db);
    return db
      .transaction((): ReplayResult => {
        const rows = all.all() as ReplayRow[];
        const refused = rows.map((r) => refusalOf(r, options.now)).filter((x): x is ReplayRefusal => x !== undefined);
        if (refused.length > 0) return { replayed: [], refused };
        return { replayed: applyReplay(s, rows, options), refused };
      })
      .immediate();
  });
}

export function listEvents(db: Db, query: ListEventsQuery): Promise<EventSummary[]> {
  return guarded('events list', () => {
    const { sql, params } = listEventsSql(query, () => '?', (column) => `+${column}`);
    return (db.prepare(sql).all(...params) as EventRow[]).map(toSummary);
  });
}

/** One named parameter, used more than once in the text (better-sqlite3 binds @p1 from { p1 }). */
const named = (n: number) => `@p${n}`;

export function deliveriesPerHour(db: Db, since: number): Promise<HourlyDeliveries[]> {
  return guarded('admin overview', () => (db.prepare(deliveriesPerHourSql(named)).all({ p1: since }) as HourlyDbRow[]).map(toHourly));
}

export function effectFailuresByRoute(db: Db, since: number): Promise<RouteFailures[]> {
  return guarded('admin overview', () => (db.prepare(effectFailuresByRouteSql(named)).all({ p1: since }) as RouteFailuresDbRow[]).map(toRouteFailures));
}

function parseJsonObject(text: string | null): Record<string, string> | null {
  if (text === null) return null;
  return JSON.parse(text) as Record<string, string>;
}

export function getEvent(db: Db, eventId: number): Promise<EventDetail | undefined> {
  return guarded('events show', () =>
    db.transaction((): EventDetail | undefined => {
      const r = db
        .prepare(`SELECT ${SUMMARY_COLUMNS}, headers, body, body_sha256, extra_ids, response_status, lease_owner, lease_expires_at FROM events WHERE id = ?`)
        .get(eventId) as EventDetailRow | undefined;
      if (r === undefined) return undefined;
      const attempts = db.prepare(`SELECT ${ATTEMPT_COLUMNS} FROM attempts WHERE event_id = ? ORDER BY id`).all(eventId) as AttemptDbRow[];
      const effects = db
        .prepare(`SELECT ${EFFECT_COLUMNS} FROM effects
          WHERE effect_key IN (SELECT effect_key FROM attempts WHERE event_id = ? AND effect_key IS NOT NULL) OR event_id = ? ORDER BY effect_key`)
        .all(eventId, eventId) as EffectDbRow[];
      const conflicts = db.prepare(`SELECT ${CONFLICT_COLUMNS} FROM conflicts WHERE event_id = ? ORDER BY id`).all(eventId) as ConflictDbRow[];
      return {
        ...toSummary(r),
        headers: parseJsonObject(r.headers),
        body: r.body,
        bodySha256: r.body_sha256,
        extraIds: parseJsonObject(r.extra_ids),
        responseStatus: r.response_status,
        leaseOwner: r.lease_owner,
        leaseExpiresAt: r.lease_expires_at,
        attemptRows: attempts.map(toAttempt),
        effects: effects.map(toEffect),
        conflicts: conflicts.map(toConflict),
      };
    })(),
  );
}

export function stats(db: Db, now: number): Promise<StoreStats> {
  return guarded('stats', () =>
    // One read transaction: every figure comes from the same snapshot.
    db.transaction((): StoreStats => {
      const byStatus: Record<EventStatus, number> = { pending: 0, processing: 0, done: 0, dead: 0 };
      const perSource = new Map<string, { oldest: number; events: number }>();
      let duplicates = 0;
      // One scan of events: counts, duplicates and oldest key per source together.
      const groups = db
        .prepare(`SELECT source, status, count(*) AS n, coalesce(sum(duplicates), 0) AS d, min(received_at) AS oldest FROM events GROUP BY source, status`)
        .all() as { source: string; status: EventStatus; n: number; d: number; oldest: number }[];
      for (const g of groups) {
        byStatus[g.status] += g.n;
        duplicates += g.d;
        const s = perSource.get(g.source);
        if (s === undefined) perSource.set(g.source, { oldest: g.oldest, events: g.n });
        else {
          s.oldest = Math.min(s.oldest, g.oldest);
          s.events += g.n;
        }
      }
      const conflicts = db.prepare(`SELECT coalesce(sum(1 + repeats), 0) FROM conflicts`).pluck().get() as number;
      const stuck = db.prepare(`SELECT count(*) AS n, min(lease_expires_at) AS oldest FROM events WHERE status = 'processing' AND lease_expires_at < ?`).get(now) as { n: number; oldest: number | null };
      const effectsByStatus: StoreStats['effectsByStatus'] = { running: 0, done: 0, failed: 0 };
      for (const e of db.prepare(`SELECT status, count(*) AS n FROM effects GROUP BY status`).all() as { status: EffectRow['status']; n: number }[]) effectsByStatus[e.status] = e.n;
      return {
        byStatus,
        duplicates,
        conflicts,
        sources: [...perSource].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([source, s]) => ({ source, oldestReceivedAt: s.oldest, events: s.events })),
        stuckClaims: stuck.n,
        oldestStuckLeaseExpiresAt: stuck.oldest,
        effectsByStatus,
      };
    })(),
  );
}
