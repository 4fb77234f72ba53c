import type { AttemptRecord, EffectDb, EffectDecision, EffectFinish, EffectRun, EffectStart, Lease, LedgerRow, TransactionalOutcome } from './drain-types.js';
import { decideEffect, newerVersion } from './ledger.js';
import type { AttemptRow } from './ops-types.js';
import { toLedger, type LedgerDbRow } from './rows.js';
import { changes, first, memo, rows, sqlText, type Dialect, type Steps } from './sql.js';

/**
 * The drain's protocol, written once for both stores (see sql.ts): the effect ledger
 * (decide, mark running, finish), the attempts it records, and the lease-guarded settle
 * of an event. Each function is the steps of one operation, or of one part of a module
 * effect's transaction; the store runs them in its own transaction.
 */

const statements = memo((d: Dialect) => {
  const text = (build: (p: () => string) => string) => sqlText(d, build);
  // Every lease-guarded statement ends with this: event id, then owner.
  const held = (p: () => string) => `id = ${p()} AND lease_owner = ${p()} AND status = 'processing'`;
  return {
    nextDue: `SELECT min(t) AS t FROM (
        SELECT min(next_attempt_at) AS t FROM events${d.indexedBy('events_due')} WHERE status = 'pending'
        UNION ALL
        SELECT min(lease_expires_at) AS t FROM events${d.indexedBy('events_leased')} WHERE status = 'processing'
      ) AS due`,
    claimOwners: `SELECT DISTINCT lease_owner AS owner FROM events${d.indexedBy('events_leased')} WHERE status = 'processing' AND lease_owner IS NOT NULL`,
    // substr, not LIKE: a host name may hold LIKE's wildcards.
    expireClaims: text(
      (p) => `UPDATE events SET lease_expires_at = ${p()}
        WHERE status = 'processing' AND substr(lease_owner, 1, length(CAST(${p()} AS text))) = ${p()} AND lease_expires_at > ${p()}`,
    ),
    renew: text((p) => `UPDATE events SET lease_expires_at = ${p()} WHERE ${held(p)}`),
    // A running row belongs to someone else only while another event's claim on it is live;
    // otherwise it is a run that crashed or outlived its lease, and may be repeated.
    ledger: text(
      (p) => `SELECT f.status, f.event_id, f.version, f.runs, f.forced_runs,
        CASE WHEN f.status = 'running' AND f.event_id IS NOT NULL AND f.event_id <> ${p()} AND EXISTS (
          SELECT 1 FROM events v WHERE v.id = f.event_id AND v.status = 'processing' AND v.lease_expires_at > ${p()})
        THEN 1 ELSE 0 END AS held_elsewhere
        FROM effects f WHERE f.effect_key = ${p()}`,
    ),
    insertAttempt: text(
      (p) => `INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome, error, output, forced, run_key)
        VALUES (${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}) RETURNING id`,
    ),
    // A forced replay's own ok run of this key: events.force_effects holds the id of the
    // replay's first attempt row (ops-steps reset), so a retry of the replay (another route
    // failed) does not run it again, under yet another forced key the app would not drop.
    forcedInThisReplay: text(
      (p) => `SELECT 1 AS done FROM attempts a JOIN events e ON e.id = a.event_id
        WHERE a.event_id = ${p()} AND a.effect_key = ${p()} AND a.forced = 1 AND a.outcome = 'ok' AND e.force_effects > 0 AND a.id >= e.force_effects LIMIT 1`,
    ),
    // This event's latest run of the key (attempts that ran nothing have no run key).
    lastRun: text(
      (p) => `SELECT run_key, outcome FROM attempts WHERE event_id = ${p()} AND effect_key = ${p()} AND run_key IS NOT NULL ORDER BY id DESC LIMIT 1`,
    ),
    // Before an external effect acts, this row says it is running: a crash from here on
    // leaves it visible, and the next run counts as a repeat (runs + 1).
    markRunning: text(
      (p) => `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, run_token, started_at, forced_runs)
        VALUES (${p()}, ${p()}, ${p()}, 'running', ${p()}, 1, ${p()}, ${p()}, ${p()})
        ON CONFLICT (effect_key) DO UPDATE SET status = 'running', event_id = excluded.event_id, runs = effects.runs + 1,
          run_token = excluded.run_token, started_at = excluded.started_at, finished_at = NULL,
          forced_runs = effects.forced_runs + excluded.forced_runs`,
    ),
    finishAttempt: text((p) => `UPDATE attempts SET finished_at = ${p()}, outcome = ${p()}, error = ${p()}, output = ${p()} WHERE id = ${p()}`),
    effectVersion: text((p) => `SELECT version FROM effects WHERE effect_key = ${p()}${d.lockRows}`),
    // Only the run that set the token may close it: a late finish after someone else started
    // a new run of the key must not overwrite that run's row.
    effectDone: text(
      (p) => `UPDATE effects SET status = 'done', finished_at = ${p()}, last_error = NULL, version = ${p()}
        WHERE effect_key = ${p()} AND run_token = ${p()} AND status = 'running'`,
    ),
    effectFailed: text(
      (p) => `UPDATE effects SET status = ${p()}, finished_at = ${p()}, last_error = ${p()}
        WHERE effect_key = ${p()} AND run_token = ${p()} AND status = 'running'`,
    ),
    markDoneTx: text(
      (p) => `INSERT INTO effects (effect_key, route, business_key, status, event_id, version, runs, run_token, started_at, finished_at, forced_runs)
        VALUES (${p()}, ${p()}, ${p()}, 'done', ${p()}, ${p()}, 1, ${p()}, ${p()}, ${p()}, ${p()})
        ON CONFLICT (effect_key) DO UPDATE SET status = 'done', event_id = excluded.event_id, version = excluded.version,
          runs = effects.runs + 1, run_token = excluded.run_token, started_at = excluded.started_at,
          finished_at = excluded.finished_at, last_error = NULL, forced_runs = effects.forced_runs + excluded.forced_runs`,
    ),
    // A done key stays done; a running row is another run's (an external effect's), left to it.
    // A failed forced run counts as one, as an external effect's does: the next forced run's
    // number (its run key) must differ from this one's.
    markFailedTx: text(
      (p) => `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at, last_error, forced_runs)
        VALUES (${p()}, ${p()}, ${p()}, 'failed', ${p()}, 0, ${p()}, ${p()}, ${p()}, ${p()})
        ON CONFLICT (effect_key) DO UPDATE SET
          status = CASE WHEN effects.status = 'done' THEN 'done' ELSE 'failed' END,
          finished_at = excluded.finished_at, last_error = excluded.last_error, forced_runs = effects.forced_runs + excluded.forced_runs
        WHERE effects.status <> 'running'`,
    ),
    // Each outcome applies only while the caller still holds the lease: a drain whose claim
    // was taken over (its lease expired, another drain reclaimed) changes nothing. Each
    // also records this attempt's route decisions (kept as they were when none are given).
    complete: text(
      (p) => `UPDATE events SET status = 'done', finished_at = ${p()}, lease_owner = NULL, lease_expires_at = NULL,
        last_error = NULL, force_effects = 0, route_decisions = coalesce(${p()}, route_decisions) WHERE ${held(p)}`,
    ),
    retry: text(
      (p) => `UPDATE events SET status = 'pending', next_attempt_at = ${p()}, last_error = ${p()}, lease_owner = NULL,
        lease_expires_at = NULL, route_decisions = coalesce(${p()}, route_decisions) WHERE ${held(p)}`,
    ),
    bury: text(
      (p) => `UPDATE events SET status = 'dead', finished_at = ${p()}, last_error = ${p()}, lease_owner = NULL,
        lease_expires_at = NULL, route_decisions = coalesce(${p()}, route_decisions) WHERE ${held(p)}`,
    ),
  };
});

