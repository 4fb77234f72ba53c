import { randomUUID } from 'node:crypto';
import type { Config } from '../config/load.js';
import type { RouteConfig } from '../config/schema.js';
import { minimalEnvironment, runExec } from '../effects/exec.js';
import { runHttp } from '../effects/http.js';
import { modulePath, ModuleTimedOut, type ModuleEvent } from '../effects/module.js';
import { ModulePool } from '../effects/module-pool.js';
import type { ModuleRunner } from '../effects/module-runner.js';
import { planRoutes, templateContext, type PlannedEffect } from '../effects/routes.js';
import type { EffectResult } from '../effects/types.js';
import type { Logger } from '../log.js';
import type { ClaimedUnit, DrainStore, EffectStart } from '../store/drain-types.js';
import { nextAttemptAt } from './backoff.js';
import type { AttemptOutcomeName, SettleStatus } from '../vocabulary.js';

/** One attempt of one route for one event, as logs and metrics see it. */
export interface AttemptOutcome {
  eventId: number;
  source: string;
  deliveryId: string;
  eventType: string;
  attempt: number;
  route: string;
  lane: string;
  effectKey?: string | undefined;
  /** See ATTEMPT_OUTCOMES; `failed` whether retryable or not; `timeout` (the attempts table says `failed`). */
  outcome: AttemptOutcomeName;
  forced: boolean;
  durationMs: number;
  error?: string | undefined;
}

/** What became of one unit (one route of one event) after this claim. `lost`: the lease was taken over; nothing was changed. */
export interface EventOutcome {
  eventId: number;
  route: string;
  lane: string;
  attempt: number;
  status: SettleStatus;
  nextAttemptAt?: number | undefined;
  error?: string | undefined;
}

export interface ProcessContext {
  config: Config;
  store: DrainStore;
  logger: Logger;
  /**
   * For the per-attempt and per-event lines only: their fields are ids, keys, outcomes and
   * errors listed one by one (see report and settle), so they need no redaction, which
   * cost about a fifth of the drain's CPU per event. Default: `logger`.
   */
  lineLogger?: Logger | undefined;
  now: () => number;
  random: () => number;
  leaseMs: number;
  /** What exec effects may draw on (effectEnvironment); each gets the minimal variables and its route's `effect.env`. */
  execEnv: NodeJS.ProcessEnv;
  /** Where module effects run (host processes of their own); default: one host per process, on execEnv's minimal variables. */
  modules?: ModulePool | undefined;
  onAttempt?: ((a: AttemptOutcome) => void) | undefined;
  onEvent?: ((e: EventOutcome) => void) | undefined;
}

interface Failure {
  route: string;
  error: string;
  retryable: boolean;
  retryAfterMs?: number | undefined;
  /** Another event holds the effect key: nothing failed, this event just has to wait. */
  busy?: true;
}

/** `completed`: the unit was marked done together with its effect (see runTransactionalEffect). */
type RouteResult = { lost: true } | { lost: false; failure?: Failure; completed?: boolean };

/** The receiver is stopping past its grace while a bookkeeping write still fails: the unit is left to its lease. */
export class Interrupted extends Error {
  constructor(what: string, cause: unknown) {
    super(`${what}: stopped while the database was failing (${cause instanceof Error ? cause.message : String(cause)})`);
  }
}

/** Backoff between tries of one bookkeeping write: 50 ms doubling to at most 2 s. */
const PERSIST_FIRST_MS = 50;
const PERSIST_MAX_MS = 2000;

/**
 * Runs one store step of a claimed event until it lands. A write that fails for a moment
 * (database busy past its timeout, a dropped connection, a full disk) is tried again with
 * backoff while the drain keeps the claim (the loop's heartbeat renews it), so an effect
 * that already ran is never claimed and run again because its result could not be written
 * at once. Gives up only when the receiver stops past its grace (`signal`): the event is
 * then left to its lease, as after a crash.
 */
