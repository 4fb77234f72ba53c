import { EVENT_STATUSES, type HourlyDeliveries, type ListEventsQuery, type RouteFailures } from './ops-types.js';
import { SUMMARY_COLUMNS } from './rows.js';

/**
 * SQL texts of the operator reads both stores run alike, one per operation, built by small
 * functions that take the engine's placeholder style (`?` or `$n`). The stores differ
 * only in how they run them.
 */

export type Placeholder = (n: number) => string;

const HOUR_MS = 3_600_000;

/**
 * Every source with events, by a loose index scan of (source, delivery_id): one index
 * probe per source, so an exact delivery id without its source is still found by index.
 */
const SOURCES = `WITH RECURSIVE sources(source) AS (
  SELECT min(source) FROM events
  UNION ALL SELECT (SELECT min(source) FROM events WHERE source > sources.source) FROM sources WHERE sources.source IS NOT NULL)`;

/**
 * How a column is written so the planner does not use an index on it. SQLite, without
 * statistics, takes `source = ?` as selective and reads every event of that source through
 * the (source, delivery_id) index, then sorts them by id; walking ids newest first and
 * filtering fills a page after a few rows instead. (`+source` on SQLite; PostgreSQL plans
 * from statistics and needs nothing.)
 */
export type Unindexed = (column: string) => string;

/** `events list` and the admin list: newest first, filters ANDed, keyset by id. */
export function listEventsSql(query: ListEventsQuery, placeholder: Placeholder, unindexed: Unindexed = (c) => c): { sql: string; params: unknown[] } {
  const where: string[] = [];
  const params: unknown[] = [];
  const p = (value: unknown) => placeholder(params.push(value));
  let prefix = '';
  if (query.status !== undefined) {
    if (!EVENT_STATUSES.includes(query.status)) throw new TypeError(`unknown status ${String(query.status)}`);
    // A literal (checked above), so the planner can use the partial index for that status.
    where.push(`status = '${query.status}'`);
  }
  // With a delivery id, (source, delivery_id) is the index to use: one probe.
  if (query.source !== undefined) where.push(`${query.deliveryId === undefined ? unindexed('source') : 'source'} = ${p(query.source)}`);
  if (query.deliveryId !== undefined) {
    where.push(`delivery_id = ${p(query.deliveryId)}`);
    if (query.source === undefined) {
      prefix = SOURCES;
      where.push(`source IN (SELECT source FROM sources WHERE source IS NOT NULL)`);
    }
  }
  if (query.deliveryIdPrefix !== undefined && query.deliveryIdPrefix !== '') {
    // substr and length, not LIKE: `%` and `_` in an id are plain characters here.
    where.push(`substr(delivery_id, 1, length(${p(query.deliveryIdPrefix)})) = ${p(query.deliveryIdPrefix)}`);
  }
  if (query.eventType !== undefined) where.push(`event_type = ${p(query.eventType)}`);
  if (query.receivedFrom !== undefined) where.push(`received_at >= ${p(query.receivedFrom)}`);
  if (query.receivedBefore !== undefined) where.push(`received_at < ${p(query.receivedBefore)}`);
  if (query.beforeId !== undefined) where.push(`id < ${p(query.beforeId)}`);
  const sql = `${prefix} SELECT ${SUMMARY_COLUMNS} FROM events ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY id DESC LIMIT ${p(query.limit)}`;
  return { sql, params };
}

/**
 * Ids grow with arrival, so the window starts after the newest event received before
 * `since`: walking ids down from the newest stops there, and older rows are never read.
 * An event committed a moment out of order at the window's edge may be left out.
 */
const newerThan = (table: 'events' | 'attempts', column: string, since: string) =>
  `id > coalesce((SELECT id FROM ${table} WHERE ${column} < ${since} ORDER BY id DESC LIMIT 1), 0) AND ${column} >= ${since}`;

export function deliveriesPerHourSql(placeholder: Placeholder): string {
  const since = placeholder(1);
  return `SELECT received_at / ${HOUR_MS} * ${HOUR_MS} AS hour, status AS outcome, count(*) AS count FROM events
    WHERE ${newerThan('events', 'received_at', since)} GROUP BY 1, 2
    UNION ALL
    SELECT received_at / ${HOUR_MS} * ${HOUR_MS} AS hour, 'conflict' AS outcome, sum(1 + repeats) AS count FROM conflicts
    WHERE received_at >= ${since} GROUP BY 1
    ORDER BY 1, 2`;
}

export function effectFailuresByRouteSql(placeholder: Placeholder): string {
  const since = placeholder(1);
  return `SELECT route, count(*) AS failures, max(started_at) AS last_failed_at FROM attempts
    WHERE outcome = 'failed' AND ${newerThan('attempts', 'started_at', since)}
    GROUP BY route ORDER BY failures DESC, route`;
}

export interface HourlyDbRow {
  hour: number | string;
  outcome: HourlyDeliveries['outcome'];
  count: number | string;
}

export const toHourly = (r: HourlyDbRow): HourlyDeliveries => ({ hour: Number(r.hour), outcome: r.outcome, count: Number(r.count) });

export interface RouteFailuresDbRow {
  route: string;
  failures: number | string;
  last_failed_at: number | string;
}

export const toRouteFailures = (r: RouteFailuresDbRow): RouteFailures => ({ route: r.route, failures: Number(r.failures), lastFailedAt: Number(r.last_failed_at) });
