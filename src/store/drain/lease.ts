import type { Lease } from '../drain-types.js';
import { changes, first, memo, sqlText, type Dialect, type Steps } from '../sql.js';
import type { DrainBackend } from './backend.js';

/**
 * Leases: a claim on one unit (one route of one event) by one drain (`lease_owner`) until
 * `lease_expires_at`, on its row in `units`. Every write about a claimed unit ends with the
 * lease guard below, so it applies only while the caller still holds the lease: a drain
 * whose claim was taken over (its lease expired, another drain claimed the unit) changes
 * nothing.
 */

/** The lease guard on a units row: unit id, then owner. */
export const held = (p: () => string) => `id = ${p()} AND lease_owner = ${p()} AND status = 'processing'`;

/** The leases as the one parameter `Dialect.leasePairs` binds. */
export const leaseList = (leases: readonly Lease[]) => JSON.stringify(leases.map((l) => [l.unitId, l.owner]));

const statements = memo((d: Dialect) => ({
  renew: sqlText(d, (p) => `UPDATE units SET lease_expires_at = ${p()} WHERE ${held(p)}`),
  held: sqlText(d, (p) => `SELECT 1 AS held FROM units WHERE ${held(p)}`),
  // Each lease by its id and owner together. Where writers run concurrently, a row another
  // transaction holds is skipped: this drain's own module effect, which renews it itself.
  renewMany: sqlText(
    d,
    (p) => `UPDATE units SET lease_expires_at = ${p()}
      WHERE id IN (SELECT id FROM units WHERE status = 'processing' AND (id, lease_owner) IN (${d.leasePairs(p())})${d.takeUnlocked})`,
  ),
}));

/** Moves a held lease to `until`; false when the lease is lost. */
export function* renewLease(d: Dialect, lease: Lease, until: number): Steps<boolean> {
  return (yield* changes(statements(d).renew, [until, lease.unitId, lease.owner])) === 1;
}

/** Is the lease still held? (A check that writes nothing, so it locks no row.) */
export function* leaseHeld(d: Dialect, lease: Lease): Steps<boolean> {
  return (yield* first(statements(d).held, [lease.unitId, lease.owner])) !== undefined;
}

/**
 * The heartbeat: moves every lease still held to `now + leaseMs`. Leases that were taken
 * over are left alone (their next guarded step reports them lost).
 */
export async function renewLeases(b: DrainBackend, leases: readonly Lease[], now: number, leaseMs: number): Promise<void> {
  if (leases.length === 0) return;
  const d = b.dialect;
  await b.renew('renew leases', function* () {
    yield* changes(statements(d).renewMany, [now + leaseMs, leaseList(leases)]);
  });
}
