import type {
  EffectRow,
  EventDetail,
  LaneStats,
  EventSummary,
  HourlyDeliveries,
  LedgerPurgeBatchResult,
  ListEventsQuery,
  NearDeliveryId,
  OpsStore,
  ReplayOptions,
  ReplayRefusal,
  ReplayResult,
  RouteFailures,
  SearchEventsQuery,
  SearchEventsResult,
  StoreStats,
} from './ops-types.js';
import { EVENT_STATUSES, type EventStatus } from '../vocabulary.js';
import {
  ATTEMPT_COLUMNS,
  CONFLICT_COLUMNS,
  DETAIL_COLUMNS,
  EVENT_LEASE_COLUMNS,
  EFFECT_COLUMNS,
  SUMMARY_COLUMNS,
  toDetail,
  toHourly,
  toLaneStats,
  toRouteFailures,
  toSummary,
  type AttemptDbRow,
  type ConflictDbRow,
  type EffectDbRow,
  type EventDetailDbRow,
  type EventSummaryRow,
  type HourlyDbRow,
  type LaneStatsDbRow,
  type RouteFailuresDbRow,
  type UnitDbRow,
  UNIT_COLUMNS,
} from './rows.js';
import { changes, first, memo, rows, sqlText, type Dialect, type Steps } from './sql.js';
import { deriveEventStatus } from './drain/settle.js';

/**
 * Operator operations written once for both stores (see sql.ts): counts, replay, events
 * list and show, stats, the admin overview's figures, the ledger purge. Event purge batches stay in each store: PostgreSQL deletes a batch in
 * one statement (writable CTEs, SKIP LOCKED), SQLite in several under its write lock.
 */

const HOUR_MS = 3_600_000;

/**
 * Ids grow with arrival, so the window starts after the newest row from before `since`:
 * walking ids down from the newest stops there, and older rows are never read. A row
 * committed a moment out of order at the window's edge may be left out. Takes two
 * parameters, both `since`.
 */
const newerThan = (p: () => string, table: 'events' | 'attempts', column: string) =>
  `id > coalesce((SELECT id FROM ${table} WHERE ${column} < ${p()} ORDER BY id DESC LIMIT 1), 0) AND ${column} >= ${p()}`;

/**
 * Every source with events, by a loose index scan of (source, delivery_id): one index
 * probe per source, so an exact delivery id without its source is still found by index.
 */
const SOURCES = `WITH RECURSIVE sources(source) AS (
  SELECT min(source) FROM events
  UNION ALL SELECT (SELECT min(source) FROM events WHERE source > sources.source) FROM sources WHERE sources.source IS NOT NULL)`;

/**
 * A ledger row that may be purged (`f` is the effects row; takes one parameter, the
 * cutoff): finished (done or failed; a running row is a run in progress, or one that
 * crashed and must repeat) before the cutoff, and referred to by no stored event. The
 * event that last ran it is `event_id`; every event that decided about the key has an
 * attempt row with it (run, skipped, stale or busy), and attempts go only with their
 * event. So while any event that brought the key is kept, the key is kept.
 */
const ledgerPurgeable = (p: () => string) => `f.status IN ('done', 'failed') AND f.finished_at < ${p()}
  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = f.event_id)
  AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.effect_key = f.effect_key)`;

/**
 * Per lane, from the partial indexes of pending and of processing units (never the done
 * ones): counts, and the event of the oldest pending unit (the lane's first planned). Read
 * at every scrape of GET /metrics: its cost follows the queue, not the table.
 */
export const LANE_STATS = `SELECT g.lane, g.pending, g.running, e.received_at AS oldest FROM (
    SELECT lane, sum(pending) AS pending, sum(running) AS running, min(first_id) AS first_id FROM (
      SELECT lane, count(*) AS pending, 0 AS running, min(id) AS first_id FROM units WHERE status = 'pending' GROUP BY lane
      UNION ALL
      SELECT lane, 0 AS pending, count(*) AS running, NULL AS first_id FROM units WHERE status = 'processing' GROUP BY lane
    ) AS by_status GROUP BY lane
  ) AS g LEFT JOIN units u ON u.id = g.first_id LEFT JOIN events e ON e.id = u.event_id`;

const REPLAY_COLUMNS = `id, source, delivery_id, status, ${EVENT_LEASE_COLUMNS}, CASE WHEN body IS NULL THEN 1 ELSE 0 END AS body_dropped`;

