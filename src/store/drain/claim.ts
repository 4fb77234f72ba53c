import type { ClaimedUnit, ClaimLimits, EventPlan, UnplannedEvent, Work } from '../drain-types.js';
import { EVENT_WORK_COLUMNS, toClaimed, toUnplanned, UNIT_CLAIM_COLUMNS, type EventWorkDbRow, type UnitClaimDbRow } from '../rows.js';
import { changes, first, memo, rows, sqlText, type Dialect, type Steps } from '../sql.js';
import type { DrainBackend } from './backend.js';
import { deriveEventStatus } from './settle.js';

/**
 * How work is planned and claimed.
 *
 * Planning. Ingest stores an event `pending` and unplanned; the drain decides which routes
 * apply (it holds the configuration) and stores one unit per route, in the route's lane,
 * due when the event is. An event no route applies to is done at once.
 *
 * Claiming, per lane. A unit is due when it is `pending` with `next_attempt_at <= now`.
 * A unit `processing` under an expired lease (a crashed or stalled drain's claim) is put
 * back to `pending` by the next claim, due at once: this is how its work comes back, its
 * attempt counted (the claim that takes it counts the next) and, where it was left
 * `running`, recorded as failed, interrupted. A claim then chooses lanes: those with a due unit, no unit
 * running under a live lease (in any process) and none running in this drain, oldest due
 * unit first. Then it takes up to `perLane` due units of each chosen lane, oldest first,
 * and sets them `processing` under the claimant's lease, counting the attempt. The drain
 * runs a lane's units one after another, so a lane has one unit in flight at a time, in
 * any number of receivers: under SQLite's write lock no other claim runs meanwhile; on
 * PostgreSQL each chosen lane is locked for the claim's transaction (`tryLockLane`; a lane
 * another receiver is claiming in is skipped, not waited for), and each lane's units are
 * taken by a statement of its own, which sees every claim committed before that lock was
 * granted. Each step costs one index probe per lane and one per unit it takes, never one
 * per unit waiting: a lane's backlog does not make the drain slower.
 */

