import type { AttemptRow, ConflictRow, EffectRow, EventStatus, EventSummary } from './ops-types.js';

/**
 * The events row as both stores return it for listings, and its camelCase shape:
 * snake_case is converted here and nowhere else.
 */
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
}

export const SUMMARY_COLUMNS = `id, source, delivery_id, event_type, status, attempts, received_at, next_attempt_at, finished_at, last_error, duplicates, force_effects`;

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
}

export const ATTEMPT_COLUMNS = `id, attempt, route, effect_key, started_at, finished_at, outcome, error, output, forced`;

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

export interface ConflictDbRow {
  id: number;
  received_at: number;
  body_sha256: string;
  repeats: number;
  body: Buffer | null;
}

export const CONFLICT_COLUMNS = 'id, received_at, body_sha256, repeats, body';

export function toConflict(c: ConflictDbRow): ConflictRow {
  return { id: c.id, receivedAt: c.received_at, bodySha256: c.body_sha256, repeats: c.repeats, body: c.body };
}