const statements = memo((d: Dialect) => {
  const text = (build: (p: () => string) => string) => sqlText(d, build);
  return {
    countPurgeable: text((p) => `SELECT count(*) AS n FROM events WHERE status = 'done' AND received_at < ${p()}`),
    countBodiesDroppable: text((p) => `SELECT count(*) AS n FROM events WHERE status = 'done' AND received_at < ${p()} AND body IS NOT NULL`),
    countLedgerPurgeable: text((p) => `SELECT count(*) AS n FROM effects f WHERE ${ledgerPurgeable(p)}`),
    // A window of keys in key order from where the last batch stopped, each marked purgeable
    // or not: the whole ledger is walked once per purge, a bounded stretch per read, and no
    // index on finished_at is written at every effect. Parameters: cutoff, after key, window.
    ledgerWindow: text(
      (p) => `SELECT f.effect_key, CASE WHEN ${ledgerPurgeable(p)} THEN 1 ELSE 0 END AS purgeable
        FROM effects f WHERE f.effect_key > ${p()} ORDER BY f.effect_key LIMIT ${p()}`,
    ),
    // The rule again at the delete: a key a drain ran or decided about since the pick stays.
    deleteLedger: text(
      (p) => `DELETE FROM effects WHERE effect_key IN (
        SELECT f.effect_key FROM effects f WHERE f.effect_key IN (${d.textList(p())}) AND ${ledgerPurgeable(p)}${d.skipLocked})`,
    ),
    // Body keys past their retry horizon (ingest takes such a key over anyway), oldest event
    // first: the walk of the event_id index meets the expired keys first.
    countExpiredBodyKeys: text((p) => `SELECT count(*) AS n FROM body_keys WHERE expires_at <= ${p()}`),
    purgeBodyKeys: text(
      (p) => `DELETE FROM body_keys WHERE (source, body_sha256) IN (
        SELECT source, body_sha256 FROM body_keys WHERE expires_at <= ${p()} ORDER BY event_id LIMIT ${p()}${d.skipLocked})`,
    ),
    findEventId: text((p) => `SELECT id FROM events WHERE source = ${p()} AND delivery_id = ${p()}`),
    // The admin pages' sessions: a login also forgets the expired ones.
    forgetExpiredSessions: text((p) => `DELETE FROM admin_sessions WHERE expires_at <= ${p()}`),
    startSession: text((p) => `INSERT INTO admin_sessions (id, expires_at) VALUES (${p()}, ${p()})`),
    liveSession: text((p) => `SELECT 1 AS live FROM admin_sessions WHERE id = ${p()} AND expires_at > ${p()}`),
    endSession: text((p) => `DELETE FROM admin_sessions WHERE id = ${p()}`),
    // Locked (where the dialect locks rows) until COMMIT, so a drain cannot claim or complete
    // one between the check and the reset.
    replayRows: text((p) => `SELECT ${REPLAY_COLUMNS} FROM events WHERE id IN (${d.idList(p())}) ORDER BY id${d.lockRows}`),
    deadRows: `SELECT ${REPLAY_COLUMNS} FROM events WHERE status = 'dead' ORDER BY id${d.lockRows}`,
    // Retry counter back to 0 so maxAttempts applies afresh; attempt rows are kept as history;
    // last_error stays until the next attempt replaces it. A plain replay never clears a
    // pending force (the drain clears it when it completes the event). A forced one sets
    // force_effects to the id the replay's first attempt row will have at least: the drain
    // tells this replay's forced runs from earlier ones by it (forcedInThisReplay in drain/ledger.ts).
    // The event's units (a planned event) start over the same way, each counting its replay.
    // An event without units (no route applied, or done before units existed) is planned
    // again by the drain with the routes of the day.
    resetUnits: text(
      (p) => `UPDATE units SET status = 'pending', next_attempt_at = ${p()}, attempts = 0, lease_owner = NULL, lease_expires_at = NULL,
        finished_at = NULL, replays = replays + 1,
        force_effects = CASE WHEN ${p()} = 1 THEN coalesce((SELECT max(a.id) FROM attempts a WHERE a.event_id = units.event_id), 0) + 1 ELSE force_effects END
        WHERE event_id IN (${d.idList(p())})`,
    ),
    // One route of each event: its unit alone starts over (replay --route).
    resetRoute: text(
      (p) => `UPDATE units SET status = 'pending', next_attempt_at = ${p()}, attempts = 0, lease_owner = NULL, lease_expires_at = NULL,
        finished_at = NULL, replays = replays + 1,
        force_effects = CASE WHEN ${p()} = 1 THEN coalesce((SELECT max(a.id) FROM attempts a WHERE a.event_id = units.event_id), 0) + 1 ELSE force_effects END
        WHERE event_id IN (${d.idList(p())}) AND route = ${p()}`,
    ),
    // The units of those events, locked like their events (replayRows) until COMMIT.
    unitsOf: text(
      (p) =>
        `SELECT event_id, route, status, lease_owner, lease_expires_at FROM units WHERE event_id IN (${d.idList(p())}) ORDER BY event_id, route${d.lockRows}`,
    ),
    reset: text(
      (p) => `UPDATE events SET status = 'pending', next_attempt_at = ${p()}, attempts = 0,
        lease_owner = NULL, lease_expires_at = NULL, finished_at = NULL,
        force_effects = CASE WHEN ${p()} = 1 THEN coalesce((SELECT max(a.id) FROM attempts a WHERE a.event_id = events.id), 0) + 1 ELSE force_effects END,
        planned = CASE WHEN EXISTS (SELECT 1 FROM units u WHERE u.event_id = events.id) THEN planned ELSE 0 END
        WHERE id IN (${d.idList(p())})`,
    ),
    event: text((p) => `SELECT ${DETAIL_COLUMNS} FROM events WHERE id = ${p()}`),
    units: text((p) => `SELECT ${UNIT_COLUMNS} FROM units WHERE event_id = ${p()} ORDER BY id`),
    attempts: text((p) => `SELECT ${ATTEMPT_COLUMNS} FROM attempts WHERE event_id = ${p()} ORDER BY id`),
    effects: text(
      (p) => `SELECT ${EFFECT_COLUMNS} FROM effects
        WHERE effect_key IN (SELECT effect_key FROM attempts WHERE event_id = ${p()} AND effect_key IS NOT NULL) OR event_id = ${p()} ORDER BY effect_key`,
    ),
    conflicts: text((p) => `SELECT ${CONFLICT_COLUMNS} FROM conflicts WHERE event_id = ${p()} ORDER BY id`),
    // One scan of events: counts, duplicates and oldest key per source together. The CASTs:
    // PostgreSQL's sum() of a bigint is numeric, which its driver returns as a string.
    statsGroups: `SELECT source, status, count(*) AS n, CAST(coalesce(sum(duplicates), 0) AS bigint) AS d, min(received_at) AS oldest
      FROM events GROUP BY source, status`,
    statsConflicts: `SELECT CAST(coalesce(sum(1 + repeats), 0) AS bigint) AS n FROM conflicts`,
    // A lease is a unit's: a claim whose lease ran out, not yet taken back.
    statsStuck: text((p) => `SELECT count(*) AS n, min(lease_expires_at) AS oldest FROM units WHERE status = 'processing' AND lease_expires_at < ${p()}`),
    statsEffects: `SELECT status, count(*) AS n, min(finished_at) AS oldest FROM effects GROUP BY status`,
    statsLedgerBytes: d.tableBytes('effects'),
    laneStats: LANE_STATS,
    // Ids start at 1 and are never reused: while event 1 is stored, nothing older was purged.
    statsFirstEvent: `SELECT received_at FROM events WHERE id = 1`,
    // Reads only the newest rows (by id): its cost follows the window, not the table.
    // Parameters: `since`, three times.
    deliveriesPerHour: text(
      (p) => `SELECT received_at / ${HOUR_MS} * ${HOUR_MS} AS hour, status AS outcome, count(*) AS count FROM events
        WHERE ${newerThan(p, 'events', 'received_at')} GROUP BY 1, 2
        UNION ALL
        SELECT received_at / ${HOUR_MS} * ${HOUR_MS} AS hour, 'conflict' AS outcome, sum(1 + repeats) AS count FROM conflicts
        WHERE received_at >= ${p()} GROUP BY 1
        ORDER BY 1, 2`,
    ),
    // Parameters: `since`, twice.
    effectFailuresByRoute: text(
      (p) => `SELECT route, count(*) AS failures, max(started_at) AS last_failed_at FROM attempts
        WHERE outcome = 'failed' AND ${newerThan(p, 'attempts', 'started_at')}
        GROUP BY route ORDER BY failures DESC, route`,
    ),
  };
});

