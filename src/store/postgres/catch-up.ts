import { acceptedAnswer } from '../types.js';
import { toCatchUpState, type CatchUpRunRecord, type CatchUpState, type CatchUpStateRow, type FetchedEvent, type StoreFetchedResult } from '../catch-up-types.js';
import type { Conn } from './conn.js';

/** Catch-up's reads and writes (see ../catch-up-types.ts); SQLite's are in ../sqlite/catch-up.ts. */

export async function storedDeliveryIds(c: Conn, source: string, deliveryIds: readonly string[]): Promise<Set<string>> {
  const { rows } = await c.query<{ delivery_id: string }>('catch-up', `SELECT delivery_id FROM events WHERE source = $1 AND delivery_id = ANY($2::text[])`, [source, [...deliveryIds]]);
  return new Set(rows.map((r) => r.delivery_id));
}

export async function storeFetched(c: Conn, e: FetchedEvent): Promise<StoreFetchedResult> {
  // The id is drawn first (as ingest does), so the row is inserted complete with the answer
  // a later signed delivery of this event gets; ON CONFLICT: a webhook committed first wins.
  const drawn = await c.query<{ id: number }>('catch-up', `SELECT nextval(pg_get_serial_sequence('events', 'id')) AS id`);
  const id = drawn.rows[0]!.id;
  const done = !e.routed;
  const inserted = await c.query<{ id: number }>(
    'catch-up',
    `INSERT INTO events
       (id, source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, response_body, next_attempt_at, finished_at, origin)
     OVERRIDING SYSTEM VALUE
     VALUES ($1, $2, $3, $4, $5, $6, '{"content-type": "application/json"}'::jsonb, $7, $8, $9, $10, $6, $11, 'catch-up')
     ON CONFLICT (source, delivery_id) DO NOTHING
     RETURNING id`,
    [id, e.source, e.deliveryId, e.eventType, done ? 'done' : 'pending', e.receivedAt, e.body, e.bodySha256, e.successStatus, acceptedAnswer(id), done ? e.receivedAt : null],
  );
  if (inserted.rows.length === 1) return { stored: true, eventId: id };
  const existing = await c.query<{ id: number }>('catch-up', `SELECT id FROM events WHERE source = $1 AND delivery_id = $2`, [e.source, e.deliveryId]);
  return { stored: false, eventId: existing.rows[0]!.id };
}

const STATE_COLUMNS = 'source, configured_at, resume_at, resume_cursor, last_run_at, last_ok_at, last_error, last_counts';

export async function catchUpState(c: Conn, source: string): Promise<CatchUpState | undefined> {
  const { rows } = await c.query<CatchUpStateRow>('catch-up', `SELECT ${STATE_COLUMNS} FROM catch_up WHERE source = $1`, [source]);
  return rows[0] === undefined ? undefined : toCatchUpState(rows[0]);
}

export async function catchUpStates(c: Conn): Promise<CatchUpState[]> {
  const { rows } = await c.query<CatchUpStateRow>('catch-up', `SELECT ${STATE_COLUMNS} FROM catch_up ORDER BY source`);
  return rows.map(toCatchUpState);
}

export async function beginCatchUp(c: Conn, source: string, now: number): Promise<CatchUpState> {
  await c.query('catch-up', `INSERT INTO catch_up (source, configured_at) VALUES ($1, $2) ON CONFLICT (source) DO NOTHING`, [source, now]);
  return (await catchUpState(c, source))!;
}

export async function recordCatchUp(c: Conn, source: string, run: CatchUpRunRecord): Promise<void> {
  await c.query(
    'catch-up',
    `UPDATE catch_up SET last_run_at = $1, last_error = $2::text, last_counts = $3,
       last_ok_at = CASE WHEN $2::text IS NULL THEN $1 ELSE last_ok_at END,
       resume_at = coalesce($4, resume_at),
       resume_cursor = CASE WHEN $6 THEN $7 ELSE resume_cursor END
     WHERE source = $5`,
    [run.at, run.error, JSON.stringify(run.counts), run.resumeAt ?? null, source, run.partial !== undefined, run.partial == null ? null : JSON.stringify(run.partial)],
  );
}
