import type { ClaimedUnit, LedgerRow, UnplannedEvent } from './drain-types.js';
import type { EventOrigin, EventStatus } from '../vocabulary.js';
import type { AttemptRow, ConflictRow, EffectRow, EventDetail, EventSummary, HourlyDeliveries, LaneStats, RouteFailures, UnitRow } from './ops-types.js';

/**
 * Rows as both stores return them, and their camelCase shapes: snake_case is converted
 * here and nowhere else. Where the drivers differ the type says so: a JSON column is text
 * on SQLite and parsed jsonb on PostgreSQL; bigint columns arrive as numbers on both (see
 * the PostgreSQL pool's type parser); a bytea or blob arrives as a Buffer.
 */

/** A JSON object column: text (SQLite) or already parsed (PostgreSQL jsonb). */
type JsonColumn = string | Record<string, string> | null;

function jsonObject(v: JsonColumn): Record<string, string> | null {
  return typeof v === 'string' ? (JSON.parse(v) as Record<string, string>) : v;
}

/** The events row as listings return it. */
export interface EventSummaryRow {
  id: number;
  source: string;
  delivery_id: string;
  event_type: string;
  status: EventStatus;
  attempts: number;
  received_at: number;
  next_attempt_at: number;
  finished_at: number | null;
  last_error: string | null;
  duplicates: number;
  force_effects: number;
  origin: EventOrigin;
}

export const SUMMARY_COLUMNS = `id, source, delivery_id, event_type, status, attempts, received_at, next_attempt_at, finished_at, last_error, duplicates, force_effects, origin`;

export function toSummary(r: EventSummaryRow): EventSummary {
  return {
    id: r.id,
    source: r.source,
    deliveryId: r.delivery_id,
    eventType: r.event_type,
    status: r.status,
    attempts: r.attempts,
    receivedAt: r.received_at,
    nextAttemptAt: r.next_attempt_at,
    finishedAt: r.finished_at,
    lastError: r.last_error,
    duplicates: r.duplicates,
    forceEffects: r.force_effects !== 0,
    origin: r.origin,
  };
}

export interface AttemptDbRow {
  id: number;
  attempt: number;
  route: string;
  effect_key: string | null;
  started_at: number;
  finished_at: number | null;
  outcome: string;
  error: string | null;
  output: string | null;
  forced: number;
  run_key: string | null;
}

export const ATTEMPT_COLUMNS = `id, attempt, route, effect_key, started_at, finished_at, outcome, error, output, forced, run_key`;

export function toAttempt(a: AttemptDbRow): AttemptRow {
  return {
    id: a.id,
    attempt: a.attempt,
    route: a.route,
    effectKey: a.effect_key,
    startedAt: a.started_at,
    finishedAt: a.finished_at,
    outcome: a.outcome,
    error: a.error,
    output: a.output,
    forced: a.forced !== 0,
    runKey: a.run_key,
  };
}

export interface EffectDbRow {
  effect_key: string;
  route: string;
  business_key: string;
  status: EffectRow['status'];
  event_id: number | null;
  version: string | null;
  runs: number;
  forced_runs: number;
  started_at: number | null;
  finished_at: number | null;
  last_error: string | null;
}

export const EFFECT_COLUMNS = `effect_key, route, business_key, status, event_id, version, runs, forced_runs, started_at, finished_at, last_error`;

export function toEffect(e: EffectDbRow): EffectRow {
  return {
    effectKey: e.effect_key,
    route: e.route,
    businessKey: e.business_key,
    status: e.status,
    eventId: e.event_id,
    version: e.version,
    runs: e.runs,
    forcedRuns: e.forced_runs,
    startedAt: e.started_at,
    finishedAt: e.finished_at,
    lastError: e.last_error,
  };
}

export interface UnitDbRow {
  route: string;
  lane: string;
  status: UnitRow['status'];
  attempts: number;
  next_attempt_at: number;
  last_error: string | null;
  lease_owner: string | null;
  lease_expires_at: number | null;
  replays: number;
  finished_at: number | null;
}

export const UNIT_COLUMNS = 'route, lane, status, attempts, next_attempt_at, last_error, lease_owner, lease_expires_at, replays, finished_at';

export function toUnit(u: UnitDbRow): UnitRow {
  return {
    route: u.route,
    lane: u.lane,
    status: u.status,
    attempts: u.attempts,
    nextAttemptAt: u.next_attempt_at,
    lastError: u.last_error,
    leaseOwner: u.lease_owner,
    leaseExpiresAt: u.lease_expires_at,
    replays: u.replays,
    finishedAt: u.finished_at,
  };
}

export interface ConflictDbRow {
  id: number;
  received_at: number;
  body_sha256: string;
  repeats: number;
  headers: JsonColumn;
  body: Buffer | null;
}

export const CONFLICT_COLUMNS = 'id, received_at, body_sha256, repeats, headers, body';

export function toConflict(c: ConflictDbRow): ConflictRow {
  return { id: c.id, receivedAt: c.received_at, bodySha256: c.body_sha256, repeats: c.repeats, headers: jsonObject(c.headers), body: c.body };
}

