import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { openSqlite } from '../../src/store/sqlite/open.js';
import type { EffectStatus } from '../../src/vocabulary.js';

/**
 * Rows for the purge/replay/events/stats tests, written in SQL so each test sets exactly
 * the status, times and history it needs (times are moved here, never slept for).
 */

export const DAY = 86_400_000;
export const HOUR = 3_600_000;

export interface SeedEvent {
  source?: string;
  deliveryId: string;
  eventType?: string;
  status: 'pending' | 'processing' | 'done' | 'dead';
  receivedAt: number;
  body?: Buffer | string | null;
  headers?: Record<string, string> | null;
  attempts?: number;
  nextAttemptAt?: number;
  leaseOwner?: string | null;
  leaseExpiresAt?: number | null;
  lastError?: string | null;
  duplicates?: number;
  finishedAt?: number | null;
  origin?: 'webhook' | 'catch-up' | 'test';
}

/** Opens (creating and migrating) a database file for seeding and inspection. */
export function seedDb(path: string): Database.Database {
  return openSqlite(path, { busyTimeoutMs: 5000 });
}

export function insertEvent(db: Database.Database, e: SeedEvent): number {
  const body = e.body === undefined ? Buffer.from(JSON.stringify({ id: e.deliveryId })) : e.body === null ? null : Buffer.from(e.body);
  const sha = createHash('sha256')
    .update(body ?? Buffer.alloc(0))
    .digest('hex');
  const r = db
    .prepare(
      `INSERT INTO events (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, response_body,
        duplicates, attempts, next_attempt_at, lease_owner, lease_expires_at, last_error, finished_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, 202, NULL, ?, ?, ?, ?, ?, ?, ?)`,
    )
    .run(
      e.source ?? 'stripe',
      e.deliveryId,
      e.eventType ?? 'invoice.paid',
      e.status,
      e.receivedAt,
      e.headers === null ? null : JSON.stringify(e.headers ?? { 'content-type': 'application/json' }),
      body,
      sha,
      e.duplicates ?? 0,
      e.attempts ?? (e.status === 'pending' ? 0 : 1),
      e.nextAttemptAt ?? e.receivedAt,
      e.leaseOwner ?? null,
      e.leaseExpiresAt ?? null,
      e.lastError ?? null,
      e.finishedAt ?? (e.status === 'done' || e.status === 'dead' ? e.receivedAt + 1000 : null),
    );
  const id = Number(r.lastInsertRowid);
  db.prepare(`UPDATE events SET response_body = ?, origin = ? WHERE id = ?`).run(JSON.stringify({ status: 'accepted', id }), e.origin ?? 'webhook', id);
  // A lease is a unit's: a claimed event's claim is on its one unit (route `r`).
  if (e.leaseOwner !== undefined) {
    db.prepare(`UPDATE events SET planned = 1 WHERE id = ?`).run(id);
    db.prepare(
      `INSERT INTO units (event_id, route, lane, status, attempts, next_attempt_at, lease_owner, lease_expires_at) VALUES (?, 'r', 'r', 'processing', 1, ?, ?, ?)`,
    ).run(id, e.receivedAt, e.leaseOwner, e.leaseExpiresAt ?? null);
  }
  return id;
}

export function insertAttempt(
  db: Database.Database,
  eventId: number,
  a: {
    attempt?: number;
    route?: string;
    effectKey?: string | null;
    startedAt: number;
    outcome?: string;
    error?: string | null;
    output?: string | null;
    forced?: boolean;
    /** Default: the effect key (an ordinary run). */
    runKey?: string | null;
  },
): void {
  const effectKey = a.effectKey === undefined ? `licence:${eventId}` : a.effectKey;
  db.prepare(
    `INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome, error, output, forced, run_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  ).run(
    eventId,
    a.attempt ?? 1,
    a.route ?? 'licence',
    effectKey,
    a.startedAt,
    a.startedAt + 10,
    a.outcome ?? 'ok',
    a.error ?? null,
    a.output ?? null,
    a.forced === true ? 1 : 0,
    a.runKey === undefined ? effectKey : a.runKey,
  );
}

export function insertEffect(db: Database.Database, e: { effectKey: string; eventId: number; status?: EffectStatus; at: number }): void {
  const [route, ...rest] = e.effectKey.split(':');
  db.prepare(`INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?)`).run(
    e.effectKey,
    route,
    rest.join(':'),
    e.status ?? 'done',
    e.eventId,
    e.at,
    e.at + 10,
  );
}

/** A conflicting delivery of the event, as ingest records it: a repeat of the same body is counted. */
export function insertConflict(db: Database.Database, eventId: number, at: number): void {
  const ev = db.prepare(`SELECT source, delivery_id FROM events WHERE id = ?`).get(eventId) as { source: string; delivery_id: string };
  db.prepare(
    `INSERT INTO conflicts (event_id, source, delivery_id, received_at, body_sha256, headers, body) VALUES (?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (event_id, body_sha256) DO UPDATE SET repeats = repeats + 1`,
  ).run(eventId, ev.source, ev.delivery_id, at, 'f'.repeat(64), JSON.stringify({ 'content-type': 'application/json' }), Buffer.from('{"other":true}'));
}

export const count = (db: Database.Database, sql: string, ...params: unknown[]): number =>
  db
    .prepare(sql)
    .pluck()
    .get(...params) as number;
