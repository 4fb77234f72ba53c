import type { ClaimedEvent } from '../drain-types.js';
import { CLAIM_COLUMNS, toClaimed, type ClaimDbRow } from '../rows.js';
import { changes, first, memo, rows, sqlText, type Dialect } from '../sql.js';
import type { DrainBackend } from './backend.js';

/**
 * How an event is claimed. A claim takes the oldest due events in arrival (id) order:
 * `pending` with `next_attempt_at <= now`, or `processing` whose lease expired (a crashed
 * or stalled drain's claim: this is how its events come back). One UPDATE sets them
 * `processing` under the claimant's lease and counts the attempt, so two drains never hold
 * one event: under SQLite's write lock no other writer runs meanwhile; on PostgreSQL rows
 * another transaction holds are skipped (`takeUnlocked`), and a row whose claim committed
 * meanwhile no longer matches.
 */

const statements = memo((d: Dialect) => ({
  // INDEXED BY (SQLite): without statistics its planner may answer "the smallest ids" by
  // walking every finished event in rowid order.
  claim: sqlText(
    d,
    (p) => `UPDATE events SET status = 'processing', lease_owner = ${p()}, lease_expires_at = ${p()}, attempts = attempts + 1
    WHERE id IN (
      SELECT id FROM (
        SELECT id FROM (SELECT id FROM events${d.indexedBy('events_pending')} WHERE status = 'pending' AND next_attempt_at <= ${p()}
                        ORDER BY id LIMIT ${p()}${d.takeUnlocked}) AS due
        UNION ALL
        SELECT id FROM (SELECT id FROM events${d.indexedBy('events_leased')} WHERE status = 'processing' AND lease_expires_at <= ${p()}
                        ORDER BY id LIMIT ${p()}${d.takeUnlocked}) AS expired
      ) AS chosen ORDER BY id LIMIT ${p()})
    RETURNING ${CLAIM_COLUMNS}`,
  ),
  nextDue: `SELECT min(t) AS t FROM (
      SELECT min(next_attempt_at) AS t FROM events${d.indexedBy('events_due')} WHERE status = 'pending'
      UNION ALL
      SELECT min(lease_expires_at) AS t FROM events${d.indexedBy('events_leased')} WHERE status = 'processing'
    ) AS due`,
  owners: `SELECT DISTINCT lease_owner AS owner FROM events${d.indexedBy('events_leased')} WHERE status = 'processing' AND lease_owner IS NOT NULL`,
  // substr, not LIKE: a host name may hold LIKE's wildcards.
  expire: sqlText(
    d,
    (p) => `UPDATE events SET lease_expires_at = ${p()}
      WHERE status = 'processing' AND substr(lease_owner, 1, length(CAST(${p()} AS text))) = ${p()} AND lease_expires_at > ${p()}`,
  ),
}));

/**
 * Claims up to `limit` due events, oldest first, all for `owner` until `now + leaseMs`
 * (each claim is still guarded by its own event id and owner).
 */
export async function claimEvents(b: DrainBackend, owner: string, now: number, leaseMs: number, limit: number): Promise<ClaimedEvent[]> {
  const claimed = await b.write('claim events', () => rows<ClaimDbRow>(statements(b.dialect).claim, [owner, now + leaseMs, now, limit, now, limit, limit]), {
    oneStatement: true,
  });
  // RETURNING gives no order: the drain runs them oldest first.
  return claimed.map(toClaimed).sort((a, b) => a.id - b.id);
}

/** The earliest time something becomes due (a retry or an expiring lease); undefined when none. */
export async function nextDueAt(b: DrainBackend): Promise<number | undefined> {
  return (await b.read('next due event', first<{ t: number | null }>(statements(b.dialect).nextDue)))?.t ?? undefined;
}

/** The distinct owners of every current claim, live or expired. */
export async function claimOwners(b: DrainBackend): Promise<string[]> {
  return (await b.read('claim owners', rows<{ owner: string }>(statements(b.dialect).owners))).map((r) => r.owner);
}

/** Ends every claim whose owner starts with `ownerPrefix` at `now` (its process is known dead), so it is due at once. */
export function expireClaims(b: DrainBackend, ownerPrefix: string, now: number): Promise<number> {
  return b.write('expire claims', () => changes(statements(b.dialect).expire, [now, ownerPrefix, ownerPrefix, now]), { oneStatement: true });
}