export function* nextDueAt(d: Dialect): Steps<number | undefined> {
  return (yield* first<{ t: number | null }>(statements(d).nextDue))?.t ?? undefined;
}

export function* claimOwners(d: Dialect): Steps<string[]> {
  return (yield* rows<{ owner: string }>(statements(d).claimOwners)).map((r) => r.owner);
}

export function* expireClaims(d: Dialect, ownerPrefix: string, now: number): Steps<number> {
  return yield* changes(statements(d).expireClaims, [now, ownerPrefix, ownerPrefix, now]);
}

/** Moves a held lease to `until`; false when the lease is lost. */
export function* renewLease(d: Dialect, lease: Lease, until: number): Steps<boolean> {
  return (yield* changes(statements(d).renew, [until, lease.eventId, lease.owner])) === 1;
}

/** Takes the effect key's lock, where the dialect has one, until the transaction ends. */
export function* lockEffectKey(d: Dialect, start: EffectStart, waitMs: number): Steps<void> {
  if (d.lockEffectKey !== undefined) yield d.lockEffectKey(start.effectKey, waitMs);
}

/** An attempt row to insert: the row without its id, for one event; error, output, forced and run key default to none. */
type NewAttempt = Omit<AttemptRow, 'id' | 'error' | 'output' | 'forced' | 'runKey'> &
  Partial<Pick<AttemptRow, 'error' | 'output' | 'forced' | 'runKey'>> & { eventId: number };

