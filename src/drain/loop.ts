import { randomBytes } from 'node:crypto';
import { setImmediate as yieldToIo } from 'node:timers/promises';
import { hostname } from 'node:os';
import type { Config } from '../config/load.js';
import type { RouteConfig } from '../config/schema.js';
import { effectEnvironment, minimalEnvironment } from '../effects/exec.js';
import { ModulePool } from '../effects/module-pool.js';
import { isReceiverError } from '../errors.js';
import type { Logger } from '../log.js';
import { laneOf, planRoutes, templateContext } from '../effects/routes.js';
import type { ClaimedUnit, DrainStore, EventPlan, Lease, UnplannedEvent } from '../store/drain-types.js';
import { processUnit, type AttemptOutcome, type EventOutcome, type ProcessContext } from './process.js';

export type { AttemptOutcome, EventOutcome };

export interface DrainOptions {
  config: Config;
  store: DrainStore;
  logger: Logger;
  /** The per-attempt and per-event lines' logger (ProcessContext.lineLogger). */
  lineLogger?: Logger | undefined;
  now?: () => number;
  random?: () => number;
  /** Every effect attempt (metrics, tests). */
  onAttempt?: (a: AttemptOutcome) => void;
  /** What became of each claimed unit. */
  onEvent?: (e: EventOutcome) => void;
  /** What exec effects may draw on; default: this process's minimal variables and those routes list in `effect.env` (effectEnvironment). */
  execEnv?: NodeJS.ProcessEnv;
  /** Names this drain's claims (lease owner prefix); default `<host>:<pid>:<random>`. */
  id?: string;
  /**
   * serve's drain thread: how it learns of new deliveries without a message per delivery.
   * `generation()` counts deliveries accepted so far; `sleeping(true)` is said before the
   * drain sleeps, and the drain then looks at the generation once more (see thread.ts).
   */
  idle?: { generation(): number; sleeping(on: boolean): void } | undefined;
}

export interface Drain {
  /** A new event was committed: look for work now. */
  wake(): void;
  /** Stops claiming; waits up to graceMs for the running effects, then leaves them to their lease. */
  stop(graceMs: number): Promise<void>;
  /**
   * A reloaded configuration (routes, retry, http effects' secrets) and exec effects'
   * environment: taken in before the next event starts; the running one finishes under
   * the configuration it started with. Resolves once the drain took it in: every event it
   * plans from then on is planned under it (a stopped drain plans none).
   */
  reconfigure(config: Config, execEnv: NodeJS.ProcessEnv): Promise<void>;
}

/** After a store error (database busy past its timeout, disk full), wait this long before trying again. */
const ERROR_PAUSE_MS = 1000;

/**
 * Units of one lane claimed in one transaction and then run one at a time (claim ahead):
 * the claim's cost is shared, and the lane stays serial and in order. Small, so that
 * several receivers on one database still share the work.
 */
export const CLAIM_BATCH = 16;

/** Events planned in one transaction. */
const PLAN_BATCH = 64;

/** Plans only: every place is taken. */
const NO_CLAIM = { busyLanes: [], lanes: 0, perLane: 0 };

/** The heartbeat renews every held claim this many times per lease. */
const RENEWALS_PER_LEASE = 3;

/**
 * The drain: lanes side by side, one unit at a time within a lane. It plans stored events
 * into units (one per route that applies, in the route's lane), claims the oldest due units
 * of lanes that are free (no unit running, here or in another process) under a lease, up to
 * `drain.maxConcurrent` lanes at once, and runs each lane's units one after another, each
 * settled on its own. A lane that ends frees its place and the drain claims again at once.
 * While it holds claims, a heartbeat renews them every third of the lease, so an effect may
 * run longer than the lease and a live process's claims are never taken; a dead process's
 * claims come back through the claim itself once their lease expires, or at once when this
 * process can see that their owner died (same machine, see takeBackClaims). With nothing
 * due it sleeps until the next retry or lease expiry, at most `drain.pollMs` (so work
 * another process puts back, such as `replay`, is picked up within about that long), and
 * wakes at once on wake() or when a lane ends. The loop holds no SQL: every database step
 * is a DrainStore method.
 */
