import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Config } from '../config/load.js';
import { effectEnvironment } from '../effects/exec.js';
import type { Logger } from '../log.js';
import type { DrainStore } from '../store/drain-types.js';
import { processEvent, type AttemptOutcome, type EventOutcome, type ProcessContext } from './process.js';

export type { AttemptOutcome, EventOutcome };

export interface DrainOptions {
  config: Config;
  store: DrainStore;
  logger: Logger;
  now?: () => number;
  random?: () => number;
  /** Every effect attempt (metrics, tests). */
  onAttempt?: (a: AttemptOutcome) => void;
  /** What became of each claimed event. */
  onEvent?: (e: EventOutcome) => void;
  /** The environment exec effects start from; default: this process's, minus the receiver's secrets. */
  execEnv?: NodeJS.ProcessEnv;
  /** Names this drain's claims (lease owner prefix); default `<host>:<pid>:<random>`. */
  id?: string;
}

export interface Drain {
  /** A new event was committed: look for work now. */
  wake(): void;
  /** Stops claiming; waits up to graceMs for the running effect, then leaves it to its lease. */
  stop(graceMs: number): Promise<void>;
}

/** After a store error (database busy past its timeout, disk full), wait this long before trying again. */
const ERROR_PAUSE_MS = 1000;

/**
 * The serial drain: one event at a time per process. It claims the oldest due event under a
 * lease, runs its effects, settles it, and claims again at once. With nothing due it sleeps
 * until the next retry or lease expiry, at most `drain.pollMs` (so events another process
 * puts back, such as `replay`, are picked up within about that long), and wakes at once on
 * wake(). Claims of a crashed process come back through the claim itself once their lease
 * expires. The loop holds no SQL: every database step is a DrainStore method.
 */
export function startDrain(options: DrainOptions): Drain {
  const { config, store, logger } = options;
  const now = options.now ?? Date.now;
  const id = options.id ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  const leaseMs = config.drain.leaseSeconds * 1000;
  const ctx: ProcessContext = {
    config,
    store,
    logger,
    now,
    random: options.random ?? Math.random,
    leaseMs,
    execEnv: options.execEnv ?? effectEnvironment(config),
    onAttempt: options.onAttempt,
    onEvent: options.onEvent,
  };
  // Aborted when stop()'s grace runs out: the running effect is killed and left to its lease.
  const abort = new AbortController();
  let claims = 0;
  let stopping = false;
  let woken = false;
  let wakeSleeper: (() => void) | undefined;

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

  const idleMs = async (): Promise<number> => {
    const due = await store.nextDueAt();
    return due === undefined ? config.drain.pollMs : Math.min(config.drain.pollMs, Math.max(0, due - now()));
  };

  const run = async () => {
    while (!stopping) {
      woken = false;
      try {
        // A claim owner names one claim, not just the process: a late step of an old claim
        // can never pass for the current one.
        const event = await store.claimEvent(`${id}#${++claims}`, now(), leaseMs);
        if (event === undefined) {
          await sleep(await idleMs());
          continue;
        }
        await processEvent(ctx, event, abort.signal);
      } catch (e) {
        // The event (if any) stays claimed and comes back when its lease expires.
        logger.error({ err: e }, 'drain step failed; retrying shortly');
        await sleep(ERROR_PAUSE_MS);
      }
    }
  };
  const running = run();
  logger.info({ drain: id, leaseSeconds: config.drain.leaseSeconds, pollMs: config.drain.pollMs, routes: config.routes.length }, 'drain started');

  return {
    wake() {
      woken = true;
      wakeSleeper?.();
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
        logger.warn({ graceMs }, 'drain stop: the running effect did not finish within the grace; it was killed and is left to its lease');
      } else {
        logger.info('drain stopped');
      }
    },
  };
}