function* insertAttempt(d: Dialect, a: NewAttempt): Steps<number> {
  const params = [
    a.eventId,
    a.attempt,
    a.route,
    a.effectKey,
    a.startedAt,
    a.finishedAt,
    a.outcome,
    a.error ?? null,
    a.output ?? null,
    a.forced === true ? 1 : 0,
    a.runKey ?? null,
  ];
  return (yield* first<{ id: number }>(statements(d).insertAttempt, params))!.id;
}

/** A decision that runs nothing, recorded as a finished attempt. */
type NonRun = Exclude<EffectDecision, { action: 'run' | 'lost' }>;

function* recordNonRun(d: Dialect, lease: Lease, attempt: number, start: EffectStart, row: LedgerRow, decision: NonRun['action'], now: number): Steps<NonRun> {
  const base = { eventId: lease.eventId, attempt, route: start.route, effectKey: start.effectKey, startedAt: now, finishedAt: now };
  if (decision === 'stale') {
    const applied = row.version ?? '';
    const attemptId = yield* insertAttempt(d, {
      ...base,
      outcome: 'stale',
      error: `version ${start.version ?? ''} is older than the applied version ${applied}`,
    });
    return { action: 'stale', attemptId, appliedVersion: applied };
  }
  if (decision === 'busy') {
    const heldBy = row.eventId ?? 0;
    const attemptId = yield* insertAttempt(d, { ...base, outcome: 'busy', error: `effect ${start.effectKey} is running for event ${heldBy}` });
    return { action: 'busy', attemptId, heldByEventId: heldBy };
  }
  const attemptId = yield* insertAttempt(d, { ...base, outcome: 'skipped', error: row.eventId === null ? null : `already done by event ${row.eventId}` });
  return { action: 'skipped', attemptId };
}

/** How a run that was decided is made. */
export interface RunPlan extends EffectRun {
  /** A forced run (a done key run again by `replay --force`), or a repeat of one that did not end ok. */
  forced: boolean;
  /** The key was done before this run: a failure of the run leaves it done (it did happen once). */
  wasDone: boolean;
}

/** The key's ledger row and the rule's decision; a decision that runs nothing is recorded here. */
export interface Decided {
  row: LedgerRow | undefined;
  /** Set when the effect does not run (skipped, stale, busy). */
  nonRun?: NonRun;
  /** Set when it runs. */
  run?: RunPlan;
}

/** Reads the key's ledger row and applies the rule, inside the transaction that records the decision. */
export function* decide(d: Dialect, lease: Lease, attempt: number, start: EffectStart, now: number): Steps<Decided> {
  const found = yield* first<LedgerDbRow>(statements(d).ledger, [lease.eventId, now, start.effectKey]);
  const row = found === undefined ? undefined : toLedger(found);
  // Forced, but this replay already ran it (and is retried for another route's failure): as done.
  const forcedAlready = start.force && (yield* first<{ done: number }>(statements(d).forcedInThisReplay, [lease.eventId, start.effectKey])) !== undefined;
  const s = forcedAlready ? { ...start, force: false } : start;
  const decision = decideEffect(row, s);
  if (decision === 'run') return { row, run: yield* planRun(d, lease, s, row) };
  return { row, nonRun: yield* recordNonRun(d, lease, attempt, s, row!, decision, now) };
}