const statements = memo((d: Dialect) => {
  // A lane with a unit running under a live lease, wherever it runs.
  const running = (p: () => string) => `SELECT lane FROM units${d.indexedBy('units_leased')} WHERE status = 'processing' AND lease_expires_at > ${p()}`;
  // Every lane with pending units, once each: a walk over units_lane_due, one probe per
  // lane, however many units wait in it.
  const walk = `WITH RECURSIVE walk(lane) AS (
      SELECT min(lane) FROM units${d.indexedBy('units_lane_due')} WHERE status = 'pending'
      UNION ALL
      SELECT (SELECT min(lane) FROM units${d.indexedBy('units_lane_due')} WHERE status = 'pending' AND lane > walk.lane) FROM walk WHERE walk.lane IS NOT NULL
    )`;
  // A lane's earliest due time: one probe of units_lane_due.
  const laneDueAt = `(SELECT min(next_attempt_at) FROM units${d.indexedBy('units_lane_due')} WHERE status = 'pending' AND lane = walk.lane)`;
  return {
    unplanned: sqlText(
      d,
      (p) => `SELECT ${EVENT_WORK_COLUMNS} FROM events${d.indexedBy('events_unplanned')} WHERE planned = 0 AND status = 'pending' ORDER BY id LIMIT ${p()}`,
    ),
    // Only an event still unplanned: two receivers planning one event plan it once.
    markPlanned: sqlText(d, (p) => `UPDATE events SET planned = 1, route_decisions = ${p()} WHERE id = ${p()} AND planned = 0 AND status = 'pending'`),
    // The unit starts where its event is: due at its next attempt, its attempts so far
    // counted, a forced replay's mark kept (an event planned after a replay or an upgrade).
    insertUnit: sqlText(
      d,
      (p) => `INSERT INTO units (event_id, route, lane, next_attempt_at, attempts, force_effects)
        SELECT id, ${p()}, ${p()}, next_attempt_at, attempts, force_effects FROM events WHERE id = ${p()}
        ON CONFLICT (event_id, route) DO NOTHING`,
    ),
    assignLane: sqlText(d, (p) => `UPDATE units SET lane = ${p()} WHERE route = ${p()} AND lane <> ${p()} AND status = 'pending'`),
    // Units under an expired lease (a crashed or stalled drain's claims) back to pending, due
    // at once: the lanes below find them as they find any other due unit. Where writers run
    // concurrently, a row another transaction holds is left to it (another claim taking it
    // back, or its owner's module effect renewing the lease), not waited for.
    reclaim: sqlText(
      d,
      (p) => `UPDATE units SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL
        WHERE id IN (SELECT id FROM units${d.indexedBy('units_leased')} WHERE status = 'processing' AND lease_expires_at <= ${p()}${d.takeUnlocked})
        RETURNING id`,
    ),
    // The attempts the units taken back had left running end as interrupted, failed (their unit runs again).
    interrupt: sqlText(
      d,
      (p) => `UPDATE attempts SET outcome = 'failed', finished_at = ${p()}, error = ${p()}
        WHERE id IN (SELECT a.id FROM units u JOIN attempts a ON a.event_id = u.event_id AND a.route = u.route
          WHERE u.id IN (${d.idList(p())}) AND a.outcome = 'running')`,
    ),
    // Lanes whose earliest due time has come, by their first due unit (in id order), oldest
    // first. Where lanes are locked, the lock is tried lane by lane in that order, as the
    // outer limit takes them: a lane another receiver is claiming in is passed over for the
    // next one. The inner OFFSET keeps the planner from moving the lock into the ordering,
    // which would lock every candidate lane.
    lanes: sqlText(
      d,
      (p) => `${walk}
      SELECT lane FROM (
        SELECT lane, (SELECT id FROM units${d.indexedBy('units_pending')}
            WHERE status = 'pending' AND lane = walk.lane AND next_attempt_at <= ${p()} ORDER BY id LIMIT 1) AS head
          FROM walk WHERE lane IS NOT NULL AND ${laneDueAt} <= ${p()} AND lane NOT IN (${d.textList(p())}) AND lane NOT IN (${running(p)})
        ORDER BY head${d.tryLockLane === undefined ? '' : ' OFFSET 0'}
      ) AS candidates${d.tryLockLane === undefined ? '' : ` WHERE ${d.tryLockLane('lane')}`} LIMIT ${p()}`,
    ),
    // Up to a batch of one lane's due units, oldest first, unless a unit of the lane runs
    // under a live lease (checked by this statement, after the lane's lock where there is one).
    claim: sqlText(
      d,
      (p) => `UPDATE units SET status = 'processing', lease_owner = ${p()}, lease_expires_at = ${p()}, attempts = attempts + 1
      WHERE id IN (
          SELECT id FROM units${d.indexedBy('units_pending')} WHERE status = 'pending' AND lane = ${p()} AND next_attempt_at <= ${p()} ORDER BY id LIMIT ${p()}
        )
        AND NOT EXISTS (SELECT 1 FROM units${d.indexedBy('units_leased')} WHERE status = 'processing' AND lease_expires_at > ${p()} AND lane = ${p()})
      RETURNING ${UNIT_CLAIM_COLUMNS}`,
    ),
    events: sqlText(d, (p) => `SELECT ${EVENT_WORK_COLUMNS} FROM events WHERE id IN (${d.idList(p())})`),
    // The event's derived status: processing while one of its units is (see settle.ts).
    processing: sqlText(
      d,
      (p) => `UPDATE events SET status = 'processing', attempts = coalesce((SELECT max(u.attempts) FROM units u WHERE u.event_id = events.id), attempts)
        WHERE id IN (${d.idList(p())})`,
    ),
    nextDue: sqlText(
      d,
      (p) => `${walk}
      SELECT min(t) AS t FROM (
        SELECT ${laneDueAt} AS t FROM walk
          WHERE lane IS NOT NULL AND lane NOT IN (${d.textList(p())}) AND lane NOT IN (${running(p)})
        UNION ALL
        SELECT min(lease_expires_at) AS t FROM units${d.indexedBy('units_leased')} WHERE status = 'processing' AND lane NOT IN (${d.textList(p())})
        UNION ALL
        SELECT min(next_attempt_at) AS t FROM events${d.indexedBy('events_unplanned')} WHERE planned = 0 AND status = 'pending'
      ) AS due`,
    ),
    owners: `SELECT DISTINCT lease_owner AS owner FROM units${d.indexedBy('units_leased')} WHERE status = 'processing' AND lease_owner IS NOT NULL`,
    // substr, not LIKE: a host name may hold LIKE's wildcards.
    expire: sqlText(
      d,
      (p) => `UPDATE units SET lease_expires_at = ${p()}
        WHERE status = 'processing' AND substr(lease_owner, 1, length(CAST(${p()} AS text))) = ${p()} AND lease_expires_at > ${p()}`,
    ),
  };
});

/** Events stored but not planned yet, oldest first. */
export async function unplannedEvents(b: DrainBackend, limit: number): Promise<UnplannedEvent[]> {
  return (await b.read('unplanned events', rows<EventWorkDbRow>(statements(b.dialect).unplanned, [limit]))).map(toUnplanned);
}

/** Stores each event's units, or marks it done when none applies (see DrainStore.planEvents). */
export async function planEvents(b: DrainBackend, plans: readonly EventPlan[], now: number): Promise<void> {
  if (plans.length === 0) return;
  await b.write('plan events', () => plan(b.dialect, plans, now));
}

/**
 * An event given units stays as it is (pending, its attempts and next attempt those its
 * units start with, its last error until a unit's attempt replaces it); one given none is
 * done, as its status derived from no units says.
 */
function* plan(d: Dialect, plans: readonly EventPlan[], now: number): Steps<void> {
  const s = statements(d);
  const unrouted: number[] = [];
  for (const plan of plans) {
    if ((yield* changes(s.markPlanned, [plan.decisions, plan.eventId])) === 0) continue;
    for (const u of plan.units) yield* changes(s.insertUnit, [u.route, u.lane, plan.eventId]);
    if (plan.units.length === 0) unrouted.push(plan.eventId);
  }
  yield* deriveEventStatus(d, unrouted, now);
}