export function* countPurgeable(d: Dialect, receivedBefore: number): Steps<number> {
  return (yield* first<{ n: number }>(statements(d).countPurgeable, [receivedBefore]))?.n ?? 0;
}

export function* countBodiesDroppable(d: Dialect, receivedBefore: number): Steps<number> {
  return (yield* first<{ n: number }>(statements(d).countBodiesDroppable, [receivedBefore]))?.n ?? 0;
}

export function* countLedgerPurgeable(d: Dialect, finishedBefore: number): Steps<number> {
  return (yield* first<{ n: number }>(statements(d).countLedgerPurgeable, [finishedBefore]))?.n ?? 0;
}

/** Keys read per ledger purge batch, per key it may delete: bounds each read as `limit` bounds each delete. */
export const LEDGER_WINDOW_PER_DELETE = 10;

/**
 * The next stretch of the ledger after `afterKey`: up to `limit` purgeable keys, and the
 * key the next batch starts after (null at the end of the ledger).
 */
export function* pickLedger(
  d: Dialect,
  finishedBefore: number,
  afterKey: string,
  limit: number,
): Steps<{ keys: string[]; lastKey: string | null; examined: number }> {
  const window = limit * LEDGER_WINDOW_PER_DELETE;
  const found = yield* rows<{ effect_key: string; purgeable: number }>(statements(d).ledgerWindow, [finishedBefore, afterKey, window]);
  const keys: string[] = [];
  for (const [i, r] of found.entries()) {
    if (Number(r.purgeable) === 1) keys.push(r.effect_key);
    // As many as one delete takes: the next batch goes on from here.
    if (keys.length === limit) return { keys, lastKey: r.effect_key, examined: i + 1 };
  }
  return { keys, lastKey: found.length < window ? null : found[found.length - 1]!.effect_key, examined: found.length };
}