/** The run key of an effect key's n-th forced run. */
export const forcedRunKey = (effectKey: string, n: number) => `${effectKey}#forced-${n}`;

/**
 * The run key: what the app is told identifies this run (Idempotency-Key and webhook-id
 * are its hash, exec sees RECEIVER_RUN_KEY, a module ctx.runKey), so it drops a repeat of
 * a run it already did and still does a run it was deliberately asked to do again.
 * - An ordinary run: the effect key itself, on every retry and after a crash (what
 *   Idempotency-Key has always been; deployed apps depend on it).
 * - A forced run (the key is done, the event was replayed with --force):
 *   `<effect key>#forced-<n>`, n one more than the key's forced runs so far, so it differs
 *   from the first run's key and from every other forced run's.
 * - A forced event repeating its own forced run that did not end ok (it failed and is
 *   retried, or the receiver crashed in it): that run's key again, so the app drops the
 *   repeat if the first try did reach it.
 */
function* planRun(d: Dialect, lease: Lease, start: EffectStart, row: LedgerRow | undefined): Steps<RunPlan> {
  if (start.force) {
    const last = yield* first<{ run_key: string; outcome: string }>(statements(d).lastRun, [lease.eventId, start.effectKey]);
    if (last !== undefined && last.outcome !== 'ok' && last.run_key !== start.effectKey) return { runKey: last.run_key, forced: true, wasDone: true };
    if (row?.status === 'done') return { runKey: forcedRunKey(start.effectKey, row.forcedRuns + 1), forced: true, wasDone: true };
  }
  return { runKey: start.effectKey, forced: false, wasDone: row?.status === 'done' };
}

/** beginEffect (see drain-types.ts): renew, lock the key, decide, and mark running or record the non-run. */
export function* beginEffect(d: Dialect, lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number): Steps<EffectDecision> {
  if (!(yield* renewLease(d, lease, now + leaseMs))) return { action: 'lost' };
  yield* lockEffectKey(d, start, leaseMs);
  const { row, nonRun, run } = yield* decide(d, lease, attempt, start, now);
  if (nonRun !== undefined) return nonRun;
  const { runKey, forced, wasDone } = run!;
  yield* changes(statements(d).markRunning, [start.effectKey, start.route, start.businessKey, lease.eventId, start.runToken, now, forced ? 1 : 0]);
  const attemptId = yield* insertAttempt(d, {
    eventId: lease.eventId,
    attempt,
    route: start.route,
    effectKey: start.effectKey,
    startedAt: now,
    finishedAt: null,
    outcome: 'running',
    forced,
    runKey,
  });
  return { action: 'run', attemptId, runs: (row?.runs ?? 0) + 1, wasDone, runKey };
}

/** finishEffect (see drain-types.ts): the attempt always; the ledger row only while it carries the run's token. */
export function* finishEffect(d: Dialect, f: EffectFinish, now: number): Steps<void> {
  const s = statements(d);
  yield* changes(s.finishAttempt, [now, f.outcome, f.error ?? null, f.output ?? null, f.attemptId]);
  if (f.outcome === 'ok') {
    const current = yield* first<{ version: string | null }>(s.effectVersion, [f.effectKey]);
    yield* changes(s.effectDone, [now, newerVersion(current?.version ?? null, f.version), f.effectKey, f.runToken]);
  } else {
    // A forced re-run of a done key that fails leaves it done: it did happen once.
    yield* changes(s.effectFailed, [f.wasDone ? 'done' : 'failed', now, f.error ?? null, f.effectKey, f.runToken]);
  }
}

/** A module effect to run: what runTransactionalEffect is given (see drain-types.ts). */
export interface ModuleEffect {
  lease: Lease;
  attempt: number;
  start: EffectStart;
  handler: (db: EffectDb, run: EffectRun) => Promise<void>;
  /** Read when the transaction starts and again when it ends. */
  now: () => number;
  leaseMs: number;
  /** Mark the event done in the same commit when the handler resolves. */
  completeOnOk: boolean;
  /** Recorded with the event when it is marked done here (see completeEvent). */
  routeDecisions?: string | undefined;
}

/**
 * Awaits the handler with the transaction's db and the run's key, and closes the db after
 * it, told whether the handler threw (gave up); returns what it threw, if it threw.
 */
