import type { ClaimedEvent, LedgerRow } from '../drain-types.js';
import { SUMMARY_COLUMNS, type EventSummaryRow } from '../rows.js';

// Rows both stores return alike are converted in ../rows.ts; the PostgreSQL-only ones here.
export { ATTEMPT_COLUMNS, CONFLICT_COLUMNS, EFFECT_COLUMNS, SUMMARY_COLUMNS, toAttempt, toConflict, toEffect, toSummary } from '../rows.js';
export type { AttemptDbRow, ConflictDbRow, EffectDbRow } from '../rows.js';

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

