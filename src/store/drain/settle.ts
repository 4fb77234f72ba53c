import type { Lease } from '../drain-types.js';
import { changes, memo, rows, sqlText, type Dialect, type Steps } from '../sql.js';
import type { DrainBackend } from './backend.js';
import { held, leaseList } from './lease.js';

/**
 * How a claimed unit is settled: done, back to pending for a retry, dead, or released
 * unstarted. Each applies only while the caller still holds the lease (the lease guard),
 * and reports whether it did.
 *
 * The event's status is derived from its units', in the transaction that changed one:
 * `processing` while one is, else `pending` while one is, else `dead` when one is, else
 * `done` (an event without units: nothing applied). Its attempts are its units' most, its
 * next attempt their earliest, its last error the first unfinished unit's.
 */

const statements = memo((d: Dialect) => {
  /** How many of the event's units (u, in derive's pass over them) are in one of `statuses`. */
  const count = (statuses: string) => `sum(CASE WHEN u.status IN (${statuses}) THEN 1 ELSE 0 END)`;
  return {
    complete: sqlText(
      d,
      (p) => `UPDATE units SET status = 'done', finished_at = ${p()}, lease_owner = NULL, lease_expires_at = NULL,
        last_error = NULL, force_effects = 0 WHERE ${held(p)}`,
    ),
    retry: sqlText(
      d,
      (p) => `UPDATE units SET status = 'pending', next_attempt_at = ${p()}, last_error = ${p()}, lease_owner = NULL, lease_expires_at = NULL
        WHERE ${held(p)}`,
    ),
    bury: sqlText(
      d,
      (p) => `UPDATE units SET status = 'dead', finished_at = ${p()}, last_error = ${p()}, lease_owner = NULL, lease_expires_at = NULL
        WHERE ${held(p)}`,
    ),
    // The claim is not counted as an attempt: the unit never started.
    release: sqlText(
      d,
      (p) => `UPDATE units SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL,
        attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
        WHERE status = 'processing' AND (id, lease_owner) IN (${d.leasePairs(p())})`,
    ),
    // Where writers run concurrently, the events are locked first, and their units read by
    // the next statement: two units of one event settled at once by two transactions derive
    // the event's status one after the other, the second seeing the first's commit.
    lockEvents: sqlText(d, (p) => `SELECT id FROM events WHERE id IN (${d.idList(p())}) ORDER BY id${d.lockRows}`),
    // One pass over the event's units, found by event_id alone: no condition on status that a
    // partial index could answer, and no ORDER BY id that an index of ids could. Before
    // PostgreSQL has analyzed a table that grew fast (a backlog), it took either for one
    // that reads every pending unit, about 25 ms per event at 100,000 pending. The first
    // unfinished unit's error: its id by min(id + 0), which no index answers in id order.
    derive: sqlText(
      d,
      (p) => `UPDATE events SET (status, finished_at, force_effects, attempts, next_attempt_at) = (
          SELECT CASE WHEN ${count(`'processing'`)} > 0 THEN 'processing' WHEN ${count(`'pending'`)} > 0 THEN 'pending'
              WHEN ${count(`'dead'`)} > 0 THEN 'dead' ELSE 'done' END,
            CASE WHEN ${count(`'pending', 'processing'`)} > 0 THEN NULL ELSE CAST(${p()} AS bigint) END,
            CASE WHEN ${count(`'pending', 'processing'`)} > 0 THEN events.force_effects ELSE 0 END,
            coalesce(max(u.attempts), events.attempts),
            coalesce(min(CASE WHEN u.status = 'pending' THEN u.next_attempt_at END), events.next_attempt_at)
          FROM units u WHERE u.event_id = events.id
        ),
        last_error = (SELECT u.route || ': ' || u.last_error FROM units u WHERE u.event_id = events.id AND u.id = (
          SELECT min(f.id + 0) FROM units f WHERE f.event_id = events.id AND f.status <> 'done' AND f.last_error IS NOT NULL)),
        lease_owner = NULL, lease_expires_at = NULL
        WHERE id IN (${d.idList(p())})`,
    ),
  };
});

/** Rewrites the events' status (and attempts, next attempt, last error) from their units'. */
export function* deriveEventStatus(d: Dialect, eventIds: readonly number[], now: number): Steps<void> {
  if (eventIds.length === 0) return;
  const ids = [...new Set(eventIds)].sort((a, b) => a - b);
  const s = statements(d);
  if (!d.oneWriter) yield* rows(s.lockEvents, [d.ids(ids)]);
  yield* changes(s.derive, [now, d.ids(ids)]);
}

/** One guarded change of a unit, then its event's status. */
function* settle(d: Dialect, sql: string, params: readonly unknown[], lease: Lease, now: number): Steps<boolean> {
  if ((yield* changes(sql, params)) !== 1) return false;
  yield* deriveEventStatus(d, [lease.eventId], now);
  return true;
}

/** `done`: clears the lease, last_error and force_effects. A module effect runs it in its own transaction (completeOnOk). */
export function* complete(d: Dialect, lease: Lease, now: number): Steps<boolean> {
  return yield* settle(d, statements(d).complete, [now, lease.unitId, lease.owner], lease, now);
}

export function completeUnit(b: DrainBackend, lease: Lease, now: number): Promise<boolean> {
  return b.write('complete unit', () => complete(b.dialect, lease, now));
}

/** Back to `pending` until `nextAttemptAt`, keeping `error` as last_error. */
export function retryUnit(b: DrainBackend, lease: Lease, error: string, nextAttemptAt: number): Promise<boolean> {
  const d = b.dialect;
  return b.write('retry unit', () => settle(d, statements(d).retry, [nextAttemptAt, error, lease.unitId, lease.owner], lease, nextAttemptAt));
}

/** `dead` with `error` as last_error (past maxAttempts, or a permanent failure). */
export function buryUnit(b: DrainBackend, lease: Lease, error: string, now: number): Promise<boolean> {
  const d = b.dialect;
  return b.write('bury unit', () => settle(d, statements(d).bury, [now, error, lease.unitId, lease.owner], lease, now));
}

/** Claimed units the drain did not start (it is stopping): back to `pending` at once, for another drain. */
export async function releaseUnits(b: DrainBackend, leases: readonly Lease[], now: number): Promise<void> {
  if (leases.length === 0) return;
  const d = b.dialect;
  await b.write('release units', function* () {
    yield* changes(statements(d).release, [leaseList(leases)]);
    yield* deriveEventStatus(
      d,
      leases.map((l) => l.eventId),
      now,
    );
  });
}
