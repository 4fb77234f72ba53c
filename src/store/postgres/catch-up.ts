import { sharedCatchUp } from '../catch-up-steps.js';
import type { CatchUpStore, FetchedEvent, StoreFetchedResult } from '../catch-up-types.js';
import { findEventId } from '../ops-steps.js';
import { acceptedAnswer } from '../types.js';
import type { Conn } from './conn.js';
import { stepRunner } from './ops.js';
import { dialect, runAlone } from './steps.js';

/**
 * Catch-up's reads and writes on PostgreSQL (see ../catch-up-types.ts): those both stores
 * share run here (../catch-up-steps.ts); storing a fetched event is PostgreSQL's own.
 */
export function catchUpOn(c: Conn): CatchUpStore {
  return {
    ...sharedCatchUp(dialect, stepRunner(c)),
    storeFetched: (event) => storeFetched(c, event),
  };
}

async function storeFetched(c: Conn, e: FetchedEvent): Promise<StoreFetchedResult> {
  // The id is drawn first (as ingest does), so the row is inserted complete with the answer
  // a later signed delivery of this event gets; ON CONFLICT: a webhook committed first wins.
  const drawn = await c.query<{ id: number }>('catch-up', `SELECT nextval(pg_get_serial_sequence('events', 'id')) AS id`);
  const id = drawn.rows[0]!.id;
  const done = e.unrouted !== undefined;
  const inserted = await c.query<{ id: number }>(
    'catch-up',
    `INSERT INTO events
       (id, source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, response_body, next_attempt_at, finished_at, origin, route_decisions)
     OVERRIDING SYSTEM VALUE
     VALUES ($1, $2, $3, $4, $5, $6, '{"content-type": "application/json"}'::jsonb, $7, $8, $9, $10, $6, $11, 'catch-up', $12)
     ON CONFLICT (source, delivery_id) DO NOTHING
     RETURNING id`,
    [
      id,
      e.source,
      e.deliveryId,
      e.eventType,
      done ? 'done' : 'pending',
      e.receivedAt,
      e.body,
      e.bodySha256,
      e.successStatus,
      acceptedAnswer(id),
      done ? e.receivedAt : null,
      e.unrouted ?? null,
    ],
  );
  if (inserted.rows.length === 1) return { stored: true, eventId: id };
  return { stored: false, eventId: (await runAlone(c, 'catch-up', findEventId(dialect, e.source, e.deliveryId)))! };
}