/** Moves the units not running to their route's lane now (see DrainStore.assignLanes). */
export async function assignLanes(b: DrainBackend, lanes: ReadonlyMap<string, string>): Promise<void> {
  if (lanes.size === 0) return;
  const s = statements(b.dialect);
  await b.write('assign lanes', function* () {
    for (const [route, lane] of lanes) yield* changes(s.assignLane, [lane, route, lane]);
  });
}

/** The error of an attempt its drain never finished (the receiver stopped or crashed mid-effect). */
export const INTERRUPTED = 'interrupted: the receiver stopped or crashed while it ran (its lease ran out); it runs again';

/** How many times one claim chooses lanes when the lanes it chose were all taken meanwhile. */
const CLAIM_ROUNDS = 3;

/**
 * Stores `plans` (as planEvents), then claims due units, per lane, in the same transaction
 * (see the comment at the top and DrainStore.claimUnits).
 */
export async function claimUnits(
  b: DrainBackend,
  owner: string,
  now: number,
  leaseMs: number,
  limits: ClaimLimits,
  plans: readonly EventPlan[] = [],
): Promise<ClaimedUnit[]> {
  const claiming = limits.lanes > 0 && limits.perLane > 0;
  if (!claiming && plans.length === 0) return [];
  const d = b.dialect;
  return b.write(plans.length === 0 ? 'claim units' : 'plan and claim units', function* () {
    if (plans.length > 0) yield* plan(d, plans, now);
    return claiming ? yield* claim(d, owner, now, leaseMs, limits) : [];
  });
}

function* claim(d: Dialect, owner: string, now: number, leaseMs: number, limits: ClaimLimits): Steps<ClaimedUnit[]> {
  const s = statements(d);
  const units: UnitClaimDbRow[] = [];
  // A lane locked just as another receiver's claim in it committed is found taken by the
  // second statement: the lanes are chosen again, from a newer snapshot, a few times.
  const takenBack = (yield* rows<{ id: number }>(s.reclaim, [now])).map((r) => r.id);
  if (takenBack.length > 0) yield* changes(s.interrupt, [now, INTERRUPTED, d.ids(takenBack)]);
  for (let round = 0; units.length === 0 && round < CLAIM_ROUNDS; round++) {
    const lanes = (yield* rows<{ lane: string }>(s.lanes, [now, now, d.ids(limits.busyLanes), now, limits.lanes])).map((r) => r.lane);
    if (lanes.length === 0) return [];
    for (const lane of lanes) units.push(...(yield* rows<UnitClaimDbRow>(s.claim, [owner, now + leaseMs, lane, now, limits.perLane, now, lane])));
  }
  if (units.length === 0) return [];
  const eventIds = [...new Set(units.map((u) => u.event_id))];
  const events = new Map((yield* rows<EventWorkDbRow>(s.events, [d.ids(eventIds)])).map((e) => [e.id, e]));
  yield* changes(s.processing, [d.ids(eventIds)]);
  // RETURNING gives no order: each lane runs its units oldest first.
  return units
    .filter((u) => events.has(u.event_id))
    .map((u) => toClaimed(u, events.get(u.event_id)!))
    .sort((x, y) => x.unitId - y.unitId);
}

/** The earliest time something becomes due outside `busyLanes`; undefined when none. */
export function nextDueAt(b: DrainBackend, busyLanes: readonly string[], now: number): Promise<number | undefined> {
  return b.read('next due unit', nextDue(b.dialect, busyLanes, now));
}

function* nextDue(d: Dialect, busyLanes: readonly string[], now: number): Steps<number | undefined> {
  const busy = d.ids(busyLanes);
  return (yield* first<{ t: number | null }>(statements(d).nextDue, [busy, now, busy]))?.t ?? undefined;
}

/** Events to plan and, when there are none and lanes are free, the next due time (see DrainStore.lookForWork). */
export function lookForWork(b: DrainBackend, limit: number, busyLanes: readonly string[] | undefined, now: number): Promise<Work> {
  const d = b.dialect;
  return b.read(
    'look for work',
    (function* (): Steps<Work> {
      const events = (yield* rows<EventWorkDbRow>(statements(d).unplanned, [limit])).map(toUnplanned);
      if (events.length > 0 || busyLanes === undefined) return { events, due: undefined };
      return { events, due: yield* nextDue(d, busyLanes, now) };
    })(),
  );
}

/** The distinct owners of every current claim, live or expired. */
export async function claimOwners(b: DrainBackend): Promise<string[]> {
  return (await b.read('claim owners', rows<{ owner: string }>(statements(b.dialect).owners))).map((r) => r.owner);
}

/** Ends every claim whose owner starts with `ownerPrefix` at `now` (its process is known dead), so it is due at once. */
export function expireClaims(b: DrainBackend, ownerPrefix: string, now: number): Promise<number> {
  return b.write('expire claims', () => changes(statements(b.dialect).expire, [now, ownerPrefix, ownerPrefix, now]), { oneStatement: true });
}
