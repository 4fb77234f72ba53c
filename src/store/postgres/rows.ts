import type { ClaimedEvent, LedgerRow } from '../drain-types.js';
import { SUMMARY_COLUMNS, toSummary, type EventSummaryRow } from '../rows.js';

export { SUMMARY_COLUMNS, toSummary };
import type { AttemptRow, ConflictRow, EffectRow } from '../ops-types.js';

/**
 * snake_case rows as PostgreSQL returns them, and their camelCase shapes: converted here
 * and nowhere else. bigint columns arrive as numbers (see the pool's type parser in
 * open.ts); jsonb arrives parsed; bytea arrives as a Buffer.
 */

export type EventDbRow = EventSummaryRow;

export interface EventDetailDbRow extends EventDbRow {
  headers: Record<string, string> | null;
  body: Buffer | null;
  body_sha256: string;
  extra_ids: Record<string, string> | null;
  response_status: number;
  lease_owner: string | null;
  lease_expires_at: number | null;
}

export const DETAIL_COLUMNS = `${SUMMARY_COLUMNS}, headers, body, body_sha256, extra_ids, response_status, lease_owner, lease_expires_at`;


export interface ClaimDbRow {
  id: number;
  source: string;
  delivery_id: string;
  event_type: string;
  headers: Record<string, string> | null;
  body: Buffer | null;
  received_at: number;
  attempts: number;
  force_effects: number;
  lease_owner: string;
  lease_expires_at: number;
}

export const CLAIM_COLUMNS = `id, source, delivery_id, event_type, headers, body, received_at, attempts, force_effects, lease_owner, lease_expires_at`;

export function toClaimed(r: ClaimDbRow): ClaimedEvent {
  return {
    id: r.id,
    source: r.source,
    deliveryId: r.delivery_id,
    eventType: r.event_type,
    headers: r.headers ?? {},
    body: r.body ?? Buffer.alloc(0),
    receivedAt: r.received_at,
    attempt: r.attempts,
    forceEffects: r.force_effects !== 0,
    lease: { eventId: r.id, owner: r.lease_owner, expiresAt: r.lease_expires_at },
  };
}

export interface LedgerDbRow {
  status: LedgerRow['status'];
  event_id: number | null;
  version: string | null;
  runs: number;
  held_elsewhere: boolean;
}

export function toLedger(r: LedgerDbRow): LedgerRow {
  return { status: r.status, eventId: r.event_id, version: r.version, runs: r.runs, heldElsewhere: r.held_elsewhere };
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
}

export function toConflict(c: ConflictDbRow): ConflictRow {
  return { id: c.id, receivedAt: c.received_at, bodySha256: c.body_sha256 };
}
