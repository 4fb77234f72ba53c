import { acceptedAnswer, conflictAnswer, type IngestResult, type NewEvent } from '../types.js';
import type { Db } from './open.js';
import { isSameEvent } from '../catch-up-types.js';

interface ExistingRow {
  id: number;
  body_sha256: string;
  origin: string;
  response_status: number;
  response_body: string;
}

/**
 * Prepared statements for the ingest path. The dedupe decision is the database's:
 * INSERT OR IGNORE on UNIQUE(source, delivery_id) and `changes`, never a read first.
 */
export function ingestStatements(db: Db) {
  return {
    insert: db.prepare(`INSERT OR IGNORE INTO events
      (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, extra_ids, response_status, next_attempt_at, finished_at, route_decisions, origin)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    setAnswer: db.prepare(`UPDATE events SET response_body = ? WHERE id = ?`),
    existing: db.prepare(`SELECT id, body_sha256, origin, response_status, response_body FROM events WHERE source = ? AND delivery_id = ?`),
    // The body key: taken when new, or when the one there has expired (an UPDATE that does not
    // apply changes nothing, so `changes` says whether this event holds the key).
    takeBodyKey: db.prepare(`INSERT INTO body_keys (source, body_sha256, event_id, expires_at) VALUES (?, ?, ?, ?)
      ON CONFLICT (source, body_sha256) DO UPDATE SET event_id = excluded.event_id, expires_at = excluded.expires_at
      WHERE body_keys.expires_at <= ?`),
    // A replay's row, never committed: it is removed in the transaction that inserted it.
    unInsert: db.prepare(`DELETE FROM events WHERE id = ?`),
    keyHolder: db.prepare(`SELECT e.id, e.response_status, e.response_body FROM body_keys AS k JOIN events AS e ON e.id = k.event_id
      WHERE k.source = ? AND k.body_sha256 = ?`),
    countDuplicate: db.prepare(`UPDATE events SET duplicates = duplicates + 1 WHERE id = ?`),
    // One row per differing body of an event: a repeat of it is counted, its body not stored again.
    recordConflict: db.prepare(`INSERT INTO conflicts (event_id, source, delivery_id, received_at, body_sha256, headers, body) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (event_id, body_sha256) DO UPDATE SET repeats = repeats + 1`),
  };
}

export type IngestStatements = ReturnType<typeof ingestStatements>;

/** Stores one event inside the caller's transaction. Items of one batch are decided in order. */
export function ingestOne(s: IngestStatements, e: NewEvent): IngestResult {
  const headers = JSON.stringify(e.headers);
  const extra = e.extraIds === undefined ? null : JSON.stringify(e.extraIds);
  // An event no route applies to is done on arrival: the drain never has to look at it.
  const done = e.unrouted !== undefined;
  const run = s.insert.run(
    e.source,
    e.deliveryId,
    e.eventType,
    done ? 'done' : 'pending',
    e.receivedAt,
    headers,
    e.body,
    e.bodySha256,
    extra,
    e.successStatus,
    e.receivedAt,
    done ? e.receivedAt : null,
    e.unrouted ?? null,
    e.origin ?? 'webhook',
  );
  if (run.changes === 1) {
    const id = Number(run.lastInsertRowid);
    // Insert first, then the body key beside it: a key another live event holds makes this
    // delivery a replay of that event, and its row goes before the transaction commits.
    if (e.bodyKeyExpiresAt !== undefined && s.takeBodyKey.run(e.source, e.bodySha256, id, e.bodyKeyExpiresAt, e.receivedAt).changes === 0) {
      s.unInsert.run(id);
      const first = s.keyHolder.get(e.source, e.bodySha256) as Omit<ExistingRow, 'body_sha256' | 'origin'> | undefined;
      if (first === undefined) throw new Error(`body key of ${e.source}/${e.deliveryId} was refused but its event does not exist`);
      return { outcome: 'replayed', eventId: first.id, status: first.response_status, body: first.response_body };
    }
    const body = acceptedAnswer(id);
    s.setAnswer.run(body, id);
    return { outcome: 'accepted', eventId: id, status: e.successStatus, body };
  }
  // Ignored: the row exists (read after the write, inside the same transaction).
  const row = s.existing.get(e.source, e.deliveryId) as ExistingRow | undefined;
  if (row === undefined) throw new Error(`insert of ${e.source}/${e.deliveryId} was ignored but no row exists`);
  if (isSameEvent(row, e.bodySha256)) {
    s.countDuplicate.run(row.id);
    return { outcome: 'duplicate', eventId: row.id, status: row.response_status, body: row.response_body };
  }
  s.recordConflict.run(row.id, e.source, e.deliveryId, e.receivedAt, e.bodySha256, headers, e.body);
  if (e.onConflict === 'accept') return { outcome: 'conflict', eventId: row.id, status: row.response_status, body: row.response_body };
  return { outcome: 'conflict', eventId: row.id, status: 409, body: conflictAnswer(row.id, e.deliveryId) };
}
