import type { AttemptRecord, EffectDecision, EffectFinish, EffectRun, EffectStart, Lease, LedgerRow } from '../drain-types.js';
import type { AttemptRow } from '../ops-types.js';
import { toLedger, type LedgerDbRow } from '../rows.js';
import { changes, first, memo, sqlText, type Dialect, type Steps } from '../sql.js';
import type { DrainBackend } from './backend.js';
import { renewLease } from './lease.js';

/**
 * The effect ledger: one row per effect key in `effects`, and the attempts it records.
 * Whether an effect runs is decided by `decideEffect` inside the transaction that records
 * the decision (an external effect's running mark, a module effect's run), with the key
 * locked where writers run concurrently, so two processes cannot both decide to run one
 * key. An external effect's running mark is committed and on disk before the effect acts:
 * a crash from then on leaves it visible, and the next run counts as a repeat (`runs`).
 */

/**
 * The rule.
 * - no row, or a `failed` row: run.
 * - `running` for another event whose claim still holds a live lease: busy (retry later);
 *   running it here too would run it twice at once.
 * - `running` otherwise: a run that crashed or whose lease expired. Run again; `runs`
 *   shows the repeat.
 * - `done`: skipped, unless the event's version is newer than the applied one (run) or
 *   older (stale). A forced replay re-runs a done key but never applies an older version.
 */
export type Decision = 'run' | 'skipped' | 'stale' | 'busy';

export function decideEffect(row: LedgerRow | undefined, start: EffectStart): Decision {
  if (row === undefined) return 'run';
  if (isStale(row.version, start.version)) return 'stale';
  if (row.status === 'running' && row.heldElsewhere) return 'busy';
  if (row.status !== 'done') return 'run';
  if (start.force) return 'run';
  if (start.version !== undefined && row.version !== null && compareVersions(start.version, row.version) > 0) return 'run';
  return 'skipped';
}

/** Is `incoming` older than the newest version applied for the key? */
export function isStale(applied: string | null, incoming: string | undefined): boolean {
  return applied !== null && incoming !== undefined && compareVersions(incoming, applied) < 0;
}

const INTEGER = /^-?\d+$/;
const NUMERIC = /^-?\d+(\.\d+)?$/;

