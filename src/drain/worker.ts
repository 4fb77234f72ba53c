/**
 * The drain's own thread in `serve`. The event loop of the main thread reads, verifies and
 * answers deliveries; this one claims, runs effects and settles, on its own database
 * connection (see thread.ts for why). It runs on the configuration the main thread
 * loaded (its plain part, ThreadConfig), so both threads run on the same one.
 */
import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { wrapHttpSecrets, type PlainHttpSecrets } from '../effects/http.js';
import { isReceiverError } from '../errors.js';
import { batchedLines, createLogger, type Logger, type LogStyle } from '../log.js';
import { openStore } from '../store/open.js';
import type { Store } from '../store/types.js';
import { startDrain, type AttemptOutcome, type EventOutcome } from './loop.js';
import type { ThreadConfig } from './thread.js';

export interface DrainWorkerInit {
  config: ThreadConfig;
  /** The http effects' header values and signing secrets (see ThreadConfig). */
  httpSecrets: PlainHttpSecrets;
  /** The environment exec effects start from: the main thread's, minus the receiver's secrets. */
  execEnv: NodeJS.ProcessEnv;
  /** [0]: deliveries accepted (main thread adds); [1]: 1 while the drain sleeps, 2 once a wake was posted. */
  signals: SharedArrayBuffer;
  /** SQLite: raised while the ingest thread waits for the write lock; this thread gives way. */
  ingestWaiting?: SharedArrayBuffer | undefined;
  /** How log lines look; the thread's lines go to the main thread's writer ('lines' messages). */
  logStyle: LogStyle;
}

export type ToDrainWorker =
  | { type: 'wake' }
  | { type: 'stop'; graceMs: number }
  /** A reloaded configuration (see Drain.reconfigure); answered with `reconfigured` and the same `seq` once taken in. */
  | ({ type: 'reconfigure'; seq: number } & Pick<DrainWorkerInit, 'config' | 'httpSecrets' | 'execEnv'>);
export type FromDrainWorker =
  | { type: 'started' }
  | { type: 'outcomes'; attempts: AttemptOutcome[]; events: EventOutcome[] }
  | { type: 'lines'; lines: string[] }
  | { type: 'reconfigured'; seq: number }
  | { type: 'stopped' }
  | { type: 'failed'; message: string; hint?: string | undefined };

/** Outcomes for the main thread's metrics go out in batches, at most this often. */
const REPORT_MS = 100;

/**
 * The drain thread's scheduling priority (nice 10): when both want a CPU, the threads that
 * read, verify and store deliveries get it first, and the drain takes what is left. With
 * a CPU free, the drain runs at full speed. Commands an exec effect starts inherit it.
 */
export const DRAIN_NICE = 10;

/** Lowers this thread's priority (Linux: a thread is a task with its own id); elsewhere nothing. */
function lowerPriority(): number | undefined {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isInteger(tid)) return undefined;
    setPriority(tid, Math.max(getPriority(tid), DRAIN_NICE));
    return getPriority(tid);
  } catch {
    return undefined;
  }
}

/** The pause before the drain opens its connection again, as between its steps. */
const OPEN_PAUSE_MS = 1000;

/**
 * The drain's own connection. serve is already answering deliveries when this runs, so a
 * database that is unavailable for a moment (PostgreSQL dropping a connection at start-up)
 * is tried again every second, as the drain does between steps, never the end of serve.
 * Anything else (a bug, a configuration the main thread would have refused) fails the start.
 */
async function openDrainStore(config: ThreadConfig, init: DrainWorkerInit, logger: Logger, flush: () => void): Promise<Store> {
  for (;;) {
    try {
      return await openStore(config.database, { busyTimeoutMs: config.busyTimeoutMs, server: true, drainOnly: true, ingestWaiting: init.ingestWaiting });
    } catch (e) {
      if (!isReceiverError(e, 'unavailable')) throw e;
      logger.warn({ err: e.message }, 'drain: database unavailable at start; trying again in 1 s');
      flush();
      await new Promise((r) => setTimeout(r, OPEN_PAUSE_MS));
    }
  }
}

