import type { Lease } from '../drain-types.js';
import { changes, memo, sqlText, type Dialect, type Steps } from '../sql.js';
import type { DrainBackend } from './backend.js';
import { held, leaseList } from './lease.js';

/**
 * How a claimed event is settled: done, back to pending for a retry, dead, or released
 * unstarted. Each applies only while the caller still holds the lease (the lease guard),
 * and reports whether it did. Complete, retry and bury also record this attempt's route
 * decisions, why each route did or did not apply (kept as they were when none are given).
 */

const statements = memo((d: Dialect) => ({
  complete: sqlText(
    d,
    (p) => `UPDATE events SET status = 'done', finished_at = ${p()}, lease_owner = NULL, lease_expires_at = NULL,
      last_error = NULL, force_effects = 0, route_decisions = coalesce(${p()}, route_decisions) WHERE ${held(p)}`,
  ),
  retry: sqlText(
    d,
    (p) => `UPDATE events SET status = 'pending', next_attempt_at = ${p()}, last_error = ${p()}, lease_owner = NULL,
      lease_expires_at = NULL, route_decisions = coalesce(${p()}, route_decisions) WHERE ${held(p)}`,
  ),
  bury: sqlText(
    d,
    (p) => `UPDATE events SET status = 'dead', finished_at = ${p()}, last_error = ${p()}, lease_owner = NULL,
      lease_expires_at = NULL, route_decisions = coalesce(${p()}, route_decisions) WHERE ${held(p)}`,
  ),
  // The claim is not counted as an attempt: the event never started.
  release: sqlText(
    d,
    (p) => `UPDATE events SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL,
      attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END
      WHERE status = 'processing' AND (id, lease_owner) IN (${d.leasePairs(p())})`,
  ),
}));

/** `done`: clears the lease, last_error and force_effects. A module effect runs it in its own transaction (completeOnOk). */
export function* complete(d: Dialect, lease: Lease, now: number, routeDecisions?: string): Steps<boolean> {
  return (yield* changes(statements(d).complete, [now, routeDecisions ?? null, lease.eventId, lease.owner])) === 1;
}

export function completeEvent(b: DrainBackend, lease: Lease, now: number, routeDecisions?: string): Promise<boolean> {
  return b.write('complete event', () => complete(b.dialect, lease, now, routeDecisions), { oneStatement: true });
}

/** Back to `pending` until `nextAttemptAt`, keeping `error` as last_error. */
export async function retryEvent(b: DrainBackend, lease: Lease, error: string, nextAttemptAt: number, routeDecisions?: string): Promise<boolean> {
  const params = [nextAttemptAt, error, routeDecisions ?? null, lease.eventId, lease.owner];
  return (await b.write('retry event', () => changes(statements(b.dialect).retry, params), { oneStatement: true })) === 1;
}

/** `dead` with `error` as last_error (past maxAttempts, or a permanent failure). */
export async function buryEvent(b: DrainBackend, lease: Lease, error: string, now: number, routeDecisions?: string): Promise<boolean> {
  const params = [now, error, routeDecisions ?? null, lease.eventId, lease.owner];
  return (await b.write('bury event', () => changes(statements(b.dialect).bury, params), { oneStatement: true })) === 1;
}

/** Claimed events the drain did not start (it is stopping): back to `pending` at once, for another drain. */
export async function releaseEvents(b: DrainBackend, leases: readonly Lease[]): Promise<void> {
  if (leases.length === 0) return;
  await b.write('release events', () => changes(statements(b.dialect).release, [leaseList(leases)]), { oneStatement: true });
}