/** Deletes those of `keys` that are still purgeable. */
export function* deleteLedger(d: Dialect, keys: readonly string[], finishedBefore: number): Steps<number> {
  return yield* changes(statements(d).deleteLedger, [d.ids(keys), finishedBefore]);
}

export function* countExpiredBodyKeys(d: Dialect, now: number): Steps<number> {
  return (yield* first<{ n: number }>(statements(d).countExpiredBodyKeys, [now]))?.n ?? 0;
}

export function* purgeBodyKeys(d: Dialect, now: number, limit: number): Steps<number> {
  return yield* changes(statements(d).purgeBodyKeys, [now, limit]);
}

export function* findEventId(d: Dialect, source: string, deliveryId: string): Steps<number | undefined> {
  return (yield* first<{ id: number }>(statements(d).findEventId, [source, deliveryId]))?.id;
}

/** `text` as a LIKE pattern that matches it anywhere, with `\` as the escape character. */
const containsPattern = (text: string) => `%${text.replace(/[\\%_]/g, '\\$&')}%`;
/** Lower case for ASCII letters only, as SQLite's lower() does. */
const asciiLower = (text: string) => text.replace(/[A-Z]/g, (c) => c.toLowerCase());
/** A given id longer than this is also looked for by its first NEAR_PREFIX characters (a paste cut or mistyped at the end). */
const NEAR_PREFIX = 8;

/** Events whose delivery id contains `given` or its beginning, ignoring ASCII case, among the newest `scanLimit`. */
export function* nearDeliveryIds(d: Dialect, given: string, o: { source?: string | undefined; limit: number; scanLimit: number }): Steps<NearDeliveryId[]> {
  const { params, p } = parameters(d);
  const text = asciiLower(given.trim());
  const patterns = [text, ...(text.length > NEAR_PREFIX + 4 ? [text.slice(0, NEAR_PREFIX)] : [])].map(containsPattern);
  // Newest ids first, walked by id (not through the source index, which would sort them all).
  const recent = `SELECT id, source, delivery_id FROM events ${o.source === undefined ? '' : `WHERE ${d.unindexed('source')} = ${p(o.source)}`} ORDER BY id DESC LIMIT ${p(o.scanLimit)}`;
  const like = patterns.map((pattern) => `lower(delivery_id) LIKE ${p(pattern)} ESCAPE '\\'`).join(' OR ');
  const sql = `SELECT id, source, delivery_id FROM (${recent}) AS recent WHERE ${like} ORDER BY id DESC LIMIT ${p(o.limit)}`;
  return (yield* rows<{ id: number; source: string; delivery_id: string }>(sql, params)).map((r) => ({
    id: r.id,
    source: r.source,
    deliveryId: r.delivery_id,
  }));
}