/** Numerically when both are numbers (`"9" < "10"`), else as strings (ISO timestamps sort as strings). */
export function compareVersions(a: string, b: string): number {
  if (INTEGER.test(a) && INTEGER.test(b)) {
    // BigInt: nanosecond timestamps and sequence numbers exceed 2^53.
    const d = BigInt(a) - BigInt(b);
    return d < 0n ? -1 : d > 0n ? 1 : 0;
  }
  if (NUMERIC.test(a) && NUMERIC.test(b)) {
    const d = Number(a) - Number(b);
    return d < 0 ? -1 : d > 0 ? 1 : 0;
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The newer of two versions, for the ledger's `version` column after a successful run. */
export function newerVersion(applied: string | null, incoming: string | undefined): string | null {
  if (incoming === undefined) return applied;
  if (applied === null) return incoming;
  return compareVersions(incoming, applied) >= 0 ? incoming : applied;
}

const statements = memo((d: Dialect) => {
  const text = (build: (p: () => string) => string) => sqlText(d, build);
  return {
    // A running row belongs to someone else only while another event has a unit claimed under a live lease;
    // otherwise it is a run that crashed or outlived its lease, and may be repeated.
    ledger: text(
      (p) => `SELECT f.status, f.event_id, f.version, f.runs, f.forced_runs,
        CASE WHEN f.status = 'running' AND f.event_id IS NOT NULL AND f.event_id <> ${p()} AND EXISTS (
          SELECT 1 FROM units v WHERE v.event_id = f.event_id AND v.status = 'processing' AND v.lease_expires_at > ${p()})
        THEN 1 ELSE 0 END AS held_elsewhere
        FROM effects f WHERE f.effect_key = ${p()}`,
    ),
    insertAttempt: text(
      (p) => `INSERT INTO attempts (event_id, attempt, route, effect_key, started_at, finished_at, outcome, error, output, forced, run_key)
        VALUES (${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}, ${p()}) RETURNING id`,
    ),
    // A forced replay's own ok run of this key: the unit's force_effects holds the id of the
    // replay's first attempt row (see the replay in ops-steps.ts), so a claim of the unit
    // again after that run (its settle was lost to a crash) does not run it again, under
    // yet another forced key the app would not drop.
    forcedInThisReplay: text(
      (p) => `SELECT 1 AS done FROM attempts a JOIN units u ON u.event_id = a.event_id
        WHERE u.id = ${p()} AND a.effect_key = ${p()} AND a.forced = 1 AND a.outcome = 'ok' AND u.force_effects > 0 AND a.id >= u.force_effects LIMIT 1`,
    ),
    // This event's latest run of the key (attempts that ran nothing have no run key).
    lastRun: text(
      (p) => `SELECT run_key, outcome FROM attempts WHERE event_id = ${p()} AND effect_key = ${p()} AND run_key IS NOT NULL ORDER BY id DESC LIMIT 1`,
    ),
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
    moduleDone: text(
      (p) => `INSERT INTO effects (effect_key, route, business_key, status, event_id, version, runs, run_token, started_at, finished_at, forced_runs)
        VALUES (${p()}, ${p()}, ${p()}, 'done', ${p()}, ${p()}, 1, ${p()}, ${p()}, ${p()}, ${p()})
        ON CONFLICT (effect_key) DO UPDATE SET status = 'done', event_id = excluded.event_id, version = excluded.version,
          runs = effects.runs + 1, run_token = excluded.run_token, started_at = excluded.started_at,
          finished_at = excluded.finished_at, last_error = NULL, forced_runs = effects.forced_runs + excluded.forced_runs`,
    ),
    // A done key stays done; a running row is another run's (an external effect's), left to it.
    // A failed forced run counts as one, as an external effect's does: the next forced run's
    // number (its run key) must differ from this one's.
    moduleFailed: text(
      (p) => `INSERT INTO effects (effect_key, route, business_key, status, event_id, runs, started_at, finished_at, last_error, forced_runs)
        VALUES (${p()}, ${p()}, ${p()}, 'failed', ${p()}, 0, ${p()}, ${p()}, ${p()}, ${p()})
        ON CONFLICT (effect_key) DO UPDATE SET
          status = CASE WHEN effects.status = 'done' THEN 'done' ELSE 'failed' END,
          finished_at = excluded.finished_at, last_error = excluded.last_error, forced_runs = effects.forced_runs + excluded.forced_runs
        WHERE effects.status <> 'running'`,
    ),
  };
});

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

/** Records an attempt that ran no effect (a key template that resolved to nothing, a module that would not load). */
export async function recordAttempt(b: DrainBackend, r: AttemptRecord): Promise<void> {
  const { eventId, attempt, route, startedAt, finishedAt, outcome, error } = r;
  const a = { eventId, attempt, route, effectKey: r.effectKey ?? null, startedAt, finishedAt, outcome, error };
  await b.write('record attempt', () => insertAttempt(b.dialect, a), { oneStatement: true });
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

/** Takes the effect key's lock, where the dialect has one, until the transaction ends. */
export function* lockEffectKey(d: Dialect, start: EffectStart, waitMs: number): Steps<void> {
  if (d.lockEffectKey !== undefined) yield d.lockEffectKey(start.effectKey, waitMs);
}

/** Reads the key's ledger row and applies the rule, inside the transaction that records the decision. */
export function* decide(d: Dialect, lease: Lease, attempt: number, start: EffectStart, now: number): Steps<Decided> {
  const found = yield* first<LedgerDbRow>(statements(d).ledger, [lease.eventId, now, start.effectKey]);
  const row = found === undefined ? undefined : toLedger(found);
  // Forced, but this replay already ran it (and is retried for another route's failure): as done.
  const forcedAlready = start.force && (yield* first<{ done: number }>(statements(d).forcedInThisReplay, [lease.unitId, start.effectKey])) !== undefined;
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
 * - An ordinary run: the effect key itself, on every retry and after a crash (deployed
 *   apps depend on Idempotency-Key being the effect key).
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

/** Renew the lease, lock the key, decide, and mark running or record the non-run. */
function* begin(d: Dialect, lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number): Steps<EffectDecision> {
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

/**
 * Before an external effect (exec, http) acts: decides and records the start in one
 * committed transaction (see DrainStore.beginEffect).
 */
export async function beginEffect(b: DrainBackend, lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number): Promise<EffectDecision> {
  const decision = await b.write('begin effect', () => begin(b.dialect, lease, attempt, start, now, leaseMs), { commitNow: true });
  // The running mark is on disk before the effect acts: after a power cut too, a repeat is counted.
  if (decision.action === 'run') await b.sync('begin effect');
  return decision;
}

/**
 * How an external effect's run ended: the attempt always (the run did happen); the ledger
 * row only while it carries the run's token. Committed at once, never left in a group
 * that could still roll back: a lost result would run the effect again.
 */
export async function finishEffect(b: DrainBackend, f: EffectFinish, now: number): Promise<void> {
  const s = statements(b.dialect);
  await b.write(
    'finish effect',
    function* () {
      yield* changes(s.finishAttempt, [now, f.outcome, f.error ?? null, f.output ?? null, f.attemptId]);
      if (f.outcome === 'ok') {
        const current = yield* first<{ version: string | null }>(s.effectVersion, [f.effectKey]);
        yield* changes(s.effectDone, [now, newerVersion(current?.version ?? null, f.version), f.effectKey, f.runToken]);
      } else {
        // A forced re-run of a done key that fails leaves it done: it did happen once.
        yield* changes(s.effectFailed, [f.wasDone ? 'done' : 'failed', now, f.error ?? null, f.effectKey, f.runToken]);
      }
    },
    { commitNow: true },
  );
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

/** A module run that ended ok, in its transaction: the key done at the newer version, and the attempt ok. */
export function* moduleDone(d: Dialect, m: ModuleRun): Steps<number> {
  const { lease, start, row } = m;
  const version = newerVersion(row?.version ?? null, start.version);
  const forced = m.run.forced ? 1 : 0;
  yield* changes(statements(d).moduleDone, [
    start.effectKey,
    start.route,
    start.businessKey,
    lease.eventId,
    version,
    start.runToken,
    m.startedAt,
    m.finishedAt,
    forced,
  ]);
  return yield* insertAttempt(d, moduleAttempt(m, 'ok'));
}

/** A module run that failed, after its writes rolled back: the key failed (a done key stays done), and the attempt failed. */
export function* moduleFailed(d: Dialect, m: ModuleRun, error: string): Steps<number> {
  const { lease, start } = m;
  const forced = m.run.forced ? 1 : 0;
  yield* changes(statements(d).moduleFailed, [start.effectKey, start.route, start.businessKey, lease.eventId, m.startedAt, m.finishedAt, error, forced]);
  return yield* insertAttempt(d, moduleAttempt(m, 'failed', error));
}
