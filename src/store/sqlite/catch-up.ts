import { sharedCatchUp } from '../catch-up-steps.js';
import type { CatchUpStore, FetchedEvent, StoreFetchedResult } from '../catch-up-types.js';
import { findEventId } from '../ops-steps.js';
import { acceptedAnswer } from '../types.js';
import { whenUnlocked } from './errors.js';
import type { Db } from './open.js';
import { stepRunner } from './ops.js';
import { dialect, runSteps, stmt } from './steps.js';

/**
 * Catch-up's reads and writes on SQLite (see ../catch-up-types.ts): those both stores
 * share run here (../catch-up-steps.ts); storing a fetched event is SQLite's own. In
 * `serve` they share the connection whose own busy wait is a few ms (the event loop must
 * not block on another writer): a busy database is waited for here, asynchronously, up to
 * busyTimeoutMs.
 */
export function catchUpOn(db: Db, busyTimeoutMs: number): CatchUpStore {
  return {
    ...sharedCatchUp(dialect, stepRunner(db, busyTimeoutMs)),
    storeFetched: (event) => storeFetched(db, busyTimeoutMs, event),
  };
}

const INSERT_FETCHED = `INSERT OR IGNORE INTO events
  (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, next_attempt_at, finished_at, origin, route_decisions)
  VALUES (?, ?, ?, ?, ?, '{"content-type":"application/json"}', ?, ?, ?, ?, ?, 'catch-up', ?)`;

function storeFetched(db: Db, busyTimeoutMs: number, e: FetchedEvent): Promise<StoreFetchedResult> {
  const run = db.transaction((): StoreFetchedResult => {
    // Insert-first on UNIQUE(source, delivery_id), as ingest: a webhook of the same event
    // committed first wins, and this changes nothing.
    const done = e.unrouted !== undefined;
    const inserted = stmt(db, INSERT_FETCHED).run(
      e.source,
      e.deliveryId,
      e.eventType,
      done ? 'done' : 'pending',
      e.receivedAt,
      e.body,
      e.bodySha256,
      e.successStatus,
      e.receivedAt,
      done ? e.receivedAt : null,
      e.unrouted ?? null,
    );
    if (inserted.changes === 1) {
      const id = Number(inserted.lastInsertRowid);
      // The answer a later signed delivery of this event (a duplicate) is given.
      stmt(db, `UPDATE events SET response_body = ? WHERE id = ?`).run(acceptedAnswer(id), id);
      return { stored: true, eventId: id };
    }
    return { stored: false, eventId: runSteps(db, findEventId(dialect, e.source, e.deliveryId))! };
  });
  return whenUnlocked('catch-up', Date.now() + busyTimeoutMs, () => run.immediate());
}
