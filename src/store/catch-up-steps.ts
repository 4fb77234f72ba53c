import {
  toCatchUpState,
  type CatchUpRunRecord,
  type CatchUpState,
  type CatchUpStateRow,
  type CatchUpStore,
  type FetchedEvent,
  type StoreFetchedResult,
} from './catch-up-types.js';
import { findEventId, type StepRunner } from './ops-steps.js';
import { acceptedAnswer } from './types.js';
import { changes, first, memo, rows, sqlText, type Dialect, type Steps } from './sql.js';

/**
 * Catch-up's reads and writes, written once for both stores (see sql.ts and
 * catch-up-types.ts).
 */

const STATE_COLUMNS = 'source, configured_at, resume_at, resume_cursor, last_run_at, last_ok_at, last_error, last_counts';

const statements = memo((d: Dialect) => {
  const text = (build: (p: () => string) => string) => sqlText(d, build);
  return {
    storedDeliveryIds: text((p) => `SELECT delivery_id FROM events WHERE source = ${p()} AND delivery_id IN (${d.textList(p())})`),
    state: text((p) => `SELECT ${STATE_COLUMNS} FROM catch_up WHERE source = ${p()}`),
    states: `SELECT ${STATE_COLUMNS} FROM catch_up ORDER BY source`,
    // Insert-first on UNIQUE(source, delivery_id), as ingest: a webhook of the same event
    // committed first wins, and this changes nothing.
    insertFetched: text(
      (p) => `INSERT INTO events
        (source, delivery_id, event_type, status, received_at, headers, body, body_sha256, response_status, next_attempt_at, finished_at, origin, route_decisions)
        VALUES (${p()}, ${p()}, ${p()}, ${p()}, ${p()}, '{"content-type": "application/json"}', ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, 'catch-up', ${p()})
        ON CONFLICT (source, delivery_id) DO NOTHING RETURNING id`,
    ),
    // The answer a later signed delivery of this event (a duplicate) is given.
    answer: text((p) => `UPDATE events SET response_body = ${p()} WHERE id = ${p()}`),
    begin: text((p) => `INSERT INTO catch_up (source, configured_at) VALUES (${p()}, ${p()}) ON CONFLICT (source) DO NOTHING`),
    // Parameters: at, error, counts, error, at, resumeAt, 1 if partial is given, partial, source.
    // The CAST: PostgreSQL cannot tell the type of a parameter that is only tested for NULL.
    record: text(
      (p) => `UPDATE catch_up SET last_run_at = ${p()}, last_error = ${p()}, last_counts = ${p()},
        last_ok_at = CASE WHEN CAST(${p()} AS text) IS NULL THEN ${p()} ELSE last_ok_at END,
        resume_at = coalesce(${p()}, resume_at),
        resume_cursor = CASE WHEN ${p()} = 1 THEN ${p()} ELSE resume_cursor END
        WHERE source = ${p()}`,
    ),
  };
});

export function* storedDeliveryIds(d: Dialect, source: string, deliveryIds: readonly string[]): Steps<Set<string>> {
  const found = yield* rows<{ delivery_id: string }>(statements(d).storedDeliveryIds, [source, d.ids(deliveryIds)]);
  return new Set(found.map((r) => r.delivery_id));
}

export function* catchUpState(d: Dialect, source: string): Steps<CatchUpState | undefined> {
  const row = yield* first<CatchUpStateRow>(statements(d).state, [source]);
  return row === undefined ? undefined : toCatchUpState(row);
}

export function* catchUpStates(d: Dialect): Steps<CatchUpState[]> {
  return (yield* rows<CatchUpStateRow>(statements(d).states)).map(toCatchUpState);
}

/** The state, created with configuredAt = now when it does not exist yet. */
export function* beginCatchUp(d: Dialect, source: string, now: number): Steps<CatchUpState> {
  yield* changes(statements(d).begin, [source, now]);
  return (yield* catchUpState(d, source))!;
}

export function* recordCatchUp(d: Dialect, source: string, run: CatchUpRunRecord): Steps<void> {
  const partial = run.partial == null ? null : JSON.stringify(run.partial);
  yield* changes(statements(d).record, [
    run.at,
    run.error,
    JSON.stringify(run.counts),
    run.error,
    run.at,
    run.resumeAt ?? null,
    run.partial === undefined ? 0 : 1,
    partial,
    source,
  ]);
}

/** Stores an event fetched from the sender's API, unless its delivery id is stored already. */
export function* storeFetched(d: Dialect, e: FetchedEvent): Steps<StoreFetchedResult> {
  const done = e.unrouted !== undefined;
  const inserted = yield* first<{ id: number }>(statements(d).insertFetched, [
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
  ]);
  if (inserted === undefined) return { stored: false, eventId: (yield* findEventId(d, e.source, e.deliveryId))! };
  yield* changes(statements(d).answer, [acceptedAnswer(inserted.id), inserted.id]);
  return { stored: true, eventId: inserted.id };
}

/** Every operation but the lock, which each backend takes its own way. */
export function catchUpOn(d: Dialect, run: StepRunner): Omit<CatchUpStore, 'lockCatchUp'> {
  return {
    storeFetched: (event) => run.write('catch-up', () => storeFetched(d, event)),
    storedDeliveryIds: (source, deliveryIds) => run.alone('catch-up', storedDeliveryIds(d, source, deliveryIds)),
    catchUpState: (source) => run.alone('catch-up', catchUpState(d, source)),
    catchUpStates: () => run.alone('catch-up', catchUpStates(d)),
    beginCatchUp: (source, now) => run.write('catch-up', () => beginCatchUp(d, source, now)),
    recordCatchUp: (source, record) => run.write('catch-up', () => recordCatchUp(d, source, record)),
  };
}