export function* startAdminSession(d: Dialect, id: string, expiresAt: number, now: number): Steps<void> {
  yield* changes(statements(d).forgetExpiredSessions, [now]);
  yield* changes(statements(d).startSession, [id, expiresAt]);
}

export function* isAdminSessionLive(d: Dialect, id: string, now: number): Steps<boolean> {
  return (yield* first(statements(d).liveSession, [id, now])) !== undefined;
}

export function* endAdminSession(d: Dialect, id: string): Steps<void> {
  yield* changes(statements(d).endSession, [id]);
}

interface ReplayDbRow {
  id: number;
  source: string;
  delivery_id: string;
  status: EventStatus;
  lease_owner: string | null;
  lease_expires_at: number | null;
  body_dropped: number;
}

function refusalOf(r: ReplayDbRow, now: number, route: string | undefined): ReplayRefusal | undefined {
  // A live lease means a drain is running this event's effects right now: refuse, or the
  // reset would race its completion. An expired lease is a crashed holder; it may be taken.
  // A replay of one route asks only about that route's unit (routeRefusals): the others may
  // run meanwhile (a licence sent again while the deploy of the same event runs).
  if (route === undefined && r.status === 'processing' && r.lease_expires_at !== null && r.lease_expires_at > now) {
    return { eventId: r.id, reason: 'processing', leaseOwner: r.lease_owner, leaseExpiresAt: r.lease_expires_at };
  }
  if (r.body_dropped !== 0) return { eventId: r.id, reason: 'body_dropped' };
  return undefined;
}

/** Decides and applies a replay of `asked` (in that order), all or nothing, on rows read in this transaction. */
function* applyReplay(d: Dialect, asked: readonly number[], found: readonly ReplayDbRow[], options: ReplayOptions): Steps<ReplayResult> {
  const byId = new Map(found.map((r) => [r.id, r]));
  const refused: ReplayRefusal[] = [];
  for (const id of asked) {
    const r = byId.get(id);
    const refusal = r === undefined ? ({ eventId: id, reason: 'not_found' } as const) : refusalOf(r, options.now, options.route);
    if (refusal !== undefined) refused.push(refusal);
  }
  const route = options.route;
  if (route !== undefined && refused.length === 0 && asked.length > 0) {
    for (const refusal of yield* routeRefusals(d, asked, route, options.now)) refused.push(refusal);
  }
  // All or nothing: the operator fixes the list and runs the same command again.
  if (refused.length > 0) return { replayed: [], refused };
  if (asked.length > 0) {
    const params = [options.now, options.force ? 1 : 0, d.ids(asked)];
    if (route === undefined) yield* changes(statements(d).resetUnits, params);
    else yield* changes(statements(d).resetRoute, [...params, route]);
    yield* changes(statements(d).reset, params);
    // The event's status follows its units': processing while another route still runs.
    if (route !== undefined) yield* deriveEventStatus(d, asked, options.now);
  }
  return {
    replayed: asked.map((id) => {
      const r = byId.get(id)!;
      return {
        eventId: r.id,
        source: r.source,
        deliveryId: r.delivery_id,
        previousStatus: r.status,
        force: options.force,
        ...(route === undefined ? {} : { route }),
      };
    }),
    refused,
  };
}

/** For a replay of one route: the events without that route (naming those they have), and those whose unit of it a drain holds now. */
function* routeRefusals(d: Dialect, asked: readonly number[], route: string, now: number): Steps<ReplayRefusal[]> {
  const units = yield* rows<{ event_id: number; route: string; status: string; lease_owner: string | null; lease_expires_at: number | null }>(
    statements(d).unitsOf,
    [d.ids(asked)],
  );
  const refused: ReplayRefusal[] = [];
  for (const id of asked) {
    const mine = units.filter((u) => u.event_id === id);
    const unit = mine.find((u) => u.route === route);
    if (unit === undefined) refused.push({ eventId: id, reason: 'no_route', route, routes: mine.map((u) => u.route) });
    else if (unit.status === 'processing' && unit.lease_expires_at !== null && unit.lease_expires_at > now) {
      refused.push({ eventId: id, reason: 'processing', leaseOwner: unit.lease_owner, leaseExpiresAt: unit.lease_expires_at });
    }
  }
  return refused;
}

export function* replayEvents(d: Dialect, eventIds: readonly number[], options: ReplayOptions): Steps<ReplayResult> {
  const asked = [...new Set(eventIds)];
  return yield* applyReplay(d, asked, yield* rows<ReplayDbRow>(statements(d).replayRows, [d.ids(asked)]), options);
}

