import { setTimeout as sleep } from 'node:timers/promises';
import { acceptedAnswer } from '../types.js';
import { toCatchUpState, type CatchUpRunRecord, type CatchUpState, type CatchUpStateRow, type FetchedEvent, type StoreFetchedResult } from '../catch-up-types.js';
import { isBusy, sqliteError } from './errors.js';
import type { Db } from './open.js';

/**
 * Catch-up's reads and writes (see ../catch-up-types.ts). In `serve` they share the
 * connection whose own busy wait is a few ms (the event loop must not block on another
 * writer): a busy database is waited for here, asynchronously, up to busyTimeoutMs.
 */
async function write<T>(db: Db, busyTimeoutMs: number, fn: () => T): Promise<T> {
  const deadline = Date.now() + busyTimeoutMs;
  for (;;) {
    try {
      return fn();
    } catch (e) {
      if (!isBusy(e) || Date.now() >= deadline) throw sqliteError(e, 'catch-up');
      await sleep(10);
    }
  }
}

export function storedDeliveryIds(db: Db, source: string, deliveryIds: readonly string[]): Promise<Set<string>> {
  try {
    const rows = db
      .prepare(`SELECT delivery_id FROM events WHERE source = ? AND delivery_id IN (SELECT value FROM json_each(?))`)
      .pluck()
      .all(source, JSON.stringify(deliveryIds)) as string[];
    return Promise.resolve(new Set(rows));
  } catch (e) {
    return Promise.reject(sqliteError(e, 'catch-up'));
  }
}

export function storeFetched(db: Db, busyTimeoutMs: number, e: FetchedEvent): Promise<StoreFetchedResult> {
  return write(db, busyTimeoutMs, () =>
    db
      .transaction((): StoreFetchedResult => {
        // Insert-first on UNIQUE(source, delivery_id), as ingest: a webhook of the same event
        // committed first wins, and this changes nothing.
        const done = !e.routed;
        const run = db
          .prepare(
            `INSERT OR IGNORE INTO events
             (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, next_attempt_at, finished_at, origin)
             VALUES (?, ?, ?, ?, ?, '{"content-type":"application/json"}', ?, ?, ?, ?, ?, 'catch-up')`,
          )
          .run(e.source, e.deliveryId, e.eventType, done ? 'done' : 'pending', e.receivedAt, e.body, e.bodySha256, e.successStatus, e.receivedAt, done ? e.receivedAt : null);
        if (run.changes === 1) {
          const id = Number(run.lastInsertRowid);
          // The answer a later signed delivery of this event (a duplicate) is given.
          db.prepare(`UPDATE events SET response_body = ? WHERE id = ?`).run(acceptedAnswer(id), id);
          return { stored: true, eventId: id };
        }
        const id = db.prepare(`SELECT id FROM events WHERE source = ? AND delivery_id = ?`).pluck().get(e.source, e.deliveryId) as number;
        return { stored: false, eventId: id };
      })
      .immediate(),
  );
}

const STATE_COLUMNS = 'source, configured_at, resume_at, resume_cursor, last_run_at, last_ok_at, last_error, last_counts';

export function catchUpState(db: Db, source: string): Promise<CatchUpState | undefined> {
  try {
    const row = db.prepare(`SELECT ${STATE_COLUMNS} FROM catch_up WHERE source = ?`).get(source) as CatchUpStateRow | undefined;
    return Promise.resolve(row === undefined ? undefined : toCatchUpState(row));
  } catch (e) {
    return Promise.reject(sqliteError(e, 'catch-up'));
  }
}

export function catchUpStates(db: Db): Promise<CatchUpState[]> {
  try {
    const rows = db.prepare(`SELECT ${STATE_COLUMNS} FROM catch_up ORDER BY source`).all() as CatchUpStateRow[];
    return Promise.resolve(rows.map(toCatchUpState));
  } catch (e) {
    return Promise.reject(sqliteError(e, 'catch-up'));
  }
}

export async function beginCatchUp(db: Db, busyTimeoutMs: number, source: string, now: number): Promise<CatchUpState> {
  await write(db, busyTimeoutMs, () => db.prepare(`INSERT OR IGNORE INTO catch_up (source, configured_at) VALUES (?, ?)`).run(source, now));
  return (await catchUpState(db, source))!;
}

export async function recordCatchUp(db: Db, busyTimeoutMs: number, source: string, run: CatchUpRunRecord): Promise<void> {
  await write(db, busyTimeoutMs, () =>
    db
      .prepare(
        `UPDATE catch_up SET last_run_at = ?, last_error = ?, last_counts = ?,
           last_ok_at = CASE WHEN ? IS NULL THEN ? ELSE last_ok_at END,
           resume_at = coalesce(?, resume_at),
           resume_cursor = CASE WHEN ? THEN ? ELSE resume_cursor END
         WHERE source = ?`,
      )
      .run(run.at, run.error, JSON.stringify(run.counts), run.error, run.at, run.resumeAt ?? null, run.partial === undefined ? 0 : 1, run.partial == null ? null : JSON.stringify(run.partial), source),
  );
}