export interface EventDetailDbRow extends EventSummaryRow {
  headers: JsonColumn;
  body: Buffer | null;
  body_sha256: string;
  extra_ids: JsonColumn;
  response_status: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
  route_decisions: string | null;
}

/** An event's lease, as columns of a SELECT from events: its running units' latest (a lease is a unit's). */
export const EVENT_LEASE_COLUMNS = `(SELECT max(u.lease_owner) FROM units u WHERE u.event_id = events.id AND u.status = 'processing') AS lease_owner,
  (SELECT max(u.lease_expires_at) FROM units u WHERE u.event_id = events.id AND u.status = 'processing') AS lease_expires_at`;

export const DETAIL_COLUMNS = `${SUMMARY_COLUMNS}, headers, body, body_sha256, extra_ids, response_status, ${EVENT_LEASE_COLUMNS}, route_decisions`;

export function toDetail(
  r: EventDetailDbRow,
  units: readonly UnitDbRow[],
  attempts: readonly AttemptDbRow[],
  effects: readonly EffectDbRow[],
  conflicts: readonly ConflictDbRow[],
): EventDetail {
  return {
    ...toSummary(r),
    headers: jsonObject(r.headers),
    body: r.body,
    bodySha256: r.body_sha256,
    extraIds: jsonObject(r.extra_ids),
    responseStatus: r.response_status,
    leaseOwner: r.lease_owner,
    leaseExpiresAt: r.lease_expires_at,
    routeDecisions: r.route_decisions === null ? null : r.route_decisions.split('\n'),
    units: units.map(toUnit),
    attemptRows: attempts.map(toAttempt),
    effects: effects.map(toEffect),
    conflicts: conflicts.map(toConflict),
  };
}

/** An event as a claim returns it. */
/** An event's columns the drain reads to plan it or run one of its units. */
export interface EventWorkDbRow {
  id: number;
  source: string;
  delivery_id: string;
  event_type: string;
  headers: JsonColumn;
  body: Buffer | null;
  received_at: number;
}

export const EVENT_WORK_COLUMNS = `id, source, delivery_id, event_type, headers, body, received_at`;

export function toUnplanned(r: EventWorkDbRow): UnplannedEvent {
  return {
    id: r.id,
    source: r.source,
    deliveryId: r.delivery_id,
    eventType: r.event_type,
    headers: jsonObject(r.headers) ?? {},
    body: r.body ?? Buffer.alloc(0),
    receivedAt: r.received_at,
  };
}

/** A claimed unit's row. */
export interface UnitClaimDbRow {
  id: number;
  event_id: number;
  route: string;
  lane: string;
  attempts: number;
  force_effects: number;
  lease_owner: string;
  lease_expires_at: number;
}

export const UNIT_CLAIM_COLUMNS = `id, event_id, route, lane, attempts, force_effects, lease_owner, lease_expires_at`;

export function toClaimed(u: UnitClaimDbRow, e: EventWorkDbRow): ClaimedUnit {
  return {
    ...toUnplanned(e),
    unitId: u.id,
    route: u.route,
    lane: u.lane,
    attempt: u.attempts,
    forceEffects: u.force_effects !== 0,
    lease: { unitId: u.id, eventId: u.event_id, owner: u.lease_owner, expiresAt: u.lease_expires_at },
  };
}

/** The ledger row as decideEffect reads it; `held_elsewhere` is 1 or 0 (a CASE, on both databases). */
export interface LedgerDbRow {
  status: LedgerRow['status'];
  event_id: number | null;
  version: string | null;
  runs: number;
  forced_runs: number;
  held_elsewhere: number;
}

export function toLedger(r: LedgerDbRow): LedgerRow {
  return { status: r.status, eventId: r.event_id, version: r.version, runs: r.runs, forcedRuns: r.forced_runs, heldElsewhere: r.held_elsewhere === 1 };
}

/** One hour and outcome of the admin overview's chart (bigint sums may arrive as text). */
export interface HourlyDbRow {
  hour: number | string;
  outcome: HourlyDeliveries['outcome'];
  count: number | string;
}

export const toHourly = (r: HourlyDbRow): HourlyDeliveries => ({ hour: Number(r.hour), outcome: r.outcome, count: Number(r.count) });

/** One lane's counts (PostgreSQL's count() is a bigint, its sum() numeric: either may arrive as text). */
export interface LaneStatsDbRow {
  lane: string;
  pending: number | string;
  running: number | string;
  oldest: number | string | null;
}

export const toLaneStats = (r: LaneStatsDbRow): LaneStats => ({
  lane: r.lane,
  pending: Number(r.pending),
  running: Number(r.running),
  oldestPendingReceivedAt: r.oldest === null ? null : Number(r.oldest),
});

export interface RouteFailuresDbRow {
  route: string;
  failures: number | string;
  last_failed_at: number | string;
}

export const toRouteFailures = (r: RouteFailuresDbRow): RouteFailures => ({
  route: r.route,
  failures: Number(r.failures),
  lastFailedAt: Number(r.last_failed_at),
});