export function* replayDead(d: Dialect, options: ReplayOptions): Steps<ReplayResult> {
  const found = yield* rows<ReplayDbRow>(statements(d).deadRows);
  return yield* applyReplay(
    d,
    found.map((r) => r.id),
    found,
    options,
  );
}

/** The list's filters as a WHERE (and the CTE it needs), their parameters pushed through `p` in order. */
function listFilters(d: Dialect, query: ListEventsQuery, p: (value: unknown) => string): { prefix: string; where: string } {
  const where: string[] = [];
  let prefix = '';
  if (query.status !== undefined) {
    if (!EVENT_STATUSES.includes(query.status)) throw new TypeError(`unknown status ${String(query.status)}`);
    // A literal (checked above), so the planner can use the partial index for that status.
    where.push(`status = '${query.status}'`);
  }
  // With a delivery id, (source, delivery_id) is the index to use: one probe.
  if (query.source !== undefined) where.push(`${query.deliveryId === undefined ? d.unindexed('source') : 'source'} = ${p(query.source)}`);
  if (query.deliveryId !== undefined) {
    where.push(`delivery_id = ${p(query.deliveryId)}`);
    if (query.source === undefined) {
      prefix = SOURCES;
      where.push(`source IN (SELECT source FROM sources WHERE source IS NOT NULL)`);
    }
  }
  if (query.deliveryIdForms !== undefined) {
    // One index probe per form, through (source, delivery_id); a suffix reads the source's
    // stretch of that index, not its rows.
    const forms = query.deliveryIdForms.map((f) => {
      if ('suffix' in f) {
        return `SELECT id FROM events WHERE source = ${p(f.source)} AND length(delivery_id) > ${p(f.suffix.length)}
          AND substr(delivery_id, length(delivery_id) - ${p(f.suffix.length - 1)}) = ${p(f.suffix)}`;
      }
      if (f.source !== undefined) return `SELECT id FROM events WHERE source = ${p(f.source)} AND delivery_id = ${p(f.exact)}`;
      prefix = SOURCES;
      return `SELECT id FROM events WHERE source IN (SELECT source FROM sources WHERE source IS NOT NULL) AND delivery_id = ${p(f.exact)}`;
    });
    where.push(forms.length === 0 ? '1 = 0' : `id IN (${forms.join(' UNION ALL ')})`);
  }
  if (query.deliveryIdPrefix !== undefined && query.deliveryIdPrefix !== '') {
    // substr and length, not LIKE: `%` and `_` in an id are plain characters here.
    where.push(`substr(delivery_id, 1, length(${p(query.deliveryIdPrefix)})) = ${p(query.deliveryIdPrefix)}`);
  }
  if (query.eventType !== undefined) where.push(`event_type = ${p(query.eventType)}`);
  if (query.eventTypeGlob !== undefined) where.push(d.globMatch('event_type', p(d.globPattern(query.eventTypeGlob))));
  if (query.origin !== undefined) where.push(`origin = ${p(query.origin)}`);
  if (query.receivedFrom !== undefined) where.push(`received_at >= ${p(query.receivedFrom)}`);
  if (query.receivedBefore !== undefined) where.push(`received_at < ${p(query.receivedBefore)}`);
  if (query.beforeId !== undefined) where.push(`id < ${p(query.beforeId)}`);
  return { prefix, where: where.length > 0 ? `WHERE ${where.join(' AND ')}` : '' };
}

/** Placeholders numbered in the order values are pushed, for statements built per query. */
function parameters(d: Dialect) {
  const params: unknown[] = [];
  return { params, p: (value: unknown) => d.placeholder(params.push(value)) };
}

/** `events list` and the admin list: newest first, every filter given ANDed, keyset by id. */
export function* listEvents(d: Dialect, query: ListEventsQuery): Steps<EventSummary[]> {
  const { params, p } = parameters(d);
  const { prefix, where } = listFilters(d, query, p);
  const sql = `${prefix} SELECT ${SUMMARY_COLUMNS} FROM events ${where} ORDER BY id DESC LIMIT ${p(query.limit)}`;
  return (yield* rows<EventSummaryRow>(sql, params)).map(toSummary);
}

/**
 * `events list --search`: the `scanLimit` newest events matching the filters, then those
 * whose body contains the text. Run in one read snapshot, so the second statement (are
 * there older events the bound left unsearched?) sees what the first one did.
 */