export async function callHandler(
  m: ModuleEffect,
  db: EffectDb,
  run: EffectRun,
  close: (threw: boolean) => void | Promise<void>,
): Promise<{ error: unknown } | undefined> {
  let failure: { error: unknown } | undefined;
  try {
    await m.handler(db, { runKey: run.runKey });
  } catch (e) {
    failure = { error: e };
  } finally {
    await close(failure !== undefined);
  }
  return failure;
}

/** A module effect's run, between the decision and its end. */
export interface ModuleRun {
  lease: Lease;
  attempt: number;
  start: EffectStart;
  row: LedgerRow | undefined;
  run: RunPlan;
  startedAt: number;
  finishedAt: number;
}

/** The attempt row of a module run that ended: ok, or failed with its error. */
function moduleAttempt(m: ModuleRun, outcome: 'ok' | 'failed', error?: string): NewAttempt {
  return {
    eventId: m.lease.eventId,
    attempt: m.attempt,
    route: m.start.route,
    effectKey: m.start.effectKey,
    startedAt: m.startedAt,
    finishedAt: m.finishedAt,
    outcome,
    forced: m.run.forced,
    runKey: m.run.runKey,
    ...(error === undefined ? {} : { error }),
  };
}

/**
 * A module effect's handler resolved: in its transaction, the ledger row (done) and the
 * attempt (ok), and, when it was the event's last effect and nothing failed, the event
 * done too (one transaction, not two).
 */
export function* moduleDone(d: Dialect, m: ModuleRun, completeOnOk: boolean, routeDecisions?: string): Steps<Extract<TransactionalOutcome, { action: 'ok' }>> {
  const { lease, start, row } = m;
  yield* changes(statements(d).markDoneTx, [
    start.effectKey,
    start.route,
    start.businessKey,
    lease.eventId,
    newerVersion(row?.version ?? null, start.version),
    start.runToken,
    m.startedAt,
    m.finishedAt,
    m.run.forced ? 1 : 0,
  ]);
  const attemptId = yield* insertAttempt(d, moduleAttempt(m, 'ok'));
  const completed = completeOnOk && (yield* completeEvent(d, lease, m.finishedAt, routeDecisions));
  return { action: 'ok', attemptId, runs: (row?.runs ?? 0) + 1, completed };
}

/** A module effect's handler threw: recorded in a transaction of its own, after its writes rolled back. */
export function* moduleFailed(d: Dialect, m: ModuleRun, error: string): Steps<Extract<TransactionalOutcome, { action: 'failed' }>> {
  const { lease, start, row } = m;
  yield* changes(statements(d).markFailedTx, [
    start.effectKey,
    start.route,
    start.businessKey,
    lease.eventId,
    m.startedAt,
    m.finishedAt,
    error,
    m.run.forced ? 1 : 0,
  ]);
  const attemptId = yield* insertAttempt(d, moduleAttempt(m, 'failed', error));
  return { action: 'failed', attemptId, runs: row?.runs ?? 0, error };
}

export function* recordAttempt(d: Dialect, r: AttemptRecord): Steps<void> {
  yield* insertAttempt(d, {
    eventId: r.eventId,
    attempt: r.attempt,
    route: r.route,
    effectKey: r.effectKey ?? null,
    startedAt: r.startedAt,
    finishedAt: r.finishedAt,
    outcome: r.outcome,
    error: r.error,
  });
}

export function* completeEvent(d: Dialect, lease: Lease, now: number, routeDecisions?: string): Steps<boolean> {
  return (yield* changes(statements(d).complete, [now, routeDecisions ?? null, lease.eventId, lease.owner])) === 1;
}

export function* retryEvent(d: Dialect, lease: Lease, error: string, nextAttemptAt: number, routeDecisions?: string): Steps<boolean> {
  return (yield* changes(statements(d).retry, [nextAttemptAt, error, routeDecisions ?? null, lease.eventId, lease.owner])) === 1;
}

export function* buryEvent(d: Dialect, lease: Lease, error: string, now: number, routeDecisions?: string): Steps<boolean> {
  return (yield* changes(statements(d).bury, [now, error, routeDecisions ?? null, lease.eventId, lease.owner])) === 1;
}