export function startDrain(options: DrainOptions): Drain {
  const { config, store, logger } = options;
  const now = options.now ?? Date.now;
  const id = options.id ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  const leaseMs = config.drain.leaseSeconds * 1000;
  const maxConcurrent = config.drain.maxConcurrent;
  const execEnv = options.execEnv ?? effectEnvironment(config);
  const ctx: ProcessContext = {
    config,
    store,
    logger,
    lineLogger: options.lineLogger,
    now,
    random: options.random ?? Math.random,
    leaseMs,
    execEnv,
    // A module host per lane running a module effect, as many as the store can hold
    // transactions open for at once (see DrainStore.moduleTransactionsAtOnce).
    modules: new ModulePool(minimalEnvironment(execEnv), Math.min(maxConcurrent, store.moduleTransactionsAtOnce)),
    onAttempt: options.onAttempt,
    onEvent: options.onEvent,
  };
  // Aborted when stop()'s grace runs out: the running effects are killed and left to their lease.
  const abort = new AbortController();
  let claims = 0;
  let stopping = false;
  let woken = false;
  let wakeSleeper: (() => void) | undefined;
  /** Every claim this drain holds, by unit id: the running units and those claimed ahead. */
  const held = new Map<number, Lease>();
  /** The lanes running here, each with the promise of its end. */
  const lanes = new Map<string, Promise<void>>();
  /** A reloaded configuration, taken in before the next plan and claim (reconfigure), and who waits for that. */
  let next: (Pick<ProcessContext, 'config' | 'execEnv'> & { taken: (() => void)[] }) | undefined;
  const takeNext = () => {
    if (next === undefined) return;
    const { taken, ...reloaded } = next;
    Object.assign(ctx, reloaded);
    next = undefined;
    for (const done of taken) done();
  };

  const heartbeat = setInterval(
    () => {
      if (held.size === 0) return;
      store.renewLeases([...held.values()], now(), leaseMs).catch((e: unknown) => {
        // The next beat tries again; a lease outlives two missed beats.
        logger.warn({ err: e instanceof Error ? e.message : String(e), claims: held.size }, 'drain: could not renew leases; trying again at the next beat');
      });
    },
    Math.max(50, leaseMs / RENEWALS_PER_LEASE),
  );
  heartbeat.unref();

  const wake = () => {
    woken = true;
    wakeSleeper?.();
  };

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      if (woken || stopping) return resolve();
      const timer = setTimeout(done, Math.max(0, ms));
      function done() {
        clearTimeout(timer);
        wakeSleeper = undefined;
        resolve();
      }
      wakeSleeper = done;
    });

  /** How long to sleep when `due` (the next due time outside the running lanes) is not yet. */
  const idleMs = (due: number | undefined): number => {
    // With every place taken, only a lane's end (a wake) frees one.
    if (lanes.size >= maxConcurrent || due === undefined) return config.drain.pollMs;
    return Math.min(config.drain.pollMs, Math.max(0, due - now()));
  };

  /** Runs one lane's claimed units one after another; frees the lane at the end. */
  const runLane = async (units: readonly ClaimedUnit[]) => {
    let started = 0;
    try {
      // The lane's steps may share transactions with the other lanes' (SQLite in serve).
      await store.inGroup(async () => {
        for (const unit of units) {
          // One unit per turn of the event loop: requests that arrived meanwhile are read and
          // answered first. (Every step of a no-op module effect completes without I/O, so
          // without this a backlog would keep the loop on microtasks and HTTP would wait.)
          await yieldToIo();
          if (stopping) break;
          started++;
          await processUnit(ctx, unit, abort.signal);
          held.delete(unit.unitId);
        }
      });
    } catch (e) {
      // The unit that failed midway is left to its lease (no longer renewed here).
      if (isReceiverError(e, 'unavailable'))
        logger.warn({ err: e.message, lane: units[0]?.lane }, 'drain: database unavailable; the lane is left to its lease');
      else logger.error({ err: e, lane: units[0]?.lane }, 'drain step failed; the lane is left to its lease');
    } finally {
      // Claimed ahead but not started (stopping, or a step failed): back to pending at once,
      // for this process's successor or another receiver, instead of after the lease.
      const unstarted = units.slice(started).map((u) => u.lease);
      for (const u of units) held.delete(u.unitId);
      if (unstarted.length > 0) {
        await store.releaseUnits(unstarted, now()).catch((e: unknown) => {
          logger.warn(
            { err: e instanceof Error ? e.message : String(e), units: unstarted.length },
            'drain: could not release unstarted claims; they come back when their lease expires',
          );
        });
      }
      lanes.delete(units[0]!.lane);
      wake();
    }
  };

  const run = async () => {
    await takeBackClaims(store, id, now, logger);
    await store.assignLanes(new Map(config.routes.map((r) => [r.name, laneOf(r)]))).catch((e: unknown) => {
      logger.warn(
        { err: e instanceof Error ? e.message : String(e) },
        "drain: could not move pending work to its route's lane; it runs in the lane it was planned in",
      );
    });
    while (!stopping) {
      woken = false;
      try {
        const seen = options.idle?.generation();
        // A reloaded configuration applies to units started from now on; those running finish
        // under the one they started with (they read it when they start).
        takeNext();
        // A read first: a claim is a write (SQLite's write lock), made only when something is
        // due. Events stored since the last look are planned outside any transaction, their
        // plans stored in the claim's, and their units claimed at once (due on arrival).
        const free = lanes.size < maxConcurrent;
        const work = await store.lookForWork(PLAN_BATCH, free ? [...lanes.keys()] : undefined, now());
        const plans = plansFor(work.events, ctx.config.routes);
        const due = work.due;
        let claimed = 0;
        // New units are worth a claim only in a lane not running here (the others' units wait
        // for their lane's end); retries due elsewhere are looked for at the next turn.
        const claiming = free && (plans.length > 0 ? plans.some((p) => p.units.some((u) => !lanes.has(u.lane))) : due !== undefined && due <= now());
        if (claiming || plans.length > 0) {
          // A claim owner names one claim, not just the process: a late step of an old claim
          // can never pass for the current one.
          const limits = claiming ? { busyLanes: [...lanes.keys()], lanes: maxConcurrent - lanes.size, perLane: CLAIM_BATCH } : NO_CLAIM;
          const units = await store.claimUnits(`${id}#${++claims}`, now(), leaseMs, limits, plans);
          claimed = units.length;
          const byLane = new Map<string, ClaimedUnit[]>();
          for (const u of units) {
            held.set(u.unitId, u.lease);
            const batch = byLane.get(u.lane);
            if (batch === undefined) byLane.set(u.lane, [u]);
            else batch.push(u);
          }
          for (const [lane, batch] of byLane) lanes.set(lane, runLane(batch));
        }
        if (plans.length === 0 && claimed === 0) {
          const idle = options.idle;
          if (idle !== undefined) {
            // Said first, then looked: a delivery accepted after the claim either changed the
            // generation (claim again now) or saw "sleeping" and sends a wake.
            idle.sleeping(true);
            if (idle.generation() !== seen) {
              idle.sleeping(false);
              continue;
            }
          }
          try {
            await sleep(idleMs(due));
          } finally {
            idle?.sleeping(false);
          }
          continue;
        }
        // One turn of the event loop between claims: the lanes just started take their first steps.
        await yieldToIo();
      } catch (e) {
        // Claims not settled stay claimed and come back when their lease expires. A database
        // that is unavailable for a while is one line per try, without a stack.
        if (isReceiverError(e, 'unavailable')) logger.warn({ err: e.message }, 'drain: database unavailable; trying again in 1 s');
        else logger.error({ err: e }, 'drain step failed; retrying shortly');
        await sleep(ERROR_PAUSE_MS);
      }
    }
    await Promise.all(lanes.values());
  };
  // Stopped, the drain plans nothing more: whoever waits for a reload is let go.
  let ended = false;
  const running = run().finally(() => {
    ended = true;
    takeNext();
  });
  logger.info(
    { drain: id, leaseSeconds: config.drain.leaseSeconds, pollMs: config.drain.pollMs, maxConcurrent, routes: config.routes.length },
    'drain started',
  );

  return {
    wake,
    reconfigure(config: Config, execEnv: NodeJS.ProcessEnv) {
      return new Promise<void>((resolve) => {
        next = { config, execEnv, taken: [...(next?.taken ?? []), resolve] };
        if (ended) takeNext();
        // A sleeping loop takes it in at once.
        else wake();
      });
    },
    async stop(graceMs: number) {
      stopping = true;
      wakeSleeper?.();
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), graceMs)));
      const result = await Promise.race([running.then(() => 'stopped' as const), grace]);
      clearTimeout(timer);
      if (result === 'timeout') {
        abort.abort();
        // The running steps give up now; their release of unstarted claims still runs.
        await Promise.race([running, new Promise((r) => setTimeout(r, 1000).unref())]);
        logger.warn({ graceMs }, 'drain stop: the running effect did not finish within the grace; it was killed and is left to its lease');
      } else {
        logger.info('drain stopped');
      }
      clearInterval(heartbeat);
      ctx.modules?.close();
    },
  };
}