export function* searchEvents(d: Dialect, query: SearchEventsQuery): Steps<SearchEventsResult> {
  const search = parameters(d);
  const { prefix, where } = listFilters(d, query, search.p);
  const window = `SELECT ${SUMMARY_COLUMNS}, body FROM events ${where} ORDER BY id DESC LIMIT ${search.p(query.scanLimit)}`;
  const contains = d.bytesContain('body', search.p(Buffer.from(query.bodyContains, 'utf8')));
  const sql = `${prefix} SELECT ${SUMMARY_COLUMNS} FROM (${window}) AS scanned WHERE ${contains} ORDER BY id DESC LIMIT ${search.p(query.limit)}`;
  const events = (yield* rows<EventSummaryRow>(sql, search.params)).map(toSummary);
  // A full page is what an unbounded search would have shown first: the bound cut nothing.
  if (events.length >= query.limit) return { events, scanLimitReached: false };
  const beyond = parameters(d);
  const rest = listFilters(d, query, beyond.p);
  const older = `${rest.prefix} SELECT id FROM events ${rest.where} ORDER BY id DESC LIMIT 1 OFFSET ${beyond.p(query.scanLimit)}`;
  return { events, scanLimitReached: (yield* first<{ id: number }>(older, beyond.params)) !== undefined };
}

/** Events received since `since`, per hour and outcome (status now, or conflict), oldest hour first. */
export function* deliveriesPerHour(d: Dialect, since: number): Steps<HourlyDeliveries[]> {
  return (yield* rows<HourlyDbRow>(statements(d).deliveriesPerHour, [since, since, since])).map(toHourly);
}

/** Failed attempts started since `since`, per route, most failures first. */
export function* effectFailuresByRoute(d: Dialect, since: number): Steps<RouteFailures[]> {
  return (yield* rows<RouteFailuresDbRow>(statements(d).effectFailuresByRoute, [since, since])).map(toRouteFailures);
}

/** Run in one read snapshot: the event, its attempts, effects and conflicts agree with each other. */
export function* getEvent(d: Dialect, eventId: number): Steps<EventDetail | undefined> {
  const s = statements(d);
  const r = yield* first<EventDetailDbRow>(s.event, [eventId]);
  if (r === undefined) return undefined;
  const units = yield* rows<UnitDbRow>(s.units, [eventId]);
  const attempts = yield* rows<AttemptDbRow>(s.attempts, [eventId]);
  const effects = yield* rows<EffectDbRow>(s.effects, [eventId, eventId]);
  return toDetail(r, units, attempts, effects, yield* rows<ConflictDbRow>(s.conflicts, [eventId]));
}

/** The lanes with pending or running units, by name (in code: the databases sort text by different collations). */
export function* laneStats(d: Dialect): Steps<LaneStats[]> {
  const lanes = (yield* rows<LaneStatsDbRow>(statements(d).laneStats)).map(toLaneStats);
  return lanes.sort((a, b) => (a.lane < b.lane ? -1 : a.lane > b.lane ? 1 : 0));
}

/** Run in one read snapshot: every figure agrees with the others. */
export function* stats(d: Dialect, now: number): Steps<StoreStats> {
  const s = statements(d);
  const byStatus: Record<EventStatus, number> = { pending: 0, processing: 0, done: 0, dead: 0 };
  const perSource = new Map<string, { oldest: number; events: number }>();
  let duplicates = 0;
  for (const g of yield* rows<{ source: string; status: EventStatus; n: number; d: number; oldest: number }>(s.statsGroups)) {
    byStatus[g.status] += g.n;
    duplicates += g.d;
    const source = perSource.get(g.source);
    if (source === undefined) perSource.set(g.source, { oldest: g.oldest, events: g.n });
    else {
      source.oldest = Math.min(source.oldest, g.oldest);
      source.events += g.n;
    }
  }
  const conflicts = (yield* first<{ n: number }>(s.statsConflicts))?.n ?? 0;
  const stuck = yield* first<{ n: number; oldest: number | null }>(s.statsStuck, [now]);
  const effectsByStatus: StoreStats['effectsByStatus'] = { running: 0, done: 0, failed: 0 };
  let oldestFinishedAt: number | null = null;
  for (const e of yield* rows<{ status: EffectRow['status']; n: number; oldest: number | null }>(s.statsEffects)) {
    effectsByStatus[e.status] = e.n;
    // A running row's finished_at is its previous run's, or none.
    if (e.status !== 'running' && e.oldest !== null) oldestFinishedAt = oldestFinishedAt === null ? e.oldest : Math.min(oldestFinishedAt, e.oldest);
  }
  const bytes = (yield* first<{ bytes: number }>(s.statsLedgerBytes))?.bytes ?? 0;
  const firstEvent = yield* first<{ received_at: number }>(s.statsFirstEvent);
  return {
    byStatus,
    duplicates,
    conflicts,
    sources: [...perSource].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([source, v]) => ({ source, oldestReceivedAt: v.oldest, events: v.events })),
    stuckClaims: stuck?.n ?? 0,
    oldestStuckLeaseExpiresAt: stuck?.oldest ?? null,
    effectsByStatus,
    ledger: { bytes, oldestFinishedAt },
    firstEventReceivedAt: firstEvent?.received_at ?? null,
    lanes: yield* laneStats(d),
  };
}

