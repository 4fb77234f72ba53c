import { acceptedAnswer, conflictAnswer, type IngestResult, type NewEvent } from '../types.js';
import type { Conn } from './conn.js';
import { isSameEvent } from '../catch-up-types.js';

/** Rows and bytes per INSERT statement: bounds one Bind message whatever the batch holds. */
const CHUNK_ROWS = 200;
const CHUNK_BYTES = 8 * 1024 * 1024;

interface ExistingRow {
  id: number;
  source: string;
  delivery_id: string;
  body_sha256: string;
  origin: string;
  response_status: number;
  response_body: string;
}

const keyOf = (source: string, deliveryId: string) => `${source}\u0000${deliveryId}`;

/**
 * Stores one group-commit batch and decides every item's answer.
 *
 * The dedupe decision is the database's: `INSERT ... ON CONFLICT (source, delivery_id)
 * DO NOTHING RETURNING id`, never a read first. Event ids are drawn from the sequence
 * first, in arrival order, so each row is inserted complete with its stored answer: the
 * INSERT is then one statement, its own transaction, committed (and flushed: the pool
 * sets synchronous_commit=on) when it returns. A batch of new deliveries costs two round
 * trips. A row that comes back was inserted by this batch; every other item is a
 * duplicate or a conflict of a row that exists, committed, now. Those are answered from
 * that row in a second transaction, which also counts duplicates and records conflicts.
 *
 * Rows are inserted sorted by (source, delivery id), arrival order breaking ties: two
 * receivers inserting the same delivery ids at once wait on each other in the same order
 * and cannot deadlock, and within a batch the first arrival of a delivery id is stored.
 */
export async function ingestBatch(conn: Conn, items: readonly NewEvent[], again = false): Promise<IngestResult[]> {
  const drawn = await conn.query<{ id: number }>('ingest', `SELECT nextval(pg_get_serial_sequence('events', 'id')) AS id FROM generate_series(1, $1)`, [
    items.length,
  ]);
  // Ascending, whatever order the rows came back in: the i-th arrival gets the i-th id.
  const ids = drawn.rows.map((r) => r.id).sort((a, b) => a - b);
  const rows = items.map((event, i) => ({ event, id: ids[i]!, arrival: i }));
  rows.sort((a, b) => compareItems(a.event, b.event) || a.arrival - b.arrival);

  const inserted = new Set<number>();
  for (const chunk of chunks(rows, (r) => r.event)) {
    const result = await conn.query<{ id: number }>('ingest', insertSql(chunk.length), insertParams(chunk));
    for (const r of result.rows) inserted.add(r.id);
  }

  const results: (IngestResult | undefined)[] = new Array(items.length);
  const rest: number[] = [];
  items.forEach((e, i) => {
    const id = ids[i]!;
    if (inserted.has(id)) results[i] = { outcome: 'accepted', eventId: id, status: e.successStatus, body: acceptedAnswer(id) };
    else rest.push(i);
  });
  const vanished = rest.length > 0 ? await answerExisting(conn, items, rest, results) : [];
  if (vanished.length > 0) {
    // Purged between the INSERT that skipped them and the read: inserted afresh, once (a
    // delivery of a purged event is a new event); a second time is an error, not a loop.
    if (again) throw new Error(`insert of ${items[vanished[0]!]!.source}/${items[vanished[0]!]!.deliveryId} was skipped as a conflict twice but no row exists`);
    const fresh = await ingestBatch(
      conn,
      vanished.map((i) => items[i]!),
      true,
    );
    vanished.forEach((i, k) => (results[i] = fresh[k]));
  }
  return results as IngestResult[];
}

/**
 * Duplicates and conflicts: the rows that made them so, read after the write. Locked in
 * id order, so concurrent batches counting duplicates of the same events take their row
 * locks in one order (no deadlock).
 */