/**
 * Plans up to a batch of the events stored since the last look (see plansFor) and stores
 * the plans. Returns how many events it planned.
 */
export async function planStored(store: DrainStore, routes: readonly RouteConfig[], now: number): Promise<number> {
  const events = await store.unplannedEvents(PLAN_BATCH);
  await store.planEvents(plansFor(events, routes), now);
  return events.length;
}

/**
 * Each event's plan: one unit per route that applies (routes, source, event type, filter,
 * as planRoutes decides), in the route's lane.
 */
function plansFor(events: readonly UnplannedEvent[], routes: readonly RouteConfig[]): EventPlan[] {
  return events.map((event) => {
    const { plans: applying, decisions } = planRoutes(routes, event, templateContext(event));
    return { eventId: event.id, units: applying.map((r) => ({ route: r.route.name, lane: laneOf(r.route) })), decisions };
  });
}

/**
 * A restarted `serve` (systemd restarts it at once after a crash) takes back the claims of
 * its dead predecessors on this machine instead of waiting out their lease. Only where every
 * claimant runs on this machine (SQLite), and only for owners named by this host whose
 * process id is not running: a live process, or a reused pid, keeps its claims.
 */
async function takeBackClaims(store: DrainStore, self: string, now: () => number, logger: Logger): Promise<void> {
  if (!store.claimsAreLocal) return;
  const host = hostname();
  try {
    const dead = new Set<string>();
    for (const owner of await store.claimOwners()) {
      const drainId = owner.split('#')[0] ?? owner;
      if (drainId === self) continue;
      const m = /^(.*):(\d+):[0-9a-f]+$/.exec(drainId);
      if (m === null || m[1] !== host || isAlive(Number(m[2]))) continue;
      dead.add(drainId);
    }
    for (const drainId of dead) {
      const n = await store.expireClaims(`${drainId}#`, now());
      if (n > 0) logger.warn({ drain: drainId, claims: n }, 'drain: took back the claims of a receiver process that is no longer running');
    }
  } catch (e) {
    // Not taking them back only means waiting for their lease.
    logger.warn(
      { err: e instanceof Error ? e.message : String(e) },
      'drain: could not look for the claims of dead processes; they come back when their lease expires',
    );
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists, under another user.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