export async function persist<T>(ctx: Pick<ProcessContext, 'logger'>, what: string, eventId: number, signal: AbortSignal, step: () => Promise<T>): Promise<T> {
  let waitMs = PERSIST_FIRST_MS;
  for (let tries = 1; ; tries++) {
    try {
      return await step();
    } catch (e) {
      if (signal.aborted) throw new Interrupted(what, e);
      // One line per try, no stack: the cause is the database's, named in the message.
      ctx.logger.warn(
        { eventId, step: what, tries, retryInMs: waitMs, err: e instanceof Error ? e.message : String(e) },
        'drain bookkeeping write failed; keeping the claim and trying again',
      );
      await pause(waitMs, signal);
      waitMs = Math.min(PERSIST_MAX_MS, waitMs * 2);
    }
  }
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Runs one claimed unit: its route's effect for its event, then settles the unit: done, a
 * retry after backoff, or dead. A route no longer configured, or that no longer applies to
 * the event (its filter changed since the event was planned), has nothing to run: done.
 */
export async function processUnit(ctx: ProcessContext, unit: ClaimedUnit, signal: AbortSignal): Promise<EventOutcome> {
  const outcome = (status: SettleStatus, more: Partial<EventOutcome> = {}): EventOutcome => ({
    eventId: unit.id,
    route: unit.route,
    lane: unit.lane,
    attempt: unit.attempt,
    status,
    ...more,
  });
  const route = ctx.config.routes.find((r) => r.name === unit.route);
  const tctx = templateContext(unit);
  const plan = route === undefined ? undefined : planRoutes([route], unit, tctx).plans[0];
  try {
    if (plan === undefined) {
      ctx.logger.warn({ eventId: unit.id, route: unit.route }, 'drain: the route is no longer configured or no longer applies to the event; nothing to run');
      const held = await persist(ctx, 'complete unit', unit.id, signal, () => ctx.store.completeUnit(unit.lease, ctx.now()));
      return settle(ctx, unit, outcome(held ? 'done' : 'lost'));
    }
    if (plan.kind === 'failure') {
      const at = ctx.now();
      const record = {
        eventId: unit.id,
        attempt: unit.attempt,
        route: unit.route,
        outcome: 'failed' as const,
        error: plan.error,
        startedAt: at,
        finishedAt: at,
      };
      await persist(ctx, 'record attempt', unit.id, signal, () => ctx.store.recordAttempt(record));
      report(ctx, unit, unit.route, undefined, 'failed', false, 0, plan.error);
      return await settleUnit(ctx, unit, { route: unit.route, error: plan.error, retryable: true }, signal, outcome);
    }
    let r: RouteResult;
    try {
      r = await runRoute(ctx, unit, plan, tctx.body, signal);
    } catch (e) {
      if (!(e instanceof Interrupted)) throw e;
      r = { lost: false };
    }
    // Past the shutdown grace: whatever ran is left to its lease (the ledger shows it running).
    if (signal.aborted) return settle(ctx, unit, outcome('interrupted'));
    if (r.lost) return settle(ctx, unit, outcome('lost'));
    if (r.completed === true) return settle(ctx, unit, outcome('done'));
    return await settleUnit(ctx, unit, r.failure, signal, outcome);
  } catch (e) {
    if (!(e instanceof Interrupted)) throw e;
    return settle(ctx, unit, outcome('interrupted'));
  }
}

async function settleUnit(
  ctx: ProcessContext,
  unit: ClaimedUnit,
  failure: Failure | undefined,
  signal: AbortSignal,
  outcome: (status: SettleStatus, more?: Partial<EventOutcome>) => EventOutcome,
): Promise<EventOutcome> {
  const now = ctx.now();
  if (failure === undefined) {
    const held = await persist(ctx, 'complete unit', unit.id, signal, () => ctx.store.completeUnit(unit.lease, now));
    return settle(ctx, unit, outcome(held ? 'done' : 'lost'));
  }
  const error = failure.error;
  // Waiting for another event's run of the same key is not a failure: it never makes a
  // unit dead, whatever its attempt count (after a crash that wait lasts a whole lease).
  if (!failure.retryable || (unit.attempt >= ctx.config.retry.maxAttempts && failure.busy !== true)) {
    const why = !failure.retryable ? error : `${error} (gave up after ${unit.attempt} attempts)`;
    const held = await persist(ctx, 'bury unit', unit.id, signal, () => ctx.store.buryUnit(unit.lease, why, now));
    return settle(ctx, unit, outcome(held ? 'dead' : 'lost', { error: why }));
  }
  const retryAfterMs = failure.retryAfterMs ?? 0;
  const at = nextAttemptAt(now, unit.attempt, ctx.config.retry, ctx.random, retryAfterMs > 0 ? retryAfterMs : undefined);
  const held = await persist(ctx, 'retry unit', unit.id, signal, () => ctx.store.retryUnit(unit.lease, error, at));
  return settle(ctx, unit, outcome(held ? 'retry' : 'lost', { nextAttemptAt: at, error }));
}

async function runRoute(ctx: ProcessContext, event: ClaimedUnit, plan: PlannedEffect, json: unknown, signal: AbortSignal): Promise<RouteResult> {
  const route = plan.route;
  const start: EffectStart = {
    route: route.name,
    businessKey: plan.businessKey,
    effectKey: plan.effectKey,
    version: plan.version,
    runToken: randomUUID(),
    force: event.forceEffects,
  };
  const t0 = performance.now();
  const elapsed = () => performance.now() - t0;
  const timeoutMs = route.effect.timeoutSeconds * 1000;

  if (route.effect.module !== undefined) {
    const pool = (ctx.modules ??= sharedPool(ctx.execEnv));
    const path = modulePath(route.effect.module, ctx.config.file);
    // A host of its own (see ModulePool); waiting for one, a unit holds no transaction. A
    // shutdown meanwhile leaves it to its lease.
    return pool
      .exclusive(signal, path, (modules) => runModule(ctx, event, plan, start, json, signal, { modules, path }, elapsed))
      .catch((e: unknown) => {
        if (signal.aborted && !(e instanceof Interrupted)) throw new Interrupted('module effect', e);
        throw e;
      });
  }

  // External effects: the ledger says "running" (committed) before anything acts.
  const d = await persist(ctx, 'begin effect', event.id, signal, () => ctx.store.beginEffect(event.lease, event.attempt, start, ctx.now(), ctx.leaseMs));
  if (d.action === 'lost') return { lost: true };
  if (d.action !== 'run') {
    report(ctx, event, route.name, plan.effectKey, d.action, false, elapsed(), errorOf(d));
    return d.action === 'busy' ? { lost: false, failure: busyFailure(route, d.heldByEventId, plan.effectKey) } : { lost: false };
  }
  // Whatever goes wrong in starting or running the effect is this attempt's failure, recorded
  // below like any other: an exception must never leave the ledger row and attempt running.
  const result = await runExternal(ctx, event, plan, d.runKey, timeoutMs, signal).catch((e: unknown): EffectResult => ({
    ok: false,
    retryable: true,
    error: `effect failed: ${e instanceof Error ? e.message : String(e)}`,
  }));
  if (signal.aborted) return { lost: false };
  const finishedAt = ctx.now();
  await persist(ctx, 'finish effect', event.id, signal, () =>
    ctx.store.finishEffect(
      {
        attemptId: d.attemptId,
        effectKey: plan.effectKey,
        runToken: start.runToken,
        outcome: result.ok ? 'ok' : 'failed',
        error: result.ok ? undefined : result.error,
        output: result.output,
        version: plan.version,
        wasDone: d.wasDone,
      },
      finishedAt,
    ),
  );
  const forced = d.wasDone && start.force;
  if (result.ok) {
    report(ctx, event, route.name, plan.effectKey, 'ok', forced, elapsed());
    return { lost: false };
  }
  report(ctx, event, route.name, plan.effectKey, result.timedOut === true ? 'timeout' : 'failed', forced, elapsed(), result.error);
  return { lost: false, failure: { route: route.name, error: result.error, retryable: result.retryable, retryAfterMs: result.retryAfterMs } };
}

/** A module effect: its module loaded in the host, then its transaction (see runTransactionalEffect). */
async function runModule(
  ctx: ProcessContext,
  event: ClaimedUnit,
  plan: PlannedEffect,
  start: EffectStart,
  json: unknown,
  signal: AbortSignal,
  { modules, path }: { modules: ModuleRunner; path: string },
  elapsed: () => number,
): Promise<RouteResult> {
  const route = plan.route;
  const timeoutMs = route.effect.timeoutSeconds * 1000;
  // Starting a host and importing the module take a while: the claims commit first, so the
  // drain holds no write lock meanwhile (SQLite's group, see DrainStore.inGroup).
  if (!modules.ready(path)) await persist(ctx, 'commit claims', event.id, signal, () => ctx.store.commitGroup());
  try {
    await modules.load(path, timeoutMs, signal);
  } catch (e) {
    const error = `cannot load module ${route.effect.module ?? path}: ${(e as Error).message}`;
    const at = ctx.now();
    const record = {
      eventId: event.id,
      attempt: event.attempt,
      route: route.name,
      effectKey: plan.effectKey,
      outcome: 'failed' as const,
      error,
      startedAt: at,
      finishedAt: at,
    };
    await persist(ctx, 'record attempt', event.id, signal, () => ctx.store.recordAttempt(record));
    report(ctx, event, route.name, plan.effectKey, 'failed', false, elapsed(), error);
    return { lost: false, failure: { route: route.name, error, retryable: true } };
  }
  const moduleEvent: ModuleEvent = { ...eventView(event), json };
  // The store records a failed run as `failed` with its error; the report says `timeout` when that was why.
  let timedOut = false;
  // Nothing of a module effect commits unless its transaction does. A step that fails
  // before the handler runs is tried again (nothing ran); once the handler has run, the run
  // ends: a commit that fails is a failed attempt, retried later like any other.
  const ran = await persist(ctx, 'module effect', event.id, signal, () =>
    ctx.store.runTransactionalEffect(
      event.lease,
      event.attempt,
      start,
      (db, run) =>
        modules
          .call(
            path,
            moduleEvent,
            { route: route.name, key: plan.businessKey, effectKey: plan.effectKey, runKey: run.runKey, attempt: event.attempt },
            db,
            timeoutMs,
            signal,
          )
          .catch((e: unknown) => {
            timedOut = e instanceof ModuleTimedOut;
            throw e;
          }),
      ctx.now,
      ctx.leaseMs,
      { completeOnOk: true },
    ),
  );
  // The run's failure could not be written (the database is down): only that write is tried again.
  const r = ran.action === 'unrecorded' ? await persist(ctx, 'record module failure', event.id, signal, () => ran.record()) : ran;
  if (r.action === 'lost') return { lost: true };
  if (r.action === 'failed') {
    report(ctx, event, route.name, plan.effectKey, timedOut ? 'timeout' : 'failed', start.force, elapsed(), r.error);
    return { lost: false, failure: { route: route.name, error: r.error, retryable: true } };
  }
  report(ctx, event, route.name, plan.effectKey, r.action, start.force && r.action === 'ok', elapsed(), errorOf(r));
  if (r.action === 'busy') return { lost: false, failure: busyFailure(route, r.heldByEventId, plan.effectKey) };
  return { lost: false, completed: r.action === 'ok' && r.completed };
}

async function runExternal(
  ctx: ProcessContext,
  event: ClaimedUnit,
  plan: PlannedEffect,
  runKey: string,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<EffectResult> {
  const effect = plan.route.effect;
  if (effect.exec !== undefined) {
    return runExec({
      argv: effect.exec,
      event: eventView(event),
      businessKey: plan.businessKey,
      effectKey: plan.effectKey,
      runKey,
      attempt: event.attempt,
      baseEnv: ctx.execEnv,
      passEnv: effect.env,
      timeoutMs,
      signal,
    });
  }
  if (effect.http !== undefined) {
    const secrets = ctx.config.httpSecrets.get(plan.route.name);
    // Resolved at load; a configuration loaded without secrets (operator commands) runs no effects.
    if (secrets === undefined) return { ok: false, retryable: true, error: `the http effect's secrets were not loaded` };
    return runHttp({
      url: effect.http.url,
      headers: Object.fromEntries(Object.entries(secrets.headers).map(([name, value]) => [name, value.reveal()])),
      signWith: secrets.sign,
      event: eventView(event),
      effectKey: plan.effectKey,
      runKey,
      attempt: event.attempt,
      timeoutMs,
      maxResponseBytes: effect.http.maxResponseBytes,
      now: ctx.now(),
      signal,
    });
  }
  return { ok: false, retryable: false, error: 'route has no effect' };
}

let shared: ModulePool | undefined;

/** The module hosts of a ProcessContext that brings none (tests that call processEvent): one at a time. */
function sharedPool(env: NodeJS.ProcessEnv): ModulePool {
  return (shared ??= new ModulePool(minimalEnvironment(env), 1));
}

function eventView(e: ClaimedUnit) {
  return { id: e.id, source: e.source, deliveryId: e.deliveryId, eventType: e.eventType, headers: e.headers, body: e.body, receivedAt: e.receivedAt };
}

function busyFailure(route: RouteConfig, heldBy: number, effectKey: string): Failure {
  return { route: route.name, error: `effect ${effectKey} is running for event ${heldBy}; will look again`, retryable: true, busy: true };
}

function errorOf(d: { action: string; appliedVersion?: string; heldByEventId?: number }): string | undefined {
  if (d.action === 'stale') return `older than the applied version ${d.appliedVersion ?? ''}`;
  if (d.action === 'busy') return `running for event ${d.heldByEventId ?? ''}`;
  return undefined;
}

function report(
  ctx: ProcessContext,
  e: ClaimedUnit,
  route: string,
  effectKey: string | undefined,
  outcome: AttemptOutcome['outcome'],
  forced: boolean,
  durationMs: number,
  error?: string,
): void {
  const a: AttemptOutcome = {
    eventId: e.id,
    source: e.source,
    deliveryId: e.deliveryId,
    eventType: e.eventType,
    attempt: e.attempt,
    route,
    lane: e.lane,
    effectKey,
    outcome,
    forced,
    durationMs: Math.round(durationMs * 100) / 100,
    error,
  };
  // Ids, keys and outcome only: never the body, headers or an effect's output (they may hold secrets).
  const log = ctx.lineLogger ?? ctx.logger;
  if (outcome === 'failed' || outcome === 'timeout') log.warn(a, 'effect attempt');
  else log.info(a, 'effect attempt');
  ctx.onAttempt?.(a);
}

function settle(ctx: ProcessContext, e: ClaimedUnit, o: EventOutcome): EventOutcome {
  const fields = {
    eventId: e.id,
    source: e.source,
    deliveryId: e.deliveryId,
    route: e.route,
    lane: e.lane,
    attempt: e.attempt,
    status: o.status,
    // Every time on a log line is ISO 8601 (UTC), like `time`; durations are numbers in ms.
    nextAttemptAt: o.nextAttemptAt === undefined ? undefined : new Date(o.nextAttemptAt).toISOString(),
    error: o.error,
  };
  const log = ctx.lineLogger ?? ctx.logger;
  if (o.status === 'lost') log.warn(fields, 'event lease lost: another drain took it over; nothing changed');
  else if (o.status === 'dead') log.error(fields, 'event dead');
  else if (o.status === 'retry') log.warn(fields, 'event will be retried');
  else if (o.status === 'interrupted') log.warn(fields, 'event left to its lease: the receiver stopped mid-effect');
  else log.debug(fields, 'event done');
  ctx.onEvent?.(o);
  return o;
}