async function answerExisting(conn: Conn, items: readonly NewEvent[], rest: number[], results: (IngestResult | undefined)[]): Promise<number[]> {
  const vanished: number[] = [];
  await conn.transaction('ingest', async (client) => {
    vanished.length = 0;
    const { rows } = await client.query<ExistingRow>(
      `SELECT id, source, delivery_id, body_sha256, origin, response_status, response_body FROM events
       WHERE (source, delivery_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
       ORDER BY id FOR NO KEY UPDATE`,
      [rest.map((i) => items[i]!.source), rest.map((i) => items[i]!.deliveryId)],
    );
    const existing = new Map(rows.map((r) => [keyOf(r.source, r.delivery_id), r]));
    const duplicates = new Map<number, number>();
    const conflicts: { row: ExistingRow; event: NewEvent }[] = [];
    for (const i of rest) {
      const e = items[i]!;
      const row = existing.get(keyOf(e.source, e.deliveryId));
      // ON CONFLICT skipped it, yet no row: purged in between. Inserted afresh by the caller.
      if (row === undefined) {
        vanished.push(i);
        continue;
      }
      if (isSameEvent(row, e.bodySha256)) {
        duplicates.set(row.id, (duplicates.get(row.id) ?? 0) + 1);
        results[i] = { outcome: 'duplicate', eventId: row.id, status: row.response_status, body: row.response_body };
      } else {
        conflicts.push({ row, event: e });
        results[i] =
          e.onConflict === 'accept'
            ? { outcome: 'conflict', eventId: row.id, status: row.response_status, body: row.response_body }
            : { outcome: 'conflict', eventId: row.id, status: 409, body: conflictAnswer(row.id, e.deliveryId) };
      }
    }
    // Only duplicates: the counter is a statistic, and no answer depends on it being on
    // disk, so this commit need not wait for a WAL flush (a conflict record still does).
    if (conflicts.length === 0) await client.query(`SELECT set_config('synchronous_commit', 'off', true)`);
    if (duplicates.size > 0) {
      await client.query(`UPDATE events AS e SET duplicates = e.duplicates + u.n FROM unnest($1::bigint[], $2::int[]) AS u(id, n) WHERE e.id = u.id`, [
        [...duplicates.keys()],
        [...duplicates.values()],
      ]);
    }
    // One row per differing body of an event, its repeats counted. Repeats within this
    // batch are folded first: one statement may not update the same row twice.
    const bodies = new Map<string, { row: ExistingRow; event: NewEvent; repeats: number }>();
    for (const { row, event } of conflicts) {
      const key = `${row.id}\u0000${event.bodySha256}`;
      const seen = bodies.get(key);
      if (seen === undefined) bodies.set(key, { row, event, repeats: 0 });
      else seen.repeats += 1;
    }
    for (const chunk of chunks([...bodies.values()], (c) => c.event)) {
      const params: unknown[] = [];
      const values = chunk.map(({ row, event: e, repeats }) => {
        const n = params.push(row.id, e.source, e.deliveryId, e.receivedAt, e.bodySha256, JSON.stringify(e.headers), e.body, repeats);
        return `($${n - 7}, $${n - 6}, $${n - 5}, $${n - 4}, $${n - 3}, $${n - 2}, $${n - 1}, $${n})`;
      });
      await client.query(
        `INSERT INTO conflicts (event_id, source, delivery_id, received_at, body_sha256, headers, body, repeats) VALUES ${values.join(', ')}
         ON CONFLICT (event_id, body_sha256) DO UPDATE SET repeats = conflicts.repeats + excluded.repeats + 1`,
        params,
      );
    }
  });
  return vanished;
}

function compareItems(a: NewEvent, b: NewEvent): number {
  // Code-unit order; any total order works, it only has to be the same in every receiver.
  if (a.source !== b.source) return a.source < b.source ? -1 : 1;
  if (a.deliveryId !== b.deliveryId) return a.deliveryId < b.deliveryId ? -1 : 1;
  return 0;
}

const COLUMNS = 16;

function insertSql(rows: number): string {
  const values: string[] = [];
  for (let r = 0; r < rows; r++) {
    const p = (c: number) => `$${r * COLUMNS + c}`;
    values.push(
      `(${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(13)}, ${p(5)}, ${p(6)}, ${p(7)}, ${p(8)}, ${p(9)}, ${p(10)}, ${p(11)}, ${p(12)}, ${p(14)}, ${p(15)}, ${p(16)})`,
    );
  }
  // OVERRIDING SYSTEM VALUE: the ids were drawn from the identity's own sequence above.
  return `INSERT INTO events
    (id, source, delivery_id, event_type, status, received_at, headers, body, body_sha256, extra_ids, response_status, response_body, next_attempt_at, finished_at, route_decisions, origin)
    OVERRIDING SYSTEM VALUE
    VALUES ${values.join(', ')}
    ON CONFLICT (source, delivery_id) DO NOTHING
    RETURNING id`;
}

function insertParams(chunk: readonly { event: NewEvent; id: number }[]): unknown[] {
  return chunk.flatMap(({ event: e, id }) => [
    id,
    e.source,
    e.deliveryId,
    e.eventType,
    e.receivedAt,
    JSON.stringify(e.headers),
    e.body,
    e.bodySha256,
    e.extraIds === undefined ? null : JSON.stringify(e.extraIds),
    e.successStatus,
    // The answer a duplicate of this delivery will get, byte for byte.
    acceptedAnswer(id),
    // Due as soon as it is received.
    e.receivedAt,
    // An event no route applies to is done on arrival: the drain never has to look at it.
    e.unrouted === undefined ? 'pending' : 'done',
    e.unrouted === undefined ? null : e.receivedAt,
    e.unrouted ?? null,
    e.origin ?? 'webhook',
  ]);
}

/** Splits a list, in order, into chunks bounded in rows and body bytes. */
function chunks<T>(list: readonly T[], eventOf: (t: T) => NewEvent): T[][] {
  const out: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const t of list) {
    const size = eventOf(t).body.length;
    if (current.length > 0 && (current.length >= CHUNK_ROWS || bytes + size > CHUNK_BYTES)) {
      out.push(current);
      current = [];
      bytes = 0;
    }
    current.push(t);
    bytes += size;
  }
  if (current.length > 0) out.push(current);
  return out;
}