/** How a store runs shared steps: each statement on its own, in a write transaction, or in one read snapshot. */
export interface StepRunner {
  alone<T>(what: string, steps: Steps<T>): Promise<T>;
  /** `steps` is called again if the transaction is retried. */
  write<T>(what: string, steps: () => Steps<T>): Promise<T>;
  snapshot<T>(what: string, steps: () => Steps<T>): Promise<T>;
}

/** The operator operations both stores run alike; purge batches and queue gauges are each store's own. */
export type SharedOps = Pick<
  OpsStore,
  | 'countPurgeable'
  | 'countBodiesDroppable'
  | 'countLedgerPurgeable'
  | 'purgeLedgerBatch'
  | 'countExpiredBodyKeys'
  | 'purgeBodyKeysBatch'
  | 'findEventId'
  | 'nearDeliveryIds'
  | 'startAdminSession'
  | 'isAdminSessionLive'
  | 'endAdminSession'
  | 'replayEvents'
  | 'replayDead'
  | 'listEvents'
  | 'searchEvents'
  | 'deliveriesPerHour'
  | 'effectFailuresByRoute'
  | 'getEvent'
  | 'stats'
  | 'laneStats'
>;

export function sharedOps(d: Dialect, run: StepRunner): SharedOps {
  return {
    countPurgeable: (receivedBefore) => run.alone('purge', countPurgeable(d, receivedBefore)),
    countBodiesDroppable: (receivedBefore) => run.alone('purge', countBodiesDroppable(d, receivedBefore)),
    countLedgerPurgeable: (finishedBefore) => run.alone('purge', countLedgerPurgeable(d, finishedBefore)),
    purgeLedgerBatch: async (finishedBefore, afterKey, limit): Promise<LedgerPurgeBatchResult> => {
      // The pick reads without the write lock; only the delete of what it found takes it.
      const { keys, lastKey, examined } = await run.alone('purge', pickLedger(d, finishedBefore, afterKey, limit));
      const removed = keys.length === 0 ? 0 : await run.write('purge', () => deleteLedger(d, keys, finishedBefore));
      return { examined, picked: keys.length, removed, lastKey };
    },
    countExpiredBodyKeys: (now) => run.alone('purge', countExpiredBodyKeys(d, now)),
    purgeBodyKeysBatch: (now, limit) => run.write('purge', () => purgeBodyKeys(d, now, limit)),
    findEventId: (source, deliveryId) => run.alone('replay', findEventId(d, source, deliveryId)),
    nearDeliveryIds: (given, options) => run.alone('events list', nearDeliveryIds(d, given, options)),
    startAdminSession: (id, expiresAt, now) => run.write('admin login', () => startAdminSession(d, id, expiresAt, now)),
    isAdminSessionLive: (id, now) => run.alone('admin session', isAdminSessionLive(d, id, now)),
    endAdminSession: (id) => run.alone('admin logout', endAdminSession(d, id)),
    replayEvents: (eventIds, options) => run.write('replay', () => replayEvents(d, eventIds, options)),
    replayDead: (options) => run.write('replay', () => replayDead(d, options)),
    listEvents: (query) => run.alone('events list', listEvents(d, query)),
    searchEvents: (query) => run.snapshot('events list', () => searchEvents(d, query)),
    deliveriesPerHour: (since) => run.alone('admin overview', deliveriesPerHour(d, since)),
    effectFailuresByRoute: (since) => run.alone('admin overview', effectFailuresByRoute(d, since)),
    getEvent: (eventId) => run.snapshot('events show', () => getEvent(d, eventId)),
    stats: (now) => run.snapshot('stats', () => stats(d, now)),
    laneStats: () => run.alone('lane stats', laneStats(d)),
  };
}