/** The configuration as the drain runs on it: it reads no source, no metrics or admin token and no catch-up setting (see ThreadConfig). */
function drainConfig(from: Pick<DrainWorkerInit, 'config' | 'httpSecrets'>) {
  return {
    ...from.config,
    sources: new Map(),
    metrics: { enabled: false, token: undefined },
    admin: undefined,
    catchUp: new Map(),
    httpSecrets: wrapHttpSecrets(from.httpSecrets),
  };
}

if (parentPort !== null) {
  const port = parentPort;
  const nice = lowerPriority();
  const init = workerData as DrainWorkerInit;
  const signals = new Int32Array(init.signals);
  const config = drainConfig(init);
  // No write of its own to stderr: its lines go to the main thread's writer, after the
  // delivery lines of the same events (DrainLinesAfterDeliveries) and within its bound.
  const toMain = batchedLines((lines) => port.postMessage({ type: 'lines', lines } satisfies FromDrainWorker));
  const logger = createLogger(config.log.level, { style: init.logStyle, sink: toMain });
  // The attempt and event lines list their fields by hand: no redaction pass (see ProcessContext).
  const lineLogger = createLogger(config.log.level, { redact: false, style: init.logStyle, sink: toMain });

  // Module code runs in the module host, never in this thread: a rejection nobody handled is
  // a bug. The main thread sees this thread fail and exits for systemd to restart it.
  process.on('unhandledRejection', (e: unknown) => {
    // The lines logged so far reach the main thread before it hears of the failure.
    toMain.flush();
    throw e;
  });

  let attempts: AttemptOutcome[] = [];
  let events: EventOutcome[] = [];
  let reportTimer: NodeJS.Timeout | undefined;
  const report = () => {
    clearTimeout(reportTimer);
    reportTimer = undefined;
    if (attempts.length === 0 && events.length === 0) return;
    port.postMessage({ type: 'outcomes', attempts, events } satisfies FromDrainWorker);
    attempts = [];
    events = [];
  };
  const later = () => {
    reportTimer ??= setTimeout(report, REPORT_MS);
  };

  try {
    // No ingest thread of its own, no start-up probe (the main thread did both); commits
    // durable the same way as the main thread's (explicit WAL sync, see wal-sync.ts).
    const store = await openDrainStore(config, init, logger, toMain.flush);
    const drain = startDrain({
      config,
      store,
      logger,
      lineLogger,
      execEnv: init.execEnv,
      onAttempt: (a) => {
        attempts.push(a);
        later();
      },
      onEvent: (e) => {
        events.push(e);
        later();
      },
      idle: {
        generation: () => Atomics.load(signals, 0),
        // Set before the drain sleeps, then it looks at the generation again (see thread.ts).
        sleeping: (on) => void Atomics.store(signals, 1, on ? 1 : 0),
      },
    });
    port.on('message', (m: ToDrainWorker) => {
      if (m.type === 'wake') drain.wake();
      else if (m.type === 'reconfigure')
        void drain.reconfigure(drainConfig(m), m.execEnv).then(() => port.postMessage({ type: 'reconfigured', seq: m.seq } satisfies FromDrainWorker));
      else if (m.type === 'stop') {
        void (async () => {
          await drain.stop(m.graceMs);
          report();
          await store.close().catch((e: unknown) => logger.error({ err: e }, 'drain: closing its database connection failed'));
          toMain.flush();
          port.postMessage({ type: 'stopped' } satisfies FromDrainWorker);
          port.close();
        })();
      }
    });
    logger.debug({ nice }, 'drain thread priority');
    toMain.flush();
    port.postMessage({ type: 'started' } satisfies FromDrainWorker);
  } catch (e) {
    const err = e as { message?: string; hint?: string };
    toMain.flush();
    port.postMessage({ type: 'failed', message: String(err.message ?? e), hint: err.hint } satisfies FromDrainWorker);
    port.close();
  }
}
